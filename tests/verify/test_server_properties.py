"""The server properties (lrkv.verify.server_properties): every planted server bug
(lrkv.mutants.server) is rejected through `lrkv verify` and `lrkv gate`, the correct
backends hold every property they declare, and the gate re-judges what it can."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from lrkv.cli import main
from lrkv.mutants.server import BATCH_RULE_MUTANTS, SERVER_MUTANTS
from lrkv.spec import AttentionSpec
from lrkv.verify import gate
from lrkv.verify.backend_registry import get_backend
from lrkv.verify.case import Case
from lrkv.verify.runner import backend_info, run
from lrkv.verify.selection import Selection
from lrkv.verify.server_properties import (ALWAYS_REQUIRED, FIRST_DRAW_FAILED, NEED_A_PASSING_CASE, PROPERTIES,
                                            declarations, failures, plan, required, second_draws, selected)
from lrkv.verify.tolerance import load_policy
from lrkv.verify.tolerance_report import build_report, validate_report

SPEC = AttentionSpec.lrkv(3, 16, 5)
F32 = Case("kernel", SPEC, "float32", (9, 40, 23), 48, seed=3)  # ragged: rotation gives new lengths
F64 = Case("kernel", SPEC, "float64", (17, 5, 30), 32, splits=2)


def cli(argv) -> int:
    try:
        return main(argv)
    except SystemExit as e:
        return int(e.code)


def _report(cases, backends):
    pol = load_policy()
    recs = run(list(cases), backends, pol)
    return build_report(recs, pol, [backend_info(b, n) for n, b in backends],
                        selection=Selection("case", cases=tuple(cases)))


@pytest.mark.parametrize("prop", list(SERVER_MUTANTS))
def test_each_server_bug_is_rejected_by_verify_and_the_gate(prop, tmp_path, capsys):
    ref = f"lrkv.mutants.server:{SERVER_MUTANTS[prop].__name__}"
    out = tmp_path / "r"
    code = cli(["verify", "--backend", ref, "--case", F32.to_json(), "--case", F64.to_json(), "--out", str(out),
                "--no-progress"])
    text = capsys.readouterr()
    assert code == 1, text.err[-2000:]
    rep = json.loads((out / "report.json").read_text())
    bad = [(r, n) for r, n, _ in failures(rep["records"])]
    assert any(n == prop for _, n in bad), rep["properties"]
    if any(n == prop and r["status"] == "pass" for r, n in bad):  # printed unless the record itself failed
        assert f"property {prop}" in text.err or f"property {prop}" in text.out
    # the gate blocks it, also against an empty baseline
    assert cli(["gate", str(out / "report.json"), "--baseline", str(tmp_path / "b.json"), "--update-baseline"]) == 1
    entries = gate.classify(rep, {"entries": {}, "policy": None})
    assert any(e.klass == "FAIL" and e.key.endswith(f"#{prop}") for e in entries)
    assert gate.exit_code(entries, rep) == 1


@pytest.mark.parametrize("rule", list(BATCH_RULE_MUTANTS))
def test_each_split_count_rule_is_rejected_when_declared_batch_invariant(rule):
    """Each rule gives one split count on the batch reversed and on its longest sequence alone
    (the two variants checked before); the variants that change the batch size, the total
    tokens and the longest length each reject one."""
    rep = _report([F32], [(rule, BATCH_RULE_MUTANTS[rule]())])
    (rec,) = rep["records"]
    entry = rec["properties"]["batch_invariant"]
    assert rec["status"] == "pass" and entry["required"] and entry["status"] == "fail", entry
    assert gate.exit_code(gate.classify(rep, {"entries": {}, "policy": None}), rep) == 1


def test_a_numeric_bug_is_not_reported_as_a_server_property_failure():
    """same_buffers (and batch_invariant, compiles) are judged only on a case whose first draw
    passed: a wrong kernel fails its case, and its second draw in the same buffers is not a
    second, misleading failure — while the buffer-reuse bug, which passes its first draw, is
    still a failed same_buffers."""
    from lrkv.mutants.decode import SqrtRankScale

    rep = _report([F32], [("numeric", SqrtRankScale()), ("pointer", SERVER_MUTANTS["same_buffers"]())])
    numeric, pointer = rep["records"]
    assert numeric["status"] == "fail" and set(numeric["properties"]) >= set(ALWAYS_REQUIRED)
    for name, e in numeric["properties"].items():  # those that compare the backend with itself still run
        assert (e["status"], e["reason"]) == (("skip", FIRST_DRAW_FAILED) if name in NEED_A_PASSING_CASE
                                              else ("pass", "")), (name, e)
    assert pointer["status"] == "pass" and pointer["properties"]["same_buffers"]["status"] == "fail"
    assert [(r["backend"], n) for r, n, _ in failures(rep["records"])] == [("mutant-pointer-cache", "same_buffers")]
    assert rep["properties"]["mutant-scale-sqrt-r"]["same_buffers"]["ran"] == 0
    validate_report(json.loads(json.dumps(rep)))
    entries = gate.classify(rep, {"entries": {}, "policy": None})
    bad = {(e.backend, e.klass, e.key.split("#")[-1] if "#" in e.key else "case") for e in entries
           if e.klass not in ("PASS", "UNCOVERED")}
    assert ("mutant-scale-sqrt-r", "FAIL", "case") in bad and ("mutant-pointer-cache", "FAIL", "same_buffers") in bad
    assert not [b for b in bad if b[0] == "mutant-scale-sqrt-r" and b[2] != "case"], bad
    # a property skipped as not judged on a record that passes is an altered report
    forged = copy.deepcopy(rep)
    forged["records"][1]["properties"]["same_buffers"] = dict(numeric["properties"]["same_buffers"])
    assert any(e.klass == "ERROR" and e.key.endswith("#same_buffers") and "report altered" in e.detail
               for e in gate.classify(forged, {"entries": {}, "policy": None}))


def test_check_server_properties_names_the_case_that_failed_not_a_property():
    from lrkv.mutants.decode import SqrtRankScale
    from lrkv.testing import check_server_properties

    with pytest.raises(AssertionError) as e:
        check_server_properties(SqrtRankScale(), [F32], backend_ref="lrkv.mutants.decode:SqrtRankScale")
    text = str(e.value)
    assert text.startswith(f"FAIL mutant-scale-sqrt-r {F32.id} (the case itself fails: its properties judged")
    assert "\n  where: out: sequences 0, 1, 2 of 3" in text and "same_buffers" not in text


def test_the_split_order_properties_run_on_a_probe_per_batch_size_in_low_precision():
    cases = [F64, F32, F32.replace(seed=9), F32.replace(dtype="bfloat16"), F32.replace(lengths=(9, 40), seed=4)]
    shares = plan(cases)
    probes = [c.dtype + str(len(c.lengths)) for c in cases if shares[c.id][1]]
    assert probes == ["float323", "bfloat163", "float322"]  # float64 only where a level has nothing else
    assert plan([F64])[F64.id] == (0, True)


def test_an_unwritten_head_is_rejected_whatever_the_plain_call_returned():
    """The plain call's head 0 holds whatever memory held — the answer, sometimes; the property
    runs with torch.empty poisoned, so it names the rows either way."""
    rep = _report([F32], [("unwritten", SERVER_MUTANTS["outputs_written"]())])
    (rec,) = rep["records"]
    entry = rec["properties"]["outputs_written"]
    assert entry["status"] == "fail" and "never written" in entry["reason"] and "[0, 0]" in entry["reason"]


@pytest.mark.parametrize("name", ["tiled", "examples.my_backend:backend", "examples.my_paged_backend:backend",
                                  "examples.my_extend_backend:backend"])
def test_correct_backends_hold_every_property(name):
    from lrkv.verify.grids import mutant_grid

    b = get_backend(name)
    level = sorted(b.levels & {"kernel", "kernel-paged", "kernel-extend"})[0]
    case = next(c for c in mutant_grid() if c.level == level and c.dtype == "float32")
    rep = _report([case], [(name, b)])
    (props,) = [r["properties"] for r in rep["records"] if r.get("properties")]
    assert set(props) == set(PROPERTIES) - {"compiles"}, props
    # batch invariance is a claim: the page-by-page example sweeps as many pages as the batch's
    # longest sequence, so a shorter one rounds differently in another batch (recorded, not required)
    held = [n for n in props if n != "batch_invariant" or declarations(b)["batch_invariant"] or name == "tiled"]
    assert all(props[n]["status"] == "pass" for n in held), props


def test_triton_batch_invariant_mode_is_declared_and_verified(kernel_interpreter):
    from lrkv.kernels.triton_backend import TritonBackend

    case = Case("kernel", SPEC, "float32", (300, 17, 520, 9), 600)  # long enough for several splits
    default, invariant = TritonBackend(), TritonBackend(batch_invariant=True)
    assert invariant.batch_invariant is True and TritonBackend.batch_invariant is False
    rep = _report([case], [("triton", default), ("triton-batch-invariant", invariant)])
    by = {r["backend"]: r["properties"] for r in rep["records"]}
    bi = by[invariant.name]
    assert bi["batch_invariant"] == {"status": "pass", "required": True, "reason": ""}
    assert all(e["status"] == "pass" for e in bi.values())
    assert by["triton"]["batch_invariant"]["required"] is False  # the default mode does not claim it


@pytest.fixture()
def kernel_interpreter():
    pytest.importorskip("triton")
    from lrkv.kernels import runtime

    with runtime.interpreter():
        yield


def test_required_follows_the_declarations():
    tiled = get_backend("tiled")
    assert [p for p in PROPERTIES if required(p, declarations(tiled))] == list(ALWAYS_REQUIRED)
    assert required("deterministic", declarations(SERVER_MUTANTS["deterministic"]()))
    assert required("batch_invariant", declarations(SERVER_MUTANTS["batch_invariant"]()))
    assert "compiles" not in selected((0, True), declarations(tiled))
    assert "compiles" in selected((0, True), declarations(SERVER_MUTANTS["compiles"]()))
    assert "compiles" in selected((0, True), declarations(tiled), frozenset({"compiles"}))  # the policy asks
    assert required("deterministic", declarations(tiled), frozenset({"deterministic"}))
    rotated, reseeded = second_draws(F32)
    assert rotated.lengths == (40, 23, 9) and reseeded.lengths == F32.lengths
    assert rotated.seed == reseeded.seed != F32.seed


def test_the_gate_re_judges_properties():
    rep = _report([F32], [("tiled", get_backend("tiled"))])
    base = gate.baseline_from_report(rep)
    assert base["properties"]["tiled"] == sorted(set(PROPERTIES) - {"compiles"})
    assert gate.exit_code(gate.classify(rep, base), rep) == 0
    # `required` flipped off: recomputed from the backend's declarations
    flipped = copy.deepcopy(rep)
    flipped["records"][0]["properties"]["same_buffers"]["required"] = False
    assert any(e.klass == "ERROR" and "required" in e.detail for e in gate.classify(flipped, base))
    # the same-buffers verdict is re-judged from its evidence
    lied = copy.deepcopy(rep)
    ev = lied["records"][0]["properties"]["same_buffers"]["outputs"]["out"]["metrics"]
    ev["max_abs"] = 1.0
    assert any(e.klass == "ERROR" and "its evidence says 'fail'" in e.detail for e in gate.classify(lied, base))
    # a property the baseline held, failing now: the failing record blocks (FAIL), and unchecked is MISSING
    failing = copy.deepcopy(rep)
    failing["records"][0]["properties"]["deterministic"] = {"status": "fail", "required": False, "reason": "differs"}
    from lrkv.verify.tolerance_report import property_table
    failing["properties"] = property_table(failing["records"])
    assert any(e.klass == "REGRESSED" and "deterministic" in e.detail for e in gate.classify(failing, base))
    unchecked = copy.deepcopy(rep)
    del unchecked["records"][0]["properties"]
    unchecked["properties"] = {}
    assert any(e.klass == "MISSING" and "not checked" in e.detail for e in gate.classify(unchecked, base))


def test_a_record_stripped_of_its_properties_or_given_extra_ones_is_an_altered_report():
    """Which properties a record carries is recomputed from the selection (plan, selected):
    deleting them cannot hide a failure, even against a baseline that holds none."""
    rep = _report([F32, F64], [("tiled", get_backend("tiled"))])
    empty = {"entries": {}, "policy": None}
    assert gate.exit_code(gate.classify(rep, empty), rep) == 0
    stripped = copy.deepcopy(rep)
    del stripped["records"][0]["properties"]
    found = [e for e in gate.classify(stripped, empty) if e.key.endswith("#properties")]
    assert found and found[0].klass == "ERROR" and "no deterministic" in found[0].detail, found
    assert gate.exit_code(gate.classify(stripped, empty), stripped) == 1
    extra = copy.deepcopy(rep)
    extra["records"][1]["properties"] = copy.deepcopy(rep["records"][0]["properties"])  # F64 is not in the share
    assert any(e.klass == "ERROR" and "an unexpected" in e.detail for e in gate.classify(extra, empty))


class Undeclared(SERVER_MUTANTS["batch_invariant"]):
    """The batch-dependent split without the declaration: only a policy can require the property."""
    name = "undeclared-batch-split"
    batch_invariant = False


def test_the_policy_can_require_a_property_the_backend_does_not_declare(tmp_path):
    from lrkv.verify.tolerance import Policy

    plain = load_policy()
    asked = Policy.from_dict({**{k: v for k, v in plain.to_dict().items() if k != "sha256"},
                              "properties": {"backend": {Undeclared.name: {"require": ["batch_invariant"]}}}})
    assert asked.sha256 != plain.sha256 and asked.required_properties(Undeclared.name) == {"batch_invariant"}
    assert Policy.from_dict(plain.to_dict()).sha256 == plain.sha256  # an empty table leaves the sha alone
    backends = [(Undeclared.name, Undeclared())]
    for pol, blocks in ((plain, False), (asked, True)):
        recs = run([F32], backends, pol, isolation="inprocess")
        entry = recs[0]["properties"]["batch_invariant"]
        assert entry["status"] == "fail" and entry["required"] is blocks
        rep = build_report(recs, pol, [backend_info(b, n) for n, b in backends],
                           selection=Selection("case", cases=(F32,)))
        validate_report(json.loads(json.dumps(rep)))  # the policy's table is in the published schema
        entries = gate.classify(rep, {"entries": {}, "policy": None}, live={Undeclared.name: (backends[0][1], "")})
        assert any(e.klass == "FAIL" and e.key.endswith("#batch_invariant") for e in entries) is blocks
        assert gate.exit_code(entries, rep) == int(blocks)
    with pytest.raises(ValueError, match="unknown server properties"):
        Policy.from_dict({**plain.to_dict(), "sha256": None, "properties": {"require": ["fast"]}})
    # as a project writes it: [policy.properties] in lrkv.toml, merged over the packaged policy
    (tmp_path / "lrkv.toml").write_text('[policy.properties]\nrequire = ["deterministic"]\n'
                                        '[policy.properties.backend.tiled]\nrequire = ["compiles"]\n')
    project = load_policy(directory=tmp_path)
    assert project.required_properties("tiled") == {"deterministic", "compiles"}
    assert project.required_properties("eager") == {"deterministic"}


class NoFloat64(SERVER_MUTANTS["outputs_written"]):
    """The unwritten-head bug in a backend without float64."""
    dtypes = tuple(d for d in SERVER_MUTANTS["outputs_written"]().dtypes if d != torch.float64)


def test_a_backend_declining_a_levels_property_case_still_has_it_checked_on_the_twin():
    """A level's first case carries the always-required properties; a backend without float64
    declines it and runs its float32 twin, which must carry them (else an unwritten head at a
    level whose first case is float64 goes unnoticed)."""
    cases = [F64, F64.replace(seed=5)]  # index 0 (declined, twinned) runs the properties
    rep = _report(cases, [("unwritten", NoFloat64())])
    twin = next(r for r in rep["records"] if r.get("twin") and r["twin"]["of"] == F64.id)
    assert set(ALWAYS_REQUIRED) <= set(twin["properties"]), twin.get("properties")
    assert twin["properties"]["outputs_written"]["status"] == "fail"
    entries = gate.classify(rep, {"entries": {}, "policy": None})
    assert gate.exit_code(entries, rep) == 1
    # the gate expects them there: a twin record stripped of its properties is an altered report
    stripped = copy.deepcopy(rep)
    next(r for r in stripped["records"] if r.get("twin"))["properties"] = {}
    assert any(e.klass == "ERROR" and "report altered" in e.detail and "no outputs_written" in e.detail
               for e in gate.classify(stripped, {"entries": {}, "policy": None}))
