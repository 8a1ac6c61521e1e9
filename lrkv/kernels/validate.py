"""Checks that run BEFORE any kernel launch (DESIGN §4: an out-of-bounds access must be
impossible). Every failure is a ValueError or TypeError that names the argument.

The contracts (decode, paged decode, extend) are checked by
`lrkv.reference.contract.validate_cache_inputs` (shapes, dtypes, devices, lengths, page
table, finiteness); this module adds what a kernel needs on top of them — strides inside
their storage and the launch options.
"""

from __future__ import annotations

import math

import torch

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


PRIVATE_CHOICES = ("wide", "per_head")
MAX_PROGRAMS_PER_SM = 64
MAX_BLOCK_Q = 64  # extend's query tokens per program: (token, head) rows live in registers


def check_launch_options(*, num_splits, group_size, block_t, num_warps, H: int, dot=None,
                         dtype: torch.dtype | None = None, interpreted: bool = False, private=None,
                         programs_per_sm=None, block_q=None, extend: bool = False, rope_exact: bool = False) -> None:
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
    if private is not None and private not in PRIVATE_CHOICES:
        raise ValueError(f"private must be one of {PRIVATE_CHOICES} or None, got {private!r}")
    if programs_per_sm is not None:
        _int("programs_per_sm", programs_per_sm)
        if not 1 <= programs_per_sm <= MAX_PROGRAMS_PER_SM:
            raise ValueError(f"programs_per_sm must lie in [1, {MAX_PROGRAMS_PER_SM}], got {programs_per_sm}")
    if block_q is not None:
        _int("block_q", block_q)
        if not 1 <= block_q <= MAX_BLOCK_Q:
            raise ValueError(f"block_q must lie in [1, {MAX_BLOCK_Q}], got {block_q}")
        if block_q > 1 and not extend:
            raise ValueError(f"block_q={block_q}: query-token blocks are extend's (cu_seqlens_q); decode has one "
                             "token per sequence")
        if block_q > 1 and rope_exact:
            raise ValueError(f"block_q={block_q} with exact RoPE: its query is rotated per head and slot, so it runs "
                             "one token per program (block_q=1)")
        if block_q > 1 and dot == "fma":
            raise ValueError(f"block_q={block_q} with dot='fma': a token block's products need tl.dot")
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


def next_pow2(n: int, floor: int = 1) -> int:
    return max(floor, 1 << max(0, math.ceil(math.log2(max(n, 1)))))
