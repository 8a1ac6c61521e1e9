"""The verification harness itself: metrics, the tolerance rule, cases, the report and its
schema, the gate's classes and exit codes, and the CLI verbs (DESIGN §6, §7)."""

from __future__ import annotations

import copy
import json
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest
import torch

from lrkv.cli import main
from lrkv.reference.lrkv import decode_attention
from lrkv.spec import PAPER_SCALES, AttentionSpec
from lrkv.verify import gate
from lrkv.verify.backend_registry import get_backend
from lrkv.verify.builtin_backends import EagerBackend
from lrkv.verify.case import Case
from lrkv.verify.grids import default_grid, quick_grid
from lrkv.verify.levels.kernel import make_kernel_inputs
from lrkv.verify.levels.layer import make_layer_inputs
from lrkv.verify.verify_cli import DEFAULT_BACKENDS
from lrkv.verify.metrics import ErrorMetrics, error_metrics, json_float, parse_float
from lrkv.verify.tolerance_report import SCHEMA, build_report, render_markdown, schema, validate_report
from lrkv.verify.runner import backend_info, not_applicable, prepare, run, run_case
from lrkv.verify.tolerance import Policy, Tolerance, fa3_atol, judge, load_policy, make_bound
from lrkv.verify.selection import Selection

ROOT = Path(__file__).resolve().parents[2]
FAST_BACKENDS = ("reference", "materialized", "eager", "tiled")
GITHUB_COMMENT_LIMIT = 65_536


# ----------------------------------------------------------------------------- metrics
def test_metrics_of_identical_tensors():
    x = torch.randn(3, 4, dtype=torch.float64)
    m = error_metrics(x, x.clone())
    assert (m.max_abs, m.max_rel, m.mean_abs, m.cos_diff) == (0.0, 0.0, 0.0, 0.0)
    assert m.sqnr_db == math.inf and m.nonfinite_match


def test_metrics_known_values():
    ref = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=torch.float64)
    out = ref + torch.tensor([0.1, 0.0, 0.0, -0.2], dtype=torch.float64)
    m = error_metrics(out, ref)
    assert m.max_abs == pytest.approx(0.2) and m.mean_abs == pytest.approx(0.075)
    assert m.max_rel == pytest.approx(0.1)
    assert m.sqnr_db == pytest.approx(10 * math.log10(30 / 0.05))
    a, b = out.double(), ref.double()
    assert m.cos_diff == pytest.approx(float(1 - 2 * (a * b).sum() / (a * a + b * b).sum()))  # FlashMLA's


def test_metrics_run_in_float64_for_low_precision_outputs():
    ref = torch.randn(64, dtype=torch.float64)
    m = error_metrics(ref.to(torch.bfloat16), ref)
    assert 0 < m.max_abs <= ref.abs().max().item() * 2**-8


def test_nonfinite_positions_must_match():
    ref = torch.tensor([1.0, float("nan"), float("-inf"), 2.0])
    assert error_metrics(ref.clone(), ref).nonfinite_match
    moved = torch.tensor([float("nan"), 1.0, float("-inf"), 2.0])
    assert not error_metrics(moved, ref).nonfinite_match
    sign = torch.tensor([1.0, float("nan"), float("inf"), 2.0])
    assert not error_metrics(sign, ref).nonfinite_match
    # the numeric metrics skip non-finite positions
    assert error_metrics(ref + torch.tensor([0.5, 0, 0, 0]), ref).max_abs == pytest.approx(0.5)


def test_metrics_of_an_unwritten_output_are_defined_and_fail_the_rule():
    """An output buffer nobody wrote holds what memory held: values near 1e308 (their squares
    overflow) and subnormals. The metrics stay defined — the sums are scaled, never inf / inf
    or log10(0) — and the rule fails the output."""
    ref = torch.randn(2, 4, 8, dtype=torch.float64)
    out = ref.clone()
    out[:, 0] = torch.tensor([1.7e308, 6.9e-310, -7.7e304, 0.0, 4.6e-310, 1e300, -1e308, 3.0], dtype=torch.float64)
    m = error_metrics(out, ref)
    assert m.max_abs == 1.7e308 and m.max_rel == math.inf and m.nonfinite_match
    assert -6200 < m.sqnr_db < -6000 and 0.99 < m.cos_diff <= 1.01  # ~|ref| / 1e308, not -inf, not nan
    assert not judge(m, make_bound(ErrorMetrics(0, 0, 0, 0, math.inf, True), fa3_atol(ref, "float64"), Tolerance()))[0]
    ref[0, 0, 0], out[0, 0, 0] = 1.7e308, -1.7e308  # the difference itself overflows
    m = error_metrics(out, ref)
    assert m.max_abs == math.inf and m.sqnr_db == -math.inf and 1 < m.cos_diff <= 2  # anti-correlated


