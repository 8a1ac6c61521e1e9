"""The `layer-model` level: the layer decoded token by token from an empty cache, against the
model — the training-form `layer_forward` over the whole sequence (DESIGN §4).

rope='latent' (the paper's Sec. 3 claim) decodes something else than the model by design:
its cases carry expect='differ' and only the two incremental paths must agree. The `tp`
level reuses this level's draw and its incremental paths.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ...reference import lrkv as ref
from ...reference.cache import FactoredCache, allocate_cache
from ...reference.weights import LRKVWeights, init_lrkv_weights
from ..bounds import Conditioning, ConditioningProbe, through_output_projection
from ..case import Case
from . import Level, Outputs, PathFn, named_axes
from .inputs import cast_cache, fill_garbage, generator

@dataclass
class ModelInputs:
    """A whole sequence for the layer-model level: decode it step by step, compare with the model."""

    weights: LRKVWeights
    x: torch.Tensor  # [B, T, d]
    nan_garbage: bool = True  # how the backend's empty cache is filled

    def to(self, dtype: torch.dtype) -> ModelInputs:
        return ModelInputs(self.weights.to(dtype), self.x.to(dtype), self.nan_garbage)

    def clone(self) -> ModelInputs:
        return ModelInputs(self.weights, self.x.clone(), self.nan_garbage)


def make_model_inputs(case: Case) -> ModelInputs:
    """A whole sequence x [B, T, d] for the layer-model level."""
    if case.level != "layer-model":
        raise ValueError(f"make_model_inputs needs a layer-model case, got level {case.level!r}")
    weights = init_lrkv_weights(case.spec, seed=case.seed)
    x = torch.randn(case.batch, case.t_max, case.spec.d_model, generator=generator(case, 1), dtype=torch.float64)
    return ModelInputs(weights, x, case.nan_garbage).to(case.torch_dtype)


def empty_cache(case: Case, dtype: torch.dtype) -> FactoredCache:
    """The cache a layer-model run starts from (garbage everywhere, lengths 0)."""
    cache = allocate_cache(case.spec, case.batch, case.t_max, torch.float64)
    valid = torch.zeros(case.batch, case.t_max, dtype=torch.bool)
    for i, (name, t) in enumerate(cache.tensors().items()):
        setattr(cache, name, fill_garbage(t, valid, case, 30 + i))
    return cast_cache(cache, dtype)


def decode_sequence(step: Callable, weights, x: torch.Tensor, case: Case) -> torch.Tensor:
    """Feed x [B, T, d] one token at a time through step(weights, x_t, cache, positions).  # [B, T, d]"""
    cache = empty_cache(case, x.dtype)
    ys = []
    for t in range(x.shape[1]):
        y, cache = step(weights, x[:, t], cache, torch.full((x.shape[0],), t, dtype=torch.int64, device=x.device))
        ys.append(y)
    return torch.stack(ys, dim=1)


def incremental_y(decode_name: str, inp: ModelInputs, case: Case) -> torch.Tensor:
    """The reference layer step, token by token from an empty cache, with the named decode.  # [B, T, d]"""
    step = lambda w, x, c, p: ref.layer_step(w, x, c, p, decode=getattr(ref, decode_name))  # noqa: E731
    return decode_sequence(step, inp.weights, inp.x, case)


def _incremental(decode_name: str, case: Case) -> PathFn:
    return lambda inp: {"y": incremental_y(decode_name, inp, case)}


def _paths(case: Case) -> dict[str, PathFn]:
    """The model (training form) is the reference; the incremental paths are what decoding does."""
    return {"model": lambda inp: {"y": ref.layer_forward(inp.weights, inp.x)},
            "incremental": _incremental("decode_attention", case),
            "incremental-materialized": _incremental("materialized_decode_attention", case)}


def _consistency(case: Case) -> list[tuple[str, str]]:
    pairs = [("incremental", "incremental-materialized")]
    if case.expect == "match":  # rope='latent' decodes something else than the model, by design
        pairs.insert(0, ("model", "incremental"))
    return pairs


def model_conditioning(inp: ModelInputs, case: Case) -> Conditioning:
    """The float64 bound's conditioning of a whole sequence decoded token by token."""
    probe = ConditioningProbe(ref.decode_attention)
    decode_sequence(lambda w, x, c, p: ref.layer_step(w, x, c, p, decode=probe), inp.weights, inp.x, case)
    return through_output_projection(probe.cond, inp.weights)


def _call(backend, inp: ModelInputs, case: Case) -> Outputs:
    return {"y": decode_sequence(backend.layer_step, inp.weights, inp.x.clone(), case)}


LEVEL = Level(
    name="layer-model", needs="layer", make_inputs=make_model_inputs, paths=_paths,
    consistency=_consistency, call=_call,
    outputs=lambda case: {"y": ((case.batch, case.t_max, case.spec.d_model), case.torch_dtype)},
    conditioning=model_conditioning, position=named_axes(y=("batch", "position", "feature")),
)
