"""The gate cannot be fooled: one test per way a verdict could turn green without evidence.

Each test builds the hostile situation — an oracle bug, a backend that verifies nothing, a
hand-edited report, a lax policy, a hung or crashing backend, an interrupted run, bad
input — and asserts the clean outcome: the exit code of DESIGN §7, a message naming the
field, or an ERROR record. Planted backends live in a module written to tmp_path and are
loaded with --backend-path, exactly as a user's backend is.
"""

from __future__ import annotations

import copy
import json
import os
import stat
from pathlib import Path

import pytest
import torch

import lrkv.verify.builtin_backends  # noqa: F401 — imported before any test plants an oracle bug (they bind the
import lrkv.verify.tiled  # noqa: F401   reference functions at import time)
from lrkv.cli import main
from lrkv.reference import lrkv as ref_lrkv
from lrkv.spec import AttentionSpec
from lrkv.verify import gate
from lrkv.verify.backend_registry import get_backend
from lrkv.verify.case import Case
from lrkv.verify.tolerance_report import build_report, load_report
from lrkv.verify.runner import backend_info, prepare, run, run_case
from lrkv.verify.selection import Selection
from lrkv.verify.tolerance import Policy, judge_record, load_policy

SPEC = AttentionSpec.lrkv(3, 16, 5)
F32 = Case("kernel", SPEC, "float32", (9, 17, 3), 20)
BF16 = Case("kernel", SPEC, "bfloat16", (9, 17, 3), 20, seed=1)
F64 = Case("kernel", SPEC, "float64", (4, 1, 3), 4)  # tiny: the mpmath oracle joins in
LAYER = Case("layer", AttentionSpec.lrkv(2, 8, 2), "float32", (3, 5), 6)
CASES = (F32, BF16)

PLANTED = '''
import time
import torch
from lrkv.verify.builtin_backends import EagerBackend
from lrkv.verify.tiled import TiledBackend


class Good(TiledBackend):
    name = "good"


class NeverSupports(TiledBackend):
    name = "never-supports"
    def supports(self, case):
        return False, "not today"


class Unavailable(TiledBackend):
    name = "unavailable"
    def available(self):
        return False, "the toolchain is missing"


class NoLevels(TiledBackend):
    name = "no-levels"
    levels = frozenset()


class StringDtypes(TiledBackend):
    name = "string-dtypes"
    dtypes = ("float32", "bfloat16")


class Hangs(TiledBackend):
    name = "hangs"
    def decode_attention(self, *args, **kw):
        time.sleep(30)
        return super().decode_attention(*args, **kw)


class Segfaults(TiledBackend):
    name = "segfaults"
    def decode_attention(self, *args, **kw):
        import ctypes
        ctypes.string_at(0)  # a null read: SIGSEGV


class HardExit(TiledBackend):
    name = "hard-exit"
    def decode_attention(self, *args, **kw):
        import os
        os._exit(0)  # status 0, no exception, no atexit


class Pid(TiledBackend):
    """Writes the pid of the process it runs in to $LRKV_TEST_PID_FILE."""
    name = "pid"
    def decode_attention(self, *args, **kw):
        import os
        with open(os.environ["LRKV_TEST_PID_FILE"], "a") as f:
            f.write(f"{os.getpid()}\\n")
        return super().decode_attention(*args, **kw)


class HangsNoted(TiledBackend):
    """Sleeps after writing its pid to $LRKV_TEST_PID_FILE: the moment to send Ctrl-C."""
    name = "hangs-noted"
    def decode_attention(self, *args, **kw):
        import os
        with open(os.environ["LRKV_TEST_PID_FILE"], "a") as f:
            print(os.getpid(), file=f)
        time.sleep(60)


class Exits(TiledBackend):
    name = "exits"
    def decode_attention(self, *args, **kw):
        raise SystemExit(3)


class Interrupted(TiledBackend):
    name = "interrupted"
    def decode_attention(self, *args, **kw):
        raise KeyboardInterrupt


class AvailableRaises(TiledBackend):
    name = "available-raises"
    def available(self):
        raise RuntimeError("driver exploded")


class AvailableNotTuple(TiledBackend):
    name = "available-not-tuple"
    def available(self):
        return True


class ConfigureRaises(TiledBackend):
    name = "configure-raises"
    def configure(self, case):
        raise RuntimeError("bad launch config")


def factory_raises():
    raise RuntimeError("cannot build")


class _Returns(TiledBackend):
    def decode_attention(self, *args, **kw):
        out, lse = super().decode_attention(*args, **kw)
        return self.convert(out), lse


class ComplexOut(_Returns):
    name = "complex-out"
    convert = staticmethod(lambda out: out.to(torch.complex64) + 1e6j)


class MetaOut(_Returns):
    name = "meta-out"
    convert = staticmethod(lambda out: torch.empty(out.shape, device="meta", dtype=out.dtype))


class IntegerOut(_Returns):
    name = "integer-out"
    convert = staticmethod(lambda out: out.round().to(torch.int32))


class HalfLse(TiledBackend):
    """lse returned in the input dtype (bf16): the contract says float32."""
    name = "half-lse"
    def decode_attention(self, q, *args, **kw):
        out, lse = super().decode_attention(q, *args, **kw)
        return out, lse.to(q.dtype)


class RoundedLse(TiledBackend):
    """lse rounded to bfloat16 precision but returned as float32: the bf16 kernel's old bug."""
    name = "rounded-lse"
    def decode_attention(self, q, *args, **kw):
        out, lse = super().decode_attention(q, *args, **kw)
        return out, lse.to(torch.bfloat16).to(torch.float32)
'''


@pytest.fixture()
def planted(tmp_path, monkeypatch):
    """A module of planted backends, importable as `planted:<Class>` through --backend-path."""
    d = tmp_path / "mods"
    d.mkdir()
    (d / "planted.py").write_text(PLANTED)
    (d / "broken_syntax.py").write_text("def oops(:\n")
    (d / "broken_import.py").write_text("raise RuntimeError('import-time failure')\n")
    monkeypatch.syspath_prepend(str(d))
    return d


def cli(argv: list[str]) -> int:
    """The exit status of `lrkv ARGV` (argparse's own usage errors exit through SystemExit)."""
    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code)


def verify(tmp_path, *backends, cases=CASES, extra=(), out="out") -> tuple[int, Path]:
    argv = ["verify", "--out", str(tmp_path / out), "--no-progress"]
    for b in backends:
        argv += ["--backend", b]
    for c in cases:
        argv += ["--case", c.to_json()]
    return cli([*argv, *extra]), tmp_path / out / "report.json"


