"""FP8-cache mutants: one scale bug each, the ones peers' trackers show (DESIGN §4 "FP8 caches").

Each is the tiled decode (verify/tiled.py, a correct fp8 backend) with its `dequantize` step
broken; the grid's fp8 cases give every part its own range and every head its own latent
range (verify/levels/fp8_inputs.py), so each bug moves the output by a factor, not a rounding.
`lrkv verify --backend lrkv.mutants.fp8:<Class>` rejects each; the tests run them all
through `lrkv verify` and `lrkv gate` (tests/verify/test_fp8_harness.py).

  ScaleIgnored         the fp8 values read as they are, no scale
  KVScalesSwapped      K parts dequantized with V's scales and V with K's
  SharedLatentSwapped  shared parts with the latents' scales and the latents with the shared
  HeadZeroScale        every head's latent scale read from head 0 (per_head, per_token_head)
  E5m2ReadAsE4m3       e5m2 bytes read as e4m3fn (the format of the cache ignored)
  ScaleAppliedTwice    K's scale folded into the logit scale AND applied to the key
  CastWithoutSaturating  (layer level) the append's quantizer casts x / scale as a GPU cvt
                       without .satfinite does: NaN (e4m3fn) or inf (e5m2) past max finite
"""

from __future__ import annotations

import torch

from ..reference.fp8 import E4M3, E5M2, PARTS, dequantize, expand_scale, fp8_format, round_to_grid
from ..reference.fp8_cache import quantize_append
from ..reference.lrkv import attend, decode_rope, project_token
from ..verify.protocol import BaseBackend
from ..verify.tiled import TiledBackend, TiledDecoder


def _parts(cache_scales, cd, parts, scale_of, granularity_of=None) -> tuple:
    """The four parts dequantized with scale_of(part) (and its granularity)."""
    granularity_of = granularity_of or cache_scales.granularity_of
    return tuple(dequantize(t, scale_of(p), granularity_of(p), cd) for p, t in zip(PARTS, parts))


class _ScaleIgnoredDecoder(TiledDecoder):
    def dequantize(self, cache_scales, cd, parts):
        return tuple(t.to(cd) for t in parts)


class _KVSwappedDecoder(TiledDecoder):
    SWAP = {"shared_k": "shared_v", "shared_v": "shared_k", "latent_k": "latent_v", "latent_v": "latent_k"}

    def dequantize(self, cache_scales, cd, parts):
        return _parts(cache_scales, cd, parts, lambda p: cache_scales.of(self.SWAP[p]))


class _SharedLatentSwappedDecoder(TiledDecoder):
    SWAP = {"shared_k": "latent_k", "latent_k": "shared_k", "shared_v": "latent_v", "latent_v": "shared_v"}

    def dequantize(self, cache_scales, cd, parts):
        def scale_of(p):
            s = cache_scales.of(self.SWAP[p])
            if p.startswith("shared") and s.shape != cache_scales.of(p).shape:
                s = s[..., 0]  # a latent scale with a head axis: its head 0 on the shared part
            return s

        def granularity_of(p):
            return cache_scales.granularity_of(p) if scale_of(p).shape == cache_scales.of(p).shape \
                else cache_scales.granularity_of(self.SWAP[p])

        return _parts(cache_scales, cd, parts, scale_of, granularity_of)


class _HeadZeroDecoder(TiledDecoder):
    def dequantize(self, cache_scales, cd, parts):
        def scale_of(p):
            s = cache_scales.of(p)
            has_heads = p.startswith("latent") and cache_scales.granularity_of(p) in ("per_head", "per_token_head")
            return s[..., :1].expand_as(s) if has_heads else s  # head 0's scale for every head
        return _parts(cache_scales, cd, parts, scale_of)


class _E5m2AsE4m3Decoder(TiledDecoder):
    def dequantize(self, cache_scales, cd, parts):
        if cache_scales.format == E5M2:
            parts = tuple(t.view(torch.uint8).view(E4M3) for t in parts)  # the bytes, the wrong format
        return _parts(cache_scales, cd, parts, cache_scales.of)


