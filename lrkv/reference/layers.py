"""One interface over every attention family's float64 reference (DESIGN §2, §4).

The tiny decoder LM — and anything else that builds layers of an arbitrary family — asks
`layer_module(spec)` and calls the same names whatever the family:

    init_weights(spec, seed=0, dtype=torch.float64) -> weights      (weights.spec, weights.to(dtype))
    layer_forward(weights, x [B, T, d], lengths=None) -> y [B, T, d]          training form
    allocate_cache(spec, batch, t_max, dtype) -> cache                      NaN-filled, lengths 0
    prefill(weights, x, lengths=None, t_max=None) -> (y, cache)
    layer_step(weights, x_t [B, d], cache, positions [B]) -> (y [B, d], cache)
    decode_attention(...)                                                   the kernel level

mha, gqa and mqa share `lrkv.reference.dense`. lrkv's module predates this registry and names
its initialiser `lrkv.reference.weights.init_lrkv_weights` and its allocator
`lrkv.reference.cache.allocate_cache`, so each family is wrapped in a `LayerFamily` record
rather than used as a bare module (the raw module stays reachable as `.module`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType

from ..spec import FAMILIES, AttentionSpec
from . import cache as _lrkv_cache
from . import dense, mla, mlra
from . import lrkv as _lrkv
from .weights import init_lrkv_weights


@dataclass(frozen=True)
class LayerFamily:
    """The uniform function set of one family's reference layer."""

    name: str  # the module's short name: dense | mla | mlra | lrkv
    module: ModuleType
    init_weights: Callable
    layer_forward: Callable
    allocate_cache: Callable
    prefill: Callable
    layer_step: Callable
    decode_attention: Callable


def _from_module(name: str, module: ModuleType, **overrides) -> LayerFamily:
    names = ("init_weights", "layer_forward", "allocate_cache", "prefill", "layer_step", "decode_attention")
    return LayerFamily(name, module, **{n: overrides.get(n) or getattr(module, n) for n in names})


_DENSE = _from_module("dense", dense)
LAYER_FAMILIES: dict[str, LayerFamily] = {
    "mha": _DENSE,
    "gqa": _DENSE,
    "mqa": _DENSE,
    "mla": _from_module("mla", mla),
    "mlra": _from_module("mlra", mlra),
    "lrkv": _from_module("lrkv", _lrkv, init_weights=init_lrkv_weights,
                         allocate_cache=_lrkv_cache.allocate_cache),
}
assert set(LAYER_FAMILIES) == set(FAMILIES), "every spec family needs a reference layer"


def layer_module(spec: AttentionSpec | str) -> LayerFamily:
    """The reference layer of spec.family (or of a family name). ValueError for an unknown family."""
    family = spec.family if isinstance(spec, AttentionSpec) else spec
    try:
        return LAYER_FAMILIES[family]
    except (KeyError, TypeError):
        raise ValueError(f"unknown family {family!r}; known: {sorted(LAYER_FAMILIES)}") from None
