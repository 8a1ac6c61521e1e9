"""The engine interface shared by ONNX, AOTInductor and TensorRT, and the progress lines of
their long steps.

An engine is an artifact on disk (one file, or a model plus its external-data file) plus
the loaded runtime that executes it. Calls go through `__call__(**named)`, which runs the
Python-side checks of `signature.check_call` first, so an out-of-range cache length is a
ValueError and never reaches compiled code.

Exports, compiles and verification grids take seconds to minutes, so they report on
stderr (`say`, `step`): plain lines rather than a live bar, so they survive CI logs and
pytest's capture alike. `QUIET = True` silences them (`lrkv export --quiet`, tests).
"""

from __future__ import annotations

import abc
import importlib
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from ..reference.weights import LRKVWeights
from .config import ExportConfig, check_call, output_sigs
from .program import export_program

QUIET = False  # tests and library callers may silence the progress lines


def say(msg: str) -> None:
    """One progress line on stderr."""
    if not QUIET:
        print(f"[lrkv engine] {msg}", file=sys.stderr, flush=True)


@contextmanager
def step(msg: str) -> Iterator[None]:
    """`with step("compiling AOTInductor package"):` -> a start line and a timed end line."""
    say(f"{msg} ...")
    t0 = time.perf_counter()
    try:
        yield
    except BaseException:
        say(f"{msg}: failed after {time.perf_counter() - t0:.1f} s")
        raise
    say(f"{msg}: done in {time.perf_counter() - t0:.1f} s")


# kind -> "module:Class", imported lazily so that `import lrkv.compiled` pulls in neither
# onnxruntime nor torch_tensorrt.
ENGINE_CLASSES = {
    "onnx": "lrkv.compiled.onnx_engine:OnnxEngine",
    "aoti": "lrkv.compiled.aoti_engine:AOTIEngine",
    "tensorrt": "lrkv.compiled.tensorrt_engine:TensorRTEngine",
}


class EngineUnavailable(RuntimeError):
    """The engine's toolchain is missing here; the message is the exact reason."""


class Engine(abc.ABC):
    kind: str = "base"
    suffix: str = ""  # artifact file extension

    def __init__(self, config: ExportConfig, path: Path):
        self.config = config
        self.path = Path(path)
        self.notes: dict = {}  # build facts the manifest records (e.g. TensorRT's float64 truncation)

    # ---------------------------------------------------------------- toolchain
    @staticmethod
    def available() -> tuple[bool, str]:
        return False, "abstract engine"

    @staticmethod
    def tool_versions() -> dict[str, str]:
        return {"torch": torch.__version__}

    @classmethod
    def require(cls) -> None:
        ok, reason = cls.available()
        if not ok:
            raise EngineUnavailable(f"{cls.kind} engine unavailable: {reason}")

    # ---------------------------------------------------------------- build / load
    @staticmethod
    def traced_step(config: ExportConfig, weights: LRKVWeights | None = None,
                    device: str = "cpu") -> torch.export.ExportedProgram:
        """The traced step (`program.export_program`) every engine compiles, with its progress line."""
        on = " on CUDA" if device == "cuda" else ""
        ranges = f"T_max in [{config.t_min}, {config.t_max}]"
        with step(f"torch.export{on} ({config.level} level, {config.dtype}, {ranges})"):
            return export_program(config, weights, device=device)

    @classmethod
    @abc.abstractmethod
    def build(cls, config: ExportConfig, path: Path, *, weights: LRKVWeights | None = None) -> Engine:
        """Export, compile, write the artifact at `path`, and load it back."""

    @classmethod
    @abc.abstractmethod
    def load(cls, config: ExportConfig, path: Path) -> Engine:
        """Load a previously built artifact."""

    def files(self) -> list[Path]:
        """Every file of the artifact (the manifest hashes each)."""
        return [self.path]

    # ---------------------------------------------------------------- run
    @abc.abstractmethod
    def run_flat(self, flat: list[torch.Tensor]) -> list[torch.Tensor]:
        """Run the engine on inputs in signature order; outputs in signature order."""

    def __call__(self, **named: torch.Tensor) -> dict[str, torch.Tensor]:
        """Named inputs (signature.input_sigs) -> named outputs, after the Python-side checks."""
        flat, _ = check_call(self.config, named)
        outs = self.run_flat(flat)
        return dict(zip([s.name for s in output_sigs(self.config)], outs))


def engine_class(kind: str) -> type[Engine]:
    if kind not in ENGINE_CLASSES:
        raise ValueError(f"unknown engine {kind!r}; known: {', '.join(ENGINE_CLASSES)}")
    mod, attr = ENGINE_CLASSES[kind].split(":")
    return getattr(importlib.import_module(mod), attr)
