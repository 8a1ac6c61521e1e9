"""How the harness runs each case level (DESIGN §4, §6): the `Level` protocol and the registry.

The runner knows nothing level-specific. For a case it asks the case's `Level` for

  make_inputs(case)           the backend's inputs, drawn in float64 and rounded to τ;
  paths(case)                 the oracle's algorithms, name -> fn(inputs) -> {output: tensor}.
                              The FIRST is the reference every backend is judged against;
                              each runs in float64 on the rounded inputs AND again at the
                              precision each output is produced in, against its OWN float64
                              run: that is err_base (FlashAttention's rule — a base that
                              compared different algorithms would grow with an oracle bug);
  consistency(case)           pairs of paths that must agree in float64 within the rounding
                              bound before anything is judged ('oracle inconsistent' otherwise);
  call(backend, inputs, case) the backend's outputs by name (the contract of the level);
  outputs(case)               the contract's shape and dtype of every output;
  conditioning(inputs64, case) what the float64 rounding bound needs (bounds.py);
  unquantized(case)           (kernel levels) an fp8 case's inputs with the cache at τ, before
                              quantization: the reference of its quantization cost;
  position(case, output, i)   an element's index in an output -> its named position
                              ({"batch": 2, "head": 1, "channel": 17}): where a failure is.

Each level is one module of this package, named in `LEVEL_MODULES` and imported only when a
case of that level is first run: importing this package registers nothing and loads no
level (the `tp` level, for one, needs torch.distributed). Oracle functions are looked up on
their modules at call time, so a test can plant a bug in the oracle (monkeypatch) and watch
the harness refuse to judge.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from ..case import Case

Outputs = dict[str, torch.Tensor]
PathFn = Callable[[Any], Outputs]
PositionFn = Callable[[Case, str, tuple[int, ...]], dict[str, int]]

# case level -> the module whose LEVEL implements it: every level of case.CASE_LEVELS, nothing else
LEVEL_MODULES: dict[str, str] = {
    "kernel": "lrkv.verify.levels.kernel",
    "kernel-paged": "lrkv.verify.levels.paged",
    "kernel-extend": "lrkv.verify.levels.extend",
    "layer": "lrkv.verify.levels.layer",
    "layer-model": "lrkv.verify.levels.model",
    "tp": "lrkv.distributed.level",  # needs torch.distributed; with the TP code it drives
}


@dataclass(frozen=True)
class Level:
    name: str  # the case level
    needs: str  # the backend level that implements it
    make_inputs: Callable[[Case], Any]
    paths: Callable[[Case], dict[str, PathFn]]
    consistency: Callable[[Case], list[tuple[str, str]]]
    call: Callable[[Any, Any, Case], Outputs]
    outputs: Callable[[Case], dict[str, tuple[tuple[int, ...], torch.dtype]]]
    conditioning: Callable[[Any, Case], Any]  # -> bounds.Conditioning
    # a level whose backends run elsewhere (tp: on spawned ranks) wraps them for the run, and
    # may run every (backend, case) pair at once before the runner asks for one
    wrap_backends: Callable[[list[tuple[str, Any]]], list[tuple[str, Any]]] | None = None
    # prefetch(cases, backends, policy): each pair within its backend's case_timeout
    prefetch: Callable[[list[Case], list[tuple[str, Any]], Any], None] | None = None
    # the kernel levels: an fp8 case's inputs with the cache at τ, before quantization
    unquantized: Callable[[Case], Any] | None = None
    # names an output element's index, so that a failure says where (metrics.locate); None: unnamed axes
    position: PositionFn | None = None


def named_axes(**axes: tuple[str, ...]) -> PositionFn:
    """A level's `position` when each output's axes have fixed names: out=("batch", "head", "channel")."""
    return lambda case, output, index: dict(zip(axes[output], index))


def get_level(name: str) -> Level:
    """The plug-in of one case level (its module is imported on first use)."""
    try:
        module = LEVEL_MODULES[name]
    except (KeyError, TypeError):
        raise ValueError(f"unknown case level {name!r}; known: {', '.join(LEVEL_MODULES)}") from None
    level = importlib.import_module(module).LEVEL
    if level.name != name:
        raise AssertionError(f"{module}.LEVEL is level {level.name!r}, registered as {name!r}")
    return level


def make_inputs(case: Case):
    """The input bundle of any level."""
    return get_level(case.level).make_inputs(case)
