"""Memory safety in Triton's interpreter: every active lane's address inside a tensor argument.

Why: the interpreter runs a load as a numpy gather. An active lane whose address lies a few
elements past a tensor returns whatever sits there and the launch exits 0 (only a far one
segfaults), so a kernel can pass every interpreter test and still die of an illegal memory
access on a GPU, or silently read a neighbour's memory there.

What is checked: at every launch of our kernel modules (`watch`: `lrkv.kernels.runtime`
watches each module it loads for the interpreter, `load_patched` ones included), each ACTIVE
lane (mask true) of every load and store must address a whole element inside the extent of
one of that launch's tensor arguments — the tensor as a view, from its lowest addressed byte
to its highest (data_ptr .. data_ptr + (Σ (size_i − 1)·stride_i + 1)·itemsize; a size-0
tensor has none), not its storage: a read past a view into the rest of its storage fails
too. The check runs BEFORE the interpreter's own load or store (which may segfault). A lane
whose mask is false never fails, however wild its address (legal on a GPU); an active lane
whose value is later discarded (by tl.where) is still an access and does fail. A failure is
a `MemcheckError` naming the kernel, load or store, the program id, the argument nearest to
the address (parameter name and position) and the signed offset from its extent, in elements
and bytes. `LRKV_MEMCHECK=0` in the environment turns the check off (read at every launch).
The check knows no pointer provenance: an address that strays into ANOTHER argument of the
same launch passes.

How: ONE interception of the interpreter, shared with the traffic count
(`lrkv.bench.traffic.count_traffic`): `install` wraps `InterpreterBuilder.create_masked_load`
/ `create_masked_store` and `GridExecutor._init_args_hst` (each launch's tensors, as the
kernel sees them: host copies) / `__call__` (the error unwrapped from the interpreter's
InterpreterError) once per process; `listen(listener)` hands a listener every launch
(`begin(KernelLaunch)`: True to see its accesses) and the active lanes' addresses of every
access (`access(addrs, itemsize, store)`). The memcheck is the permanent first listener. The
addresses are checked vectorised: the launch's extents merged and sorted once, then per
access its lowest and highest active address (one interval holding both passes); only
otherwise np.searchsorted over every lane.

Coverage in Triton 3.9's interpreter: tl.load / tl.store with or without a mask, atomic
loads and stores, and tensor-descriptor loads, stores, gathers and scatters all run through
create_masked_load / create_masked_store; block pointers no longer exist. tl.atomic_add & co
(`create_atomic_rmw`) and tl.atomic_cas go around them, unchecked: our kernels use none
(tests/kernels/test_memcheck.py asserts it, and that the builder has no other memory entry).
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator
from dataclasses import dataclass
from types import ModuleType
from typing import Protocol

import numpy as np
import torch

ENV = "LRKV_MEMCHECK"


class MemcheckError(RuntimeError):
    """An active lane of a load or store addressed memory outside every tensor argument."""


@dataclass(frozen=True)
class KernelLaunch:
    """One interpreted launch, as the listeners see it."""

    kernel: str  # the @triton.jit function's name
    module: str  # the module it was defined in (lrkv.kernels._kernels_interpreter, ...)
    grid: tuple[int, ...] | None  # None: a callable grid
    arg_names: tuple[str, ...]  # the kernel's parameters
    tensors: tuple[tuple[str, torch.Tensor], ...]  # (parameter name, tensor) in argument order


class Listener(Protocol):
    def begin(self, launch: KernelLaunch) -> bool: ...  # True: send this launch's accesses

    def access(self, addrs: np.ndarray, itemsize: int, store: bool) -> None: ...  # addrs: uint64, active lanes


_LISTENERS: list[Listener] = []  # every launch goes to each, in order
_CURRENT: list[Listener] = []  # those that asked for the running launch's accesses
_WATCHED: set[str] = set()  # module names whose launches the memcheck checks
_installed = False


def enabled() -> bool:
    """Whether LRKV_MEMCHECK leaves the check on (unset, 1: on; 0: off)."""
    value = os.environ.get(ENV, "1").strip().lower()
    if value in ("1", "true", "yes", "on"):
        return True
    if value in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"{ENV}={value!r}: set it to 0 to turn the interpreter memcheck off, or 1 (the default)")


# ----------------------------------------------------------------------------- the interception
def _tensors(names, args, kwargs) -> tuple[tuple[str, torch.Tensor], ...]:
    pairs = [*zip(names, args), *kwargs.items()]
    return tuple((n, a) for n, a in pairs if isinstance(a, torch.Tensor))


def _access(ptrs, mask, store: bool) -> None:
    from triton.runtime.interpreter import _get_np_dtype

    addrs = np.asarray(ptrs.data, dtype=np.uint64)
    m = np.asarray(mask.data, dtype=bool)
    if not m.all():
        addrs = addrs[np.broadcast_to(m, addrs.shape)]
    itemsize = _get_np_dtype(ptrs.get_element_ty()).itemsize
    for listener in _CURRENT:
        listener.access(addrs.reshape(-1), itemsize, store)


def install() -> None:
    """Wrap the interpreter's masked load/store and its launches, once per process. Other
    kernels' launches pass through (no listener asks for them)."""
    global _installed
    if _installed:
        return
    from triton.runtime import interpreter as itp

    builder, executor = type(itp.interpreter_builder), itp.GridExecutor
    for owner, name in ((builder, "create_masked_load"), (builder, "create_masked_store"),
                        (executor, "_init_args_hst"), (executor, "__call__")):
        if not callable(getattr(owner, name, None)):
            import triton

            raise RuntimeError(f"Triton {triton.__version__}'s interpreter has no {owner.__name__}.{name}: the "
                               "memcheck and the traffic count (lrkv.kernels.memcheck) cannot hook it")
    load, store = builder.create_masked_load, builder.create_masked_store
    init_args, call = executor._init_args_hst, executor.__call__

    def create_masked_load(self, ptrs, mask, other, cache_policy, is_volatile):
        if _CURRENT:
            _access(ptrs, mask, False)
        return load(self, ptrs, mask, other, cache_policy, is_volatile)

    def create_masked_store(self, ptrs, value, mask, cache_policy):
        if _CURRENT:
            _access(ptrs, mask, True)
        return store(self, ptrs, value, mask, cache_policy)

    def _init_args_hst(self, args_dev, kwargs):
        args, kw = init_args(self, args_dev, kwargs)
        launch = KernelLaunch(self.fn.__name__, getattr(self.fn, "__module__", "") or "",
                              None if callable(self.grid) else tuple(self.grid), tuple(self.arg_names),
                              _tensors(self.arg_names, args, kw))
        _CURRENT[:] = [listener for listener in _LISTENERS if listener.begin(launch)]
        return args, kw

    def __call__(self, *args, **kwargs):
        try:
            return call(self, *args, **kwargs)
        except itp.InterpreterError as e:  # the memcheck's error, raised inside the kernel, as itself
            cause = e.__cause__
            while cause is not None and not isinstance(cause, MemcheckError):
                cause = cause.__cause__
            if cause is None:
                raise
            raise cause from None
        finally:
            _CURRENT.clear()

    builder.create_masked_load, builder.create_masked_store = create_masked_load, create_masked_store
    executor._init_args_hst, executor.__call__ = _init_args_hst, __call__
    _installed = True


