"""What an exported engine is: one frozen config, serialised into the manifest.

A config fixes everything the compiled graph bakes in — the spec (H, d_h, r, RoPE mode,
QK-norm), the level, the dtype, the softmax scale, where the weights live — and the
ranges of the two dynamic dims: the batch B and the cache length T_max (shared by every
cache tensor). A call outside those ranges is rejected in Python before the engine runs.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ..checks import check_bool, check_choice, check_float, check_int
from ..spec import AttentionSpec, as_dtype, dtype_name

ENGINES = ("onnx", "aoti", "tensorrt")
LEVELS = ("kernel", "layer")
WEIGHT_MODES = ("inputs", "embedded")
DEFAULT_OPSET = 18  # decomposed ops only: what TensorRT's ONNX parser and every ORT build take
NATIVE_OPSET = 23  # first opset with Attention / RMSNormalization
MAX_LENGTH = 2**31 - 1  # lengths and batch indices reach the engine as int32


def kernel_spec(spec: AttentionSpec) -> AttentionSpec:
    """The part of a spec the kernel level depends on: H, d_h, r, exact RoPE's theta, key_scale.

    d_model, norm_eps and the latent/aligned RoPE modes only change how the cache was filled,
    not the decode math, so kernel engines of such specs are one and the same engine.
    """
    rope = {"rope": "exact", "rope_theta": spec.rope_theta} if spec.rope == "exact" else {}
    return AttentionSpec.lrkv(spec.n_heads, spec.head_dim, spec.rank, qk_norm=spec.qk_norm, **rope)


@dataclass(frozen=True)
class ExportConfig:
    spec: AttentionSpec  # the LRKV layer; the kernel level uses H, d_h, r, rope, qk_norm
    level: str = "layer"  # "kernel" (decode_attention) or "layer" (layer_step)
    dtype: str = "float32"  # engine dtype: float32 | float64
    t_min: int = 1  # smallest cache length T_max accepted
    t_max: int = 256  # largest cache length T_max accepted (the finite Dim maximum)
    b_max: int = 16  # batch range is [1, b_max]
    weights: str = "inputs"  # layer level: "inputs" (engine arguments) | "embedded" (constants)
    scale: float | None = None  # kernel softmax scale; None = 1/sqrt(d_h) (never 1/sqrt(r))
    opset: int = DEFAULT_OPSET  # ONNX only
    external_data: bool = False  # ONNX only: embedded weights in a side file instead of the model

    def __post_init__(self) -> None:
        # Kinds first (lrkv.checks: a float t_max or a string external_data is refused, not
        # coerced), then the rules between fields.
        if not isinstance(self.spec, AttentionSpec):
            raise TypeError(f"spec must be an AttentionSpec, got {type(self.spec).__name__}")
        if self.spec.family != "lrkv":
            raise ValueError(f"export needs an lrkv spec, got family {self.spec.family!r}")
        if self.spec.rank < 1:
            raise ValueError("export needs rank >= 1 (a rank-0 LRKV layer is plain MQA; export that instead)")
        check_choice("level", self.level, LEVELS)
        check_int("t_min", self.t_min, minimum=1, maximum=MAX_LENGTH)
        # torch.export specialises a dim whose example is 0 or 1, so the example T is >= 2.
        check_int("t_max", self.t_max, minimum=2, maximum=MAX_LENGTH)
        check_int("b_max", self.b_max, minimum=1, maximum=MAX_LENGTH)
        check_choice("weights", self.weights, WEIGHT_MODES)
        if self.scale is not None:
            check_float("scale", self.scale, minimum=0.0, exclusive_minimum=True)
        check_int("opset", self.opset, minimum=18)  # torch.onnx's dynamo exporter starts at 18
        check_bool("external_data", self.external_data)
        if self.level == "kernel":
            object.__setattr__(self, "spec", kernel_spec(self.spec))
        if as_dtype(self.dtype) not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be float32 or float64, got {self.dtype!r}")
        object.__setattr__(self, "dtype", dtype_name(self.dtype))
        if self.t_min > self.t_max:
            raise ValueError(f"t_min must be <= t_max, got t_min={self.t_min}, t_max={self.t_max}")
        if self.level == "kernel" and self.weights != "inputs":
            raise ValueError("weights must be 'inputs' at the kernel level (it has no projection weights)")

    @property
    def torch_dtype(self) -> torch.dtype:
        return as_dtype(self.dtype)

    @property
    def softmax_scale(self) -> float:
        return self.spec.head_dim**-0.5 if self.scale is None else float(self.scale)

    @property
    def example_t(self) -> int:
        """The T of the export example: inside the range and >= 2 (no 0/1 specialisation)."""
        return max(2, min(self.t_min + 1, self.t_max))

    @property
    def example_b(self) -> int:
        return 2 if self.b_max >= 2 else 1

    def replace(self, **changes) -> ExportConfig:
        return dataclasses.replace(self, **changes)

    def key(self) -> str:
        """A stable id for caching built engines."""
        d = self.to_dict()
        return "|".join(f"{k}={d[k]}" for k in sorted(d))

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["spec"] = self.spec.to_dict()
        return d

    @classmethod
    def from_dict(cls, data: dict) -> ExportConfig:
        if not isinstance(data, dict) or not isinstance(data.get("spec"), dict):
            raise ValueError("config must be an object with a 'spec' object")
        names = {f.name for f in dataclasses.fields(cls)}
        if unknown := set(data) - names:
            raise ValueError(f"unknown ExportConfig fields: {sorted(unknown)}")
        data = dict(data)
        data["spec"] = AttentionSpec.from_dict(data["spec"])
        return cls(**data)
