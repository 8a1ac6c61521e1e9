"""How a row's decode step is run: inductor on any device; Triton and SDPA on a GPU.

  eager     the same step functions uncompiled: what torch.compile buys (and a fast path
            for the unit tests of the machinery)
  inductor  torch.compile of the family's step (`lrkv.bench.families`), batch B and cache
            length T marked dynamic: one compile per (family, scale, formulation) for T ≤ 4K and
            one for T > 4K (inductor sums more than 4096 float32 terms with a cascade helper,
            for accuracy, and guards on which side of 4096 a reduction is).
  triton    LRKV only: the fused split-K kernel of `lrkv.kernels`, looked up through the
            backend registry (`lrkv.verify.backend.get_backend("triton")`) for availability,
            inputs validated once here, then timed with validation off.
  sdpa      MHA/GQA/MQA only: torch.nn.functional.scaled_dot_product_attention with one query
            row over the cache viewed [B, n_kv, T, d_h] (enable_gqa), i.e. FlashAttention-style
            decode. It has no length argument, so it is only used on full caches.

On a GPU every timed callable is captured in a CUDA graph when possible, so Python and
launch overhead do not count (a decode step at T = 1K is a few microseconds of work).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass

import torch

# own_code: dynamo's caches are per code object, and dense_step serves 3 families x 2 scales
from ..verify.inductor import own_code as _own_code
from .families import CACHE_TENSORS, BenchFamily, reference_step, step_args

FORMULATIONS = ("bench", "reference")  # the time-major steps, or the float64 references' einsums
# On a small box a compile worker pool costs more than it saves for these small graphs.
COMPILE_OPTIONS = {"compile_threads": 1} if (os.cpu_count() or 1) <= 4 else {}


@dataclass
class Prepared:
    call: Callable[[], object]  # the timed callable, inputs bound
    note: str = ""  # how it runs (e.g. "cuda graph")


def graphed(fn: Callable[[], object]) -> Callable[[], object]:
    """fn captured in a CUDA graph; replaying it excludes Python and launch overhead."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()  # compile, autotune and warm up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def _finish(fn: Callable[[], object], device: str) -> Prepared:
    if device != "cuda":
        return Prepared(fn)
    try:
        return Prepared(graphed(fn), "cuda graph")
    except Exception as e:  # noqa: BLE001 — capture can fail for many reasons; time eagerly then
        torch.cuda.synchronize()
        return Prepared(fn, f"eager launch (graph capture failed: {type(e).__name__})")


class InductorSteps:
    name = "inductor"

    def __init__(self, formulation: str = "bench"):
        if formulation not in FORMULATIONS:
            raise ValueError(f"formulation must be one of {FORMULATIONS}, got {formulation!r}")
        self.formulation = formulation
        self._compiled: dict[tuple, Callable] = {}

    def available(self, device: str) -> tuple[bool, str]:
        if not torch._dynamo.is_dynamo_supported():
            return False, "torch.compile is not supported on this Python/platform"
        if device == "cpu":
            try:
                from torch._inductor.cpp_builder import get_cpp_compiler

                get_cpp_compiler()
            except Exception as e:  # noqa: BLE001
                return False, f"inductor's CPU backend needs a C++ compiler: {e}"
        return True, ""

    def supports(self, family: BenchFamily) -> tuple[bool, str]:
        return True, ""

    def compiled(self, family: BenchFamily, key: tuple) -> Callable:
        """One compiled callable per (family, key); built on first use."""
        full = (family.name, self.formulation, *key)
        if full not in self._compiled:
            fn = family.step if self.formulation == "bench" else reference_step(family)
            if not hasattr(fn, "__code__"):  # functools.partial of the reference: wrap it
                inner = fn
                fn = lambda *a: inner(*a)  # noqa: E731
            name = f"bench_{family.name.replace('-', '_')}_{len(self._compiled)}"
            self._compiled[full] = torch.compile(_own_code(fn, name), dynamic=False,
                                                 options=COMPILE_OPTIONS or None)
        return self._compiled[full]

    def prepare(self, family: BenchFamily, spec, inputs: dict, device: str) -> Prepared:
        for name in family.arg_names:
            t = inputs.get(name)
            if t is None:
                continue
            if name in ("q", "lengths") or name in CACHE_TENSORS:
                # B dynamic from the start: B = 4 and B = 16 share a compile (B = 1 always specialises).
                torch._dynamo.maybe_mark_dynamic(t, 0)
            if name in CACHE_TENSORS:
                # maybe_: a T whose chunk count is 1 (T = 128) specialises instead of failing.
                torch._dynamo.maybe_mark_dynamic(t, 1)
        fn = self.compiled(family, (spec.short(), device, str(inputs["q"].dtype)))
        args = (*step_args(family, inputs), spec.scale)
        return _finish(lambda: fn(*args), device)


