"""FP8 storage formats and scales for LRKV caches (DESIGN §4, "FP8 caches").

Two formats, both IEEE-like with a sign bit, RNE rounding and a NaN pattern:
    float8_e4m3fn   4 exponent, 3 mantissa bits; max finite 448; no inf; NaN 0x7F / 0xFF
    float8_e5m2     5 exponent, 2 mantissa bits; max finite 57344; ±inf; NaN e.g. 0x7F

A cached part is stored as fp8 with a float32 scale; its value is

    dequantized = float(stored) × scale                                   (exact in float64)

and quantizing is the inverse, saturating: stored = RNE(clamp(x / scale, ±max finite)).

Scale granularities (the axes a scale covers; a part's scale has the part's shape with the
reduced axes dropped):
    per_tensor       one scalar []                            static (calibrated, given)
    per_head         latents: [H]; shared parts: per tensor   static
    per_token        [rows, T] (rows, T = B, T_max or P, page) dynamic, written at append
    per_token_head   latents: [rows, T, H]; shared: per token dynamic (FlashMLA style)
Shared parts (x W_shared, one copy for all heads) have no head axis, so a granularity that
names heads drops that axis for them: per_head → per_tensor, per_token_head → per_token
(`part_granularity`).

Broadcast rule (`expand_scale`): a per_head scale [H] is right-aligned onto the part's
[..., H, r] (it becomes [H, 1]); every other scale is left-aligned onto the part's leading
axes (trailing 1s are appended): [] as is, [B, T] → [B, T, 1] or [B, T, 1, 1],
[B, T, H] → [B, T, H, 1]. The same rule serves one appended token ([B, d_h], [B, H, r]) with
scales [B] / [B, H].

Why this module rounds itself: torch's float64 → fp8 cast rounds through float32 first, a
double rounding that misplaces values just past a tie (1.0625 + 1e-12 becomes 1.0, not
1.125, in e4m3fn). `quantize` rounds onto the fp8 grid in float64 with `torch.round` (half
to even) and casts only exactly representable values. For float32 (or narrower) inputs and
float32 scales the float64 quotient x / scale is itself exact enough that this is RNE of
the exact quotient (the quotient of two 24-bit numbers is never within 2^-53 of a tie
without being on it); for float64 inputs it is RNE of the float64 quotient.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..spec.fp8_scales import (  # noqa: F401  (the names live with the accounting; re-exported here)
    DYNAMIC_GRANULARITIES, GRANULARITIES, PER_HEAD, PER_TENSOR, PER_TOKEN, PER_TOKEN_HEAD, STATIC_GRANULARITIES,
)

E4M3 = torch.float8_e4m3fn
E5M2 = torch.float8_e5m2
FP8_FORMATS: tuple[torch.dtype, ...] = (E4M3, E5M2)


SHARED_PARTS: tuple[str, ...] = ("shared_k", "shared_v")
LATENT_PARTS: tuple[str, ...] = ("latent_k", "latent_v")
PARTS: tuple[str, ...] = SHARED_PARTS + LATENT_PARTS  # each has its own scale, never shared

SCALE_DTYPE = torch.float32
# A dynamic scale of an all-zero row: any positive scale stores zeros exactly; 1 keeps the
# scale tensor free of special values (the contract requires scale > 0 and finite).
ZERO_AMAX_SCALE = 1.0


@dataclass(frozen=True)
class Fp8Format:
    dtype: torch.dtype
    mantissa_bits: int  # explicit fraction bits
    min_exponent: int  # exponent of the smallest normal binade; subnormals share its ulp
    max_finite: float  # torch.finfo(dtype).max
    nan_bits: int  # a NaN bit pattern (garbage fill)


def fp8_format(fmt: torch.dtype) -> Fp8Format:
    """The format's constants; a TypeError for anything but float8_e4m3fn / float8_e5m2."""
    if fmt not in FP8_FORMATS:
        raise TypeError(f"fp8 format must be one of {[str(f) for f in FP8_FORMATS]}, got {fmt!r}")
    info = torch.finfo(fmt)
    mantissa = {E4M3: 3, E5M2: 2}[fmt]
    min_exp = int(torch.tensor(info.smallest_normal, dtype=torch.float64).log2())
    return Fp8Format(fmt, mantissa, min_exp, float(info.max), 0x7F)


def is_fp8(dtype: torch.dtype) -> bool:
    return dtype in FP8_FORMATS


def nan_filled(shape, fmt: torch.dtype, device=None) -> torch.Tensor:
    """An fp8 tensor of the format's NaN bit pattern (written as bits: garbage slots)."""
    bits = fp8_format(fmt).nan_bits
    return torch.full(tuple(shape), bits, dtype=torch.uint8, device=device).view(fmt)


def as_checkable(t: torch.Tensor) -> torch.Tensor:
    """fp8 values as float32 (exact) so that isfinite/where/comparisons work on them."""
    return t.to(torch.float32) if is_fp8(t.dtype) else t


