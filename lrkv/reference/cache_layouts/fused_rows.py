"""Fused rows: one row per token holding the whole factored entry — the LRKV analogue of MLA's
`kv_c_and_k_pe` — in pages of the cache's page table:

    kv_rows [P, page, 2·d_h + 2·H·r] = [shared_k (d_h) | shared_v (d_h) | latent_k (H·r) | latent_v (H·r)]

the latents head-major within their block (head h's r values at h·r). key_scale and an fp8
cache's scales keep their own pages (per-token scales in the same page slot as the row).

    decode:  (q, kv_rows, basis_k, basis_v, lengths, page_table, *, scale, key_scale, rope[, cache_scales])
    extend:  (q, cu_seqlens_q, kv_rows, basis_k, basis_v, lengths, *, scale, key_scale, rope, page_table
              [, cache_scales])
"""

from __future__ import annotations

import torch

from ..cache import FactoredCache
from ..fp8 import PARTS

NAME = "fused-rows"
DECODE = ("q", "kv_rows", "basis_k", "basis_v", "lengths", "page_table")
EXTEND = ("q", "cu_seqlens_q", "kv_rows", "basis_k", "basis_v", "lengths")
EXTEND_KEYWORDS = ("page_table",)


def widths(d_h: int, heads: int, rank: int) -> tuple[int, ...]:
    """The four parts' widths in a row, in order."""
    return d_h, d_h, heads * rank, heads * rank


def arrange(cache: FactoredCache, cu_seqlens_q: torch.Tensor | None = None) -> dict:
    """The cache's arguments in this layout, by contract name."""
    P, page = cache.shared_k.shape[:2]
    rows = torch.cat([getattr(cache, p).reshape(P, page, -1) for p in PARTS], dim=-1)  # [P, page, 2d + 2Hr]
    out = {"kv_rows": rows, "lengths": cache.lengths, "page_table": cache.page_table, "key_scale": cache.key_scale}
    if cache.scales is not None:
        out["cache_scales"] = cache.scales
    return out


def read(args: dict, heads: int, rank: int) -> FactoredCache:
    """The layout back as the cache object's paged form."""
    rows = args["kv_rows"]
    d_h = (rows.shape[-1] - 2 * heads * rank) // 2
    sk, sv, lk, lv = rows.split(widths(d_h, heads, rank), dim=-1)
    P, page = rows.shape[:2]
    return FactoredCache(sk, sv, lk.reshape(P, page, heads, rank), lv.reshape(P, page, heads, rank),
                         lengths=args["lengths"], key_scale=args.get("key_scale"), scales=args.get("cache_scales"),
                         page_table=args["page_table"])
