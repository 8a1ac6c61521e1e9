"""Coverage that cannot silently shrink (lrkv.verify.features, twins, coverage; the gate's UNCOVERED).

A kernel that declines one capability (exact RoPE, QK-norm, a dtype, a head dim) must still
face every other feature of the grid through its twins, the report must say what each
backend covered, and the gate must block a backend that left a required feature uncovered
or covers less than its baseline. Each "no" here has a mutant behind it
(lrkv.mutants.coverage) that a hand-paired grid or a green-on-skips verdict lets pass.
"""

from __future__ import annotations

import json

import pytest
import torch

from lrkv.cli import main
from lrkv.mutants.coverage import (DECODE_COVERAGE_MUTANTS, LongRopeDrift, PowerOfTwoPages,
                                   SharedPageFirstOwner)
from lrkv.spec import AttentionSpec
from lrkv.verify import gate
from lrkv.verify.case import Case
from lrkv.verify.coverage import coverage, covered_features, uncovered
from lrkv.verify.features import BY_NAME, FEATURES, case_features, level_features
from lrkv.verify.grids import BASE, default_grid, quick_grid
from lrkv.verify.runner import backend_info, run
from lrkv.verify.tolerance import Policy, load_policy
from lrkv.verify.tolerance_report import build_report
from lrkv.verify.twins import apply_changes, check_twin, find_twin, parse_changes
from lrkv.verify.selection import Selection

EXACT = AttentionSpec.lrkv(4, 32, 6, rope="exact")
QKN_EXACT = AttentionSpec.lrkv(4, 32, 6, rope="exact", qk_norm=True)
ALIGNED_QKN = AttentionSpec.lrkv(4, 32, 6, rope="aligned", qk_norm=True)
# The paged cases of the earlier, hand-paired grid: its hardest paging features came only with
# exact RoPE or QK-norm (page size 7 and a 14-token prefix with exact; page 1 and a 9-token
# prefix with QK-norm), so a kernel declining those never saw them.
HAND_PAIRED = [
    Case.flat("kernel-paged", BASE, "float64", (16, 33, 1, 0), 40, page_size=16, tile=16, splits=2),
    Case.flat("kernel-paged", QKN_EXACT, "float32", (40, 17, 9), 41, page_size=1, shared_prefix=9),
    Case.flat("kernel-paged", EXACT, "float64", (37, 21, 14), 40, page_size=7, shared_prefix=14),
    Case.flat("kernel-paged", ALIGNED_QKN, "float32", (32, 31, 48), 48, page_size=16, page_shuffle=False,
         nan_garbage=False),
]
NO_BASELINE = {"entries": {}, "policy": None}


def _report(cases, backends, policy=None, twins=True):
    policy = policy or load_policy()
    records = run(cases, backends, policy, twins=twins)
    return build_report(records, policy, [backend_info(b, n) for n, b in backends],
                        selection=Selection("case", cases=tuple(cases)))


# ----------------------------------------------------------------------------- features and grid
def test_every_declared_feature_is_in_the_default_grid():
    grid = default_grid()
    for level in ("kernel", "kernel-paged", "kernel-extend", "layer", "layer-model"):
        have = set().union(*(case_features(c) for c in grid if c.level == level))
        missing = [f.name for f in level_features(level) if f.name not in have]
        assert not missing, (level, missing)
    assert len({c.id for c in grid}) == len(grid)


def test_features_are_named_once_and_capabilities_name_their_dimension():
    assert len(BY_NAME) == len(FEATURES)
    for f in FEATURES:
        assert f.why and f.levels
        assert all(BY_NAME[n].dim for n in f.needs), f.name


def test_the_grid_is_deterministic_and_pairs_page_sizes_with_rope_none():
    assert [c.id for c in default_grid()] == [c.id for c in default_grid()]
    paged = [c for c in default_grid() if c.level == "kernel-paged"]
    for feature in ("page non-power-of-two", "pages shared", "page=1", "garbage=nan", "length at page boundary"):
        assert any(feature in case_features(c) and c.spec.rope == "none" and not c.spec.qk_norm for c in paged), \
            feature


def test_the_quick_grid_has_a_long_context_with_rope():
    assert any(c.spec.rope == "exact" and max(c.lengths) > 100 for c in quick_grid())


# ----------------------------------------------------------------------------- twins
def test_a_twin_changes_only_capability_dimensions():
    case = HAND_PAIRED[1]  # exact RoPE + QK-norm, page 1, a shared prefix
    twin, changes = find_twin(case, lambda c: c.spec.rope != "exact" and not c.spec.qk_norm)
    assert changes == {"rope": "none", "qk_norm": False}
    for field in ("lengths", "t_max", "pages", "nan_garbage", "seed", "dtype"):
        assert getattr(twin, field) == getattr(case, field), field
    assert parse_changes("rope=none,qk_norm=off") == changes
    assert check_twin(case, "rope=none,qk_norm=off", twin) == ""
    assert check_twin(case, "rope=none,qk_norm=off", twin.replace(page_size=5, shared_prefix=5)) != ""
    assert find_twin(case, lambda c: False) is None