def records(path: Path) -> list[dict]:
    return json.loads(path.read_text())["records"]


def _report(backends, cases=CASES, policy: Policy | None = None) -> dict:
    policy = policy or load_policy()
    recs = run(list(cases), backends, policy)
    return build_report(recs, policy, [backend_info(b, n) for n, b in backends],
                        selection=Selection("case", cases=tuple(cases)))


@pytest.fixture(scope="module")
def good_report():
    return _report([("tiled", get_backend("tiled")), ("eager", get_backend("eager"))])


def gate_cli(tmp_path, report: dict | Path, baseline: dict | Path | None, *extra) -> int:
    if isinstance(report, dict):
        p = tmp_path / "gated.json"
        p.write_text(json.dumps(report))
        report = p
    if isinstance(baseline, dict):
        b = tmp_path / "baseline.json"
        b.write_text(json.dumps(baseline))
        baseline = b
    return cli(["gate", str(report), "--baseline", str(baseline or tmp_path / "none.json"), *extra])


# ============================================================================ 1. the rule
def _plant_oracle_bug(monkeypatch):
    """basis_v -> basis_k inside the factored oracle (the bug the review planted)."""
    true_decode = ref_lrkv.decode_attention

    def wrong(q, sk, sv, lk, lv, bk, bv, lengths, **kw):
        return true_decode(q, sk, sv, lk, lv, bk, bk, lengths, **kw)
    monkeypatch.setattr(ref_lrkv, "decode_attention", wrong)


def test_an_oracle_bug_is_refused_not_used_to_excuse_backends(monkeypatch, capsys, tmp_path):
    _plant_oracle_bug(monkeypatch)
    code, path = verify(tmp_path, "materialized", "eager", "tiled", cases=(F32, BF16, F64, LAYER))
    assert code == 1
    recs = records(path)
    assert recs and all(r["status"] in ("error", "skip") for r in recs)
    errors = [r for r in recs if r["status"] == "error"]
    assert errors and all(r["reason"].startswith("oracle inconsistent") for r in errors)
    assert not any(r["status"] == "pass" for r in recs)


def test_err_base_compares_each_path_with_its_own_float64_run():
    prep = prepare(BF16, load_policy())
    inp, inp64 = prep.inputs, prep.inputs.to(torch.float64)
    from lrkv.verify.metrics import error_metrics
    fac = error_metrics(inp.call(ref_lrkv.decode_attention)[0], inp64.call(ref_lrkv.decode_attention)[0])
    mat = error_metrics(inp.call(ref_lrkv.materialized_decode_attention)[0],
                        inp64.call(ref_lrkv.materialized_decode_attention)[0])
    assert prep.base["out"].max_abs == max(fac.max_abs, mat.max_abs)
    # lse: a float32-accumulating base (the τ-rounded inputs upcast), not the bf16 one
    lse32 = inp.to(torch.float32).call(ref_lrkv.decode_attention)[1]
    assert prep.base["lse"].max_abs >= error_metrics(lse32, prep.ref["lse"]).max_abs
    assert prep.base["lse"].max_abs < 1e-4 * prep.ref["lse"][torch.isfinite(prep.ref["lse"])].abs().max()


def test_baseline_paths_are_rows_not_verified_backends(tmp_path, good_report):
    roles = {b["name"]: b["role"] for b in good_report["backends"]}
    assert roles == {"tiled": "verified", "eager": "baseline"}
    code, path = verify(tmp_path, "eager", "materialized")
    assert code == 4
    md = (path.parent / "report.md").read_text()
    assert "nothing verified" in md.splitlines()[0] and "✅" not in md.splitlines()[0]
    assert "(baseline path)" in md


def test_lse_must_be_float32_for_half_inputs(tmp_path, planted):
    code, path = verify(tmp_path, "planted:HalfLse", cases=(BF16,))
    assert code == 1
    (rec,) = records(path)
    assert rec["status"] == "fail" and "lse: dtype bfloat16, the contract says float32" in rec["reason"]
    out, lse = prepare(BF16).inputs.call(ref_lrkv.decode_attention)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32


def test_lse_is_judged_against_a_float32_accumulating_base(tmp_path, planted):
    """bf16-precision lse (error ~1e-2 at |lse| ~ 7) fails even though it is returned as float32."""
    case = Case("kernel", AttentionSpec.lrkv(18, 128, 55, d_model=256), "bfloat16", (33, 64), 64)
    code, path = verify(tmp_path, "planted:RoundedLse", "planted:Good", cases=(case,))
    assert code == 1
    by = {r["backend"]: r for r in records(path)}
    assert by["rounded-lse"]["status"] == "fail" and "lse: max|err|" in by["rounded-lse"]["reason"]
    assert by["good"]["status"] == "pass"


@pytest.mark.parametrize("case,backend", [
    # false failures the review found in a long hypothesis hunt of correct built-ins
    (Case("kernel", AttentionSpec.lrkv(3, 16, 6, qk_norm=True), "float32", (6, 0), 9, seed=6, q_scale=100.0, tile=1),
     "tiled"),
    (Case("layer", AttentionSpec.lrkv(2, 8, 2, rope="aligned"), "float32", (14, 1), 16, seed=65536), "tiled"),
    (Case("layer-model", AttentionSpec.lrkv(4, 3, 1, qk_norm=True), "float16", (2, 2), 2, seed=1), "eager"),
    # and those the suite's own hunts found (python3 -m lrkv.verify.hunt; ci/hunt-results/): float32 logits of
    # ~150, and logit terms of ~10^3 that nearly cancel (q x100, near_cancel) moving lse's mean past 1.5x err_base
    (Case("kernel", AttentionSpec.lrkv(2, 3, 2, qk_norm=True), "float32", (2, 9, 2), 11, q_scale=100.0, tile=2),
     "examples.my_backend:backend"),
    (Case("kernel", AttentionSpec.lrkv(1, 4, 2, rope="exact", rope_theta=17.0), "float32", (5, 10, 6, 10), 15,
          seed=65536, nan_garbage=False, q_scale=100.0, near_cancel=True, tile=2), "tiled"),
], ids=["tiled-q100-tile1-lse", "layer-tiled-aligned", "layer-model-eager-fp16", "example-q100-logit-rounding",
        "tiled-cancelling-terms-lse"])
def test_correct_backends_pass_the_reported_false_failures(case, backend):
    rec = run_case(prepare(case, load_policy()), get_backend(backend), backend, load_policy().resolve(backend,
                                                                                                      case.dtype))
    assert rec["status"] == "pass", rec["reason"]


