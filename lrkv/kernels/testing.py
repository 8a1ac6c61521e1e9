"""Test support for the kernels, kept apart from them (after flashinfer's test_helpers):
where to run, adversarial inputs, and the DESIGN §6 tolerance rule.

    with kernel_context():           GPU natively when there is one, else the interpreter
        out, lse = decode_attention(...)

Inputs are drawn in float64, rounded to the kernel dtype first, and the float64 reference
runs on the rounded values (DESIGN §6), so the comparison measures the kernel, not the
rounding of its inputs.
"""

from __future__ import annotations

import contextlib
import math
from dataclasses import dataclass

import torch

from ..reference.lrkv import decode_attention as reference_decode
from ..reference.lrkv import materialized_decode_attention
from . import runtime

K_MAX = 2.0  # DESIGN §6: max|err| <= K_MAX · max|err_base| + atol
K_MEAN = 1.5  # DESIGN §6: mean|err| <= K_MEAN · mean|err_base| + atol

# Tight bounds for the float64 / float32 kernels against the float64 reference, relative to
# the output's scale (max |ref| + 1). float64: reductions of <= a few hundred terms lose a
# handful of ulps; float32: ~30 ulps, room for the q x 100 case's large logits.
TIGHT_RTOL = {torch.float64: 1e-12, torch.float32: 4e-6}


def kernel_device() -> torch.device:
    return torch.device("cuda") if runtime.mode()[0] == "cuda" else torch.device("cpu")


@contextlib.contextmanager
def kernel_context():
    """Run the block with the kernels live: natively on CUDA, else in Triton's interpreter
    (restored afterwards, so tests that expect the fallback are unaffected)."""
    if torch.cuda.is_available() and runtime.mode()[0] == "cuda":
        yield
        return
    with runtime.interpreter():
        assert runtime.mode()[0] == "interpreter"  # never the fallback: that is the reference itself
        yield


# ----------------------------------------------------------------------------- inputs
@dataclass
class DecodeCase:
    """Kernel-level inputs (at the kernel dtype) plus the float64 reference on them."""

    inputs: dict  # q, shared_k, ..., lengths, key_scale (or None)
    scale: float
    rope: object  # ExactRope | None

    def args(self) -> list:
        i = self.inputs
        return [i[k] for k in ("q", "shared_k", "shared_v", "latent_k", "latent_v", "basis_k", "basis_v",
                               "lengths")]

    def reference(self) -> tuple[torch.Tensor, torch.Tensor]:
        f = lambda t: None if t is None else (t.double() if t.is_floating_point() else t)  # noqa: E731
        out, lse = reference_decode(*[f(a) for a in self.args()], scale=self.scale,
                                    key_scale=f(self.inputs.get("key_scale")), rope=self.rope, check=False)
        return out, lse

    def baseline(self) -> tuple[torch.Tensor, torch.Tensor]:
        """err_base's path: the materialized decode at the kernel dtype (different op order)."""
        return materialized_decode_attention(*self.args(), scale=self.scale,
                                             key_scale=self.inputs.get("key_scale"), rope=self.rope,
                                             check=False)


def make_case(
    B=3, T=40, H=5, d_h=32, r=7, *, lengths=None, dtype=torch.float64, seed=0, key_scale=False,
    rope=None, q_mult=1.0, cancel=False, garbage=float("nan"), device=None,
) -> DecodeCase:
    """Random inputs with `garbage` (NaN by default) in every slot past each length.

    cancel=True makes each shared key nearly cancel head 0's private key (s_j ≈ −z_j B_0^T),
    so the summed logits are small differences of large terms (after FlashMLA's tests).
    """
    g = torch.Generator().manual_seed(seed)
    rn = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    device = kernel_device() if device is None else device
    lengths = torch.tensor(lengths if lengths is not None else [T] * B, dtype=torch.int32)
    q = rn(B, H, d_h) * q_mult
    sk, sv = rn(B, T, d_h), rn(B, T, d_h)
    lk, lv = rn(B, T, H, r), rn(B, T, H, r)
    bk, bv = rn(H, d_h, r) * r ** -0.5, rn(H, d_h, r) * r ** -0.5
    if cancel:
        sk = -torch.einsum("btr,dr->btd", lk[:, :, 0], bk[0]) + 1e-3 * rn(B, T, d_h)
        lk = lk * 8.0  # large private terms: the cancellation is between big numbers
        sk = sk * 8.0
    ks = (rn(B, T, H).abs() * 0.3 + 0.7) if key_scale else None
    valid = torch.arange(T)[None, :] < lengths[:, None]

    def fill(t):
        m = valid.reshape(B, T, *([1] * (t.dim() - 2)))
        return torch.where(m, t, garbage)

    inputs = dict(q=q, shared_k=fill(sk), shared_v=fill(sv), latent_k=fill(lk), latent_v=fill(lv),
                  basis_k=bk, basis_v=bv, key_scale=None if ks is None else fill(ks))
    inputs = {k: (None if v is None else v.to(dtype).to(device)) for k, v in inputs.items()}
    inputs["lengths"] = lengths.to(device)
    return DecodeCase(inputs, d_h ** -0.5, rope)


