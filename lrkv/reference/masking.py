"""Masking shared by every attention family's float64 reference: which cache slots are valid,
garbage zeroed before a contraction, the masked softmax, and the causal attention of the
training form (DESIGN §3: slots at or past lengths[b] are garbage and tests fill them with
NaN, so every mask here uses torch.where — a multiplication by 0 would let NaN leak).
"""

from __future__ import annotations

import torch

NEG_INF = float("-inf")


def valid_mask(lengths: torch.Tensor, t_max: int) -> torch.Tensor:
    """Slot j of sequence b is valid iff j < lengths[b]."""
    return torch.arange(t_max, device=lengths.device)[None, :] < lengths[:, None]  # [B, T]


def zero_garbage(cached: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """A cache tensor [B, T, ...] (shared [B, T, d_h], latents [B, T, H, r], per-head keys or
    values) with the slots past lengths set to 0 before any contraction.

    Masking the logits alone is not enough at reduced precision: CPU bfloat16 matmuls
    (the `bthr,hdr->bthd` rebuild of exact RoPE) let a NaN in a garbage row turn valid rows
    NaN too (kernel:lrkv-H2-dh16-r9-rope_exact:bfloat16:T9:L0-1:s0).
    """
    return torch.where(valid.reshape(*valid.shape, *([1] * (cached.dim() - 2))), cached, 0.0)


def softmax_rows(logits: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked softmax over the last dim; empty rows give weights 0 and lse −inf.

    torch.where (not multiplication) removes masked slots, so NaN garbage cannot leak.
    """
    logits = torch.where(valid, logits, NEG_INF)
    lse = torch.logsumexp(logits, dim=-1)  # [B, H]
    a = torch.where(valid, torch.exp(logits - lse[..., None]), 0.0)
    return a, lse


def causal_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, valid: torch.Tensor,
                     scale: float) -> torch.Tensor:
    """The training form's attention over a whole sequence: position i attends the valid
    positions j <= i.  q, k [B, T, H, e], v [B, T, H, d_v], valid [B, T].  # [B, T, H, d_v]"""
    T = q.shape[1]
    logits = torch.einsum("bihe,bjhe->bhij", q, k) * scale  # [B, H, T, T]
    causal = torch.ones(T, T, dtype=torch.bool, device=q.device).tril()
    a, _ = softmax_rows(logits, causal[None, None] & valid[:, None, None, :])
    v = zero_garbage(v, valid)  # padding values zeroed: 0·NaN would leak
    return torch.einsum("bhij,bjhe->bihe", a, v)
