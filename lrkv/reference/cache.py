"""The factored LRKV cache (DESIGN §3): contiguous, variable length.

shared_k/v hold x W_shared once for all heads; latent_k/v hold the r-wide x U_h per head.
Slots at or past lengths[b] are garbage; allocation fills them with NaN so that any path
that reads past the length is caught.
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from ..spec import AttentionSpec, cache_components


@dataclass
class FactoredCache:
    shared_k: torch.Tensor  # [B, T_max, d_h]
    shared_v: torch.Tensor  # [B, T_max, d_h]
    latent_k: torch.Tensor  # [B, T_max, H, r]
    latent_v: torch.Tensor  # [B, T_max, H, r]
    lengths: torch.Tensor  # [B] int32
    key_scale: torch.Tensor | None = None  # [B, T_max, H] (QK-RMSNorm only)

    @property
    def t_max(self) -> int:
        return self.shared_k.shape[1]

    @property
    def batch(self) -> int:
        return self.shared_k.shape[0]

    def tensors(self) -> dict[str, torch.Tensor]:
        """The cached payload tensors by name (lengths excluded: it is bookkeeping)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "lengths"}
        return {k: v for k, v in out.items() if v is not None}

    def clone(self) -> FactoredCache:
        return FactoredCache(**{f.name: (None if getattr(self, f.name) is None else getattr(self, f.name).clone())
                                for f in fields(self)})

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors().values())


def allocate_cache(
    spec: AttentionSpec, batch: int, t_max: int, dtype: torch.dtype = torch.float64,
    *, fill: float = float("nan"), device=None,
) -> FactoredCache:
    """An empty cache (lengths 0) with every slot filled with `fill` (NaN by default)."""
    if spec.family != "lrkv":
        raise ValueError(f"allocate_cache needs an lrkv spec, got {spec.family!r}")
    if batch < 1 or t_max < 1:
        raise ValueError(f"batch and t_max must be >= 1, got batch={batch}, t_max={t_max}")
    H, d_h, r = spec.n_heads, spec.head_dim, spec.rank
    full = lambda *s: torch.full(s, fill, dtype=dtype, device=device)  # noqa: E731
    comp = cache_components(spec)
    return FactoredCache(
        shared_k=full(batch, t_max, d_h), shared_v=full(batch, t_max, d_h),
        latent_k=full(batch, t_max, H, r), latent_v=full(batch, t_max, H, r),
        lengths=torch.zeros(batch, dtype=torch.int32, device=device),
        key_scale=full(batch, t_max, H) if "key_scale" in comp else None,
    )