def test_metrics_shape_mismatch_raises():
    with pytest.raises(ValueError, match="shape"):
        error_metrics(torch.zeros(2, 3), torch.zeros(3, 2))


def test_json_floats_round_trip():
    for x in (1.5, math.inf, -math.inf):
        assert parse_float(json_float(x)) == x
    assert math.isnan(parse_float(json_float(math.nan)))
    m = ErrorMetrics(1.0, math.inf, 0.5, 0.0, math.inf, True)
    assert ErrorMetrics.from_dict(json.loads(json.dumps(m.to_dict()))) == m


# ----------------------------------------------------------------------------- the rule
@pytest.mark.parametrize("dtype", ["float64", "float32", "bfloat16", "float16"])
def test_fa3_atol_is_rounding_at_the_output_magnitude(dtype):
    ref = torch.randn(1000, dtype=torch.float64) * 3
    td = getattr(torch, dtype)
    y = ref.to(td)
    fa3 = 2 * float(((y + 0.3) - 0.3 - y).abs().max())  # FA3's expression on a large output
    atol = fa3_atol(ref, dtype)
    assert atol >= fa3 and atol <= 4 * torch.finfo(td).eps * (ref.abs().max().item() + 0.3)
    assert fa3_atol(torch.tensor([0.25, 0.5], dtype=torch.float64), dtype) > 0  # tiny outputs: not 0 by luck


def test_rule_passes_eager_and_fails_a_perturbed_backend():
    case = Case("kernel", AttentionSpec.lrkv(3, 16, 5), "float32", (9, 17, 3), 20)
    prep = prepare(case)
    tol = Tolerance()
    assert run_case(prep, EagerBackend(), "eager", tol)["status"] == "pass"

    class Perturbed(EagerBackend):
        name = "perturbed"

        def decode_attention(self, *args, **kw):
            out, lse = super().decode_attention(*args, **kw)
            return out + 1e-4 * torch.sign(out), lse

    rec = run_case(prep, Perturbed(), "perturbed", tol)
    assert rec["status"] == "fail" and "max|err|" in rec["reason"]
    assert parse_float(rec["ratio"]) > 1


def _metrics(max_abs, mean_abs, finite=True):
    return ErrorMetrics(max_abs, 0.0, mean_abs, 0.0, 60.0, finite)


def test_rule_clauses():
    base = _metrics(1e-3, 1e-4)
    bound = make_bound(base, atol=1e-6, tol=Tolerance())
    assert bound.max_abs == pytest.approx(2e-3 + 1e-6) and bound.mean_abs == pytest.approx(1.5e-4 + 1e-6)
    assert judge(_metrics(1.9e-3, 1e-4), bound)[0]
    ok, why = judge(_metrics(2.1e-3, 1e-4), bound)
    assert not ok and "max|err|" in why
    ok, why = judge(_metrics(1e-3, 2e-4), bound)  # max within, mean beyond: the mean clause alone fails it
    assert not ok and "mean|err|" in why
    ok, why = judge(_metrics(0.0, 0.0, finite=False), bound)
    assert not ok and "non-finite" in why


def test_float64_bound_replaces_a_zero_err_base():
    bound = make_bound(_metrics(0.0, 0.0), atol=0.0, tol=Tolerance(), float64=1e-13)
    assert bound.max_abs == bound.mean_abs == 1e-13
    assert judge(_metrics(5e-14, 1e-14), bound)[0] and not judge(_metrics(2e-13, 1e-14), bound)[0]


def test_policy_precedence(tmp_path):
    p = tmp_path / "tol.toml"
    p.write_text("[defaults]\nk = 3.0\n[dtype.bfloat16]\nk = 4.0\nk_mean = 2.0\n"
                 "[backend.eager]\nk = 5.0\n[backend.eager.float16]\nk = 6.0\n")
    pol = load_policy(p)
    assert pol.resolve("reference", "float64").k == 3.0
    assert pol.resolve("inductor", "bf16").k == 4.0
    assert pol.resolve("eager", "bfloat16").k == 5.0 and pol.resolve("eager", "bfloat16").k_mean == 2.0
    assert pol.resolve("eager", "float16").k == 6.0
    assert pol.resolve("eager", "float32").k_mean == Tolerance().k_mean
    assert Policy.from_dict(pol.to_dict()).resolve("eager", "float16").k == 6.0


