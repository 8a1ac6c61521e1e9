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

# Levels a backend may declare: the kernel contracts of DESIGN §4 (decode, paged decode,
# extend), the layer step, and the model; `tp` is a tensor-parallel per-rank step.
LEVELS = ("kernel", "kernel-paged", "kernel-extend", "layer", "model", "tp")
ROLES = ("verified", "baseline")


@runtime_checkable
class Backend(Protocol):
    name: str
    levels: frozenset[str]
    dtypes: tuple[torch.dtype, ...]

    def available(self) -> tuple[bool, str]: ...


class BaseBackend:
    """Convenience base: subclasses set name/levels/dtypes and implement what they support."""

    name: str = "unnamed"
    # 'baseline': one of the oracle's own paths (reference, materialized, eager): it passes by
    # construction and is reported as a baseline row, never as an independently verified backend
    role: str = "verified"
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
    "inductor": "lrkv.verify.backends:InductorBackend",  # CUDA when torch sees one, else the CPU
    "inductor-cudagraphs": "lrkv.verify.backends:inductor_cudagraphs",  # CUDA graphs; CUDA only
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
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001 — SyntaxError, RuntimeError, SystemExit at import: all named
        raise ValueError(f"cannot import backend module {mod_name!r}: {type(e).__name__}: {e}") from None
    try:
        obj = getattr(mod, attr)
    except AttributeError:
        raise ValueError(f"module {mod_name!r} has no attribute {attr!r}") from None
    return obj


def _normalize(obj: Any, label: str) -> Any:
    """Check the protocol's attributes; dtype names become torch dtypes, levels a frozenset."""
    from ..spec import as_dtype

    name = getattr(obj, "name")
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"backend {label!r}: name must be a non-empty string, got {name!r}")
    levels = obj.levels
    if isinstance(levels, str) or not hasattr(levels, "__iter__"):
        raise TypeError(f"backend {label!r}: levels must be a set of level names, got {levels!r}")
    levels = frozenset(levels)
    if not levels:
        raise ValueError(f"backend {label!r}: levels is empty — declare what it implements: {', '.join(LEVELS)}")
    unknown = sorted(str(x) for x in levels - set(LEVELS))
    if unknown:
        raise ValueError(f"backend {label!r}: unknown levels {unknown}; known: {', '.join(LEVELS)}")
    dtypes = obj.dtypes
    if isinstance(dtypes, (str, torch.dtype)) or not hasattr(dtypes, "__iter__"):
        raise TypeError(f"backend {label!r}: dtypes must be a tuple of dtypes, got {dtypes!r}")
    try:
        dtypes = tuple(as_dtype(d) for d in dtypes)
    except (TypeError, ValueError, KeyError) as e:
        raise TypeError(f"backend {label!r}: dtypes: {e}") from None
    if not dtypes:
        raise ValueError(f"backend {label!r}: dtypes is empty")
    role = getattr(obj, "role", "verified")
    if role not in ROLES:
        raise ValueError(f"backend {label!r}: role must be one of {ROLES}, got {role!r}")
    for attr, value in (("levels", levels), ("dtypes", dtypes)):
        if getattr(obj, attr) != value:
            try:
                setattr(obj, attr, value)
            except (AttributeError, TypeError):
                raise TypeError(f"backend {label!r}: {attr} must be given as {value!r}") from None
    return obj


def _instantiate(obj: Any, label: str) -> Any:
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "available")):
        try:
            obj = obj()
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001
            raise ValueError(f"backend {label!r}: its factory raised {type(e).__name__}: {e}") from None
    for attr in ("name", "levels", "dtypes", "available"):
        if not hasattr(obj, attr):
            raise TypeError(f"backend {label!r} lacks {attr!r}; see the backend protocol in the README")
    return _normalize(obj, label)


def check_available(backend: Any, label: str) -> tuple[bool, str]:
    """backend.available(), which must return (bool, str); anything else names the backend."""
    try:
        res = backend.available()
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001
        raise ValueError(f"backend {label!r}: available() raised {type(e).__name__}: {e}") from None
    if not (isinstance(res, tuple) and len(res) == 2 and isinstance(res[0], bool) and isinstance(res[1], str)):
        raise TypeError(f"backend {label!r}: available() must return (bool, str), got {res!r}")
    return res


def get_backend(spec: str) -> Any:
    """A backend by registered name or by 'package.module:attribute'."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"backend must be a registered name or 'package.module:attribute', got {spec!r}")
    if spec in _REGISTRY:
        entry = _REGISTRY[spec]
        obj = _resolve(entry) if isinstance(entry, str) else entry
        return _instantiate(obj, spec)
    if ":" in spec:
        return _instantiate(_resolve(spec), spec)
    raise ValueError(f"unknown backend {spec!r}; known: {', '.join(_REGISTRY)}, or 'package.module:attribute'")
