"""The factored LRKV cache (DESIGN §3): contiguous, variable length.

shared_k/v hold x W_shared once for all heads; latent_k/v hold the r-wide x U_h per head.
Slots at or past lengths[b] are garbage; allocation fills them with NaN so that any path
that reads past the length is caught.

An fp8 cache (DESIGN §4, "FP8 caches") stores the four parts as one fp8 format, filled with
that format's NaN bit pattern, and carries their float32 scales in `scales`
(`lrkv.reference.fp8_cache.CacheScales`); key_scale stays in the compute dtype.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import torch

from ..spec import AttentionSpec, cache_components
from .fp8 import DYNAMIC_GRANULARITIES, PARTS, PER_TENSOR, SCALE_DTYPE, fp8_format, is_fp8, nan_filled, scale_shape
from .fp8_cache import CacheScales

_BOOKKEEPING = ("lengths", "scales")  # not payload tensors a decode reads slot by slot


@dataclass
class FactoredCache:
    shared_k: torch.Tensor  # [B, T_max, d_h]
    shared_v: torch.Tensor  # [B, T_max, d_h]
    latent_k: torch.Tensor  # [B, T_max, H, r]
    latent_v: torch.Tensor  # [B, T_max, H, r]
    lengths: torch.Tensor  # [B] int32
    key_scale: torch.Tensor | None = None  # [B, T_max, H] (QK-RMSNorm only)
    scales: CacheScales | None = None  # fp8 caches only: a float32 scale per part

    @property
    def t_max(self) -> int:
        return self.shared_k.shape[1]

    @property
    def batch(self) -> int:
        return self.shared_k.shape[0]

    def tensors(self) -> dict[str, torch.Tensor]:
        """The cached payload tensors by name (lengths and scales excluded: bookkeeping)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _BOOKKEEPING}
        return {k: v for k, v in out.items() if v is not None}

    def clone(self) -> FactoredCache:
        return FactoredCache(**{f.name: (None if getattr(self, f.name) is None else getattr(self, f.name).clone())
                                for f in fields(self)})

    def nbytes(self) -> int:
        """Payload bytes, an fp8 cache's scales included."""
        scales = 0 if self.scales is None else self.scales.nbytes()
        return sum(t.numel() * t.element_size() for t in self.tensors().values()) + scales


def allocate_cache(
    spec: AttentionSpec, batch: int, t_max: int, dtype: torch.dtype = torch.float64,
    *, fill: float = float("nan"), device=None, fp8: torch.dtype | None = None, granularity: str = PER_TENSOR,
    static_scale: float = 1.0,
) -> FactoredCache:
    """An empty cache (lengths 0) with every slot filled with `fill` (NaN by default).

    With `fp8` (float8_e4m3fn or float8_e5m2) the four parts are stored in that format,
    filled with its NaN bit pattern (`fill` must stay NaN), and `scales` holds their float32
    scales of `granularity`: static ones (per_tensor, per_head) set to `static_scale` until
    calibrated, dynamic ones (per_token, per_token_head) NaN until append writes them.
    `dtype` is then the compute dtype, which key_scale keeps."""
    if spec.family != "lrkv":
        raise ValueError(f"allocate_cache needs an lrkv spec, got {spec.family!r}")
    if batch < 1 or t_max < 1:
        raise ValueError(f"batch and t_max must be >= 1, got batch={batch}, t_max={t_max}")
    if is_fp8(dtype):
        raise TypeError(f"dtype is the compute dtype (key_scale's); pass fp8={dtype} for an fp8 cache")
    H, d_h, r = spec.n_heads, spec.head_dim, spec.rank
    full = lambda *s: torch.full(s, fill, dtype=dtype, device=device)  # noqa: E731
    comp = cache_components(spec)
    shapes = {"shared_k": (batch, t_max, d_h), "shared_v": (batch, t_max, d_h),
              "latent_k": (batch, t_max, H, r), "latent_v": (batch, t_max, H, r)}
    scales = None
    if fp8 is None:
        parts = {p: full(*s) for p, s in shapes.items()}
    else:
        fp8_format(fp8)  # a TypeError naming anything but the two formats
        if not math.isnan(fill):
            raise ValueError(f"an fp8 cache's garbage is the format's NaN bit pattern; fill must stay NaN, got {fill}")
        if not (math.isfinite(static_scale) and static_scale > 0):
            raise ValueError(f"static_scale must be finite and > 0, got {static_scale}")
        parts = {p: nan_filled(s, fp8, device) for p, s in shapes.items()}
        init = float("nan") if granularity in DYNAMIC_GRANULARITIES else static_scale
        scales = CacheScales(fp8, granularity, **{
            p: torch.full(scale_shape(granularity, p, rows=batch, slots=t_max, heads=H), init, dtype=SCALE_DTYPE,
                          device=device) for p in PARTS})
    return FactoredCache(
        **parts, lengths=torch.zeros(batch, dtype=torch.int32, device=device),
        key_scale=full(batch, t_max, H) if "key_scale" in comp else None, scales=scales,
    )
