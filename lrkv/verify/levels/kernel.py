"""The `kernel` level: the decode contract of DESIGN §4 (paper Eqs. 6–7) on a cache drawn
from real projections.

`draw_kernel_inputs` is the float64 draw every kernel contract starts from (the paged and
extend levels scatter or slice the same cache): the last token's query, every slot's
entries, garbage past each length, and the adversarial inputs a Case asks for — queries
×q_scale, head 0's shared and private keys nearly cancelling, finite garbage, and the
strided layouts servers use (shared K/V packed in one tensor, latents head-major).
Oracle paths: the factored decode (the reference) and the materialized one.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ...reference import lrkv as ref
from ...reference.fp8 import PARTS
from ...reference.cache import FactoredCache
from ...reference.lrkv import decode_rope
from ...reference.masking import valid_mask
from ...reference.rope import ExactRope, apply_rope, rope_freqs
from ..bounds import kernel_conditioning
from ..case import Case
from . import Level
from .contract import OUT_LSE_AXES, call_out_lse, oracle_path, out_lse_outputs
from .fp8_inputs import add_outliers, quantize_parts
from .inputs import ContractInputs, fill_garbage, generator, projected_sequence

NEAR_CANCEL_GAIN = 30.0  # head 0's private keys are scaled up by this ...
NEAR_CANCEL_RESIDUAL = 1.0e-3  # ... and the shared key set to −(head 0's private key)·(1 − this) + noise


@dataclass
class KernelInputs(ContractInputs):
    """The arguments of the decode contract (DESIGN §4), all float tensors at one dtype."""

    q: torch.Tensor  # [B, H, d_h]
    cache: FactoredCache  # contiguous [B, T_max, ...]; an fp8 one with its scales
    basis_k: torch.Tensor  # [H, d_h, r]
    basis_v: torch.Tensor  # [H, d_h, r]
    scale: float  # 1/sqrt(d_h)
    rope: ExactRope | None = None
    ARGS = ("q", *PARTS, "basis_k", "basis_v", "lengths")


def strided_layout(inp: KernelInputs) -> KernelInputs:
    """The same values in the layouts real servers use: shared K and V packed side by side in
    one [B, T, 2, d_h] tensor, latents stored head-major [B, H, T, r] (views, not contiguous)."""
    c = inp.cache
    kv = torch.stack((c.shared_k, c.shared_v), dim=2)  # [B, T, 2, d_h]
    head_major = lambda t: t.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)  # noqa: E731
    return replace(inp, cache=replace(c, shared_k=kv[:, :, 0], shared_v=kv[:, :, 1],
                                      latent_k=head_major(c.latent_k), latent_v=head_major(c.latent_v)))


def near_cancel(case: Case, shared_k, latent_k, basis_k):
    """Make head 0's full key k = s + (private) nearly vanish: large terms that cancel."""
    latent_k = latent_k.clone()
    latent_k[:, :, 0] *= NEAR_CANCEL_GAIN
    priv0 = latent_k[:, :, 0] @ basis_k[0].T  # [B, T, d_h]  z_j B_0^T
    if case.spec.rope == "exact":  # the kernel rotates the private key by slot index
        priv0 = apply_rope(priv0, torch.arange(case.t_max)[None, :], rope_freqs(case.spec.head_dim,
                                                                                 case.spec.rope_theta))
    noise = torch.randn(priv0.shape, generator=generator(case, 3), dtype=torch.float64)
    rms = priv0.pow(2).mean(-1, keepdim=True).sqrt()
    return -priv0 + NEAR_CANCEL_RESIDUAL * rms * noise, latent_k


def draw_kernel_inputs(case: Case) -> tuple[KernelInputs, dict[str, torch.Tensor]]:
    """The float64 draw of every kernel-level contract (decode, paged, extend): the contiguous
    cache with garbage past each length, the last token's query, and every slot's entries
    (e['q'] [B, T_max, H, d_h] holds the query of each position, ×q_scale)."""
    weights, _, e = projected_sequence(case)
    B = case.batch
    lengths = torch.tensor(case.lengths, dtype=torch.int32)
    last = (lengths.long() - 1).clamp(min=0)  # the new token is the last valid slot
    q = e["q"][torch.arange(B), last] * case.q_scale  # [B, H, d_h]
    shared_k, latent_k = e["shared_k"], e["latent_k"]
    if case.near_cancel:
        shared_k, latent_k = near_cancel(case, shared_k, latent_k, weights.basis_k)
    valid = valid_mask(lengths, case.t_max)
    cached = {"shared_k": shared_k, "shared_v": e["shared_v"], "latent_k": latent_k, "latent_v": e["latent_v"]}
    if case.spec.qk_norm:
        cached["key_scale"] = e["key_scale"]
    if case.fp8 and case.fp8.outliers:
        cached = add_outliers(case, cached)
    cached = {name: fill_garbage(t, valid, case, 10 + i) for i, (name, t) in enumerate(cached.items())}
    cache = FactoredCache(*(cached[p] for p in PARTS), lengths, cached.get("key_scale"))
    inputs = KernelInputs(q=q, cache=cache, basis_k=weights.basis_k, basis_v=weights.basis_v,
                          scale=case.spec.head_dim ** -0.5, rope=decode_rope(case.spec))
    return inputs, dict(e, q=e["q"] * case.q_scale)


def make_kernel_inputs(case: Case, quantize: bool = True) -> KernelInputs:
    """Kernel-level inputs at the case dtype (drawn in float64 from real projections, then
    rounded; an fp8 case's cache then quantized — quantize=False: the cache at τ it came from)."""
    if case.level != "kernel":
        raise ValueError(f"make_kernel_inputs needs a kernel case, got level {case.level!r}")
    inputs, _ = draw_kernel_inputs(case)
    inputs = inputs.to(case.torch_dtype)
    if case.cache_fp8 and quantize:
        inputs = quantized(case, inputs)
    return strided_layout(inputs) if case.layout == "strided" else inputs


def quantized(case: Case, inp: KernelInputs) -> KernelInputs:
    """The contiguous bundle at τ with its cache stored in the case's fp8 format (fp8_inputs.py)."""
    c = inp.cache
    stored, scales = quantize_parts(case, dict(zip(PARTS, c.parts)), c.lengths)
    return replace(inp, cache=replace(c, scales=scales, **stored))


LEVEL = Level(
    name="kernel", needs="kernel", make_inputs=make_kernel_inputs,
    paths=lambda case: {"factored": oracle_path(ref, "decode_attention"),
                        "materialized": oracle_path(ref, "materialized_decode_attention")},
    consistency=lambda case: [("factored", "materialized")], call=call_out_lse("decode_attention"),
    outputs=lambda case: out_lse_outputs(case.batch, case),
    conditioning=lambda inp, case: kernel_conditioning(inp.q, inp.cache, inp.basis_k, inp.basis_v,
                                                       scale=inp.scale),
    unquantized=lambda case: make_kernel_inputs(case, quantize=False),
    position=OUT_LSE_AXES,
)
