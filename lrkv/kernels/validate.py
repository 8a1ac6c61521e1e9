"""Checks that run BEFORE any kernel launch (DESIGN §4: an out-of-bounds access must be
impossible). Every failure is a ValueError or TypeError that names the argument.

The contiguous decode contract is checked by `lrkv.reference.contract.validate_decode_inputs`
(shapes, dtypes, devices, lengths, finiteness); this module adds what a kernel needs on top
of it — strides inside their storage, the paged layout and its page table, the launch
options — and the same contract checks for the paged layout, which the reference contract
does not know.
"""

from __future__ import annotations

import math

import torch

from ..reference.contract import (
    check_dtypes_and_device, check_finite_query_and_bases, check_scale_and_rope, check_shape, check_tensors,
)

MAX_SPLITS = 256  # stage 2 holds all splits of one head in registers
BLOCK_T_CHOICES = (16, 32, 64, 128)
NUM_WARPS_CHOICES = (1, 2, 4, 8, 16)


def check_strides(name: str, t: torch.Tensor, *, writable: bool = False) -> None:
    """Every element the kernel can address lies inside the tensor's storage; a tensor the
    kernel writes must not alias itself (an expanded dim would make two programs race)."""
    if t.numel() == 0:
        return
    if any(s < 0 for s in t.stride()):
        raise ValueError(f"{name} has a negative stride {t.stride()}")
    last = t.storage_offset() + sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    n_storage = t.untyped_storage().nbytes() // t.element_size()
    if last >= n_storage:
        raise ValueError(f"{name} with shape {list(t.shape)} and strides {t.stride()} addresses element "
                         f"{last} of a storage of {n_storage}: it is not a valid view")
    if writable:
        dims = sorted((s, n) for n, s in zip(t.shape, t.stride()) if n > 1)
        span = 1
        for s, n in dims:
            if s < span:
                raise ValueError(f"{name} (strides {t.stride()}, shape {list(t.shape)}) overlaps itself; "
                                 "the kernel writes it, so it must not be an expanded or aliased view")
            span = s * n


DOT_CHOICES = ("ieee", "lp", "fma", "tf32x3")


def check_launch_options(*, num_splits, group_size, block_t, num_warps, H: int, dot=None,
                         dtype: torch.dtype | None = None, interpreted: bool = False) -> None:
    def _int(name, v):
        if isinstance(v, bool) or not isinstance(v, int):
            raise TypeError(f"{name} must be an int or None, got {type(v).__name__}")

    if num_splits is not None:
        _int("num_splits", num_splits)
        if not 1 <= num_splits <= MAX_SPLITS:
            raise ValueError(f"num_splits must lie in [1, {MAX_SPLITS}], got {num_splits}")
    if group_size is not None:
        _int("group_size", group_size)
        if not 1 <= group_size <= min(H, 64):
            raise ValueError(f"group_size must lie in [1, min(H={H}, 64)], got {group_size}")
    if block_t is not None:
        _int("block_t", block_t)
        if block_t not in BLOCK_T_CHOICES:
            raise ValueError(f"block_t must be one of {BLOCK_T_CHOICES}, got {block_t}")
    if num_warps is not None:
        _int("num_warps", num_warps)
        if num_warps not in NUM_WARPS_CHOICES:
            raise ValueError(f"num_warps must be one of {NUM_WARPS_CHOICES}, got {num_warps}")
    if dot is not None:
        if dot not in DOT_CHOICES:
            raise ValueError(f"dot must be one of {DOT_CHOICES} or None, got {dot!r}")
        if dot == "lp" and dtype not in (torch.float16, torch.bfloat16):
            raise ValueError(f"dot='lp' needs float16/bfloat16 inputs, got {dtype}")
        if dot == "lp" and dtype == torch.bfloat16 and interpreted:
            raise ValueError("dot='lp' with bfloat16 cannot run in the Triton interpreter (no bfloat16 matmul)")
        if dot in ("tf32x3",) and dtype != torch.float32:
            raise ValueError(f"dot='tf32x3' needs float32 inputs, got {dtype}")


def check_kernel_extras(named: dict[str, torch.Tensor], *, d_h: int, H: int, device_ok) -> None:
    """Kernel-side checks common to both layouts: sizes, device placement, strides."""
    if H < 1:
        raise ValueError(f"H (q.shape[1]) must be >= 1 for the kernel, got {H}")
    if d_h < 1:
        raise ValueError(f"d_h (q.shape[2]) must be >= 1 for the kernel, got {d_h}")
    for name, t in named.items():
        if t is None:
            continue
        ok, why = device_ok(t)
        if not ok:
            raise ValueError(f"{name} is on {t.device}: {why}")
        check_strides(name, t)




