"""lrkv.testing, the public test API: check_backend, check_case, cases_for, the property checks.

Each check is shown to say NO on a planted bug, with a replay command that resolves."""

from __future__ import annotations

import pytest
import torch
from hypothesis import find

from examples.my_backend import SplitKDecode
from lrkv.spec import AttentionSpec
from lrkv.testing import Report, cases_for, check_backend, check_case, grid_cases, properties, resolve
from lrkv.verify.backend_registry import get_backend
from lrkv.verify.case import Case, Extend, Paged
from lrkv.verify.grids import BASE, EXACT, LATENT, QKN_EXACT
from lrkv.verify.strategies import lrkv_specs

EXAMPLE = "examples.my_backend:backend"
# A small grid for the API's own tests (the smoke grid `quick` was before it became a cover of
# the default grid: tests/verify/test_quick_grid.py): a case at every level, float64 among them
SMOKE = [
    Case("kernel", BASE, "float64", (10, 33, 2), 40),
    Case("kernel", BASE, "float32", (7, 40, 19), 40, q_scale=100.0),
    Case("kernel", BASE, "bfloat16", (0, 1, 2, 3, 17, 31, 64, 63), 64, seed=1),
    Case("kernel", EXACT, "float16", (10, 33, 2), 40),
    Case("kernel", QKN_EXACT, "float32", (130, 7, 101), 160),
    Case("layer", BASE, "float32", (1, 6, 11), 12),
    Case("layer-model", LATENT, "float64", (8, 8, 8), 8, expect="differ"),
    Case("kernel-paged", EXACT, "float64", (37, 21, 14, 0), 40, pages=Paged(7, shared_prefix=14), seed=2),
    Case("kernel-paged", BASE, "bfloat16", (16, 33, 1), 40, pages=Paged(16, shared_prefix=16), seed=3),
    Case("kernel-extend", EXACT, "float64", (12, 40, 23), 48, extend=Extend((6, 3, 1)), pages=Paged(5), seed=1),
    Case("kernel-extend", BASE, "float16", (9, 20, 16), 24, extend=Extend((2, 8, 0)), seed=2),
]


class ScaledOut(SplitKDecode):
    """A planted bug: out off by 1 %."""

    name = "scaled-out"

    def decode_attention(self, *args, **kwargs):
        out, lse = super().decode_attention(*args, **kwargs)
        return out * 1.01, lse


class DefaultTheta(SplitKDecode):
    """A planted bug: RoPE always with the default base, whatever the spec says."""

    name = "default-theta"

    def decode_attention(self, *args, rope=None, **kwargs):
        if rope is not None:
            rope = type(rope)(10000.0) if hasattr(rope, "theta") else rope
        return super().decode_attention(*args, rope=rope, **kwargs)


SCALED = ScaledOut()  # module attributes: the replay names them as tests.testing.test_api:SCALED
THETA_BUG = DefaultTheta()
CASE = Case("kernel", AttentionSpec.lrkv(3, 8, 3), "float32", (5, 9, 0), 9, tile=2, splits=3)


def test_check_backend_passes_a_correct_backend():
    report = check_backend(EXAMPLE, grid="quick")
    assert isinstance(report, Report) and report.ok
    # every kernel and paged case of the quick grid, a float64 one at its float32 twin (the
    # example has no float64); the layer and extend cases are skips
    mine = [c for c in grid_cases("quick") if c.level in ("kernel", "kernel-paged")]
    assert report.counts["pass"] == report.verified == len(mine) and not report.failures


def test_check_backend_lists_each_failure_with_a_replay_that_resolves():
    with pytest.raises(AssertionError) as e:
        check_backend(SCALED, grid=SMOKE)
    msg = str(e.value)
    assert "5 of 13 cases failed" in msg and msg.count("replay: ") == 5  # a twin included
    label = "tests.testing.test_api:SCALED"
    assert f"replay: lrkv verify --backend {label} --case " in msg
    assert get_backend(label).name == "scaled-out"
    report = check_backend(SCALED, grid=SMOKE, raise_on_failure=False)
    assert not report.ok and {r["status"] for r in report.failures} == {"fail"}


