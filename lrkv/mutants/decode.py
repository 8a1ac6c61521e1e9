"""Deliberately broken backends: the gate must be able to say no.

Each mutant carries exactly one bug that a real LRKV decode kernel could have. Run any of
them with `lrkv verify --backend lrkv.mutants.decode:<Class> --grid mutants`; tests run
them all through the harness and the gate and require every one to be rejected while the
correct backends pass (tests/mutants/test_decode.py).
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ..reference.contract import validate_cache_inputs
from ..reference.lrkv import attend
from ..reference.rope import ExactRope
from ..verify.protocol import BaseBackend
from ..verify.tiled import SplitState, TiledBackend, TiledDecoder

MUTANT_TILE = 8  # tiles smaller than T, so that the running max changes between tiles


class Mutant(BaseBackend):
    """A kernel-level backend whose `bug` says what is wrong with it."""

    levels = frozenset({"kernel"})
    dtypes = (torch.float64, torch.float32)
    bug = ""

    def attend(self, q, cache, basis_k, basis_v, **kw):
        # Unchecked reference math on (possibly altered) arguments, as a kernel would run it.
        return attend(q, cache, basis_k, basis_v, **kw)


class SeparateSoftmax(Mutant):
    name = "mutant-separate-softmax"
    bug = "shared and private logits get a softmax each (MLRA-style branches) instead of one over their sum"

    def attend(self, q, cache, *args, **kw):
        z = torch.zeros_like
        shared_out, lse = super().attend(q, replace(cache, latent_k=z(cache.latent_k), latent_v=z(cache.latent_v)),
                                         *args, **kw)
        private_out, _ = super().attend(q, replace(cache, shared_k=z(cache.shared_k), shared_v=z(cache.shared_v)),
                                        *args, **kw)
        return shared_out + private_out, lse


class SqrtRankScale(Mutant):
    name = "mutant-scale-sqrt-r"
    bug = "softmax scale 1/sqrt(r) instead of 1/sqrt(d_h)"

    def attend(self, q, cache, *args, scale, **kw):
        r = cache.latent_k.shape[-1]
        return super().attend(q, cache, *args, scale=max(r, 1) ** -0.5, **kw)


class _NoPrivateRescaleDecoder(TiledDecoder):
    def rescale(self, st: SplitState, alpha: torch.Tensor) -> None:
        st.l = st.l * alpha
        st.acc_shared = st.acc_shared * alpha[..., None]  # acc_private is left stale: the bug


class NoPrivateRescale(TiledBackend):
    name = "mutant-no-private-rescale"
    levels = frozenset({"kernel"})
    dtypes = (torch.float64, torch.float32)
    bug = "online softmax forgets to rescale the private (latent) accumulator when the running max grows"
    decoder_class = _NoPrivateRescaleDecoder

    def __init__(self):
        super().__init__(tile=MUTANT_TILE, splits=1)


class OffByOneMask(Mutant):
    name = "mutant-off-by-one-mask"
    bug = "length mask j < lengths − 1: the newest token is never attended"

    def attend(self, q, cache, *args, **kw):
        return super().attend(q, replace(cache, lengths=(cache.lengths - 1).clamp(min=0)), *args, **kw)


class ReadsPastLength(Mutant):
    name = "mutant-reads-past-length"
    bug = "mask j <= lengths: reads one garbage slot past the end (NaN in tests)"

    def attend(self, q, cache, *args, **kw):
        return super().attend(q, replace(cache, lengths=(cache.lengths + 1).clamp(max=cache.t_max)), *args, **kw)


class WrongHeadBasis(Mutant):
    name = "mutant-wrong-head-basis"
    bug = "head h uses B_{h+1}: an off-by-one head index into basis_k / basis_v"

    def attend(self, q, cache, basis_k, basis_v, **kw):
        return super().attend(q, cache, basis_k.roll(1, 0), basis_v.roll(1, 0), **kw)


class DroppedPrivateValue(Mutant):
    name = "mutant-dropped-private-value"
    bug = "Eq. 7 without (a R_V) B_V^T: only the shared value term"

    def attend(self, q, cache, *args, **kw):
        return super().attend(q, replace(cache, latent_v=torch.zeros_like(cache.latent_v)), *args, **kw)


class Float16Accumulation(Mutant):
    name = "mutant-fp16-accumulation"
    dtypes = (torch.float16,)
    bug = "softmax sum and value accumulator kept in float16, token by token, over long T"

    def attend(self, q, cache, basis_k, basis_v, *, scale, rope=None, cu_seqlens_q=None):
        B, T, H, d_h, r = validate_cache_inputs(q, cache, basis_k, basis_v, scale=scale, rope=rope)
        f = torch.float32  # logits and values formed in float32 — only the accumulation is narrow
        valid = torch.arange(T)[None, :] < cache.lengths[:, None]  # [B, T]
        k = cache.shared_k.to(f)[:, :, None] + torch.einsum("bthr,hdr->bthd", cache.latent_k.to(f), basis_k.to(f))
        v = cache.shared_v.to(f)[:, :, None] + torch.einsum("bthr,hdr->bthd", cache.latent_v.to(f), basis_v.to(f))
        logits = torch.where(valid[:, None], torch.einsum("bhd,bthd->bht", q.to(f), k) * scale, float("-inf"))
        m = logits.amax(-1)  # [B, H]
        p = torch.where(valid[:, None], torch.exp(logits - m[..., None]), 0.0).half()  # [B, H, T]
        v = torch.where(valid[..., None, None], v, 0.0).half()  # [B, T, H, d_h]
        l = torch.zeros(B, H, dtype=torch.float16)
        acc = torch.zeros(B, H, d_h, dtype=torch.float16)
        for t in range(T):  # the bug: a float16 running sum
            l = l + p[..., t]
            acc = acc + p[..., t, None] * v[:, t]
        lf = l.float()
        out = torch.where(lf[..., None] > 0, acc.float() / lf[..., None], 0.0)
        lse = torch.where(lf > 0, m + torch.log(lf), float("-inf"))
        return out.half(), lse


class IgnoresRopeTheta(Mutant):
    name = "mutant-ignores-rope-theta"
    bug = "exact RoPE always rotates with the default base 10000, whatever the spec's rope_theta"

    def attend(self, *args, rope=None, **kw):
        return super().attend(*args, rope=None if rope is None else ExactRope(), **kw)


def _as_if_contiguous(t: torch.Tensor) -> torch.Tensor:
    """Read t's storage with the strides a contiguous tensor of its shape would have."""
    strides, acc = [], 1
    for size in reversed(t.shape):
        strides.insert(0, acc)
        acc *= size
    return t.as_strided(t.shape, strides, t.storage_offset())


class AssumesContiguousLatents(Mutant):
    name = "mutant-assumes-contiguous-latents"
    bug = "latent_v indexed with contiguous [B, T, H, r] strides: wrong head stride on a head-major cache"

    def attend(self, q, cache, *args, **kw):
        return super().attend(q, replace(cache, latent_v=_as_if_contiguous(cache.latent_v)), *args, **kw)


ALL_MUTANTS = (SeparateSoftmax, SqrtRankScale, NoPrivateRescale, OffByOneMask, ReadsPastLength, WrongHeadBasis,
               DroppedPrivateValue, Float16Accumulation, IgnoresRopeTheta, AssumesContiguousLatents)
