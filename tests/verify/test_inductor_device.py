"""The inductor backend's device and mode (lrkv/verify/inductor.py, backends.InductorBackend).

Everything here runs without a GPU: device resolution, option checks, the CUDA-graph variant
reporting itself unavailable (never a CPU run under its name), which grid cases a CUDA
inductor claims, the device in the report, and the CPU path itself. The compiled CUDA runs
are in tests/verify/test_inductor_gpu.py (marker `gpu`).
"""

from __future__ import annotations

import threading

import jsonschema
import pytest
import torch

from lrkv.verify import inductor
from lrkv.verify.backend_registry import get_backend
from lrkv.verify.builtin_backends import InductorBackend
from lrkv.verify.case import Case
from lrkv.verify.grids import BASE, default_grid
from lrkv.verify.tolerance_report import build_report, render_markdown, validate_report
from lrkv.verify.isolation import call_in_thread
from lrkv.verify.runner import backend_info, not_applicable, run
from lrkv.verify.tolerance import load_policy
from lrkv.verify.selection import Selection

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="checks what happens on a machine without CUDA")
HALF = ("bfloat16", "float16")


@pytest.fixture
def fake_cuda(monkeypatch):
    """torch reports a CUDA device (nothing is run on it: only resolution and selection)."""
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)


@pytest.mark.parametrize("device,mode,cuda,want", [
    ("auto", "default", True, "cuda"),
    ("auto", "default", False, "cpu"),
    ("cpu", "default", True, "cpu"),
    ("cuda", "default", False, "cuda"),  # explicit: unavailable here, never a silent CPU run
    ("auto", "reduce-overhead", False, "cuda"),
    ("cuda", "reduce-overhead", True, "cuda"),
])
def test_resolve_device(device, mode, cuda, want):
    assert inductor.resolve_device(device, mode, cuda_available=cuda) == want


@pytest.mark.parametrize("kw,field", [
    (dict(device="tpu"), "device"),
    (dict(device="CUDA"), "device"),
    (dict(mode="max-autotune"), "mode"),
    (dict(mode=None), "mode"),
    (dict(device="cpu", mode="reduce-overhead"), "reduce-overhead"),
])
def test_bad_options_name_the_field(kw, field):
    with pytest.raises(ValueError, match=field):
        InductorBackend(**kw)


def test_names_and_dtypes_follow_device_and_mode(fake_cuda):
    auto = InductorBackend()
    assert (auto.name, auto.device) == ("inductor", "cuda")
    assert auto.dtypes == (torch.float64, torch.float32, torch.bfloat16, torch.float16)
    assert auto._mover(torch.device("cpu")) is not None  # harness inputs (CPU) go to the GPU
    cpu = InductorBackend(device="cpu")
    assert (cpu.name, cpu.device, cpu.dtypes) == ("inductor[cpu]", "cpu", (torch.float64, torch.float32))
    assert cpu._mover(torch.device("cpu")) is None  # ... and stay where they are on the CPU
    graphs = get_backend("inductor-cudagraphs")
    assert (graphs.name, graphs.device, graphs.mode) == ("inductor-cudagraphs", "cuda", "reduce-overhead")
    assert "reduce-overhead" in graphs.description and "cuda" in graphs.description


def test_compile_options():
    assert inductor.compile_options("cpu", "default") == {"compile_threads": 1}
    assert inductor.compile_options("cuda", "default") == {}
    ro = inductor.compile_options("cuda", "reduce-overhead")
    assert ro == {"triton.cudagraphs": True, "triton.cudagraph_or_error": True}
    for opts in (ro, {}):  # torch.compile checks option names when it is called
        torch.compile(lambda x: x + 1, fullgraph=True, options=opts)


@NO_CUDA
def test_cudagraphs_is_unavailable_without_cuda_and_skips_with_its_reason():
    b = get_backend("inductor-cudagraphs")
    ok, why = b.available()
    assert not ok
    assert "reduce-overhead" in why and "CUDA device" in why
    before = inductor.compiled_count()
    cases = [Case("kernel", BASE, "float32", (3, 2, 1), 3), Case("layer", BASE, "bfloat16", (1, 6, 11), 12)]
    recs = run(cases, [("inductor-cudagraphs", b)], load_policy())
    assert [r["status"] for r in recs] == ["skip", "skip"]
    assert all(r["reason"] == f"backend unavailable: {why}" for r in recs)
    assert inductor.compiled_count() == before  # nothing was compiled for the CPU under that name


@NO_CUDA
def test_explicit_cuda_is_unavailable_here():
    ok, why = InductorBackend(device="cuda").available()
    assert not ok and "CUDA device" in why and "reduce-overhead" not in why


