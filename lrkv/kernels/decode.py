"""Fused split-K factored decode (paper Eqs. 6–7) — the public wrappers and the custom op.

    decode_attention(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
                     *, scale, key_scale=None, rope=None, ...)          contiguous cache
    paged_decode_attention(..., lengths, page_table, *, scale, ...)    paged cache

Both implement the kernel-level contract of DESIGN §4 and return out [B, H, d_h] in q's
dtype and lse [B, H] in the accumulation dtype (float32, float64 for float64 inputs). They validate every argument before launch, pick the launch
shape, then call `torch.ops.lrkv.factored_decode`, registered with
`torch.library.triton_op` so `torch.compile` sees (and can fuse around) the two Triton
kernels on a GPU. In fallback mode (no GPU, TRITON_INTERPRET unset, see
`lrkv.kernels.runtime`) the wrappers compute the float64 reference math instead.

Launch shape (all overridable, see `LaunchConfig`):
  * heads per program (`group_size`): up to 16, balanced — H = 18 runs as 2 groups of 9.
    Each group re-reads the shared K/V stream once, so fewer groups = fewer bytes; the
    group is padded to BLOCK_H >= 16 rows anyway (tl.dot's minimum M), and 16 real rows
    keep the [BLOCK_H, d_h] query and accumulator blocks small.
  * `block_t`: 32 when the padded [BLOCK_H, r] blocks are small, else 16 (registers:
    `python3 -m lrkv.kernels.compile_check` shows what spills); larger in the interpreter.
  * `num_splits`: from T — about `programs_per_sm` (b, group, split) programs per SM, each
    split at least 256 slots, at most MAX_SPLITS; a user-given count is used as is, even
    when it leaves splits empty (the tests use 17 splits over 37 slots).
  * `private`: how the private (rank-r) stream is read. "wide" (the default wherever it
    applies): the group's latents as one [BLOCK_T, G·r] tile, every head's private logits
    and value accumulation in one tl.dot each against a block-diagonal operand; the group is
    then sized so that G·r fits WIDE_MAX_COLUMNS. "per_head": one [BLOCK_T, r] tile and
    product per head (float64 on a GPU, whose products are broadcast-and-sum, always).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch.library import triton_op, wrap_triton

from ..reference.contract import validate_decode_inputs
from ..reference.lrkv import accumulation_dtype
from ..reference.lrkv import decode_attention as reference_decode_attention
from ..reference.rope import ExactRope, rope_freqs
from . import runtime
from .kernel_mutants import mutant_code
from .validate import (
    MAX_SPLITS,
    check_kernel_extras,
    check_launch_options,
    next_pow2,
    validate_paged_inputs,
)

MIN_SPLIT_SLOTS = 256  # a split shorter than this spends more on its partials than it saves
MAX_GROUP = 16  # heads per program by default (BLOCK_H >= 16 anyway: tl.dot needs M >= 16)
WIDE_MAX_COLUMNS = 512  # default cap on G·r for the wide private tile (registers; compile_check)
WIDE_LIMIT_COLUMNS = 2048  # an explicit group_size may go this far; past it the tile cannot fit
PROGRAMS_PER_SM = 2  # default occupancy target of the split heuristic (the committed H200 runs)
PRIVATE_MODES = ("wide", "per_head")
MAX_BLOCK_B = 1024  # extend: sequences scanned per step when a program looks up its sequence

# Tile-product modes (the kernels' DOT constexpr, see _kernels.py):
#   ieee   fp32 (or fp64) tl.dot without TF32 — the interpreter; exact-ish, slow on a GPU
#   lp     16-bit tensor cores, the fp32 left operand split into hi + lo 16-bit halves
#   fma    broadcast-and-sum, no tl.dot — float64 on a GPU
#   tf32x3 three TF32 tensor-core products — float32 on a GPU, on request
DOT_MODES = {"ieee": 0, "lp": 1, "fma": 2, "tf32x3": 3}


def default_dot(dtype: torch.dtype, on_gpu: bool) -> str:
    """The tile-product mode for an input dtype. The interpreter has no bfloat16 matmul, so
    bfloat16 is cast to float32 there (DESIGN §8); float16 runs the GPU's split path."""
    if dtype == torch.float64:
        return "fma" if on_gpu else "ieee"
    if dtype == torch.float32:
        # "ieee" on the GPU too (FMA products, no tensor cores): float32 is the tight-check
        # dtype, and tf32x3's extra 2^-22 per product would blur it; bf16 is the fast path.
        return "ieee"
    if dtype == torch.float16:
        return "lp"
    return "lp" if on_gpu else "ieee"


