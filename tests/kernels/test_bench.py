"""`lrkv bench`'s GPU-only code paths, on CPU through Triton's interpreter (tiny shapes,
timings meaningless): the Triton rows (contiguous, paged at page 16, exact RoPE) through the
runner, their outputs against each other and the float64 oracle, the launch-shape sweep and
its CLI, and the exit codes when neither a GPU nor the interpreter is there. The numbers
come from `ci/gpu-check` on a GPU."""

from __future__ import annotations

import inspect
import json

import pytest
import torch

from lrkv.bench import sweep as sweep_mod
from lrkv.bench.backends import TritonSteps
from lrkv.bench.families import FAMILIES, make_inputs, reference_step, step_args
from lrkv.bench.grid import BenchGrid
from lrkv.bench.runner import RunOptions, run_bench
from lrkv.kernels import runtime
from lrkv.kernels.decode import attend
from lrkv.kernels.triton_backend import LAUNCH_OPTIONS
from lrkv.spec import PAPER_SCALES, PaperScale

pytestmark = pytest.mark.own_kernel_mode  # the interpreter per test, or none at all
# On a CUDA machine the kernel runs natively and ci/gpu-check times it for real: the
# interpreter runs of this file are for machines without one.
on_cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: ci/gpu-check runs these natively")

TINY = PaperScale("tiny", 4, 16, 64, None, 3, 2, 12, "test scale")  # H=4, d_h=16, r=3
F32 = dict(rtol=2e-5, atol=2e-5)


@pytest.fixture
def tiny_scale(monkeypatch):
    monkeypatch.setitem(PAPER_SCALES, "tiny", TINY)
    return "tiny"


@on_cpu_only
def test_triton_variants_agree_with_the_oracle():
    """The paged copy (random page order, page 16) and the contiguous cache give the same
    output; exact RoPE gives the RoPE oracle's — so the three rows time the same math."""
    from lrkv.reference.lrkv import decode_attention as ref_decode
    from lrkv.reference.rope import ExactRope

    spec = FAMILIES["lrkv"].spec(TINY)
    inp = make_inputs(spec, 2, 40, dtype=torch.float32, seed=3)  # 40 slots: the last page is partial
    args64 = [t.double() if t.is_floating_point() else t for t in step_args(FAMILIES["lrkv"], inp)]
    with runtime.interpreter():
        outs = {v: TritonSteps(v).prepare(FAMILIES["lrkv"], spec, inp, "cpu").call() for v in TritonSteps.VARIANTS}
    ref = reference_step(FAMILIES["lrkv"])(*args64, spec.scale)
    ref_rope = ref_decode(*args64, scale=spec.scale, rope=ExactRope(), check=False)
    torch.testing.assert_close(outs["contiguous"][0].double(), ref[0], **F32)
    torch.testing.assert_close(outs["paged"][0], outs["contiguous"][0], **F32)
    torch.testing.assert_close(outs["rope"][0].double(), ref_rope[0], **F32)
    assert not torch.allclose(outs["rope"][0], outs["contiguous"][0])  # RoPE is really applied


@on_cpu_only
def test_runner_times_the_triton_rows_in_the_interpreter(tiny_scale):
    grid = BenchGrid("t", (tiny_scale,), (2,), (32,), families=("mha", "lrkv"), rounds=1)
    opts = RunOptions(backends=["eager", "triton", "triton-paged", "triton-rope"], measure_machine=False,
                      min_sample_s=1e-4, threads=1)
    with runtime.interpreter():
        result = run_bench(grid, opts)
    rows = {(r.family, r.backend): r for r in result.rows}
    assert set(rows) == {("mha", "eager"), ("lrkv", "eager"), ("lrkv", "triton"), ("lrkv", "triton-paged"),
                         ("lrkv", "triton-rope")}  # the kernel has no MHA row
    for b in ("triton", "triton-paged", "triton-rope"):
        r = rows["lrkv", b]
        assert r.status == "ok" and r.time_s > 0 and "interpreter" in r.note, (b, r.reason)
        assert r.launch["num_splits"] >= 1 and r.launch["group_size"] <= TINY.n_heads
        assert r.target is None  # CPU rows are not judged by the GPU targets
    assert rows["lrkv", "triton-paged"].bytes_total == rows["lrkv", "triton"].bytes_total