def test_cuda_inductor_claims_the_half_precision_grid(fake_cuda):
    """`lrkv verify --backend inductor` on a CUDA machine: the grid has no device dimension
    (the harness draws on the CPU; the backend moves), so what changes is the dtypes it claims —
    every kernel/layer case at every dtype, where on the CPU the half cases are skips."""
    grid = [c for c in default_grid() if c.level in ("kernel", "layer", "layer-model")]
    fp8 = [c for c in grid if c.cache_fp8]  # inductor reads no fp8 cache, on any device
    grid = [c for c in grid if not c.cache_fp8]
    half = [c for c in grid if c.dtype in HALF]
    assert half and fp8
    cuda, cpu = InductorBackend(), InductorBackend(device="cpu")
    assert all(not_applicable(cuda, c).startswith(f"cache {c.cache_fp8} not supported") for c in fp8)
    assert [c.id for c in grid if not_applicable(cuda, c)] == []
    assert all(not_applicable(cpu, c).startswith(f"dtype {c.dtype} not supported") for c in half)
    assert [c.id for c in grid if c.dtype not in HALF and not_applicable(cpu, c)] == []
    # levels inductor does not implement stay skips on CUDA too
    paged = next(c for c in default_grid() if c.level == "kernel-paged")
    assert not_applicable(cuda, paged).startswith("not implemented")


def test_report_records_the_device():
    b = get_backend("inductor")
    info = backend_info(b, "inductor")
    assert info["device"] == b.device == ("cuda" if torch.cuda.is_available() else "cpu")
    assert "device" not in backend_info(get_backend("eager"), "eager")  # only device-generic backends say
    rep = build_report([], load_policy(), [info], selection=Selection("quick"))
    validate_report(rep)
    bad = dict(info, device=3)
    with pytest.raises(jsonschema.ValidationError, match="not of type 'string'"):
        validate_report(build_report([], load_policy(), [bad], selection=Selection("quick")))


@NO_CUDA
def test_cpu_path_kernel_and_layer_pass():
    """The CPU path is unchanged: compiled on the CPU, judged by the rule, device in the report."""
    b = get_backend("inductor")
    assert b.device == "cpu"
    cases = [Case("kernel", BASE, "float32", (10, 33, 2), 40), Case("layer", BASE, "float32", (1, 6, 11), 12)]
    recs = run(cases, [("inductor", b)], load_policy())
    assert [r["status"] for r in recs] == ["pass", "pass"], [r["reason"] for r in recs]
    rep = build_report(recs, load_policy(), [backend_info(b, "inductor")],
                       selection=Selection("case", cases=tuple(cases)))
    validate_report(rep)
    assert "| inductor · cpu |" in render_markdown(rep)


def test_cuda_graph_calls_run_on_one_thread_and_return_copies():
    """reduce-overhead: each call runs the graph CUDA_GRAPH_CALLS times (warm-up, record,
    replay) on ONE thread, whichever harness worker thread asked, and returns copies of the
    outputs (a replay's live in static buffers the next replay overwrites)."""
    seen, static = [], torch.zeros(3)  # static: the graph's output buffer, reused by every replay

    def graph(x):
        seen.append(threading.current_thread().name)
        return {"y": static.copy_(x * 2)}

    x = torch.ones(3)
    outs = [call_in_thread(lambda: inductor._run(graph, x, mode="reduce-overhead"), 30) for _ in range(2)]
    assert seen == ["lrkv-cudagraphs"] * (2 * inductor.CUDA_GRAPH_CALLS)
    static.fill_(-1.0)  # the next replay overwrites the buffer ...
    assert all(torch.equal(o["y"], x * 2) for o in outs)  # ... the returned outputs keep their values
    with pytest.raises(ZeroDivisionError):  # an error in the graph thread reaches the caller
        inductor._run(lambda: 1 / 0, mode="reduce-overhead")


def test_a_graph_inductor_did_not_capture_is_an_error():
    """If inductor skips CUDA graphs anyway (a skip path cudagraph_or_error does not cover),
    the call fails: `inductor-cudagraphs` must not report a run without graphs as its own."""
    from torch._dynamo.utils import counters

    def skipped(x):
        counters["inductor"]["cudagraph_skips"] += 1
        return x

    with pytest.raises(RuntimeError, match="skipped CUDA graphs"):
        inductor._run(skipped, torch.ones(1), mode="reduce-overhead")
    assert inductor._run(skipped, torch.ones(1)) is not None  # the default mode promises no graphs


@NO_CUDA
def test_moved_inputs_come_back_with_the_cache_updated(monkeypatch):
    """The path CUDA takes — inputs copied to the device, outputs and the updated cache copied
    back — run on the CPU with a copy standing in for the move: token-by-token decoding
    (layer-model) only passes if every step's cache reaches the caller."""
    b = InductorBackend(device="cpu")
    moves = []

    def mover(home):
        return lambda t: t if t is None else moves.append(1) or t.clone()

    monkeypatch.setattr(b, "_mover", mover)
    cases = [Case("kernel", BASE, "float32", (10, 33, 2), 40), Case("layer-model", BASE, "float32", (8, 8, 8), 8)]
    # in this process: the patched mover cannot be pickled, and a forked worker's appends
    # to `moves` would not reach this test
    recs = run(cases, [("inductor", b)], load_policy(), isolation="inprocess")
    assert [r["status"] for r in recs] == ["pass", "pass"], [r["reason"] for r in recs]
    assert moves  # the copying path ran
