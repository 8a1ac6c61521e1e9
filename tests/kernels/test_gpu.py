"""GPU-only checks: the kernels compiled natively at realistic sizes, and the custom op
inside torch.compile. Skipped with a reason on a machine without CUDA (the interpreter
tests in tests/kernels/ cover the same math there). Inputs are the harness's Cases, judged
by the harness's rule."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from lrkv.kernels import runtime
from lrkv.kernels.decode import decode_attention, paged_decode_attention
from lrkv.kernels.extend import extend_attention
from lrkv.kernels.launch import DOT_MODES, pick_launch
from lrkv.kernels.testing import assert_passes, check, kernel_case, kernel_inputs

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (the kernels run natively)"),
]


@pytest.fixture(autouse=True)
def _native():
    if runtime.mode()[0] != "cuda":
        pytest.skip(f"kernels are not in CUDA mode here: {runtime.mode()[1]}")


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("H,r", [(18, 55), (32, 54)])
def test_native_benchmark_shapes(dtype, H, r):
    case = kernel_case(H=H, d_h=128, r=r, lengths=[2048, 1333, 1], dtype=dtype, seed=50, key_scale=True)
    check(decode_attention, case)


@pytest.mark.parametrize("private", ["wide", "per_head"])
@pytest.mark.parametrize("H,r", [(18, 55), (32, 54)])
def test_native_private_paths_agree(H, r, private):
    # both private-stream paths natively at the paper scales, bf16 (16-bit tensor-core dots)
    case = kernel_case(H=H, d_h=128, r=r, lengths=[4096, 2999], dtype=torch.bfloat16, seed=53, key_scale=True)
    check(decode_attention, case, private=private)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
def test_native_tight_exact_rope(dtype):
    case = kernel_case(H=6, d_h=64, r=12, lengths=[700, 333], dtype=dtype, seed=51, rope="exact", key_scale=True)
    check(decode_attention, case)


@pytest.mark.parametrize("dtype,fmt,gran", [
    (torch.bfloat16, "float8_e4m3fn", "per_head"), (torch.float16, "float8_e5m2", "per_tensor"),
    (torch.bfloat16, "float8_e4m3fn", "per_token_head"),
], ids=["bf16-e4m3-per_head", "fp16-e5m2-per_tensor", "bf16-e4m3-per_token_head"])
def test_native_fp8_cache_at_the_paper_scale(dtype, fmt, gran):
    # an fp8 cache natively: its tiles converted to q's dtype for the 16-bit tensor-core
    # products, the wide path at its fp8 group (5 x 4 at H = 18), outlier tokens and channels
    case = kernel_case(H=18, d_h=128, r=55, lengths=[2048, 1333, 1], dtype=dtype, seed=54, cache_format=fmt,
                       scale_granularity=gran, outliers=True)
    check(decode_attention, case)


@pytest.mark.parametrize("fmt,gran,level", [
    ("float8_e5m2", "per_token", "kernel-paged"), ("float8_e4m3fn", "per_head", "kernel-paged"),
    ("float8_e4m3fn", "per_head", "kernel-extend"), ("float8_e5m2", "per_token_head", "kernel-extend"),
])
def test_native_fp8_paged_and_extend_at_the_paper_scale(fmt, gran, level):
    # both fp8 formats through the paged and extend contracts natively, at H 32 / r 54
    knobs = dict(n_new=(4, 1)) if level == "kernel-extend" else {}
    case = kernel_case(level=level, page_size=16, H=32, d_h=128, r=54, lengths=[2100, 900], dtype=torch.bfloat16,
                       seed=60, cache_format=fmt, scale_granularity=gran, outliers=True, **knobs)
    check(extend_attention if level == "kernel-extend" else paged_decode_attention, case)


def test_native_fp8_paged_per_token():
    case = kernel_case(level="kernel-paged", page_size=16, H=18, d_h=128, r=55, lengths=[3000, 1500],
                       dtype=torch.bfloat16, seed=55, cache_format="float8_e4m3fn", scale_granularity="per_token",
                       shared_prefix=32)
    check(paged_decode_attention, case)


def test_native_auto_splits_and_paged():
    B, T = 2, 8192
    cfg = pick_launch(B=B, H=18, d_h=128, r=55, slots=T, dtype=torch.bfloat16, device=torch.device("cuda"))
    assert cfg.num_splits > 1, "a long sequence at batch 2 must be split to fill the GPU"
    case = kernel_case(level="kernel-paged", page_size=16, H=18, d_h=128, r=55, lengths=[T, 5000],
                       dtype=torch.bfloat16, seed=52, rope="exact")
    check(paged_decode_attention, case)


def test_torch_compile_sees_the_triton_op():
    # The triton_op has no data-dependent Python, so it traces with fullgraph=True; the
    # wrapper's validation (which reads lengths) stays outside the compiled region.
    inp = kernel_inputs(kernel_case(H=18, d_h=128, r=55, lengths=[300, 77], dtype=torch.bfloat16, seed=53))
    cfg = pick_launch(B=2, H=18, d_h=128, r=55, slots=300, dtype=torch.bfloat16, device=torch.device("cuda"))

    def step(q, sk, sv, lk, lv, bk, bv, lengths):
        out, lse = torch.ops.lrkv.factored_decode(
            q, sk, sv, lk, lv, bk, bv, lengths, None, None, None, inp.scale, cfg.num_splits,
            cfg.split_size, cfg.group_size, cfg.block_t, cfg.num_warps, DOT_MODES[cfg.dot])
        return out.float() * 2.0, lse  # something for inductor to fuse around the op

    eager = step(*inp.args())
    compiled = torch.compile(step, fullgraph=True)(*inp.args())
    # Inductor compiles the user kernel with its own Triton options (e.g. FP fusion), so the
    # compiled graph may round differently in the last bf16 place: same op, not same bits.
    torch.testing.assert_close(compiled[0], eager[0], rtol=1.6e-2, atol=1e-2)
    torch.testing.assert_close(compiled[1], eager[1], rtol=1.6e-2, atol=1e-2)


def _captured(args, kw, fn=decode_attention):
    """fn(*args, **kw) captured in a CUDA graph (warmed up outside the capture) and the
    outputs the graph writes."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        fn(*args, **kw)  # warm-up compiles outside the capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        outs = fn(*args, **kw)
    return g, outs


