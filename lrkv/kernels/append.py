"""Cache append with a Triton kernel: the new token's shared K/V, per-head latents and
key_scale go to slot positions[b] of a contiguous or paged cache — bit for bit what
`lrkv.reference.lrkv.append` writes for the same projected entries.

The kernel copies raw bits (tensors are viewed as same-width integers), so the result is
bit-exact whatever the float dtype. The entries must already have the cache's dtype (and be
finite, key_scale >= 0): append never rounds — float64 entries handed to a bfloat16 cache are
refused (`lrkv.reference.contract.check_append_entries`), as by the reference's append.
An fp8 cache (DESIGN §4.1: `cache.scales` set) is the exception: its four parts' entries
come at compute precision and `append_fp8_kernel` quantizes them — saturating
round-to-nearest-even with the static scales as given (per_tensor, per_head), or with the
dynamic ones (per_token, per_token_head: amax / max finite) it computes and writes into
`cache.scales` at the slot — bit for bit `lrkv.reference.fp8_cache.quantize_append` (the
kernel rounds the same float64 quotient x / scale the reference does; `_kernels._fp8_bits`
says why not float32). Before launch: the reference's `check_cache_scales` (an fp8 part
without scales is a TypeError), static scales finite and > 0, the entries' contract.
"""

from __future__ import annotations

import torch

from ..reference.cache import FactoredCache
from ..reference.contract import check_append_entries
from ..reference.fp8 import PARTS, fp8_format
from ..reference.fp8_cache import check_cache_scales, check_scale_values, quantize_append
from ..reference.lrkv import append as reference_append
from . import runtime
from .decode import dense_past_first, fp8_code
from .validate import check_strides, next_pow2

_BITS = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
_ORDER = ("shared_k", "shared_v", "latent_k", "latent_v", "key_scale")


def _check_entries(entries: dict, cache_tensors: dict, B: int, H: int, r: int, d_h: int, scales=None) -> dict:
    """The reference contract's check (shape, the cache's dtype — any float but fp8 for an fp8
    cache's parts, which append quantizes — device, finite, key_scale >= 0)."""
    check_append_entries(entries, cache_tensors, B=B, quantized=PARTS if scales is not None else ())
    return {name: entries[name] for name in cache_tensors}


def _check_fp8(tensors: dict, scales, *, rows: int, slots: int, H: int) -> None:
    """An fp8 cache's scales before launch: the reference's dtype/shape check (an fp8 part
    without scales, scales without an fp8 cache, mixed formats, wrong scale dtype/shape/device
    are refused by name), and the static scales — read for every entry — finite and > 0.
    Dynamic scales are written here, so their old contents do not matter."""
    check_cache_scales({p: tensors[p] for p in PARTS}, scales, rows=rows, slots=slots, heads=H)
    check_scale_values(scales, lambda t: t[:0])
    if scales is not None:
        for p in PARTS:
            check_strides(f"cache_scales.{p}", scales.of(p), writable=scales.dynamic)


def _check_positions(positions, lengths, B: int, capacity: int) -> None:
    if not isinstance(positions, torch.Tensor):
        raise TypeError(f"positions must be a torch.Tensor, got {type(positions).__name__}")
    if positions.shape != (B,):
        raise ValueError(f"positions must have shape [{B}], got {list(positions.shape)}")
    if positions.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"positions must be int32 or int64, got {positions.dtype}")
    if positions.device != lengths.device:
        raise ValueError(f"positions is on {positions.device}, the cache lengths on {lengths.device}")
    if not torch.equal(positions.to(lengths.dtype), lengths):
        raise ValueError(f"positions must equal the cache lengths (the next free slot): got "
                         f"{positions.tolist()}, lengths {lengths.tolist()}")
    if B and int(positions.max()) >= capacity:
        raise ValueError(f"cache is full: position {int(positions.max())} >= capacity {capacity}")


def _check_not_read(pt: torch.Tensor, lengths: torch.Tensor, target: torch.Tensor, row: torch.Tensor,
                    page: int) -> None:
    """No sequence may write a slot another sequence reads as valid: a server's shared prefix
    pages are read-only (a sequence whose last page is shared must get a copy first)."""
    B, M = pt.shape
    logical = torch.arange(M, device=pt.device)[None, None, :] * page + row[:, None, None]  # [B, 1, M]
    hit = (pt.long()[None, :, :] == target[:, None, None]) & (logical < lengths.long()[None, :, None])  # [b, c, M]
    hit &= ~torch.eye(B, dtype=torch.bool, device=pt.device)[:, :, None]
    if hit.any():
        b, c, j = (int(x) for x in hit.nonzero()[0])
        raise ValueError(f"sequence {b} would write page {int(target[b])} row {int(row[b])}, which sequence {c} "
                         f"reads as its slot {j * page + int(row[b])} (page_table[{c}, {j}]): a shared page is "
                         f"read-only; give sequence {b} its own copy of the page before appending")


