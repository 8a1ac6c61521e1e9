"""A tiled, split-K online-softmax factored decode in plain PyTorch.

What a fused kernel does, written so the suite can test its invariants (split count and
tile size must not change the answer) and break it on purpose (`lrkv.mutants`):

  the cache range is cut into `splits` chunks (split-K; counts need not divide T); each
  chunk is swept tile by tile with a running max m, running sum l and two accumulators —
  acc_shared [d_h] for a·S_V and acc_private [r] for a·R_V (Eq. 7 keeps the private value
  term in latent space; B_h^V is applied once at the end). When m grows, l AND both
  accumulators must be rescaled by exp(m_old − m_new). Chunks merge through their
  log-sum-exp.

Half-precision inputs are computed in float32 (as real kernels accumulate), float64 in float64.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..reference.cache import FactoredCache
from ..reference.contract import validate_cache_inputs
from ..reference.fp8 import round_query, round_weights
from ..reference.fp8_cache import dequantize_cache
from ..reference.lrkv import accumulation_dtype, exact_freqs, factored_logits, from_latent, layer_step
from ..reference.masking import NEG_INF, valid_mask, zero_garbage
from .protocol import BaseBackend

DEFAULT_TILE = 16
DEFAULT_SPLITS = 1


@dataclass
class SplitState:
    """Online-softmax state of one split, per (batch, head)."""

    m: torch.Tensor  # [B, H]       running max of the scaled logits
    l: torch.Tensor  # [B, H]       running Σ exp(logit − m)
    acc_shared: torch.Tensor  # [B, H, d_h]  Σ p·S_V
    acc_private: torch.Tensor  # [B, H, r]    Σ p·R_V  (latent space)


class TiledDecoder:
    """Callable with the decode contract; `tile` and `splits` choose the schedule."""

    def __init__(self, tile: int = DEFAULT_TILE, splits: int = DEFAULT_SPLITS):
        if tile < 1 or splits < 1:
            raise ValueError(f"tile and splits must be >= 1, got tile={tile}, splits={splits}")
        self.tile, self.splits = tile, splits

    def rescale(self, st: SplitState, alpha: torch.Tensor) -> None:
        """The running max moved: rescale the sum and BOTH accumulators by alpha [B, H]."""
        st.l = st.l * alpha
        st.acc_shared = st.acc_shared * alpha[..., None]
        st.acc_private = st.acc_private * alpha[..., None]

    def dequantize(self, cache_scales, cd: torch.dtype, parts: tuple) -> tuple:
        """An fp8 cache's four parts as cd: stored × scale, each
        part by its own scale (DESIGN §4 "FP8 caches"); the fp8 mutants override this."""
        return dequantize_cache(cache_scales, cd, *parts)

    def round_query(self, q: torch.Tensor) -> torch.Tensor:
        """q as the products meet it: as given (Fp8ComputeDecoder rounds it to e4m3)."""
        return q

    def round_weights(self, p: torch.Tensor) -> torch.Tensor:
        """A tile's weights exp(s − m) as the value products meet them: as computed."""
        return p

    def __call__(self, q, cache: FactoredCache, basis_k, basis_v, *, scale, rope=None, cu_seqlens_q=None):
        if cu_seqlens_q is not None or cache.paged:
            raise TypeError("the tiled decoder implements the contiguous decode contract only")
        B, T, H, d_h, r = validate_cache_inputs(q, cache, basis_k, basis_v, scale=scale, rope=rope)
        out_dtype = q.dtype
        cd = accumulation_dtype(q.dtype)  # accumulate wide: float32 for half inputs, as kernels do
        parts = cache.parts
        if cache.scales is not None:  # dequantize on load, at the accumulation dtype
            parts = self.dequantize(cache.scales, cd, parts)
        key_scale = None if cache.key_scale is None else cache.key_scale.to(cd)
        wide = FactoredCache(*(t.to(cd) for t in parts), cache.lengths, key_scale)
        q, basis_k, basis_v = q.to(cd), basis_k.to(cd), basis_v.to(cd)
        q = self.round_query(q)  # at cd: q's descale meets the wide scores
        valid = valid_mask(cache.lengths, T)  # [B, T]
        freqs = exact_freqs(rope, d_h)
        chunk = max(1, math.ceil(T / self.splits))
        states = []
        for a in range(0, T, chunk):
            st = SplitState(torch.full((B, H), NEG_INF, dtype=cd), torch.zeros(B, H, dtype=cd),
                            torch.zeros(B, H, d_h, dtype=cd), torch.zeros(B, H, r, dtype=cd))
            for j0 in range(a, min(a + chunk, T), self.tile):
                j1 = min(j0 + self.tile, a + chunk, T)
                self._tile(st, j0, j1, q, wide, basis_k, freqs, valid, scale)
            states.append(st)
        out, lse = self._merge(states, basis_v, B, H, d_h, cd)
        return out.to(out_dtype), lse

    def _tile(self, st, j0, j1, q, c: FactoredCache, basis_k, freqs, valid, scale) -> None:
        v = valid[:, None, j0:j1]  # [B, 1, t]
        # Eq. 6 on this tile only (exact RoPE rebuilds and rotates just these slots' private keys)
        logits = factored_logits(q, c.shared_k[:, j0:j1], c.latent_k[:, j0:j1], basis_k, freqs=freqs, start=j0,
                                 key_scale=None if c.key_scale is None else c.key_scale[:, j0:j1])
        logits = torch.where(v, logits * scale, NEG_INF)  # [B, H, t]; where, so NaN garbage cannot leak
        m_new = torch.maximum(st.m, logits.amax(-1))
        alpha = torch.where(m_new == NEG_INF, 0.0, torch.exp(st.m - m_new))
        p = torch.where(v, torch.exp(logits - m_new[..., None]), 0.0)
        self.rescale(st, alpha)
        st.m = m_new
        st.l = st.l + p.sum(-1)
        sv, lv = zero_garbage(c.shared_v[:, j0:j1], valid[:, j0:j1]), zero_garbage(c.latent_v[:, j0:j1], valid[:, j0:j1])
        p = self.round_weights(p)  # after l's sum: the normaliser sums the weights as computed
        st.acc_shared = st.acc_shared + torch.einsum("bht,btd->bhd", p, sv)
        st.acc_private = st.acc_private + torch.einsum("bht,bthr->bhr", p, lv)

    @staticmethod
    def _merge(states, basis_v, B, H, d_h, cd):
        """Combine splits by their log-sum-exp; empty everywhere → out 0, lse −inf."""
        if not states:  # T_max == 0 cannot happen (validated), kept for clarity
            return torch.zeros(B, H, d_h, dtype=cd), torch.full((B, H), NEG_INF, dtype=cd)
        m = torch.stack([s.m for s in states])  # [S, B, H]
        l = torch.stack([s.l for s in states])
        split_lse = torch.where(l > 0, m + torch.log(l), NEG_INF)
        lse = torch.logsumexp(split_lse, dim=0)  # [B, H]
        w = torch.where(split_lse > NEG_INF, torch.exp(split_lse - lse), 0.0) / torch.where(l > 0, l, 1.0)
        acc_s = torch.einsum("sbh,sbhd->bhd", w, torch.stack([s.acc_shared for s in states]))
        acc_r = torch.einsum("sbh,sbhr->bhr", w, torch.stack([s.acc_private for s in states]))
        out = acc_s + from_latent(acc_r, basis_v)  # Eq. 7: (a R_V) B_V^T
        return out, lse


