"""The benchmark's machinery (lrkv.bench), on tiny shapes. No timing is judged here.

What is pinned down:
  * every benchmark step (time-major formulations) equals the float64 reference of its
    family — LRKV factored Eqs. 6–7, materialized, MHA/GQA/MQA (stream and GEMM paths), MLA,
    MLRA — with NaN garbage past the lengths, lengths 0/1/odd, T with and without the
    chunked time reduction; the inductor-compiled LRKV and MHA steps at float32 agree too,
    across two cache lengths with one compile;
  * the bytes a row reports equal the nbytes of the tensors the step reads;
  * timing: rounds interleave with rotation, ratios are per-round medians;
  * grids, targets (PASS/MISS logic of the CPU compiled-step target and the H200 speed
    targets, on synthetic rows), GQA at LRKV's bytes, the time budget, the roofline's closed forms, JSON round trip, the
    table/Markdown/plot renderers and the CLI on a saved result;
  * an end-to-end run of the runner on a tiny scale with the eager backend.
The whole file runs in well under a minute on two CPU cores (one compile per compiled test).
"""

from __future__ import annotations

import json

import pytest
import torch

from lrkv.bench import roofline
from lrkv.bench.backends import BACKEND_NAMES, GPU_BACKENDS, InductorSteps, SdpaSteps, TritonSteps, step_backends
from lrkv.bench.families import (
    CACHE_TENSORS, FAMILIES, equal_bytes_kv_heads, make_inputs, payload_ratio, read_bytes, reference_step, step_args,
    weight_elements,
)
from lrkv.bench.grid import CPU_FAMILIES, GRIDS, BenchGrid
from lrkv.bench.machine import Machine, cpu_model, describe_machine, measure_copy_bandwidth, measure_gemm_flops
from lrkv.bench.render import cells, footnotes, headline, markdown_table, rich_tables, targets_markdown
from lrkv.bench.result import BenchResult, BenchRow
from lrkv.bench.runner import RunOptions, run_bench
from lrkv.bench.steps import GEMM_MIN_HEADS, sum_over_time, time_chunks
from lrkv.bench.targets import GPU_RULES, check_targets
from lrkv.bench.timing import Samples, interleave, round_ratios
from lrkv.reference.masking import softmax_rows, valid_mask
from lrkv.spec import PAPER_SCALES, AttentionSpec, PaperScale, cache_ratio

TIGHT = dict(rtol=1e-10, atol=1e-10)  # float64, same sums in another order
F32 = dict(rtol=2e-5, atol=2e-5)  # float32 step vs float64 oracle, O(1) outputs, T <= 300
TINY = PaperScale("tiny", 4, 16, 64, None, 3, 2, 12, "test scale")  # H=4, d_h=16, r=3, n_kv=2, d_c=12
TINY_MQA_GEMM = PaperScale("tiny-g", GEMM_MIN_HEADS, 16, 128, None, 3, 1, 12, "H >= GEMM_MIN_HEADS")


def _spec(family, scale=TINY):
    fam = FAMILIES[family]
    if fam.spec_family == "mlra":  # a small MLRA-2 (L=4 latent heads of 8, 2 branches, 4-wide k_pe)
        return AttentionSpec.mlra(scale.n_heads, scale.head_dim, latent_dim=8, n_latent_heads=4, n_branches=2,
                                  rope_dim=4)
    return fam.spec(scale)


def _garbage_inputs(spec, T, lengths, dtype=torch.float64, seed=0):
    """Kernel-level inputs with NaN in every slot at or past a sequence's length."""
    inp = make_inputs(spec, len(lengths), T, dtype=dtype, lengths=lengths, seed=seed)
    valid = valid_mask(inp["lengths"], T)
    for name, t in inp.items():
        if name in CACHE_TENSORS and t is not None:
            inp[name] = torch.where(valid.reshape(*valid.shape, *([1] * (t.dim() - 2))), t, float("nan"))
    return inp


def _reference(family, inp, spec):
    fam = FAMILIES[family]
    args = tuple(t.double() if isinstance(t, torch.Tensor) and t.is_floating_point() else t
                 for t in step_args(fam, inp))
    return reference_step(fam)(*args, spec.scale)


