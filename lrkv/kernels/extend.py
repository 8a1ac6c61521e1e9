"""Factored extend (DESIGN §4): several new tokens per sequence, causal — the public wrapper.

    extend_attention(q [N, H, d_h], cu_seqlens_q [B+1], <cache parts>, basis_k, basis_v, lengths,
                     *, scale, key_scale=None, rope=None,
                     page_table=None, ...) -> (out [N, H, d_h], lse [N, H])

The n_b = cu[b+1] − cu[b] queries of sequence b are its last n_b tokens (positions
lengths[b] − n_b … lengths[b] − 1, already appended); each attends slots 0 … its position.
With `page_table` the cache tensors are pages, as in paged decode. `out` has q's dtype,
`lse` the accumulation dtype (float32; float64 for float64 inputs).

Like `decode_attention`, the wrapper validates every argument before launch
(`lrkv.reference.contract.validate_extend_inputs` plus the kernel-side checks), and launches
through decode's own path: `pick_launch` (the N query tokens are the rows) and the custom op
`torch.ops.lrkv.factored_decode` with `cu_seqlens_q` — the split kernel then runs one
program row per query token over its causal range, and the same merge follows.
In fallback mode (no GPU, TRITON_INTERPRET unset) it computes the float64 reference
(`lrkv.reference.extend`) instead. An fp8 cache takes `cache_scales` as decode does
(`lrkv.kernels.decode`, module doc; paged: its per-token scales paged like the parts).
"""

from __future__ import annotations

import torch

from ..reference.cache import FactoredCache
from ..reference.fp8_cache import CacheScales
from ..reference.rope import ExactRope
from .decode import attend


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
    check: bool = True,
    cache_scales: CacheScales | None = None,  # fp8 cache (DESIGN §4.1)
    **launch,  # the launch options, as decode_attention's
) -> tuple[torch.Tensor, torch.Tensor]:
    """Causal factored attention (Eqs. 6–7) for ragged queries. Returns out [N, H, d_h], lse [N, H].

    The launch options are decode's (`pick_launch`), with the N query tokens as the rows:
    splits divide each token's causal range 0 … p (splits past p are empty and ignored)."""
    cache = FactoredCache(shared_k, shared_v, latent_k, latent_v, lengths, key_scale, cache_scales, page_table)
    return attend(q, cache, basis_k, basis_v, scale=scale, rope=rope, cu_seqlens_q=cu_seqlens_q, check=check,
                  **launch)