def _check_devices(tensors: dict, positions, page_table) -> None:
    if runtime.mode()[0] != "cuda":
        return
    for name, t in {**tensors, "positions": positions, "page_table": page_table}.items():
        if t is not None and t.device.type != "cuda":
            raise ValueError(f"{name} is on {t.device}: the Triton kernels are compiled for CUDA here")


def _launch(positions, page_table, entries, tensors, *, H, d_h, r, page, n_pages, capacity, scales=None):
    """Launch the append kernel of the cache: the entries made contiguous, the page table too;
    a cache part (or scale) that is not dense past its first axis (contiguous) is written
    through a contiguous copy, copied back after the launch."""
    _check_devices(tensors, positions, page_table)
    work = {k: t if dense_past_first(t) else t.contiguous() for k, t in tensors.items()}
    sc = {} if scales is None else {p: scales.of(p) for p in PARTS}
    work_sc = {p: t.contiguous() for p, t in sc.items()}
    entries = {k: t.contiguous() for k, t in entries.items()}
    pt = None if page_table is None else page_table.contiguous()
    if scales is not None:
        _launch_fp8(positions, pt, entries, work, work_sc, scales, H=H, d_h=d_h, r=r, page=page, n_pages=n_pages,
                    capacity=capacity)
    else:
        _launch_bits(positions, pt, entries, work, H=H, d_h=d_h, r=r, page=page, n_pages=n_pages,
                     capacity=capacity)
    for k, t in tensors.items():
        if work[k] is not t:
            t.copy_(work[k])
    for p, t in sc.items():
        if work_sc[p] is not t:
            t.copy_(work_sc[p])


def _first_strides(c: dict) -> list[int]:
    """s_skb, s_svb, s_lkb, s_lvb, s_ksb: the first-axis strides of the cache parts (0: no key_scale)."""
    return [c[k].stride(0) if c.get(k) is not None else 0 for k in _ORDER]


def _launch_bits(positions, pt, entries, tensors, *, H, d_h, r, page, n_pages, capacity):
    """`append_kernel`: every entry copied as raw bits (same-width integer views)."""
    K = runtime.kernels()
    B = positions.shape[0]
    bits = lambda t: t.view(_BITS[t.element_size()])  # noqa: E731
    e = {k: bits(v) for k, v in entries.items()}
    c = {k: bits(v) for k, v in tensors.items()}
    K.append_kernel[(B,)](
        positions, pt, e["shared_k"], e["shared_v"], e["latent_k"], e["latent_v"], e.get("key_scale"),
        c["shared_k"], c["shared_v"], c["latent_k"], c["latent_v"], c.get("key_scale"),
        H, d_h, r, page, n_pages, capacity, *_first_strides(c),
        BLOCK_D=next_pow2(d_h, 16), BLOCK_HR=min(1024, next_pow2(H * max(r, 1), 16)),
    )


