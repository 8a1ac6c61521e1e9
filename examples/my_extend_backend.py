"""A user's LRKV extend backend (chunked prefill / speculative verification), verified by the
lrkv harness. From the repository root:

    lrkv verify --backend examples.my_extend_backend:backend --level kernel-extend

Sequence b's n_b = cu_seqlens_q[b+1] − cu_seqlens_q[b] queries are its LAST n_b tokens
(positions lengths[b] − n_b … lengths[b] − 1, already in the cache); the query at position p
attends slots 0 … p. This backend rebuilds each head's keys and values K_h = S_K + R_h B_h^T
(paper Eqs. 2–5) for one sequence at a time and applies a causal [n_b, lengths[b]] mask —
the materialized form, in float32. It depends on nothing from lrkv: an extend backend is
any object with name, levels {"kernel-extend"}, dtypes, available() and

    extend_attention(q [N, H, d_h], cu_seqlens_q [B+1] int32, shared_k, shared_v, latent_k,
                     latent_v, basis_k, basis_v, lengths [B] int32,
                     *, scale, key_scale=None, rope=None, page_table=None)
        -> (out [N, H, d_h] in q's dtype, lse [N, H] float32)

where the cache is contiguous ([B, T_max, ...]) or, with page_table [B, max_pages], pages
([P, page_size, ...]: slot j of sequence b is row j % page_size of page page_table[b, j // page_size]).
"""

from __future__ import annotations

import torch


def _rotate(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate-half RoPE of x [T, H, d_h] by slot positions [T] (rope='exact')."""
    d_h = x.shape[-1]
    freqs = theta ** (-2.0 * torch.arange(d_h // 2, dtype=torch.float64) / d_h)
    ang = positions.to(torch.float64)[:, None, None] * freqs  # [T, 1, d_h/2]
    cos, sin = torch.cat((ang.cos(), ang.cos()), -1).to(x.dtype), torch.cat((ang.sin(), ang.sin()), -1).to(x.dtype)
    return x * cos + torch.cat((-x[..., d_h // 2:], x[..., : d_h // 2]), dim=-1) * sin


def _sequence(t: torch.Tensor | None, b: int, n: int, page_table: torch.Tensor | None):
    """The first n slots of sequence b, contiguous: [n, ...]."""
    if t is None:
        return None
    if page_table is None:
        return t[b, :n]
    page = t.shape[1]
    j = torch.arange(n)
    return t[page_table[b, j // page].long(), j % page]


class ExtendAttention:
    name = "my-extend"
    levels = frozenset({"kernel-extend"})
    dtypes = (torch.float32, torch.bfloat16, torch.float16)

    def available(self) -> tuple[bool, str]:
        return True, ""

    def extend_attention(self, q, cu_seqlens_q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v,
                         lengths, *, scale, key_scale=None, rope=None, page_table=None):
        f = torch.float32
        N, H, d_h = q.shape
        out = torch.zeros(N, H, d_h, dtype=f)
        lse = torch.full((N, H), float("-inf"), dtype=f)
        bk, bv = basis_k.to(f), basis_v.to(f)
        cu = cu_seqlens_q.tolist()
        for b in range(len(cu) - 1):
            lo, hi, L = cu[b], cu[b + 1], int(lengths[b])
            if hi == lo:
                continue
            sk, sv, lk, lv, ks = (None if t is None else t.to(f) for t in (
                _sequence(x, b, L, page_table) for x in (shared_k, shared_v, latent_k, latent_v, key_scale)))
            k_priv = torch.einsum("thr,hdr->thd", lk, bk)  # R_h^K B_h^{K T}
            if rope is not None:
                k_priv = _rotate(k_priv, torch.arange(L), rope.theta)  # shared keys arrive rotated
            k = sk[:, None, :] + k_priv  # [L, H, d_h]  K_h
            v = sv[:, None, :] + torch.einsum("thr,hdr->thd", lv, bv)  # V_h
            logits = torch.einsum("nhd,thd->hnt", q[lo:hi].to(f), k)  # [H, n_b, L]
            if ks is not None:
                logits = logits * ks.permute(1, 0)[:, None, :]
            pos = L - (hi - lo) + torch.arange(hi - lo)  # positions of the new tokens
            causal = torch.arange(L)[None, :] <= pos[:, None]  # [n_b, L]
            logits = torch.where(causal, logits * scale, float("-inf"))
            row_lse = torch.logsumexp(logits, dim=-1)  # [H, n_b]
            a = torch.exp(logits - row_lse[..., None])
            out[lo:hi] = torch.einsum("hnt,thd->nhd", a, v)
            lse[lo:hi] = row_lse.T
        return out.to(q.dtype), lse


backend = ExtendAttention()
