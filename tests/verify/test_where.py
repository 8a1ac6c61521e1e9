"""A failure says where: each failing record names its worst element (output, batch element,
head, channel; an extend token by its sequence) and the first positions of a NaN/inf
mismatch, in its reason and as evidence ("where") — which can never change a verdict.

Each test plants a wrong element at a known position and asserts it is named exactly."""

from __future__ import annotations

import copy
import re

import pytest
import torch

from lrkv.spec import AttentionSpec
from lrkv.testing import check_case
from lrkv.verify import gate
from lrkv.verify.backend_registry import get_backend
from lrkv.verify.builtin_backends import EagerBackend, ReferenceBackend
from lrkv.verify.case import Case
from lrkv.verify.levels import LEVEL_MODULES, get_level
from lrkv.mutants.paged import PagedMutant
from lrkv.verify.cells import failing_cells, shared, where_lines
from lrkv.verify.metrics import locate
from lrkv.verify.runner import backend_info, prepare, run, run_case
from lrkv.verify.selection import Selection
from lrkv.verify.tolerance import Tolerance, judge_record, load_policy
from lrkv.verify.tolerance_report import build_report, validate_report

SPEC = AttentionSpec.lrkv(3, 16, 5)
DECODE = Case("kernel", SPEC, "float32", (9, 17, 3), 20)
PAGED = Case.flat("kernel-paged", SPEC, "float32", (9, 8), 12, page_size=4)
EXTEND = Case.flat("kernel-extend", SPEC, "float32", (9, 8, 4), 12, n_new=(3, 0, 4))  # sequence 1: no new token
LAYER = Case("layer", AttentionSpec.lrkv(2, 8, 2), "float32", (3, 5), 6)
MUTANT = "lrkv.mutants.decode:NoPrivateRescale"


def _bump(t: torch.Tensor, index: tuple, by: float = 0.05) -> torch.Tensor:
    t = t.clone()
    t[index] += by
    return t


class WrongElements(EagerBackend):
    """Decode: out wrong at (batch 2, head 1, channel 7), lse at (batch 1, head 2)."""

    name = "wrong-elements"

    def decode_attention(self, *args, **kw):
        out, lse = super().decode_attention(*args, **kw)
        return _bump(out, (2, 1, 7)), _bump(lse, (1, 2))


class NaNs(EagerBackend):
    """Decode: NaN in out at batch 0, head 2, channels 1..4."""

    name = "nans"

    def decode_attention(self, *args, **kw):
        out, lse = super().decode_attention(*args, **kw)
        out = out.clone()
        out[0, 2, 1:5] = float("nan")
        return out, lse


class PagedWrong(ReferenceBackend):
    name = "paged-wrong"

    def paged_decode_attention(self, *args, **kw):
        out, lse = super().paged_decode_attention(*args, **kw)
        return _bump(out, (1, 0, 3)), lse


class ExtendWrong(ReferenceBackend):
    """Token 3 is sequence 2's first new token (sequence 0 owns tokens 0-2, sequence 1 none)."""

    name = "extend-wrong"

    def extend_attention(self, *args, **kw):
        out, lse = super().extend_attention(*args, **kw)
        return _bump(out, (3, 1, 4)), lse


class LayerWrong(ReferenceBackend):
    name = "layer-wrong"

    def layer_step(self, weights, x_t, cache, positions):
        y, cache = super().layer_step(weights, x_t, cache, positions)
        return _bump(y, (1, 5)), cache


class FullLastPageDropped(PagedMutant):
    """A last-page bug: the last page's length taken as length % page, so a sequence whose
    length is an exact multiple of the page size loses its whole last page."""

    name = "full-last-page-dropped"

    def read_lengths(self, lengths, page, capacity, page_table):
        return torch.where((lengths % page == 0) & (lengths > 0), lengths - page, lengths)