def test_sweep_points_cover_the_kernels_launch_knobs():
    knobs = sweep_mod.KNOBS
    params = inspect.signature(attend).parameters  # the one wrapper; the public entries pass **launch to it
    assert set(knobs) <= set(LAUNCH_OPTIONS) <= set(params)  # every swept knob is a launch option of the kernel
    pts = sweep_mod.sweep_points(dict(block_t=(16, 32), num_warps=(4,), group_size=(2, 9, 18), private=("wide",),
                                      programs_per_sm=(2,)), n_heads=4)
    assert {p["group_size"] for p in pts} == {2, 4}  # 9 and 18 clamp to H = 4, once
    assert len(pts) == 4 and all(set(p) == set(knobs) for p in pts)


@on_cpu_only
def test_sweep_in_the_interpreter(monkeypatch):
    values = dict(block_t=(16, 32), num_warps=(4,), group_size=(2, 4), private=("wide", "per_head"),
                  programs_per_sm=(1,))
    real_prepare = TritonSteps.prepare

    def flaky(self, *a, **kw):  # one launch shape fails: recorded as an error point, the sweep goes on
        if self.launch.get("block_t") == 32 and self.launch.get("group_size") == 2:
            raise RuntimeError("out of resources (test)")
        return real_prepare(self, *a, **kw)

    monkeypatch.setattr(TritonSteps, "prepare", flaky)
    with runtime.interpreter():
        sw = sweep_mod.run_sweep(TINY, 1, 32, device="cpu", dtype=torch.float32, copy_bandwidth=1e9, values=values)
    statuses = [p["status"] for p in sw["points"]]
    n_extra = 2  # private: wide and per_head
    assert len(statuses) == 4 * n_extra
    assert statuses.count("error") == n_extra and "out of resources" in sw["points"][statuses.index("error")]["reason"]
    ok = [p for p in sw["points"] if p["status"] == "ok"]
    assert ok and all(p["time_s"] > 0 and p["bandwidth_frac"] == pytest.approx(p["bandwidth"] / 1e9) for p in ok)
    assert all(p["launch"]["block_t"] == p["knobs"]["block_t"] for p in ok)
    assert sw["best"] in [p["knobs"] for p in ok]
    md = sweep_mod.sweep_markdown(sw)
    assert "Launch-shape sweep" in md and md.count("\n| ") == len(ok) + 1 and f"{n_extra} point(s) not timed" in md
    skipped = sweep_mod.run_sweep(TINY, 1, 32, device="cpu", dtype=torch.float32, copy_bandwidth=None,
                                  values=values, budget_s=0.0)
    assert {p["status"] for p in skipped["points"]} == {"skipped"} and skipped["best"] is None


@on_cpu_only
def test_cli_sweep_writes_json_and_markdown(tiny_scale, tmp_path):
    from lrkv.cli import main

    with runtime.interpreter():
        rc = main(["bench", "--sweep", "--device", "cpu", "--scales", tiny_scale, "--batch", "1", "--seq-lens", "32",
                   "--out", str(tmp_path), "--no-progress", "--budget-s", "60", "--sweep-knob", "block_t=16,32",
                   "--sweep-knob", "num_warps=4", "--sweep-knob", "private=wide", "--sweep-knob", "programs_per_sm=2"])
    assert rc == 0
    saved = json.loads((tmp_path / "bench.json").read_text())
    assert saved["rows"] == [] and saved["sweep"]["spec"].startswith("lrkv-H4-dh16-r3") and saved["sweep"]["points"]
    assert saved["machine"]["copy_bandwidth"] > 0
    assert [p["knobs"]["block_t"] for p in saved["sweep"]["points"]] == [16, 32]  # --sweep-knob took effect
    assert saved["sweep"]["values"]["group_size"] == [6, 9, 18]  # the knobs not named keep their defaults
    assert "Launch-shape sweep" in (tmp_path / "bench.md").read_text()


