"""ONNX engine: torch.onnx's dynamo exporter, run with onnxruntime on CPU.

Opset 18 (the default) keeps to decomposed ops — what TensorRT's ONNX parser and every
onnxruntime build accept. Opset 23 is an option: the query's QK-RMSNorm then lowers to the
native `RMSNormalization` op (checked to run in onnxruntime, float32 and float64). The
native `Attention` op is NOT used at any opset: LRKV's decode sums shared and private
logits before one softmax, scales keys by the joint key_scale and returns the lse, none of
which the op expresses without materialising K_h per head — the thing LRKV avoids.

Weights: with weights="embedded" they are initializers, stored inside the .onnx file or,
with external_data=True, in `<name>.onnx.data` beside it; the choice is always explicit
(torch.onnx would otherwise pick by size).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

from ..reference.weights import LRKVWeights
from .config import ExportConfig, input_sigs, output_sigs
from .engine import Engine, step
from .program import example_inputs


class OnnxEngine(Engine):
    kind = "onnx"
    suffix = ".onnx"

    @staticmethod
    def available() -> tuple[bool, str]:
        for mod in ("onnx", "onnxruntime", "onnxscript"):
            if importlib.util.find_spec(mod) is None:
                return False, f"{mod} is not installed (pip install 'lrkv[onnx]')"
        return True, ""

    @staticmethod
    def tool_versions() -> dict[str, str]:
        import onnx
        import onnxruntime
        import onnxscript

        return {"torch": torch.__version__, "onnx": onnx.__version__, "onnxruntime": onnxruntime.__version__,
                "onnxscript": onnxscript.__version__}

    @classmethod
    def build(cls, config: ExportConfig, path: Path, *, weights: LRKVWeights | None = None) -> OnnxEngine:
        cls.require()
        path = Path(path)
        program = cls.traced_step(config, weights)
        with step(f"ONNX export at opset {config.opset}"):
            onnx_program = torch.onnx.export(
                program, example_inputs(config, weights=weights), dynamo=True, opset_version=config.opset,
                input_names=[s.name for s in input_sigs(config)], output_names=[s.name for s in output_sigs(config)],
                optimize=True, verbose=False,
            )
            onnx_program.save(str(path), external_data=config.external_data)
        return cls.load(config, path)

    @classmethod
    def load(cls, config: ExportConfig, path: Path) -> OnnxEngine:
        cls.require()
        import onnxruntime as ort

        eng = cls(config, path)
        opts = ort.SessionOptions()
        opts.log_severity_level = 3  # errors only; warnings about unused initializers are noise here
        eng.session = ort.InferenceSession(str(path), sess_options=opts, providers=["CPUExecutionProvider"])
        eng.notes = {"execution_provider": "CPUExecutionProvider", "op_types": eng.op_types()}
        return eng

    def files(self) -> list[Path]:
        data = self.path.with_name(self.path.name + ".data")
        return [self.path] + ([data] if data.exists() else [])

    def op_types(self) -> list[str]:
        import onnx

        model = onnx.load(str(self.path), load_external_data=False)
        return sorted({n.op_type for n in model.graph.node})

    def run_flat(self, flat: list[torch.Tensor]) -> list[torch.Tensor]:
        feeds = {s.name: t.detach().cpu().numpy() for s, t in zip(input_sigs(self.config), flat)}
        return [torch.from_numpy(o) for o in self.session.run(None, feeds)]
