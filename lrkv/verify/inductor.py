"""torch.compile (inductor) of the kernel- and layer-level decode, on the CPU or on CUDA.

One compiled callable per (device, mode, graph, dtype, static config); the cache length T
is marked dynamic with `torch._dynamo.mark_dynamic`, so ONE compile serves every length.
Each callable gets its own code object, so that dynamo's per-code recompile limit and its
automatic-dynamic bookkeeping never mix configurations; `fail_on_recompile_limit_hit`
makes a hidden fallback to eager impossible (a backend called "inductor" must not quietly
run eager code).

On the CPU inductor emits C++ (a compiler is needed); on CUDA it emits its own Triton
kernels (matmuls stay cuBLAS calls, as in inductor's default mode). `mode="reduce-overhead"`
(CUDA only) additionally records each compiled graph in a CUDA graph (cudagraph trees):
the first call of a shape warms up, the second records, later ones replay — so every call
here runs the graph CUDA_GRAPH_CALLS times and returns the last (a replay's) outputs, copied
out of the graph's static buffers before the next replay can overwrite them.
"""

from __future__ import annotations

import queue
import threading
import types
from collections.abc import Callable

import torch
from torch._dynamo.utils import counters
from torch.utils._pytree import tree_map

from ..checks import check_choice
from ..reference.cache import FactoredCache
from ..reference.lrkv import append, attend, decode_rope, project_token
from ..reference.weights import LRKVWeights

DEVICES = ("auto", "cpu", "cuda")
MODES = ("default", "reduce-overhead")
COMPILE_OPTIONS = {"compile_threads": 1}
CUDA_GRAPH_CALLS = 3  # warm-up, record, replay (cudagraph trees)
_COMPILED: dict[tuple, Callable] = {}
_GRAPH_THREAD: list = []  # the one _GraphThread, started on first use
_GRAPH_THREAD_LOCK = threading.Lock()


def resolve_device(device: str, mode: str, *, cuda_available: bool) -> str:
    """'cpu' or 'cuda': where a backend built with (device, mode) compiles and runs.

    'auto' is CUDA when torch sees a CUDA device, else the CPU. reduce-overhead records CUDA
    graphs, so it always means CUDA (and the backend is unavailable without one): it never
    turns into a CPU run under that name.
    """
    check_choice("device", device, DEVICES)
    check_choice("mode", mode, MODES)
    if mode == "reduce-overhead":
        if device == "cpu":
            raise ValueError("mode='reduce-overhead' records CUDA graphs: it needs device 'cuda' or 'auto', not 'cpu'")
        return "cuda"
    if device == "auto":
        return "cuda" if cuda_available else "cpu"
    return device


def cuda_unavailable_reason() -> str:
    """'' when inductor can generate and run Triton kernels on this machine's CUDA device."""
    if not torch.cuda.is_available():
        return (f"inductor on CUDA needs a CUDA device; torch {torch.__version__} sees none here "
                f"(built with CUDA {torch.version.cuda})")
    try:
        from torch.utils._triton import has_triton_package
    except Exception as e:  # noqa: BLE001 — any import failure means "not here"
        return f"inductor on CUDA needs Triton: {e}"
    if not has_triton_package():
        return "inductor on CUDA generates Triton kernels, but the triton package is not installed"
    major, minor = torch.cuda.get_device_capability()
    if major < 7:
        return f"inductor's Triton backend needs compute capability >= 7.0; this GPU has {major}.{minor}"
    return ""


def compile_options(device: str, mode: str) -> dict:
    """inductor options for (device, mode). torch.compile takes a mode or options, not both, so
    reduce-overhead is spelled as its options (`torch._inductor.list_mode_options`) plus
    `cudagraph_or_error`: a graph inductor cannot capture raises instead of quietly running
    without CUDA graphs under a name that promises them."""
    if device == "cpu":
        return dict(COMPILE_OPTIONS)  # on small CPU boxes a worker pool costs more than it saves
    if mode == "reduce-overhead":
        import torch._inductor

        return {**torch._inductor.list_mode_options(mode), "triton.cudagraph_or_error": True}
    return {}


def own_code(fn: Callable, name: str) -> Callable:
    """A copy of fn with a distinct code object (dynamo caches and limits are per code object)."""
    code = fn.__code__.replace(co_name=name)
    return types.FunctionType(code, fn.__globals__, name, fn.__defaults__, fn.__closure__)


def _compile(key: tuple, build: Callable[[], Callable], device: str, mode: str) -> Callable:
    key = (device, mode, *key)
    if key not in _COMPILED:
        fn = own_code(build(), f"lrkv_compiled_{len(_COMPILED)}")
        _COMPILED[key] = torch.compile(fn, dynamic=False, fullgraph=True, options=compile_options(device, mode))
    return _COMPILED[key]


