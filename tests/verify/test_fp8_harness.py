"""FP8 caches through the harness (DESIGN §4 "FP8 caches"): the grid's fp8 cases, the rule's
dequantize-then-attend err_base, the quantization cost, the backends' claims and their
twins, and the gate saying no to every fp8 mutant (lrkv.mutants.fp8)."""

from __future__ import annotations

import copy
import json
import pickle

import pytest
import torch

from lrkv.cli import main
from lrkv.mutants.fp8 import FP8_MUTANTS
from lrkv.spec import AttentionSpec
from lrkv.verify import gate
from lrkv.verify.backend_registry import get_backend
from lrkv.verify.case import Case
from lrkv.verify.grids import FP8_FORMATS, FP8_SCALES, default_grid
from lrkv.verify.isolation import dumps
from lrkv.verify.levels import make_inputs
from lrkv.verify.runner import backend_info, prepare, run
from lrkv.verify.selection import Selection
from lrkv.verify.tolerance import load_policy
from lrkv.verify.tolerance_report import build_report, render_markdown
from lrkv.verify.twins import find_twin

SPEC = AttentionSpec.lrkv(4, 16, 5)
KERNEL_FP8 = Selection("default", level=("kernel",), filter=".per_")  # the grid's 9 fp8 kernel cases (one fp8 compute)


def cli(argv) -> int:
    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code)


def fp8_case(level="kernel", fmt="float8_e4m3fn", gran="per_head", dtype="bfloat16", **kw) -> Case:
    kw.setdefault("page_size", 5 if level != "kernel" else 0)
    if level == "kernel-extend":
        kw.setdefault("n_new", (3, 1, 0))
    return Case.flat(level, SPEC, dtype, (9, 17, 4), 20, cache_format=fmt, scale_granularity=gran, **kw)


def _report(cases, backends, selection):
    pol = load_policy()
    recs = run(list(cases), backends, pol, isolation="inprocess")
    return build_report(recs, pol, [backend_info(b, n) for n, b in backends], selection=selection)


def test_the_grid_has_fp8_cases_at_every_kernel_level_for_both_formats_and_every_granularity():
    fp8 = [c for c in default_grid() if c.cache_fp8]
    for level in ("kernel", "kernel-paged", "kernel-extend", "layer"):
        mine = [c for c in fp8 if c.level == level]
        assert {c.fp8.format for c in mine} == set(FP8_FORMATS), level
        assert {c.fp8.granularity for c in mine} == set(FP8_SCALES), level
    for level in ("kernel", "kernel-paged", "kernel-extend"):  # every format with every granularity
        pairs = {(c.fp8.format, c.fp8.granularity) for c in fp8 if c.level == level}
        assert pairs == {(f, g) for f in FP8_FORMATS for g in FP8_SCALES}, level
    for level in ("kernel-paged", "kernel-extend"):
        mine = [c for c in fp8 if c.level == level]
        assert any(c.fp8.format == "float8_e4m3fn" and c.dtype == "float32" for c in mine), level
        per_token = [c for c in mine if c.fp8.granularity.startswith("per_token") and c.pages and c.pages.size > 1]
        # per-token scales on pages of several slots, unused slots' scales NaN and finite
        assert {c.nan_garbage for c in per_token} == {True, False}, level
    assert any(c.fp8.outliers for c in fp8) and any(not c.nan_garbage for c in fp8)
    assert any(c.pages.shared_prefix for c in fp8 if c.level == "kernel-paged")
    assert {c.pages is not None for c in fp8 if c.level == "kernel-extend"} == {True, False}


@pytest.mark.parametrize("bad, match", [
    (dict(cache_format="float8_e4m3fn"), "scale_granularity must be one of"),
    (dict(scale_granularity="per_head"), "give cache_format too"),
    (dict(cache_format="fp8", scale_granularity="per_head"), "cache_format must be one of"),
    (dict(cache_format="float8_e5m2", scale_granularity="per_row"), "scale_granularity must be one of"),
    (dict(cache_format="float8_e5m2", scale_granularity="per_tensor", dtype="float64"), "compute dtype"),
])
def test_a_bad_fp8_case_is_refused_naming_the_field(bad, match):
    kw = dict(dtype="bfloat16") | bad
    with pytest.raises(ValueError, match=match):
        Case.flat("kernel", SPEC, kw.pop("dtype"), (3,), 4, **kw)
    with pytest.raises(ValueError, match="apply to the levels"):
        Case.flat("layer-model", SPEC, "bfloat16", (3,), 3, cache_format="float8_e4m3fn", scale_granularity="per_tensor")