def _launch_fp8(positions, pt, entries, tensors, sc, scales, *, H, d_h, r, page, n_pages, capacity):
    """`append_fp8_kernel`: the four parts quantized (their entries as given, at compute
    precision), written as uint8 bits; dynamic scales written into `sc` (contiguous); key_scale
    as bits."""
    K = runtime.kernels()
    B = positions.shape[0]
    fmt = fp8_format(scales.format)
    c = {p: tensors[p].view(torch.uint8) for p in PARTS}
    e = {p: entries[p] for p in PARTS}
    if "key_scale" in tensors:
        c["key_scale"] = tensors["key_scale"].view(_BITS[tensors["key_scale"].element_size()])
        e["key_scale"] = entries["key_scale"].view(_BITS[entries["key_scale"].element_size()])
    block_r = next_pow2(max(r, 1), 16)
    K.append_fp8_kernel[(B,)](
        positions, pt, e["shared_k"], e["shared_v"], e["latent_k"], e["latent_v"], e.get("key_scale"),
        c["shared_k"], c["shared_v"], c["latent_k"], c["latent_v"], c.get("key_scale"),
        *(sc[p] for p in PARTS),
        H, d_h, r, page, n_pages, capacity, *_first_strides(c),
        FP8=fp8_code(scales.granularity), MANT=fmt.mantissa_bits, MIN_EXP=fmt.min_exponent,
        MAX_FINITE=fmt.max_finite, BLOCK_D=next_pow2(d_h, 16), BLOCK_HR=min(1024, next_pow2(H, 16)),
        BLOCK_HH=max(1, min(next_pow2(H), 2048 // block_r)), BLOCK_R=block_r,
    )


def append(cache: FactoredCache, entries: dict[str, torch.Tensor], positions: torch.Tensor) -> FactoredCache:
    """Write one token per sequence at slot positions[b] (must equal cache.lengths); lengths
    become positions + 1. Same contract and result as `lrkv.reference.lrkv.append` — for an
    fp8 cache (`cache.scales`) the same bits and scales as its quantizing append."""
    B, T = cache.batch, cache.t_max
    H, r = cache.latent_k.shape[2], cache.latent_k.shape[3]
    d_h = cache.shared_k.shape[2]
    tensors = cache.tensors()
    scales = getattr(cache, "scales", None)
    _check_fp8(tensors, scales, rows=B, slots=T, H=H)
    _check_positions(positions, cache.lengths, B, T)
    ent = _check_entries(entries, tensors, B, H, r, d_h, scales)
    if runtime.mode()[0] == "fallback":
        return reference_append(cache, ent, positions)
    for name, t in tensors.items():
        check_strides(name, t, writable=True)
    _launch(positions, None, ent, tensors, H=H, d_h=d_h, r=r, page=1, n_pages=0, capacity=T, scales=scales)
    cache.lengths = (cache.lengths + 1).to(cache.lengths.dtype)
    return cache


def paged_append(cache: FactoredCache, entries: dict[str, torch.Tensor], positions: torch.Tensor) -> FactoredCache:
    """`append` for a paged cache (`cache.page_table` set): slot positions[b] lives in page page_table[b, pos // page].

    The target page of every sequence must be a valid page, no two sequences may write the
    same physical slot (that would be a race on the GPU), and none may write a slot another
    sequence reads (a shared prefix page is read-only). An fp8 cache's per-token scales
    are pages [P, page(, H)] like the parts, written at the same physical slot."""
    B, page = cache.batch, cache.page_size
    H, r = cache.latent_k.shape[2], cache.latent_k.shape[3]
    d_h = cache.shared_k.shape[2]
    pt = cache.page_table
    if not isinstance(pt, torch.Tensor) or pt.dtype != torch.int32 or pt.dim() != 2 or pt.shape[0] != B:
        raise ValueError(f"page_table must be an int32 tensor [B={B}, max_pages]")
    tensors = cache.tensors()
    scales = cache.scales
    _check_fp8(tensors, scales, rows=cache.num_pages, slots=page, H=H)
    _check_positions(positions, cache.lengths, B, cache.t_max)
    ent = _check_entries(entries, tensors, B, H, r, d_h, scales)
    pidx = (positions.long() // page)
    target = pt[torch.arange(B, device=pt.device), pidx].long()  # [B]
    bad = (target < 0) | (target >= cache.num_pages)
    if bad.any():
        b = int(bad.nonzero()[0])
        raise ValueError(f"page_table[{b}, {int(pidx[b])}] = {int(target[b])} is outside [0, {cache.num_pages}): "
                         f"sequence {b} has no page for position {int(positions[b])}")
    slot = target * page + positions.long() % page
    if slot.unique().numel() != B:
        raise ValueError("two sequences would write the same physical slot (shared page at the write position)")
    _check_not_read(pt, cache.lengths, target, positions.long() % page, page)
    if runtime.mode()[0] == "fallback":
        rows, within = target, positions.long() % page
        if scales is not None:
            ent = quantize_append(scales, ent, rows, within)
        for name, t in tensors.items():
            t[rows, within] = ent[name]
    else:
        for name, t in tensors.items():
            check_strides(name, t, writable=True)
        _launch(positions, pt, ent, tensors, H=H, d_h=d_h, r=r, page=page, n_pages=cache.num_pages,
                capacity=cache.t_max, scales=scales)
    cache.lengths = (cache.lengths + 1).to(cache.lengths.dtype)
    return cache


__all__ = ["append", "paged_append"]