def test_an_object_that_is_no_module_attribute_needs_backend_ref():
    class Local(ScaledOut):
        pass
    local = Local()
    target = resolve(local)
    assert not target.resolvable and "backend_ref" in target.note
    with pytest.raises(AssertionError, match="pass backend_ref"):
        check_backend(local, grid="quick")
    assert resolve(local, backend_ref="tests.testing.test_api:SCALED").label == "tests.testing.test_api:SCALED"
    # an instance of a module-level class, or the class: module:qualname (the registry instantiates it)
    assert resolve(ScaledOut()).label == resolve(ScaledOut).label == "tests.testing.test_api:ScaledOut"


def test_nothing_verified_is_not_a_pass():
    with pytest.raises(AssertionError, match="nothing verified"):
        check_backend(EXAMPLE, grid="quick", levels=["layer"])  # the example has no layer level


@pytest.mark.parametrize("kw, err, field", [
    (dict(grid="nope"), ValueError, "grid"), (dict(levels=["model"]), ValueError, "levels"),
    (dict(dtypes=["int8"]), ValueError, "dtype"), (dict(policy=3), TypeError, "policy"),
    (dict(grid=[1, 2]), TypeError, "grid"), (dict(backend_ref=5), TypeError, "backend_ref"),
    (dict(grid=3), TypeError, "grid must be"), (dict(grid=None), TypeError, "grid must be"),
    (dict(levels=3), TypeError, "levels must be"), (dict(dtypes=3), ValueError, "dtypes must be"),
])
def test_bad_arguments_name_the_field(kw, err, field):
    with pytest.raises(err, match=field):
        check_backend(EXAMPLE, **kw)


def test_cases_for_ids_and_skips():
    params = cases_for(EXAMPLE, "quick")
    twins = [p for p in params if "~" in p.id]  # the float64 case's twin follows it
    assert [p.id for p in params if p not in twins] == [c.id for c in grid_cases("quick")]
    mine = ("kernel", "kernel-paged")  # the example's levels
    f64 = [c for c in grid_cases("quick") if c.level in mine and c.dtype == "float64"]
    assert [p.id for p in twins] == [f"{c.id}~dtype=float32" for c in f64] and not any(p.marks for p in twins)
    skipped = {p.id for p in params if p.marks}
    assert skipped == {c.id for c in grid_cases("quick") if c.level not in mine or c.dtype == "float64"}
    assert all(p.marks[0].kwargs["reason"].startswith("my-splitk: ") for p in params if p.marks)
    assert any("not implemented" in p.marks[0].kwargs["reason"] for p in params if p.marks)


def test_check_case_raises_with_the_replay():
    assert check_case(EXAMPLE, CASE)["status"] == "pass"
    with pytest.raises(AssertionError, match=r"replay: lrkv verify --backend tests.testing.test_api:SCALED"):
        check_case(SCALED, CASE)


@pytest.mark.parametrize("name", [n for n in properties.PROPERTIES if n != "append_then_decode_equals_prefill"])
def test_kernel_properties_pass_and_say_no(name):
    fn = properties.PROPERTIES[name][0]
    fn(EXAMPLE, CASE)
    with pytest.raises(AssertionError, match="replay: lrkv verify --backend tests.testing.test_api:SCALED"):
        fn(SCALED, CASE)


def test_append_then_decode_property_on_a_layer_backend():
    case = Case("layer-model", BASE, "float32", (6, 6), 6)
    properties.append_then_decode_equals_prefill("tiled", case)

    class Drops(type(get_backend("tiled"))):
        name = "drops"

        def layer_step(self, weights, x_t, cache, positions):
            y, cache = super().layer_step(weights, x_t, cache, positions)
            cache.latent_v.mul_(1.01)  # corrupts what was appended
            return y, cache
    with pytest.raises(AssertionError, match="append-then-decode vs prefill"):
        properties.append_then_decode_equals_prefill(Drops(), case, backend_ref="tiled")
    with pytest.raises(ValueError, match="layer"):
        properties.append_then_decode_equals_prefill(EXAMPLE, case)


def test_permutation_bound_is_not_a_zero_slack():
    """A property bound once had zero slack: 2.2e-16 on the reference, where permuting
    the batch reorders float64 sums by a few ulp."""
    case = Case("kernel", AttentionSpec.lrkv(2, 16, 13), "float64", (0, 10), 10, seed=1)
    properties.permutation_equivariance("reference", case)
    properties.permutation_equivariance("materialized", case)


