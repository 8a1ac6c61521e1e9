"""The `layer` level: one `layer_step(weights, x_t, cache, positions) -> (y, cache)` (DESIGN §4):
project the new token, append it, attend (Eqs. 6–7), project the output.

The cache holds lengths[b] − 1 tokens drawn from the same projections, garbage past them;
the step appends token lengths[b] − 1. Oracle paths: the reference step with the factored
decode (the reference) and with the materialized one.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ...reference import lrkv as ref
from ...reference.cache import FactoredCache, allocate_cache
from ...reference.fp8 import PARTS
from ...reference.fp8_cache import dequantize_cache
from ...reference.masking import valid_mask
from ...reference.weights import LRKVWeights
from ..bounds import Conditioning, ConditioningProbe, through_output_projection
from ..case import Case
from . import Level, Outputs, PathFn, named_axes
from .contract import pair
from .fp8_inputs import LAYER_OUTLIER_GAIN, quantize_parts
from .inputs import cast_cache, fill_garbage, projected_sequence

@dataclass
class LayerInputs:
    """Arguments of one `layer_step(weights, x_t, cache, positions)`."""

    weights: LRKVWeights
    x_t: torch.Tensor  # [B, d]
    cache: FactoredCache  # lengths = positions (the step appends at slot positions[b])
    positions: torch.Tensor  # [B] int64

    def to(self, dtype: torch.dtype) -> LayerInputs:
        return LayerInputs(self.weights.to(dtype), self.x_t.to(dtype), cast_cache(self.cache, dtype),
                           self.positions.clone())

    def clone(self) -> LayerInputs:
        return LayerInputs(self.weights, self.x_t.clone(), self.cache.clone(), self.positions.clone())

    def dequantize_to(self, dtype: torch.dtype) -> LayerInputs:
        """An fp8 cache dequantized to dtype, without scales (the dequantize-then-attend path);
        its dynamic scales are then gone, so the step appends at dtype."""
        scales = self.cache.scales
        if scales is None:
            return self
        c = self.cache.clone()
        for p, t in zip(PARTS, dequantize_cache(scales, dtype, *(getattr(c, p) for p in PARTS))):
            setattr(c, p, t)
        c.scales = None
        return LayerInputs(self.weights, self.x_t, c, self.positions)


def make_layer_inputs(case: Case, quantize: bool = True) -> LayerInputs:
    """One decode step: a cache holding lengths[b] − 1 tokens, and token lengths[b] − 1 to append.

    An fp8 case's cache is stored at τ, then quantized (fp8_inputs.quantize_parts: static
    scales calibrated on the cached tokens); with `outliers` the appended token is
    LAYER_OUTLIER_GAIN× larger, beyond those scales: the backend's quantizer must saturate it.
    quantize=False: the cache at τ it came from (its quantization cost's reference)."""
    if case.level != "layer":
        raise ValueError(f"make_layer_inputs needs a layer case, got level {case.level!r}")
    weights, x, e = projected_sequence(case)
    B = case.batch
    positions = torch.tensor(case.lengths, dtype=torch.int64) - 1  # [B]
    cache = allocate_cache(case.spec, B, case.t_max, torch.float64)
    valid = valid_mask(positions, case.t_max)
    for i, (name, t) in enumerate(cache.tensors().items()):
        setattr(cache, name, fill_garbage(e[name], valid, case, 20 + i))
    cache.lengths = positions.to(torch.int32)
    x_t = x[torch.arange(B), positions]  # [B, d]
    if case.fp8 and case.fp8.outliers:
        x_t = x_t * LAYER_OUTLIER_GAIN
    inp = LayerInputs(weights, x_t, cache, positions).to(case.torch_dtype)
    if case.cache_fp8 and quantize:
        c = inp.cache
        stored, c.scales = quantize_parts(case, {p: getattr(c, p) for p in PARTS}, c.lengths)
        for p in PARTS:
            setattr(c, p, stored[p])
    return inp


def _layer_path(decode_name: str) -> PathFn:
    def path(inp):
        inp = inp.clone()  # the step appends to the cache
        y, _ = ref.layer_step(inp.weights, inp.x_t, inp.cache, inp.positions, decode=getattr(ref, decode_name))
        return {"y": y}
    return path


def _conditioning(inp: LayerInputs, case: Case) -> Conditioning:
    probe = ConditioningProbe(ref.decode_attention)
    inp = inp.clone()
    ref.layer_step(inp.weights, inp.x_t, inp.cache, inp.positions, decode=probe)
    return through_output_projection(probe.cond, inp.weights)


def _call(backend, inp: LayerInputs, case: Case) -> Outputs:
    inp = inp.clone()
    y, _ = pair(backend.layer_step(inp.weights, inp.x_t, inp.cache, inp.positions), "layer_step", "(y, cache)")
    return {"y": y}


LEVEL = Level(
    name="layer", needs="layer", make_inputs=make_layer_inputs,
    paths=lambda case: {"factored": _layer_path("decode_attention"),
                        "materialized": _layer_path("materialized_decode_attention")},
    consistency=lambda case: [("factored", "materialized")], call=_call,
    outputs=lambda case: {"y": ((case.batch, case.spec.d_model), case.torch_dtype)},
    conditioning=_conditioning, unquantized=lambda case: make_layer_inputs(case, quantize=False),
    position=named_axes(y=("batch", "feature")),
)