# ----------------------------------------------------------------------------- granularity
def check_granularity(granularity) -> str:
    if granularity not in GRANULARITIES:
        raise ValueError(f"granularity must be one of {GRANULARITIES}, got {granularity!r}")
    return granularity


def part_granularity(granularity: str, part: str) -> str:
    """The granularity a part's scale has: shared parts have no head axis to scale by."""
    check_granularity(granularity)
    if part not in PARTS:
        raise ValueError(f"part must be one of {PARTS}, got {part!r}")
    if part in SHARED_PARTS:
        return {PER_HEAD: PER_TENSOR, PER_TOKEN_HEAD: PER_TOKEN}.get(granularity, granularity)
    return granularity


def scale_shape(granularity: str, part: str, *, rows: int, slots: int, heads: int) -> tuple[int, ...]:
    """Shape of a cache part's scale: rows, slots = B, T_max (contiguous) or P, page (paged)."""
    g = part_granularity(granularity, part)
    return {PER_TENSOR: (), PER_HEAD: (heads,), PER_TOKEN: (rows, slots),
            PER_TOKEN_HEAD: (rows, slots, heads)}[g]


def expand_scale(scale: torch.Tensor, granularity: str, ndim: int) -> torch.Tensor:
    """The module's one broadcast rule: per_head [H] right-aligned onto [..., H, r] ([H, 1]);
    any other scale left-aligned onto the leading axes (trailing 1s up to `ndim` axes)."""
    check_granularity(granularity)
    if granularity == PER_TENSOR:
        return scale
    if granularity == PER_HEAD:
        return scale.reshape(*scale.shape, 1)
    return scale.reshape(*scale.shape, *([1] * (ndim - scale.dim())))


# ----------------------------------------------------------------------------- quantize
def round_to_grid(y: torch.Tensor, fmt: torch.dtype) -> torch.Tensor:
    """Saturating RNE of float64 values onto the fp8 grid, in float64 (exact fp8 values).

    Clamp to ±max finite first (saturation: no NaN or inf from an outlier), then round at each
    value's ulp 2^(e − mantissa_bits), e its binade's exponent floored at the smallest normal
    binade (subnormals share that ulp). The scaling by a power of two is exact, and
    torch.round rounds half to even."""
    f = fp8_format(fmt)
    y = y.to(torch.float64).clamp(-f.max_finite, f.max_finite)
    _, e = torch.frexp(y)  # |y| = m · 2^e, m in [0.5, 1): the binade's exponent is e − 1
    ulp = torch.exp2((e - 1).clamp_min(f.min_exponent).to(torch.float64) - f.mantissa_bits)
    return torch.round(y / ulp) * ulp  # still within ±max: max finite lies on the grid


def quantize(x: torch.Tensor, fmt: torch.dtype, scale: torch.Tensor | float = 1.0,
             granularity: str = PER_TENSOR) -> torch.Tensor:
    """stored = RNE(clamp(x / scale, ±max finite)) as `fmt` — saturating, never NaN for finite x.

    x is any float tensor (a cache part [.., d_h] / [.., H, r], or one token's entries);
    scale a float32 tensor of the part's granularity (broadcast by `expand_scale`)."""
    if not isinstance(x, torch.Tensor) or not x.is_floating_point() or is_fp8(x.dtype):
        raise TypeError(f"quantize takes a float tensor at compute precision, got "
                        f"{x.dtype if isinstance(x, torch.Tensor) else type(x).__name__}")
    s = torch.as_tensor(scale, dtype=torch.float64, device=x.device)
    y = x.to(torch.float64) / expand_scale(s, granularity, x.dim())
    return round_to_grid(y, fmt).to(fmt)  # exact values: the cast does not round


def dequantize(stored: torch.Tensor, scale: torch.Tensor, granularity: str = PER_TENSOR,
               dtype: torch.dtype = torch.float64) -> torch.Tensor:
    """float(stored) × scale, computed in float64 — exact there (an fp8 value has at most 4
    significant bits, a float32 scale 24: the product fits 53) — then rounded once to `dtype`.
    NaN patterns (garbage slots) stay NaN."""
    if not is_fp8(stored.dtype):
        raise TypeError(f"dequantize takes an fp8 tensor, got {stored.dtype}")
    s = expand_scale(scale.to(torch.float64), granularity, stored.dim())
    return (stored.to(torch.float64) * s).to(dtype)


def reduced_dims(granularity: str, part: str, ndim: int) -> tuple[int, ...]:
    """The axes a part's scale does NOT cover (amax is taken over them): a part is
    [..., d_h] (shared) or [..., H, r] (latent), with any leading token axes."""
    g = part_granularity(granularity, part)
    inner = 1 if part in SHARED_PARTS else 2  # feature axes of one token
    if g == PER_TENSOR:
        return tuple(range(ndim))
    if g == PER_HEAD:
        return tuple(d for d in range(ndim) if d != ndim - 2)
    if g == PER_TOKEN:
        return tuple(range(ndim - inner, ndim))
    return (ndim - 1,)  # per_token_head: over r


