"""The backend protocol and registry (DESIGN §4).

A backend is an object with a name, the levels it implements (kernel / layer / model), the
dtypes it supports, and `available() -> (bool, reason)`. Kernel level is the decode
contract of `lrkv.reference.contract`; layer level is `layer_step(weights, x_t, cache,
positions) -> (y, cache)`.

Built-ins are registered by import path so that importing the registry never imports
Triton, onnxruntime or torch-tensorrt. A user's backend is `package.module:attribute`,
where the attribute is a backend object, a class, or a zero-argument factory. Like
gunicorn and uvicorn, resolution falls back to the working directory, so
`lrkv verify --backend examples.my_backend:backend` works from the repository root.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

import torch

LEVELS = ("kernel", "layer", "model")


@runtime_checkable
class Backend(Protocol):
    name: str
    levels: frozenset[str]
    dtypes: tuple[torch.dtype, ...]

    def available(self) -> tuple[bool, str]: ...


class BaseBackend:
    """Convenience base: subclasses set name/levels/dtypes and implement what they support."""

    name: str = "unnamed"
    levels: frozenset[str] = frozenset({"kernel"})
    dtypes: tuple[torch.dtype, ...] = (torch.float32,)
    description: str = ""

    def available(self) -> tuple[bool, str]:
        return True, ""

    def supports(self, case: Any) -> tuple[bool, str]:
        """Whether this backend runs a case (the harness skips with the reason otherwise)."""
        return True, ""

    def configure(self, case: Any) -> None:
        """Called by the harness before each case; read hints such as `case.splits`, `case.tile`."""

    def decode_attention(self, q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, *,
                         scale, key_scale=None, rope=None):
        raise TypeError(f"backend {self.name!r} does not implement the kernel level")

    def layer_step(self, weights, x_t, cache, positions):
        raise TypeError(f"backend {self.name!r} does not implement the layer level")

    def __repr__(self) -> str:
        return f"<backend {self.name} levels={sorted(self.levels)}>"


# name -> "module:attribute" (lazy) or a factory
_REGISTRY: dict[str, str | Callable[[], Any]] = {
    "reference": "lrkv.verify.backends:ReferenceBackend",
    "materialized": "lrkv.verify.backends:MaterializedBackend",
    "eager": "lrkv.verify.backends:EagerBackend",
    "inductor": "lrkv.verify.backends:InductorBackend",
    "tiled": "lrkv.verify.tiled:TiledBackend",
    "triton": "lrkv.kernels.backend:TritonBackend",
    "onnxruntime": "lrkv.compiled.backends:OnnxRuntimeBackend",
    "aoti": "lrkv.compiled.backends:AOTIBackend",
    "tensorrt": "lrkv.compiled.backends:TensorRTBackend",
}


def register_backend(name: str, factory: str | Callable[[], Any]) -> None:
    """Register a backend factory (or 'module:attr' path) under a name."""
    _REGISTRY[name] = factory


def backend_names() -> list[str]:
    return list(_REGISTRY)


def add_backend_path(directory: str) -> None:
    """Make modules under `directory` importable as backends (`--backend-path`)."""
    directory = os.path.abspath(directory)
    if directory not in sys.path:
        sys.path.insert(0, directory)


def _import(mod_name: str):
    try:
        return importlib.import_module(mod_name)
    except ModuleNotFoundError as e:
        top = mod_name.split(".")[0]
        if e.name != top or os.getcwd() in sys.path or "" in sys.path:
            raise
    add_backend_path(os.getcwd())  # the console script's sys.path lacks the working directory
    return importlib.import_module(mod_name)


def _resolve(path: str) -> Any:
    if ":" not in path:
        raise ValueError(f"backend path must look like 'package.module:attribute', got {path!r}")
    mod_name, attr = path.split(":", 1)
    try:
        mod = _import(mod_name)
    except ImportError as e:
        raise ValueError(f"cannot import backend module {mod_name!r}: {e}") from e
    try:
        obj = getattr(mod, attr)
    except AttributeError:
        raise ValueError(f"module {mod_name!r} has no attribute {attr!r}") from None
    return obj


def _instantiate(obj: Any, label: str) -> Any:
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "available")):
        obj = obj()
    for attr in ("name", "levels", "dtypes", "available"):
        if not hasattr(obj, attr):
            raise TypeError(f"backend {label!r} lacks {attr!r}; see the backend protocol in the README")
    return obj


def get_backend(spec: str) -> Any:
    """A backend by registered name or by 'package.module:attribute'."""
    if spec in _REGISTRY:
        entry = _REGISTRY[spec]
        obj = _resolve(entry) if isinstance(entry, str) else entry
        return _instantiate(obj, spec)
    if ":" in spec:
        return _instantiate(_resolve(spec), spec)
    raise ValueError(f"unknown backend {spec!r}; known: {', '.join(_REGISTRY)}, or 'package.module:attribute'")
