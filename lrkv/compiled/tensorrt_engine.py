"""TensorRT engine via torch-tensorrt's dynamo frontend (needs torch_tensorrt and CUDA).

NOT exercised in this repository: torch-tensorrt cannot be installed on the machines its
CI runs on. The path follows torch-tensorrt's documented dynamo API —
`torch_tensorrt.dynamo.compile(exported_program, arg_inputs=[torch_tensorrt.Input(min/opt/max)],
require_full_compilation=True, disable_tf32=True, truncate_double=True, ...)` then
`torch_tensorrt.save(..., output_format="exported_program")` / `torch_tensorrt.load` — and
every entry point refuses with the exact missing piece (`available()`), never a fake pass.

Precision choices, all recorded in the manifest:
* TF32 is disabled so a float32 engine is checked as float32 (TF32 rounds matmul inputs
  to 10 mantissa bits, which the float32 tolerance would — rightly — fail).
* TensorRT has no float64. `lrkv export --engine tensorrt --dtype float64` therefore
  builds, verifies and releases a float32 engine and the manifest says
  `"truncated": "float64 -> float32"`; the `tensorrt` backend skips float64 cases with that
  reason. Inside the graph the RoPE angles are float64 math, which `truncate_double=True`
  truncates to float32 explicitly (also recorded).
* Precision flags: newer torch-tensorrt deprecates `enabled_precisions` in favour of
  strong typing (`use_explicit_typing=True`, the dtypes of the graph decide); whichever the
  installed version takes is passed, and named in the manifest.
"""

from __future__ import annotations

import importlib.util
import inspect
from pathlib import Path

import torch

from ..reference.weights import LRKVWeights
from .config import ExportConfig, input_sigs
from .engine import Engine, step
from .program import example_inputs

NO_FLOAT64 = "TensorRT has no float64; a float64 engine would be float32 inside (truncate_double)"


class TensorRTEngine(Engine):
    kind = "tensorrt"
    suffix = ".ep"

    @staticmethod
    def available() -> tuple[bool, str]:
        if importlib.util.find_spec("torch_tensorrt") is None:
            return False, "torch_tensorrt is not installed (pip install torch-tensorrt; it needs a CUDA build of torch)"
        if not torch.cuda.is_available():
            return False, "CUDA is not available (torch.cuda.is_available() is False); TensorRT needs an NVIDIA GPU"
        return True, ""

    @staticmethod
    def tool_versions() -> dict[str, str]:
        import tensorrt
        import torch_tensorrt

        return {"torch": torch.__version__, "torch_tensorrt": torch_tensorrt.__version__,
                "tensorrt": tensorrt.__version__, "cuda": str(torch.version.cuda),
                "device": torch.cuda.get_device_name()}

    @staticmethod
    def _trt_inputs(config: ExportConfig) -> list:
        """One torch_tensorrt.Input per engine input: min/opt/max over the (B, T_max) box."""
        import torch_tensorrt

        opt_t = max(config.t_min, min(config.t_max, (config.t_min + config.t_max) // 2))
        return [torch_tensorrt.Input(min_shape=s.concrete(1, config.t_min), opt_shape=s.concrete(config.example_b, opt_t),
                                     max_shape=s.concrete(config.b_max, config.t_max),
                                     dtype=s.torch_dtype(config.torch_dtype))
                for s in input_sigs(config)]

    @staticmethod
    def _precision_kwargs(compile_fn) -> dict:
        params = inspect.signature(compile_fn).parameters
        if "use_explicit_typing" in params:
            return {"use_explicit_typing": True}  # strong typing: float32 graph -> float32 layers
        return {"enabled_precisions": {torch.float32}}

    @classmethod
    def build(cls, config: ExportConfig, path: Path, *, weights: LRKVWeights | None = None) -> TensorRTEngine:
        cls.require()
        import torch_tensorrt

        if config.dtype != "float32":
            raise ValueError(f"{NO_FLOAT64}: export float32 (lrkv export truncates explicitly and says so)")
        path = Path(path)
        program = cls.traced_step(config, weights, device="cuda")
        precision = cls._precision_kwargs(torch_tensorrt.dynamo.compile)
        with step("TensorRT compile (torch_tensorrt.dynamo.compile, require_full_compilation=True, TF32 off)"):
            trt_gm = torch_tensorrt.dynamo.compile(
                program, arg_inputs=cls._trt_inputs(config), device=torch.device("cuda"),
                require_full_compilation=True, disable_tf32=True, truncate_double=True, min_block_size=1,
                **precision,
            )
        with step("torch_tensorrt.save (ExportedProgram)"):
            args = [t.cuda() for t in example_inputs(config, weights=weights)]
            torch_tensorrt.save(trt_gm, str(path), output_format="exported_program", arg_inputs=args)
        eng = cls.load(config, path)
        eng.notes.update(precision={k: sorted(map(str, v)) if isinstance(v, set) else v for k, v in precision.items()})
        return eng

    @classmethod
    def load(cls, config: ExportConfig, path: Path) -> TensorRTEngine:
        cls.require()
        import torch_tensorrt

        eng = cls(config, path)
        eng.module = torch_tensorrt.load(str(path)).module()
        eng.notes = {"device": "cuda", "disable_tf32": True, "require_full_compilation": True,
                     "truncate_double": "float64 RoPE angle math inside the graph runs in float32"}
        return eng

    def run_flat(self, flat: list[torch.Tensor]) -> list[torch.Tensor]:
        with torch.no_grad():
            outs = self.module(*[t.cuda() for t in flat])
        return [o.cpu() for o in outs]