def dynamic_scale(x: torch.Tensor, fmt: torch.dtype, granularity: str, *, part: str) -> torch.Tensor:
    """amax / max_finite over the axes the granularity reduces (`reduced_dims`), in float32.

    The amax element then quantizes to ±max finite (saturating nothing). An all-zero or empty
    group (a rank-0 latent) gets ZERO_AMAX_SCALE (1: zeros are stored exactly under any scale); a nonzero amax so
    small that amax/max underflows float32 gets float32's smallest normal instead (still
    amax/scale <= max finite)."""
    if not x.is_floating_point() or is_fp8(x.dtype):
        raise TypeError(f"dynamic_scale takes a float tensor at compute precision, got {x.dtype}")
    dims = reduced_dims(granularity, part, x.dim())
    x64 = x.to(torch.float64).abs()
    if any(x.shape[d] == 0 for d in dims):  # an empty group (rank 0 latents): amax 0, as all zeros
        amax = x64.sum(dim=dims)
    else:
        amax = x64.amax(dim=dims) if dims else x64
    s = (amax / fp8_format(fmt).max_finite).to(SCALE_DTYPE)
    tiny = torch.finfo(SCALE_DTYPE).smallest_normal
    s = torch.where(amax == 0, torch.ones_like(s) * ZERO_AMAX_SCALE, s.clamp_min(tiny))
    return s


# ----------------------------------------------------------------------------- fp8 compute
# FA3-style kernels also round what meets the cache: q to e4m3 with one scale per (row, head)
# (FlashAttention-3's q_descale), and the softmax weights p = exp(s − max) ∈ [0, 1] to e4m3
# before their products with the values (its P in fp8; the normaliser sums the unrounded p).
# A verify case names which (Case.fp8_compute); the reference applies them on request, so the
# rule's err_base is that algorithm's error, and never the plain path's.
FP8_COMPUTE: tuple[str, ...] = ("", "p", "q", "qp")
FP8_COMPUTE_FORMAT = E4M3


def check_fp8_compute(fp8_compute) -> str:
    if not isinstance(fp8_compute, str) or fp8_compute not in FP8_COMPUTE:
        raise ValueError(f"fp8_compute must be one of {list(FP8_COMPUTE)} (q and/or p rounded to e4m3), "
                         f"got {fp8_compute!r}")
    return fp8_compute


def round_query(q: torch.Tensor, dtype: torch.dtype | None = None) -> torch.Tensor:
    """q [.., H, d_h] through e4m3 with a float32 scale per (row, head) — amax / 448, 1 for
    an all-zero row — and back, at `dtype` (default q's): the decode asks for its accumulation
    dtype, as an FA3-style kernel applies q's descale to its fp32 scores."""
    amax = q.to(torch.float64).abs().amax(dim=-1, keepdim=True)  # [.., H, 1]
    s = torch.where(amax > 0, amax / fp8_format(FP8_COMPUTE_FORMAT).max_finite, ZERO_AMAX_SCALE)
    s = s.to(SCALE_DTYPE).clamp_min(torch.finfo(SCALE_DTYPE).tiny)
    return dequantize(quantize(q, FP8_COMPUTE_FORMAT, s), s, dtype=dtype or q.dtype)


# A fused kernel rounds exp(s − m_run) with m_run its RUNNING max, below the final one by a
# tile-dependent amount: the same weight is rounded at another place of the fp8 grid. Phase k
# of `rounded_weights` stands for one such schedule: slot t's weight is rounded as
# p · 2^(φ_t) with φ_t = ((5t + 3k) mod 8) / 8 (phase 0: the final max, φ = 0), then scaled
# back; err_base takes the worst of FP8_WEIGHT_PHASES phases, so a kernel is not failed for
# where its running max happened to sit.
FP8_WEIGHT_PHASES = 6


def round_weights(p: torch.Tensor) -> torch.Tensor:
    """Softmax weights p ∈ [0, 1] through e4m3 (no scale) and back, at p's dtype."""
    return dequantize(quantize(p, FP8_COMPUTE_FORMAT), torch.tensor(1.0), dtype=p.dtype)


def rounded_weights(logits: torch.Tensor, valid: torch.Tensor, phase: int = 0) -> torch.Tensor:
    """The softmax weights of scaled logits [.., T] (valid: broadcastable mask) with
    p = exp(s − max) rounded to e4m3 (no scale: p ≤ 1; `phase` > 0: at the grid offsets
    above) and normalised by Σ p unrounded; empty rows give 0. At the logits' dtype."""
    x = torch.where(valid, logits, float("-inf"))
    m = x.amax(dim=-1, keepdim=True)
    p = torch.where(valid & (m > float("-inf")), torch.exp(x - m), 0.0)
    l = p.sum(dim=-1, keepdim=True)
    t = torch.arange(p.shape[-1], device=p.device)
    shift = torch.exp2(((5 * t + 3 * phase) % 8) / 8.0 if phase else t * 0.0).to(torch.float64)  # [T]  2^φ_t
    p8 = round_weights(p.to(torch.float64) * shift) / shift
    return torch.where(l > 0, p8.to(p.dtype) / torch.where(l > 0, l, 1.0), 0.0)