# ----------------------------------------------------------------------------- steps == oracle
@pytest.mark.parametrize("family", list(FAMILIES))
@pytest.mark.parametrize("T,lengths", [(7, [7, 3, 0]), (16, [16, 1, 9]), (256, [256, 131, 1])])
def test_step_equals_float64_reference(family, T, lengths):
    """T=7: no time chunk divides it; 16: one level; 256: two levels (8 x 16)."""
    spec = _spec(family)
    inp = _garbage_inputs(spec, T, lengths)
    out, lse = FAMILIES[family].step(*step_args(FAMILIES[family], inp), spec.scale)
    ref_out, ref_lse = _reference(family, inp, spec)
    torch.testing.assert_close(out, ref_out, **TIGHT)
    torch.testing.assert_close(lse, ref_lse, **TIGHT)  # −inf for the empty sequence, on both sides
    assert torch.isfinite(out).all(), "NaN garbage past a length leaked into the output"


@pytest.mark.parametrize("family", ["mha", "gqa", "mqa"])
def test_dense_gemm_path_equals_reference(family):
    """At H >= GEMM_MIN_HEADS the MQA row takes the GEMM path; MHA/GQA still stream."""
    spec = _spec(family, TINY_MQA_GEMM)
    inp = _garbage_inputs(spec, 24, [24, 5])
    out, lse = FAMILIES[family].step(*step_args(FAMILIES[family], inp), spec.scale)
    ref_out, ref_lse = _reference(family, inp, spec)
    torch.testing.assert_close(out, ref_out, **TIGHT)
    torch.testing.assert_close(lse, ref_lse, **TIGHT)


@pytest.mark.parametrize("family", ["lrkv", "mha"])
def test_compiled_step_float32_matches_oracle_across_lengths(family):
    """The inductor-compiled step (float32, T marked dynamic) against the float64 oracle at two
    cache lengths — the second must reuse the first compile (no recompile past the limit)."""
    backend = InductorSteps()
    spec = _spec(family)
    fam = FAMILIES[family]
    for T, lengths in ((256, [256, 77]), (384, [384, 3])):
        inp = _garbage_inputs(spec, T, lengths, dtype=torch.float32, seed=T)
        with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True, recompile_limit=1):
            out, lse = backend.prepare(fam, spec, inp, "cpu").call()
        ref_out, ref_lse = _reference(family, inp, spec)
        torch.testing.assert_close(out.double(), ref_out, **F32)
        torch.testing.assert_close(lse.double(), ref_lse, **F32)
    assert len(backend._compiled) == 1  # one callable per (family, scale): T is dynamic


def test_sum_over_time_and_chunks():
    assert time_chunks(256) == (8, 16) and time_chunks(24) == (8,) and time_chunks(7) == ()
    for T in (1, 7, 8, 24, 128, 384):
        x = torch.randn(2, T, 3, 5, dtype=torch.float64)
        torch.testing.assert_close(sum_over_time(x), x.sum(1), **TIGHT)


def test_softmax_rows_empty_sequence():
    """The steps' masked softmax (the reference's): an empty sequence gives weights 0 and lse −inf."""
    logits = torch.randn(2, 3, 5, dtype=torch.float64)
    a, lse = softmax_rows(logits, valid_mask(torch.tensor([5, 0]), 5)[:, None, :])
    torch.testing.assert_close(a[0], torch.softmax(logits[0], -1), **TIGHT)
    assert (a[1] == 0).all() and torch.isneginf(lse[1]).all()


# ----------------------------------------------------------------------------- bytes
@pytest.mark.parametrize("family", list(FAMILIES))
def test_read_bytes_equal_the_tensors_the_step_reads(family):
    spec = _spec(family)
    B, T = 2, 24
    inp = make_inputs(spec, B, T, dtype=torch.float32)
    fam = FAMILIES[family]
    cache = sum(inp[n].nbytes for n in fam.arg_names if n in CACHE_TENSORS and inp[n] is not None)
    weights = sum(inp[n].nbytes for n in fam.arg_names if n not in CACHE_TENSORS and n not in ("q", "lengths"))
    nb = read_bytes(spec, B, T, torch.float32)
    assert nb["payload"] == cache and nb["weights"] == weights == weight_elements(spec) * 4
    assert nb["total"] == cache + weights


def test_payload_ratio_is_eq9_for_lrkv():
    for label, (H, r) in (("2.5B", (18, 55)), ("6.3B", (32, 54))):
        spec = FAMILIES["lrkv"].spec(PAPER_SCALES[label])
        assert (spec.n_heads, spec.rank) == (H, r)
        assert payload_ratio(spec) == pytest.approx(1 / H + r / 128)
        assert payload_ratio(spec) == float(cache_ratio(spec))


