"""A user's paged LRKV decode backend in vLLM's block layout, verified by the lrkv harness:

    lrkv verify --backend examples.my_vllm_backend:backend --level kernel-paged

It declares `cache_layout = "vllm-blocks"`, so the harness hands it the cache as vLLM keeps
it: per-part block pools `(num_blocks, block_size, …)` whose block 0 is the null block (NaN,
never a sequence's block), NHD or head-major HND by stride order; `block_table [B, max_blocks]`
padded with the null block; `seq_lens [B]`. The online softmax over the blocks is the one of
`my_paged_backend` (a block table is a page table). It depends on nothing from lrkv:

    paged_decode_attention(q [B, H, d_h], shared_k [N, bs, d_h], shared_v [N, bs, d_h],
                           latent_k [N, bs, H, r], latent_v [N, bs, H, r],
                           basis_k [H, d_h, r], basis_v [H, d_h, r], seq_lens [B] int32,
                           block_table [B, max_blocks] int32, *, scale, key_scale=None, rope=None)
        -> (out [B, H, d_h] in q's dtype, lse [B, H] float32)
"""

from __future__ import annotations

from examples.my_paged_backend import PagedDecode


class VllmBlocksDecode(PagedDecode):
    name = "my-vllm"
    cache_layout = "vllm-blocks"

    def paged_decode_attention(self, q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, seq_lens,
                               block_table, *, scale, key_scale=None, rope=None):
        # a block table is a page table whose padding is the null block 0 (NaN, past every seq_len)
        return super().paged_decode_attention(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v,
                                              seq_lens, block_table, scale=scale, key_scale=key_scale, rope=rope)


backend = VllmBlocksDecode()
