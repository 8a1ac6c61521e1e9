"""Kernel calls from tests that build their inputs on the CPU (FlashInfer's test_helpers style).

Natively the Triton kernels take CUDA tensors only (the wrappers refuse CPU ones); in the
interpreter they take CPU tensors. A test that builds its inputs and references on the CPU
calls the kernel through `on_kernel(fn)`: the arguments go to `kernel_device()` and the
outputs come back to the CPU. An in-place call (append) goes through `in_place(fn, cache, ...)`,
which writes the device copy's result back into the CPU cache.
"""

from __future__ import annotations

import dataclasses

import torch

from lrkv.kernels.testing import kernel_device


def to(x, device: torch.device):
    """x with every tensor in it on `device`: tensors, dataclasses (caches, CacheScales),
    lists, tuples and dicts; anything else unchanged. On the same device: the same objects."""
    if isinstance(x, torch.Tensor):
        return x.to(device)
    if dataclasses.is_dataclass(x) and not isinstance(x, type):
        return dataclasses.replace(x, **{f.name: to(getattr(x, f.name), device) for f in dataclasses.fields(x)
                                         if f.init})
    if isinstance(x, (list, tuple)):
        return type(x)(to(v, device) for v in x)
    if isinstance(x, dict):
        return {k: to(v, device) for k, v in x.items()}
    return x


def on_kernel(fn):
    """fn with its arguments on the kernel device and its outputs on the CPU."""
    def call(*args, **kwargs):
        dev = kernel_device()
        return to(fn(*to(args, dev), **to(kwargs, dev)), torch.device("cpu"))
    return call


def _copy_back(dst, src) -> None:
    for f in dataclasses.fields(dst):
        a, b = getattr(dst, f.name), getattr(src, f.name)
        if isinstance(a, torch.Tensor):
            a.copy_(b)
        elif dataclasses.is_dataclass(a):
            _copy_back(a, b)


def in_place(fn, cache, *args):
    """fn(cache, *args) for a kernel that writes into `cache` (a CPU dataclass of tensors):
    run on the kernel device, then the written tensors (and lengths) copied back."""
    dev = kernel_device()
    if dev.type == "cpu":
        return fn(cache, *args)
    moved = to(cache, dev)
    fn(moved, *to(args, dev))
    _copy_back(cache, moved)
    return cache


def wide_exact_dtype() -> torch.dtype:
    """The tightest dtype the wide private path runs at on the kernel device: float64 in the
    interpreter; float32 natively, where float64 takes FMA products (no tl.dot) and the wide
    path is refused by design (lrkv.kernels.launch)."""
    return torch.float32 if kernel_device().type == "cuda" else torch.float64


def skip_float64_wide_natively(dtype) -> None:
    if kernel_device().type == "cuda" and dtype in (torch.float64, "float64"):
        import pytest

        pytest.skip("float64 on a GPU takes FMA products (no tl.dot), where the wide path is refused by design "
                    "(its refusal: test_bad_launch_options_refused_before_launch)")