# ----------------------------------------------------------------------------- timing
def test_interleave_rotates_and_ratios_pair_rounds():
    calls = []
    samplers = {k: (lambda k=k: calls.append(k) or {"a": 2.0, "b": 1.0, "c": 4.0}[k]) for k in "abc"}
    samples = interleave(samplers, 3)
    assert calls == list("abc" "bca" "cab")
    assert samples["a"].values == [2.0, 2.0, 2.0]
    drift = Samples([1.0, 2.0, 4.0]), Samples([2.0, 4.0, 8.0])  # the machine slows down 4x; the ratio holds
    assert round_ratios(*drift) == 0.5 and drift[0].spread == pytest.approx(1.5)
    with pytest.raises(ValueError):
        interleave(samplers, 0)


# ----------------------------------------------------------------------------- grids
def test_grids():
    assert all(any(t >= 8192 for t in g.seq_lens) for g in GRIDS.values()), "the CPU target is stated at T >= 8K"
    for g in GRIDS.values():  # the GPU target: T >= 16K at B >= 8
        gpu = g.for_device("cuda")
        assert any(t >= 16384 for t in gpu.seq_lens) and any(b >= 8 for b in gpu.batches), g.name
    assert 131072 in GRIDS["full"].for_device("cuda").seq_lens
    assert 131072 not in GRIDS["full"].for_device("cpu").seq_lens
    assert GRIDS["quick"].shapes() == [("2.5B", 1, 1024), ("2.5B", 1, 8192)]
    for g in GRIDS.values():  # GQA at LRKV's bytes is a GPU target's peer; the CPU grids leave it out
        assert "gqa-eq" in g.for_device("cuda").families and g.for_device("cpu").families == CPU_FAMILIES
    with pytest.raises(ValueError, match="mha"):
        BenchGrid("x", ("2.5B",), (1,), (8,), families=("lrkv",))
    with pytest.raises(ValueError, match="unknown families"):
        BenchGrid("x", ("2.5B",), (1,), (8,), families=("mha", "flash"))


def test_step_backends():
    from lrkv.bench import bench_cli
    from lrkv.kernels import runtime

    assert [b.name for b in step_backends("cpu")] == ["inductor"]
    assert [b.name for b in step_backends("cuda")] == list(GPU_BACKENDS)
    assert GPU_BACKENDS == ("inductor", "triton", "triton-paged", "triton-rope", "sdpa")  # triton-fp8: when asked
    assert bench_cli.BACKEND_NAMES == BACKEND_NAMES  # the CLI's torch-free copy of the names
    with pytest.raises(ValueError, match="unknown bench backend"):
        step_backends("cpu", ["flash"])
    with pytest.raises(ValueError, match="variant"):
        TritonSteps("ragged")
    triton, paged, sdpa = step_backends("cpu", ["triton", "triton-paged", "sdpa"])
    assert (triton.variant, paged.variant) == ("contiguous", "paged")
    assert not sdpa.available("cpu")[0]  # GPU-only, with a reason
    # on a CPU the kernel runs in the interpreter only (a dry run of the code path), never "natively"
    ok, why = triton.available("cpu")
    assert ok == (runtime.mode()[0] == "interpreter") and (ok or "TRITON_INTERPRET" in why)
    assert triton.supports(FAMILIES["lrkv"])[0] and not triton.supports(FAMILIES["mha"])[0]
    assert sdpa.supports(FAMILIES["gqa"])[0] and not sdpa.supports(FAMILIES["mla"])[0]


def test_sdpa_step_matches_reference_on_full_caches():
    for family in ("mha", "gqa", "mqa"):
        spec = _spec(family)
        inp = make_inputs(spec, 2, 24, dtype=torch.float64)
        out = SdpaSteps().prepare(FAMILIES[family], spec, inp, "cpu").call()
        torch.testing.assert_close(out, _reference(family, inp, spec)[0], **TIGHT)
    partial = make_inputs(_spec("mha"), 2, 24, dtype=torch.float64, lengths=[24, 5])
    with pytest.raises(ValueError, match="full caches"):
        SdpaSteps().prepare(FAMILIES["mha"], _spec("mha"), partial, "cpu")


@pytest.mark.triton
def test_triton_step_runs_the_kernel():
    """The GPU row's code path, run in Triton's CPU interpreter: validated once, then the
    kernel with validation off, against the float64 oracle."""
    pytest.importorskip("triton")
    from lrkv.kernels import runtime

    spec = _spec("lrkv")
    inp = _garbage_inputs(spec, 32, [32, 7], dtype=torch.float32)
    with runtime.interpreter():
        out, lse = TritonSteps().prepare(FAMILIES["lrkv"], spec, inp, "cpu").call()
    ref_out, ref_lse = _reference("lrkv", inp, spec)
    torch.testing.assert_close(out.double(), ref_out, **F32)
    torch.testing.assert_close(lse.double(), ref_lse, **F32)