_GRAPH_CASES = {  # one per contract; the wide private path at the paper's smaller scale
    "decode": (decode_attention, dict(H=18, d_h=128, r=55, lengths=[1500, 700, 1], dtype=torch.bfloat16,
                                      seed=56, key_scale=True)),
    "paged": (paged_decode_attention, dict(level="kernel-paged", page_size=16, H=18, d_h=128, r=55,
                                           lengths=[1500, 700], dtype=torch.bfloat16, seed=57, rope="exact")),
    "extend": (extend_attention, dict(level="kernel-extend", n_new=(3, 1, 5), page_size=16, H=18, d_h=128, r=55,
                                      lengths=[900, 400, 64], dtype=torch.bfloat16, seed=58)),
}


@pytest.mark.parametrize("contract", sorted(_GRAPH_CASES))
def test_cuda_graph_replay_is_eager_bit_for_bit(contract):
    """FlashInfer's decode test: the graph's output buffers are refilled with NaN between capture
    and replay, so a replay that writes nothing (or part of a row) cannot pass on stale values;
    the replay must equal eager exactly, since the same kernels run on the same inputs."""
    fn, shape = _GRAPH_CASES[contract]
    case = kernel_case(**shape)
    inp = kernel_inputs(case)
    kw = dict(inp.kwargs(), check=False)
    eager = fn(*inp.args(), **kw)
    assert_passes(case, out=eager[0], lse=eager[1])
    g, outs = _captured(inp.args(), kw, fn)
    for t in outs:
        t.fill_(float("nan"))
    g.replay()
    torch.cuda.synchronize()
    for name, got, want in zip(("out", "lse"), outs, eager):
        assert torch.equal(got, want), f"{contract}: the replayed {name} differs from eager"


POOL_ELEMENTS = 2**31 + 2**21  # past int32: a page offset computed in 32 bits wraps


def test_page_pool_past_int32_with_pages_at_its_end():
    """FlashInfer and vLLM test tens of thousands of blocks: here one pool tensor holds more than
    2^31 elements and the sequences' pages are its last ones, so `page * page_stride` only lands
    on them in 64-bit arithmetic. Same pages, same launch: the answer must be bit-identical to
    the one from the small pool, which passes the harness's rule."""
    case = kernel_case(level="kernel-paged", page_size=16, H=8, d_h=128, r=16, lengths=[700, 300],
                       dtype=torch.bfloat16, seed=59)
    small = kernel_inputs(case)
    want = check(paged_decode_attention, case, small)
    p_small = small.cache.shared_k.shape[0]
    p_big = -(-POOL_ELEMENTS // small.cache.shared_k[0].numel()) + p_small
    big = {}
    for name in ("shared_k", "shared_v", "latent_k", "latent_v"):
        t = getattr(small.cache, name)
        pool = torch.full((p_big, *t.shape[1:]), float("nan"), dtype=t.dtype, device=t.device)
        pool[p_big - p_small:] = t  # the small pool's pages, moved to the end
        big[name] = pool
    assert big["shared_k"].numel() > 2**31 and big["latent_k"].numel() > 2**31
    moved = replace(small, cache=replace(small.cache, page_table=small.cache.page_table + (p_big - p_small), **big))
    assert int(moved.cache.page_table.max()) * big["shared_k"][0].numel() > 2**31 - 1
    got = moved.call(paged_decode_attention)
    del big, moved
    for name, g, w in zip(("out", "lse"), got, want):
        assert torch.equal(g, w), f"{name} differs when the same pages sit past 2^31 elements"


def test_cuda_graph_capture():
    # a serving loop replays decode in a CUDA graph: no host sync inside the op
    inp = kernel_inputs(kernel_case(H=8, d_h=64, r=16, lengths=[256, 100], dtype=torch.bfloat16, seed=54))
    args = inp.args()
    kw = dict(scale=inp.scale, num_splits=4, check=False)
    ref, _ = decode_attention(*args, **kw)
    g, (out, _) = _captured(args, kw)
    g.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(out, ref, rtol=0, atol=0)


def test_cuda_graph_replays_new_data_and_lengths():
    """A captured decode replayed after the server writes the next step into the SAME buffers —
    new values and new lengths — gives that step's answer, not the captured one (the stale-replay
    bug a graph keyed by pointer has)."""
    first = kernel_inputs(kernel_case(H=8, d_h=64, r=16, lengths=[256, 100], dtype=torch.bfloat16, seed=54))
    second = kernel_inputs(kernel_case(H=8, d_h=64, r=16, lengths=[97, 256], t_max=256, dtype=torch.bfloat16,
                                       seed=55))
    args = first.args()
    kw = dict(scale=first.scale, num_splits=4, check=False)
    g, (out, lse) = _captured(args, kw)
    for dst, src in zip(args, second.args()):
        if isinstance(dst, torch.Tensor):
            dst.copy_(src)  # same storage, new data
    g.replay()
    torch.cuda.synchronize()
    ref_out, ref_lse = decode_attention(*second.args(), **kw)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=0)
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=0)