class UnmaskedLastPage(PagedMutant):
    """The last page read whole, its slots past the length unmasked (garbage: NaN here)."""

    name = "unmasked-last-page"

    def read_lengths(self, lengths, page, capacity, page_table):
        return (-(-lengths // page) * page).clamp(max=capacity).to(lengths.dtype)


LAST_PAGE = Case.flat("kernel-paged", SPEC, "float32", (9, 8, 3, 16), 16, page_size=4)  # 8 and 16: full last pages


def _record(case: Case, backend) -> dict:
    return run_case(prepare(case), backend, backend.name, Tolerance())


def test_decode_names_the_batch_element_head_and_channel_of_each_output():
    rec = _record(DECODE, WrongElements())
    assert rec["status"] == "fail"
    where = {n: ev["where"]["worst"]["at"] for n, ev in rec["outputs"].items()}
    assert where == {"out": {"batch": 2, "head": 1, "channel": 7}, "lse": {"batch": 1, "head": 2}}
    assert re.fullmatch(r"out: max\|err\| .* at batch 2, head 1, channel 7 \(ref \S+, got \S+\); "
                        r"lse: max\|err\| .* at batch 1, head 2 \(ref \S+, got \S+\)", rec["reason"])
    worst = rec["outputs"]["out"]["where"]["worst"]
    assert worst["got"] - worst["ref"] == pytest.approx(0.05, rel=1e-3)


def test_nan_mismatches_name_their_first_positions_and_count():
    rec = _record(DECODE, NaNs())
    nf = rec["outputs"]["out"]["where"]["nonfinite"]
    assert nf["count"] == 4 and [e["at"]["channel"] for e in nf["first"]] == [1, 2, 3]
    assert rec["outputs"]["lse"]["where"]["nonfinite"] is None
    assert rec["status"] == "fail" and "at 4 positions, first: (batch 0, head 2, channel 1: got nan, ref " \
        in rec["reason"] and rec["reason"].endswith(", …")


def test_paged_names_the_batch_element():
    rec = _record(PAGED, PagedWrong())
    assert rec["status"] == "fail" and " at batch 1, head 0, channel 3 (ref " in rec["reason"]


def test_extend_names_the_token_its_sequence_and_its_index_among_the_new_tokens():
    rec = _record(EXTEND, ExtendWrong())
    assert rec["outputs"]["out"]["where"]["worst"]["at"] == \
        {"token": 3, "sequence": 2, "new_token": 0, "new_tokens": 4, "head": 1, "channel": 4}
    assert rec["status"] == "fail" and " at token 3 (sequence 2, new token 0 of 4), head 1, channel 4 (ref " \
        in rec["reason"]


def test_layer_level_names_its_axes():
    rec = _record(LAYER, LayerWrong())
    assert rec["status"] == "fail" and " at batch 1, feature 5 (ref " in rec["reason"]


def test_every_level_names_its_outputs_axes():
    assert all(get_level(name).position is not None for name in LEVEL_MODULES)


def test_locate_without_names_and_without_finite_positions():
    ref = torch.zeros(2, 3)
    assert locate(_bump(ref, (1, 2)), ref)["worst"]["at"] == {"axis 0": 1, "axis 1": 2}
    assert locate(torch.full((2,), float("nan")), ref[0, :2]) == {
        "worst": None, "nonfinite": {"count": 2, "first": [{"at": {"axis 0": i}, "got": "nan", "ref": 0.0}
                                                           for i in (0, 1)]}}


# ---------------------------------------------------------------- failing cells and what they share
def test_a_last_page_bug_names_exactly_the_sequences_whose_length_is_a_multiple_of_the_page_size():
    rec = _record(LAST_PAGE, FullLastPageDropped())
    assert rec["status"] == "fail"
    cells = rec["outputs"]["out"]["where"]["cells"]
    assert cells["sequences"] == {"count": 2, "of": 4, "first": [1, 3]}  # lengths 8 and 16; 9 and 3 pass
    assert cells["heads"] == {"count": 3, "of": 3, "first": [0, 1, 2]}
    assert (cells["count"], cells["of"], cells["rule"]) == (6, 12, "max_abs")
    assert [c["at"] for c in cells["first"]] == [{"sequence": s, "head": h} for s in (1, 3) for h in range(3)]
    assert "exactly the sequences whose length is a multiple of the page size 4 fail (a full last page)" \
        in cells["shared"]
    out, lse = where_lines(rec)
    assert out.startswith("out: sequences 1, 3 of 4, all 3 heads: exactly the sequences whose length is a multiple")
    assert lse.startswith("lse: the same sequences and heads as out (6 of 12 cells")


def test_a_cell_fails_when_an_element_exceeds_the_max_bound():
    """One element bumped: one cell of each output, the bumped one; the allowance is the bound's max|err|."""
    rec = _record(DECODE, WrongElements())
    for name, at in (("out", {"sequence": 2, "head": 1}), ("lse", {"sequence": 1, "head": 2})):
        ev = rec["outputs"][name]
        cells = ev["where"]["cells"]
        assert cells["count"] == 1 and [c["at"] for c in cells["first"]] == [at]
        assert cells["allowance"] == ev["bound"]["max_abs"] and cells["of"] == 9
        assert cells["first"][0]["max_err"] == pytest.approx(0.05, rel=1e-3)
    assert "sequence 2 of 3, head 1 of 3:" in where_lines(rec)[0]


def test_a_passing_output_pays_for_no_cells():
    rec = _record(DECODE, EagerBackend())
    assert rec["status"] == "pass" and all("cells" not in ev["where"] for ev in rec["outputs"].values())
    rec = _record(DECODE, NaNs())  # out fails, lse passes
    assert "cells" in rec["outputs"]["out"]["where"] and "cells" not in rec["outputs"]["lse"]["where"]


def test_the_mean_clause_alone_uses_the_mean_bound():
    ref = torch.zeros(2, 3, 4)
    name = get_level("kernel").position
    cells = failing_cells(ref + 0.6, ref, 1.0, 0.5, DECODE, lambda ix: name(DECODE, "out", ix))
    assert (cells["rule"], cells["allowance"], cells["count"], cells["of"]) == ("mean_abs", 0.5, 6, 6)
    cells = failing_cells(_bump(ref, (1, 2, 3), 2.0), ref, 1.0, 0.5, DECODE, lambda ix: name(DECODE, "out", ix))
    assert (cells["rule"], cells["count"], cells["first"][0]["at"]) == ("max_abs", 1, {"sequence": 1, "head": 2})


def test_a_nan_garbage_read_names_the_sequences_that_end_inside_a_page():
    """The last page read whole: NaN garbage in exactly the sequences whose last page is partly
    filled (9 and 3 of page 4); a full last page (8, 16) has no garbage slot to read."""
    rec = _record(LAST_PAGE, UnmaskedLastPage())
    cells = rec["outputs"]["out"]["where"]["cells"]
    assert cells["sequences"]["first"] == [0, 2] and all(c.get("nonfinite") for c in cells["first"])
    shared = "; ".join(cells["shared"])
    assert "every failing sequence ends inside a page" in shared and "NaN garbage" in shared
    assert "NaN where the reference is finite" in shared


def test_an_extend_cell_is_a_token_of_a_sequence_at_its_position():
    rec = _record(EXTEND, ExtendWrong())
    (cell,) = rec["outputs"]["out"]["where"]["cells"]["first"]
    assert cell["at"] == {"token": 3, "sequence": 2, "position": 0, "head": 1}  # length 4, 4 new tokens


def test_what_the_failing_sequences_share_names_the_head_major_pool_and_the_heads():
    case = Case.flat("kernel-paged", SPEC, "float32", (9, 8), 12, page_size=4, page_hnd=True)
    facts = shared(case, [0, 1], [1, 2], [], False)
    assert "the page pool is head-major (page_hnd: [pages, heads, page, ...])" in facts
    assert "only heads 1, 2 of 3" in facts


def test_the_pytest_path_prints_where():
    with pytest.raises(AssertionError, match=r"out: max\|err\| .* at batch 2, head 1, channel 7 \(ref "):
        check_case(WrongElements(), DECODE)


# ---------------------------------------------------------------- the location is description only
@pytest.fixture(scope="module")
def report():
    policy = load_policy()
    backends = [("tiled", get_backend("tiled")), (MUTANT, get_backend(MUTANT))]
    recs = run([DECODE], backends, policy)
    return build_report(recs, policy, [backend_info(b, n) for n, b in backends],
                        selection=Selection("case", cases=(DECODE,)))


def test_the_gate_shows_where_a_failure_is(report):
    entries = gate.classify(report, gate.baseline_from_report(report), subset=True)
    fail = next(e for e in entries if e.klass == "FAIL" and e.backend == "mutant-no-private-rescale")
    rec = next(r for r in report["records"] if r["key"] == fail.key)
    at = rec["outputs"]["out"]["where"]["worst"]["at"]
    assert f" at batch {at['batch']}, head {at['head']}, channel {at['channel']} (ref " in fail.detail


def test_a_forged_where_changes_no_verdict(report):
    rep = copy.deepcopy(report)
    policy = load_policy()
    for r in rep["records"]:
        for ev in (r["outputs"] or {}).values():  # claim the worst error anywhere, NaN included
            ev["where"] = {"worst": {"at": {"batch": 0}, "got": 1e9, "ref": 0.0},
                           "nonfinite": {"count": 99, "first": [{"at": {"batch": 0}, "got": "nan", "ref": 0.0}]},
                           "cells": {"rule": "max_abs", "allowance": 0.0, "count": 9, "of": 9, "shared": ["all"],
                                     "first": [{"at": {"sequence": 0, "head": 0}, "max_err": "inf", "nonfinite": 3}]}}
        for i, ev in enumerate((r["outputs"] or {}).values() if r["status"] == "fail" else ()):
            if i:
                del ev["where"]  # or erase it from a failure
            else:
                del ev["where"]["cells"]  # or its failing cells
    validate_report(rep)  # a well-formed location is accepted ...
    for old, new in zip(report["records"], rep["records"]):
        if new["outputs"]:  # ... and re-judged to the same status, from the numbers alone
            assert judge_record(new, policy.resolve(new["backend"], new["dtype"]))[0] == old["status"]
    entries = gate.classify(rep, gate.baseline_from_report(report), subset=True)
    assert {e.key: e.klass for e in entries} == \
        {e.key: e.klass for e in gate.classify(report, gate.baseline_from_report(report), subset=True)}


CELLS = {"rule": "max_abs", "allowance": 1e-6, "count": 1, "of": 9, "shared": [],
         "first": [{"at": {"sequence": 0, "head": 0}, "max_err": 0.5}]}


@pytest.mark.parametrize("where", [{"worst": None}, {"worst": {"at": {"batch": "x"}, "got": 0.0, "ref": 0.0},
                                                     "nonfinite": None}, "batch 0",
                                   {"worst": None, "nonfinite": None, "cells": {**CELLS, "rule": "median"}},
                                   {"worst": None, "nonfinite": None, "cells": {**CELLS, "first": CELLS["first"] * 7}},
                                   {"worst": None, "nonfinite": None, "cells": {**CELLS, "sequences": [0, 1]}}])
def test_a_malformed_where_is_refused_by_the_schema(report, where):
    import jsonschema

    rep = copy.deepcopy(report)
    next(r for r in rep["records"] if r["outputs"])["outputs"]["out"]["where"] = where
    with pytest.raises(jsonschema.ValidationError):
        validate_report(rep)


# ---------------------------------------------------------------- console, report.md and pytest say where
def test_verify_prints_and_report_md_shows_the_failing_sequences(tmp_path, capsys):
    from lrkv.cli import main

    out = tmp_path / "r"
    try:
        code = main(["verify", "--backend", "tests.verify.test_where:FullLastPageDropped", "--case",
                     LAST_PAGE.to_json(), "--out", str(out), "--no-progress"])
    except SystemExit as e:
        code = int(e.code)
    err = capsys.readouterr().err
    assert code == 1, err[-2000:]
    assert "  where: out: sequences 1, 3 of 4, all 3 heads: exactly the sequences whose length is a multiple of " \
           "the page size 4 fail" in err
    assert err.index("  where: out:") < err.index("  replay: lrkv verify")
    md = (out / "report.md").read_text()
    assert "where it fails" in md and "out: sequences 1, 3 of 4, all 3 heads: exactly the sequences" in md
    import json

    validate_report(json.loads((out / "report.json").read_text()))


USER_TEST = """
from lrkv.testing import check_case
from tests.verify.test_where import FullLastPageDropped, LAST_PAGE


def test_my_kernel():
    check_case(FullLastPageDropped(), LAST_PAGE)
"""


def test_a_pytest_failure_leads_with_the_case_and_where_and_hides_our_frames(tmp_path):
    """A user's test calling check_case on a last-page bug: the failure shows the user's test and
    the message — which case, its failing sequences and what they share, the replay — never
    check_case's own source."""
    import inspect
    import os
    import subprocess
    import sys
    from pathlib import Path

    from lrkv.testing import check

    repo = Path(__file__).resolve().parents[2]
    (tmp_path / "test_user.py").write_text(USER_TEST)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(repo), os.environ.get("PYTHONPATH")))),
               OMP_NUM_THREADS="1", LRKV_ISOLATION="inprocess")
    r = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "no:xdist", "-q",
                        "--rootdir", str(tmp_path), "test_user.py"], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=600)
    text = r.stdout
    assert r.returncode == 1, text[-3000:]
    ours = [line.strip() for line in inspect.getsource(check.check_case).splitlines()[1:]
            if len(line.strip()) > 20 and not line.strip().startswith(('"', "#"))]
    assert ours and not [line for line in ours if line in text], "check_case's source is in the failure"
    start = text.index("AssertionError: FAIL full-last-page-dropped kernel-paged:")
    where = text.index("where: out: sequences 1, 3 of 4, all 3 heads: exactly the sequences whose length is a "
                       "multiple of the page size 4 fail", start)
    assert start < where < text.index("replay: lrkv verify --backend tests.verify.test_where:FullLastPageDropped",
                                      where) < text.index("why: out: max|err|", where)
