"""Fused split-K factored decode (paper Eqs. 6–7) — the public wrappers and the custom op.

    decode_attention(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
                     *, scale, key_scale=None, rope=None, ...)          contiguous cache
    paged_decode_attention(..., lengths, page_table, *, scale, ...)    paged cache

Both implement the kernel-level contract of DESIGN §4 and return out [B, H, d_h] in q's
dtype and lse [B, H] in the accumulation dtype (float32, float64 for float64 inputs). They
validate every argument before launch, pick the launch shape, then call
`torch.ops.lrkv.factored_decode`, registered with
`torch.library.triton_op` so `torch.compile` sees (and can fuse around) the two Triton
kernels on a GPU. In fallback mode (no GPU, TRITON_INTERPRET unset, see
`lrkv.kernels.runtime`) the wrappers compute the float64 reference math instead.

The launch shape (tile, warps, head group, splits, private path) comes from the launch
table of `lrkv.kernels.launch` (`pick_launch`); every field can be overridden.
"""

from __future__ import annotations

import functools

import torch
from torch.library import triton_op, wrap_triton

from ..reference.contract import validate_decode_inputs
from ..reference.lrkv import accumulation_dtype
from ..reference.lrkv import decode_attention as reference_decode_attention
from ..reference.paged import paged_decode_attention as reference_paged_decode_attention
from ..reference.rope import ExactRope, rope_freqs
from . import runtime
from .kernel_mutants import check_mutant, mutant_code, mutant_wrapper
from .launch import DOT_MODES, WIDE_LIMIT_COLUMNS, default_dot, pick_launch, tile_in_page, wide_applies
from .validate import check_kernel_extras, check_launch_options, next_pow2, refuse_fp8_cache, validate_paged_inputs

MAX_BLOCK_B = 1024  # extend: sequences scanned per step when a program looks up its sequence


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
    mutant: int,  # the kernels' MUTANT switch (kernel_mutants.SWITCHES); 0: the correct kernel
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
        m_part, l_part, acc_s, acc_p,
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
        m_part, l_part, acc_s, acc_p, basis_v, out, lse,
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


def run_factored_decode(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, page_table, *,
            scale, key_scale, rope, slots, num_splits, group_size, block_t, num_warps, mutant, dot,
            private=None, programs_per_sm=None, cu_seqlens_q=None):
    """Pick the launch shape and run the custom op — decode, paged decode and (with
    `cu_seqlens_q`) extend alike. A wrapper mutant runs the op its own (wrong) way."""
    extend = cu_seqlens_q is not None
    rows, H, d_h = q.shape  # rows: B (extend: N query tokens)
    cfg = pick_launch(B=max(rows, 1) if extend else rows, H=H, d_h=d_h, r=latent_k.shape[3], slots=slots,
                      dtype=q.dtype, device=q.device, num_splits=num_splits, group_size=group_size,
                      block_t=block_t, num_warps=num_warps, dot=dot, private=private,
                      programs_per_sm=programs_per_sm, rope_exact=rope is not None, paged=page_table is not None,
                      extend=extend)
    cos = sin = None
    if rope is not None:
        cos, sin = rope_tables(slots, d_h, rope.theta, torch.float64 if cfg.acc_fp64 else torch.float32,
                               q.device)

    def launch(shared_k, shared_v, latent_k, latent_v):
        return torch.ops.lrkv.factored_decode(
            q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, page_table, key_scale,
            cos, sin, float(scale), cfg.num_splits, cfg.split_size, cfg.group_size, cfg.block_t,
            cfg.num_warps, DOT_MODES[cfg.dot], mutant_code(mutant), cfg.private == "wide", cu_seqlens_q,
        )

    cache = dict(shared_k=shared_k, shared_v=shared_v, latent_k=latent_k, latent_v=latent_v)
    wrapper = mutant_wrapper(mutant)
    return launch(**cache) if wrapper is None else wrapper(launch, cache)


def reference_fallback(fn, *args, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """Fallback mode (no GPU, TRITON_INTERPRET unset): the float64 reference `fn` on the float
    inputs upcast, cast back to the contract's dtypes — what the kernel computes, minus the
    kernel. Integer tensors (lengths, page tables, cu_seqlens) pass as they are."""
    f = lambda t: t.to(torch.float64) if isinstance(t, torch.Tensor) and t.is_floating_point() else t  # noqa: E731
    out, lse = fn(*map(f, args), **{k: f(v) for k, v in kwargs.items()}, check=False)
    return out.to(args[0].dtype), lse.to(accumulation_dtype(args[0].dtype))


def refuse_mutant_in_fallback(mutant) -> None:
    if check_mutant(mutant) is not None:
        raise RuntimeError("kernel mutants need the kernel: no GPU and TRITON_INTERPRET unset")


def check_launch(q: torch.Tensor, tensors: dict, *, num_splits, group_size, block_t, num_warps, dot,
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
    check_mutant(mutant)
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
    masks every access, but garbage inputs then give garbage outputs. An fp8 cache is refused
    either way (`refuse_fp8_cache`).
    """
    refuse_fp8_cache(dict(shared_k=shared_k, shared_v=shared_v, latent_k=latent_k, latent_v=latent_v),
                     "the Triton decode kernel")
    if check:
        validate_decode_inputs(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
                               scale=scale, key_scale=key_scale, rope=rope)
        check_launch(q, dict(shared_k=shared_k, shared_v=shared_v, latent_k=latent_k, latent_v=latent_v,
                             basis_k=basis_k, basis_v=basis_v, lengths=lengths, key_scale=key_scale),
                     num_splits=num_splits, group_size=group_size, block_t=block_t, num_warps=num_warps,
                     dot=dot, mutant=mutant, private=private, programs_per_sm=programs_per_sm,
                     r=latent_k.shape[3])
    if runtime.mode()[0] == "fallback":
        refuse_mutant_in_fallback(mutant)
        return reference_fallback(reference_decode_attention, q, shared_k, shared_v, latent_k, latent_v, basis_k,
                                  basis_v, lengths, scale=scale, key_scale=key_scale, rope=rope)
    return run_factored_decode(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, None,
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
    refuse_fp8_cache(dict(shared_k=shared_k, shared_v=shared_v, latent_k=latent_k, latent_v=latent_v),
                     "the Triton paged decode kernel")
    if check:
        validate_paged_inputs(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
                              page_table, scale=scale, key_scale=key_scale, rope=rope)
        check_launch(q, dict(shared_k=shared_k, shared_v=shared_v, latent_k=latent_k, latent_v=latent_v,
                             basis_k=basis_k, basis_v=basis_v, lengths=lengths, page_table=page_table,
                             key_scale=key_scale),
                     num_splits=num_splits, group_size=group_size, block_t=block_t, num_warps=num_warps,
                     dot=dot, mutant=mutant, private=private, programs_per_sm=programs_per_sm,
                     r=latent_k.shape[3])
    if runtime.mode()[0] == "fallback":
        refuse_mutant_in_fallback(mutant)
        return reference_fallback(reference_paged_decode_attention, q, shared_k, shared_v, latent_k, latent_v,
                                  basis_k, basis_v, lengths, page_table, scale=scale, key_scale=key_scale, rope=rope)
    return run_factored_decode(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, page_table,
                               scale=scale, key_scale=key_scale, rope=rope,
                               slots=page_table.shape[1] * shared_k.shape[1], num_splits=num_splits,
                               group_size=group_size, block_t=block_t, num_warps=num_warps, mutant=mutant, dot=dot,
                               private=private, programs_per_sm=programs_per_sm)