def compiled_count() -> int:
    """How many compiled callables exist in this process (tests use it to check reuse)."""
    return len(_COMPILED)


def _mark_length_dynamic(tensors) -> None:
    for t in tensors:
        if t is not None and t.shape[1] >= 2:  # dynamo always specialises sizes 0 and 1
            torch._dynamo.mark_dynamic(t, 1)


class _GraphThread:
    """One long-lived daemon thread that runs every CUDA-graph call, in order.

    cudagraph trees keep their state (memory pool, recorded graphs) per thread, and the
    harness calls a backend from a fresh worker thread per case: without this, every case
    would start a new tree. A daemon thread (not a ThreadPoolExecutor, whose threads are
    joined at exit) so that a call the harness abandoned as hung cannot stop the process.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        threading.Thread(target=self._serve, name="lrkv-cudagraphs", daemon=True).start()

    def _serve(self) -> None:
        while True:
            fn, box, done = self._jobs.get()
            try:
                box["value"] = fn()
            except BaseException as e:  # noqa: BLE001 — re-raised in the caller's thread
                box["error"] = e
            done.set()

    def call(self, fn: Callable[[], object]):
        box: dict[str, object] = {}
        done = threading.Event()
        self._jobs.put((fn, box, done))
        done.wait()
        if "error" in box:
            raise box["error"]  # type: ignore[misc]
        return box["value"]


def _on_graph_thread(fn: Callable[[], object]):
    with _GRAPH_THREAD_LOCK:
        if not _GRAPH_THREAD:
            _GRAPH_THREAD.append(_GraphThread())
    return _GRAPH_THREAD[0].call(fn)


def _run(fn: Callable, *args, mode: str = "default"):
    if mode != "reduce-overhead":
        with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
            return fn(*args)

    def replayed():
        skips = counters["inductor"]["cudagraph_skips"]
        with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
            for _ in range(CUDA_GRAPH_CALLS):
                torch.compiler.cudagraph_mark_step_begin()  # a new iteration: earlier outputs may be reused
                out = fn(*args)
        if counters["inductor"]["cudagraph_skips"] > skips:  # a skip path that cudagraph_or_error missed
            raise RuntimeError("inductor skipped CUDA graphs for this graph (see the torch._inductor "
                               "cudagraphs log); mode='reduce-overhead' would not have run them")
        return tree_map(lambda t: t.clone() if isinstance(t, torch.Tensor) else t, out)
    return _on_graph_thread(replayed)


# ----------------------------------------------------------------------------- kernel level
def _kernel_builder(scale: float, rope) -> Callable[[], Callable]:
    def build():
        def lrkv_kernel(q, *tensors):  # the graph's inputs: q, the four parts, bases, lengths, key_scale
            *parts, basis_k, basis_v, lengths, key_scale = tensors
            return attend(q, FactoredCache(*parts, lengths, key_scale), basis_k, basis_v, scale=scale, rope=rope)
        return lrkv_kernel
    return build


def compiled_decode(q, cache: FactoredCache, basis_k, basis_v, *, scale: float, rope=None, device: str = "cpu",
                    mode: str = "default"):
    """The decode contract through a compiled graph (inputs already validated and on `device`)."""
    B, H, d_h = q.shape
    T, r = cache.t_max, cache.latent_k.shape[3]
    key = ("kernel", q.dtype, B, H, d_h, r, cache.key_scale is not None, rope, float(scale), T < 2)
    fn = _compile(key, _kernel_builder(float(scale), rope), device, mode)
    # contiguous copies: a strided view would otherwise cost a recompile (strides are guarded)
    args = [None if t is None else t.contiguous() for t in
            (q, *cache.parts, basis_k, basis_v, cache.lengths, cache.key_scale)]
    _mark_length_dynamic(args[1:5] + args[8:])
    return _run(fn, *args, mode=mode)


# ----------------------------------------------------------------------------- layer level
def _projection_builder(spec) -> Callable[[], Callable]:
    def build():
        def lrkv_project(w, x_t, positions):
            return project_token(LRKVWeights(spec, **w), x_t, positions)
        return lrkv_project
    return build


def compiled_layer_step(weights: LRKVWeights, x_t, cache: FactoredCache, positions, *,
                        device: str = "cpu", mode: str = "default"):
    """layer_step as two compiled graphs with the append between them (all on `device`).

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
    fn = _compile(("project", x_t.dtype, spec, cache.batch), _projection_builder(spec), device, mode)
    w = {name: t for name, t in vars(weights).items() if name != "spec" and t is not None}
    entries = _run(fn, w, x_t.contiguous(), positions, mode=mode)
    append(cache, entries, positions)
    out, _ = compiled_decode(entries["q"], cache, weights.basis_k, weights.basis_v, scale=spec.head_dim ** -0.5,
                             rope=decode_rope(spec), device=device, mode=mode)
    return torch.einsum("bhd,hde->be", out, weights.w_o), cache
