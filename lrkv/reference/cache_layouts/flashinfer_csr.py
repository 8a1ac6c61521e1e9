"""FlashInfer's CSR pages (`docs/tutorials/kv_layout.rst`): the pools are the cache's own pages
(NHD or HND by stride order, no copy); sequence b's pages are
`kv_indices[kv_indptr[b] : kv_indptr[b + 1]]` in order, and `kv_last_page_len[b]` (1 … page) is
how many rows of its last page hold tokens. A sequence with no token has no page and a last
page length of 0 (FlashInfer has no empty sequences; the contract's lengths may be 0).

    decode:  (q, *PARTS, basis_k, basis_v, kv_indptr, kv_indices,
              kv_last_page_len, *, scale, key_scale, rope[, cache_scales])
    extend:  (q, cu_seqlens_q, <the same>, *, scale, key_scale, rope[, cache_scales])
"""

from __future__ import annotations

import torch

from ..cache import FactoredCache, page_counts
from ..fp8 import PARTS

NAME = "flashinfer-csr"
DECODE = ("q", *PARTS, "basis_k", "basis_v", "kv_indptr", "kv_indices", "kv_last_page_len")
EXTEND = ("q", "cu_seqlens_q", *PARTS, "basis_k", "basis_v", "kv_indptr", "kv_indices", "kv_last_page_len")
EXTEND_KEYWORDS = ()


def arrange(cache: FactoredCache, cu_seqlens_q: torch.Tensor | None = None) -> dict:
    """The cache's arguments in this layout, by contract name."""
    n = page_counts(cache)  # [B]
    indptr = torch.cat([n.new_zeros(1), n.cumsum(0)]).to(torch.int32)
    used = torch.arange(cache.page_table.shape[1], device=n.device)[None, :] < n[:, None]
    last = torch.where(n > 0, cache.lengths.long() - (n - 1) * cache.page_size, 0).to(torch.int32)
    out = {p: getattr(cache, p) for p in PARTS}
    out |= {"kv_indptr": indptr, "kv_indices": cache.page_table[used].to(torch.int32), "kv_last_page_len": last,
            "key_scale": cache.key_scale}
    if cache.scales is not None:
        out["cache_scales"] = cache.scales
    return out


def read(args: dict) -> FactoredCache:
    """The layout back as the cache object's paged form (page table rows padded with −1)."""
    indptr, indices = args["kv_indptr"].long(), args["kv_indices"]
    n = indptr.diff()
    page = args["shared_k"].shape[1]
    table = torch.full((len(n), max(int(n.max()) if len(n) else 0, 1)), -1, dtype=torch.int32)
    for b in range(len(n)):
        table[b, : n[b]] = indices[indptr[b]: indptr[b + 1]]
    lengths = torch.where(n > 0, (n - 1) * page + args["kv_last_page_len"].long(), 0).to(torch.int32)
    return FactoredCache(*(args[p] for p in PARTS), lengths=lengths, key_scale=args.get("key_scale"),
                         scales=args.get("cache_scales"), page_table=table)
