"""Rotary position embeddings, rotate-half convention (DESIGN §5).

A row vector x of width 2P is split into halves; plane i pairs dims (i, i + P) and turns
by the angle pos·freq_i:  rope(x, pos) = x·cos + rotate_half(x)·sin.  As a matrix acting on
the right, rope(x, pos) = x R_pos with the 2×2 block [[c, s], [-s, c]] on each plane.

Three users:
  * the head key/query: P = d_h/2 planes, freq_i = theta^(-2i/d_h);
  * `latent` mode (the paper's Sec. 3 claim): the r-wide latent rotated with its own
    r-dim frequencies theta^(-2k/r) — shown by the suite to differ from exact RoPE;
  * `aligned` mode: latent pair k lives in head plane p_k (see `aligned_basis`), so its
    frequency is the head's freq_{p_k}, and B_h^T R_j = E_j B_h^T holds exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class ExactRope:
    """Kernel-level marker for rope='exact': private keys are rebuilt and rotated by slot index.

    Slot j of a contiguous cache holds the token at position j; the shared key is cached
    already rotated, so only the private part z_j B_h^T needs rope(·, j) at decode time.
    """

    theta: float = 10000.0


def rope_freqs(width: int, theta: float, *, dtype=torch.float64) -> torch.Tensor:
    """freq_i = theta^(-2i/width) for the width/2 planes of a rotate-half vector.  # [width/2]"""
    if width % 2:
        raise ValueError(f"RoPE width must be even, got {width}")
    i = torch.arange(width // 2, dtype=torch.float64)
    return (theta ** (-2.0 * i / width)).to(dtype)


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    return torch.cat((-x[..., half:], x[..., :half]), dim=-1)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """Rotate x [..., 2P] by positions [...] (broadcast over x's leading dims) with freqs [..., P].

    Angles are formed in float64 and cast once, so every backend sees the same tables.
    """
    if x.shape[-1] == 0:
        return x
    # freqs may live on the CPU (they are constants); follow x's device.
    ang = positions.to(x.device, torch.float64)[..., None] * freqs.to(x.device, torch.float64)  # [..., P]
    cos = torch.cat((ang.cos(), ang.cos()), dim=-1).to(x.dtype)
    sin = torch.cat((ang.sin(), ang.sin()), dim=-1).to(x.dtype)
    return x * cos + rotate_half(x) * sin


def rotation_matrix(width: int, position, freqs: torch.Tensor) -> torch.Tensor:
    """R_pos with rope(x, pos) = x @ R_pos.  # [width, width]"""
    eye = torch.eye(width, dtype=torch.float64)
    pos = torch.as_tensor(position, dtype=torch.float64)
    return apply_rope(eye, pos.expand(width), freqs.to(torch.float64).expand(width, -1))


def aligned_basis(
    n_heads: int, head_dim: int, rank: int, *, std: float, generator: torch.Generator,
    head_freqs: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """A basis B_h [d_h, r] made of whole rotary planes, and each latent pair's frequency.

    Latent pair k = (column k, column k + r/2) is placed in head plane p_k with the block
    M_k = [[a, b], [-b, a]] (rows: latent pair; columns: dims p_k, p_k + d_h/2). Blocks of
    this form commute with every plane rotation [[c, s], [-s, c]], so B^T R_j = E_j B^T where
    E_j rotates latent pair k by the head's freq_{p_k}: latent RoPE becomes exact (DESIGN §5).

    Returns basis [H, d_h, r] (float64) and latent_freqs [H, r/2].
    """
    if rank % 2 or rank > head_dim:
        raise ValueError(f"aligned basis needs an even rank <= head_dim, got rank={rank}, head_dim={head_dim}")
    half_d, half_r = head_dim // 2, rank // 2
    basis = torch.zeros(n_heads, head_dim, rank, dtype=torch.float64)
    latent_freqs = torch.zeros(n_heads, half_r, dtype=torch.float64)
    for h in range(n_heads):
        planes = torch.randperm(half_d, generator=generator)[:half_r]
        a = torch.randn(half_r, generator=generator, dtype=torch.float64) * std
        b = torch.randn(half_r, generator=generator, dtype=torch.float64) * std
        k = torch.arange(half_r)
        basis[h, planes, k] = a
        basis[h, planes + half_d, k] = b
        basis[h, planes, k + half_r] = -b
        basis[h, planes + half_d, k + half_r] = a
        latent_freqs[h] = head_freqs.to(torch.float64)[planes]
    return basis, latent_freqs