@contextlib.contextmanager
def listen(listener: Listener) -> Iterator[Listener]:
    """Send every interpreted launch in the block, and the accesses it asks for, to `listener`."""
    install()
    _LISTENERS.append(listener)
    try:
        yield listener
    finally:
        _LISTENERS.remove(listener)


# ----------------------------------------------------------------------------- the check
def extent(t: torch.Tensor) -> tuple[int, int]:
    """[lo, hi) bytes a view can address: its lowest to one past its highest element."""
    if t.numel() == 0:
        return t.data_ptr(), t.data_ptr()
    last = sum((n - 1) * s for n, s in zip(t.shape, t.stride()))
    return t.data_ptr(), t.data_ptr() + (last + 1) * t.element_size()


class Memcheck:
    """The listener that checks our kernels' launches (module doc)."""

    def __init__(self) -> None:
        self.launch: KernelLaunch | None = None
        self.spans: list[tuple[int, int]] = []  # per tensor argument, its extent
        self.starts = self.ends = np.zeros(0, dtype=np.uint64)  # the extents' union, sorted

    def begin(self, launch: KernelLaunch) -> bool:
        self.launch = None
        if launch.module not in _WATCHED or not enabled():
            return False
        self.launch, self.spans = launch, [extent(t) for _, t in launch.tensors]
        merged: list[list[int]] = []
        for lo, hi in sorted(s for s in self.spans if s[1] > s[0]):
            if merged and lo <= merged[-1][1]:
                merged[-1][1] = max(merged[-1][1], hi)
            else:
                merged.append([lo, hi])
        self.starts = np.array([lo for lo, _ in merged], dtype=np.uint64)
        self.ends = np.array([hi for _, hi in merged], dtype=np.uint64)
        return True

    def access(self, addrs: np.ndarray, itemsize: int, store: bool) -> None:
        if addrs.size == 0:
            return
        lo, hi = addrs.min(), addrs.max()
        i = int(np.searchsorted(self.starts, lo, side="right")) - 1
        if i >= 0 and hi + np.uint64(itemsize) <= self.ends[i]:
            return  # every lane inside one interval (the common case: one tensor)
        idx = np.searchsorted(self.starts, addrs, side="right") - 1
        inside = (idx >= 0) & (addrs + np.uint64(itemsize) <= self.ends[np.maximum(idx, 0)])
        if not inside.all():
            raise MemcheckError(self.describe(addrs[~inside], addrs.size, itemsize, store))

    def describe(self, bad: np.ndarray, active: int, itemsize: int, store: bool) -> str:
        from triton.runtime.interpreter import interpreter_builder

        addr = int(bad[0])

        def offset(span: tuple[int, int]) -> int:  # signed bytes from the extent: < 0 before it, > 0 past it
            lo, hi = span
            return addr - lo if addr < lo else max(addr + itemsize - hi, 0)

        k = min(range(len(self.spans)), key=lambda j: abs(offset(self.spans[j])), default=None)
        la = self.launch
        where = f"{la.kernel} {'store' if store else 'load'} out of bounds in program {interpreter_builder.grid_idx}"
        if k is None:
            return f"memcheck: {where}: address {addr:#x}, and the launch has no tensor argument"
        name, t = la.tensors[k]
        off = offset(self.spans[k])
        side = "past the end of" if off > 0 else "before the start of"
        return (f"memcheck: {where}: an active lane addresses {addr:#x}, {abs(off) / itemsize:g} element(s) of "
                f"{itemsize} B ({off:+d} B) {side} argument {name!r} (parameter {la.arg_names.index(name)}, "
                f"{list(t.shape)} {str(t.dtype).removeprefix('torch.')}, nearest of {len(self.spans)}); "
                f"{bad.size} of {active} active lanes outside every tensor argument. The interpreter reads "
                f"such an address silently; a GPU faults or reads garbage. ({ENV}=0 turns this check off)")


_MEMCHECK = Memcheck()


def watch(module: ModuleType) -> None:
    """Check every interpreted launch of `module`'s kernels from now on (lrkv.kernels.runtime
    calls it for each kernel module it loads for the interpreter)."""
    install()
    _WATCHED.add(module.__name__)
    if _MEMCHECK not in _LISTENERS:
        _LISTENERS.insert(0, _MEMCHECK)
