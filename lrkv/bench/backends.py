"""How a row's decode step is run: inductor on any device; Triton and SDPA on a GPU.

  eager     the same step functions uncompiled: what torch.compile buys (and a fast path
            for the unit tests of the machinery)
  inductor  torch.compile of the family's step (`lrkv.bench.families`; on a GPU inductor
            generates Triton kernels, and the compiled call is captured in a CUDA graph),
            batch B and cache length T marked dynamic: one compile per (family, scale,
            formulation) for T ≤ 4K and one for T > 4K (inductor sums more than 4096 float32
            terms with a cascade helper, for accuracy, and guards on which side of 4096 a
            reduction is); B = 1 specialises, so B = 1 and B > 1 compile apart.
  triton    LRKV only: the fused split-K kernel of `lrkv.kernels`, looked up through the
            backend registry (`lrkv.verify.backend_registry.get_backend("triton")`) for availability,
            inputs validated once here, then timed with validation off. Two variants time
            the same data another way: `triton-paged` over a paged cache of 16-slot pages in
            a random page order (`FactoredCache.paginate`), `triton-rope` with exact RoPE
            (the private keys rotated per slot). On a CPU they run only in Triton's
            interpreter (TRITON_INTERPRET=1): the code path, with meaningless timings.
  sdpa      MHA/GQA/MQA only: torch.nn.functional.scaled_dot_product_attention with one query
            row over the cache viewed [B, n_kv, T, d_h] (enable_gqa), i.e. FlashAttention-style
            decode. It has no length argument, so it is only used on full caches.

On a GPU every timed callable is captured in a CUDA graph when possible, so Python and
launch overhead do not count (a decode step at T = 1K is a few microseconds of work).
"""

from __future__ import annotations

import os
from collections.abc import Callable

import torch

# own_code: dynamo's caches are per code object, and dense_step serves 3 families x 2 scales
from ..verify.inductor import own_code as _own_code
from .families import CACHE_TENSORS, BenchFamily, reference_step, step_args
from .prepared import Prepared, finish

FORMULATIONS = ("bench", "reference")  # the time-major steps, or the float64 references' einsums
# On a small box a compile worker pool costs more than it saves for these small graphs.
COMPILE_OPTIONS = {"compile_threads": 1} if (os.cpu_count() or 1) <= 4 else {}


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
        if device == "cuda":
            try:
                import triton  # noqa: F401 — inductor's GPU code generator
            except Exception as e:  # noqa: BLE001
                return False, f"inductor on CUDA generates Triton kernels, and triton is not importable: {e}"
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
        return finish(lambda: fn(*args), device)


class EagerSteps(InductorSteps):
    name = "eager"

    def available(self, device: str) -> tuple[bool, str]:
        return True, ""

    def prepare(self, family: BenchFamily, spec, inputs: dict, device: str) -> Prepared:
        fn = family.step if self.formulation == "bench" else reference_step(family)
        args = (*step_args(family, inputs), spec.scale)
        return finish(lambda: fn(*args), device)


PAGE_SIZE = 16  # the paged variant's page size (the GPU target is stated at 16)
FP8_FORMAT, FP8_GRANULARITY = "float8_e4m3fn", "per_head"  # the fp8 row's cache (FA3's per-head descale)


