"""Paged decode in float64 (DESIGN §3–4): gather through the page table, then Eqs. 6–7.

The cache tensors are pages [P, page_size, ...]; slot j of sequence b lives in page
page_table[b, j // page_size] at row j % page_size. Pages may come in any order and may
be shared by several sequences (a common prefix). Gathering gives back the contiguous
cache [B, max_pages · page_size, ...], and the factored oracle does the rest — so a paged
kernel is judged by exactly the math a contiguous one is (`lrkv.reference.lrkv.attend` on
the paged `FactoredCache`). An fp8 cache's pages are dequantized, with per-token scales
paged like key_scale, before the gather.
"""

from __future__ import annotations

import torch

from .cache import FactoredCache, gather_pages, scatter_pages, scatter_scales  # noqa: F401  (the page helpers)
from .fp8_cache import CacheScales
from .lrkv import attend
from .rope import ExactRope


def paged_decode_attention(
    q: torch.Tensor,  # [B, H, d_h]
    shared_k: torch.Tensor,  # [P, page, d_h]
    shared_v: torch.Tensor,  # [P, page, d_h]
    latent_k: torch.Tensor,  # [P, page, H, r]
    latent_v: torch.Tensor,  # [P, page, H, r]
    basis_k: torch.Tensor,  # [H, d_h, r]
    basis_v: torch.Tensor,  # [H, d_h, r]
    lengths: torch.Tensor,  # [B]
    page_table: torch.Tensor,  # [B, max_pages] int32
    *,
    scale: float,
    key_scale: torch.Tensor | None = None,  # [P, page, H]
    rope: ExactRope | None = None,
    check: bool = True,
    cache_scales: CacheScales | None = None,  # fp8 pages' scales ([] / [H] / [P, page] / [P, page, H])
    materialized: bool = False,  # rebuild K_h and V_h explicitly (the `materialized` path)
    **rounding,  # FA3-style roundings of q / the weights: the decode's fp8 keywords (lrkv.reference.lrkv)
) -> tuple[torch.Tensor, torch.Tensor]:
    """Factored decode (Eqs. 6–7) over a paged cache. Returns out [B, H, d_h], lse [B, H]."""
    cache = FactoredCache(shared_k, shared_v, latent_k, latent_v, lengths, key_scale, cache_scales, page_table)
    return attend(q, cache, basis_k, basis_v, scale=scale, rope=rope, check=check, materialized=materialized,
                  **rounding)


def materialized_paged_decode_attention(*args, _decode=paged_decode_attention, **kwargs,
                                        ) -> tuple[torch.Tensor, torch.Tensor]:
    """The same contract with K_h and V_h rebuilt explicitly (the `materialized` path; `_decode`
    bound here, independent of a bug planted in the module's paged_decode_attention)."""
    return _decode(*args, **kwargs, materialized=True)
