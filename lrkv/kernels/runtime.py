"""Where the Triton kernels run: natively on CUDA, in Triton's CPU interpreter, or not at all.

Triton decides at *decoration* time (`@triton.jit`) whether a kernel is compiled for the GPU
or becomes an interpreter function, by reading TRITON_INTERPRET. So the kernel module is
loaded lazily, once per mode, with the variable set only for the duration of that import:

    mode()           'cuda' | 'interpreter' | 'fallback' and why
    kernels()        the kernel module for the current mode (None in fallback)
    interpreter()    context manager: run the kernels in the interpreter inside the block
                     (the tests use it on CPU machines; nothing leaks into other tests)
    load_patched()   a copy of the kernel module with one textual change to its source,
                     loaded under its own name (for deliberately broken kernels)
    using(module)    context manager: launch the kernels of `module` inside the block
                     (internal: the public entry points take no kernel module)

Mode selection, first match wins:
  1. a forced mode (inside `interpreter()`);
  2. Triton not importable                       -> 'fallback';
  3. TRITON_INTERPRET=1 in the environment       -> 'interpreter';
  4. a CUDA device                               -> 'cuda';
  5. otherwise                                   -> 'fallback': the public wrappers compute
     the reference math (Eqs. 6–7 in float64) instead of launching anything, and the
     `triton` backend reports itself unavailable, so a gate can never mistake the
     reference for the kernel.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import os
import sys
import tempfile
import threading
from pathlib import Path
from types import ModuleType

import torch

from . import memcheck

_KERNEL_FILE = Path(__file__).with_name("_kernels.py")
_LOCK = threading.RLock()
_LOADED: dict[str, ModuleType] = {}  # 'cuda' | 'interpreter' (or 'WHICH_NAME', patched) -> module
_FORCED: list[str] = []  # stack of forced modes
_USING: list[ModuleType] = []  # stack of kernel modules given to `using()`


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def triton_version() -> str | None:
    try:
        import triton
    except Exception:  # ImportError, or a broken install raising anything at import
        return None
    return getattr(triton, "__version__", "unknown")


def interpreter_problem() -> str | None:
    """Why Triton's interpreter cannot run the kernels here, or None. Interpreters without the
    fix of triton-lang/triton#9171 (Triton 3.6 has none; 3.9 has it) index with
    `int(array)`, which numpy >= 2.4 refuses for a 1-element array: every launch would fail
    with an InterpreterError naming neither cause."""
    import inspect

    import numpy as np

    try:
        int(np.ones(1))
        return None  # numpy < 2.4 converts it: any interpreter runs
    except TypeError:
        pass
    try:
        from triton.runtime import interpreter as ti

        src = inspect.getsource(ti._patch_lang_tensor)
    except Exception:  # noqa: BLE001 - another layout of the interpreter: assume it is fixed
        return None
    if "int(self.handle.data))" not in src:
        return None
    return (f"Triton {triton_version()}'s interpreter indexes with int() of a 1-element array, which numpy "
            f"{np.__version__} refuses (triton-lang/triton#9171): install numpy<2.4, or a Triton with the fix "
            "(3.9 has it), to run the kernels on a CPU")


def mode() -> tuple[str, str]:
    """('cuda' | 'interpreter' | 'fallback', a sentence saying why)."""
    if _FORCED:
        return _FORCED[-1], "forced by lrkv.kernels.runtime.interpreter()"
    if triton_version() is None:
        return "fallback", "triton is not importable: decode falls back to the float64 reference math"
    if _truthy(os.environ.get("TRITON_INTERPRET")):
        return "interpreter", "TRITON_INTERPRET=1: kernels run in Triton's CPU interpreter"
    if torch.cuda.is_available():
        return "cuda", f"CUDA device {torch.cuda.get_device_name()}"
    return "fallback", ("no CUDA device and TRITON_INTERPRET is not set: decode falls back to the "
                        "float64 reference math (set TRITON_INTERPRET=1 to run the kernels on CPU)")


def _exec_kernels(name: str, path: Path, which: str) -> ModuleType:
    """Import the kernel source at `path` as module `name` with TRITON_INTERPRET set for `which`
    for the duration of the import (Triton reads it when @triton.jit decorates). An
    interpreter module is watched by the memcheck: every launch of its kernels checks each
    active lane's address (`lrkv.kernels.memcheck`; LRKV_MEMCHECK=0 turns it off)."""
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1" if which == "interpreter" else "0"
    try:
        spec = importlib.util.spec_from_file_location(name, path)
        mod = importlib.util.module_from_spec(spec)
        sys.modules[name] = mod  # triton resolves the kernels' globals through the module
        spec.loader.exec_module(mod)
    finally:
        if old is None:
            os.environ.pop("TRITON_INTERPRET", None)
        else:
            os.environ["TRITON_INTERPRET"] = old
    if which == "interpreter":
        memcheck.watch(mod)
    return mod