class TritonSteps:
    """The fused Triton kernel on a contiguous cache (`variant` "contiguous"), on a paged copy
    of the same cache ("paged", pages of PAGE_SIZE slots in a random order), with exact
    RoPE ("rope"), or on the cache stored in fp8 ("fp8": FP8_FORMAT with FP8_GRANULARITY
    scales, quantized once, untimed; DESIGN §4.1). `launch` overrides the launch shape (the
    sweep's knobs)."""

    VARIANTS = {"contiguous": "triton", "paged": "triton-paged", "rope": "triton-rope", "fp8": "triton-fp8"}

    def __init__(self, variant: str = "contiguous", **launch):
        if variant not in self.VARIANTS:
            raise ValueError(f"variant must be one of {sorted(self.VARIANTS)}, got {variant!r}")
        self.variant = variant
        self.name = self.VARIANTS[variant]
        self.launch = launch
        # what the row's cache is stored as (bytes: lrkv.bench.families.read_bytes)
        self.cache = (FP8_FORMAT, FP8_GRANULARITY) if variant == "fp8" else None

    def available(self, device: str) -> tuple[bool, str]:
        from ..kernels import runtime

        which, why = runtime.mode()
        if device == "cpu":
            if which == "interpreter":
                return True, ""  # TRITON_INTERPRET=1: the code path runs, timings mean nothing
            return False, ("the Triton kernel is timed on a GPU (on a CPU it runs in the interpreter only: "
                           "TRITON_INTERPRET=1)")
        try:
            from ..verify.backend_registry import get_backend

            backend = get_backend("triton")
        except Exception as e:  # noqa: BLE001 — not built/installed: a skip with the reason
            return False, f"triton backend not available: {e}"
        ok, why_not = backend.available()
        if not ok:
            return False, why_not
        if which != "cuda":
            return False, f"kernels would not run natively: {why}"
        return True, ""

    def supports(self, family: BenchFamily) -> tuple[bool, str]:
        if family.spec_family != "lrkv" or family.name != "lrkv":
            return False, "the Triton kernel implements the factored LRKV decode only"
        return True, ""

    def extra_bytes(self, spec, batch: int, seq_len: int, dtype) -> int:
        """Memory beyond the shared inputs: the paged copy of the cache (and paginate's
        staging), or the fp8 copy and quantize_cache's float64 staging of the largest part."""
        from ..spec import decode_bytes

        if self.variant == "fp8":
            return decode_bytes(spec, seq_len, "fp8", batch=batch) + 8 * batch * seq_len * spec.n_heads * spec.rank
        if self.variant != "paged":
            return 0
        return 2 * decode_bytes(spec, -(-seq_len // PAGE_SIZE) * PAGE_SIZE, dtype, batch=batch)

    def launch_config(self, inputs: dict, spec) -> dict:
        """The launch shape the kernel picks for these inputs (asdict of LaunchConfig)."""
        from dataclasses import asdict

        from ..kernels.decode import pick_launch

        B, T = inputs["shared_k"].shape[:2]
        cfg = pick_launch(B=B, H=spec.n_heads, d_h=spec.head_dim, r=spec.rank, slots=T, dtype=inputs["q"].dtype,
                          device=inputs["q"].device, rope_exact=self.variant == "rope", paged=self.variant == "paged",
                          **self.launch)
        return asdict(cfg)

    def prepare(self, family: BenchFamily, spec, inputs: dict, device: str) -> Prepared:
        from ..kernels.decode import attend, decode_attention
        from ..reference.cache import FactoredCache
        from ..reference.contract import validate_cache_inputs
        from ..reference.rope import ExactRope

        q, sk, sv, lk, lv, bk, bv, lengths = step_args(family, inputs)
        rope = ExactRope() if self.variant == "rope" else None
        cache = FactoredCache(sk, sv, lk, lv, lengths)
        validate_cache_inputs(q, cache, bk, bv, scale=spec.scale, rope=rope)  # once, untimed
        if self.variant == "paged":
            paged = cache.paginate(PAGE_SIZE, generator=torch.Generator().manual_seed(0), extra_pages=0)
            validate_cache_inputs(q, paged, bk, bv, scale=spec.scale)  # once, untimed
            fn = lambda: attend(q, paged, bk, bv, scale=spec.scale, check=False, **self.launch)  # noqa: E731
        elif self.variant == "fp8":
            from ..reference.fp8_cache import quantize_cache
            from ..spec import as_dtype

            parts = dict(zip(("shared_k", "shared_v", "latent_k", "latent_v"), (sk, sv, lk, lv)))
            stored, scales = quantize_cache(parts, lengths, as_dtype(FP8_FORMAT), FP8_GRANULARITY)  # untimed
            del parts, sk, sv, lk, lv
            fp8 = [stored[p] for p in ("shared_k", "shared_v", "latent_k", "latent_v")]
            fn = lambda: decode_attention(q, *fp8, bk, bv, lengths, scale=spec.scale,  # noqa: E731
                                          check=False, cache_scales=scales, **self.launch)
        else:
            fn = lambda: decode_attention(q, sk, sv, lk, lv, bk, bv, lengths, scale=spec.scale,  # noqa: E731
                                          rope=rope, check=False, **self.launch)
        prepared = finish(fn, device)
        if device != "cuda":
            prepared.note = "Triton interpreter (timing meaningless)"
        return prepared


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

        prepared = finish(fn, device)
        if device == "cuda":
            prepared.note += f"; sdpa {sdpa_backend_name(q4, k4, v4, spec.scale, gqa)}"
        return prepared


def sdpa_backend_name(q, k, v, scale: float, gqa: bool) -> str:
    """Which fused SDPA kernel the dispatcher runs for these inputs: the first of flash,
    cuDNN, memory-efficient that accepts them (the dispatcher's own order), else math."""
    import torch.nn.functional as F

    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return "unknown"
    for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"):
        be = getattr(SDPBackend, name, None)
        if be is None:
            continue
        try:
            with sdpa_kernel([be]):
                F.scaled_dot_product_attention(q, k, v, scale=scale, enable_gqa=gqa)
            return name.lower()
        except RuntimeError:
            continue
    return "math"


BACKEND_NAMES = ("inductor", "eager", "triton", "triton-paged", "triton-rope", "triton-fp8", "sdpa")
GPU_BACKENDS = ("inductor", "triton", "triton-paged", "triton-rope", "sdpa")  # the default on CUDA


def step_backends(device: str, names: list | None = None, *, formulation: str = "bench",
                  dtype: torch.dtype = torch.float32) -> list:
    """The backends to run on a device, in table order (all known ones when names is None).

    A name with a colon is a user's backend, `package.module:attribute`
    (`lrkv.bench.user_backends`; it times the lrkv row at `dtype` through each of its kernel
    entries: decode, paged decode and extend, in its cache layout); an already built backend
    passes through. Named only user backends, the device's default built-ins stay in front
    of them, so the user's row is timed beside them."""
    known = {"inductor": lambda: InductorSteps(formulation), "eager": lambda: EagerSteps(formulation),
             "triton": TritonSteps, "triton-paged": lambda: TritonSteps("paged"),
             "triton-rope": lambda: TritonSteps("rope"), "triton-fp8": lambda: TritonSteps("fp8"),
             "sdpa": SdpaSteps}
    defaults = list(GPU_BACKENDS) if device == "cuda" else ["inductor"]
    if names is None:
        names = defaults
    unknown = [n for n in names if isinstance(n, str) and ":" not in n and n not in known]
    if unknown:
        raise ValueError(f"unknown bench backend(s) {unknown}; known: {sorted(known)}, or a user's "
                         "'package.module:attribute'")
    if not any((n if isinstance(n, str) else n.name) in known for n in names):
        names = [*defaults, *names]
    from .user_backends import user_steps

    out = [b for n in names  # a user's backend: a row per kernel entry (decode, paged, extend)
           for b in ([known[n]()] if n in known else user_steps(n, dtype) if isinstance(n, str) else [n])]
    seen: dict[str, int] = {}
    for b in out:
        seen[b.name] = seen.get(b.name, 0) + 1
    clash = sorted(n for n, k in seen.items() if k > 1)
    if clash:  # rows are keyed by backend name: two of one name would overwrite each other
        raise ValueError(f"two bench backends share the name {clash[0]!r}; rename one (its `name` attribute)")
    return out