@pytest.mark.triton
def test_the_fp8_row_reads_the_cache_in_fp8_and_counts_its_bytes():
    """triton-fp8: the same kernel on the cache quantized once (untimed), against the float64
    oracle on that fp8 cache; its bytes are one per element plus the float32 scales, and its
    16-bit SDPA peer (gqa-eq8) has about those bytes."""
    pytest.importorskip("triton")
    from lrkv.bench.backends import FP8_FORMAT, FP8_GRANULARITY
    from lrkv.bench.families import equal_bytes_kv_heads, read_bytes
    from lrkv.kernels import runtime
    from lrkv.reference.fp8_cache import quantize_cache
    from lrkv.reference.lrkv import decode_attention
    from lrkv.spec import as_dtype, fp8_scale_bytes, preset

    spec = _spec("lrkv")
    inp = _garbage_inputs(spec, 32, [32, 7], dtype=torch.float32)
    step = TritonSteps("fp8")
    assert step.name == "triton-fp8" and step.cache == (FP8_FORMAT, FP8_GRANULARITY)
    with runtime.interpreter():
        out, lse = step.prepare(FAMILIES["lrkv"], spec, inp, "cpu").call()
    parts = {p: inp[p] for p in ("shared_k", "shared_v", "latent_k", "latent_v")}
    stored, scales = quantize_cache(parts, inp["lengths"], as_dtype(FP8_FORMAT), FP8_GRANULARITY)
    ref_out, ref_lse = decode_attention(inp["q"].double(), *(stored[p] for p in parts), inp["basis_k"].double(),
                                        inp["basis_v"].double(), inp["lengths"], scale=spec.scale,
                                        cache_scales=scales)
    torch.testing.assert_close(out.double(), ref_out, **F32)
    torch.testing.assert_close(lse.double(), ref_lse, **F32)
    full, fp8 = read_bytes(spec, 2, 32, torch.bfloat16), read_bytes(spec, 2, 32, torch.bfloat16, step.cache)
    assert fp8["payload"] == full["payload"] // 2 + fp8_scale_bytes(spec, FP8_GRANULARITY, tokens=64)
    n_kv, share = equal_bytes_kv_heads(spec, 0.5)
    assert FAMILIES["gqa-eq8"].spec(preset("2.5B")).n_kv_heads == equal_bytes_kv_heads(preset("2.5B").spec("lrkv"),
                                                                                         0.5)[0]
    assert 0.5 <= share <= 2.0 and spec.n_heads % n_kv == 0


# ----------------------------------------------------------------------------- targets
def _machine(**kw):
    base = dict(device="cpu", name="test CPU", cores=2, threads=1, isa="AVX2", llc_bytes=None, memory_bytes=None,
                torch="x", triton=None, python="3", platform="p", copy_bandwidth=10e9, peak_flops=50e9,
                flops_dtype="float32")
    return Machine(**{**base, **kw})


def _row(**kw):
    base = dict(scale="2.5B", family="lrkv", backend="inductor", device="cpu", dtype="float32", batch=1,
                seq_len=8192, spec="s", time_s=1e-3, vs_mha=0.5, mha_backend="inductor", payload_ratio=0.485,
                bytes_total=10**6, bandwidth=1e9, bandwidth_frac=0.1)
    return BenchRow(**{**base, **kw})


def test_cpu_target_pass_miss_and_scope():
    rows = [_row(vs_mha=0.55), _row(vs_mha=0.56), _row(seq_len=4096), _row(family="gqa"), _row(backend="eager",
            mha_backend="eager"), _row(status="error", time_s=None)]
    result = BenchResult(_machine(), {}, rows)
    check_targets(result)
    assert [r.target for r in rows] == ["PASS", "MISS", None, None, None, None]  # 1.15 x 0.485 = 0.5578
    assert "1.15" in rows[0].target_rule


def _gpu_shape(scale="2.5B", B=8, T=16384, *, lrkv=1.0, mha=2.0, gqa=1.0, paged=1.05, rope=1.5, frac=0.8,
               rounds=3):
    """Rows of one GPU shape with the given times (ms, every round alike)."""
    def row(family, backend, ms, **kw):
        return _row(scale=scale, family=family, backend=backend, device="cuda", dtype="bfloat16", batch=B,
                    seq_len=T, time_s=ms * 1e-3, samples_s=[ms * 1e-3] * rounds, **kw)

    return [row("lrkv", "triton", lrkv, bandwidth_frac=frac), row("mha", "sdpa", mha),
            row("gqa-eq", "sdpa", gqa), row("lrkv", "triton-paged", paged), row("lrkv", "triton-rope", rope)]


