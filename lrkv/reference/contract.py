"""The kernel-level decode contract (DESIGN §4) and its input validation.

Every backend — the reference, the Triton kernel, a user's kernel — receives the same
arguments; `validate_decode_inputs` turns any malformed call into a ValueError/TypeError
that names the problem *before* a kernel launches, so an out-of-bounds access cannot happen.

FP8 caches (DESIGN §4, "FP8 caches"): shared_k/v and latent_k/v may all be stored as one fp8
format, with `cache_scales` (a `lrkv.reference.fp8_cache.CacheScales`) holding a float32
scale per part; q, basis_k/v and key_scale stay in the compute dtype. The fp8-specific
checks are `check_cache_scales` (dtypes, shapes) and `check_scale_values` (finite, > 0).
"""

from __future__ import annotations

import math

import torch

from .fp8 import PARTS, as_checkable, is_fp8
from .fp8_cache import check_cache_scales, check_scale_values
from .rope import ExactRope

FLOAT_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)


def check_shape(name: str, t: torch.Tensor, expected: tuple) -> None:
    if tuple(t.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {list(expected)}, got {list(t.shape)}")


def check_tensors(named: dict) -> None:
    for name, t in named.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")


FLOAT_INPUTS = ("shared_k", "shared_v", "latent_k", "latent_v", "basis_k", "basis_v", "key_scale")


def check_dtypes_and_device(named: dict) -> None:
    """One float dtype for every float input, integer lengths, one device. A cache part stored
    as fp8 is exempt from the match: `check_cache_scales` checks fp8 caches."""
    dtype = named["q"].dtype
    if dtype not in FLOAT_DTYPES:
        raise TypeError(f"q has dtype {dtype}; supported: {[str(d) for d in FLOAT_DTYPES]}")
    for name in FLOAT_INPUTS:
        t = named.get(name)
        if t is not None and name in PARTS and is_fp8(t.dtype):
            continue
        if t is not None and t.dtype != dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but q has {dtype}: all float inputs must match")
    if named["lengths"].dtype not in (torch.int32, torch.int64):
        raise TypeError(f"lengths must be int32 or int64, got {named['lengths'].dtype}")
    devices = {t.device for t in named.values()}
    if len(devices) > 1:
        raise ValueError(f"all inputs must be on one device, got {sorted(map(str, devices))}")


def check_sizes(H: int, d_h: int) -> None:
    """At least one head of at least one channel: H = 0 or d_h = 0 is no attention layer."""
    if H < 1:
        raise ValueError(f"H (q.shape[1]) must be >= 1, got {H}")
    if d_h < 1:
        raise ValueError(f"d_h (q.shape[2]) must be >= 1, got {d_h}")


def check_scale_and_rope(scale, rope, d_h: int) -> None:
    if not isinstance(scale, (int, float)) or isinstance(scale, bool) or not (scale > 0):
        raise ValueError(f"scale must be a positive float (1/sqrt(d_h)), got {scale!r}")
    if not math.isfinite(scale):
        raise ValueError(f"scale must be finite (1/sqrt(d_h)), got {scale!r}")
    if rope is not None:
        if not isinstance(rope, ExactRope):
            raise TypeError(f"rope must be None or ExactRope, got {type(rope).__name__}")
        if d_h % 2:
            raise ValueError(f"rope needs an even d_h, got {d_h}")


def check_finite_query_and_bases(named: dict) -> None:
    if not torch.isfinite(named["q"]).all():
        raise ValueError("q contains NaN or Inf")
    for name in ("basis_k", "basis_v"):
        if not torch.isfinite(named[name]).all():
            raise ValueError(f"{name} contains NaN or Inf")


def validate_decode_inputs(q, cache, basis_k, basis_v, *, scale, rope=None, check_finite: bool = True,
                           ) -> tuple[int, int, int, int, int]:
    """Check the decode contract on a contiguous FactoredCache; return (B, T_max, H, d_h, r).
    cache.scales: the scales of an fp8 cache (required with one, refused without)."""
    named = _named(q, cache, basis_k, basis_v)
    shared_k, latent_k, lengths, key_scale, cache_scales = (named["shared_k"], named["latent_k"], cache.lengths,
                                                            cache.key_scale, cache.scales)
    if q.dim() != 3:
        raise ValueError(f"q must be [B, H, d_h], got {q.dim()} dims {list(q.shape)}")
    if shared_k.dim() != 3:
        raise ValueError(f"shared_k must be [B, T_max, d_h], got shape {list(shared_k.shape)}")
    if latent_k.dim() != 4:
        raise ValueError(f"latent_k must be [B, T_max, H, r], got shape {list(latent_k.shape)}")
    B, H, d_h = q.shape
    T = shared_k.shape[1]
    r = latent_k.shape[3]
    check_shape("shared_k", shared_k, (B, T, d_h))
    check_shape("shared_v", named["shared_v"], (B, T, d_h))
    check_shape("latent_k", latent_k, (B, T, H, r))
    check_shape("latent_v", named["latent_v"], (B, T, H, r))
    check_shape("basis_k", basis_k, (H, d_h, r))
    check_shape("basis_v", basis_v, (H, d_h, r))
    check_shape("lengths", lengths, (B,))
    if key_scale is not None:
        check_shape("key_scale", key_scale, (B, T, H))
    check_dtypes_and_device(named)
    check_cache_scales(named, cache_scales, rows=B, slots=T, heads=H)
    if B and (lengths.min() < 0 or lengths.max() > T):
        raise ValueError(
            f"lengths must lie in [0, T_max={T}], got min {int(lengths.min())}, max {int(lengths.max())}"
        )
    check_sizes(H, d_h)
    check_scale_and_rope(scale, rope, d_h)
    if check_finite:
        check_finite_query_and_bases(named)
        check_finite_cache(named, lengths, cache_scales=cache_scales)
    return B, T, H, d_h, r


def check_key_scale_sign(valid_key_scale: torch.Tensor) -> None:
    """key_scale is an inverse RMS (DESIGN §3): never negative in a slot that is read."""
    neg = valid_key_scale < 0
    if neg.any():
        at = [int(i) for i in neg.nonzero()[0]]
        raise ValueError(f"key_scale must be >= 0 (an inverse RMS) in every slot that is read, got "
                         f"{float(valid_key_scale[tuple(at)]):g} at {at}")


# ----------------------------------------------------------------------------- paged layout
def check_page_table(page_table, lengths, *, num_pages: int, page: int) -> int:
    """page_table [B, max_pages] int32; every entry a sequence reads (the pages covering
    [0, lengths[b])) lies in [0, num_pages). Returns the capacity max_pages · page."""
    if page_table.dtype != torch.int32:
        raise TypeError(f"page_table must be int32, got {page_table.dtype}")
    B, max_pages = page_table.shape
    capacity = max_pages * page
    if B and (int(lengths.min()) < 0 or int(lengths.max()) > capacity):
        raise ValueError(f"lengths must lie in [0, max_pages*page_size={capacity}], got min "
                         f"{int(lengths.min())}, max {int(lengths.max())}")
    if B:
        used = torch.arange(max_pages, device=lengths.device)[None, :] * page < lengths[:, None]  # [B, max_pages]
        bad = used & ((page_table < 0) | (page_table >= num_pages))
        if bad.any():
            b, i = (int(x) for x in bad.nonzero()[0])
            raise ValueError(f"page_table[{b}, {i}] = {int(page_table[b, i])} is outside [0, num_pages="
                             f"{num_pages}) but sequence {b} (length {int(lengths[b])}) reads that page")
        check_distinct_pages(page_table, used, num_pages)
    return capacity


def check_distinct_pages(page_table: torch.Tensor, used: torch.Tensor, num_pages: int) -> None:
    """No page twice among the pages one sequence reads: its slots would alias (two logical
    positions, one physical row), and an append would overwrite a token it still attends to.
    Sequences may share pages with each other (a common prefix)."""
    b_idx, i_idx = used.nonzero(as_tuple=True)
    key = b_idx * num_pages + page_table[b_idx, i_idx].long()
    if torch.unique(key).numel() == key.numel():
        return
    first: dict[int, int] = {}
    for k, (b, i) in enumerate(zip(b_idx.tolist(), i_idx.tolist())):
        j = first.setdefault(int(key[k]), i)
        if j != i:
            raise ValueError(f"page_table[{b}, {i}] = {int(page_table[b, i])} repeats page_table[{b}, {j}]: "
                             f"sequence {b} lists one page twice (its slots would alias)")


def valid_physical_slots(page_table: torch.Tensor, lengths: torch.Tensor, page: int):
    """(page index, row in page) of every valid (b, t < lengths[b]) slot, b-major."""
    B, max_pages = page_table.shape
    t = torch.arange(max_pages * page, device=page_table.device)
    valid = t[None, :] < lengths[:, None]  # [B, capacity]
    b_idx, t_idx = valid.nonzero(as_tuple=True)
    pages = page_table[b_idx, t_idx // page].long()
    return pages, t_idx % page


CACHE_INPUTS = ("shared_k", "shared_v", "latent_k", "latent_v", "key_scale")


def check_cache(named: dict, *, B: int, H: int, d_h: int, paged: bool) -> tuple[int, int]:
    """Shapes of the cache tensors for B sequences of H heads. Contiguous: [B, T, ...];
    paged: [P, page, ...]. Returns (rows, T) = (B, T_max) or (P, page_size)."""
    shared_k, latent_k = named["shared_k"], named["latent_k"]
    what = "[num_pages, page_size" if paged else "[B, T_max"
    if shared_k.dim() != 3:
        raise ValueError(f"shared_k must be {what}, d_h], got shape {list(shared_k.shape)}")
    if latent_k.dim() != 4:
        raise ValueError(f"latent_k must be {what}, H, r], got shape {list(latent_k.shape)}")
    rows, T = shared_k.shape[:2]
    if not paged:
        check_shape("shared_k", shared_k, (B, T, d_h))
    elif T < 1:
        raise ValueError(f"page_size (shared_k.shape[1]) must be >= 1, got {T}")
    r = latent_k.shape[3]
    check_shape("shared_k", shared_k, (rows, T, d_h))
    check_shape("shared_v", named["shared_v"], (rows, T, d_h))
    check_shape("latent_k", latent_k, (rows, T, H, r))
    check_shape("latent_v", named["latent_v"], (rows, T, H, r))
    check_shape("basis_k", named["basis_k"], (H, d_h, r))
    check_shape("basis_v", named["basis_v"], (H, d_h, r))
    check_shape("lengths", named["lengths"], (B,))
    if named.get("key_scale") is not None:
        check_shape("key_scale", named["key_scale"], (rows, T, H))
    return rows, T


def check_finite_cache(named: dict, lengths: torch.Tensor, page_table=None, *, cache_scales=None) -> None:
    """No NaN/Inf inside any sequence's valid length (slots past it are garbage — for an fp8
    cache they may hold the format's NaN pattern); every scale read is finite and > 0."""
    if page_table is None:
        B, T = named["shared_k"].shape[:2]
        valid = torch.arange(T, device=lengths.device)[None, :] < lengths[:, None]  # [B, T]
        # garbage zeroed in place, so that an error's index is the slot's [b, t, ...]
        pick = lambda t: torch.where(valid.reshape(B, T, *([1] * (t.dim() - 2))), t, 0)  # noqa: E731
        check_scale_values(cache_scales, lambda t: t[valid])  # zero is no valid scale: select the read ones
    else:
        if not lengths.numel() or int(lengths.max()) == 0:
            check_scale_values(cache_scales, lambda t: t[:0])  # no slot is read; static scales still are
            return
        rows, slots = valid_physical_slots(page_table, lengths, named["shared_k"].shape[1])
        pick = lambda t: t[rows, slots]  # noqa: E731
        check_scale_values(cache_scales, pick)
    for name in CACHE_INPUTS:
        t = named.get(name)
        if t is not None and not torch.isfinite(pick(as_checkable(t))).all():
            raise ValueError(f"{name} contains NaN or Inf inside the valid length of some sequence")
    if named.get("key_scale") is not None:
        check_key_scale_sign(pick(named["key_scale"]))


def _named(q, cache, basis_k, basis_v, **more) -> dict:
    """Every tensor of a call by the contract's name (key_scale only when given), each checked a tensor."""
    named = dict(q=q, **dict(zip(PARTS, cache.parts)), basis_k=basis_k, basis_v=basis_v,
                 lengths=cache.lengths, **more)
    if cache.key_scale is not None:
        named["key_scale"] = cache.key_scale
    check_tensors(named)
    return named


def validate_paged_inputs(q, cache, basis_k, basis_v, *, scale, rope=None, check_finite: bool = True,
                          ) -> tuple[int, int, int, int, int, int, int]:
    """The paged decode contract of DESIGN §4 (layout of §3).

    shared_k/v [P, page, d_h], latent_k/v [P, page, H, r], key_scale [P, page, H],
    page_table [B, max_pages] int32: logical slot t of sequence b lives in physical page
    page_table[b, t // page] at row t % page. Entries covering [0, lengths[b]) must lie in
    [0, P); the others are never read and may hold anything (e.g. -1). An fp8 cache's
    per-token scales are paged like key_scale ([P, page] / [P, page, H]).

    Returns (B, H, d_h, r, P, page_size, max_pages).
    """
    page_table, lengths, cache_scales = cache.page_table, cache.lengths, cache.scales
    named = _named(q, cache, basis_k, basis_v, page_table=page_table)
    if q.dim() != 3:
        raise ValueError(f"q must be [B, H, d_h], got shape {list(q.shape)}")
    if page_table.dim() != 2:
        raise ValueError(f"page_table must be [B, max_pages], got shape {list(page_table.shape)}")
    B, H, d_h = q.shape
    P, page = check_cache(named, B=B, H=H, d_h=d_h, paged=True)
    check_shape("page_table", page_table, (B, page_table.shape[1]))
    check_dtypes_and_device(named)
    check_cache_scales(named, cache_scales, rows=P, slots=page, heads=H)
    check_page_table(page_table, lengths, num_pages=P, page=page)
    check_sizes(H, d_h)
    check_scale_and_rope(scale, rope, d_h)
    if check_finite:
        check_finite_query_and_bases(named)
        check_finite_cache(named, lengths, page_table, cache_scales=cache_scales)
    return B, H, d_h, cache.latent_k.shape[3], P, page, page_table.shape[1]


# ----------------------------------------------------------------------------- append
def check_append_entries(entries, cache_tensors: dict, *, B: int, quantized: tuple[str, ...] = ()) -> None:
    """The projected token `append` writes into a cache of any family: for each cache tensor
    ([B, T, ...] or pages [P, page, ...]) an entry of shape [B, ...], in the cache's own dtype
    (append never rounds: float64 entries for a bfloat16 cache are the caller's rounding to
    do), on its device, finite (the slot becomes valid and is read), and a key_scale >= 0 (an
    inverse RMS). The parts named in `quantized` (an fp8 cache's, which append quantizes)
    take any float dtype but fp8 instead: rounding to fp8 is the quantizer's job."""
    expected = {name: (B, *t.shape[2:]) for name, t in cache_tensors.items()}
    if not isinstance(entries, dict):
        raise TypeError(f"entries must be a dict of tensors, got {type(entries).__name__}")
    for name, t in cache_tensors.items():
        if name not in entries:
            raise ValueError(f"entries lacks {name!r}, which the cache holds")
        e = entries[name]
        if not isinstance(e, torch.Tensor):
            raise TypeError(f"entries[{name!r}] must be a torch.Tensor, got {type(e).__name__}")
        if tuple(e.shape) != expected[name]:
            raise ValueError(f"entries[{name!r}] must have shape {list(expected[name])}, got {list(e.shape)}")
        if not e.is_floating_point():
            raise TypeError(f"entries[{name!r}] must be floating point, got {e.dtype}")
        if name in quantized:
            if is_fp8(e.dtype):
                raise TypeError(f"entries[{name!r}] has dtype {e.dtype}: an fp8 cache's entries come at compute "
                                "precision and append quantizes them with the cache's scales")
        elif e.dtype != t.dtype:
            raise TypeError(f"entries[{name!r}] has dtype {e.dtype} but the cache holds {t.dtype}: round the "
                            "entries to the cache dtype first (append writes them as given)")
        if e.device != t.device:
            raise ValueError(f"entries[{name!r}] is on {e.device}, the cache on {t.device}")
        if not torch.isfinite(e).all():
            raise ValueError(f"entries[{name!r}] contains NaN or Inf: the slot it fills is read by every "
                             "later decode")
    if "key_scale" in cache_tensors:
        check_key_scale_sign(entries["key_scale"])


# ----------------------------------------------------------------------------- extend
def check_cu_seqlens(cu_seqlens_q, lengths, n_tokens: int) -> None:
    """cu_seqlens_q [B+1] int32: cu[0] = 0, non-decreasing, cu[B] = N, and no sequence
    extends by more tokens than it holds (n_b = cu[b+1] − cu[b] <= lengths[b])."""
    if cu_seqlens_q.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"cu_seqlens_q must be int32 (or int64), got {cu_seqlens_q.dtype}")
    cu = cu_seqlens_q.long()
    if int(cu[0]) != 0:
        raise ValueError(f"cu_seqlens_q[0] must be 0, got {int(cu[0])}")
    n = cu[1:] - cu[:-1]  # [B]
    if (n < 0).any():
        b = int((n < 0).nonzero()[0])
        raise ValueError(f"cu_seqlens_q must be non-decreasing: cu_seqlens_q[{b + 1}] = {int(cu[b + 1])} < "
                         f"cu_seqlens_q[{b}] = {int(cu[b])}")
    if int(cu[-1]) != n_tokens:
        raise ValueError(f"cu_seqlens_q[-1] must equal the number of query tokens q.shape[0] = {n_tokens}, "
                         f"got {int(cu[-1])}")
    over = n > lengths.long()
    if over.any():
        b = int(over.nonzero()[0])
        raise ValueError(f"sequence {b} extends by n_b = {int(n[b])} tokens but its length (cache tokens, "
                         f"the new ones included) is {int(lengths[b])}: cu_seqlens_q and lengths disagree")


def validate_extend_inputs(q, cu_seqlens_q, cache, basis_k, basis_v, *, scale, rope=None, check_finite: bool = True,
                           ) -> tuple[int, int, int, int, int]:
    """The extend contract of DESIGN §4: q [N, H, d_h] ragged by cu_seqlens_q [B+1]; the cache
    contiguous ([B, T_max, ...]) or, with page_table [B, max_pages], paged ([P, page, ...]).

    Returns (N, B, H, d_h, r).
    """
    page_table, lengths, cache_scales = cache.page_table, cache.lengths, cache.scales
    more = dict(cu_seqlens_q=cu_seqlens_q)
    if page_table is not None:
        more["page_table"] = page_table
    named = _named(q, cache, basis_k, basis_v, **more)
    if q.dim() != 3:
        raise ValueError(f"q must be [N, H, d_h] (all sequences' new tokens), got shape {list(q.shape)}")
    if cu_seqlens_q.dim() != 1 or cu_seqlens_q.shape[0] < 1:
        raise ValueError(f"cu_seqlens_q must be [B+1], got shape {list(cu_seqlens_q.shape)}")
    N, H, d_h = q.shape
    B = cu_seqlens_q.shape[0] - 1
    if lengths.dim() != 1 or lengths.shape[0] != B:
        raise ValueError(f"cu_seqlens_q has B+1 = {B + 1} entries, so lengths must have shape [{B}], got "
                         f"{list(lengths.shape)}")
    if page_table is not None and page_table.dim() != 2:
        raise ValueError(f"page_table must be [B, max_pages], got shape {list(page_table.shape)}")
    rows, T = check_cache(named, B=B, H=H, d_h=d_h, paged=page_table is not None)
    check_dtypes_and_device(named)
    check_cache_scales(named, cache_scales, rows=rows, slots=T, heads=H)
    if page_table is None:
        if B and (int(lengths.min()) < 0 or int(lengths.max()) > T):
            raise ValueError(f"lengths must lie in [0, T_max={T}], got min {int(lengths.min())}, "
                             f"max {int(lengths.max())}")
    else:
        check_shape("page_table", page_table, (B, page_table.shape[1]))
        check_page_table(page_table, lengths, num_pages=rows, page=T)
    check_cu_seqlens(cu_seqlens_q, lengths, N)
    check_sizes(H, d_h)
    check_scale_and_rope(scale, rope, d_h)
    if check_finite:
        check_finite_query_and_bases(named)
        check_finite_cache(named, lengths, page_table, cache_scales=cache_scales)
    return N, B, H, d_h, cache.latent_k.shape[3]


def validate_cache_inputs(q, cache, basis_k, basis_v, *, scale, rope=None, cu_seqlens_q=None):
    """The contract check of a call on a `FactoredCache`: extend's with cu_seqlens_q, else paged
    decode's (a page table) or decode's — the tensors checked as the contract names them."""
    if cu_seqlens_q is not None:
        return validate_extend_inputs(q, cu_seqlens_q, cache, basis_k, basis_v, scale=scale, rope=rope)
    if cache.paged:
        return validate_paged_inputs(q, cache, basis_k, basis_v, scale=scale, rope=rope)
    return validate_decode_inputs(q, cache, basis_k, basis_v, scale=scale, rope=rope)