def test_policy_rejects_unknown_keys(tmp_path):
    p = tmp_path / "tol.toml"
    p.write_text("[defaults]\nrtol = 3.0\n")
    with pytest.raises(ValueError, match="rtol"):
        load_policy(p)


def test_packaged_policy_loads_with_design_defaults(tmp_path):
    pol = load_policy(directory=tmp_path)  # no project file there: the packaged policy
    t = pol.resolve("eager", "float32")
    assert (t.k, t.k_mean, t.case_timeout) == (2.0, 1.5, 120.0)
    assert pol.source.endswith("(packaged)") and len(pol.sha256) == 64
    assert pol.resolve("eager", "bfloat16").regression_factor == 4.0


def test_project_file_overrides_the_packaged_policy(tmp_path):
    (tmp_path / "lrkv.toml").write_text("[policy.dtype.bfloat16]\nk = 3.0\n")
    pol = load_policy(directory=tmp_path)
    assert pol.resolve("x", "bfloat16").k == 3.0 and pol.resolve("x", "bfloat16").regression_factor == 4.0
    assert "lrkv.toml" in pol.source and pol.sha256 != load_policy(directory=tmp_path / "absent").sha256
    (tmp_path / "lrkv.toml").unlink()
    (tmp_path / "pyproject.toml").write_text("[tool.lrkv.policy.defaults]\nk_mean = 2.5\n")
    assert load_policy(directory=tmp_path).resolve("x", "float32").k_mean == 2.5


# ----------------------------------------------------------------------------- cases
def test_case_json_round_trip_and_unique_ids():
    grid = default_grid()
    assert len({c.id for c in grid}) == len(grid)
    for c in grid:
        back = Case.from_json(c.to_json())
        assert back == c and back.id == c.id


def test_case_validation():
    spec = AttentionSpec.lrkv(2, 8, 2)
    with pytest.raises(ValueError, match="lengths"):
        Case("kernel", spec, "float32", (9,), 8)
    with pytest.raises(ValueError, match="appends"):
        Case("layer", spec, "float32", (0, 3), 8)
    with pytest.raises(ValueError, match="unknown Case fields"):
        Case.from_dict({**Case("kernel", spec, "float32", (3,), 8).to_dict(), "bogus": 1})


def test_inputs_are_rounded_and_garbage_is_nan():
    case = Case("kernel", AttentionSpec.lrkv(2, 8, 3, qk_norm=True), "bfloat16", (2, 5), 6)
    inp = make_kernel_inputs(case)
    assert all(t.dtype == torch.bfloat16 for t in inp.args() if t.is_floating_point())
    assert inp.cache.shared_k[0, 2:].isnan().all() and inp.cache.shared_k[0, :2].isfinite().all()
    assert inp.cache.key_scale[1, 5:].isnan().all()
    layer = make_layer_inputs(Case("layer", AttentionSpec.lrkv(2, 8, 3), "float32", (2, 5), 6))
    assert layer.cache.lengths.tolist() == [1, 4] and layer.positions.tolist() == [1, 4]
    assert layer.cache.latent_k[0, 1:].isnan().all()


def test_default_grid_coverage():
    grid = default_grid()
    ranks = {c.spec.rank for c in grid}
    paper = {s.rank for s in PAPER_SCALES.values()}
    assert {0, 1} <= ranks and paper <= ranks and any(r % 2 for r in ranks - {1})
    assert any(c.spec.rank == c.spec.head_dim for c in grid)
    assert {1, 2, 4, 5, 6, 12, 18, 32} <= {c.spec.n_heads for c in grid}
    lengths = {n for c in grid for n in c.lengths}
    assert {0, 1} <= lengths and any(n % 2 for n in lengths) and max(lengths) > 4096
    assert any(len(set(c.lengths)) > 1 for c in grid)
    assert {c.spec.rope for c in grid if c.level == "kernel"} == {"none", "exact", "aligned", "latent"}
    assert {c.spec.rope for c in grid if c.level == "layer-model"} == {"none", "exact", "aligned", "latent"}
    assert any(c.spec.qk_norm for c in grid)
    assert {c.dtype for c in grid} == {"float64", "float32", "bfloat16", "float16"}
    assert {c.level for c in grid} == {"kernel", "layer", "layer-model", "kernel-paged", "kernel-extend"}
    assert any(c.q_scale == 100 for c in grid) and any(c.near_cancel for c in grid)
    assert any(not c.nan_garbage for c in grid) and all(c.nan_garbage or c.level.startswith("kernel") for c in grid)
    assert any(c.splits and c.t_max % c.splits for c in grid)
    differ = [c for c in grid if c.expect == "differ"]
    assert differ and all(c.level == "layer-model" and c.spec.rope == "latent" for c in differ)