def _verdicts(rows):
    return {(r.backend, c["rule"]): c["verdict"] for r in rows for c in r.checks}


def test_h200_targets_pass():
    rows = _gpu_shape()
    checked = check_targets(BenchResult(_machine(device="cuda"), {}, rows))
    assert [r.backend for r in checked] == ["triton", "triton-paged", "triton-rope"]
    assert all(r.target == "PASS" for r in checked), [r.target_rule for r in checked]
    assert set(_verdicts(rows)) == {("triton", "bandwidth"), ("triton", "vs-mha"), ("triton", "vs-gqa"),
                                    ("triton-paged", "paged"), ("triton-rope", "rope")}
    assert "0.5 PASS" in rows[0].target_rule and "t/t_sdpa_mha <= 0.6" in rows[0].target_rule


@pytest.mark.parametrize("change,rule", [
    (dict(frac=0.74), ("triton", "bandwidth")),  # under 75 % of the copy bandwidth
    (dict(lrkv=1.21, gqa=1.25, paged=1.3, rope=1.9), ("triton", "vs-mha")),  # 0.605 x SDPA MHA
    (dict(gqa=0.86), ("triton", "vs-gqa")),  # 1.163 x GQA at equal bytes
    (dict(paged=1.11), ("triton-paged", "paged")),  # paged 11 % slower than contiguous
    (dict(rope=1.61), ("triton-rope", "rope")),  # exact RoPE 1.61 x no RoPE
])
def test_h200_targets_miss(change, rule):
    """Each rule says NO just past its bound, and only that rule (the others still PASS)."""
    rows = _gpu_shape(**change)
    check_targets(BenchResult(_machine(device="cuda"), {}, rows))
    verdicts = _verdicts(rows)
    assert verdicts[rule] == "MISS"
    assert all(v == "PASS" for k, v in verdicts.items() if k != rule), verdicts
    judged = next(r for r in rows if r.backend == rule[0])
    assert judged.target == "MISS" and "MISS" in judged.target_rule


def test_gpu_targets_scope_latency_and_missing_peer():
    # B = 1, T = 32K: the latency rule (<= 0.7 x SDPA MHA) replaces the bandwidth/0.6 pair
    lat = _gpu_shape(B=1, T=32768, lrkv=1.0, mha=1.45)
    check_targets(BenchResult(_machine(device="cuda"), {}, lat))
    assert _verdicts(lat)[("triton", "latency")] == "PASS" and ("triton", "bandwidth") not in _verdicts(lat)
    lat = _gpu_shape(B=1, T=32768, lrkv=1.0, mha=1.4)  # 0.714 > 0.7
    check_targets(BenchResult(_machine(device="cuda"), {}, lat))
    assert _verdicts(lat)[("triton", "latency")] == "MISS"
    # B = 4 at 16K: only the relative rules; T = 4K: none; a non-paper scale: no bandwidth/0.6 rules
    small = _gpu_shape(B=4) + _gpu_shape(T=4096) + _gpu_shape(scale="tiny")
    check_targets(BenchResult(_machine(device="cuda"), {}, small))
    assert {c["rule"] for c in small[0].checks} == {"vs-gqa"} and small[5].checks == []
    assert {c["rule"] for c in small[10].checks} == {"vs-gqa"}
    # a peer that errored is a MISS that says so, never a silent PASS; a peer the run left out is SKIP
    rows = [r for r in _gpu_shape() if r.family != "gqa-eq"]
    rows[1].status, rows[1].time_s, rows[1].reason = "error", None, "RuntimeError: boom"  # SDPA MHA errored
    check_targets(BenchResult(_machine(device="cuda"), {}, rows))
    c = {c["rule"]: c for c in rows[0].checks}
    assert c["vs-mha"]["verdict"] == "MISS" and "boom" in c["vs-mha"]["why"]
    assert c["vs-gqa"]["verdict"] == "SKIP" and "no gqa-eq/sdpa row in this run" in c["vs-gqa"]["why"]
    assert rows[0].target == "MISS" and "SKIP" in rows[0].target_rule
    only = [r for r in _gpu_shape(B=4) if r.family != "gqa-eq"]  # its one rule (vs-gqa) has no peer
    assert check_targets(BenchResult(_machine(device="cuda"), {}, only)) == [r for r in only if r.backend != "triton"
                                                                             and r.family == "lrkv"]
    assert only[0].target is None and only[0].checks[0]["verdict"] == "SKIP"