def test_atol_is_taken_per_output_at_its_own_magnitude():
    prep = prepare(Case("kernel", SPEC, "float32", (7, 40, 19), 40, q_scale=100.0), load_policy())
    lse_mag = float(prep.ref["lse"].abs().max())
    out_mag = float(prep.ref["out"].abs().max())
    assert lse_mag > 10 * out_mag
    assert prep.atol["lse"] >= 4 * torch.finfo(torch.float32).eps * 2 ** int(torch.tensor(lse_mag).log2().floor())
    # plus one rounding of the largest logit term at float32: lse inherits it, out carries it through the softmax
    from lrkv.verify.runner import logit_rounding
    from lrkv.verify.tolerance import fa3_atol
    carried = logit_rounding(prep.cond, torch.float32)
    assert carried > 0
    assert prep.atol["lse"] == pytest.approx(fa3_atol(prep.ref["lse"], "float32") + carried)
    assert prep.atol["out"] == pytest.approx(fa3_atol(prep.ref["out"], "float32") + prep.cond.value * carried)
    assert fa3_atol(prep.ref["out"], "float32") < fa3_atol(prep.ref["lse"], "float32")


# ============================================================================ 2. nothing verified is never green
def test_a_backend_that_supports_nothing_exits_4(tmp_path, planted):
    code, path = verify(tmp_path, "planted:NeverSupports")
    assert code == 4
    recs = records(path)
    assert len(recs) == len(CASES) and all(r["status"] == "skip" and "not today" in r["reason"] for r in recs)


def test_an_unavailable_backend_verifies_nothing(tmp_path, planted, capsys):
    code, path = verify(tmp_path, "planted:Unavailable")
    assert code == 3  # a toolchain is missing here: never 0
    assert "nothing verified" in capsys.readouterr().err
    assert all(r["status"] == "skip" and "unavailable" in r["reason"] for r in records(path))


def test_a_backend_without_levels_is_a_usage_error(tmp_path, planted, capsys):
    assert verify(tmp_path, "planted:NoLevels")[0] == 2
    assert "levels is empty" in capsys.readouterr().err


def test_dtypes_given_as_strings_are_understood(tmp_path, planted):
    code, path = verify(tmp_path, "planted:StringDtypes")
    assert code == 0 and [r["status"] for r in records(path)] == ["pass", "pass"]


def test_a_dtype_the_backend_lacks_is_recorded_and_exits_4(tmp_path):
    code, path = verify(tmp_path, "reference", extra=("--dtype", "float32"))
    assert code == 4
    (rec,) = records(path)
    assert rec["status"] == "skip" and "dtype float32 not supported" in rec["reason"]


def test_inapplicable_cases_are_recorded_as_skips_never_dropped(tmp_path):
    code, path = verify(tmp_path, "tiled", "reference", cases=(F32, LAYER, F64))
    recs = records(path)
    assert len(recs) == 3 * 2
    skips = {(r["backend"], r["dtype"]): r["reason"] for r in recs if r["status"] == "skip"}
    assert "dtype float32 not supported" in skips[("reference", "float32")]


def test_allow_empty_opts_out_explicitly(tmp_path, planted):
    assert verify(tmp_path, "planted:NeverSupports", extra=("--allow-empty",))[0] == 0


def test_the_gate_blocks_a_backend_that_verified_nothing(tmp_path, planted, good_report):
    baseline = gate.baseline_from_report(good_report)
    _, path = verify(tmp_path, "planted:NeverSupports", "tiled")
    assert gate_cli(tmp_path, path, baseline, "--subset") == 1
    entries = gate.classify(load_report(path), baseline, subset=True)
    assert any(e.klass == "UNVERIFIED" and e.backend == "never-supports" for e in entries)


def test_the_gate_exits_4_when_nothing_was_verified(tmp_path, planted, good_report):
    _, path = verify(tmp_path, "planted:NeverSupports")
    assert gate_cli(tmp_path, path, {"entries": {}, "schema": gate.BASELINE_SCHEMA, "created": "x", "source": {},
                                     "policy": {"source": "x", "sha256": load_policy().sha256}}) in (1, 4)
    base = tmp_path / "new-baseline.json"
    assert gate_cli(tmp_path, path, base, "--update-baseline") == 4  # refuses to write an empty baseline
    assert not base.exists()


# ============================================================================ 3. the gate re-judges
def _failing_report():
    return _report([("tiled", get_backend("tiled")), (MUTANT, get_backend(MUTANT))])


def test_a_hand_edited_pass_is_report_altered(tmp_path, good_report):
    rep = _failing_report()
    baseline = gate.baseline_from_report(good_report)
    bad = next(r for r in rep["records"] if r["status"] == "fail")
    bad["status"], bad["reason"] = "pass", ""
    assert gate_cli(tmp_path, rep, baseline, "--subset") == 1
    entries = gate.classify(rep, baseline, subset=True)
    (e,) = [e for e in entries if e.key == bad["key"]]
    assert e.klass == "ERROR" and "report altered" in e.detail and "'fail'" in e.detail


def test_an_edited_metric_or_bound_changes_nothing_but_the_metric(tmp_path, good_report):
    rep = copy.deepcopy(good_report)
    rec = next(r for r in rep["records"] if r["backend"] == "tiled" and r["status"] == "pass")
    rec["outputs"]["out"]["bound"]["max_abs"] = 1e9  # the stored bound is never read
    rec["outputs"]["out"]["metrics"]["max_abs"] = 1.0  # the metric is: now it fails, status still 'pass'
    entries = gate.classify(rep, gate.baseline_from_report(good_report))
    assert next(e for e in entries if e.key == rec["key"]).klass == "ERROR"


def test_an_unknown_status_is_a_malformed_report(tmp_path, good_report, capsys):
    rep = copy.deepcopy(good_report)
    rep["records"][0]["status"] = "crashed"
    assert gate_cli(tmp_path, rep, gate.baseline_from_report(good_report)) == 2
    err = capsys.readouterr().err
    assert "gated.json" in err and "records/0/status" in err


@pytest.mark.parametrize("mangle,field", [
    (lambda r: r.pop("policy"), "policy"),
    (lambda r: r["records"][0].update(outputs="x"), "records/0/outputs"),
    (lambda r: r.update(complete="yes"), "complete"),
])
def test_malformed_reports_exit_2_naming_the_field(tmp_path, good_report, capsys, mangle, field):
    rep = copy.deepcopy(good_report)
    mangle(rep)
    assert gate_cli(tmp_path, rep, gate.baseline_from_report(good_report)) == 2
    err = capsys.readouterr().err
    assert field in err and "Traceback" not in err


