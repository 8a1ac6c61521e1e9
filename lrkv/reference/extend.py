"""Extend in float64 (DESIGN §4): several new tokens per sequence, causal over the cache.

Chunked prefill and speculative-decoding verification attend n_b new tokens of sequence b
at once. They are already appended, so they are the LAST n_b of its lengths[b] tokens:

    query i of sequence b (0 <= i < n_b) is the token at position p = lengths[b] − n_b + i
    and attends slots 0 … p (causal) — i.e. it is a decode (Eqs. 6–7) over the first p + 1
    slots of its sequence's cache.

That sentence is the whole reference (`lrkv.reference.lrkv.attend` with cu_seqlens_q): each
sequence's queries run the factored oracle over a view of that sequence's cache with length
p + 1. RoPE (exact or aligned) is positional, so it follows: the query arrives rotated by p,
the shared keys are cached rotated, and exact RoPE rotates private key j by its slot index j,
as in decode. QK-RMSNorm enters through key_scale, as in decode. With n_b = 1 everywhere this
IS decode; n_b = 0 contributes no rows. An fp8 cache (`cache_scales`) is dequantized to q's
dtype first, contiguous or paged, as in decode.
"""

from __future__ import annotations

import torch

from .cache import FactoredCache
from .fp8_cache import CacheScales
from .lrkv import attend, query_positions  # noqa: F401  (query_positions: the levels' import)
from .rope import ExactRope


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
    materialized: bool = False,  # rebuild K_h and V_h explicitly (the `materialized` path)
    **rounding,  # FA3-style roundings of q / the weights: the decode's fp8 keywords (lrkv.reference.lrkv)
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal factored attention (Eqs. 6–7) of N ragged queries. Returns out [N, H, d_h], lse [N, H]."""
    cache = FactoredCache(shared_k, shared_v, latent_k, latent_v, lengths, key_scale, cache_scales, page_table)
    return attend(q, cache, basis_k, basis_v, scale=scale, rope=rope, cu_seqlens_q=cu_seqlens_q, check=check,
                  materialized=materialized, **rounding)


def materialized_extend_attention(*args, _extend=extend_attention, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """The same contract with K_h and V_h rebuilt explicitly (the `materialized` path; `_extend`
    bound here, independent of a bug planted in the module's extend_attention)."""
    return _extend(*args, **kwargs, materialized=True)
