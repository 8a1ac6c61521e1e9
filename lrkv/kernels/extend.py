"""Factored extend (DESIGN §4): several new tokens per sequence, causal — the public wrapper
and its custom op.

    extend_attention(q [N, H, d_h], cu_seqlens_q [B+1], shared_k, shared_v, latent_k, latent_v,
                     basis_k, basis_v, lengths, *, scale, key_scale=None, rope=None,
                     page_table=None, ...) -> (out [N, H, d_h], lse [N, H])

The n_b = cu[b+1] − cu[b] queries of sequence b are its last n_b tokens (positions
lengths[b] − n_b … lengths[b] − 1, already appended); each attends slots 0 … its position.
With `page_table` the cache tensors are pages, as in paged decode. `out` has q's dtype,
`lse` the accumulation dtype (float32; float64 for float64 inputs).

Like `decode_attention`, the wrapper validates every argument before launch
(`lrkv.reference.contract.validate_extend_inputs` plus the kernel-side checks), picks the
launch shape with `pick_launch` (one split: the N queries are the parallelism), and calls
`torch.ops.lrkv.factored_extend`, a `torch.library.triton_op` around `extend_kernel`
(`_extend_kernels.py`). In fallback mode (no GPU, TRITON_INTERPRET unset) it computes the
float64 reference (`lrkv.reference.extend`) instead.
"""

from __future__ import annotations

import torch
from torch.library import triton_op, wrap_triton

from ..reference.extend import extend_attention as reference_extend_attention
from ..reference.lrkv import accumulation_dtype
from ..reference.rope import ExactRope
from . import runtime
from .decode import DOT_MODES, _check_launch, _strides, pick_launch, rope_tables
from .validate import next_pow2, validate_extend_inputs

MAX_BLOCK_B = 1024  # sequences scanned per step when a program looks up its sequence