def validate_paged_inputs(
    q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, page_table, *,
    scale, key_scale=None, rope=None, check_finite: bool = True,
) -> tuple[int, int, int, int, int, int, int]:
    """The decode contract of DESIGN §4 for the paged layout of §3.

    shared_k/v [P, page, d_h], latent_k/v [P, page, H, r], key_scale [P, page, H],
    page_table [B, max_pages] int32: logical slot t of sequence b lives in physical page
    page_table[b, t // page] at row t % page. Entries covering [0, lengths[b]) must lie in
    [0, P); the others are never read and may hold anything (e.g. -1).

    Returns (B, H, d_h, r, P, page_size, max_pages).
    """
    named = dict(q=q, shared_k=shared_k, shared_v=shared_v, latent_k=latent_k, latent_v=latent_v,
                 basis_k=basis_k, basis_v=basis_v, lengths=lengths, page_table=page_table)
    if key_scale is not None:
        named["key_scale"] = key_scale
    check_tensors(named)
    if q.dim() != 3:
        raise ValueError(f"q must be [B, H, d_h], got shape {list(q.shape)}")
    if shared_k.dim() != 3:
        raise ValueError(f"shared_k must be [num_pages, page_size, d_h], got shape {list(shared_k.shape)}")
    if latent_k.dim() != 4:
        raise ValueError(f"latent_k must be [num_pages, page_size, H, r], got shape {list(latent_k.shape)}")
    if page_table.dim() != 2:
        raise ValueError(f"page_table must be [B, max_pages], got shape {list(page_table.shape)}")
    B, H, d_h = q.shape
    P, page, _ = shared_k.shape
    r = latent_k.shape[3]
    max_pages = page_table.shape[1]
    if page < 1:
        raise ValueError(f"page_size (shared_k.shape[1]) must be >= 1, got {page}")
    check_shape("shared_k", shared_k, (P, page, d_h))
    check_shape("shared_v", shared_v, (P, page, d_h))
    check_shape("latent_k", latent_k, (P, page, H, r))
    check_shape("latent_v", latent_v, (P, page, H, r))
    check_shape("basis_k", basis_k, (H, d_h, r))
    check_shape("basis_v", basis_v, (H, d_h, r))
    check_shape("lengths", lengths, (B,))
    check_shape("page_table", page_table, (B, max_pages))
    if key_scale is not None:
        check_shape("key_scale", key_scale, (P, page, H))
    check_dtypes_and_device(named)
    if page_table.dtype != torch.int32:
        raise TypeError(f"page_table must be int32, got {page_table.dtype}")
    capacity = max_pages * page
    if B and (int(lengths.min()) < 0 or int(lengths.max()) > capacity):
        raise ValueError(f"lengths must lie in [0, max_pages*page_size={capacity}], got min "
                         f"{int(lengths.min())}, max {int(lengths.max())}")
    if B:
        used = torch.arange(max_pages, device=lengths.device)[None, :] * page < lengths[:, None]  # [B, max_pages]
        bad = used & ((page_table < 0) | (page_table >= P))
        if bad.any():
            b, i = (int(x) for x in bad.nonzero()[0])
            raise ValueError(f"page_table[{b}, {i}] = {int(page_table[b, i])} is outside [0, num_pages={P}) "
                             f"but sequence {b} (length {int(lengths[b])}) reads that page")
    check_scale_and_rope(scale, rope, d_h)
    if check_finite:
        check_finite_query_and_bases(named)
        if B and int(lengths.max()) > 0:
            rows, slots = valid_physical_slots(page_table, lengths, page)
            for name in ("shared_k", "shared_v", "latent_k", "latent_v", "key_scale"):
                t = named.get(name)
                if t is not None and not torch.isfinite(t[rows, slots]).all():
                    raise ValueError(f"{name} contains NaN or Inf inside the valid length of some sequence")
    return B, H, d_h, r, P, page, max_pages


def valid_physical_slots(page_table: torch.Tensor, lengths: torch.Tensor, page: int):
    """(page index, row in page) of every valid (b, t < lengths[b]) slot, b-major."""
    B, max_pages = page_table.shape
    t = torch.arange(max_pages * page, device=page_table.device)
    valid = t[None, :] < lengths[:, None]  # [B, capacity]
    b_idx, t_idx = valid.nonzero(as_tuple=True)
    pages = page_table[b_idx, t_idx // page].long()
    return pages, t_idx % page


def next_pow2(n: int, floor: int = 1) -> int:
    return max(floor, 1 << max(0, math.ceil(math.log2(max(n, 1)))))