@dataclass(frozen=True)
class LaunchConfig:
    """How one decode call is laid out on the device."""

    num_splits: int  # KV splits per (batch row, head group); stage 2 merges them
    split_size: int  # slots per split (the last split may be short or empty)
    group_size: int  # real heads per program
    n_groups: int  # cdiv(H, group_size)
    block_h: int  # group padded to a power of two >= 16 (tl.dot's minimum M)
    block_t: int  # slots per tile
    block_d: int  # d_h padded to a power of two >= 16
    block_r: int  # r padded to a power of two >= 16 (masked: ranks need not be powers of two)
    num_warps: int
    dot: str  # how tile products run: 'ieee' | 'lp' | 'fma' | 'tf32x3' (see DOT_MODES)
    acc_fp64: bool  # accumulate in float64 (float64 inputs), else float32
    private: str = "per_head"  # 'wide' | 'per_head': how the rank-r stream is read (see module doc)
    block_gr: int = 16  # the wide tile's columns: group_size · r padded to a power of two >= 16
    programs_per_sm: int = PROGRAMS_PER_SM  # the split heuristic's occupancy target


def _num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 1  # the interpreter runs programs one after another: splitting only adds work


def wide_applies(r: int, dot: str) -> tuple[bool, str]:
    """Whether the wide private tile can run: (ok, why not)."""
    if r < 1:
        return False, f"r = {r}: there is no private stream to read"
    if dot == "fma":
        return False, "the wide private tile needs tl.dot; dot='fma' (float64 on a GPU) has none"
    if next_pow2(r, 16) > WIDE_LIMIT_COLUMNS:
        return False, f"r = {r} does not fit one wide tile (at most {WIDE_LIMIT_COLUMNS} columns)"
    return True, ""


