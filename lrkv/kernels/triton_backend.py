"""The `triton` backend (DESIGN §4): the fused split-K kernels behind the backend protocol.

    lrkv verify --backend triton                    (registered name)
    lrkv verify --backend lrkv.kernels.triton_backend:TritonBackend
    lrkv verify --backend triton-sm90               (at the launch an sm_90 GPU picks, wherever it runs)

Kernel level: `decode_attention` (the contract of `lrkv.reference.contract`); levels
`kernel-paged` and `kernel-extend`: `paged_decode_attention` and `extend_attention`
(DESIGN §4), the same kernels over a page table and the ragged causal extend kernel.
Layer level: `layer_step` = projections (torch, at the weights' dtype) → Triton append →
Triton decode → output projection, the same steps as `lrkv.reference.lrkv.layer_step`.

Where it runs is `lrkv.kernels.runtime.mode()`: natively on CUDA (CPU inputs are moved to
the GPU and results moved back, so a harness can stay device-agnostic), in the Triton
interpreter when TRITON_INTERPRET=1, and nowhere otherwise: in fallback mode the backend
reports itself unavailable rather than pass the reference math off as the kernel. In the
interpreter every launch is memchecked (`lrkv.kernels.memcheck`). `launch_as="sm90"`
(registered as `triton-sm90`) launches every call as a 132-SM sm_90 GPU would
(`launch.gpu_launch`: its group, splits, tile, warps and private path; the case's split and
tile hints taken as that GPU takes them): the interpreter's memcheck then checks the
addresses the GPU's launch computes, which the interpreter's own launch never does.

Deliberately broken variants of this backend (bugs the harness must reject) live above the
kernels: they subclass it and override `_attend`, the one place both levels launch the kernels.
"""

from __future__ import annotations

import contextlib
from typing import Any

import torch

from ..reference.cache import FactoredCache
from ..reference.lrkv import decode_rope, project_token
from ..verify.protocol import BaseBackend
from . import runtime
from .validate import MAX_SPLITS

BATCH_INVARIANT_SPLIT_TOKENS = 256  # batch-invariant mode: one split per this many cache slots
LAUNCH_OPTIONS = ("num_splits", "group_size", "block_t", "num_warps", "dot", "private", "programs_per_sm")
LAUNCH_AS = ("sm90",)  # launch_as: whose launch choice to take instead of this machine's


