"""AOTInductor engine: a .pt2 package from `aoti_compile_and_package`, run on CPU.

The package is compiled C++ (inductor's CPU codegen) with the dynamic B and T_max kept
symbolic; `aoti_load_package` loads it back without Python tracing. Compiling needs a C++
compiler and takes tens of seconds per engine on a small machine — the backend caches
engines per config for that reason.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import torch

from ..reference.weights import LRKVWeights
from .config import ExportConfig
from .engine import Engine, step


def _cxx() -> str | None:
    try:
        from torch._inductor.cpp_builder import get_cpp_compiler

        return get_cpp_compiler()
    except Exception:  # noqa: BLE001 — any failure here means "no usable compiler"
        return shutil.which("g++") or shutil.which("clang++")


class AOTIEngine(Engine):
    kind = "aoti"
    suffix = ".pt2"

    @staticmethod
    def available() -> tuple[bool, str]:
        try:
            from torch._inductor import aoti_compile_and_package, aoti_load_package  # noqa: F401
        except ImportError as e:
            return False, f"this torch has no AOTInductor packaging API ({e})"
        cxx = _cxx()
        if not cxx or not shutil.which(cxx):
            return False, "no C++ compiler found (AOTInductor compiles generated C++; install g++)"
        return True, ""

    @staticmethod
    def tool_versions() -> dict[str, str]:
        return {"torch": torch.__version__, "cxx": str(_cxx())}

    @classmethod
    def build(cls, config: ExportConfig, path: Path, *, weights: LRKVWeights | None = None) -> AOTIEngine:
        cls.require()
        from torch._inductor import aoti_compile_and_package

        path = Path(path)
        program = cls.traced_step(config, weights)
        with step("AOTInductor compile and package (slow: C++ codegen + compile)"):
            aoti_compile_and_package(program, package_path=str(path))
        return cls.load(config, path)

    @classmethod
    def load(cls, config: ExportConfig, path: Path) -> AOTIEngine:
        cls.require()
        from torch._inductor import aoti_load_package

        eng = cls(config, path)
        eng.runner = aoti_load_package(str(path))
        eng.notes = {"device": "cpu"}
        return eng

    def run_flat(self, flat: list[torch.Tensor]) -> list[torch.Tensor]:
        with torch.no_grad():
            return list(self.runner(*[t.cpu() for t in flat]))