def test_gpu_target_ratio_is_per_round():
    """A drift that slows both rows alike leaves the per-round ratio at 0.5 (the medians' ratio
    would be 0.5 too here, but the rule must use the rounds when they pair up)."""
    rows = _gpu_shape()
    rows[0].samples_s, rows[1].samples_s = [1e-3, 4e-3, 2e-3], [2e-3, 8e-3, 4e-3]
    rows[0].time_s, rows[1].time_s = 2e-3, 1e-3  # inconsistent medians: only the rounds count
    check_targets(BenchResult(_machine(device="cuda"), {}, rows))
    assert next(c for c in rows[0].checks if c["rule"] == "vs-mha")["value"] == pytest.approx(0.5)


def test_check_targets_exit_code_and_markdown(tmp_path):
    """`lrkv bench --from-json F --check-targets` exits 1 on a MISS, 0 without the flag."""
    from lrkv.cli import main

    rows = _gpu_shape(paged=1.2)
    result = BenchResult(_machine(device="cuda"), {"device": "cuda", "backends": ["triton", "sdpa"]}, rows)
    check_targets(result)
    rows[2].payload_ratio, rows[2].spec = 0.5, "gqa-H18-dh128-kv9"  # the bytes ratio is printed
    assert any("gqa-H18-dh128-kv9" in n and "1.031x LRKV's" in n for n in footnotes(result))
    md = targets_markdown(result)
    assert "| 2.5B | 8 | 16K | lrkv / triton-paged | t_paged16/t_contiguous <= 1.1 (T >= 16K) | 1.2 | 1.1 | MISS |" in md
    assert len(GPU_RULES) == 6
    path = result.write_json(tmp_path / "r.json")
    assert main(["bench", "--from-json", str(path), "--out", str(tmp_path / "a"), "--no-plot"]) == 0
    assert main(["bench", "--from-json", str(path), "--out", str(tmp_path / "b"), "--no-plot", "--check-targets"]) == 1
    assert "**Targets**" in (tmp_path / "b" / "bench.md").read_text()


# ----------------------------------------------------------------------------- roofline
def test_roofline_closed_forms():
    sc = PAPER_SCALES["2.5B"]
    lrkv, mha = FAMILIES["lrkv"].spec(sc), FAMILIES["mha"].spec(sc)
    T = 1 << 20  # large T: per-step constants vanish
    rho, alpha = 1 / 18 + 55 / 128, 1 + 55 / 128 + 55 / T
    ratio = roofline.intensity(lrkv, T, 1, "bfloat16") / roofline.intensity(mha, T, 1, "bfloat16")
    assert ratio == pytest.approx(alpha / rho, rel=1e-3)
    assert roofline.intensity(mha, T, 1, "bfloat16") == pytest.approx(1.0)  # 2/b FLOP per byte
    assert roofline.roofline_time(lrkv, 16384, 8, roofline.H200_TENSOR)[1] == "memory"
    fast = roofline.Roof("fast", 1e9, 1e15, "float32", "")
    assert roofline.unfused_ratio(rho, fast) == pytest.approx(rho, abs=1e-5)
    assert roofline.unfused_ratio(rho, roofline.Roof("cpu", 20e9, 100e9, "float32", "")) == pytest.approx(rho + 0.1)
    assert roofline.small_t_threshold(lrkv) == int(18 * 128 * 55 / (0.05 * (128 + 18 * 55)))
    text = roofline.render(roofline.summary([roofline.H200_TENSOR], [sc], [8192]))
    assert "bandwidth-bound" in text and "LRKV 2.5B (H=18, r=55)" in text


# ----------------------------------------------------------------------------- machine
def test_machine_description_and_measurements():
    m = describe_machine("cpu", threads=1)
    assert m.device == "cpu" and m.threads == 1 and m.cores >= 1 and m.torch == torch.__version__
    assert cpu_model() and m.name in m.label()
    assert measure_copy_bandwidth("cpu", nbytes=1 << 20, repeats=1) > 0
    assert measure_gemm_flops("cpu", n=64, repeats=1) > 0
    assert Machine.from_dict(m.to_dict()) == m