def test_unreadable_files_and_baselines_exit_2(tmp_path, good_report, capsys):
    junk = tmp_path / "junk.json"
    junk.write_text("{not json")
    assert gate_cli(tmp_path, junk, gate.baseline_from_report(good_report)) == 2
    assert "junk.json" in capsys.readouterr().err
    bad_base = gate.baseline_from_report(good_report)
    next(iter(bad_base["entries"].values()))["status"] = "fail"  # a baseline never accepts a failure
    assert gate_cli(tmp_path, good_report, bad_base) == 2
    assert "entries" in capsys.readouterr().err


def test_a_missing_baseline_names_update_baseline(tmp_path, good_report, capsys):
    assert gate_cli(tmp_path, good_report, tmp_path / "nope.json") == 2
    assert "--update-baseline" in capsys.readouterr().err


def test_a_report_made_under_a_lax_policy_is_refused(tmp_path, good_report):
    lax = tmp_path / "lax.toml"
    lax.write_text("[defaults]\nk = 1e12\nk_mean = 1e12\n")
    rep = _report([("mutant", get_backend("lrkv.mutants.decode:SqrtRankScale"))], policy=load_policy(lax))
    assert {r["status"] for r in rep["records"]} == {"pass", "skip"}  # the lax policy waves the mutant through ...
    baseline = gate.baseline_from_report(good_report)  # ... but the baseline pins the packaged policy
    assert gate_cli(tmp_path, rep, baseline, "--subset") == 1
    entries = gate.classify(rep, baseline, subset=True)
    assert any(e.key == "policy" and e.klass == "ERROR" for e in entries)


def test_a_policy_edited_inside_the_report_is_report_altered(tmp_path, good_report):
    rep = copy.deepcopy(good_report)
    rep["policy"]["defaults"]["k"] = 1e12  # sha256 no longer matches the content
    entries = gate.classify(rep, gate.baseline_from_report(good_report))
    assert [e.klass for e in entries] == ["ERROR"] and "sha256" in entries[0].detail


def test_update_baseline_refuses_a_failing_report_and_keeps_the_file(tmp_path, good_report):
    base = tmp_path / "baseline.json"
    gate.write_baseline(gate.baseline_from_report(good_report), base)
    before = base.read_bytes()
    assert gate_cli(tmp_path, _failing_report(), base, "--update-baseline") == 1
    assert base.read_bytes() == before
    assert gate_cli(tmp_path, good_report, base) == 0  # the next gate is still judged against the old baseline
    assert not list(tmp_path.glob(".baseline.json.*"))  # atomic write: no temporary left


def test_expect_is_part_of_the_id_and_a_pass_turned_xfail_regresses(good_report):
    differ = Case("layer-model", AttentionSpec.lrkv(2, 8, 2, rope="latent"), "float64", (4, 4), 4, expect="differ")
    match = differ.replace(expect="match")
    assert differ.id != match.id and differ.id.endswith("+differ")
    rep = _report([("reference", get_backend("reference"))], cases=(differ,))
    (rec,) = rep["records"]
    assert rec["status"] == "xfail"
    baseline = gate.baseline_from_report(rep)
    baseline["entries"][rec["key"]]["status"] = "pass"
    entries = gate.classify(rep, baseline)
    assert next(e for e in entries if e.key == rec["key"]).klass == "REGRESSED"


def test_judge_record_is_the_single_verdict(good_report):
    pol = Policy.from_dict(good_report["policy"])
    for r in good_report["records"]:
        if r["status"] in ("pass", "fail", "xfail"):
            assert judge_record(r, pol.resolve(r["backend"], r["dtype"]))[0] == r["status"]


# ============================================================================ 3b. every case accounted for
MUTANT = "lrkv.mutants.decode:SqrtRankScale"


def _entry(entries, key):
    return [e for e in entries if e.key == key]


def test_deleted_failing_records_are_missing_even_with_subset(tmp_path, good_report):
    rep = _failing_report()
    gone = [r["key"] for r in rep["records"] if r["status"] == "fail"]
    assert gone
    rep["records"] = [r for r in rep["records"] if r["status"] != "fail"]
    assert gate_cli(tmp_path, rep, gate.baseline_from_report(good_report), "--subset") == 1
    entries = gate.classify(rep, gate.baseline_from_report(good_report), subset=True)
    assert any("~" in k for k in gone)  # a declined case's failing twin among them
    for key in gone:
        (e,) = _entry(entries, key)
        assert e.klass == "MISSING" and ("selection" in e.detail if "~" not in key else "twin" in e.detail)


def test_duplicate_records_are_an_error(tmp_path, good_report):
    rep = copy.deepcopy(good_report)
    rec = next(r for r in rep["records"] if r["status"] == "pass")
    rep["records"] += [copy.deepcopy(rec) for _ in range(3)]
    entries = gate.classify(rep, {"entries": {}, "policy": None})
    (e,) = _entry(entries, rec["key"])
    assert e.klass == "ERROR" and "4 records of one case" in e.detail
    assert gate_cli(tmp_path, rep, gate.baseline_from_report(good_report)) == 1


def test_expect_set_to_differ_with_the_id_recomputed_is_not_in_the_selection(good_report):
    rep = _failing_report()
    bad = next(r for r in rep["records"] if r["status"] == "fail")
    case = Case.from_dict(bad["case"]).replace(expect="differ")
    bad.update(case=case.to_dict(), id=case.id, key=f"{bad['backend']}::{case.id}", expect="differ")
    entries = gate.classify(rep, gate.baseline_from_report(good_report), subset=True)
    assert [e.klass for e in _entry(entries, bad["key"])] == ["ERROR"]
    assert "not in the report's selection" in _entry(entries, bad["key"])[0].detail
    original = f"{bad['backend']}::{Case.from_dict(bad['case']).replace(expect='match').id}"
    assert [e.klass for e in _entry(entries, original)] == ["MISSING"]
    assert gate.exit_code(entries, rep) == 1


def test_a_record_whose_case_was_edited_under_its_id_is_an_error(good_report):
    rep = copy.deepcopy(good_report)
    rec = rep["records"][0]
    rep["selection"]["cases"][0]["q_scale"] = 100.0  # the selection says another case had this id
    entries = gate.classify(rep, {"entries": {}, "policy": None})
    assert any(e.klass == "ERROR" and e.key == rec["key"] for e in entries)


