"""The quantization cost of an FP8 LRKV cache on one decode case (DESIGN §4, "FP8 caches").

The cost is what storing the cache in fp8 does to the decode output, measured against the
float64 oracle (Eqs. 6–7) on the *unquantized* cache:

    ref   = decode_attention(q, cache)                        float64, cache as given
    fp8   = decode_attention(q at τ, quantize_cache(cache))   dequantize-then-attend at τ
    max_abs = max |fp8 − ref|,  mean_abs = mean |fp8 − ref|,
    sqnr_db = 10 · log10(Σref² / Σ(fp8 − ref)²)              (torchao's SQNR; +inf if equal)

measured by the harness's own `error_metrics` (it lives in verify/, above the references,
so that SQNR has one definition).

With τ = float64 (the default) the cost is the quantization alone; at a half precision it
adds that precision's arithmetic, as a kernel reading the fp8 cache would.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..reference.fp8 import PARTS
from ..reference.fp8_cache import quantize_cache
from ..reference.lrkv import decode_attention
from ..reference.rope import ExactRope
from .metrics import error_metrics, json_float


@dataclass(frozen=True)
class QuantizationCost:
    max_abs: float  # max |fp8 − ref| over out
    mean_abs: float  # mean |fp8 − ref| over out
    sqnr_db: float  # 10·log10(Σref² / Σ(fp8 − ref)²); +inf when the outputs are equal

    def to_dict(self) -> dict:
        return {"max_abs": json_float(self.max_abs), "mean_abs": json_float(self.mean_abs),
                "sqnr_db": json_float(self.sqnr_db)}


def measured(fp8_out: torch.Tensor, ref: torch.Tensor) -> QuantizationCost:
    """The cost of one fp8 output against its float64 reference on the unquantized cache
    (the harness calls this on every fp8 case: runner.prepare_inputs)."""
    m = error_metrics(fp8_out, ref)
    return QuantizationCost(m.max_abs, m.mean_abs, m.sqnr_db)


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
    return measured(out, ref)
