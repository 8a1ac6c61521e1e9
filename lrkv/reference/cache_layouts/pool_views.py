"""Pools as servers allocate them (DESIGN §4, "Pool views"): the cache parts of a paged layout
handed over as views of a larger allocation, same values, NaN in every element between them.

    dense           each part its own dense tensor (what the adapters build)
    kv-interleaved  K and V of each page in one allocation [P, 2, page, …] (vLLM v1's
                    FlashInfer-style `(num_blocks, 2, block_size, …)`): each pool's page stride
                    twice the dense one, V's storage offset one page; fused rows, which have
                    no K/V pair, beside a NaN pool of their own shape
    pages-apart     each pool's pages PAGE_GAP elements apart, after a lead of OFFSET elements
                    (a pool carved out of a larger arena at a non-zero storage offset)
    rows-padded     pages apart, and the innermost axis padded: rounded up to ROW_ALIGN elements
                    (at least one more), an fp8 fused row to a multiple of FlashMLA's 656 bytes

A kernel that addresses a pool from its shape instead of its strides reads NaN or another
part's values. Only the parts are re-homed (key scales and fp8 scales keep their own pools);
a head-major pool stays head-major (the views keep each pool's stride order).
"""

from __future__ import annotations

import math

import torch

from ..fp8 import PARTS, is_fp8, nan_filled

VIEWS = ("dense", "kv-interleaved", "pages-apart", "rows-padded")
DENSE = VIEWS[0]
PAGE_GAP = 16  # elements between two pages of a pool (pages-apart, rows-padded)
OFFSET = 64  # elements before a pool's first page: 64 keeps 16-byte alignment at every dtype
ROW_ALIGN = 16  # elements a padded innermost axis is rounded up to
FP8_ROW_BYTES = 656  # FlashMLA's fp8 row: 512 B of latent, 16 B of scales, 128 B of RoPE key
PAIRS = (("shared_k", "shared_v"), ("latent_k", "latent_v"))  # what kv-interleaved puts side by side


def check_view(view) -> str:
    if view not in VIEWS:
        raise ValueError(f"pool_view must be one of {', '.join(VIEWS)}; got {view!r}")
    return view


def padded_width(n: int, dtype: torch.dtype, fused_row: bool) -> int:
    """A padded innermost axis of n elements: a fused fp8 row to a multiple of 656 bytes (one
    byte each), anything else to a multiple of ROW_ALIGN elements; always at least one more."""
    align = FP8_ROW_BYTES if fused_row and is_fp8(dtype) else ROW_ALIGN
    return align * math.ceil((n + 1) / align)


def _memory_order(t: torch.Tensor) -> list[int]:
    """t's axes, outermost first (ties: the earlier axis outside)."""
    return sorted(range(t.dim()), key=lambda d: (-t.stride(d), d))


def _arena(pools: list[torch.Tensor], slots: int, pitch: int, gap: int, lead: int) -> list[torch.Tensor]:
    """Views of one NaN-filled allocation of `slots` pools page by page (`pools`: the first
    ones, same shape, dtype and stride order, axis 0 the pages, outermost): page p of pool i
    at lead + p·page_stride + i·block, the innermost axis (in memory order) `pitch` elements
    long — each view filled with its pool, every other element NaN."""
    like = pools[0]
    order = _memory_order(like)
    if order[0] != 0:
        raise ValueError(f"a pool's page axis must be outermost in memory; strides {like.stride()}")
    sizes = [like.shape[d] for d in order[1:]]
    inner = [*sizes[:-1], pitch]  # one page in memory order, its innermost axis padded
    block = math.prod(inner)
    page_stride = slots * block + gap
    total = lead + like.shape[0] * page_stride
    flat = (nan_filled((total,), like.dtype, like.device) if is_fp8(like.dtype)
            else torch.full((total,), float("nan"), dtype=like.dtype, device=like.device))
    strides = [0] * like.dim()
    strides[0] = page_stride
    for k, d in enumerate(order[1:]):
        strides[d] = math.prod(inner[k + 1:])
    views = []
    for i, t in enumerate(pools):
        v = flat.as_strided(tuple(like.shape), tuple(strides), lead + i * block)
        views.append(v.copy_(t))
    return views


def rehome(laid: dict, view: str, fused_row: bool = False) -> dict:
    """The layout's arguments (by contract name) with its parts re-homed into `view`."""
    check_view(view)
    if view == DENSE:
        return laid
    out = dict(laid)
    groups = [("kv_rows",)] if "kv_rows" in laid else [p for p in PAIRS if all(n in laid for n in p)]
    for names in groups:
        pools = [laid[n] for n in names]
        like = pools[0]
        inner = like.shape[_memory_order(like)[-1]]
        if view == "kv-interleaved":
            views = _arena(pools, 2, inner, 0, 0)  # a lone pool (fused rows) beside a NaN one
        else:
            pitch = padded_width(inner, like.dtype, fused_row) if view == "rows-padded" else inner
            views = [_arena([t], 1, pitch, PAGE_GAP, OFFSET)[0] for t in pools]
        out.update(zip(names, views))
    return out


assert set(n for p in PAIRS for n in p) == set(PARTS)