# ----------------------------------------------------------------------------- end to end
@pytest.fixture
def tiny_scale(monkeypatch):
    monkeypatch.setitem(PAPER_SCALES, "tiny", TINY)
    return "tiny"


def _tiny_run(tiny_scale):
    grid = BenchGrid("t", (tiny_scale,), (1,), (16, 256), rounds=2)
    opts = RunOptions(backends=["eager"], measure_machine=False, min_sample_s=1e-4, threads=1)
    return run_bench(grid, opts)


def test_runner_end_to_end_eager(tiny_scale, tmp_path):
    result = _tiny_run(tiny_scale)
    assert len(result.rows) == 2 * len(CPU_FAMILIES)
    assert all(r.status == "ok" for r in result.rows), [(r.family, r.reason) for r in result.rows]
    for r in result.rows:
        assert r.time_s > 0 and len(r.samples_s) == 2 and r.bytes_total > 0 and r.vs_mha > 0
        assert r.mha_backend == "eager" and r.payload_ratio > 0
    mha = [r for r in result.rows if r.family == "mha"]
    assert all(r.vs_mha == 1.0 and r.payload_ratio == 1.0 for r in mha)
    lrkv = next(r for r in result.rows if r.family == "lrkv")
    assert lrkv.arithmetic_ratio == pytest.approx(1 + 3 / 16 + 3 / 16)  # 1 + r/d_h + r/T at T = 16
    assert result.targets() == []  # eager rows are not the target's compiled step
    # JSON round trip
    path = result.write_json(tmp_path / "bench.json")
    again = BenchResult.read_json(path)
    assert again.to_dict() == json.loads(path.read_text()) == json.loads(json.dumps(result.to_dict()))
    assert again.rows == result.rows and again.machine == result.machine


def test_runner_skips_rows_over_the_memory_budget(tiny_scale):
    grid = BenchGrid("t", (tiny_scale,), (1,), (16,), families=("mha", "lrkv"), rounds=1)
    result = run_bench(grid, RunOptions(backends=["eager"], measure_machine=False, memory_fraction=1e-12))
    assert {r.status for r in result.rows} == {"skipped"} and "GiB" in result.rows[0].reason


def test_renderers_and_cli_from_json(tiny_scale, tmp_path, monkeypatch):
    from rich.console import Console

    from lrkv.bench import plot
    from lrkv.cli import main

    result = _tiny_run(tiny_scale)
    result.machine = _machine(llc_bytes=1 << 40)  # every row "fits in LLC": the * marker
    result.rows[0].status, result.rows[0].reason = "error", "RuntimeError: boom"
    assert cells(result.rows[0])[3].startswith("error: RuntimeError")
    md = markdown_table(result)
    assert "| **lrkv** |" in md and "test CPU" in md and "| 16\\* |" in md
    console = Console(record=True, width=140)
    for t in rich_tables(result):
        console.print(t)
    assert "x MHA" in console.export_text()
    assert any("LRKV/MHA measured (tiny" in line for line in headline(result))
    path = result.write_json(tmp_path / "saved.json")
    out = tmp_path / "out"
    assert main(["bench", "--from-json", str(path), "--out", str(out), "--no-plot"]) == 1  # the error row
    assert "| family |" in (out / "bench.md").read_text()
    if plot.matplotlib_missing() is None:
        written, msg = plot.plot_result(result, tmp_path / "p.png")
        assert written and written.stat().st_size > 0, msg
    monkeypatch.setattr(plot, "matplotlib_missing", lambda: "matplotlib is not installed (test)")
    assert plot.plot_result(result, tmp_path / "q.png") == (None, "matplotlib is not installed (test)")


def test_equal_bytes_gqa():
    """n_kv divides H and is the divisor whose cache is nearest LRKV's 2·d_h + 2·H·r elements."""
    from lrkv.spec import cache_elements

    for label, want in (("2.5B", 9), ("6.3B", 16)):
        scale = PAPER_SCALES[label]
        lrkv = FAMILIES["lrkv"].spec(scale)
        n_kv, ratio = equal_bytes_kv_heads(lrkv)
        assert n_kv == want and scale.n_heads % n_kv == 0
        assert ratio == pytest.approx(2 * n_kv * 128 / (2 * 128 + 2 * scale.n_heads * scale.rank))
        gqa = FAMILIES["gqa-eq"].spec(scale)
        assert gqa.n_kv_heads == n_kv
        assert cache_elements(gqa) / cache_elements(lrkv, include_key_scale=False) == pytest.approx(ratio)
        others = [n for n in range(1, scale.n_heads + 1) if scale.n_heads % n == 0 and n != n_kv]
        assert all(abs(2 * n * 128 - cache_elements(lrkv)) > abs(2 * n_kv * 128 - cache_elements(lrkv)) for n in others)
    assert equal_bytes_kv_heads(FAMILIES["lrkv"].spec(TINY))[0] == 2  # 1 + H·r/d_h = 1.75 -> 2