@triton_op("lrkv::factored_extend", mutates_args=())
def factored_extend(
    q: torch.Tensor,  # [N, H, d_h]
    cu_seqlens_q: torch.Tensor,  # [B+1] int32
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
    group_size: int,
    block_t: int,
    num_warps: int,
    dot: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch `extend_kernel` on an (N, head groups) grid. No checks here (the wrapper
    validates); the body stays traceable by torch.compile."""
    N, H, D = q.shape
    R = latent_k.shape[3]
    B = cu_seqlens_q.shape[0] - 1
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    paged = page_table is not None
    page = shared_k.shape[1] if paged else 1
    n_pages = shared_k.shape[0] if paged else 0
    max_pages = page_table.shape[1] if paged else 0
    slots = max_pages * page if paged else shared_k.shape[1]
    out = torch.empty((N, H, D), dtype=acc, device=q.device)
    lse = torch.empty((N, H), dtype=acc, device=q.device)
    if N == 0:
        return out.to(q.dtype), lse
    K = runtime.extend_kernels()
    scale_t = torch.full((1,), scale, dtype=acc, device=q.device)
    ks = key_scale if key_scale is not None else q  # never read when HAS_KS is False
    cos = rope_cos if rope_cos is not None else q
    sin = rope_sin if rope_sin is not None else q
    pt = page_table if paged else lengths
    wrap_triton(K.extend_kernel)[(N, -(-H // group_size))](
        q, cu_seqlens_q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, ks, cos, sin, lengths, pt,
        scale_t, out, lse,
        B, H, D, R, page, n_pages, max_pages, slots,
        *q.stride(), *shared_k.stride(), *shared_v.stride(), *latent_k.stride(), *latent_v.stride(),
        *basis_k.stride(), *basis_v.stride(), *_strides(key_scale, 3),
        *(rope_cos.stride() if rope_cos is not None else (0, 0)),
        *(page_table.stride() if paged else (0, 0)),
        GROUP=group_size, BLOCK_H=next_pow2(group_size, 16), BLOCK_T=block_t, BLOCK_D=next_pow2(D, 16),
        BLOCK_R=next_pow2(R, 16), BLOCK_B=min(next_pow2(B, 16), MAX_BLOCK_B),
        HAS_KS=key_scale is not None, ROPE_EXACT=rope_cos is not None, PAGED=paged,
        DOT=dot, ACC_FP64=acc == torch.float64, num_warps=num_warps,
    )
    return out.to(q.dtype), lse


def extend_attention(
    q: torch.Tensor,  # [N, H, d_h]  rotated/normed by position, k-gain folded in
    cu_seqlens_q: torch.Tensor,  # [B+1] int32
    shared_k: torch.Tensor,  # [B, T_max, d_h]   (paged: [P, page, d_h])
    shared_v: torch.Tensor,
    latent_k: torch.Tensor,  # [B, T_max, H, r]  (paged: [P, page, H, r])
    latent_v: torch.Tensor,
    basis_k: torch.Tensor,  # [H, d_h, r]
    basis_v: torch.Tensor,
    lengths: torch.Tensor,  # [B]  the new tokens included
    *,
    scale: float,
    key_scale: torch.Tensor | None = None,  # [B, T_max, H]  (paged: [P, page, H])
    rope: ExactRope | None = None,
    page_table: torch.Tensor | None = None,  # [B, max_pages] int32
    group_size: int | None = None,
    block_t: int | None = None,
    num_warps: int | None = None,
    dot: str | None = None,
    check: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal factored attention (Eqs. 6–7) for ragged queries. Returns out [N, H, d_h], lse [N, H]."""
    if check:
        validate_extend_inputs(q, cu_seqlens_q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
                               scale=scale, key_scale=key_scale, rope=rope, page_table=page_table)
        _check_launch(q, dict(cu_seqlens_q=cu_seqlens_q, shared_k=shared_k, shared_v=shared_v, latent_k=latent_k,
                              latent_v=latent_v, basis_k=basis_k, basis_v=basis_v, lengths=lengths,
                              page_table=page_table, key_scale=key_scale),
                      num_splits=None, group_size=group_size, block_t=block_t, num_warps=num_warps, dot=dot,
                      mutant=None, r=latent_k.shape[3])
    if runtime.mode()[0] == "fallback":
        f = lambda t: None if t is None else t.to(torch.float64)  # noqa: E731
        out, lse = reference_extend_attention(
            f(q), cu_seqlens_q, f(shared_k), f(shared_v), f(latent_k), f(latent_v), f(basis_k), f(basis_v),
            lengths, scale=scale, key_scale=f(key_scale), rope=rope, page_table=page_table, check=False)
        return out.to(q.dtype), lse.to(accumulation_dtype(q.dtype))
    N, H, d_h = q.shape
    slots = page_table.shape[1] * shared_k.shape[1] if page_table is not None else shared_k.shape[1]
    if block_t is None and runtime.is_interpreted():
        # the interpreter pays per operation and runs one program per query token: two tiles
        # at most (still an online rescale between them), where decode's rule allows eight
        block_t = min(128, next_pow2(-(-slots // 2), 32))
    cfg = pick_launch(B=max(N, 1), H=H, d_h=d_h, r=latent_k.shape[3], slots=slots, dtype=q.dtype, device=q.device,
                      num_splits=1, group_size=group_size, block_t=block_t, num_warps=num_warps, dot=dot,
                      private="per_head")  # the extend kernel reads the private stream head by head
    cos = sin = None
    if rope is not None:
        cos, sin = rope_tables(slots, d_h, rope.theta, torch.float64 if cfg.acc_fp64 else torch.float32, q.device)
    return torch.ops.lrkv.factored_extend(
        q, cu_seqlens_q.to(torch.int32), shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
        page_table, key_scale, cos, sin, float(scale), cfg.group_size, cfg.block_t, cfg.num_warps,
        DOT_MODES[cfg.dot])
