"""Extend in float64 (DESIGN §4): several new tokens per sequence, causal over the cache.

Chunked prefill and speculative-decoding verification attend n_b new tokens of sequence b
at once. They are already appended, so they are the LAST n_b of its lengths[b] tokens:

    query i of sequence b (0 <= i < n_b) is the token at position p = lengths[b] − n_b + i
    and attends slots 0 … p (causal) — i.e. it is a decode (Eqs. 6–7) over the first p + 1
    slots of its sequence's cache.

That sentence is the whole reference: each sequence's queries run the factored oracle
`decode_attention` over a view of that sequence's cache with length p + 1. RoPE (exact or
aligned) is positional, so it follows: the query arrives rotated by p, the shared keys are
cached rotated, and exact RoPE rotates private key j by its slot index j, as in decode.
QK-RMSNorm enters through key_scale, as in decode. With n_b = 1 everywhere this IS decode;
n_b = 0 contributes no rows. An fp8 cache (`cache_scales`) is dequantized to q's dtype first,
contiguous or paged, as in decode.
"""

from __future__ import annotations

import torch

from .contract import validate_extend_inputs
from .fp8_cache import CacheScales, dequantize_cache
from .lrkv import accumulation_dtype, decode_attention, materialized_decode_attention
from .paged import gather_cache
from .rope import ExactRope


def query_positions(cu_seqlens_q: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For every query token: its sequence b and its position p = lengths[b] − n_b + i.  # [N], [N]"""
    cu = cu_seqlens_q.long()
    n = cu[1:] - cu[:-1]  # [B]  n_b
    seq = torch.repeat_interleave(torch.arange(n.shape[0], device=cu.device), n)  # [N]
    i = torch.arange(seq.shape[0], device=cu.device) - cu[seq]  # index within the chunk
    return seq, lengths.long()[seq] - n[seq] + i


def _extend(decode, q, cu_seqlens_q, cache: list, basis_k, basis_v, lengths, *, scale, rope, **rounding):
    sk, sv, lk, lv, ks = cache
    N, H, d_h = q.shape
    _, pos = query_positions(cu_seqlens_q, lengths)
    out = q.new_zeros(N, H, d_h)
    lse = None
    cu = cu_seqlens_q.long().tolist()
    for b in range(len(cu) - 1):
        lo, hi = cu[b], cu[b + 1]
        if hi == lo:
            continue  # n_b = 0: nothing to attend for
        n_b = hi - lo
        view = lambda t: None if t is None else t[b].expand(n_b, *t.shape[1:])  # noqa: E731  same cache, n_b times
        o, l_ = decode(q[lo:hi], view(sk), view(sv), view(lk), view(lv), basis_k, basis_v,
                       pos[lo:hi] + 1,  # query at position p sees slots 0 … p
                       scale=scale, key_scale=view(ks), rope=rope, check=False, **rounding)
        if lse is None:
            lse = l_.new_empty(N, H)
        out[lo:hi], lse[lo:hi] = o, l_
    if lse is None:  # no query at all (every n_b = 0)
        lse = torch.empty(N, H, dtype=accumulation_dtype(q.dtype), device=q.device)
    return out, lse


def _cache(lengths, page_table, shared_k, shared_v, latent_k, latent_v, key_scale, cache_scales, dtype) -> list:
    shared_k, shared_v, latent_k, latent_v = dequantize_cache(cache_scales, dtype, shared_k, shared_v, latent_k,
                                                              latent_v)
    if page_table is None:
        return [shared_k, shared_v, latent_k, latent_v, key_scale]
    return gather_cache(page_table, lengths, shared_k, shared_v, latent_k, latent_v, key_scale)


def extend_attention(
    q: torch.Tensor,  # [N, H, d_h]  the new tokens of all sequences, rotated/normed by position
    cu_seqlens_q: torch.Tensor,  # [B+1] int32: sequence b owns rows cu[b] … cu[b+1] − 1
    shared_k: torch.Tensor,  # [B, T_max, d_h]   (paged: [P, page, d_h])
    shared_v: torch.Tensor,  # [B, T_max, d_h]
    latent_k: torch.Tensor,  # [B, T_max, H, r]  (paged: [P, page, H, r])
    latent_v: torch.Tensor,  # [B, T_max, H, r]
    basis_k: torch.Tensor,  # [H, d_h, r]
    basis_v: torch.Tensor,  # [H, d_h, r]
    lengths: torch.Tensor,  # [B]  cache lengths, the new tokens included
    *,
    scale: float,
    key_scale: torch.Tensor | None = None,  # [B, T_max, H]  (paged: [P, page, H])
    rope: ExactRope | None = None,
    page_table: torch.Tensor | None = None,  # [B, max_pages] int32
    check: bool = True,
    cache_scales: CacheScales | None = None,  # an fp8 cache's scales (paged like key_scale)
    **rounding,  # FA3-style roundings of q / the weights: decode_attention's fp8 keywords (lrkv.reference.lrkv)
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal factored attention (Eqs. 6–7) of N ragged queries. Returns out [N, H, d_h], lse [N, H]."""
    if check:
        validate_extend_inputs(q, cu_seqlens_q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
                               scale=scale, key_scale=key_scale, rope=rope, page_table=page_table,
                               cache_scales=cache_scales)
    cache = _cache(lengths, page_table, shared_k, shared_v, latent_k, latent_v, key_scale, cache_scales, q.dtype)
    return _extend(decode_attention, q, cu_seqlens_q, cache, basis_k, basis_v, lengths, scale=scale, rope=rope,
                   **rounding)


def materialized_extend_attention(
    q, cu_seqlens_q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, *,
    scale: float, key_scale=None, rope: ExactRope | None = None, page_table=None, check: bool = True,
    cache_scales: CacheScales | None = None, **rounding,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same contract with K_h and V_h rebuilt explicitly (the `materialized` path)."""
    if check:
        validate_extend_inputs(q, cu_seqlens_q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
                               scale=scale, key_scale=key_scale, rope=rope, page_table=page_table,
                               cache_scales=cache_scales)
    cache = _cache(lengths, page_table, shared_k, shared_v, latent_k, latent_v, key_scale, cache_scales, q.dtype)
    return _extend(materialized_decode_attention, q, cu_seqlens_q, cache, basis_k, basis_v, lengths, scale=scale,
                   rope=rope, **rounding)
