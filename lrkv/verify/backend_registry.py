"""Where backends come from (DESIGN §4): registered names and `package.module:attribute` paths.

Built-ins are listed by import path so that resolving one never imports Triton, onnxruntime
or torch-tensorrt until it is asked for. A user's backend is `package.module:attribute`,
where the attribute is a backend object, a class, or a zero-argument factory. Like
gunicorn and uvicorn, resolution falls back to the working directory, so
`lrkv verify --backend examples.my_backend:backend` works from the repository root.
"""

from __future__ import annotations

import importlib
import os
import sys
from collections.abc import Callable
from typing import Any

from .protocol import instantiate

# name -> "module:attribute" (lazy) or a factory
_REGISTRY: dict[str, str | Callable[[], Any]] = {
    "reference": "lrkv.verify.builtin_backends:ReferenceBackend",
    "materialized": "lrkv.verify.builtin_backends:MaterializedBackend",
    "eager": "lrkv.verify.builtin_backends:EagerBackend",
    "inductor": "lrkv.verify.builtin_backends:InductorBackend",  # CUDA when torch sees one, else the CPU
    "inductor-cudagraphs": "lrkv.verify.builtin_backends:inductor_cudagraphs",  # CUDA graphs; CUDA only
    "tiled": "lrkv.verify.tiled:TiledBackend",
    "tiled-fp8-compute": "lrkv.verify.tiled:Fp8ComputeBackend",  # FA3-style: q and the weights in e4m3
    "triton": "lrkv.kernels.triton_backend:TritonBackend",
    "triton-batch-invariant": "lrkv.kernels.triton_backend:batch_invariant",  # split size fixed in tokens
    "triton-sm90": "lrkv.kernels.triton_backend:sm90",  # the launch a 132-SM sm_90 GPU picks, anywhere
    "triton-vllm-blocks": "lrkv.kernels.triton_backend:TritonVllmBlocks",  # vLLM's block pools, as they are
    "onnxruntime": "lrkv.compiled.engine_backends:OnnxRuntimeBackend",
    "aoti": "lrkv.compiled.engine_backends:AOTIBackend",
    "tensorrt": "lrkv.compiled.engine_backends:TensorRTBackend",
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


def resolve_path(path: str) -> Any:
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


def get_backend(spec: str) -> Any:
    """A backend by registered name or by 'package.module:attribute'."""
    if not isinstance(spec, str) or not spec:
        raise ValueError(f"backend must be a registered name or 'package.module:attribute', got {spec!r}")
    if spec in _REGISTRY:
        entry = _REGISTRY[spec]
        obj = resolve_path(entry) if isinstance(entry, str) else entry
        return instantiate(obj, spec)
    if ":" in spec:
        return instantiate(resolve_path(spec), spec)
    raise ValueError(f"unknown backend {spec!r}; known: {', '.join(_REGISTRY)}, or 'package.module:attribute'")
