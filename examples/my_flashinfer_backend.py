"""A user's paged LRKV decode backend in FlashInfer's CSR page layout, verified by the lrkv harness:

    lrkv verify --backend examples.my_flashinfer_backend:backend --level kernel-paged

It declares `cache_layout = "flashinfer-csr"`, so the harness hands it the cache's pages (NHD
or head-major HND by stride order) with sequence b's pages `kv_indices[kv_indptr[b] :
kv_indptr[b + 1]]` and `kv_last_page_len[b]` rows used in its last page (0 for a sequence with
no page). The online softmax over the pages is the one of `my_paged_backend`. It depends on
nothing from lrkv:

    paged_decode_attention(q [B, H, d_h], shared_k [P, page, d_h], shared_v [P, page, d_h],
                           latent_k [P, page, H, r], latent_v [P, page, H, r],
                           basis_k [H, d_h, r], basis_v [H, d_h, r], kv_indptr [B+1] int32,
                           kv_indices [nnz] int32, kv_last_page_len [B] int32,
                           *, scale, key_scale=None, rope=None)
        -> (out [B, H, d_h] in q's dtype, lse [B, H] float32)
"""

from __future__ import annotations

import torch

from examples.my_paged_backend import PagedDecode, attend_pages


class FlashInferCsrDecode(PagedDecode):
    name = "my-flashinfer"
    cache_layout = "flashinfer-csr"

    def paged_decode_attention(self, q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, kv_indptr,
                               kv_indices, kv_last_page_len, *, scale, key_scale=None, rope=None):
        start, n_pages = kv_indptr[:-1].long(), kv_indptr.diff().long()  # [B] each
        page = shared_k.shape[1]
        seq_lens = torch.where(n_pages > 0, (n_pages - 1) * page + kv_last_page_len.long(), 0)
        last = max(len(kv_indices) - 1, 0)  # page i of sequence b is kv_indices[start[b] + i] while i < n_pages[b]
        return attend_pages(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, seq_lens,
                            lambda i: kv_indices[(start + i).clamp(max=last)], int(n_pages.max()) if len(n_pages) else 0,
                            scale=scale, key_scale=key_scale, rope=rope)


backend = FlashInferCsrDecode()
