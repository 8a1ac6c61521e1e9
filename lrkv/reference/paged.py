"""Paged decode in float64 (DESIGN §3–4): gather through the page table, then Eqs. 6–7.

The cache tensors are pages [P, page_size, ...]; slot j of sequence b lives in page
page_table[b, j // page_size] at row j % page_size. Pages may come in any order and may
be shared by several sequences (a common prefix). Gathering gives back the contiguous
cache [B, max_pages · page_size, ...], and the factored oracle does the rest — so a paged
kernel is judged by exactly the math a contiguous one is. An fp8 cache's pages are
dequantized (`dequantize_cache`, with per-token scales paged like key_scale) before the gather.
"""

from __future__ import annotations

import torch

from .contract import validate_paged_inputs
from .fp8 import DYNAMIC_GRANULARITIES
from .fp8_cache import CacheScales, dequantize_cache
from .lrkv import decode_attention, materialized_decode_attention
from .rope import ExactRope


def gather_pages(page_table: torch.Tensor, lengths: torch.Tensor, pages: torch.Tensor | None) -> torch.Tensor | None:
    """One paged tensor [P, page, ...] as the contiguous [B, max_pages · page, ...] it stands for.

    Slots at or past lengths[b] are NaN: they are garbage by contract (their page-table
    entries may be anything, e.g. −1), and NaN makes a path that reads them visible.
    """
    if pages is None:
        return None
    B, max_pages = page_table.shape
    P, page = pages.shape[:2]
    slot = torch.arange(max_pages * page, device=page_table.device)  # logical slot j
    page_of_slot = page_table[:, slot // page].long()  # [B, T]  page_table[b, j // page]
    valid = slot[None, :] < lengths[:, None]  # [B, T]
    gathered = pages[page_of_slot.clamp(0, max(P - 1, 0)), (slot % page)[None, :]]  # [B, T, ...]
    mask = valid.reshape(B, -1, *([1] * (pages.dim() - 2)))
    return torch.where(mask, gathered, torch.full_like(gathered, float("nan")))


def scatter_pages(t: torch.Tensor, page_table: torch.Tensor, pool: torch.Tensor) -> torch.Tensor:
    """The inverse of `gather_pages`: write a contiguous cache tensor t [B, T, ...] into the
    pages pool [P, page, ...] the page table [B, max_pages] names, and return the pool.

    Each sequence's slots are padded to whole pages with pool[0, 0] (the pool holds garbage
    before the write, so the padding is garbage too). Sequence 0 writes last: a page that
    two sequences share (a common prefix, whose tokens are the same) holds sequence 0's copy.
    """
    B, max_pages = page_table.shape
    page, tail = pool.shape[1], t.shape[2:]
    pad = pool[:1, :1].expand(B, max_pages * page - t.shape[1], *tail)
    blocks = torch.cat([t, pad], dim=1).reshape(B, max_pages, page, *tail)
    for b in reversed(range(B)):
        pool[page_table[b].long()] = blocks[b]
    return pool


def scatter_scales(cache_scales: CacheScales, page_table: torch.Tensor, num_pages: int, page: int) -> CacheScales:
    """A contiguous fp8 cache's scales for its paged copy (the same page table): per-token
    scales [B, T, ...] become pages [num_pages, page, ...] (NaN where no slot is written, like
    the garbage they stand beside); static scales are the same for every page."""
    out = {}
    for part, s in cache_scales.tensors().items():
        if cache_scales.granularity_of(part) in DYNAMIC_GRANULARITIES:
            pool = torch.full((num_pages, page, *s.shape[2:]), float("nan"), dtype=s.dtype, device=s.device)
            s = scatter_pages(s, page_table, pool)
        out[part] = s
    return CacheScales(cache_scales.format, cache_scales.granularity, **out)


def gather_cache(page_table, lengths, shared_k, shared_v, latent_k, latent_v, key_scale=None):
    """All cache tensors of a paged call, gathered (see `gather_pages`)."""
    return [gather_pages(page_table, lengths, t) for t in (shared_k, shared_v, latent_k, latent_v, key_scale)]


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
    **rounding,  # FA3-style roundings of q / the weights: decode_attention's fp8 keywords (lrkv.reference.lrkv)
) -> tuple[torch.Tensor, torch.Tensor]:
    """Factored decode (Eqs. 6–7) over a paged cache. Returns out [B, H, d_h], lse [B, H]."""
    if check:
        validate_paged_inputs(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, page_table,
                              scale=scale, key_scale=key_scale, rope=rope, cache_scales=cache_scales)
    shared_k, shared_v, latent_k, latent_v = dequantize_cache(cache_scales, q.dtype, shared_k, shared_v, latent_k,
                                                              latent_v)
    sk, sv, lk, lv, ks = gather_cache(page_table, lengths, shared_k, shared_v, latent_k, latent_v, key_scale)
    return decode_attention(q, sk, sv, lk, lv, basis_k, basis_v, lengths, scale=scale, key_scale=ks, rope=rope,
                            check=False, **rounding)


def materialized_paged_decode_attention(
    q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, page_table, *,
    scale: float, key_scale=None, rope: ExactRope | None = None, check: bool = True,
    cache_scales: CacheScales | None = None, **rounding,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same contract with K_h and V_h rebuilt explicitly (the `materialized` path)."""
    if check:
        validate_paged_inputs(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, page_table,
                              scale=scale, key_scale=key_scale, rope=rope, cache_scales=cache_scales)
    shared_k, shared_v, latent_k, latent_v = dequantize_cache(cache_scales, q.dtype, shared_k, shared_v, latent_k,
                                                              latent_v)
    sk, sv, lk, lv, ks = gather_cache(page_table, lengths, shared_k, shared_v, latent_k, latent_v, key_scale)
    return materialized_decode_attention(q, sk, sv, lk, lv, basis_k, basis_v, lengths, scale=scale,
                                         key_scale=ks, rope=rope, check=False, **rounding)
