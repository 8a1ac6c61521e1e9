"""The quantization cost of an FP8 LRKV cache on one decode case (DESIGN §4, "FP8 caches").

The cost is what storing the cache in fp8 does to the decode output, measured against the
float64 oracle (Eqs. 6–7) on the *unquantized* cache:

    ref   = decode_attention(q, cache)                        float64, cache as given
    fp8   = decode_attention(q at τ, quantize_cache(cache))   dequantize-then-attend at τ
    max_abs = max |fp8 − ref|,  mean_abs = mean |fp8 − ref|,
    sqnr_db = 20 · log10(‖ref‖ / ‖ref − fp8‖)                 (torchao's SQNR; +inf if equal)

With τ = float64 (the default) the cost is the quantization alone; at a half precision it
adds that precision's arithmetic, as a kernel reading the fp8 cache would.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from .fp8 import PARTS
from .fp8_cache import quantize_cache
from .lrkv import decode_attention
from .rope import ExactRope


@dataclass(frozen=True)
class QuantizationCost:
    max_abs: float  # max |fp8 − ref| over out
    mean_abs: float  # mean |fp8 − ref| over out
    sqnr_db: float  # 20·log10(‖ref‖ / ‖ref − fp8‖); +inf when the outputs are equal


def sqnr_db(ref: torch.Tensor, x: torch.Tensor) -> float:
    """torchao's SQNR in dB, in float64: 20·log10(‖ref‖ / ‖ref − x‖)."""
    ref, x = ref.to(torch.float64), x.to(torch.float64)
    noise = torch.linalg.vector_norm(ref - x)
    if noise == 0:
        return math.inf
    return float(20 * torch.log10(torch.linalg.vector_norm(ref) / noise))


def quantization_cost(
    q: torch.Tensor,  # [B, H, d_h]
    shared_k: torch.Tensor,  # [B, T_max, d_h]   unquantized (any float dtype), garbage past lengths
    shared_v: torch.Tensor,  # [B, T_max, d_h]
    latent_k: torch.Tensor,  # [B, T_max, H, r]
    latent_v: torch.Tensor,  # [B, T_max, H, r]
    basis_k: torch.Tensor,  # [H, d_h, r]
    basis_v: torch.Tensor,  # [H, d_h, r]
    lengths: torch.Tensor,  # [B]
    *,
    scale: float,
    fmt: torch.dtype,
    granularity: str,
    key_scale: torch.Tensor | None = None,  # [B, T_max, H]
    rope: ExactRope | None = None,
    dtype: torch.dtype = torch.float64,
) -> QuantizationCost:
    """Error of the fp8 path (the cache quantized by `quantize_cache`, attended at `dtype`)
    against the float64 oracle on the unquantized cache."""
    f64 = lambda t: None if t is None else t.to(torch.float64)  # noqa: E731
    tau = lambda t: None if t is None else t.to(dtype)  # noqa: E731
    ref, _ = decode_attention(f64(q), f64(shared_k), f64(shared_v), f64(latent_k), f64(latent_v), f64(basis_k),
                              f64(basis_v), lengths, scale=scale, key_scale=f64(key_scale), rope=rope)
    parts = dict(zip(PARTS, (shared_k, shared_v, latent_k, latent_v)))
    stored, scales = quantize_cache(parts, lengths, fmt, granularity)
    out, _ = decode_attention(tau(q), *(stored[p] for p in PARTS), tau(basis_k), tau(basis_v), lengths, scale=scale,
                              key_scale=tau(key_scale), rope=rope, cache_scales=scales)
    err = (out.to(torch.float64) - ref).abs()
    return QuantizationCost(float(err.max()) if err.numel() else 0.0, float(err.mean()) if err.numel() else 0.0,
                            sqnr_db(ref, out))
