"""GPU-only checks of the inductor backend on CUDA (inductor generating its own Triton):
the compiled decode and layer step at float64/float32/bfloat16/float16, with and without CUDA
graphs (mode='reduce-overhead'), pass the rule (`judge_record`, through the runner) against
the float64 oracle, and new cache lengths do not recompile. Skipped with a reason on a
machine without CUDA (tests/verify/test_inductor_device.py covers resolution and selection there).
Small: about 18 compiles in all, for ci/gpu-check's "other GPU tests" step.
"""

from __future__ import annotations

import pytest
import torch

from lrkv.verify.builtin_backends import InductorBackend
from lrkv.verify.case import Case
from lrkv.verify.levels.kernel import make_kernel_inputs
from lrkv.verify.grids import BASE, QKN_EXACT
from lrkv.verify.runner import run
from lrkv.verify.tolerance import load_policy

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device (inductor emits Triton for it)"),
]

MODES = ("default", "reduce-overhead")
DTYPES = ("float32", "bfloat16", "float16")


def _backend(mode: str) -> InductorBackend:
    b = InductorBackend(device="cuda", mode=mode)
    ok, why = b.available()
    if not ok:
        pytest.skip(why)
    return b


def _judge(b: InductorBackend, cases: list[Case]) -> list[dict]:
    recs = run(cases, [(b.name, b)], load_policy())
    for r in recs:
        assert r["status"] == "pass", f"{r['id']}: {r['status']} {r['reason']}"
    return recs


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("dtype", DTYPES)
def test_decode_and_layer_step_pass_the_rule(mode, dtype):
    # exact RoPE and key_scale inside the graph, an empty and a one-token row; the layer step's
    # decode has the kernel case's static shape, so each (dtype, mode) costs two compiles
    _judge(_backend(mode), [Case("kernel", QKN_EXACT, dtype, (0, 33, 1), 40),
                            Case("layer", QKN_EXACT, dtype, (3, 8, 5), 10)])


@pytest.mark.parametrize("mode", MODES)
def test_float64_decode_passes_the_float64_bound(mode):
    """float64: inductor's Triton computes in float64 too; held to the float64 rounding bound
    and, on this tiny shape, the mpmath oracle."""
    _judge(_backend(mode), [Case("kernel", QKN_EXACT, "float64", (4, 1, 3), 4),
                            Case("layer", QKN_EXACT, "float64", (3, 8, 5), 10)])


@pytest.mark.parametrize("mode", MODES)
def test_new_lengths_do_not_recompile(mode):
    from torch._dynamo.utils import counters

    b = _backend(mode)
    _judge(b, [Case("kernel", BASE, "bfloat16", (3, 2, 1), 3)])  # compiled here (or earlier)
    graphs, skips = counters["stats"]["unique_graphs"], counters["inductor"]["cudagraph_skips"]
    _judge(b, [Case("kernel", BASE, "bfloat16", (t, 2, t - 1), t, seed=t) for t in (5, 17, 33, 300)])
    assert counters["stats"]["unique_graphs"] == graphs
    assert counters["inductor"]["cudagraph_skips"] == skips


@pytest.mark.parametrize("mode", MODES)
def test_inputs_already_on_the_gpu_stay_there(mode):
    b = _backend(mode)
    case = Case("kernel", BASE, "bfloat16", (10, 33, 2), 40)
    inp = make_kernel_inputs(case)
    on_cpu = inp.call(b.decode_attention)
    cuda = inp.map(lambda t: t.cuda())
    cuda.cache.lengths = inp.cache.lengths.cuda()
    out, lse = cuda.call(b.decode_attention)
    assert out.device.type == "cuda" and lse.device.type == "cuda"
    assert torch.equal(out.cpu(), on_cpu[0]) and torch.equal(lse.cpu(), on_cpu[1])  # the same graph ran
