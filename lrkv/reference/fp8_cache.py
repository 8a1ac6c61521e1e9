"""The scales of an FP8 LRKV cache (DESIGN §4, "FP8 caches") and the one dequantize helper.

`CacheScales` is the contract's `cache_scales` argument: the fp8 format of the four cached
parts (one format for all four), the granularity, and one float32 scale per part —
shared K, shared V, latent K, latent V each have their own (shared and latent never share
a scale). Shapes (`lrkv.reference.fp8.scale_shape`; rows, slots = B, T_max or P, page):

    granularity      shared_k / shared_v    latent_k / latent_v
    per_tensor       []                     []
    per_head         []                     [H]
    per_token        [rows, slots]          [rows, slots]
    per_token_head   [rows, slots]          [rows, slots, H]

Per-token scales live beside the slots they scale, like key_scale: a paged cache pages them
with the same page table, and the slots past a sequence's length (garbage) may hold
anything, NaN included. Static scales (per_tensor, per_head) are read for every slot, so
they must be finite and > 0 everywhere, and small enough that the format's largest value
times the scale is a finite float32.

`dequantize_cache` is what every reference path (decode, paged decode, extend, both
factored and materialized) calls on an fp8 cache before its usual math.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from .fp8 import (
    DYNAMIC_GRANULARITIES, FP8_FORMATS, PARTS, SCALE_DTYPE, check_granularity, dequantize, dynamic_scale, fp8_format,
    is_fp8,
    nan_filled, part_granularity, quantize, scale_shape,
)
from .masking import valid_mask

FLOAT32_MAX = float(torch.finfo(torch.float32).max)


@dataclass
class CacheScales:
    format: torch.dtype  # float8_e4m3fn or float8_e5m2: the dtype of all four parts
    granularity: str  # one of fp8.GRANULARITIES; shared parts drop the head axis
    shared_k: torch.Tensor  # float32, [] or [rows, slots]
    shared_v: torch.Tensor  # float32, [] or [rows, slots]
    latent_k: torch.Tensor  # float32, [], [H], [rows, slots] or [rows, slots, H]
    latent_v: torch.Tensor  # float32, as latent_k

    def of(self, part: str) -> torch.Tensor:
        return getattr(self, part)

    def granularity_of(self, part: str) -> str:
        return part_granularity(self.granularity, part)

    @property
    def dynamic(self) -> bool:
        """Whether the scales are per token, written at append (else static, given)."""
        return self.granularity in DYNAMIC_GRANULARITIES

    def tensors(self) -> dict[str, torch.Tensor]:
        return {p: self.of(p) for p in PARTS}

    def clone(self) -> CacheScales:
        return CacheScales(self.format, self.granularity, **{p: t.clone() for p, t in self.tensors().items()})

    def to(self, device) -> CacheScales:
        return CacheScales(self.format, self.granularity, **{p: t.to(device) for p, t in self.tensors().items()})

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors().values())


def scale_name(part: str) -> str:
    """How errors name a part's scale."""
    return f"cache_scales.{part}"


# ----------------------------------------------------------------------------- validation
def check_cache_scales(parts: dict[str, torch.Tensor], cache_scales, *, rows: int, slots: int, heads: int) -> None:
    """Dtypes and shapes of an fp8 cache's parts and scales (values: `check_scale_values`).

    parts: the four cache tensors by name. Without cache_scales no part may be fp8; with it
    all four are `cache_scales.format` and every scale is float32 of its granularity's shape,
    on the parts' device."""
    fp8_parts = [p for p in PARTS if is_fp8(parts[p].dtype)]
    if cache_scales is None:
        if fp8_parts:
            p = fp8_parts[0]
            raise TypeError(f"{p} has dtype {parts[p].dtype}: an fp8 cache needs cache_scales (a CacheScales with "
                            "a float32 scale for each of the four parts)")
        return
    if not isinstance(cache_scales, CacheScales):
        raise TypeError(f"cache_scales must be a CacheScales or None, got {type(cache_scales).__name__}")
    if cache_scales.format not in FP8_FORMATS:
        raise TypeError(f"cache_scales.format must be one of {[str(f) for f in FP8_FORMATS]}, got "
                        f"{cache_scales.format!r}")
    try:
        check_granularity(cache_scales.granularity)
    except ValueError as e:
        raise ValueError(f"cache_scales.{e}") from None
    for p in PARTS:
        if not is_fp8(parts[p].dtype):
            raise TypeError(f"cache_scales was given but {p} has dtype {parts[p].dtype}: scales apply only to an fp8 "
                            f"cache (all four parts {cache_scales.format})")
        if parts[p].dtype != cache_scales.format:
            raise TypeError(f"{p} has dtype {parts[p].dtype} but cache_scales.format is {cache_scales.format}: the "
                            "four cached parts share one fp8 format")
    device = parts["shared_k"].device
    for p in PARTS:
        s = cache_scales.of(p)
        if not isinstance(s, torch.Tensor):
            raise TypeError(f"{scale_name(p)} must be a torch.Tensor, got {type(s).__name__}")
        if s.dtype != SCALE_DTYPE:
            raise TypeError(f"{scale_name(p)} must be float32, got {s.dtype}")
        want = scale_shape(cache_scales.granularity, p, rows=rows, slots=slots, heads=heads)
        if tuple(s.shape) != want:
            raise ValueError(f"{scale_name(p)} ({cache_scales.granularity}) must have shape {list(want)}, got "
                             f"{list(s.shape)}")
        if s.device != device:
            raise ValueError(f"{scale_name(p)} is on {s.device}, the cache on {device}")


