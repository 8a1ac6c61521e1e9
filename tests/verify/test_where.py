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
                           "nonfinite": {"count": 99, "first": [{"at": {"batch": 0}, "got": "nan", "ref": 0.0}]}}
        for ev in (r["outputs"] or {}).values() if r["status"] == "fail" else ():
            del ev["where"]  # or erase it from a failure
    validate_report(rep)  # a well-formed location is accepted ...
    for old, new in zip(report["records"], rep["records"]):
        if new["outputs"]:  # ... and re-judged to the same status, from the numbers alone
            assert judge_record(new, policy.resolve(new["backend"], new["dtype"]))[0] == old["status"]
    entries = gate.classify(rep, gate.baseline_from_report(report), subset=True)
    assert {e.key: e.klass for e in entries} == \
        {e.key: e.klass for e in gate.classify(report, gate.baseline_from_report(report), subset=True)}


@pytest.mark.parametrize("where", [{"worst": None}, {"worst": {"at": {"batch": "x"}, "got": 0.0, "ref": 0.0},
                                                     "nonfinite": None}, "batch 0"])
def test_a_malformed_where_is_refused_by_the_schema(report, where):
    import jsonschema

    rep = copy.deepcopy(report)
    next(r for r in rep["records"] if r["outputs"])["outputs"]["out"]["where"] = where
    with pytest.raises(jsonschema.ValidationError):
        validate_report(rep)