@pytest.mark.parametrize("level", ["kernel", "kernel-paged", "kernel-extend"])
@pytest.mark.parametrize("gran", FP8_SCALES)
def test_an_fp8_case_hands_the_backend_an_fp8_cache_with_its_scales(level, gran):
    case = fp8_case(level, "float8_e5m2", gran, outliers=True)
    inp = make_inputs(case)
    assert {inp.cache.shared_k.dtype, inp.cache.latent_v.dtype} == {torch.float8_e5m2} and inp.q.dtype == torch.bfloat16
    assert inp.kwargs()["cache_scales"].granularity == gran
    # the parts have their own ranges: every scale differs from the others
    s = inp.cache.scales
    if gran == "per_tensor":
        assert len({float(s.of(p)) for p in ("shared_k", "shared_v", "latent_k", "latent_v")}) == 4
    # unused slots hold the format's NaN pattern
    assert torch.isnan(inp.cache.shared_k.to(torch.float32)).any()
    # without fp8 nothing new reaches the backend's call
    plain = make_inputs(case.replace(cache_format="", scale_granularity=""))
    assert "cache_scales" not in plain.kwargs() and plain.cache.shared_k.dtype == torch.bfloat16


def test_err_base_is_dequantize_then_attend_at_tau_so_eager_passes_and_the_kernel_is_not_excused():
    """eager dequantizes to τ and attends there: the err_base path itself. Its record must
    pass with a margin, and a kernel that ignores the scales must fail by orders of magnitude
    (the quantization error never widens the bound)."""
    cases = [fp8_case(gran=g, fmt=f) for f in FP8_FORMATS for g in FP8_SCALES]
    recs = run(cases, [("eager", get_backend("eager")), ("ignored", FP8_MUTANTS[0]())], load_policy(),
               isolation="inprocess", properties=False)
    eager = [r for r in recs if r["backend"] == "eager"]
    assert all(r["status"] == "pass" and r["ratio"] < 0.5 for r in eager), [(r["id"], r["ratio"]) for r in eager]
    ignored = [r for r in recs if r["backend"] != "eager"]
    assert all(r["status"] == "fail" and r["ratio"] > 100 for r in ignored)


def test_every_fp8_case_records_its_quantization_cost_never_gated():
    case = fp8_case(outliers=True)
    prep = prepare(case, load_policy())
    cost = prep.quantization_cost
    assert set(cost) == {"max_abs", "mean_abs", "sqnr_db"} and 0 < cost["mean_abs"] <= cost["max_abs"]
    finer = prepare(fp8_case(gran="per_token_head", outliers=True), load_policy()).quantization_cost
    assert finer["sqnr_db"] > cost["sqnr_db"] - 1.0  # per token-head is no worse than per head (a sanity bound)
    assert prepare(case.replace(cache_format="", scale_granularity=""), load_policy()).quantization_cost is None
    rep = _report([case], [("tiled", get_backend("tiled"))], Selection("case", cases=(case,)))
    (rec,) = rep["records"]
    assert rec["quantization_cost"] == cost
    assert "Quantization cost of the fp8 cases (1)" in render_markdown(rep)
    worse = copy.deepcopy(rep)
    worse["records"][0]["quantization_cost"]["sqnr_db"] = -99.0  # not evidence: the verdict does not move
    assert gate.exit_code(gate.classify(worse, {"entries": {}, "policy": None}), worse) == 0


def test_a_backend_that_reads_no_fp8_skips_with_the_reason_and_runs_the_twin_at_tau(tmp_path):
    case = fp8_case(dtype="float32")  # a dtype inductor on the CPU claims
    (skip, twin) = run([case], [("my", get_backend("inductor"))], load_policy(), isolation="inprocess",
                       properties=False)
    assert skip["status"] == "skip" and skip["reason"].startswith("cache float8_e4m3fn/per_head not supported")
    assert twin["twin"]["changes"] == "cache=none" and twin["status"] == "pass", twin["reason"]
    assert find_twin(case, lambda c: c.cache_fp8 == "float8_e5m2/per_head")[1] == {"cache": "float8_e5m2/per_head"}


def test_the_gate_re_asks_an_fp8_skip_and_checks_the_claimed_formats():
    case = fp8_case(dtype="float32")
    rep = _report([case], [("inductor", get_backend("inductor"))], Selection("case", cases=(case,)))
    empty = {"entries": {}, "policy": None}
    assert gate.exit_code(gate.classify(rep, empty), rep) == 0
    lied = copy.deepcopy(rep)  # the report claims the backend reads fp8 caches: the skip is not one it makes
    info = lied["backends"][0]
    info.update(cache_formats=list(FP8_FORMATS), scale_granularities=list(FP8_SCALES))
    entries = gate.classify(lied, empty, live={"inductor": (get_backend("inductor"), "")})
    details = [e.detail for e in entries if e.klass == "ERROR"]
    assert any("is listed with fp8 caches" in d for d in details), details  # the claim against the backend
    assert any("claim the case" in d for d in details), details  # and the skip against the claim
    assert gate.exit_code(entries, lied) == 1