@pytest.mark.parametrize("reason,clear,needle", [
    ("unsupported: not today", True, "supports() accepts the case"),
    ("unsupported: not today", False, "carries results"),
    ("dtype float32 not supported; backend dtypes: bfloat16", True, "claim the case"),
    ("not implemented: the case needs level 'layer'", True, "claim the case"),
    ("backend unavailable: the toolchain is missing", True, "lists the backend as available"),
    ("", True, "must say why"),  # (the schema refuses it too: the CLI exits 2)
    ("the dog ate it", True, "runner's reasons"),
])
def test_a_fail_edited_to_a_skip_is_report_altered(tmp_path, good_report, reason, clear, needle):
    rep = _failing_report()
    bad = next(r for r in rep["records"] if r["status"] == "fail")
    bad["status"], bad["reason"] = "skip", reason
    if clear:
        bad.update(outputs=None, metrics=None, baseline_metrics=None, bound=None, ratio=None, oracle=None)
    entries = gate.classify(rep, gate.baseline_from_report(good_report), subset=True)
    (e,) = _entry(entries, bad["key"])
    assert e.klass == "ERROR" and "report altered" in e.detail and needle in e.detail, e.detail
    assert gate_cli(tmp_path, rep, gate.baseline_from_report(good_report), "--subset") == (2 if not reason else 1)


def test_a_genuine_skip_is_kept_and_re_asked(tmp_path, planted):
    code, path = verify(tmp_path, "planted:NeverSupports", "tiled")
    rep = json.loads(path.read_text())
    keys = {r["key"] for r in rep["records"] if r["backend"] == "never-supports"}
    entries = gate.classify(rep, {"entries": {}, "policy": None})
    skips = [e for e in entries if e.key in keys]
    assert len(skips) == len(keys) == 2 and all(e.klass == "SKIP" and "not re-asked" not in e.detail for e in skips)
    # where the backend cannot be imported, the skip stands and says it was not re-asked
    entries = gate.classify(rep, {"entries": {}, "policy": None}, live={"never-supports": (None, "ImportError: x"),
                                                                         "tiled": (get_backend("tiled"), "")})
    assert all("not re-asked" in e.detail for e in entries if e.key in keys)


def test_backend_info_edited_to_excuse_skips_is_an_error(good_report):
    rep = copy.deepcopy(good_report)
    info = next(b for b in rep["backends"] if b["name"] == "tiled")
    info["dtypes"] = ["float32"]  # so that the bfloat16 case "was not supported"
    rec = next(r for r in rep["records"] if r["backend"] == "tiled" and r["dtype"] == "bfloat16")
    rec.update(status="skip", reason="dtype bfloat16 not supported; backend dtypes: float32", outputs=None,
               metrics=None, baseline_metrics=None, bound=None, ratio=None, oracle=None)
    entries = gate.classify(rep, gate.baseline_from_report(good_report))
    assert any(e.klass == "ERROR" and e.key == "tiled::*" and "imported here" in e.detail for e in entries)


def test_a_renamed_backend_with_every_record_skipped_is_blocked(tmp_path, good_report):
    rep = _failing_report()
    for b in rep["backends"]:
        if b["name"] == "sqrt-rank-scale" or b["ref"] == MUTANT:
            b.update(name="renamed", available=False, reason="gone")
    for r in rep["records"]:
        if r["backend_ref"] == MUTANT:
            r.update(backend="renamed", key=f"renamed::{r['id']}", status="skip", reason="backend unavailable: gone",
                     outputs=None, metrics=None, baseline_metrics=None, bound=None, ratio=None, oracle=None)
    assert gate_cli(tmp_path, rep, gate.baseline_from_report(good_report), "--subset") == 1
    entries = gate.classify(rep, gate.baseline_from_report(good_report), subset=True)
    assert any(e.klass == "UNVERIFIED" and e.backend == "renamed" for e in entries)
    # a record of a backend the report does not list is refused outright
    rep["records"][0]["backend"] = "stranger"
    entries = gate.classify(rep, gate.baseline_from_report(good_report), subset=True)
    assert any(e.klass == "ERROR" and "does not list" in e.detail for e in entries)


def test_a_named_grid_is_rebuilt_by_the_gate(tmp_path):
    """A quick-grid report: its case list comes from the code, not from the records."""
    sel = Selection("quick", level=("kernel",), dtype=("float64",))
    cases = sel.resolve()
    b = ("tiled", get_backend("tiled"))
    pol = load_policy()
    rep = build_report(run(cases, [b], pol), pol, [backend_info(b[1], "tiled")], selection=sel)
    base = {"entries": {}, "policy": None}
    assert len(rep["records"]) == len(cases) >= 1 and gate.exit_code(gate.classify(rep, base), rep) == 0
    rec = rep["records"][0]
    short = copy.deepcopy(rep)
    short["records"] = []
    assert [e.klass for e in _entry(gate.classify(short, base), rec["key"])] == ["MISSING"]
    foreign = copy.deepcopy(rep)
    other = Case.from_dict(rec["case"]).replace(seed=5)
    foreign["records"][0].update(case=other.to_dict(), id=other.id, key=f"tiled::{other.id}")
    entries = gate.classify(foreign, base)
    assert [e.klass for e in _entry(entries, f"tiled::{other.id}")] == ["ERROR"]
    assert "not in the report's selection" in _entry(entries, f"tiled::{other.id}")[0].detail
    assert [e.klass for e in _entry(entries, rec["key"])] == ["MISSING"]


def test_a_twin_beside_a_case_that_was_not_declined_is_an_error(good_report):
    rep = copy.deepcopy(good_report)
    rec = next(r for r in rep["records"] if r["status"] == "pass")
    twin = copy.deepcopy(rec)
    twin.update(id=rec["id"] + "~dtype=float32", key=rec["key"] + "~dtype=float32",
                twin={"of": rec["id"], "changes": "dtype=float32", "case": rec["case"]})
    rep["records"].append(twin)
    entries = gate.classify(rep, {"entries": {}, "policy": None})
    assert any(e.klass == "ERROR" and "not declined" in e.detail for e in entries)


def test_copied_records_from_a_good_run_fail_replay(tmp_path, good_report, monkeypatch):
    """The failing run's records replaced by the good run's: re-judged they pass; replayed
    against the backend the report names, they do not."""
    rep = copy.deepcopy(good_report)
    good = {r["key"]: r for r in good_report["records"]}
    for b in rep["backends"]:
        if b["name"] == "tiled":
            b["ref"] = MUTANT  # the report claims to be of the mutant, with tiled's results
    for r in rep["records"]:
        if r["backend"] == "tiled":
            r["backend_ref"] = MUTANT
    mutant, tiled = get_backend(MUTANT), get_backend("tiled")
    for attr in ("name", "dtypes", "levels", "cache_formats"):  # listed exactly as the report lists it
        monkeypatch.setattr(mutant, attr, getattr(tiled, attr))
    live = {"tiled": (mutant, ""), "eager": (get_backend("eager"), "")}
    base = gate.baseline_from_report(good_report)
    assert gate.exit_code(gate.classify(rep, base, live=live), rep) == 0  # the evidence alone cannot tell
    from lrkv.verify.replay import replay

    res = replay(rep, base, 100, live, Policy.from_dict(rep["policy"]), seed=1)
    assert {r["key"] for r, _ in res.mismatches} == {k for k in good if k.startswith("tiled::")}
    assert all(why.startswith("stored pass, re-run ") for _, why in res.mismatches)
    ok = replay(good_report, base, 100, {"tiled": (get_backend("tiled"), ""), "eager": (get_backend("eager"), "")},
                Policy.from_dict(good_report["policy"]), seed=1)
    assert len(ok.replayed) == len(good_report["records"]) and not ok.mismatches  # a correct run reproduces


