"""LRKV layer weights with the paper's initialisation (Sec. 3).

W_h = W_shared + U_h B_h^T for keys and values. W_shared is Kaiming-initialised; U_h and
B_h are drawn small so that the initial residual U_h B_h^T has about 0.1× the Frobenius
norm of W_shared ("small random residual factors"; zero factors would give zero gradients).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ..spec import AttentionSpec
from .rope import aligned_basis, rope_freqs

RESIDUAL_FRACTION = 0.1  # initial ||U_h B_h^T||_F / ||W_shared||_F


@dataclass
class LRKVWeights:
    spec: AttentionSpec
    w_q: torch.Tensor  # [d, H, d_h]
    w_shared_k: torch.Tensor  # [d, d_h]      W_shared^K
    w_shared_v: torch.Tensor  # [d, d_h]      W_shared^V
    u_k: torch.Tensor  # [H, d, r]      U_h^K
    u_v: torch.Tensor  # [H, d, r]      U_h^V
    basis_k: torch.Tensor  # [H, d_h, r]    B_h^K
    basis_v: torch.Tensor  # [H, d_h, r]    B_h^V
    w_o: torch.Tensor  # [H, d_h, d]
    q_gain: torch.Tensor | None = None  # [H, d_h]  QK-RMSNorm gains (qk_norm only)
    k_gain: torch.Tensor | None = None  # [H, d_h]
    latent_freqs: torch.Tensor | None = None  # [H, r/2]  latent RoPE frequencies (latent/aligned)

    def to(self, dtype: torch.dtype) -> LRKVWeights:
        """Every tensor cast to dtype (latent_freqs stay float64: they are angles, not data)."""
        out = {}
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if isinstance(v, torch.Tensor) and f.name != "latent_freqs":
                v = v.to(dtype)
            out[f.name] = v
        return LRKVWeights(**out)

    @property
    def dtype(self) -> torch.dtype:
        return self.w_q.dtype

    def head_k(self) -> torch.Tensor:
        """Materialized per-head key projections W_h^K = W_S + U_h B_h^T.  # [H, d, d_h]"""
        return self.w_shared_k[None] + torch.einsum("hdr,her->hde", self.u_k, self.basis_k)

    def head_v(self) -> torch.Tensor:
        """W_h^V = W_S^V + U_h^V B_h^{V T}.  # [H, d, d_h]"""
        return self.w_shared_v[None] + torch.einsum("hdr,her->hde", self.u_v, self.basis_v)


def _tied_gain(H: int, d_h: int, g: torch.Generator) -> torch.Tensor:
    """A gain equal on both dims of each rotary plane, so that it commutes with RoPE and
    folds into the query exactly (DESIGN §5)."""
    half = 1.0 + 0.1 * torch.randn(H, d_h // 2, generator=g, dtype=torch.float64)
    return torch.cat((half, half), dim=-1)


def init_lrkv_weights(spec: AttentionSpec, seed: int = 0, dtype: torch.dtype = torch.float64) -> LRKVWeights:
    if spec.family != "lrkv":
        raise ValueError(f"init_lrkv_weights needs an lrkv spec, got family {spec.family!r}")
    g = torch.Generator().manual_seed(seed)
    d, H, d_h, r = spec.d_model, spec.n_heads, spec.head_dim, spec.rank

    def randn(*shape, std):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * std

    # Kaiming (linear gain): std = 1/sqrt(fan_in).
    w_q = randn(d, H, d_h, std=d**-0.5)
    w_sk, w_sv = randn(d, d_h, std=d**-0.5), randn(d, d_h, std=d**-0.5)
    w_o = randn(H, d_h, d, std=(H * d_h) ** -0.5)
    # ||W_S||_F ≈ sqrt(d_h); ||U B^T||_F ≈ sqrt(d·d_h·r)·σ_u·σ_b — pick σ_u = σ_b to hit 0.1×.
    sigma = (RESIDUAL_FRACTION * d_h**0.5 / max(d * d_h * r, 1) ** 0.5) ** 0.5
    u_k, u_v = randn(H, d, r, std=sigma), randn(H, d, r, std=sigma)
    latent_freqs = None
    if spec.rope == "aligned":
        head_freqs = rope_freqs(d_h, spec.rope_theta)
        basis_k, latent_freqs = aligned_basis(H, d_h, r, std=sigma, generator=g, head_freqs=head_freqs)
    else:
        basis_k = randn(H, d_h, r, std=sigma)
        if spec.rope == "latent":
            latent_freqs = rope_freqs(r, spec.rope_theta).expand(H, -1).clone()
    basis_v = randn(H, d_h, r, std=sigma)
    q_gain = k_gain = None
    if spec.qk_norm:
        if spec.rope == "none":
            q_gain = 1.0 + 0.1 * randn(H, d_h, std=1.0)
            k_gain = 1.0 + 0.1 * randn(H, d_h, std=1.0)
        else:
            q_gain, k_gain = _tied_gain(H, d_h, g), _tied_gain(H, d_h, g)
    w = LRKVWeights(spec, w_q, w_sk, w_sv, u_k, u_v, basis_k, basis_v, w_o, q_gain, k_gain, latent_freqs)
    return w.to(dtype)
