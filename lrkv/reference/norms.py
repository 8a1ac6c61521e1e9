"""RMSNorm and the joint key scale of factored QK-RMSNorm (DESIGN §3, §5)."""

from __future__ import annotations

import torch


def rms_norm(x: torch.Tensor, gain: torch.Tensor | None, eps: float) -> torch.Tensor:
    """x / sqrt(mean(x²) + eps) · gain over the last dim."""
    y = x * torch.rsqrt(x.pow(2).mean(dim=-1, keepdim=True) + eps)
    return y if gain is None else y * gain


def joint_key_scale(
    shared: torch.Tensor,  # [..., d_h]        s = x W_shared
    latent: torch.Tensor,  # [..., H, r]       z_h = x U_h
    basis: torch.Tensor,  # [H, d_h, r]       B_h
    eps: float,
) -> torch.Tensor:
    """Inverse RMS of each head's full key k_h = s + z_h B_h^T, without building k_h.

    ||s + z B^T||² = ||s||² + 2 s·(z B^T) + z (B^T B) z^T, so the append needs s B_h
    (d_h→r) and the r×r Gram B_h^T B_h only.  # [..., H]
    """
    d_h = shared.shape[-1]
    ss = shared.pow(2).sum(-1, keepdim=True)  # [..., 1]
    s_b = torch.einsum("...d,hdr->...hr", shared, basis)  # [..., H, r]
    cross = (s_b * latent).sum(-1)  # [..., H]
    gram = torch.einsum("hdr,hds->hrs", basis, basis)  # [H, r, r]
    quad = torch.einsum("...hr,hrs,...hs->...h", latent, gram, latent)  # [..., H]
    sq = ss + 2 * cross + quad
    return torch.rsqrt(sq / d_h + eps)