def test_a_twin_of_a_head_dim_and_dtype_limited_backend():
    case = Case.flat("kernel-paged", EXACT, "bfloat16", (37, 21, 14), 40, page_size=7, shared_prefix=14)
    twin, changes = find_twin(case, lambda c: c.spec.head_dim == 64 and c.dtype == "float32")
    assert changes == {"dtype": "float32", "head_dim": 64} and twin.spec.rope == "exact"
    assert apply_changes(case, changes) == twin


class _D64Float32Paged:
    """A correct paged kernel (the example's) that only supports d_h = 64 at float32."""

    def __init__(self):
        from examples.my_paged_backend import PagedDecode

        self._inner = PagedDecode()
        self.name, self.levels, self.dtypes = "paged-d64-f32", frozenset({"kernel-paged"}), (torch.float32,)

    def available(self):
        return True, ""

    def supports(self, case):
        return (case.spec.head_dim == 64, "only d_h = 64")

    def paged_decode_attention(self, *a, **kw):
        return self._inner.paged_decode_attention(*a, **kw)


def test_a_d64_float32_backend_still_faces_every_paging_and_length_feature():
    cases = [c for c in default_grid() if c.level == "kernel-paged"]
    rep = _report(cases, [("paged-d64-f32", _D64Float32Paged())])
    table = rep["coverage"]["paged-d64-f32"]["kernel-paged"]["features"]
    must = ("page=1", "page non-power-of-two", "page>=16", "pages shared", "pages shuffled", "pages in order",
            "garbage=nan", "garbage=finite", "length=0", "length=1", "length at page boundary", "length=t_max",
            "varlen", "batch>=16", "q×100", "near_cancel", "long")
    assert {n: table[n]["status"] for n in must} == {n: "covered" for n in must}
    assert table["head_dim=128"]["status"] == "not supported" and table["dtype=bfloat16"]["status"] == "not supported"
    assert not uncovered(rep["coverage"])
    assert all(r["status"] in ("pass", "skip") for r in rep["records"])


# ----------------------------------------------------------------------------- the paged mutants
@pytest.mark.parametrize("mutant,feature", [(PowerOfTwoPages, "page non-power-of-two"),
                                            (SharedPageFirstOwner, "pages shared")], ids=lambda x: str(x))
def test_paged_bugs_behind_declined_rope_are_rejected_through_twins(mutant, feature, tmp_path):
    ref = f"lrkv.mutants.coverage:{mutant.__name__}"
    cases = [a for c in HAND_PAIRED for a in ("--case", c.to_json())]
    # with twins: the declined exact-RoPE / QK-norm cases are re-run at rope='none' and fail
    assert main(["verify", "--backend", ref, *cases, "--out", str(tmp_path / "on"), "--no-progress"]) == 1
    recs = json.loads((tmp_path / "on" / "report.json").read_text())["records"]
    assert any(r["status"] == "fail" and "twin" in r for r in recs)
    assert main(["gate", str(tmp_path / "on" / "report.json"), "--baseline", "ci/baseline.json", "--subset"]) == 1
    # without twins nothing fails (the bug hides behind the declined cases) ...
    assert main(["verify", "--backend", ref, *cases, "--no-twins", "--out", str(tmp_path / "off"),
                 "--no-progress"]) == 0
    report = json.loads((tmp_path / "off" / "report.json").read_text())
    assert {r["status"] for r in report["records"]} <= {"pass", "skip"}
    # ... and only coverage stops it: the feature the skips carried is UNCOVERED
    entries = gate.classify(report, NO_BASELINE)
    blocking = {(e.klass, e.case_id) for e in entries if e.klass in gate.BLOCKING}
    assert ("UNCOVERED", f"coverage:kernel-paged:{feature}") in blocking
    assert {k for k, _ in blocking} == {"UNCOVERED"}


def _grid_cases_with(level: str, feature: str) -> list[Case]:
    """The default grid's cases at a level that carry a feature (the ones a mutant of it can fail)."""
    return [c for c in default_grid() if c.level == level and feature in case_features(c)]


def test_paged_mutants_are_rejected_by_the_default_grid():
    for mutant, feature in ((PowerOfTwoPages, "page non-power-of-two"), (SharedPageFirstOwner, "pages shared")):
        rep = _report(_grid_cases_with("kernel-paged", feature), [(mutant.name, mutant())])
        assert any(r["status"] == "fail" for r in rep["records"]), mutant.name
        assert gate.exit_code(gate.classify(rep, NO_BASELINE), rep) == 1


# ----------------------------------------------------------------------------- feature-only decode bugs
@pytest.mark.parametrize("mutant,feature", zip(DECODE_COVERAGE_MUTANTS, ("long", "batch>=16", "head_dim>128")),
                         ids=lambda x: getattr(x, "name", x))
def test_feature_only_decode_bugs_are_rejected_by_the_default_grid(mutant, feature):
    rep = _report(_grid_cases_with("kernel", feature), [(mutant.name, mutant())])
    fails = [r for r in rep["records"] if r["status"] == "fail"]
    assert fails, mutant.name
    assert gate.exit_code(gate.classify(rep, NO_BASELINE), rep) == 1