def test_cli_sweep_bad_knob_exits_2(tmp_path, capsys):
    """Bad --sweep-knob values are refused, naming the option, before any device check or timing."""
    from lrkv.bench.sweep import parse_knob
    from lrkv.cli import main

    assert parse_knob("block_t=32, 64") == ("block_t", (32, 64))
    assert parse_knob("private=wide,per_head") == ("private", ("wide", "per_head"))
    for bad, words in (("tile=16", "NAME=V1,V2"), ("block_t=", "no values"), ("num_warps=4,x", "integers"),
                       ("programs_per_sm=0", ">= 1"), ("private=narrow", "private")):
        with pytest.raises(ValueError, match="--sweep-knob"):
            parse_knob(bad)
        assert main(["bench", "--sweep", "--device", "cpu", "--sweep-knob", bad, "--out", str(tmp_path)]) == 2
        assert words in capsys.readouterr().out
    assert main(["bench", "--sweep-knob", "block_t=16", "--out", str(tmp_path)]) == 2  # without --sweep
    assert "only with --sweep" in capsys.readouterr().out


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: the GPU paths run for real")
def test_cli_without_gpu_or_interpreter_exits_3(tmp_path, capsys):
    from lrkv.cli import main

    if runtime.mode()[0] == "interpreter":
        pytest.skip("TRITON_INTERPRET=1 is set: the CPU sweep would run")
    assert main(["bench", "--device", "cuda", "--out", str(tmp_path), "--no-progress"]) == 3
    assert main(["bench", "--sweep", "--device", "cuda", "--out", str(tmp_path)]) == 3
    assert main(["bench", "--sweep", "--device", "cpu", "--out", str(tmp_path)]) == 3
    assert "TRITON_INTERPRET=1" in capsys.readouterr().out


def test_recorded_launch_shape_is_the_variants_own(monkeypatch):
    # The row records the launch shape the kernel picks for THAT variant: exact RoPE picks its
    # own (per-head) shape on a GPU, so the rope row must ask pick_launch with rope_exact.
    from lrkv.kernels import decode as decode_mod
    from lrkv.kernels import launch

    monkeypatch.setattr(launch, "num_sms", lambda device: 132)
    monkeypatch.setattr(launch.runtime, "is_interpreted", lambda: False)
    monkeypatch.setattr(launch, "triton_before_tier", lambda: False)  # the current Triton's table
    spec = PAPER_SCALES["2.5B"].spec("lrkv")
    inputs = dict(q=torch.empty(8, spec.n_heads, spec.head_dim, dtype=torch.bfloat16, device="meta"),
                  shared_k=torch.empty(8, 32768, spec.head_dim, dtype=torch.bfloat16, device="meta"))
    real = decode_mod.pick_launch

    asked = []

    def as_if_cuda(**kw):  # the inputs are on "meta": decide as a CUDA run would
        asked.append(kw["rope_exact"])
        return real(**{**kw, "device": torch.device("cuda")})

    monkeypatch.setattr(decode_mod, "pick_launch", as_if_cuda)
    plain = TritonSteps().launch_config(inputs, spec)
    rope = TritonSteps("rope").launch_config(inputs, spec)
    assert asked == [False, True]  # each row asks for its own variant's launch
    assert (plain["private"], plain["block_t"], plain["num_warps"]) == ("per_head", 32, 16)
    assert (rope["private"], rope["block_t"], rope["num_warps"]) == ("per_head", 16, 16)