class TritonBackend(BaseBackend):
    name = "triton"
    levels = frozenset({"kernel", "kernel-paged", "kernel-extend", "layer"})
    # float64 runs through tl.dot in the interpreter and through the broadcast-and-sum path
    # (no tensor cores) on a GPU: it is there for tight checks, not speed.
    dtypes = (torch.float32, torch.bfloat16, torch.float16, torch.float64)
    description = "fused split-K factored decode + append (Triton)"
    # fp8 caches at every kernel level, every granularity (dequantized on load, fp32 products)
    cache_formats = ("float8_e4m3fn", "float8_e5m2")

    batch_invariant = False  # the default launch picks its split count from the batch (pick_launch)

    def __init__(self, *, batch_invariant: bool = False, launch_as: str | None = None, **launch: Any):
        """`launch` overrides the launch shape (num_splits, group_size, block_t, num_warps, dot,
        private, programs_per_sm). batch_invariant=True: the split count comes from the cache's
        slots alone — one split per BATCH_INVARIANT_SPLIT_TOKENS slots — never from the batch or
        the SM count, so a sequence's result does not depend on its neighbours (declared, and
        verified by the harness's batch_invariant property). launch_as="sm90": what is not
        fixed is chosen as on a 132-SM sm_90 GPU (module doc), the product mode (dot) aside."""
        unknown = sorted(set(launch) - set(LAUNCH_OPTIONS))
        if unknown:
            raise TypeError(f"TritonBackend got unknown launch options {unknown}; known: {', '.join(LAUNCH_OPTIONS)}")
        if not isinstance(batch_invariant, bool):
            raise TypeError(f"batch_invariant must be a bool, got {type(batch_invariant).__name__}")
        if launch_as is not None and launch_as not in LAUNCH_AS:
            raise ValueError(f"launch_as must be None or one of {LAUNCH_AS}, got {launch_as!r}")
        self.batch_invariant = batch_invariant
        self.launch_as = launch_as
        self.launch = dict(launch)
        self._hints: dict[str, int] = {}  # per-case launch hints from configure()
        if batch_invariant:
            self.name += "-batch-invariant"
        if launch_as:
            self.name += f"-{launch_as}"

    # ------------------------------------------------------------------ protocol
    def __getstate__(self) -> dict:
        # sent to lrkv's worker process (lrkv.verify.isolation) with the mode forced here, if any:
        # `runtime.interpreter()` is state of this process, which the worker does not share
        return {**self.__dict__, "_forced_mode": runtime.forced_mode()}

    def worker_context(self):
        """Each call in the worker process runs in the mode the harness had forced (isolation.py)."""
        forced = self.__dict__.get("_forced_mode")
        return runtime.interpreter() if forced == "interpreter" else contextlib.nullcontext()

    def available(self) -> tuple[bool, str]:
        which, why = runtime.mode()
        if which == "fallback":
            return False, why
        if which == "interpreter" and (problem := runtime.interpreter_problem()):
            return False, problem
        return True, f"{which}: {why}"

    @property
    def mode(self) -> str:
        """'cuda' | 'interpreter' | 'fallback' (where the kernels would run now)."""
        return runtime.mode()[0]

    def supports(self, case: Any) -> tuple[bool, str]:
        dtype = getattr(case, "dtype", None)
        if isinstance(dtype, str):
            from ..spec.dtypes import as_dtype

            dtype = as_dtype(dtype)
        if dtype is not None and dtype not in self.dtypes:
            return False, f"triton kernels support {[str(d) for d in self.dtypes]}, not {dtype}"
        spec = getattr(case, "spec", None)
        if spec is not None and getattr(spec, "family", "lrkv") != "lrkv":
            return False, f"triton kernels implement LRKV only, not {spec.family!r}"
        level = getattr(case, "level", None)
        needs = {"layer-model": "layer"}.get(level, level)  # layer-model cases run layer_step
        if needs is not None and needs not in self.levels:
            return False, f"triton backend implements levels {sorted(self.levels)}, not {level!r}"
        return True, ""

    def configure(self, case: Any) -> None:
        """Take the harness's per-case hints: `splits` becomes num_splits (it need not divide
        T); `tile` becomes block_t rounded up to a power of two >= 16, the smallest tile tl.dot
        takes — a hint of 4 or 7 still means "several tiles per split" at the grid's lengths."""
        from .validate import BLOCK_T_CHOICES, MAX_SPLITS, next_pow2

        self._hints = {}
        splits = int(getattr(case, "splits", 0) or 0)
        tile = int(getattr(case, "tile", 0) or 0)
        if splits:
            self._hints["num_splits"] = min(splits, MAX_SPLITS)
        if tile:
            self._hints["block_t"] = min(next_pow2(tile, BLOCK_T_CHOICES[0]), BLOCK_T_CHOICES[-1])

    # ------------------------------------------------------------------ helpers
    def _device(self) -> torch.device | None:
        return torch.device("cuda") if runtime.mode()[0] == "cuda" else None

    def _launch(self, q, cache: FactoredCache, rope, cu_seqlens_q) -> dict:
        """The launch options of one call: the case's hints, under this backend's own."""
        cfg = {**self._hints, **self.launch}  # explicit constructor overrides win
        if self.batch_invariant and "num_splits" not in cfg:  # fixed split size in tokens
            cfg["num_splits"] = min(MAX_SPLITS, max(1, -(-cache.t_max // BATCH_INVARIANT_SPLIT_TOKENS)))
        if self.launch_as == "sm90" and q.dim() == 3 and q.shape[1] > 0:  # a malformed q: the contract's to name
            from .launch import gpu_launch, launch_overrides

            gpu = gpu_launch(rows=q.shape[0], H=q.shape[1], d_h=q.shape[2], r=cache.latent_k.shape[-1],
                             slots=cache.t_max, dtype=q.dtype, rope_exact=rope is not None, paged=cache.paged,
                             extend=cu_seqlens_q is not None, fp8=cache.scales is not None,
                             seqs=None if cu_seqlens_q is None else cu_seqlens_q.shape[0] - 1, **cfg)
            cfg = {**launch_overrides(gpu), **({"dot": cfg["dot"]} if "dot" in cfg else {})}
        return cfg

    # ------------------------------------------------------------------ kernel level
    def attend(self, q, cache: FactoredCache, basis_k, basis_v, *, scale, rope=None, cu_seqlens_q=None):
        """Decode, paged decode or extend through the kernels' one wrapper (`decode.attend`), the
        inputs moved to the kernels' device and the outputs back."""
        home, dev = q.device, self._device()
        move = self._mover(home)
        if dev is not None and home != dev:
            cache = cache.to(dev)
        out, lse = self._attend(move(q), cache, move(basis_k), move(basis_v), scale=scale, rope=rope,
                                cu_seqlens_q=move(cu_seqlens_q))
        return out.to(home), lse.to(home)

    def _attend(self, q, cache: FactoredCache, basis_k, basis_v, *, scale, rope=None, cu_seqlens_q=None):
        """The kernels' one wrapper, `decode.attend`, with this backend's launch options, on
        the kernels' device: both levels launch through here."""
        from .decode import attend

        return attend(q, cache, basis_k, basis_v, scale=scale, rope=rope, cu_seqlens_q=cu_seqlens_q,
                      **self._launch(q, cache, rope, cu_seqlens_q))

    def _mover(self, home: torch.device):
        dev = self._device()
        if dev is None or home == dev:
            return lambda t: t
        return lambda t: t if t is None else t.to(dev)

    # ------------------------------------------------------------------ layer level
    def layer_step(self, weights, x_t, cache: FactoredCache, positions):
        """project → append (Triton) → decode (Triton) → W_o; mutates and returns `cache`
        like the reference's layer_step."""
        from .append import append

        spec = weights.spec
        if x_t.dim() != 2 or x_t.shape != (cache.batch, spec.d_model):
            raise ValueError(f"x_t must have shape [{cache.batch}, {spec.d_model}], got {list(x_t.shape)}")
        dev = self._device()
        home = x_t.device
        moved = dev is not None and cache.shared_k.device != dev
        work = cache
        if moved:
            work = cache.to(dev)  # scales and page table too
            weights_d = weights.__class__(**{k: (v.to(dev) if isinstance(v, torch.Tensor) else v)
                                             for k, v in vars(weights).items()})
            x_t, positions = x_t.to(dev), positions.to(dev)
        else:
            weights_d = weights
        entries = project_token(weights_d, x_t, positions)
        append(work, entries, positions)
        out, _ = self._attend(entries["q"], work, weights_d.basis_k, weights_d.basis_v,
                              scale=spec.head_dim ** -0.5, rope=decode_rope(spec))
        y = torch.einsum("bhd,hde->be", out, weights_d.w_o)
        if moved:
            for name, t in cache.tensors().items():
                t.copy_(getattr(work, name))
            if cache.scales is not None:  # dynamic scales were written at the new slot
                for name, t in cache.scales.tensors().items():
                    t.copy_(work.scales.of(name))
            cache.lengths = work.lengths.to(cache.lengths.device)
            y = y.to(home)
        return y, cache


def batch_invariant() -> TritonBackend:
    """The Triton backend in its batch-invariant launch mode (registered as 'triton-batch-invariant')."""
    return TritonBackend(batch_invariant=True)


def sm90() -> TritonBackend:
    """The Triton backend at the launch a 132-SM sm_90 GPU picks (registered as 'triton-sm90')."""
    return TritonBackend(launch_as="sm90")


class TritonVllmBlocks(TritonBackend):
    """The paged and extend kernels over vLLM's block pools (cache_layout 'vllm-blocks',
    registered as 'triton-vllm-blocks'): a block table is a page table whose padding is the
    null block 0, so the pools and the table go to the kernels as they are — no conversion,
    and no copy of a token-major (NHD) pool (a head-major one is made dense once per call,
    docs/kernels.md)."""

    name = "triton-vllm-blocks"
    levels = frozenset({"kernel-paged", "kernel-extend"})
    cache_layout = "vllm-blocks"

    # vLLM's decode is the pages contract with its own names (seq_lens, block_table), so the
    # inherited paged_decode_attention takes it as it is; its extend has block_table positional.
    def extend_attention(self, *args, slot_mapping=None, **kw):
        # slot_mapping names where the new tokens were written: the cache holds them already
        *args, block_table = args
        return super().extend_attention(*args, page_table=block_table, **kw)
