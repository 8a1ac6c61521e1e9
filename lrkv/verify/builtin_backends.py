"""Built-in backends (DESIGN §4): reference, materialized, eager, inductor (and inductor-cudagraphs).

Each implements the kernel level (`decode_attention`, the contract of
`lrkv.reference.contract`) and the layer level (`layer_step`); reference, materialized and
eager also the paged-decode and extend levels (`lrkv.reference.paged`, `.extend`). The layer level reuses the
reference `layer_step` with the backend's decode plugged in, except inductor, which
compiles the whole step — on the CPU or, through inductor's own Triton, on CUDA.
"""

from __future__ import annotations

import torch

from ..reference.cache import FactoredCache
from ..reference.contract import validate_cache_inputs
from ..reference.lrkv import attend, layer_step
from ..reference.weights import LRKVWeights
from .protocol import BaseBackend
from .inductor import compiled_decode, compiled_layer_step, cuda_unavailable_reason, resolve_device

F64 = (torch.float64,)
LOW = (torch.float32, torch.bfloat16, torch.float16)
CPU_COMPILED = (torch.float64, torch.float32)
CUDA_COMPILED = (torch.float64, *LOW)


class ReferenceBackend(BaseBackend):
    """float64 factored decode, paper Eqs. 6–7: the oracle itself."""

    name = "reference"
    role = "baseline"  # the oracle itself: passes by construction
    levels = frozenset({"kernel", "kernel-paged", "kernel-extend", "layer"})
    materialized = False  # True: K_h and V_h rebuilt explicitly (lrkv.reference.lrkv.attend)
    dtypes = F64
    description = "float64 factored decode (Eqs. 6-7), the oracle"

    def attend(self, q, cache, basis_k, basis_v, *, scale, rope=None, cu_seqlens_q=None):
        return attend(q, cache, basis_k, basis_v, scale=scale, rope=rope, cu_seqlens_q=cu_seqlens_q, check=True,
                      materialized=self.materialized)

    def layer_step(self, weights, x_t, cache, positions):
        return layer_step(weights, x_t, cache, positions, decode=self.decode_attention)


class MaterializedBackend(ReferenceBackend):
    """float64 with K_h = S_K + R_h B_h^T and V_h rebuilt explicitly (a different operation order)."""

    name = "materialized"
    description = "float64 decode over explicit K_h, V_h"
    materialized = True


class EagerBackend(ReferenceBackend):
    """The reference math run in PyTorch eager at the input dtype (no upcast)."""

    name = "eager"
    dtypes = LOW
    description = "reference factored math in eager PyTorch at float32/bfloat16/float16"
    cache_formats = ("float8_e4m3fn", "float8_e5m2")  # dequantize-then-attend at τ: the fp8 cases' err_base path


class InductorBackend(BaseBackend):
    """torch.compile (inductor) of the kernel-level decode (Eqs. 6–7) and the layer step, T dynamic.

    device: 'auto' (CUDA when torch sees a CUDA device, else the CPU), 'cpu' or 'cuda'.
    mode: 'default', or 'reduce-overhead' (CUDA graphs; always CUDA, unavailable without it).
    The harness draws every case's inputs on the CPU, where the float64 oracle runs; on CUDA
    the backend moves them to the GPU and its outputs (and, at layer level, the updated cache)
    back — as the triton backend does — so a case is judged on the same inputs wherever it
    ran. Inputs already on the backend's device stay there.

    On the CPU it claims float64/float32, as before (each half-precision shape family would
    add a C++ compile to the grid's CPU budget, lrkv/verify/grids.py); on CUDA
    float64/float32/bfloat16/float16 — inductor emits Triton for all four — all judged by
    the same rule (`judge_record`).
    """

    levels = frozenset({"kernel", "layer"})

    def __init__(self, device: str = "auto", mode: str = "default"):
        self.mode = mode
        self.device = resolve_device(device, mode, cuda_available=torch.cuda.is_available())  # 'cpu' | 'cuda'
        if mode == "reduce-overhead":
            self.name = "inductor-cudagraphs"
        else:
            self.name = "inductor" if device == "auto" else f"inductor[{device}]"
        self.dtypes = CPU_COMPILED if self.device == "cpu" else CUDA_COMPILED
        how = ", CUDA graphs (mode='reduce-overhead')" if mode == "reduce-overhead" else ""
        self.description = (f"torch.compile(inductor) of the factored decode and the layer step, "
                            f"{self.device}{how}")

    def available(self) -> tuple[bool, str]:
        try:
            import torch._dynamo
            from torch._inductor.cpp_builder import get_cpp_compiler
        except Exception as e:  # noqa: BLE001 — any import failure means "not here"
            return False, f"torch inductor is not importable: {e}"
        if not torch._dynamo.is_dynamo_supported():
            return False, "torch.compile is not supported on this Python/platform"
        if self.device == "cuda":
            why = cuda_unavailable_reason()
            if why and self.mode == "reduce-overhead":
                why = f"mode='reduce-overhead' records CUDA graphs: {why}"
            return not why, why
        try:
            get_cpp_compiler()
        except Exception as e:  # noqa: BLE001
            return False, f"inductor's CPU backend needs a C++ compiler: {e}"
        return True, ""

    def _mover(self, home: torch.device):
        """None when tensors on `home` run where they are, else a function moving one to the device."""
        if home.type == self.device:
            return None
        dev = torch.device(self.device)
        return lambda t: t if t is None else t.to(dev)

    def attend(self, q, cache, basis_k, basis_v, *, scale, rope=None, cu_seqlens_q=None):
        # Same contract checks as the reference, eagerly: a compiled graph must not see bad input.
        validate_cache_inputs(q, cache, basis_k, basis_v, scale=scale, rope=rope)
        home, move = q.device, self._mover(q.device)
        if move is not None:
            q, basis_k, basis_v, cache = move(q), move(basis_k), move(basis_v), cache.to(self.device)
        out, lse = compiled_decode(q, cache, basis_k, basis_v, scale=scale, rope=rope, device=self.device,
                                   mode=self.mode)
        return out.to(home), lse.to(home)

    def layer_step(self, weights, x_t, cache, positions):
        """Mutates and returns `cache` like the reference's layer_step, wherever it ran."""
        move = self._mover(x_t.device)
        if move is None:
            return compiled_layer_step(weights, x_t, cache, positions, device=self.device, mode=self.mode)
        work = FactoredCache(**{k: move(v) for k, v in vars(cache).items()})
        weights_d = LRKVWeights(**{k: move(v) if isinstance(v, torch.Tensor) else v for k, v in vars(weights).items()})
        y, work = compiled_layer_step(weights_d, move(x_t), work, move(positions), device=self.device,
                                      mode=self.mode)
        for name, t in cache.tensors().items():
            t.copy_(getattr(work, name))
        cache.lengths = work.lengths.to(cache.lengths.device)
        return y.to(x_t.device), cache


def inductor_cudagraphs() -> InductorBackend:
    """`inductor-cudagraphs`: inductor on CUDA with CUDA graphs (mode='reduce-overhead')."""
    return InductorBackend(mode="reduce-overhead")


def inductor_cpu() -> InductorBackend:
    """inductor pinned to the CPU (`--backend lrkv.verify.builtin_backends:inductor_cpu` on a GPU machine)."""
    return InductorBackend(device="cpu")