class TiledBackend(BaseBackend):
    """The tiled decoder as a backend; `configure(case)` takes the case's tile/split hints."""

    name = "tiled"
    levels = frozenset({"kernel", "layer"})
    dtypes = (torch.float64, torch.float32, torch.bfloat16, torch.float16)
    description = "tiled split-K online-softmax factored decode in plain PyTorch"
    cache_formats = ("float8_e4m3fn", "float8_e5m2")  # dequantized on load (TiledDecoder.dequantize)
    decoder_class = TiledDecoder

    def __init__(self, tile: int = DEFAULT_TILE, splits: int = DEFAULT_SPLITS):
        self.default = (tile, splits)
        self.decoder = self.decoder_class(tile, splits)

    def configure(self, case) -> None:
        tile = getattr(case, "tile", 0) or self.default[0]
        splits = getattr(case, "splits", 0) or self.default[1]
        self.decoder = self.decoder_class(tile, splits)

    def attend(self, q, cache, basis_k, basis_v, **kw):
        return self.decoder(q, cache, basis_k, basis_v, **kw)

    def layer_step(self, weights, x_t, cache, positions):
        return layer_step(weights, x_t, cache, positions, decode=self.decode_attention)


class Fp8ComputeDecoder(TiledDecoder):
    """An FA3-style fp8 decode: q rounded to e4m3 with one scale per (row, head), each tile's
    weights exp(s − m_running) rounded to e4m3 before the value products (the running max,
    not the final one, as a fused kernel has it). Its error is what a case's fp8 compute
    "qp" allows (lrkv.reference.fp8.round_query / rounded_weights)."""

    def round_query(self, q: torch.Tensor) -> torch.Tensor:
        return round_query(q)

    def round_weights(self, p: torch.Tensor) -> torch.Tensor:
        return round_weights(p)


class Fp8ComputeBackend(TiledBackend):
    """The FA3-style decoder as a backend. It runs the kernel level's fp8 cases that allow
    both roundings (fp8 compute "qp") and declines the rest, so a plain fp8 case is run as
    its "qp" twin and judged by that algorithm's err_base — never excused by the format's."""

    name = "tiled-fp8-compute"
    levels = frozenset({"kernel"})
    dtypes = (torch.float32, torch.bfloat16, torch.float16)
    description = "tiled decode rounding q and the softmax weights to e4m3 (FA3-style fp8 compute)"
    decoder_class = Fp8ComputeDecoder

    def supports(self, case) -> tuple[bool, str]:
        if not getattr(case, "cache_fp8", ""):
            return False, "an fp8-compute decode reads fp8 caches only"
        if case.fp8.compute != "qp":
            return False, "rounds q and the softmax weights to e4m3: runs fp8 compute 'qp' cases only"
        return True, ""