def test_replay_n_re_runs_n_records_or_says_why_fewer(good_report):
    """--replay 8 once re-ran 7: a tp record (never replayed here) was drawn among the 8. Only
    replayable records are drawn now; fewer are re-run only when fewer are eligible, and the
    summary says so."""
    from lrkv.verify.replay import replay

    rep = copy.deepcopy(good_report)
    n_good = len(rep["records"])
    for k in range(3 * n_good):  # tp records outnumber the rest: a draw among all would pick some
        tp = copy.deepcopy(rep["records"][k % n_good])
        tp["level"], tp["key"] = "tp", f"{tp['key']}::tp{k}"
        rep["records"].append(tp)
    live = {"tiled": (get_backend("tiled"), ""), "eager": (get_backend("eager"), "")}
    base, policy = gate.baseline_from_report(good_report), Policy.from_dict(rep["policy"])
    res = replay(rep, base, 2, live, policy, seed=7)
    assert len(res.replayed) == 2 and not res.mismatches, res.summary()
    assert res.summary().startswith("replay: 2 records re-run (seed 7), 0 did not reproduce; 2 drawn at random "
                                    "as asked (--replay 2)")
    assert f"{3 * n_good} not replayable here (tp records run on their own ranks" in res.summary()
    more = replay(good_report, base, n_good + 5, live, policy, seed=7)
    assert len(more.replayed) == n_good and (f"--replay {n_good + 5} asked, but the report has only {n_good} "
                                              "eligible pass/xfail records: all of them drawn") in more.summary()


@pytest.mark.parametrize("mask, mode", [(0o022, 0o644), (0o002, 0o664), (0o077, 0o600)])
def test_the_baseline_and_reports_are_written_with_the_umask(tmp_path, good_report, mask, mode):
    """The baseline went through mkstemp and a rename, and so was 0600 whatever the umask: a
    CI user's group could not read it. Now it has the mode a plain open() gives."""
    from lrkv.verify.tolerance_report import write_atomic

    old = os.umask(mask)
    try:
        base = tmp_path / "baseline.json"
        assert gate_cli(tmp_path, good_report, base, "--update-baseline") == 0
        assert stat.S_IMODE(base.stat().st_mode) == mode
        assert stat.S_IMODE(write_atomic(tmp_path / "out" / "report.md", "x\n").stat().st_mode) == mode
        base.chmod(0o640)  # an existing file keeps its own mode, as open() would keep it
        assert gate_cli(tmp_path, good_report, base, "--update-baseline") == 0
        assert stat.S_IMODE(base.stat().st_mode) == 0o640
    finally:
        os.umask(old)


def test_gate_replay_and_require_commit_on_the_cli(tmp_path, good_report, capsys):
    p = tmp_path / "r.json"
    p.write_text(json.dumps(good_report))
    base = gate.baseline_from_report(good_report)
    assert gate_cli(tmp_path, p, base, "--replay", "2", "--replay-seed", "7") == 0
    assert "replay: 2 records re-run (seed 7), 0 did not reproduce" in capsys.readouterr().out
    assert gate_cli(tmp_path, p, base, "--replay-seed", "7") == 2
    stale = copy.deepcopy(good_report)
    stale["git"] = {"commit": "0" * 40, "dirty": False}
    assert gate_cli(tmp_path, stale, base, "--require-commit") == 1
    assert "--require-commit: the report was made from commit 0000" in capsys.readouterr().out
    assert gate_cli(tmp_path, stale, base) == 0  # without the flag the commit is not checked


# ============================================================================ 4. faults
def test_a_hung_backend_is_an_error_and_the_run_goes_on(tmp_path, planted):
    pol = tmp_path / "quick.toml"
    pol.write_text("[defaults]\ncase_timeout = 1.0\n")
    code, path = verify(tmp_path, "planted:Hangs", "tiled", extra=("--policy", str(pol)))
    assert code == 1
    by = [(r["backend"], r["status"], r["reason"]) for r in records(path)]
    hung = [x for x in by if x[0] == "hangs"]
    assert hung[0][1] == "error" and "timeout" in hung[0][2]
    assert hung[1][1] == "error" and "hung earlier" in hung[1][2]  # not called again
    assert all(s == "pass" for b, s, _ in by if b == "tiled")


def test_interrupt_writes_an_incomplete_report_that_the_gate_refuses(tmp_path, planted, good_report, capsys):
    code, path = verify(tmp_path, "tiled", "planted:Interrupted")
    assert code == 130
    rep = json.loads(path.read_text())
    assert rep["complete"] is False and "Traceback" not in capsys.readouterr().err
    assert gate_cli(tmp_path, path, gate.baseline_from_report(good_report), "--subset") == 1
    assert gate_cli(tmp_path, path, tmp_path / "b.json", "--update-baseline") == 1


def test_a_stale_green_report_is_removed_when_a_run_starts(tmp_path):
    out = tmp_path / "out"
    assert verify(tmp_path, "tiled")[0] == 0 and (out / "report.json").exists()
    assert verify(tmp_path, "no-such-backend")[0] == 2  # even a usage error
    assert not (out / "report.json").exists() and not (out / "report.md").exists()


def test_a_segfault_or_os_exit_is_an_error_record_and_the_run_goes_on(tmp_path, planted):
    """In-process, a null read killed the run (rc -11, no report) and os._exit(0) ended it with
    exit 0 and no report; in the worker process each is an ERROR record naming the case."""
    code, path = verify(tmp_path, "planted:Segfaults", "planted:HardExit", "tiled")
    assert code == 1
    rep = json.loads(path.read_text())
    assert rep["complete"] is True
    by = {}
    for r in rep["records"]:
        by.setdefault(r["backend"], []).append(r)
    assert [r["status"] for r in by["segfaults"]] == ["error", "error"]
    assert all("SIGSEGV" in r["reason"] and r["id"] in r["reason"] for r in by["segfaults"])
    assert all(r["status"] == "error" and "exited with code 0" in r["reason"] for r in by["hard-exit"])
    assert [r["status"] for r in by["tiled"]] == ["pass", "pass"]  # the worker was restarted for them


