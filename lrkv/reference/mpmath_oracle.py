"""An mpmath oracle (50+ significant digits) for the decode contract on tiny shapes.

It measures the float64 reference's own rounding error, and separates algebra from
roundoff: on near-cancelling keys the factored and materialized float64 paths may differ,
and the oracle says whether both are within rounding of the exact value (DESIGN §6).

Inputs are converted exactly (every float64 is an mpf), so the oracle computes the exact
answer for the float64 inputs, up to `dps` digits.
"""

from __future__ import annotations

import mpmath
import torch

from .cache import FactoredCache
from .rope import ExactRope

MAX_ELEMENTS = 20_000  # refuse shapes that would take minutes in pure Python


def _mp(t: torch.Tensor):
    """Nested lists of mpf, converted exactly from float64."""
    return [_mp(x) for x in t] if t.dim() else mpmath.mpf(float(t))


def _rope_row(x: list, pos: int, theta: float) -> list:
    """rotate-half RoPE of one row at `dps` precision."""
    d = len(x)
    half = d // 2
    out = list(x)
    for i in range(half):
        ang = pos * mpmath.power(mpmath.mpf(theta), mpmath.mpf(-2 * i) / d)
        c, s = mpmath.cos(ang), mpmath.sin(ang)
        a, b = x[i], x[i + half]
        out[i], out[i + half] = a * c - b * s, b * c + a * s
    return out


def decode_attention_mp(
    q: torch.Tensor,  # [B, H, d_h]
    cache: FactoredCache,  # contiguous, float (not fp8)
    basis_k: torch.Tensor,  # [H, d_h, r]
    basis_v: torch.Tensor,  # [H, d_h, r]
    *,
    scale: float, rope: ExactRope | None = None, dps: int = 50,
) -> tuple[list, list]:
    """Eqs. 6–7 in exact-ish arithmetic. Returns out[b][h][e] and lse[b][h] as mpf."""
    B, H, d_h = q.shape
    T, r = cache.t_max, cache.latent_k.shape[3]
    lengths, key_scale = cache.lengths, cache.key_scale
    if B * T * H * (d_h + r) > MAX_ELEMENTS:
        raise ValueError(f"shape too large for the mpmath oracle: B={B}, T={T}, H={H}, d_h={d_h}, r={r}")
    with mpmath.workdps(dps):
        Q, SK, SV, LK, LV, BK, BV = (_mp(t.double()) for t in (q, *cache.parts, basis_k, basis_v))
        KS = _mp(key_scale.double()) if key_scale is not None else None
        sc = mpmath.mpf(scale)
        outs, lses = [], []
        for b in range(B):
            n = int(lengths[b])
            out_b, lse_b = [], []
            for h in range(H):
                # K_h[j] = S_K[j] + rope?(R_h[j] B_h^T) — materialized at full precision
                logits = []
                for j in range(n):
                    priv = [mpmath.fsum(LK[b][j][h][k] * BK[h][e][k] for k in range(r)) for e in range(d_h)]
                    if rope is not None:
                        priv = _rope_row(priv, j, rope.theta)
                    key = [SK[b][j][e] + priv[e] for e in range(d_h)]
                    dot = mpmath.fsum(Q[b][h][e] * key[e] for e in range(d_h))
                    if KS is not None:
                        dot *= KS[b][j][h]
                    logits.append(dot * sc)
                if n == 0:
                    out_b.append([mpmath.mpf(0)] * d_h)
                    lse_b.append(mpmath.mpf("-inf"))
                    continue
                m = max(logits)
                w = [mpmath.exp(x - m) for x in logits]
                z = mpmath.fsum(w)
                lse_b.append(m + mpmath.log(z))
                val = []
                for e in range(d_h):
                    acc = mpmath.fsum(
                        w[j] * (SV[b][j][e] + mpmath.fsum(LV[b][j][h][k] * BV[h][e][k] for k in range(r)))
                        for j in range(n)
                    )
                    val.append(acc / z)
                out_b.append(val)
            outs.append(out_b)
            lses.append(lse_b)
    return outs, lses


def to_tensor(values, dtype=torch.float64) -> torch.Tensor:
    """Round the oracle's values to a float tensor (for error measurement)."""
    def conv(v):
        return [conv(x) for x in v] if isinstance(v, list) else float(v)
    return torch.tensor(conv(values), dtype=dtype)
