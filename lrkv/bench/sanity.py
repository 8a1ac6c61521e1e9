"""Before a user's backend is timed: is its output obviously wrong?

A timing of a kernel that drops the private term or uses the wrong scale is a number about
a different computation; the table must not show it as LRKV. This is not verification
(`lrkv verify` does that, with the tolerance rule of DESIGN §6): one small batch per
(spec, device, dtype), drawn like the bench's inputs, with ragged lengths, through the
backend at the row's dtype and through the float64 reference, compared with a bound loose
enough that any correct kernel passes it by orders of magnitude.
"""

from __future__ import annotations

import torch

from ..reference.lrkv import decode_attention as reference_decode
from .families import make_inputs

class WrongOutput(ValueError):
    """What is wrong with a backend's output (its shape, its non-finite positions, its error)."""


SANITY_T = 37  # cache slots: not a multiple of a tile or split size
SANITY_LENGTHS = (37, 20, 1)  # full, ragged and a single token
# max |backend − reference| / (1 + max |reference|) above this is "obviously wrong": about
# 100x the rounding of a careful kernel at each dtype (16-bit: 2^-8 relative per element).
SANITY_BOUND = {torch.float64: 1e-6, torch.float32: 1e-3, torch.float16: 5e-2, torch.bfloat16: 1e-1}


def check_output(call, spec, device: str, dtype: torch.dtype) -> None:
    """Raise WrongOutput saying what is wrong when call(*inputs, scale=...) disagrees with the
    float64 reference on a small batch; return None when it is plausibly right."""
    inp = make_inputs(spec, len(SANITY_LENGTHS), SANITY_T, dtype=dtype, device=device, seed=1,
                      lengths=list(SANITY_LENGTHS))
    names = ("q", "shared_k", "shared_v", "latent_k", "latent_v", "basis_k", "basis_v", "lengths")
    args = [inp[n] for n in names]
    got = call(*args, scale=spec.scale)
    if not (isinstance(got, tuple) and len(got) == 2):
        raise WrongOutput(f"decode_attention returned {type(got).__name__}, not the contract's (out, lse)")
    wide = [a.double() if a.is_floating_point() else a for a in args]
    ref_out, ref_lse = reference_decode(*wide, scale=spec.scale, check=False)
    for what, x, ref in (("out", got[0], ref_out), ("lse", got[1], ref_lse)):
        if not isinstance(x, torch.Tensor) or tuple(x.shape) != tuple(ref.shape):
            shape = tuple(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
            raise WrongOutput(f"{what} has shape {shape}, the contract's is {tuple(ref.shape)}")
        x = x.detach().double().cpu()
        ref = ref.cpu()
        finite = torch.isfinite(ref)  # lse is -inf for an empty sequence; none here, but say so exactly
        if not torch.equal(torch.isfinite(x), finite):
            raise WrongOutput(f"{what} is non-finite where the float64 reference is finite (or the reverse)")
        if not finite.any():
            continue
        err = float((x - ref)[finite].abs().max())
        rel = err / (1.0 + float(ref[finite].abs().max()))
        bound = SANITY_BOUND.get(dtype, 1e-1)
        if not rel <= bound:
            raise WrongOutput(f"{what} is wrong: max error {err:.3g} against the float64 reference "
                             f"({rel:.3g} of its scale, bound {bound:g}) — not timed; run `lrkv verify` on it")
