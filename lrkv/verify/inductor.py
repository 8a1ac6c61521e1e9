"""torch.compile (inductor, CPU) of the kernel- and layer-level decode.

One compiled callable per (graph, dtype, static config); the cache length T is marked
dynamic with `torch._dynamo.mark_dynamic`, so ONE compile serves every length. Each
callable gets its own code object, so that dynamo's per-code recompile limit and its
automatic-dynamic bookkeeping never mix configurations; `fail_on_recompile_limit_hit`
makes a hidden fallback to eager impossible (a backend called "inductor" must not quietly
run eager code).
"""

from __future__ import annotations

import types
from collections.abc import Callable

import torch

from ..reference.cache import FactoredCache
from ..reference.lrkv import append, decode_attention, decode_rope, project_token
from ..reference.weights import LRKVWeights

COMPILE_OPTIONS = {"compile_threads": 1}  # on small CPU boxes a worker pool costs more than it saves
_COMPILED: dict[tuple, Callable] = {}


def own_code(fn: Callable, name: str) -> Callable:
    """A copy of fn with a distinct code object (dynamo caches and limits are per code object)."""
    code = fn.__code__.replace(co_name=name)
    return types.FunctionType(code, fn.__globals__, name, fn.__defaults__, fn.__closure__)


def _compile(key: tuple, build: Callable[[], Callable]) -> Callable:
    if key not in _COMPILED:
        fn = own_code(build(), f"lrkv_compiled_{len(_COMPILED)}")
        _COMPILED[key] = torch.compile(fn, dynamic=False, fullgraph=True, options=COMPILE_OPTIONS)
    return _COMPILED[key]


def compiled_count() -> int:
    """How many compiled callables exist in this process (tests use it to check reuse)."""
    return len(_COMPILED)


def _mark_length_dynamic(tensors) -> None:
    for t in tensors:
        if t is not None and t.shape[1] >= 2:  # dynamo always specialises sizes 0 and 1
            torch._dynamo.mark_dynamic(t, 1)


def _run(fn: Callable, *args):
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        return fn(*args)


# ----------------------------------------------------------------------------- kernel level
def _kernel_builder(scale: float, rope) -> Callable[[], Callable]:
    def build():
        def lrkv_kernel(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, key_scale):
            return decode_attention(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
                                    scale=scale, key_scale=key_scale, rope=rope, check=False)
        return lrkv_kernel
    return build


def compiled_decode(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, *,
                    scale: float, key_scale=None, rope=None):
    """The decode contract through a compiled graph (inputs already validated)."""
    B, H, d_h = q.shape
    T, r = shared_k.shape[1], latent_k.shape[3]
    key = ("kernel", q.dtype, B, H, d_h, r, key_scale is not None, rope, float(scale), T < 2)
    fn = _compile(key, _kernel_builder(float(scale), rope))
    # contiguous copies: a strided view would otherwise cost a recompile (strides are guarded)
    args = [None if t is None else t.contiguous() for t in
            (q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, key_scale)]
    _mark_length_dynamic(args[1:5] + args[8:])
    return _run(fn, *args)


# ----------------------------------------------------------------------------- layer level
def _projection_builder(spec) -> Callable[[], Callable]:
    def build():
        def lrkv_project(w, x_t, positions):
            return project_token(LRKVWeights(spec, **w), x_t, positions)
        return lrkv_project
    return build


def compiled_layer_step(weights: LRKVWeights, x_t, cache: FactoredCache, positions):
    """layer_step as two compiled graphs with the append between them.

    Graph 1 projects the token (x W_shared, x U_h, q, RoPE, QK-norm, key_scale); the append
    is the reference's (it validates positions and writes one slot); graph 2 is the compiled
    kernel-level decode, shared with kernel-level cases of the same static shape. The output
    projection is a single matmul, which inductor would hand to the same ATen kernel anyway.
    """
    spec = weights.spec
    if x_t.dim() != 2 or x_t.shape != (cache.batch, spec.d_model):
        raise ValueError(f"x_t must have shape [{cache.batch}, {spec.d_model}], got {list(x_t.shape)}")
    if not torch.isfinite(x_t).all():
        raise ValueError("x_t contains NaN or Inf")
    fn = _compile(("project", x_t.dtype, spec, cache.batch), _projection_builder(spec))
    w = {name: t for name, t in vars(weights).items() if name != "spec" and t is not None}
    entries = _run(fn, w, x_t.contiguous(), positions)
    append(cache, entries, positions)
    out, _ = compiled_decode(entries["q"], cache.shared_k, cache.shared_v, cache.latent_k, cache.latent_v,
                             weights.basis_k, weights.basis_v, cache.lengths, scale=spec.head_dim ** -0.5,
                             key_scale=cache.key_scale, rope=decode_rope(spec))
    return torch.einsum("bhd,hde->be", out, weights.w_o), cache