def check_scale_values(cache_scales: CacheScales | None, pick) -> None:
    """Every scale a decode reads is finite and > 0. Static scales are read for every slot;
    per-token scales only in valid slots, which `pick` selects (t [rows, slots, ...] → the
    valid entries), as for the cache tensors."""
    if cache_scales is None:
        return
    for p in PARTS:
        s = cache_scales.of(p)
        read = pick(s) if cache_scales.granularity_of(p) in DYNAMIC_GRANULARITIES else s
        if not torch.isfinite(read).all():
            raise ValueError(f"{scale_name(p)} contains NaN or Inf" + (" inside the valid length of some sequence"
                                                                       if cache_scales.dynamic else ""))
        if (read <= 0).any():
            raise ValueError(f"{scale_name(p)} must be > 0 (dequantized = stored × scale), got min "
                             f"{float(read.min()):g}")
        top = fp8_format(cache_scales.format).max_finite
        if read.numel() and float(read.max()) * top > FLOAT32_MAX:  # stored × scale must stay a finite float32
            raise ValueError(f"{scale_name(p)} must be <= {FLOAT32_MAX / top:.4g} (float32 max / "
                             f"{top:g}, the format's largest value), got {float(read.max()):g}: the dequantized "
                             "cache would overflow")


# ----------------------------------------------------------------------------- dequantize
def dequantize_cache(cache_scales: CacheScales | None, dtype: torch.dtype, *parts: torch.Tensor) -> tuple:
    """The four parts (in PARTS order) as `dtype` — exactly for float64, rounded once otherwise —
    or unchanged without cache_scales. Works on contiguous [B, T, ...] and paged [P, page, ...]
    parts alike (per-token scales have the parts' leading axes). Garbage NaN patterns stay NaN."""
    if cache_scales is None:
        return parts
    return tuple(dequantize(t, cache_scales.of(p), cache_scales.granularity_of(p), dtype) for p, t in zip(PARTS, parts))


# ----------------------------------------------------------------------------- quantize
def quantize_cache(parts: dict[str, torch.Tensor], lengths: torch.Tensor, fmt: torch.dtype, granularity: str,
                   ) -> tuple[dict[str, torch.Tensor], CacheScales]:
    """Quantize a whole contiguous cache's four parts [B, T_max, ...] (compute precision, slots
    past lengths[b] garbage): static scales calibrated from the valid slots' amax (it maps to
    max finite), dynamic ones per token (as append would write them); garbage slots get the
    format's NaN pattern and NaN scales. Returns (fp8 parts by name, their CacheScales)."""
    check_granularity(granularity)
    valid = valid_mask(lengths, parts["shared_k"].shape[1])  # [B, T]
    stored, scales = {}, {}
    for p in PARTS:
        x = parts[p]
        m = valid.reshape(*valid.shape, *([1] * (x.dim() - 2)))
        x0 = torch.where(m, x, torch.zeros_like(x))  # garbage must not enter any amax
        g = part_granularity(granularity, p)
        s = dynamic_scale(x0, fmt, granularity, part=p)
        q = quantize(x0, fmt, s, g)
        stored[p] = torch.where(m, q, nan_filled(q.shape, fmt, q.device))
        if g in DYNAMIC_GRANULARITIES:
            s = torch.where(valid.reshape(*valid.shape, *([1] * (s.dim() - 2))), s, torch.full_like(s, float("nan")))
        scales[p] = s
    return stored, CacheScales(fmt, granularity, **scales)


def quantize_append(cache_scales: CacheScales, entries: dict[str, torch.Tensor], rows: torch.Tensor,
                    slots: torch.Tensor, quantizer=quantize) -> dict[str, torch.Tensor]:
    """One token per sequence for an fp8 cache: the parts' entries ([B, d_h], [B, H, r], at any
    compute precision) quantized to cache_scales.format. Static scales are used as given;
    dynamic ones are computed from the entry (amax per token or token-head) and written into
    the scale tensors at [rows, slots]. Returns the fp8 entries (other entries unchanged).
    quantizer: `quantize`'s signature (the harness's quantizer mutant passes a broken one)."""
    out = dict(entries)
    for p in PARTS:
        g = cache_scales.granularity_of(p)
        s = cache_scales.of(p)
        if g in DYNAMIC_GRANULARITIES:
            # per token: reduce the entry's feature axes (the token axis is the batch here)
            new = dynamic_scale(entries[p], cache_scales.format, cache_scales.granularity, part=p)  # [B] or [B, H]
            s[rows, slots] = new
            s = new
        out[p] = quantizer(entries[p], cache_scales.format, s, g)
    return out


__all__ = ["CacheScales", "check_cache_scales", "check_scale_values", "dequantize_cache", "quantize_append",
           "quantize_cache", "scale_name"]