def test_strategies_draw_a_non_default_rope_theta_and_it_is_checked():
    spec = find(lrkv_specs(ropes=("exact",)), lambda s: s.rope_theta != 10000.0)
    assert spec.rope == "exact" and spec.rope_theta == 500.0
    case = Case("kernel", AttentionSpec.lrkv(2, 8, 4, rope="exact", rope_theta=500.0), "float32", (9, 4), 9)
    check_case(EXAMPLE, case)
    with pytest.raises(AssertionError, match="FAIL default-theta"):
        check_case(THETA_BUG, case)
    assert torch.isfinite(torch.tensor(case.spec.rope_theta))


def test_a_report_from_check_backend_is_gated_like_one_from_lrkv_verify(tmp_path):
    from lrkv import cli
    from lrkv.verify.tolerance_report import validate_report

    report = check_backend(EXAMPLE, grid=SMOKE)
    validate_report(report.data)
    jpath, _ = report.write(tmp_path / "r")
    base = str(tmp_path / "base.json")
    assert cli.main(["gate", str(jpath), "--baseline", base, "--update-baseline"]) == 0
    assert cli.main(["gate", str(jpath), "--baseline", base]) == 0


class Declines(SplitKDecode):
    """Declines every case through supports()."""

    name = "declines"

    def supports(self, case):
        return False, "only on Tuesdays"


DECLINES = Declines()


@pytest.mark.parametrize("backend, case, words", [
    (DECLINES, CASE, "unsupported: only on Tuesdays"),
    (EXAMPLE, CASE.replace(dtype="float64"), "dtype float64 not supported"),
    (EXAMPLE, Case("layer", BASE, "float32", (3, 2), 3), "not implemented"),
])
def test_check_case_on_a_case_it_did_not_judge_raises(backend, case, words):
    """A declined, unsupported or unimplemented case used to come back as a "skip" record,
    which a test that ignores the return value would count as a pass."""
    from lrkv.testing import NotVerified

    with pytest.raises(NotVerified, match=words) as e:
        check_case(backend, case)
    assert isinstance(e.value, ValueError) and e.value.record["status"] == "skip"
    assert "NOT VERIFIED" in str(e.value) and "replay: lrkv verify" in str(e.value)


@pytest.mark.parametrize("value", ["no", 0, 1, None, "False"])
def test_raise_on_failure_takes_a_bool_only(value):
    """raise_on_failure="no" used to be truthy: the check raised, or worse, a 0 silenced it."""
    with pytest.raises(TypeError, match="raise_on_failure must be a bool"):
        check_backend(EXAMPLE, grid="quick", raise_on_failure=value)


@pytest.mark.parametrize("name", list(properties.PROPERTIES))
@pytest.mark.parametrize("backend, case, kw, err, words", [
    (EXAMPLE, "kernel", {}, TypeError, "case must be a lrkv.verify.case.Case, got str"),
    (EXAMPLE, None, {}, TypeError, "case must be a lrkv.verify.case.Case, got NoneType"),
    (EXAMPLE, Case.flat("kernel-paged", BASE, "float32", (3, 2), 3, page_size=2), {}, ValueError, "case: this property"),
    (3, CASE, {}, TypeError, "backend '3'"),
    (EXAMPLE, CASE, dict(policy=3), TypeError, "policy"),
    (EXAMPLE, CASE, dict(backend_ref=4), TypeError, "backend_ref"),
])
def test_property_checks_name_a_bad_argument(name, backend, case, kw, err, words):
    """A string or None as the case used to be an AttributeError from deep inside."""
    fn, case_level, _ = properties.PROPERTIES[name]
    if isinstance(case, Case) and case.level == "kernel" and case_level != "kernel":
        case = Case(case_level, BASE, "float32", (3, 3), 3)
    with pytest.raises(err, match=words):
        fn(backend, case, **kw)


def test_a_property_on_a_case_the_backend_declines_is_not_verified():
    from lrkv.testing import NotVerified

    with pytest.raises(NotVerified, match="only on Tuesdays"):
        properties.permutation_equivariance(DECLINES, CASE)
    with pytest.raises(NotVerified, match="dtype float64 not supported"):
        properties.split_tile_invariance(EXAMPLE, CASE.replace(dtype="float64"))