# ----------------------------------------------------------------------------- report
@pytest.fixture(scope="module")
def quick_report():
    backends = [(n, get_backend(n)) for n in FAST_BACKENDS]
    policy = load_policy()
    records = run(quick_grid(), backends, policy)
    return build_report(records, policy, [backend_info(b, n) for n, b in backends],
                        selection=Selection("quick"))


def test_report_follows_the_published_schema(quick_report):
    validate_report(quick_report)
    assert quick_report["schema"] == SCHEMA == schema()["properties"]["schema"]["const"]
    env = quick_report["environment"]
    assert env["torch"] == torch.__version__ and isinstance(env["interpreter"], bool)
    assert set(quick_report["git"]) == {"commit", "dirty"}
    assert "policy.toml" in quick_report["policy"]["source"] and len(quick_report["policy"]["sha256"]) == 64
    design_fields = {"id", "level", "backend", "dtype", "spec", "shapes", "seed", "metrics", "baseline_metrics",
                     "bound", "status", "reason"}
    for r in quick_report["records"]:
        assert design_fields <= set(r)
        assert r["repro"].startswith("lrkv verify --backend ") and "--case" in r["repro"]
    statuses = {r["status"] for r in quick_report["records"]}
    assert "pass" in statuses and "xfail" in statuses  # latent RoPE vs the model is recorded


def test_schema_rejects_malformed_reports(quick_report):
    bad = copy.deepcopy(quick_report)
    bad["records"][0]["status"] = "maybe"
    with pytest.raises(jsonschema.ValidationError):
        validate_report(bad)
    bad = copy.deepcopy(quick_report)
    next(r for r in bad["records"] if r["status"] == "pass")["metrics"] = None  # a pass without metrics
    with pytest.raises(jsonschema.ValidationError):
        validate_report(bad)
    bad = copy.deepcopy(quick_report)
    del bad["git"]
    with pytest.raises(jsonschema.ValidationError):
        validate_report(bad)


def test_markdown_fits_a_pr_comment(quick_report):
    md = render_markdown(quick_report)
    assert md.startswith("## LRKV tolerance report") and "| backend |" in md
    assert len(md) < GITHUB_COMMENT_LIMIT
    failing = copy.deepcopy(quick_report)
    for r in failing["records"]:
        r["status"], r["reason"] = "fail", "x" * 5000
    failing["summary"]["total"]["fail"] = len(failing["records"])
    md = render_markdown(failing)
    assert "Failures and errors" in md and "lrkv verify --backend" in md and len(md) < GITHUB_COMMENT_LIMIT


# ----------------------------------------------------------------------------- gate
def _gate(report, baseline, **kw):
    entries = gate.classify(report, baseline, **kw)
    return {e.key: e.klass for e in entries}, gate.exit_code(entries, report)


def _set_error(rec: dict, factor: float, bound_fraction: float = 0.0) -> None:
    """Scale a record's main error as a genuinely different run would report it (status re-judged)."""
    from lrkv.verify.tolerance import judge_record
    main = next(iter(rec["outputs"]))
    ev = rec["outputs"][main]
    ev["metrics"]["max_abs"] = factor * ev["metrics"]["max_abs"] + bound_fraction * ev["bound"]["max_abs"]
    rec["metrics"] = ev["metrics"]
    rec["status"], rec["reason"] = judge_record(rec, Tolerance())


