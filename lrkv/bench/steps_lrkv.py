"""LRKV decode steps as the benchmark compiles them: factored (Eqs. 6–7) and materialized.

Same contract and math as `lrkv.reference.lrkv.decode_attention` (no RoPE, no key_scale —
the benchmark measures the linear core), arranged for the CPU compiler (`lrkv.bench.stream`):

    logits_h = q_h S_K^T + (q_h B_h^K) R_h^{K T}                (Eq. 6, one softmax of the sum)
    out_h    = a_h S_V + (a_h R_h^V) B_h^{V T}                  (Eq. 7)

  * the shared block serves all H heads, so its two contractions are GEMMs with the heads
    as M (`[H, d_h] x [d_h, T]` and `[H, T] x [T, d_h]`) — this is MQA's arithmetic, the
    "1" of LRKV's 1 + r/d_h + r/T, and a GEMM is the form that runs it near peak;
  * each head reads its own latent rows, so the private contractions stream time-major,
    reading each latent tensor exactly once.
"""

from __future__ import annotations

import torch

from .stream import softmax_rows, sum_over_time, time_major, valid_mask, zero_garbage


def factored_step(
    q: torch.Tensor,  # [B, H, d_h]
    shared_k: torch.Tensor,  # [B, T, d_h]
    shared_v: torch.Tensor,  # [B, T, d_h]
    latent_k: torch.Tensor,  # [B, T, H, r]
    latent_v: torch.Tensor,  # [B, T, H, r]
    basis_k: torch.Tensor,  # [H, d_h, r]
    basis_v: torch.Tensor,  # [H, d_h, r]
    lengths: torch.Tensor,  # [B] int
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eqs. 6–7 reading each latent once. Returns out [B, H, d_h], lse [B, H]."""
    valid = valid_mask(lengths, shared_k.shape[1])  # [B, T]
    # Eq. 6. q_h B_h^K first (r·d_h per head, independent of T), so the T-long scan is r wide.
    q_lat = torch.einsum("bhd,hdr->bhr", q, basis_k)  # [B, H, r]
    shared_logits = torch.einsum("bhd,btd->bht", q, shared_k)  # [B, H, T]  GEMM, heads as M
    private_logits = (latent_k * q_lat[:, None]).sum(-1)  # [B, T, H]  one pass over R^K
    logits = shared_logits + private_logits.transpose(1, 2)  # summed BEFORE one softmax
    a, lse = softmax_rows(logits * scale, valid)  # [B, H, T], [B, H]
    # Eq. 7. zero_garbage before the GEMM costs one copy of S_V (inductor cannot fuse a
    # prologue into the extern GEMM); streaming this product instead measured 2x slower.
    out_shared = torch.einsum("bht,btd->bhd", a, zero_garbage(shared_v, valid))  # a_h S_V
    z = sum_over_time(time_major(a)[..., None] * zero_garbage(latent_v, valid))  # [B, H, r]  a_h R_h^V
    out_private = torch.einsum("bhr,hdr->bhd", z, basis_v)  # (a_h R_h^V) B_h^{V T}
    return out_shared + out_private, lse


def materialized_step(
    q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same contract by rebuilding K_h = S_K + R_h^K B_h^{K T} and V_h per slot, then
    attending like MHA: what a model without the factored kernel pays (2·T·H·r·d_h extra
    multiply-adds and two MHA-sized temporaries). out [B, H, d_h], lse [B, H]."""
    valid = valid_mask(lengths, shared_k.shape[1])
    k = shared_k[:, :, None, :] + torch.einsum("bthr,hdr->bthd", latent_k, basis_k)  # [B, T, H, d_h]
    v = shared_v[:, :, None, :] + torch.einsum("bthr,hdr->bthd", latent_v, basis_v)  # [B, T, H, d_h]
    a, lse = softmax_rows((k * q[:, None]).sum(-1).transpose(1, 2) * scale, valid)  # [B, H, T]
    return sum_over_time(time_major(a)[..., None] * zero_garbage(v, valid)), lse
