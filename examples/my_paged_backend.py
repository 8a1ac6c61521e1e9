"""A user's paged LRKV decode backend, verified by the lrkv harness. From the repository root:

    lrkv verify --backend examples.my_paged_backend:backend --level kernel-paged

The kernel walks each sequence's page table one logical page at a time, as vLLM's paged
attention does: it loads page page_table[b, i] (rows j % page_size of slots j), forms the
summed shared + private logits of those slots (paper Eq. 6), and folds them into one online
softmax with a d_h-wide shared and an r-wide private accumulator (Eq. 7 applies B_h^V once
at the end). It depends on nothing from lrkv: a paged backend is any object with

    name: str                  levels: {"kernel-paged"} (plus any others it implements)
    dtypes: tuple of torch dtypes it accepts
    available() -> (bool, reason)
    paged_decode_attention(q [B, H, d_h], shared_k [P, page, d_h], shared_v [P, page, d_h],
                           latent_k [P, page, H, r], latent_v [P, page, H, r],
                           basis_k [H, d_h, r], basis_v [H, d_h, r], lengths [B] int32,
                           page_table [B, max_pages] int32, *, scale, key_scale=None, rope=None)
        -> (out [B, H, d_h] in q's dtype, lse [B, H] float32)
"""

from __future__ import annotations

import torch


def _rotate(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate-half RoPE of x [B, t, H, d_h] by logical slot positions [B, t] (rope='exact')."""
    d_h = x.shape[-1]
    freqs = theta ** (-2.0 * torch.arange(d_h // 2, dtype=torch.float64) / d_h)
    ang = positions.to(torch.float64)[..., None, None] * freqs  # [B, t, 1, d_h/2]
    cos, sin = torch.cat((ang.cos(), ang.cos()), -1).to(x.dtype), torch.cat((ang.sin(), ang.sin()), -1).to(x.dtype)
    return x * cos + torch.cat((-x[..., d_h // 2:], x[..., : d_h // 2]), dim=-1) * sin


def attend_pages(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, page_of, n_pages, *,
                 scale, key_scale=None, rope=None):
    """The online softmax over each sequence's logical pages 0 … n_pages − 1; page_of(i) gives
    the physical page [B] of logical page i (any value where a sequence has no page i)."""
    f = torch.float32  # accumulate in float32, like a real kernel
    B, H, d_h = q.shape
    P, page = shared_k.shape[:2]
    r = latent_k.shape[-1]
    qf, bk, bv = q.to(f), basis_k.to(f), basis_v.to(f)
    q_lat = torch.einsum("bhd,hdr->bhr", qf, bk)  # q_h B_h^K, once
    m = torch.full((B, H), float("-inf"), dtype=f)  # running max
    l = torch.zeros(B, H, dtype=f)  # running sum
    acc_s = torch.zeros(B, H, d_h, dtype=f)  # a_h S_V
    acc_p = torch.zeros(B, H, r, dtype=f)  # a_h R_h^V
    for i in range(n_pages):
        slots = i * page + torch.arange(page)  # logical slots of page i
        valid = slots[None, :] < lengths[:, None]  # [B, page]
        if not valid.any():
            break
        # a sequence without a page i may name anything (e.g. -1): never follow it
        pid = torch.where(valid[:, 0], page_of(i), 0).clamp(0, P - 1).long()  # [B]
        sk, sv = shared_k[pid].to(f), shared_v[pid].to(f)  # [B, page, d_h]
        lk, lv = latent_k[pid].to(f), latent_v[pid].to(f)  # [B, page, H, r]
        if rope is None:
            private = torch.einsum("bhr,bthr->bht", q_lat, lk)
        else:
            keys = _rotate(torch.einsum("bthr,hdr->bthd", lk, bk), slots[None, :].expand(B, -1), rope.theta)
            private = torch.einsum("bhd,bthd->bht", qf, keys)
        logits = torch.einsum("bhd,btd->bht", qf, sk) + private  # one softmax over the SUM
        if key_scale is not None:
            logits = logits * key_scale[pid].to(f).permute(0, 2, 1)
        logits = torch.where(valid[:, None, :], logits * scale, float("-inf"))
        m_new = torch.maximum(m, logits.amax(-1))
        m_safe = torch.where(m_new > float("-inf"), m_new, 0.0)
        alpha = torch.exp(m - m_safe)  # rescale of everything so far
        p = torch.exp(logits - m_safe[..., None])  # [B, H, page]; 0 where invalid
        sv = torch.where(valid[..., None], sv, 0.0)  # garbage (NaN) must not meet a 0 weight
        lv = torch.where(valid[..., None, None], lv, 0.0)
        l = l * alpha + p.sum(-1)
        acc_s = acc_s * alpha[..., None] + torch.einsum("bht,btd->bhd", p, sv)
        acc_p = acc_p * alpha[..., None] + torch.einsum("bht,bthr->bhr", p, lv)
        m = m_new
    inv = torch.where(l > 0, 1.0 / torch.where(l > 0, l, 1.0), 0.0)  # empty sequence: out 0
    out = (acc_s + torch.einsum("bhr,hdr->bhd", acc_p, bv)) * inv[..., None]  # Eq. 7
    lse = torch.where(l > 0, m + torch.log(torch.where(l > 0, l, 1.0)), float("-inf"))
    return out.to(q.dtype), lse


class PagedDecode:
    name = "my-paged"
    levels = frozenset({"kernel-paged"})
    dtypes = (torch.float32, torch.bfloat16, torch.float16)

    def available(self) -> tuple[bool, str]:
        return True, ""

    def paged_decode_attention(self, q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
                               page_table, *, scale, key_scale=None, rope=None):
        return attend_pages(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
                            lambda i: page_table[:, i], page_table.shape[1], scale=scale, key_scale=key_scale,
                            rope=rope)


backend = PagedDecode()
