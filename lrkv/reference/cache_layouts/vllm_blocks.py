"""vLLM's block pools (`vllm/v1/attention/backend.py`: a `(num_blocks, block_size, …)` pool per
part, picked NHD or HND by stride order): block 0 is the null block — never a sequence's page,
NaN throughout — so the pool is the cache's pages shifted by one; `block_table [B, max_blocks]`
names each sequence's blocks and pads with the null block; `seq_lens [B]`; an extend also gets
`slot_mapping [N]`, the flat slot (block · block_size + row) each new token was written to.

    decode:  (q, *PARTS, basis_k, basis_v, seq_lens, block_table,
              *, scale, key_scale, rope[, cache_scales])
    extend:  (q, cu_seqlens_q, <the same>, *, scale, key_scale, rope, slot_mapping[, cache_scales])
"""

from __future__ import annotations

import torch

from ..cache import FactoredCache, empty_in_order, page_counts
from ..fp8 import DYNAMIC_GRANULARITIES, PARTS, is_fp8, nan_filled
from ..fp8_cache import CacheScales

NAME = "vllm-blocks"
NULL_BLOCK = 0
DECODE = ("q", *PARTS, "basis_k", "basis_v", "seq_lens", "block_table")
EXTEND = ("q", "cu_seqlens_q", *PARTS, "basis_k", "basis_v", "seq_lens", "block_table")
EXTEND_KEYWORDS = ("slot_mapping",)

def _with_null_block(pages: torch.Tensor) -> torch.Tensor:
    """[P, page, ...] -> [1 + P, page, ...] in the same stride order, block 0 NaN."""
    pool = empty_in_order(pages, (pages.shape[0] + 1, *pages.shape[1:]))
    pool[:1] = nan_filled(pool[:1].shape, pages.dtype, pages.device) if is_fp8(pages.dtype) else float("nan")
    pool[1:] = pages
    return pool

def block_table(cache: FactoredCache) -> torch.Tensor:
    """[B, max_pages] int32: page p of the cache is block p + 1; pages a sequence does not own: 0."""
    used = torch.arange(cache.page_table.shape[1], device=cache.page_table.device)[None, :] < page_counts(cache)[:, None]
    return torch.where(used, cache.page_table + 1, NULL_BLOCK).to(torch.int32)

def slot_mapping(table: torch.Tensor, lengths: torch.Tensor, cu_seqlens_q: torch.Tensor, page: int) -> torch.Tensor:
    """[N] int64: the flat slot of each new token (sequence b's last n_b positions)."""
    n_new = cu_seqlens_q.diff().long()
    seq = torch.repeat_interleave(torch.arange(len(n_new), device=table.device), n_new)  # [N]
    pos = lengths.long()[seq] - n_new[seq] + (torch.arange(len(seq), device=table.device) - cu_seqlens_q.long()[seq])
    return table.long()[seq, pos // page] * page + pos % page

def arrange(cache: FactoredCache, cu_seqlens_q: torch.Tensor | None = None) -> dict:
    """The cache's arguments in this layout, by contract name."""
    table = block_table(cache)
    out = {p: _with_null_block(getattr(cache, p)) for p in PARTS}
    out |= {"seq_lens": cache.lengths, "block_table": table,
            "key_scale": None if cache.key_scale is None else _with_null_block(cache.key_scale)}
    if cache.scales is not None:
        s = cache.scales
        out["cache_scales"] = CacheScales(s.format, s.granularity, **{
            p: _with_null_block(s.of(p)) if s.granularity_of(p) in DYNAMIC_GRANULARITIES else s.of(p) for p in PARTS})
    if cu_seqlens_q is not None:
        out["slot_mapping"] = slot_mapping(table, cache.lengths, cu_seqlens_q, cache.page_size)
    return out

def read(args: dict) -> FactoredCache:
    """The layout back as the cache object's paged form (block b is page b − 1; the null block dropped)."""
    table = args["block_table"]
    scales = args.get("cache_scales")
    if scales is not None:
        scales = CacheScales(scales.format, scales.granularity, **{
            p: scales.of(p)[1:] if scales.granularity_of(p) in DYNAMIC_GRANULARITIES else scales.of(p) for p in PARTS})
    ks = args.get("key_scale")
    return FactoredCache(*(args[p][1:] for p in PARTS), lengths=args["seq_lens"],
                         key_scale=None if ks is None else ks[1:], scales=scales,
                         page_table=torch.where(table == NULL_BLOCK, -1, table - 1).to(torch.int32))
