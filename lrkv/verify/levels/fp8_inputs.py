"""FP8 caches at the kernel levels (DESIGN §4 "FP8 caches"): how a case's cache is shaped
for fp8, quantized, filled with garbage, and read back for the oracle's bounds.

A case with an fp8 cache (`case.fp8`) draws its cache as every kernel case does (float64, real
projections — through weights that give the four parts and the heads ranges 2–16× apart:
`inputs.fp8_ranges`), then:

  1. (outliers) scales one cached token per sequence and one channel of every part;
  2. rounds it to τ, as the server's projection writes it, and quantizes it with
     `lrkv.reference.fp8_cache.quantize_cache` (static scales calibrated from the valid
     slots' amax, dynamic ones per token) — saturating, so an outlier never becomes NaN;
  3. fills every slot past a length with the format's NaN pattern (NaN scales beside
     dynamic ones), or with saturated finite fp8 junk and huge finite scales for a case with
     `nan_garbage=False` (`quantize_parts`).

`outliers` (any kernel case) scales one token per sequence and one channel of every part by
OUTLIER_GAIN: the values a per-tensor scale is calibrated on. At the layer level the appended
token itself is the outlier (LAYER_OUTLIER_GAIN): beyond the static scales' range, so the
backend's quantizer must saturate it.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ...reference.cache import FactoredCache
from ...reference.fp8 import DYNAMIC_GRANULARITIES, PARTS, is_fp8, nan_filled, round_to_grid
from ...reference.fp8_cache import CacheScales, quantize_cache
from ...reference.masking import valid_mask
from ...spec import as_dtype
from ..case import Case
from .inputs import FINITE_GARBAGE, generator

OUTLIER_GAIN = 16.0  # an outlier token / channel is this much larger than its neighbours
LAYER_OUTLIER_GAIN = 4.0  # the layer step's appended token: 4× the activations its cache was calibrated on
SCALE_GARBAGE = FINITE_GARBAGE  # finite garbage beside dynamic scales: reading it shows


def add_outliers(case: Case, cached: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """One token per sequence (slot (7b + 3) mod length) and channel 1 of every part ×OUTLIER_GAIN."""
    out = {}
    for name, t in cached.items():
        if name not in PARTS:
            out[name] = t
            continue
        t = t.clone()
        if t.shape[-1]:  # (rank 0: no latent channel)
            t[..., min(1, t.shape[-1] - 1)] *= OUTLIER_GAIN  # [B, T, d_h] or [B, T, H, r]: one channel
        for b, n in enumerate(case.lengths):
            if n:
                t[b, (7 * b + 3) % n] *= OUTLIER_GAIN
        out[name] = t
    return out


def _finite_junk(case: Case, like: torch.Tensor, stream: int) -> torch.Tensor:
    junk = FINITE_GARBAGE * torch.randn(like.shape, generator=generator(case, stream), dtype=torch.float64)
    return round_to_grid(junk, like.dtype).to(like.dtype)  # saturated: ± max finite mostly


def quantize_parts(case: Case, parts: dict[str, torch.Tensor], lengths: torch.Tensor,
                   ) -> tuple[dict[str, torch.Tensor], CacheScales]:
    """The four parts [B, T_max, ...] at τ as the case's fp8 cache, with its garbage."""
    fmt = as_dtype(case.fp8.format)
    stored, scales = quantize_cache(parts, lengths, fmt, case.fp8.granularity)
    if case.nan_garbage:
        return stored, scales
    valid = valid_mask(lengths, case.t_max)  # [B, T]
    for i, p in enumerate(PARTS):
        m = valid.reshape(*valid.shape, *([1] * (stored[p].dim() - 2)))
        stored[p] = torch.where(m, stored[p], _finite_junk(case, stored[p], 60 + i))
        s = scales.of(p)
        if scales.granularity_of(p) in DYNAMIC_GRANULARITIES:
            junk = SCALE_GARBAGE * torch.rand(s.shape, generator=generator(case, 64 + i)).to(s.dtype)
            setattr(scales, p, torch.where(valid.reshape(*valid.shape, *([1] * (s.dim() - 2))), s, junk))
    return stored, scales


def fp8_pool(case: Case, shape: tuple[int, ...], fmt: torch.dtype, stream: int) -> torch.Tensor:
    """Pages nobody has written, in an fp8 format: NaN patterns, or saturated finite junk."""
    pool = nan_filled(shape, fmt)
    return pool if case.nan_garbage else _finite_junk(case, pool, stream)


def per_token_scales(cache_scales: CacheScales | None) -> dict[str, torch.Tensor]:
    """The dynamic (per-token) scale tensors [B, T, ...] by 'cache_scales.<part>': they live
    beside the slots (a batch selection or a page table applies to them too)."""
    if cache_scales is None:
        return {}
    return {f"cache_scales.{p}": cache_scales.of(p) for p in PARTS
            if cache_scales.granularity_of(p) in DYNAMIC_GRANULARITIES}


def with_scales(cache_scales: CacheScales, tensors: dict[str, torch.Tensor]) -> CacheScales:
    """cache_scales with the per-token tensors replaced by tensors['cache_scales.<part>']."""
    return CacheScales(cache_scales.format, cache_scales.granularity,
                       **{p: tensors.get(f"cache_scales.{p}", cache_scales.of(p)) for p in PARTS})


def dequantized(cache: FactoredCache) -> FactoredCache:
    """An fp8 cache's parts in float64 — exact — for the rounding bound's conditioning; the
    parts unchanged otherwise (and no scales either way)."""
    if cache.scales is None or not is_fp8(cache.shared_k.dtype):
        return replace(cache, scales=None)
    return cache.dequantize(torch.float64)