def test_cli_grid_overrides():
    import argparse

    from lrkv.bench.bench_cli import _ints, build_grid

    assert _ints("1K,8k,3") == (1024, 8192, 3)
    ns = argparse.Namespace(quick=True, full=False, scales=None, batch=(2,), seq_lens=None, families=("lrkv",),
                            rounds=None)
    grid = build_grid(ns)
    assert grid.batches == (2,) and grid.families == ("mha", "lrkv") and grid.name == "quick+custom"
    on_gpu = grid.for_device("cuda")  # what the user names holds on a GPU too
    assert on_gpu.batches == (2,) and on_gpu.families == ("mha", "lrkv") and on_gpu.seq_lens == (1024, 16384)


def test_runner_time_budget_skips_the_rest(tiny_scale):
    grid = BenchGrid("t", (tiny_scale,), (1,), (16, 32), families=("mha", "lrkv"), rounds=1)
    result = run_bench(grid, RunOptions(backends=["eager"], measure_machine=False, budget_s=0.0))
    assert len(result.rows) == 4 and {r.status for r in result.rows} == {"skipped"}
    assert all("--budget-s" in r.reason for r in result.rows)


def test_runner_checkpoints_after_each_shape_and_survives_input_oom(tiny_scale, monkeypatch):
    """The rows so far reach the checkpoint after every shape (ci/gpu-check keeps them if the run
    is killed); a shape whose inputs do not fit errors its own rows, and the next shape still runs."""
    from lrkv.bench import runner

    seen = []
    real = runner.make_inputs

    def oom_at_32(spec, B, T, **kw):
        if T == 32:
            raise RuntimeError("CUDA out of memory (test)")
        return real(spec, B, T, **kw)

    monkeypatch.setattr(runner, "make_inputs", oom_at_32)
    grid = BenchGrid("t", (tiny_scale,), (1,), (16, 32, 64), families=("mha", "lrkv"), rounds=1)
    result = run_bench(grid, RunOptions(backends=["eager"], measure_machine=False, min_sample_s=1e-4,
                                        checkpoint=lambda rows: seen.append(len(rows))))
    assert seen == [2, 4, 6]
    status = {(r.seq_len, r.family): (r.status, r.reason) for r in result.rows}
    assert status[32, "lrkv"][0] == "error" and "out of memory" in status[32, "lrkv"][1]
    assert status[16, "lrkv"][0] == status[64, "mha"][0] == "ok"


def test_cli_run_leaves_no_partial_file(tiny_scale, tmp_path, monkeypatch):
    from lrkv.bench import bench_cli
    from lrkv.cli import main

    written = []
    real = bench_cli._checkpoint

    def spy(path):
        write = real(path)
        return lambda rows: (write(rows), written.append(path.exists()))

    monkeypatch.setattr(bench_cli, "_checkpoint", spy)
    rc = main(["bench", "--scales", tiny_scale, "--batch", "1", "--seq-lens", "16", "--families", "lrkv",
               "--backend", "eager", "--rounds", "1", "--threads", "1", "--out", str(tmp_path), "--no-plot",
               "--no-progress"])
    assert rc == 0 and written == [True]  # the rows were checkpointed during the run ...
    assert (tmp_path / "bench.json").exists() and not (tmp_path / bench_cli.PARTIAL).exists()  # ... and replaced


def test_runner_timing_failure_errors_that_shape_only(tiny_scale, monkeypatch):
    from lrkv.bench import runner

    calls = []

    def flaky(samplers, rounds):
        calls.append(len(samplers))
        if len(calls) == 1:
            raise RuntimeError("CUDA out of memory while timing (test)")
        return interleave(samplers, rounds)

    monkeypatch.setattr(runner, "interleave", flaky)
    grid = BenchGrid("t", (tiny_scale,), (1,), (16, 32), families=("mha", "lrkv"), rounds=1)
    result = run_bench(grid, RunOptions(backends=["eager"], measure_machine=False, min_sample_s=1e-4))
    by_t = {t: {r.status for r in result.rows if r.seq_len == t} for t in (16, 32)}
    assert by_t == {16: {"error"}, 32: {"ok"}} and "timing: RuntimeError" in result.rows[0].reason