def test_the_timeout_kills_the_worker(tmp_path, planted):
    pol = tmp_path / "quick.toml"
    pol.write_text("[defaults]\ncase_timeout = 1.0\n")
    code, path = verify(tmp_path, "planted:Hangs", "tiled", extra=("--policy", str(pol)))
    assert code == 1
    hung = [r for r in records(path) if r["backend"] == "hangs"]
    assert "the worker process was killed" in hung[0]["reason"]


def test_backend_calls_run_in_a_worker_unless_in_process(tmp_path, planted, monkeypatch):
    import os

    pids = tmp_path / "pids"
    monkeypatch.setenv("LRKV_TEST_PID_FILE", str(pids))
    assert verify(tmp_path, "planted:Pid", cases=(F32,))[0] == 0
    seen = pids.read_text().split()
    assert seen and str(os.getpid()) not in seen
    pids.unlink()
    assert verify(tmp_path, "planted:Pid", cases=(F32,), extra=("--in-process",))[0] == 0
    assert set(pids.read_text().split()) == {str(os.getpid())}  # (the server properties call it again)


@pytest.mark.parametrize("jobs", [1, 2])
def test_ctrl_c_during_a_backend_call_exits_130_with_an_incomplete_report(tmp_path, planted, jobs):
    """In-process, Ctrl-C during a call aborted ("terminate called without an active exception",
    rc -6) in about 1 run of 4; now: exit 130, an incomplete report, no traceback (twice), and no
    worker left running — under --jobs 2 too, Ctrl-C arriving while both jobs' workers hang (a
    job recorded the interrupt as its case's error, went on, and left its worker running)."""
    import os
    import signal
    import subprocess
    import sys
    import time as _time

    def alive(pid: int) -> bool:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return False
        return Path(f"/proc/{pid}/stat").exists() and Path(f"/proc/{pid}/stat").read_text().split()[2] != "Z"

    for attempt in range(3 - jobs):  # the abort was intermittent in one process: twice there
        marker, out = tmp_path / f"entered{attempt}", tmp_path / f"o{attempt}"
        env = dict(os.environ, LRKV_TEST_PID_FILE=str(marker),
                   PYTHONPATH=os.pathsep.join([str(planted), str(Path(__file__).resolve().parents[2])]))
        cases = [a for c in CASES[:jobs] for a in ("--case", c.to_json())]
        # SIGINT at its default in the child: a session started in the background by a shell
        # without job control (`.ci/run &`) ignores SIGINT, and an ignored signal survives exec
        proc = subprocess.Popen([sys.executable, "-m", "lrkv", "verify", "--backend", "planted:HangsNoted",
                                 *cases, "--jobs", str(jobs), "--out", str(out), "--no-progress"],
                                env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
        deadline = _time.monotonic() + 120

        def pids() -> list[int]:
            return [int(x) for x in marker.read_text().split()] if marker.exists() else []

        while len(pids()) < jobs and proc.poll() is None and _time.monotonic() < deadline:
            _time.sleep(0.05)
        assert len(pids()) == jobs, proc.communicate()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 130, (stdout, stderr)
        assert "Traceback" not in stderr and "terminate called" not in stderr, stderr
        report = json.loads((out / "report.json").read_text())
        assert report["complete"] is False
        gone = _time.monotonic() + 10
        while any(alive(p) for p in pids()) and _time.monotonic() < gone:
            _time.sleep(0.1)
        assert not [p for p in pids() if alive(p)], "a worker outlived the interrupted run"


def test_check_case_reports_a_crash_as_a_failure(planted):
    from lrkv.testing import check_case

    with pytest.raises(AssertionError, match="SIGSEGV"):
        check_case("planted:Segfaults", F32)


@pytest.mark.parametrize("cls,needle", [
    ("Exits", "SystemExit"),
    ("ConfigureRaises", "bad launch config"),
    ("ComplexOut", "complex"),
    ("MetaOut", "meta device"),
    ("IntegerOut", "floating point"),
])
def test_backend_faults_are_error_records(tmp_path, planted, cls, needle):
    code, path = verify(tmp_path, f"planted:{cls}", cases=(F32,))
    assert code == 1
    (rec,) = records(path)
    assert rec["status"] == "error" and needle in rec["reason"]


@pytest.mark.parametrize("target,needle", [
    ("planted:AvailableRaises", "driver exploded"),
    ("planted:AvailableNotTuple", "must return (bool, str)"),
    ("planted:factory_raises", "cannot build"),
    ("broken_syntax:backend", "SyntaxError"),
    ("broken_import:backend", "import-time failure"),
])
def test_broken_backends_exit_2_naming_them(tmp_path, planted, capsys, target, needle):
    assert verify(tmp_path, target)[0] == 2
    err = capsys.readouterr().err
    assert needle in err and target.split(":")[0] in err and "Traceback" not in err


# ============================================================================ 5. bad input (Case, policy, CLI)
@pytest.mark.parametrize("field,value,exc", [
    ("nan_garbage", "no", TypeError),
    ("near_cancel", 1, TypeError),
    ("lengths", (3.5, 2), TypeError),
    ("t_max", 1e13, TypeError),
    ("t_max", 10**13, ValueError),
    ("seed", 2**70, ValueError),
    ("q_scale", float("inf"), ValueError),
    ("splits", -1, ValueError),
    ("layout", "sideways", ValueError),
])
def test_case_fields_are_validated(field, value, exc):
    with pytest.raises(exc, match=field):
        F32.replace(**{field: value})


def test_case_json_without_spec_exits_2(tmp_path, capsys):
    case = F32.to_dict()
    del case["spec"]
    code = cli(["verify", "--backend", "tiled", "--case", json.dumps(case), "--out", str(tmp_path / "o"),
                "--no-progress"])
    assert code == 2 and "spec" in capsys.readouterr().err


@pytest.mark.parametrize("toml,needle", [
    ("[defaults]\nk = inf\n", "defaults.k must be finite"),
    ("[defaults]\nk = -1.0\n", "defaults.k must be >= 0"),
    ("[defaults]\ncase_timeout = 0.0\n", "case_timeout must be > 0"),
    ("[defaults]\nk = 'two'\n", "defaults.k must be a number"),
    ("[defaults\n", "not valid TOML"),
])
def test_policy_values_are_validated(tmp_path, toml, needle):
    p = tmp_path / "p.toml"
    p.write_text(toml)
    with pytest.raises((ValueError, TypeError), match=needle.replace("(", r"\(")):
        load_policy(p)


def test_out_under_a_file_exits_2(tmp_path, good_report, capsys):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    assert cli(["verify", "--backend", "tiled", "--out", str(blocker / "sub"), "--no-progress"]) == 2
    assert gate_cli(tmp_path, good_report, gate.baseline_from_report(good_report), "--markdown",
                    str(blocker / "gate.md")) == 2
    assert "is a file" in capsys.readouterr().err


# ============================================================================ 6. checks that could not fail before
def test_the_grid_exercises_rope_theta_and_strided_layouts():
    from lrkv.verify.grids import default_grid
    from lrkv.verify.levels.kernel import make_kernel_inputs
    grid = default_grid()
    assert {c.level for c in grid if c.spec.rope_theta != 10000.0} >= {"kernel", "layer", "layer-model"}
    strided = [c for c in grid if c.layout == "strided"]
    assert strided
    inp = make_kernel_inputs(strided[0])
    assert not inp.cache.latent_v.is_contiguous() and not inp.cache.shared_k.is_contiguous()
    assert inp.clone().cache.latent_v.stride() == inp.cache.latent_v.stride()  # the backend gets the layout as drawn


@pytest.mark.parametrize("mutant", ["IgnoresRopeTheta", "AssumesContiguousLatents"])
def test_bugs_only_a_rope_theta_or_strided_case_can_catch_are_rejected(tmp_path, mutant):
    from lrkv.verify.grids import default_grid
    grid = [c for c in default_grid() if c.level == "kernel" and c.dtype in ("float64", "float32")
            and (c.spec.rope_theta != 10000.0 or c.layout == "strided")]
    code, path = verify(tmp_path, f"lrkv.mutants.decode:{mutant}", cases=grid)
    assert code == 1 and any(r["status"] == "fail" for r in records(path))


def _tp_case(**change) -> str:
    from lrkv.verify.grids import tp_grid

    return tp_grid(2)[0].to_dict() | change


@pytest.mark.parametrize("case, extra, words", [
    (dict(tp=8), [], "tp (8) must be <= spec.n_heads (4)"),
    ({}, ["--tp", "4"], "--tp 4: --case tp:"),
    ({}, ["--tp", "2", "--case", F32.to_json()], "is a 'kernel' case"),
])
def test_tp_with_case_is_checked_not_ignored(case, extra, words, tmp_path, capsys):
    """tp > n_heads in a --case escaped as a ValueError traceback from the rank planner, and
    --tp was silently ignored next to --case (or when it disagreed with the case)."""
    code = cli(["verify", "--backend", "reference", "--case", json.dumps(_tp_case(**case)), *extra,
                "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and words in err, err
    assert not (tmp_path / "o" / "report.json").exists()


@pytest.mark.parametrize("argv, words", [
    (["--tp", "2", "--grid", "quick"], "--tp 2 runs the tp grid; --grid quick would be ignored"),
    (["--grid", "quick", "--case", F32.to_json()], "--grid quick and --case: give one"),
])
def test_a_grid_beside_tp_or_case_is_refused_not_ignored(argv, words, tmp_path, capsys):
    """--grid next to --tp (or --case) was silently ignored: the report named a grid it never ran."""
    code = cli(["verify", "--backend", "reference", *argv, "--out", str(tmp_path / "o"), "--no-progress"])
    err = capsys.readouterr().err
    assert code == 2 and words in err, err
    assert not (tmp_path / "o" / "report.json").exists()


def _grown(report: dict, key: str, value: float) -> dict:
    """The report with one record's max error set to `value` (its evidence, re-judged by the gate)."""
    rep = copy.deepcopy(report)
    rec = next(r for r in rep["records"] if r["key"] == key)
    name = next(iter(rec["outputs"]))
    rec["outputs"][name]["metrics"]["max_abs"] = value
    if name in ("out", "y"):
        rec["metrics"]["max_abs"] = value
    return rep


def test_keep_worst_holds_on_both_machines_and_still_regresses_beyond_both(tmp_path, good_report):
    # machine B's rounding noise is 0.3 of the bound where machine A's is far below it
    rec = next(r for r in good_report["records"] if r["status"] == "pass" and r["backend"] == "eager"
               and 0 < r["outputs"][next(iter(r["outputs"]))]["metrics"]["max_abs"]
               < 0.05 * r["outputs"][next(iter(r["outputs"]))]["bound"]["max_abs"])
    bound = rec["outputs"][next(iter(rec["outputs"]))]["bound"]["max_abs"]
    machine_b = _grown(good_report, rec["key"], 0.3 * bound)
    base = tmp_path / "baseline.json"
    gate.write_baseline(gate.baseline_from_report(good_report), base)
    assert gate_cli(tmp_path, machine_b, base) == 1  # B's noise against A's baseline: REGRESSED
    # accepted on B first, then on A with --keep-worst: the baseline keeps B's larger error
    gate.write_baseline(gate.baseline_from_report(machine_b), base)
    assert gate_cli(tmp_path, good_report, base, "--update-baseline", "--keep-worst") == 0
    kept = json.loads(base.read_text())
    assert kept["entries"][rec["key"]]["errors"]["max_abs"]["value"] == pytest.approx(0.3 * bound, rel=1e-3)
    assert len(kept["source"]["devices"]) >= 1
    assert gate_cli(tmp_path, machine_b, base) == 0
    assert gate_cli(tmp_path, good_report, base) == 0
    # growth beyond the worst accepted machine still says no
    assert gate_cli(tmp_path, _grown(good_report, rec["key"], 0.75 * bound), base) == 1
    # without --keep-worst the update takes A's error, and B regresses again
    assert gate_cli(tmp_path, good_report, base, "--update-baseline") == 0
    assert gate_cli(tmp_path, machine_b, base) == 1


def test_keep_worst_keeps_only_properties_held_on_both_and_needs_update_baseline(tmp_path, good_report):
    old = {"entries": {}, "properties": {"x": ["deterministic", "same_buffers"]}, "source": {"device": "cpu: A"}}
    new = {"entries": {}, "properties": {"x": ["batch_invariant", "same_buffers"], "y": ["deterministic"]},
           "source": {"device": "cpu: B"}}
    merged = gate.keep_worst(old, new)
    assert merged["properties"] == {"x": ["same_buffers"], "y": ["deterministic"]}  # y: a backend new to it
    assert merged["source"]["devices"] == ["cpu: A", "cpu: B"]
    base = tmp_path / "b.json"
    gate.write_baseline(gate.baseline_from_report(good_report), base)
    assert gate_cli(tmp_path, good_report, base, "--keep-worst") == 2