def test_gate_pass_and_classes(quick_report):
    baseline = gate.baseline_from_report(quick_report)
    classes, code = _gate(quick_report, baseline)
    assert code == 0 and set(classes.values()) <= {"PASS", "XFAIL", "SKIP"}
    passing = [r for r in quick_report["records"] if r["status"] == "pass" and r["dtype"] == "float32"
               and r["backend"] == "tiled"]
    key = passing[0]["key"]

    rep = copy.deepcopy(quick_report)  # FAIL: the evidence exceeds the bound
    _set_error(next(r for r in rep["records"] if r["key"] == key), 1.0, 10.0)
    classes, code = _gate(rep, baseline)
    assert classes[key] == "FAIL" and code == 1

    rep = copy.deepcopy(quick_report)  # ERROR
    next(r for r in rep["records"] if r["key"] == key).update(status="error", reason="boom", outputs=None)
    assert _gate(rep, baseline) == ({**classes, key: "ERROR"}, 1)

    rep = copy.deepcopy(quick_report)  # REGRESSED: still within the bound, but 3x the accepted error
    _set_error(next(r for r in rep["records"] if r["key"] == key), 3.0, 0.1)
    classes, code = _gate(rep, baseline)
    assert classes[key] == "REGRESSED" and code == 1

    rep = copy.deepcopy(quick_report)  # MISSING: dropped from the report, or now skipped
    rep["records"] = [r for r in rep["records"] if r["key"] != key]
    classes, code = _gate(rep, baseline)
    assert classes[key] == "MISSING" and code == 1
    rep = copy.deepcopy(quick_report)
    next(r for r in rep["records"] if r["key"] == key).update(  # a skip supports() cannot be re-asked about here
        status="skip", reason="unsupported: not today", outputs=None, metrics=None, bound=None)
    assert _gate(rep, baseline, live={"tiled": (None, "not importable here")})[0][key] == "MISSING"

    better = copy.deepcopy(baseline)  # IMPROVED: the accepted error was far larger
    for err in better["entries"][key]["errors"].values():
        err["value"] = 10 * err["value"] + err["bound"]
    classes, code = _gate(quick_report, better)
    assert classes[key] == "IMPROVED" and code == 0


def test_gate_subset_judges_only_reported_backends(quick_report):
    baseline = gate.baseline_from_report(quick_report)
    rep = copy.deepcopy(quick_report)
    rep["records"] = [r for r in rep["records"] if r["backend"] == "tiled"]
    rep["backends"] = [b for b in rep["backends"] if b["name"] == "tiled"]
    assert _gate(rep, baseline)[1] == 1  # the other backends' cases are MISSING
    classes, code = _gate(rep, baseline, subset=True)
    assert code == 0 and "MISSING" not in classes.values()


def test_gate_cli_and_update_baseline(quick_report, tmp_path):
    report = tmp_path / "report.json"
    report.write_text(json.dumps(quick_report))
    base = tmp_path / "baseline.json"
    assert main(["gate", str(report), "--baseline", str(base)]) == 2  # no baseline yet (the message names
    # --update-baseline: tests/verify/test_gate_trust.py)
    assert main(["gate", str(report), "--baseline", str(base), "--update-baseline"]) == 0
    assert json.loads(base.read_text())["schema"] == gate.BASELINE_SCHEMA
    md = tmp_path / "gate.md"
    assert main(["gate", str(report), "--baseline", str(base), "--markdown", str(md)]) == 0
    assert "merge gate" in md.read_text()
    worse = copy.deepcopy(quick_report)
    rec = next(r for r in worse["records"] if r["status"] == "pass" and r["dtype"] == "float32"
               and r["backend"] == "tiled")
    _set_error(rec, 5.0, 0.2)
    assert rec["status"] == "pass"
    report.write_text(json.dumps(worse))
    assert main(["gate", str(report), "--baseline", str(base), "--markdown", str(md)]) == 1
    assert "REGRESSED" in md.read_text()
    assert main(["gate", str(report), "--baseline", str(base), "--update-baseline"]) == 0  # accepted on purpose
    assert main(["gate", str(report), "--baseline", str(base)]) == 0
    # a full report also works as a baseline
    assert main(["gate", str(report), "--baseline", str(report)]) == 0