def pick_launch(
    *, B: int, H: int, d_h: int, r: int, slots: int, dtype: torch.dtype, device: torch.device,
    num_splits: int | None = None, group_size: int | None = None, block_t: int | None = None,
    num_warps: int | None = None, dot: str | None = None, private: str | None = None,
    programs_per_sm: int | None = None, rope_exact: bool = False,
) -> LaunchConfig:
    """The launch shape for a call; every argument left None is chosen from the sizes.
    For extend, B is the number of query tokens (the rows of the grid)."""
    on_gpu = device.type == "cuda" and not runtime.is_interpreted()
    dot = default_dot(dtype, on_gpu) if dot is None else dot
    if private is None:
        # Exact RoPE's private logits are per head and slot in either path (a rotated query per
        # head, projected through B_h^K every tile), so on a GPU it takes the per-head path
        # with its own tile (below): larger tiles amortise each B_h^K re-read over more slots.
        wide_ok = wide_applies(r, dot)[0] and not (rope_exact and on_gpu)
        private = "wide" if wide_ok else "per_head"
    if group_size is None:
        cap = MAX_GROUP
        if private == "wide":
            cap = max(1, min(MAX_GROUP, WIDE_MAX_COLUMNS // max(r, 1)))
        n_groups = -(-H // cap)
        group_size = -(-H // n_groups)  # balanced: 18 heads -> 2 x 9, not 16 + 2
    n_groups = -(-H // group_size)
    block_h = next_pow2(group_size, 16)
    block_d = next_pow2(d_h, 16)
    block_r = next_pow2(r, 16)
    block_gr = next_pow2(group_size * r, 16) if private == "wide" else 16
    if block_t is None:
        block_t = 32 if block_h * block_r <= 512 and dot != "fma" else 16
        if on_gpu and dot != "fma":
            if rope_exact and private == "per_head":
                # Not yet measured: 32-slot tiles at 8 warps spill 40 bytes for sm_90
                # (compile_check), where the 64-slot, 4-warp shape measured on the H200 (6.54 ms,
                # 5.2x rope none) spills 1640 — and 16-slot tiles re-read B_h^K twice as often.
                block_t = 32
            elif private == "wide":
                # Not yet measured: the largest tile that compiles for sm_90 without spills at
                # both paper scales (compile_check: 16 slots x 512 columns, 8 warps, 187
                # registers; 32 slots spill). The GPU sweep of `lrkv bench` decides.
                block_t = 16
            else:
                # Measured on an H200 (ci/gpu-check sweep; H=18, d_h=128, r=55, B=8, T=32K, bf16):
                # 64-slot tiles at 4 warps ran 4.5x faster than 16-slot tiles at 8 warps.
                block_t = 64
        if not on_gpu and runtime.is_interpreted():
            # the interpreter pays per operation, not per element: few big tiles (but still
            # several per sequence, so short cases keep exercising the online rescale)
            block_t = min(128, max(block_t, next_pow2(-(-slots // 8))))
    programs_per_sm = PROGRAMS_PER_SM if programs_per_sm is None else programs_per_sm
    if num_splits is None:
        want = max(1, -(-programs_per_sm * _num_sms(device) // max(1, B * n_groups)))
        by_length = max(1, -(-slots // MIN_SPLIT_SLOTS))
        num_splits = max(1, min(want, by_length, MAX_SPLITS))
        split_size = -(-max(slots, 1) // num_splits)
        split_size = -(-split_size // block_t) * block_t  # whole tiles per split
        num_splits = max(1, -(-max(slots, 1) // split_size))
    else:
        split_size = max(1, -(-slots // num_splits))
    if num_warps is None:
        num_warps = 8 if block_d * block_r >= 4096 else 4  # 4 warps spill at d_h=128, r=64 ...
        if on_gpu and dot != "fma" and block_t >= 64 and private == "per_head":
            num_warps = 4  # ... yet measured fastest with 64-slot tiles (see block_t above)
        if on_gpu and (private == "wide" or rope_exact) and dot != "fma":
            num_warps = 8  # 4 warps spill with the [16, 512] accumulator and tiles (compile_check)
    return LaunchConfig(num_splits, split_size, group_size, n_groups, block_h, block_t, block_d, block_r,
                        num_warps, dot, dtype == torch.float64, private, block_gr, programs_per_sm)


@functools.lru_cache(maxsize=4)  # 128K slots x d_h 128 x fp32 is 64 MiB per table: keep few
def _rope_tables_cached(slots: int, d_h: int, theta: float, dtype: torch.dtype, device: str):
    # Angles in float64, cast once — the same tables as lrkv.reference.rope.apply_rope.
    freqs = rope_freqs(d_h, theta)
    ang = torch.arange(slots, dtype=torch.float64)[:, None] * freqs[None, :]  # [slots, d_h/2]
    cos = torch.cat((ang.cos(), ang.cos()), dim=-1).to(dtype).to(device).contiguous()  # [slots, d_h]
    sin = torch.cat((ang.sin(), ang.sin()), dim=-1).to(dtype).to(device).contiguous()
    return cos, sin


def rope_tables(slots: int, d_h: int, theta: float, dtype: torch.dtype, device) -> tuple[torch.Tensor, torch.Tensor]:
    """cos/sin [slots, d_h] for exact RoPE at logical slot j (rotate-half, duplicated halves).

    Built for the next power of two of `slots` and sliced, so nearby cache sizes share one
    table (rows are per position, so a prefix of a longer table is the shorter table)."""
    cos, sin = _rope_tables_cached(next_pow2(max(slots, 1)), d_h, float(theta), dtype, str(torch.device(device)))
    return cos[:slots], sin[:slots]


def hr_contiguous(*latents: torch.Tensor) -> bool:
    """Whether every latent cache has the usual [.., H, r] layout with r contiguous and heads
    adjacent (stride(2) == r, stride(3) == 1): a head group's latents of one slot are then one
    contiguous run, which the wide private tile reads as such (HR_CONTIG)."""
    return all(t.stride(3) == 1 and t.stride(2) == t.shape[3] for t in latents)


def tile_in_page(page_size: int, block_t: int, split_size: int | None = None) -> bool:
    """Whether every tile of a paged launch lies inside one page: page_size and every tile
    start (split starts are multiples of split_size, tiles step by block_t) are multiples of
    block_t. The kernel then reads the page table once per tile (TILE_IN_PAGE)."""
    return page_size % block_t == 0 and (split_size is None or split_size % block_t == 0)


def _strides(t: torch.Tensor | None, n: int) -> list[int]:
    return list(t.stride()) if t is not None else [0] * n


# ----------------------------------------------------------------------------- custom op
@triton_op("lrkv::factored_decode", mutates_args=())
def factored_decode(
    q: torch.Tensor,  # [B, H, d_h]
    shared_k: torch.Tensor,  # [B, T, d_h] or paged [P, page, d_h]
    shared_v: torch.Tensor,
    latent_k: torch.Tensor,  # [B, T, H, r] or paged [P, page, H, r]
    latent_v: torch.Tensor,
    basis_k: torch.Tensor,  # [H, d_h, r]
    basis_v: torch.Tensor,
    lengths: torch.Tensor,  # [B]
    page_table: torch.Tensor | None,  # [B, max_pages] int32, or None (contiguous)
    key_scale: torch.Tensor | None,  # [B, T, H] or paged [P, page, H]
    rope_cos: torch.Tensor | None,  # [slots, d_h] (exact RoPE only)
    rope_sin: torch.Tensor | None,
    scale: float,
    num_splits: int,
    split_size: int,
    group_size: int,
    block_t: int,
    num_warps: int,
    dot: int,
    mutant: int,
    wide: bool = False,
    cu_seqlens_q: torch.Tensor | None = None,  # [B+1] int32: extend (q is then [N, H, d_h])
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch stage 1 (splits) on a (rows, head groups, splits) grid — a row is a batch row,
    or with `cu_seqlens_q` a query token of the ragged extend batch — then stage 2 (merge)
    on (rows, heads). No checks here: the wrappers validate, and this body must stay
    traceable by torch.compile (no data-dependent Python)."""
    K = runtime.kernels()
    B, H, D = q.shape  # B: rows (extend: N query tokens)
    R = latent_k.shape[3]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    paged = page_table is not None
    page = shared_k.shape[1] if paged else 1
    n_pages = shared_k.shape[0] if paged else 0
    max_pages = page_table.shape[1] if paged else 0
    slots = max_pages * page if paged else shared_k.shape[1]
    n_groups = -(-H // group_size)
    block_h = next_pow2(group_size, 16)
    block_d, block_r = next_pow2(D, 16), next_pow2(R, 16)
    block_gr = next_pow2(group_size * R, 16) if wide else 16

    m_part = torch.empty((B, H, num_splits), dtype=acc, device=q.device)
    l_part = torch.empty((B, H, num_splits), dtype=acc, device=q.device)
    acc_s = torch.empty((B, H, num_splits, D), dtype=acc, device=q.device)
    acc_p = torch.empty((B, H, num_splits, R), dtype=acc, device=q.device)
    # the separate-softmax mutant's second (max, sum) pair; the correct kernel never writes it
    m2_part, l2_part = (torch.empty_like(m_part), torch.empty_like(l_part)) if mutant == 7 else (m_part, l_part)
    out = torch.empty((B, H, D), dtype=acc, device=q.device)
    lse = torch.empty((B, H), dtype=acc, device=q.device)
    if B == 0:
        return out.to(q.dtype), lse
    scale_t = torch.full((1,), scale, dtype=acc, device=q.device)
    ks = key_scale if key_scale is not None else q  # never read when HAS_KS is False
    cos = rope_cos if rope_cos is not None else q
    sin = rope_sin if rope_sin is not None else q
    pt = page_table if paged else lengths

    wrap_triton(K.decode_split_kernel)[(B, n_groups, num_splits)](
        q, shared_k, shared_v, latent_k, latent_v, basis_k, ks, cos, sin, lengths, pt, scale_t,
        m_part, l_part, acc_s, acc_p, m2_part, l2_part,
        H, D, R, split_size, page, n_pages, max_pages, num_splits, slots,
        *q.stride(), *shared_k.stride(), *shared_v.stride(), *latent_k.stride(), *latent_v.stride(),
        *basis_k.stride(), *_strides(key_scale, 3),
        *(rope_cos.stride() if rope_cos is not None else (0, 0)),
        *(page_table.stride() if paged else (0, 0)),
        GROUP=group_size, BLOCK_H=block_h, BLOCK_T=block_t, BLOCK_D=block_d, BLOCK_R=block_r,
        HAS_KS=key_scale is not None, ROPE_EXACT=rope_cos is not None, PAGED=paged,
        DOT=dot, ACC_FP64=acc == torch.float64, MUTANT=mutant, WIDE=wide, BLOCK_GR=block_gr,
        HR_CONTIG=hr_contiguous(latent_k, latent_v), TILE_IN_PAGE=paged and tile_in_page(page, block_t, split_size),
        num_warps=num_warps,
        # always passed (decode: never read): torch.compile's handling of user Triton kernels
        # is safest with every runtime argument given
        CU=lengths if cu_seqlens_q is None else cu_seqlens_q,
        NSEQ=B if cu_seqlens_q is None else cu_seqlens_q.shape[0] - 1,
        EXTEND=cu_seqlens_q is not None,
        BLOCK_B=16 if cu_seqlens_q is None else min(next_pow2(cu_seqlens_q.shape[0] - 1, 16), MAX_BLOCK_B),
    )
    wrap_triton(K.decode_combine_kernel)[(B, H)](
        m_part, l_part, acc_s, acc_p, m2_part, l2_part, basis_v, out, lse,
        H, D, R, num_splits, *basis_v.stride(),
        BLOCK_S=next_pow2(num_splits, 2), BLOCK_D=block_d, BLOCK_R=block_r,
        ACC_FP64=acc == torch.float64, MUTANT=mutant, num_warps=4,
    )
    # lse stays in the accumulation dtype (DESIGN §4): merging partial states needs fp32
    return out.to(q.dtype), lse


# ----------------------------------------------------------------------------- wrappers
def _device_ok(t: torch.Tensor) -> tuple[bool, str]:
    which, why = runtime.mode()
    if which == "cuda" and t.device.type != "cuda":
        return False, "the Triton kernels are compiled for CUDA here; move the inputs to the GPU"
    if which == "interpreter" and t.device.type not in ("cpu", "cuda"):
        return False, "the Triton interpreter takes CPU (or CUDA) tensors"
    return True, ""


def _launch(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, page_table, *,
            scale, key_scale, rope, slots, num_splits, group_size, block_t, num_warps, mutant, dot,
            private=None, programs_per_sm=None):
    B, H, d_h = q.shape
    r = latent_k.shape[3]
    cfg = pick_launch(B=B, H=H, d_h=d_h, r=r, slots=slots, dtype=q.dtype, device=q.device,
                      num_splits=num_splits, group_size=group_size, block_t=block_t,
                      num_warps=num_warps, dot=dot, private=private, programs_per_sm=programs_per_sm,
                      rope_exact=rope is not None)
    cos = sin = None
    if rope is not None:
        cos, sin = rope_tables(slots, d_h, rope.theta, torch.float64 if cfg.acc_fp64 else torch.float32,
                               q.device)
    return torch.ops.lrkv.factored_decode(
        q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, page_table, key_scale,
        cos, sin, float(scale), cfg.num_splits, cfg.split_size, cfg.group_size, cfg.block_t,
        cfg.num_warps, DOT_MODES[cfg.dot], mutant_code(mutant), cfg.private == "wide",
    )


def _fallback(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, *, scale,
              key_scale, rope):
    # Reference math (Eqs. 6–7) in float64, cast back: what the kernel computes, minus the kernel.
    f = lambda t: None if t is None else t.to(torch.float64)  # noqa: E731
    out, lse = reference_decode_attention(
        f(q), f(shared_k), f(shared_v), f(latent_k), f(latent_v), f(basis_k), f(basis_v), lengths,
        scale=scale, key_scale=f(key_scale), rope=rope, check=False)
    return out.to(q.dtype), lse.to(accumulation_dtype(q.dtype))


def _check_launch(q: torch.Tensor, tensors: dict, *, num_splits, group_size, block_t, num_warps, dot,
                  mutant, private=None, programs_per_sm=None, r: int) -> None:
    """The kernel-side checks both layouts share, after the layout's own contract check:
    launch options, the mutant name, and (when a kernel will run) device placement and strides."""
    check_launch_options(num_splits=num_splits, group_size=group_size, block_t=block_t,
                         num_warps=num_warps, H=q.shape[1], dot=dot, dtype=q.dtype,
                         interpreted=runtime.is_interpreted(), private=private,
                         programs_per_sm=programs_per_sm)
    if private == "wide":
        on_gpu = q.device.type == "cuda" and not runtime.is_interpreted()
        ok, why = wide_applies(r, default_dot(q.dtype, on_gpu) if dot is None else dot)
        if not ok:
            raise ValueError(f"private='wide': {why}")
        if group_size is not None and next_pow2(group_size * r, 16) > WIDE_LIMIT_COLUMNS:
            raise ValueError(f"private='wide' with group_size={group_size} and r={r} needs a "
                             f"{next_pow2(group_size * r, 16)}-column tile; at most {WIDE_LIMIT_COLUMNS} "
                             f"fit: use group_size <= {max(1, WIDE_LIMIT_COLUMNS // r)}")
    mutant_code(mutant)
    if runtime.mode()[0] != "fallback":
        check_kernel_extras(dict(q=q, **tensors), d_h=q.shape[2], H=q.shape[1], device_ok=_device_ok)


def decode_attention(
    q: torch.Tensor,  # [B, H, d_h]  rotated/normed, k-gain folded in
    shared_k: torch.Tensor,  # [B, T_max, d_h]
    shared_v: torch.Tensor,  # [B, T_max, d_h]
    latent_k: torch.Tensor,  # [B, T_max, H, r]
    latent_v: torch.Tensor,  # [B, T_max, H, r]
    basis_k: torch.Tensor,  # [H, d_h, r]
    basis_v: torch.Tensor,  # [H, d_h, r]
    lengths: torch.Tensor,  # [B] int32/int64
    *,
    scale: float,
    key_scale: torch.Tensor | None = None,  # [B, T_max, H]
    rope: ExactRope | None = None,
    num_splits: int | None = None,
    group_size: int | None = None,
    block_t: int | None = None,
    num_warps: int | None = None,
    mutant: str | int | None = None,
    check: bool = True,
    dot: str | None = None,
    private: str | None = None,
    programs_per_sm: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Factored decode over a contiguous cache (Eqs. 6–7). Returns out [B, H, d_h], lse [B, H].

    `check=False` skips validation (for benchmarks that validated once); the kernel still
    masks every access, but garbage inputs then give garbage outputs.
    """
    if check:
        validate_decode_inputs(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
                               scale=scale, key_scale=key_scale, rope=rope)
        _check_launch(q, dict(shared_k=shared_k, shared_v=shared_v, latent_k=latent_k, latent_v=latent_v,
                              basis_k=basis_k, basis_v=basis_v, lengths=lengths, key_scale=key_scale),
                      num_splits=num_splits, group_size=group_size, block_t=block_t, num_warps=num_warps,
                      dot=dot, mutant=mutant, private=private, programs_per_sm=programs_per_sm,
                      r=latent_k.shape[3])
    if runtime.mode()[0] == "fallback":
        if mutant_code(mutant):
            raise RuntimeError("kernel mutants need the kernel: no GPU and TRITON_INTERPRET unset")
        return _fallback(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
                         scale=scale, key_scale=key_scale, rope=rope)
    return _launch(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, None,
                   scale=scale, key_scale=key_scale, rope=rope, slots=shared_k.shape[1],
                   num_splits=num_splits, group_size=group_size, block_t=block_t, num_warps=num_warps,
                   mutant=mutant, dot=dot, private=private, programs_per_sm=programs_per_sm)


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
    num_splits: int | None = None,
    group_size: int | None = None,
    block_t: int | None = None,
    num_warps: int | None = None,
    mutant: str | int | None = None,
    check: bool = True,
    dot: str | None = None,
    private: str | None = None,
    programs_per_sm: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Factored decode over a paged cache: slot t of sequence b is page_table[b, t // page],
    row t % page. Exact RoPE rotates by the logical slot t. Same outputs as `decode_attention`."""
    if check:
        validate_paged_inputs(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
                              page_table, scale=scale, key_scale=key_scale, rope=rope)
        _check_launch(q, dict(shared_k=shared_k, shared_v=shared_v, latent_k=latent_k, latent_v=latent_v,
                              basis_k=basis_k, basis_v=basis_v, lengths=lengths, page_table=page_table,
                              key_scale=key_scale),
                      num_splits=num_splits, group_size=group_size, block_t=block_t, num_warps=num_warps,
                      dot=dot, mutant=mutant, private=private, programs_per_sm=programs_per_sm,
                      r=latent_k.shape[3])
    page = shared_k.shape[1]
    if runtime.mode()[0] == "fallback":
        if mutant_code(mutant):
            raise RuntimeError("kernel mutants need the kernel: no GPU and TRITON_INTERPRET unset")
        from .paged import gather_contiguous

        sk, sv, lk, lv, ks = gather_contiguous(page_table, page, shared_k, shared_v, latent_k, latent_v,
                                               key_scale)
        return _fallback(q, sk, sv, lk, lv, basis_k, basis_v, lengths, scale=scale, key_scale=ks, rope=rope)
    return _launch(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, page_table,
                   scale=scale, key_scale=key_scale, rope=rope, slots=page_table.shape[1] * page,
                   num_splits=num_splits, group_size=group_size, block_t=block_t, num_warps=num_warps,
                   mutant=mutant, dot=dot, private=private, programs_per_sm=programs_per_sm)
