"""The gate must be able to say no: every deliberately broken backend (lrkv.mutants.decode,
and the paged-decode / extend ones of lrkv.mutants.paged) is rejected by the harness
and the gate, while the correct backends pass the same cases."""

from __future__ import annotations

import pytest

from lrkv.cli import main
from lrkv.mutants.decode import ALL_MUTANTS
from lrkv.mutants.paged import ALL_PAGED_EXTEND_MUTANTS
from lrkv.verify import gate
from lrkv.verify.backend_registry import get_backend
from lrkv.verify.grids import mutant_grid
from lrkv.verify.tolerance_report import build_report
from lrkv.verify.runner import backend_info, run
from lrkv.verify.tolerance import load_policy
from lrkv.verify.selection import Selection

CORRECT = ("reference", "materialized", "eager", "tiled", "examples.my_backend:backend")


def _report(backends):
    policy = load_policy()
    records = run(mutant_grid(), backends, policy)
    return build_report(records, policy, [backend_info(b, n) for n, b in backends],
                        selection=Selection("mutants"))


@pytest.fixture(scope="module")
def correct_report():
    return _report([(n, get_backend(n)) for n in CORRECT])


@pytest.fixture(scope="module")
def baseline(correct_report):
    return gate.baseline_from_report(correct_report)


def test_correct_backends_pass_the_mutant_grid(correct_report, baseline):
    recs = correct_report["records"]
    assert {r["backend"] for r in recs} >= {"reference", "materialized", "eager", "tiled", "my-splitk"}
    bad = [(r["backend"], r["id"], r["reason"]) for r in recs if r["status"] not in ("pass", "skip")]
    assert not bad, bad
    skips = [r for r in recs if r["status"] == "skip"]
    # levels and dtypes a backend lacks: recorded, not dropped
    assert all("not supported" in r["reason"] or r["reason"].startswith("not implemented") for r in skips)
    verified = {(r["backend"], r["level"]) for r in recs if r["status"] == "pass"}
    assert {("reference", "kernel-paged"), ("reference", "kernel-extend"), ("eager", "kernel-extend")} <= verified
    entries = gate.classify(correct_report, baseline)
    assert gate.exit_code(entries, correct_report) == 0


@pytest.mark.parametrize("mutant", ALL_MUTANTS + ALL_PAGED_EXTEND_MUTANTS, ids=lambda m: m.name)
def test_every_mutant_is_rejected(mutant, correct_report, baseline):
    assert mutant.bug, "each mutant says what is wrong with it"
    report = _report([(mutant.name, mutant())])
    recs = report["records"]
    assert recs, f"{mutant.name} ran on no case of the mutant grid"
    assert not any(r["status"] == "error" for r in recs), [r["reason"] for r in recs]
    assert any(r["status"] == "fail" for r in recs), [(r["id"], r["ratio"]) for r in recs]
    # through the gate, together with the correct backends' records: blocked, and only by the mutant
    combined = dict(correct_report, records=correct_report["records"] + recs)
    combined["backends"] = correct_report["backends"] + report["backends"]
    entries = gate.classify(combined, baseline)
    assert gate.exit_code(entries, combined) == 1
    blocking = {e.backend for e in entries if e.klass in gate.BLOCKING}
    assert blocking == {mutant.name}


def test_mutant_through_the_cli(tmp_path):
    assert main(["verify", "--backend", "lrkv.mutants.decode:WrongHeadBasis", "--grid", "mutants",
                 "--out", str(tmp_path), "--no-progress"]) == 1
    assert main(["gate", str(tmp_path / "report.json"), "--baseline", str(tmp_path / "report.json")]) == 1