class _ScaleTwiceDecoder(TiledDecoder):
    def dequantize(self, cache_scales, cd, parts):
        # the K scales folded into the logit scale (exact for per-tensor K) and ALSO kept on K
        return _parts(cache_scales, cd, parts,
                      lambda p: cache_scales.of(p) * cache_scales.of(p) if p.endswith("_k") else cache_scales.of(p))


def _mutant(cls_name: str, name: str, bug: str, decoder: type) -> type:
    return type(cls_name, (TiledBackend,), {"name": name, "bug": bug, "decoder_class": decoder,
                                             "description": f"tiled decode with an fp8 bug: {bug}",
                                             "__module__": __name__})


ScaleIgnored = _mutant("ScaleIgnored", "mutant-fp8-scale-ignored", "fp8 values read without their scale",
                       _ScaleIgnoredDecoder)
KVScalesSwapped = _mutant("KVScalesSwapped", "mutant-fp8-kv-swapped", "K and V scales swapped", _KVSwappedDecoder)
SharedLatentSwapped = _mutant("SharedLatentSwapped", "mutant-fp8-shared-latent-swapped",
                              "shared and latent scales swapped", _SharedLatentSwappedDecoder)
HeadZeroScale = _mutant("HeadZeroScale", "mutant-fp8-head0-scale", "every head's latent scale read from head 0",
                        _HeadZeroDecoder)
E5m2ReadAsE4m3 = _mutant("E5m2ReadAsE4m3", "mutant-fp8-e5m2-as-e4m3", "e5m2 bits read as e4m3fn",
                         _E5m2AsE4m3Decoder)
ScaleAppliedTwice = _mutant("ScaleAppliedTwice", "mutant-fp8-scale-twice",
                            "K's scale applied to the logits and to the key", _ScaleTwiceDecoder)



def cast_without_saturating(x, fmt, scale=1.0, granularity="per_tensor"):
    """`quantize` without the clamp: past ± max finite, NaN (e4m3fn has no inf) or ±inf."""
    y = x.to(torch.float64) / expand_scale(torch.as_tensor(scale, dtype=torch.float64), granularity, x.dim())
    over = y.abs() > fp8_format(fmt).max_finite
    wild = torch.full_like(y, float("nan")) if fmt == E4M3 else torch.copysign(torch.full_like(y, float("inf")), y)
    return torch.where(over, wild, round_to_grid(y, fmt)).to(fmt)


class CastWithoutSaturating(BaseBackend):
    """The reference layer step (project, append, decode, output projection) with the append's
    quantizer broken. The step is written out here, not reused, only so that the one
    quantizer call can be swapped."""

    name = "mutant-fp8-cast-without-saturating"
    bug = "the append's quantizer casts without saturating (NaN / inf past max finite)"
    description = f"reference layer step with an fp8 bug: {bug}"
    levels = frozenset({"layer"})
    dtypes = (torch.float32, torch.bfloat16, torch.float16)
    cache_formats = ("float8_e4m3fn", "float8_e5m2")

    def layer_step(self, weights, x_t, cache, positions):
        entries = project_token(weights, x_t, positions)
        rows, pos = torch.arange(cache.batch), positions.long()
        if cache.scales is not None:
            entries = quantize_append(cache.scales, entries, rows, pos, quantizer=cast_without_saturating)
        for name, t in cache.tensors().items():
            t[rows, pos] = entries[name].to(t.dtype)
        cache.lengths = cache.lengths + 1
        out, _ = attend(entries["q"], cache, weights.basis_k, weights.basis_v, scale=weights.spec.head_dim ** -0.5,
                        rope=decode_rope(weights.spec))  # unchecked: a kernel reads on
        return torch.einsum("bhd,hde->be", out, weights.w_o), cache


FP8_MUTANTS: tuple[type, ...] = (ScaleIgnored, KVScalesSwapped, SharedLatentSwapped, HeadZeroScale, E5m2ReadAsE4m3,
                                 ScaleAppliedTwice, CastWithoutSaturating)
