"""The peers' decode steps as the benchmark compiles them: MHA/GQA/MQA, MLA and MLRA absorbed.

Each family runs in the form that suits its layout (the rule of `lrkv.bench.stream`), so
the comparison measures cache layouts, not einsum lowering:
  * a cache row read by few heads (MHA, GQA with G < GEMM_MIN_HEADS) streams time-major —
    `dense_step` below, the same arrangement as LRKV's private latents;
  * a row read by many heads (MQA, MLA's latent, each MLRA branch) is a GEMM with the heads
    as M — which is exactly how the float64 references are written, so those families
    compile the reference kernels themselves (validation off). Variants with a time-major
    softmax or all MLRA branches in one einsum measured up to 2x slower (docs/bench.md).
"""

from __future__ import annotations

import torch

from ..reference import dense, mla, mlra
from .stream import softmax_rows, sum_over_time, time_major, valid_mask, zero_garbage

# Heads per cache row from which the GEMM form beats streaming (measured on the dev CPU:
# GQA at G = 3 streams 3-4x faster than its per-group GEMMs, MQA at G = 18 runs ~25% faster
# as one GEMM). Between 3 and 18 it is a guess; 8 is where a GEMM's M fills half a vector.
GEMM_MIN_HEADS = 8


def dense_step(
    q: torch.Tensor,  # [B, H, d_h]
    k: torch.Tensor,  # [B, T, n_kv, d_h]
    v: torch.Tensor,  # [B, T, n_kv, d_h]
    lengths: torch.Tensor,  # [B] int
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """MHA (n_kv = H), GQA, MQA (n_kv = 1): head h = n·G + g reads KV head n. out [B, H, d_h], lse [B, H]."""
    B, H, d_h = q.shape
    T, n_kv = k.shape[1], k.shape[2]
    G = H // n_kv
    if G >= GEMM_MIN_HEADS:
        return dense.decode_attention(q, k, v, lengths, scale=scale, check=False)
    valid = valid_mask(lengths, T)
    logits = (k[:, :, :, None, :] * q.reshape(B, 1, n_kv, G, d_h)).sum(-1)  # [B, T, n_kv, G]
    a, lse = softmax_rows(logits.reshape(B, T, H).transpose(1, 2) * scale, valid)  # [B, H, T]
    at = time_major(a).reshape(B, T, n_kv, G, 1)
    out = sum_over_time(at * zero_garbage(v, valid)[:, :, :, None, :])  # [B, n_kv, G, d_h]
    return out.reshape(B, H, d_h), lse


def mla_step(q, latent, k_rope, w_uk, w_uv, lengths, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Absorbed MLA (GEMM form): the reference kernel, validation off. out [B, H, d_h], lse [B, H]."""
    return mla.absorbed_decode_attention(q, latent, k_rope, w_uk, w_uv, lengths, scale=scale, check=False)


def mlra_step(q, latent, k_rope, w_uk, w_uv, lengths, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Absorbed MLRA, one GEMM pair per branch: the reference kernel, validation off.
    out [B, H, d_h], lse [B, n_b, H]."""
    return mlra.absorbed_decode_attention(q, latent, k_rope, w_uk, w_uv, lengths, scale=scale, check=False)
