"""Factored extend (DESIGN §4): several new tokens per sequence, causal — the public wrapper.

    extend_attention(q [N, H, d_h], cu_seqlens_q [B+1], shared_k, shared_v, latent_k, latent_v,
                     basis_k, basis_v, lengths, *, scale, key_scale=None, rope=None,
                     page_table=None, ...) -> (out [N, H, d_h], lse [N, H])

The n_b = cu[b+1] − cu[b] queries of sequence b are its last n_b tokens (positions
lengths[b] − n_b … lengths[b] − 1, already appended); each attends slots 0 … its position.
With `page_table` the cache tensors are pages, as in paged decode. `out` has q's dtype,
`lse` the accumulation dtype (float32; float64 for float64 inputs).

Like `decode_attention`, the wrapper validates every argument before launch
(`lrkv.reference.contract.validate_extend_inputs` plus the kernel-side checks), picks the
launch shape with `pick_launch` (the N query tokens are the rows), and calls decode's own
custom op, `torch.ops.lrkv.factored_decode`, with `cu_seqlens_q`: the split kernel then
runs one program row per query token over its causal range, and the same merge follows.
In fallback mode (no GPU, TRITON_INTERPRET unset) it computes the float64 reference
(`lrkv.reference.extend`) instead.
"""

from __future__ import annotations

import torch

from ..reference.extend import extend_attention as reference_extend_attention
from ..reference.lrkv import accumulation_dtype
from ..reference.rope import ExactRope
from . import runtime
from .decode import DOT_MODES, _check_launch, pick_launch, rope_tables
from .kernel_mutants import mutant_code
from .validate import next_pow2, validate_extend_inputs


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
    num_splits: int | None = None,
    private: str | None = None,
    programs_per_sm: int | None = None,
    mutant: str | int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal factored attention (Eqs. 6–7) for ragged queries. Returns out [N, H, d_h], lse [N, H].

    The launch options are decode's (`pick_launch`), with the N query tokens as the rows:
    splits divide each token's causal range 0 … p (splits past p are empty and ignored)."""
    if check:
        validate_extend_inputs(q, cu_seqlens_q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
                               scale=scale, key_scale=key_scale, rope=rope, page_table=page_table)
        _check_launch(q, dict(cu_seqlens_q=cu_seqlens_q, shared_k=shared_k, shared_v=shared_v, latent_k=latent_k,
                              latent_v=latent_v, basis_k=basis_k, basis_v=basis_v, lengths=lengths,
                              page_table=page_table, key_scale=key_scale),
                      num_splits=num_splits, group_size=group_size, block_t=block_t, num_warps=num_warps, dot=dot,
                      mutant=mutant, private=private, programs_per_sm=programs_per_sm, r=latent_k.shape[3])
    if runtime.mode()[0] == "fallback":
        if mutant_code(mutant):
            raise RuntimeError("kernel mutants need the kernel: no GPU and TRITON_INTERPRET unset")
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
                      num_splits=num_splits, group_size=group_size, block_t=block_t, num_warps=num_warps, dot=dot,
                      private=private, programs_per_sm=programs_per_sm, rope_exact=rope is not None)
    cos = sin = None
    if rope is not None:
        cos, sin = rope_tables(slots, d_h, rope.theta, torch.float64 if cfg.acc_fp64 else torch.float32, q.device)
    return torch.ops.lrkv.factored_decode(
        q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, page_table, key_scale, cos, sin,
        float(scale), cfg.num_splits, cfg.split_size, cfg.group_size, cfg.block_t, cfg.num_warps,
        DOT_MODES[cfg.dot], mutant_code(mutant), cfg.private == "wide", cu_seqlens_q.to(torch.int32))