def _load(which: str) -> ModuleType:
    with _LOCK:
        if which in _LOADED:
            return _LOADED[which]
        if which == "interpreter" and (problem := interpreter_problem()):
            raise RuntimeError(problem)
        _LOADED[which] = _exec_kernels(f"lrkv.kernels._kernels_{which}", _KERNEL_FILE, which)
        return _LOADED[which]


def load_patched(name: str, old: str, new: str, which: str | None = None) -> ModuleType:
    """The kernel module with the text `old` of its source replaced by `new`, loaded for mode
    `which` (default: the current one) as `lrkv.kernels._kernels_WHICH_NAME`, once per process.

    `old` must occur exactly once in the source (ValueError otherwise), so a change cannot
    silently stop applying when the kernels are edited. Triton reads a kernel's source from
    its file, so the patched source is written to a file of its own (in the temp directory,
    named by its content) and imported from there."""
    if not name.isidentifier():
        raise ValueError(f"a patched kernel module needs an identifier for a name, got {name!r}")
    which = which or mode()[0]
    if which == "fallback":
        raise RuntimeError("no kernels run here (fallback mode): nothing to patch")
    key = f"{which}_{name}"
    with _LOCK:
        if key in _LOADED:
            return _LOADED[key]
        if which == "interpreter" and (problem := interpreter_problem()):
            raise RuntimeError(problem)
        src = _KERNEL_FILE.read_text()
        count = src.count(old)
        if count != 1:
            raise ValueError(f"patch {name!r}: its text occurs {count} times in {_KERNEL_FILE.name}, not once: "
                             f"{old!r}")
        patched = src.replace(old, new)
        digest = hashlib.sha256(patched.encode()).hexdigest()[:16]
        path = Path(tempfile.gettempdir()) / f"lrkv-kernels-{name}-{digest}.py"
        if not path.exists() or path.read_text() != patched:
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(patched)
            os.replace(tmp, path)
        _LOADED[key] = _exec_kernels(f"lrkv.kernels._kernels_{key}", path, which)
        return _LOADED[key]


@contextlib.contextmanager
def using(module: ModuleType):
    """Launch the kernels of `module` (a `load_patched` module of the current mode) inside the
    block, instead of the module `kernels()` would load."""
    _USING.append(module)
    try:
        yield module
    finally:
        _USING.pop()


def kernels() -> ModuleType | None:
    """The kernel module for the current mode, or None in fallback mode."""
    which, _ = mode()
    if which == "fallback":
        return None
    return _USING[-1] if _USING else _load(which)


def is_interpreted() -> bool:
    return mode()[0] == "interpreter"


def forced_mode() -> str | None:
    """The mode forced by an enclosing `interpreter()` block, or None."""
    return _FORCED[-1] if _FORCED else None


@contextlib.contextmanager
def interpreter():
    """Run the kernels in Triton's interpreter inside the block (CPU tensors welcome)."""
    if triton_version() is None:
        raise RuntimeError("triton is not installed; the interpreter needs it")
    _load("interpreter")
    _FORCED.append("interpreter")
    try:
        yield
    finally:
        _FORCED.pop()