def test_fp8_tensors_cross_into_the_worker_process():
    """torch 2.13 cannot unpickle an fp8 tensor it pickled ("UntypedStorage has no attribute
    dtype"); the isolation's pickler sends the bytes, whatever the torch version does."""
    t = torch.randn(3, 4).to(torch.float8_e4m3fn).t()  # strided
    u = pickle.loads(dumps(t))
    assert u.dtype == t.dtype and u.stride() == t.stride() and torch.equal(u.view(torch.uint8), t.view(torch.uint8))
    case = fp8_case("kernel-paged", gran="per_token")
    (rec,) = run([case], [("tiled-paged", get_backend("eager"))], load_policy(), isolation="process",
                 properties=False)
    assert rec["status"] == "pass", rec["reason"]


@pytest.mark.parametrize("backend", ["tiled", "examples.my_backend:backend"])
def test_correct_fp8_backends_pass_the_grid_fp8_cases_with_their_server_properties(backend, tmp_path, capsys):
    out = tmp_path / "r"
    code = cli(["verify", "--backend", backend, "--level", "kernel", "--filter", ".per_", "--out", str(out),
                "--no-progress"])
    text = capsys.readouterr()
    assert code == 0, text.err[-2000:]
    rep = json.loads((out / "report.json").read_text())
    assert len(rep["records"]) == 9 and all(r["status"] == "pass" for r in rep["records"])
    assert all(r.get("quantization_cost") for r in rep["records"])
    held = rep["properties"][rep["backends"][0]["name"]]
    assert held["same_buffers"]["ran"] >= 1 and not held["same_buffers"]["failed"]
    assert cli(["gate", str(out / "report.json"), "--baseline", str(tmp_path / "b.json"), "--update-baseline"]) == 0


@pytest.mark.parametrize("mutant", FP8_MUTANTS, ids=lambda m: m.name)
def test_every_fp8_mutant_is_rejected_by_verify_and_the_gate(mutant, tmp_path, capsys):
    ref = f"lrkv.mutants.fp8:{mutant.__name__}"
    level = "layer" if "layer" in mutant.levels else "kernel"  # the quantizer mutant: the layer step appends
    out = tmp_path / "r"
    code = cli(["verify", "--backend", ref, "--level", level, "--filter", ".per_", "--out", str(out),
                "--no-progress", "--in-process"])
    text = capsys.readouterr()
    assert code == 1, text.err[-2000:]
    rep = json.loads((out / "report.json").read_text())
    failed = [r for r in rep["records"] if r["status"] == "fail"]
    assert failed, f"{mutant.name} failed no fp8 case"
    assert cli(["gate", str(out / "report.json"), "--baseline", str(tmp_path / "b.json"), "--update-baseline"]) == 1
    entries = gate.classify(rep, {"entries": {}, "policy": None})
    assert gate.exit_code(entries, rep) == 1 and any(e.klass == "FAIL" for e in entries)


def test_the_layer_step_quantizes_the_appended_outlier_token_by_saturating():
    """The layer fp8 cases append a token beyond the static scales' range: the reference
    saturates it (no NaN or inf in the cache), the quantizer mutant does not."""
    case = next(c for c in default_grid() if c.level == "layer" and c.fp8 and c.fp8.outliers and c.fp8.granularity == "per_tensor")
    recs = run([case], [("eager", get_backend("eager")), ("tiled", get_backend("tiled")),
                        ("cast", FP8_MUTANTS[-1]())], load_policy(), isolation="inprocess", properties=False)
    assert [r["status"] for r in recs] == ["pass", "pass", "fail"], [r["reason"] for r in recs]
    assert recs[0]["quantization_cost"]["sqnr_db"] < 30  # saturation costs: reported, not gated


def test_a_rank_0_fp8_case_has_empty_latent_groups_and_still_runs():
    """Found by the fp8 hunt: a dynamic scale over an empty latent (r = 0) took amax of nothing."""
    case = Case.flat("kernel", AttentionSpec.lrkv(2, 8, 0), "float16", (5, 0), 6, cache_format="float8_e5m2",
                scale_granularity="per_token_head", outliers=True)
    (rec,) = run([case], [("eager", get_backend("eager"))], load_policy(), isolation="inprocess", properties=False)
    assert rec["status"] == "pass", rec["reason"]
    assert (make_inputs(case).cache.scales.latent_k[0, :5] == 1.0).all()  # an empty group's scale is 1


def test_the_plugin_suite_draws_fp8_cases_and_says_no_to_a_mutant():
    """lrkv.testing.suite's fp8 test (what `pytest -m equivalence` runs in a user's repository)
    passes the example backend and fails the K/V-swap mutant."""
    from lrkv.testing.suite import test_fp8_cache_matches_reference as suite_test

    suite_test("examples.my_backend:backend")
    with pytest.raises(AssertionError, match="FAIL"):
        suite_test("lrkv.mutants.fp8:KVScalesSwapped")
