"""The `onnxruntime`, `aoti` and `tensorrt` backends (DESIGN §4) over compiled engines.

Each backend builds an engine on first use for the spec, level and dtype of the call, with
a generous dynamic range (B <= 64, T_max <= 4096, grown to the next power of two when a
call needs more), and caches it for the life of the process (`cached_engine`, shared by
every backend object): an AOTInductor compile costs tens of seconds, so the harness must
not pay it per case. Layer-level engines take the weights as inputs, so one engine serves
every seed.

A backend can also wrap one given engine (`EngineBackend`), which is how `lrkv export`
verifies the very artifact it is about to release.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import torch

from ..reference.cache import FactoredCache
from ..reference.fp8 import PARTS
from ..reference.rope import ExactRope
from ..reference.weights import LRKVWeights
from ..spec import AttentionSpec
from ..verify.protocol import BaseBackend
from .config import ExportConfig, weight_sigs
from .engine import Engine, engine_class

BACKEND_OF_ENGINE = {"onnx": "onnxruntime", "aoti": "aoti", "tensorrt": "tensorrt"}
DEFAULT_T_MAX = 4096
DEFAULT_B_MAX = 64

_SHARED: dict[tuple[str, str], Engine] = {}  # (engine kind, config key) -> built engine
_SCRATCH: tempfile.TemporaryDirectory | None = None  # where cached engines' artifacts live


def cached_engine(kind: str, config: ExportConfig) -> Engine:
    """The engine of `kind` for `config` (weights as inputs), built once per process."""
    global _SCRATCH
    key = (kind, config.key())
    if key not in _SHARED:
        cls = engine_class(kind)
        cls.require()
        if _SCRATCH is None:
            _SCRATCH = tempfile.TemporaryDirectory(prefix="lrkv-engines-")
        _SHARED[key] = cls.build(config, Path(_SCRATCH.name) / f"engine{len(_SHARED)}{cls.suffix}")
    return _SHARED[key]


def _pow2_at_least(n: int, floor: int) -> int:
    p = floor
    while p < n:
        p *= 2
    return p


def kernel_config(q, latent_k, key_scale, rope, scale, **kw) -> ExportConfig:
    """The config of the kernel engine that serves a decode_attention call."""
    _, H, d_h = q.shape
    r = latent_k.shape[-1]
    rope_kw = dict(rope="exact", rope_theta=float(rope.theta)) if isinstance(rope, ExactRope) else {}
    spec = AttentionSpec.lrkv(H, d_h, r, qk_norm=key_scale is not None, **rope_kw)
    # The default scale shares one engine; any other is baked into its own.
    scale = None if abs(scale - d_h**-0.5) <= 1e-15 * d_h**-0.5 else float(scale)
    return ExportConfig(spec, level="kernel", dtype=str(q.dtype).removeprefix("torch."), scale=scale, **kw)


def weight_inputs(config: ExportConfig, weights: LRKVWeights) -> dict[str, torch.Tensor]:
    return {s.name: getattr(weights, s.name) for s in weight_sigs(config)}


def write_back(cache: FactoredCache, outputs: dict[str, torch.Tensor], positions: torch.Tensor) -> FactoredCache:
    """Copy the engine's new cache into the caller's (the reference's layer_step mutates it too)."""
    for name, t in cache.tensors().items():
        t.copy_(outputs["new_" + name].to(t.device))
    cache.lengths = (positions.to(cache.lengths.dtype) + 1).to(cache.lengths.device)
    return cache


def _kernel_call(engine: Engine, q, cache: FactoredCache, basis_k, basis_v) -> tuple[torch.Tensor, torch.Tensor]:
    """A kernel-level engine on a contiguous cache: its inputs by name, (out, lse) back."""
    out = engine(q=q, **dict(zip(PARTS, cache.parts)), basis_k=basis_k, basis_v=basis_v, lengths=cache.lengths,
                 key_scale=cache.key_scale)
    return out["out"], out["lse"]


class _CompiledBackend(BaseBackend):
    """Shared logic; subclasses set `name` and `engine_kind`."""

    engine_kind = "onnx"
    levels = frozenset({"kernel", "layer"})
    dtypes = (torch.float32, torch.float64)

    def __init__(self, **config_kw: Any):
        self.config_kw = config_kw  # e.g. opset=23 for the onnxruntime backend

    def available(self) -> tuple[bool, str]:
        return engine_class(self.engine_kind).available()

    def supports(self, case: Any) -> tuple[bool, str]:
        spec = getattr(case, "spec", None)
        if spec is not None and getattr(spec, "family", "lrkv") != "lrkv":
            return False, f"{self.name} exports LRKV layers only, not {spec.family}"
        if spec is not None and getattr(spec, "rank", 1) < 1:
            return False, "rank 0 is not exported (it is plain MQA)"
        level = getattr(case, "level", None)
        needs = {"layer-model": "layer"}.get(level, level)  # a layer-model case is a run of layer steps
        if level is not None and needs not in self.levels:
            return False, f"{self.name} implements levels {sorted(self.levels)}, not {level!r}"
        dtype = getattr(case, "dtype", None)
        if dtype is not None and str(dtype).removeprefix("torch.") not in ("float32", "float64"):
            return False, f"{self.name} engines are exported in float32 and float64 only, not {dtype}"
        if getattr(case, "paged", False) or getattr(getattr(case, "pages", None), "size", 0):
            return False, f"{self.name} engines take the contiguous cache, not a paged one"
        return True, ""

    def engine(self, config: ExportConfig) -> Engine:
        """The engine for a config, built (and cached process-wide) on first use."""
        return cached_engine(self.engine_kind, config)

    def _ranges(self, B: int, T: int) -> dict[str, int]:
        return {"t_max": _pow2_at_least(T, DEFAULT_T_MAX), "b_max": _pow2_at_least(B, DEFAULT_B_MAX)}

    # ------------------------------------------------------------------ kernel level
    def attend(self, q, cache: FactoredCache, basis_k, basis_v, *, scale, rope=None, cu_seqlens_q=None):
        config = kernel_config(q, cache.latent_k, cache.key_scale, rope, scale,
                               **self._ranges(q.shape[0], cache.t_max), **self.config_kw)
        return _kernel_call(self.engine(config), q, cache, basis_k, basis_v)

    # ------------------------------------------------------------------ layer level
    def layer_step(self, weights: LRKVWeights, x_t, cache: FactoredCache, positions):
        config = ExportConfig(weights.spec, level="layer", dtype=str(weights.dtype).removeprefix("torch."),
                              **self._ranges(cache.batch, cache.t_max), **self.config_kw)
        out = self.engine(config)(x_t=x_t, positions=positions, **cache.tensors(), **weight_inputs(config, weights))
        return out["y"], write_back(cache, out, positions)


class OnnxRuntimeBackend(_CompiledBackend):
    name = "onnxruntime"
    engine_kind = "onnx"
    description = "torch.onnx (dynamo) export, opset 18 by default, run by onnxruntime on CPU"


class AOTIBackend(_CompiledBackend):
    name = "aoti"
    engine_kind = "aoti"
    description = "AOTInductor package (aoti_compile_and_package), loaded with aoti_load_package, CPU"


class TensorRTBackend(_CompiledBackend):
    name = "tensorrt"
    engine_kind = "tensorrt"
    dtypes = (torch.float32,)
    description = "torch-tensorrt dynamo compile of the exported program (CUDA, float32, TF32 off)"

    def supports(self, case: Any) -> tuple[bool, str]:
        if str(getattr(case, "dtype", "")).removeprefix("torch.") == "float64":
            from .tensorrt_engine import NO_FLOAT64

            return False, NO_FLOAT64
        return super().supports(case)


class EngineBackend(BaseBackend):
    """A backend over one already-built engine (the artifact `lrkv export` verifies).

    With embedded weights the engine ignores the weights it is handed, so it checks they are
    the embedded ones (bit for bit) instead of silently computing something else.
    """

    def __init__(self, engine: Engine, embedded: LRKVWeights | None = None):
        self.eng = engine
        # The registry name of the engine's backend, so the policy's [backend.<name>] tables apply to artifacts too.
        self.name = BACKEND_OF_ENGINE[engine.kind]
        self.description = f"exported {engine.kind} artifact {engine.path.name}"
        self.levels = frozenset({engine.config.level})
        self.dtypes = (engine.config.torch_dtype,)
        self.embedded = embedded

    def attend(self, q, cache: FactoredCache, basis_k, basis_v, *, scale, rope=None, cu_seqlens_q=None):
        return _kernel_call(self.eng, q, cache, basis_k, basis_v)

    def layer_step(self, weights: LRKVWeights, x_t, cache: FactoredCache, positions):
        config = self.eng.config
        named = {"x_t": x_t, "positions": positions, **cache.tensors()}
        if config.weights == "inputs":
            named.update(weight_inputs(config, weights))
        elif self.embedded is not None:
            for s in weight_sigs(config):
                if not torch.equal(getattr(weights, s.name).to(getattr(self.embedded, s.name).dtype),
                                   getattr(self.embedded, s.name)):
                    raise ValueError(f"this engine embeds its weights; {s.name} differs from the embedded one")
        out = self.eng(**named)
        return out["y"], write_back(cache, out, positions)