class EagerSteps(InductorSteps):
    name = "eager"

    def available(self, device: str) -> tuple[bool, str]:
        return True, ""

    def prepare(self, family: BenchFamily, spec, inputs: dict, device: str) -> Prepared:
        fn = family.step if self.formulation == "bench" else reference_step(family)
        args = (*step_args(family, inputs), spec.scale)
        return _finish(lambda: fn(*args), device)


class TritonSteps:
    name = "triton"

    def available(self, device: str) -> tuple[bool, str]:
        if device != "cuda":
            return False, "the Triton kernel is timed on a GPU only (the CPU interpreter is for tests)"
        try:
            from ..verify.backend import get_backend

            backend = get_backend("triton")
        except Exception as e:  # noqa: BLE001 — not built/installed: a skip with the reason
            return False, f"triton backend not available: {e}"
        ok, why = backend.available()
        if not ok:
            return False, why
        from ..kernels import runtime

        if runtime.mode()[0] != "cuda":
            return False, f"kernels would not run natively: {runtime.mode()[1]}"
        return True, ""

    def supports(self, family: BenchFamily) -> tuple[bool, str]:
        if family.spec_family != "lrkv" or family.name != "lrkv":
            return False, "the Triton kernel implements the factored LRKV decode only"
        return True, ""

    def prepare(self, family: BenchFamily, spec, inputs: dict, device: str) -> Prepared:
        from ..kernels.decode import decode_attention
        from ..reference.contract import validate_decode_inputs

        args = step_args(family, inputs)
        validate_decode_inputs(*args, scale=spec.scale)  # once, outside the timed region
        return _finish(lambda: decode_attention(*args, scale=spec.scale, check=False), device)


class SdpaSteps:
    name = "sdpa"

    def available(self, device: str) -> tuple[bool, str]:
        if device != "cuda":
            return False, "SDPA decode is the GPU baseline (on CPU the inductor rows are the baseline)"
        return True, ""

    def supports(self, family: BenchFamily) -> tuple[bool, str]:
        if family.spec_family not in ("mha", "gqa", "mqa"):
            return False, "SDPA decode covers the dense families only"
        return True, ""

    def prepare(self, family: BenchFamily, spec, inputs: dict, device: str) -> Prepared:
        import torch.nn.functional as F

        q, k, v, lengths = step_args(family, inputs)
        if not bool((lengths == k.shape[1]).all()):
            raise ValueError("the SDPA rows take full caches only (scaled_dot_product_attention has no lengths)")
        q4 = q[:, :, None, :]  # [B, H, 1, d_h]
        k4, v4 = k.transpose(1, 2), v.transpose(1, 2)  # [B, n_kv, T, d_h] views of the cache
        gqa = k.shape[2] != q.shape[1]
        def fn():  # out [B, H, d_h] like the contract (a view; lse is not returned by SDPA)
            return F.scaled_dot_product_attention(q4, k4, v4, scale=spec.scale, enable_gqa=gqa)[:, :, 0]

        return _finish(fn, device)


def step_backends(device: str, names: list[str] | None = None, *, formulation: str = "bench") -> list:
    """The backends to run on a device, in table order (all known ones when names is None)."""
    known = {"inductor": lambda: InductorSteps(formulation), "eager": lambda: EagerSteps(formulation),
             "triton": TritonSteps, "sdpa": SdpaSteps}
    if names is None:
        names = ["inductor", "triton", "sdpa"] if device == "cuda" else ["inductor"]
    unknown = [n for n in names if n not in known]
    if unknown:
        raise ValueError(f"unknown bench backend(s) {unknown}; known: {sorted(known)}")
    return [known[n]() for n in names]