def test_committed_baseline_matches_the_default_grid(monkeypatch):
    """ci/baseline.json holds exactly the default backends' pass/xfail keys of the default grid
    (regenerate with the commands in docs/harness.md when the grid changes)."""
    # the committed baseline is the CPU run's: on a CUDA machine `inductor` would run there
    # and claim the half-precision cases too (a CUDA run is gated against a CUDA baseline)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    baseline = gate.load_baseline(ROOT / "ci" / "baseline.json")
    from lrkv.verify.runner import backend_accepts, role_of
    from lrkv.verify.twins import find_twin, twin_id

    backends = [get_backend(n) for n in DEFAULT_BACKENDS]
    policy = load_policy()
    expected = set()
    for c in default_grid():
        for b in backends:
            accepts = backend_accepts(b, policy.resolve(b.name, c.dtype))
            if not not_applicable(b, c) and accepts(c):
                expected.add(f"{b.name}::{c.id}")
            elif not not_applicable(b, c).startswith("not implemented") and role_of(b) != "baseline":
                twin = find_twin(c, accepts)  # a declined case's nearest supported variant
                if twin is not None:
                    expected.add(f"{b.name}::{twin_id(c, twin[1])}")
    assert set(baseline["entries"]) == expected
    assert baseline["policy"]["sha256"] == load_policy().sha256  # the policy CI gates under
    assert {e["status"] for e in baseline["entries"].values()} <= {"pass", "xfail"}


# ----------------------------------------------------------------------------- CLI
def test_verify_cli_writes_report_and_exit_codes(tmp_path, capsys):
    case = Case("kernel", AttentionSpec.lrkv(2, 8, 3), "float64", (5, 2), 6)
    out = tmp_path / "ok"
    assert main(["verify", "--backend", "reference", "--backend", "tiled", "--case", case.to_json(),
                 "--out", str(out), "--no-progress"]) == 0
    validate_report(json.loads((out / "report.json").read_text()))
    assert (out / "report.md").read_text().startswith("## LRKV tolerance report")
    bad = tmp_path / "bad"
    assert main(["verify", "--backend", "lrkv.mutants.decode:SqrtRankScale", "--case", case.to_json(),
                 "--out", str(bad), "--no-progress"]) == 1
    err = capsys.readouterr().err
    assert "replay: lrkv verify --backend lrkv.mutants.decode:SqrtRankScale --case" in err
    assert main(["verify", "--backend", "no-such-backend", "--out", str(bad), "--no-progress"]) == 2


def test_a_failing_record_replays_from_its_command(tmp_path):
    case = Case("kernel", AttentionSpec.lrkv(2, 8, 3), "float32", (5, 2), 6)
    prep = prepare(case)
    from lrkv.mutants.decode import OffByOneMask
    rec = run_case(prep, OffByOneMask(), "lrkv.mutants.decode:OffByOneMask", Tolerance())
    assert rec["status"] == "fail"
    argv = rec["repro"].split(" ", 1)[1]  # drop the program name
    import shlex
    args = shlex.split(argv) + ["--out", str(tmp_path), "--no-progress"]
    assert main(args) == 1
    again = json.loads((tmp_path / "report.json").read_text())["records"][0]
    assert again["id"] == rec["id"] and again["metrics"]["max_abs"] == rec["metrics"]["max_abs"]


def test_example_backend_runs_from_the_repo_root(tmp_path):
    """The documented command works with the installed console script (whose sys.path lacks
    the working directory)."""
    exe = Path(sys.executable).parent / "lrkv"
    if not exe.exists():
        exe = shutil.which("lrkv")
    if exe is None:
        pytest.skip("the lrkv console script is not installed")
    res = subprocess.run([str(exe), "verify", "--backend", "examples.my_backend:backend", "--grid", "quick",
                          "--out", str(tmp_path), "--no-progress"], cwd=ROOT, capture_output=True, text=True,
                         timeout=300, env={**os.environ, "PYTHONPATH": ""})
    assert res.returncode == 0, res.stderr
    recs = json.loads((tmp_path / "report.json").read_text())["records"]
    assert recs and all(r["backend"] == "my-splitk" for r in recs)
    assert {r["status"] for r in recs} == {"pass", "skip"}  # layer levels and float64: recorded, not dropped
    assert all("not implemented" in r["reason"] or "not supported" in r["reason"]
               for r in recs if r["status"] == "skip")


def test_reference_is_its_own_oracle_on_tiny_float64_cases():
    case = Case("kernel", AttentionSpec.lrkv(2, 4, 2, rope="exact"), "float64", (3, 1), 4)
    rec = run_case(prepare(case), get_backend("reference"), "reference", Tolerance())
    assert rec["status"] == "pass"
    assert rec["oracle"] is not None  # the tiny float64 case met the mpmath oracle
    out, _ = make_kernel_inputs(case).call(decode_attention)
    assert out.dtype == torch.float64