# ----------------------------------------------------------------------------- the rule
def nonfinite_match(a: torch.Tensor, b: torch.Tensor) -> bool:
    """NaN, +inf and -inf sit at exactly the same positions in a and b."""
    return all(torch.equal(f(a), f(b)) for f in (torch.isnan, torch.isposinf, torch.isneginf))


def fa3_atol(ref: torch.Tensor, dtype: torch.dtype) -> float:
    """Rounding error of arithmetic at the output's magnitude: 2·max|(y+0.3)−0.3−y| in τ."""
    y = torch.nan_to_num(ref, nan=0.0, posinf=0.0, neginf=0.0).to(dtype)
    return 2 * float(((y + 0.3) - 0.3 - y).abs().max()) if y.numel() else 0.0


@dataclass(frozen=True)
class RuleResult:
    passed: bool
    max_err: float
    mean_err: float
    max_base: float
    mean_base: float
    atol: float
    nonfinite_match: bool

    def __str__(self) -> str:
        return (f"{'PASS' if self.passed else 'FAIL'}: max|err|={self.max_err:.3g} (bound "
                f"{K_MAX * self.max_base + self.atol:.3g}), mean|err|={self.mean_err:.3g} (bound "
                f"{K_MEAN * self.mean_base + self.atol:.3g}), nonfinite_match={self.nonfinite_match}")


def tolerance_rule(out: torch.Tensor, ref: torch.Tensor, base: torch.Tensor, dtype: torch.dtype) -> RuleResult:
    """DESIGN §6 on one output: err vs err_base, plus atol(τ), plus non-finite positions."""
    out, ref, base = out.double().cpu(), ref.double().cpu(), base.double().cpu()
    fin_o, fin_r = torch.isfinite(out), torch.isfinite(ref)
    match = nonfinite_match(out, ref)
    both = fin_o & fin_r & torch.isfinite(base)
    if not both.any():
        return RuleResult(match, 0.0, 0.0, 0.0, 0.0, 0.0, match)
    err = (out - ref)[both].abs()
    err_b = (base - ref)[both].abs()
    atol = fa3_atol(ref[both], dtype)
    ok = (match and float(err.max()) <= K_MAX * float(err_b.max()) + atol
          and float(err.mean()) <= K_MEAN * float(err_b.mean()) + atol)
    return RuleResult(ok, float(err.max()), float(err.mean()), float(err_b.max()), float(err_b.mean()), atol,
                      match)


def tight_check(out: torch.Tensor, ref: torch.Tensor, dtype: torch.dtype) -> tuple[bool, float, float]:
    """float64/float32 kernels: max|err| <= TIGHT_RTOL · (max|ref| + 1), non-finite positions equal."""
    out, ref = out.double().cpu(), ref.double().cpu()
    fin_r = torch.isfinite(ref)
    if not nonfinite_match(out, ref):  # e.g. the -inf lse of an empty sequence
        return False, math.inf, 0.0
    if not fin_r.any():
        return True, 0.0, 0.0
    err = float((out - ref)[fin_r].abs().max())
    bound = TIGHT_RTOL[dtype] * (float(ref[fin_r].abs().max()) + 1.0)
    return err <= bound, err, bound


def run_decode(case: DecodeCase, **launch):
    """The kernel's contiguous decode on a case (launch options passed through)."""
    from .decode import decode_attention

    return decode_attention(*case.args(), scale=case.scale, key_scale=case.inputs["key_scale"], rope=case.rope,
                            **launch)


def assert_tight(case: DecodeCase, dtype: torch.dtype, **launch) -> tuple[torch.Tensor, torch.Tensor]:
    """Run the kernel and hold out and lse to the tight float64/float32 bound; return them."""
    out, lse = run_decode(case, **launch)
    ref_out, ref_lse = case.reference()
    for name, a, b in (("out", out, ref_out), ("lse", lse, ref_lse)):
        ok, err, bound = tight_check(a, b, dtype)
        assert ok, f"{name}: max|err| {err:.3g} > {bound:.3g} ({dtype}, {launch})"
    return out, lse