def test_the_long_context_bug_is_rejected_by_the_quick_grid():
    rep = _report(quick_grid(), [(LongRopeDrift.name, LongRopeDrift())])
    assert any(r["status"] == "fail" for r in rep["records"])


# ----------------------------------------------------------------------------- the gate
@pytest.fixture(scope="module")
def paged_report():
    from lrkv.verify.backend_registry import get_backend

    cases = [c for c in default_grid() if c.level == "kernel-paged"][:12] + HAND_PAIRED
    return _report(cases, [("examples.my_paged_backend:backend", get_backend("examples.my_paged_backend:backend"))])


def test_a_report_that_covers_less_than_its_baseline_is_refused(paged_report, tmp_path, capsys):
    baseline = gate.baseline_from_report(paged_report)
    assert "pages shared" in baseline["coverage"]["my-paged"]["kernel-paged"]
    assert gate.exit_code(gate.classify(paged_report, baseline), paged_report) == 0
    shrunk = dict(paged_report, records=[r for r in paged_report["records"] if not r["case"]["shared_prefix"]])
    entries = gate.classify(shrunk, baseline, subset=True)
    unc_all = lambda es: [e for e in es if e.klass == "UNCOVERED"]  # noqa: E731
    unc = [e for e in unc_all(entries) if e.case_id == "coverage:kernel-paged:pages shared"]
    assert len(unc) == 1  # (and whatever else only the shared-prefix cases carried)
    assert "covered by the baseline" in unc[0].detail
    assert gate.exit_code(entries, shrunk) == 1
    # --update-baseline drops coverage only on purpose, naming what it drops
    rpath, bpath = tmp_path / "report.json", tmp_path / "baseline.json"
    gate.write_baseline(baseline, bpath)
    rpath.write_text(json.dumps(shrunk))
    capsys.readouterr()
    assert main(["gate", str(rpath), "--baseline", str(bpath), "--update-baseline"]) == 1
    err = capsys.readouterr().err  # says what is lost, the right way round, grouped: not a wall of names
    lost = [e.case_id.rsplit(":", 1)[1] for e in unc_all(entries)]
    assert f"{len(lost)} features the baseline covered are not covered by the report (my-paged · kernel-paged: " \
        f"{len(lost)} (" in err and "pages shared" in err
    assert json.loads(bpath.read_text())["coverage"] == baseline["coverage"]
    assert main(["gate", str(rpath), "--baseline", str(bpath), "--update-baseline", "--drop-coverage"]) == 0
    assert "pages shared" not in json.loads(bpath.read_text())["coverage"]["my-paged"]["kernel-paged"]


def test_an_altered_twin_is_an_error(paged_report):
    twins = [r for r in paged_report["records"] if "twin" in r]
    assert twins, "the example declines float64: its float64 cases have float32 twins"
    bad = json.loads(json.dumps(twins[0]))
    bad["case"]["page_shuffle"] = not bad["case"]["page_shuffle"]
    st, why = gate.rejudge(bad, Policy.from_dict(paged_report["policy"]))
    assert st == "error" and "twin" in why


def test_the_policy_may_make_a_feature_optional_by_name():
    pol = load_policy()
    tables = {t: getattr(pol, t) for t in ("defaults", "dtype", "backend")}
    from lrkv.verify.tolerance import _from_tables

    opt = _from_tables({**tables, "coverage": {"backend": {"x": {"optional": ["pages shared"]}}}}, "test")
    assert opt.sha256 != pol.sha256 and opt.coverage["backend"]["x"]["optional"] == ["pages shared"]
    with pytest.raises(ValueError, match="unknown features"):
        _from_tables({**tables, "coverage": {"optional": ["no such feature"]}}, "test")
    recs = [r for r in run(HAND_PAIRED, [("x", PowerOfTwoPages())], pol, twins=False)]
    for r in recs:
        r["backend"] = "x"
    judged = [(r, r["status"]) for r in recs]
    assert ("x", "kernel-paged", "pages shared") in {u[:3] for u in uncovered(coverage(judged))}
    assert ("x", "kernel-paged", "pages shared") not in {u[:3] for u in uncovered(coverage(judged, opt.coverage))}
    assert "pages shared" not in covered_features(coverage(judged, opt.coverage))["x"]["kernel-paged"]


def test_check_case_reports_a_failing_twin_of_a_declined_case():
    from lrkv.testing import check_case

    with pytest.raises(AssertionError, match="twin of a declined case"):
        check_case(PowerOfTwoPages(), HAND_PAIRED[2], backend_ref="lrkv.mutants.coverage:PowerOfTwoPages")


@pytest.mark.parametrize("grid", ["quick", "default", "mutants"])
def test_every_grid_reaches_every_kernel_level(grid):
    """The plugin's grid (quick by default) once had no paged or extend case: a paged-only bug
    passed `pytest -m equivalence`. Every grid a user can pick has every kernel level."""
    from lrkv.testing.check import grid_cases
    from lrkv.verify.case import KERNEL_LEVELS

    assert set(KERNEL_LEVELS) <= {c.level for c in grid_cases(grid)}
