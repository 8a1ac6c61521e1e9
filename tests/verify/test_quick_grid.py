"""The quick grid covers what the default grid covers (lrkv.verify.grids.quick_grid).

`lrkv init`'s pytest file and the plugin run the quick grid. It once had two paged cases,
neither head-major: a kernel that read a head-major vLLM latent pool as token-major passed
that pytest file and was caught only by `lrkv verify` on the default grid. The quick grid is
now a cover of the default grid; these tests hold its coverage equal to the default grid's —
per level, and per backend where a backend's claims change what a case covers (its layout,
its dtypes, the fp8 caches it reads: a declined case runs at its twin) — and make every
layout, paged and extend mutant fail it while the correct backends pass.
"""

from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable

import pytest

from lrkv.mutants.coverage import PowerOfTwoPages, SharedPageFirstOwner
from lrkv.mutants.layouts import LAYOUT_MUTANTS, HndReadAsNhd, LayoutBackend
from lrkv.mutants.paged import EXTEND_MUTANTS, PAGED_MUTANTS
from lrkv.reference.cache_layouts import ADAPTERS, CACHE_LAYOUTS
from lrkv.verify import grids
from lrkv.verify.case import Case
from lrkv.verify.features import case_features
from lrkv.verify.grids import cover, default_grid, quick_grid
from lrkv.verify.runner import not_applicable, run
from lrkv.verify.tolerance import load_policy
from lrkv.verify.twins import find_twin, forced_changes

LEVELS = ("kernel", "kernel-paged", "kernel-extend", "layer", "layer-model")


def _covered(cases: list[Case]) -> dict[str, set[str]]:
    """level -> the features its cases exercise."""
    out: dict[str, set[str]] = {lv: set() for lv in LEVELS}
    for c in cases:
        out[c.level] |= case_features(c)
    return out


# ----------------------------------------------------------------------------- per level
def test_quick_covers_every_feature_of_the_default_grid_at_every_level():
    default, quick = _covered(default_grid()), _covered(quick_grid())
    for level in LEVELS:
        assert quick[level] == default[level], (level, sorted(default[level] - quick[level]))
    # the layout features the vLLM team's head-major pool needed, named so that a change to the
    # feature catalogue that drops them cannot pass unnoticed
    for name in ("pages head-major (HND)", "pages token-major (NHD)", "length=0", "last page partial",
                 "length at page boundary", "pool of thousands of pages"):
        assert name in quick["kernel-paged"] and name in quick["kernel-extend"], name


def test_quick_is_a_small_deterministic_subset_of_the_default_grid():
    default = default_grid()
    quick = quick_grid()
    assert [c.id for c in quick] == [c.id for c in quick_grid()]
    ids = [c.id for c in default]
    assert all(c in default for c in quick) and [ids.index(c.id) for c in quick] == sorted(ids.index(c.id) for c in quick)
    assert len(quick) <= len(default) // 3, len(quick)
    assert sum(map(grids.quick_cost, quick)) <= sum(map(grids.quick_cost, default)) / 3
    quick.pop()  # a caller's list is its own
    assert len(quick_grid()) == len(quick) + 1


def test_the_docs_state_the_quick_grids_size():
    """docs/testing.md and quick_grid's docstring name its size, per level: kept true here."""
    from collections import Counter
    from pathlib import Path

    quick, n = quick_grid(), Counter(c.level for c in quick_grid())
    said = (f"It has {len(quick)} of the default grid's {len(default_grid())} cases (kernel {n['kernel']}, "
            f"kernel-paged {n['kernel-paged']}, kernel-extend {n['kernel-extend']}, layer {n['layer']}, "
            f"layer-model {n['layer-model']};")
    doc = " ".join((Path(__file__).parents[2] / "docs" / "testing.md").read_text(encoding="utf-8").split())
    assert said in doc
    assert f"{len(quick)} of the default grid's {len(default_grid())} cases" in " ".join(quick_grid.__doc__.split())


def test_dropping_any_quick_case_loses_a_feature():
    """The cover keeps no redundant case — so dropping any one loses a feature, and the
    per-level equality above fails (it cannot pass on a quick grid missing a case)."""
    quick = quick_grid()
    pairs = [grids.covered_pairs(c) for c in quick]
    assert set().union(*pairs) == set().union(*map(grids.covered_pairs, default_grid()))
    for i, case in enumerate(quick):
        assert not pairs[i] <= set().union(*pairs[:i], *pairs[i + 1:]), case.id
    assert any(c.expect == "differ" for c in quick)  # latent RoPE vs the model: the expected difference


def test_a_contiguous_fp8_extend_case_has_a_twin_for_a_layout_backend_without_fp8():
    """Its twin changes both the cache (to τ) and the paging (server layouts take pages only):
    twins.apply_changes once refused that pair, and the case's other features went uncovered."""
    backend = _correct_layout_backend("vllm-blocks")
    case = next(c for c in default_grid() if c.level == "kernel-extend" and c.fp8 and not c.pages)
    twin, changes = find_twin(case, _accepts(backend), forced_changes(case, backend))
    assert changes["cache"] == "none" and changes["paging"] == 16
    assert twin.pages.size == 16 and twin.fp8 is None and twin.spec == case.spec


def test_cover_prefers_cheap_cases_and_covers_what_it_is_given():
    from lrkv.spec import AttentionSpec

    small, big = AttentionSpec.lrkv(2, 16, 3), AttentionSpec.lrkv(16, 128, 3)
    costly = Case("kernel", big, "float32", (5, 1, 64), 64)  # varlen, length 1 and t_max; 16 heads of 128
    cheap = Case("kernel", small, "float32", (5, 1, 64), 64)  # the same with 2 heads of 16
    wide = Case("kernel", big, "float32", (1,), 1)  # 16 heads of 128 in one slot: what only `costly` adds
    assert grids.quick_cost(cheap) + grids.quick_cost(wide) < grids.quick_cost(costly)
    chosen = cover([costly, cheap, wide])
    assert _covered(chosen) == _covered([costly, cheap, wide])
    assert chosen == [cheap, wide]  # not the costly case, whose features the two cheap ones share out


# ----------------------------------------------------------------------------- per backend
def _starter(layout: str):
    """The backend `lrkv init --layout <layout>` writes (lrkv_backend.py), imported from its text."""
    from pathlib import Path

    from lrkv.testing.init import plan

    files = plan(Path("/nonexistent"), package="", layout=layout)  # nothing is written
    text = next(t for p, t in files.items() if p.name == "lrkv_backend.py")
    name = f"_lrkv_starter_{layout.replace('-', '_')}"
    spec = importlib.util.spec_from_loader(name, loader=None)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod  # dataclasses resolve their module
    exec(compile(text, f"<lrkv init --layout {layout}>", "exec"), mod.__dict__)
    return mod.backend


def _correct_layout_backend(layout: str):
    """lrkv.mutants.layouts' bug-free read-back of `layout` (the mutants' correct twin), at paged
    decode and extend."""
    return type(f"Correct{layout}", (LayoutBackend,), {"name": f"correct-{layout}", "cache_layout": layout})()


def _example(module: str):
    from lrkv.verify.backend_registry import get_backend

    return get_backend(f"examples.{module}:backend")


BACKENDS: dict[str, Callable] = {
    **{f"starter[{lay}]": (lambda lay=lay: _starter(lay)) for lay in CACHE_LAYOUTS},
    **{f"layout-reference[{lay}]": (lambda lay=lay: _correct_layout_backend(lay)) for lay in ADAPTERS},
    "triton-vllm-blocks": lambda: _registered("triton-vllm-blocks"),
    "triton": lambda: _registered("triton"),
    "tiled-fp8-compute": lambda: _registered("tiled-fp8-compute"),
    "reference": lambda: _registered("reference"),
    "eager": lambda: _registered("eager"),
    **{f"examples.{m}": (lambda m=m: _example(m)) for m in ("my_backend", "my_paged_backend", "my_extend_backend",
                                                             "my_vllm_backend", "my_flashinfer_backend")},
}


def _registered(name: str):
    from lrkv.verify.backend_registry import get_backend

    return get_backend(name)


def _accepts(backend) -> Callable[[Case], bool]:
    """Whether the backend runs a case as it is (its level, dtype, layout and fp8 claims, then
    supports()), as the runner asks."""
    def accepts(case: Case) -> bool:
        if not_applicable(backend, case):
            return False
        return not hasattr(backend, "supports") or bool(backend.supports(case)[0])
    return accepts


def claimed_coverage(backend, cases: list[Case]) -> dict[str, set[str]]:
    """level -> the features the backend covers on `cases` if every case it runs passes: each
    case it claims, or the twin the runner would run for a case it declines (twins.py)."""
    accepts = _accepts(backend)
    out: dict[str, set[str]] = {}
    for case in cases:
        if not_applicable(backend, case).startswith("not implemented"):
            continue
        if accepts(case):
            ran = case
        else:
            found = find_twin(case, accepts, forced_changes(case, backend))
            if found is None:
                continue
            ran = found[0]
        out.setdefault(case.level, set()).update(case_features(ran))
    return out


@pytest.mark.parametrize("name", sorted(BACKENDS))
def test_quick_covers_for_each_backend_what_the_default_grid_covers(name):
    backend = BACKENDS[name]()
    default, quick = claimed_coverage(backend, default_grid()), claimed_coverage(backend, quick_grid())
    assert default, name
    assert set(quick) == set(default), name
    for level in default:
        assert quick[level] == default[level], (name, level, sorted(default[level] - quick[level]))


# ----------------------------------------------------------------------------- mutants
# the quick grid's paged cases before it was a cover: neither head-major (HndReadAsNhd passed them)
OLD_QUICK_PAGED = [
    Case("kernel-paged", grids.EXACT, "float64", (37, 21, 14, 0), 40, pages=grids.Paged(7, shared_prefix=14), seed=2),
    Case("kernel-paged", grids.BASE, "bfloat16", (16, 33, 1), 40, pages=grids.Paged(16, shared_prefix=16), seed=3),
]


def _statuses(backend, cases: list[Case]) -> list[str]:
    """The statuses of the backend's records on the cases (in-process, no server properties;
    a declined case's twin included)."""
    recs = run(cases, [(backend.name, backend)], load_policy(), isolation="inprocess", properties=False)
    return [r["status"] for r in recs]


def _passes(backend, cases: list[Case]) -> bool:
    """Whether every record passes (a declined case's skip aside) and at least one ran."""
    st = _statuses(backend, cases)
    return "pass" in st and set(st) <= {"pass", "skip"}


def _first_failure(backend, cases: list[Case]) -> Case | None:
    """The first case the backend fails (itself or its twin), cheapest first; None if none."""
    for case in sorted(cases, key=grids.quick_cost):
        if "fail" in _statuses(backend, [case]):
            return case
    return None


def _at(level: str) -> list[Case]:
    return [c for c in quick_grid() if c.level == level]


def test_the_old_quick_grid_passed_a_head_major_pool_read_as_token_major():
    """Why the quick grid is a cover: the mutant below passes the old quick grid's paged cases."""
    assert _passes(HndReadAsNhd(), OLD_QUICK_PAGED)


@pytest.mark.parametrize("mutant", LAYOUT_MUTANTS, ids=lambda m: m.__name__)
def test_every_layout_mutant_fails_the_quick_grid_where_its_correct_twin_passes(mutant):
    failed = _first_failure(mutant(), _at("kernel-paged"))
    assert failed is not None, mutant.name
    assert _passes(_correct_layout_backend(mutant.cache_layout), [failed]), failed.id  # the bug, not the case


@pytest.mark.parametrize("mutant", [*PAGED_MUTANTS, *EXTEND_MUTANTS, PowerOfTwoPages, SharedPageFirstOwner],
                         ids=lambda m: m.__name__)
def test_every_paged_and_extend_mutant_fails_the_quick_grid_where_its_base_passes(mutant):
    from lrkv.mutants.paged import ExtendMutant, PagedMutant

    level = "kernel-extend" if "kernel-extend" in mutant.levels else "kernel-paged"
    failed = _first_failure(mutant(), _at(level))
    assert failed is not None, mutant.name
    base = (ExtendMutant if level == "kernel-extend" else PagedMutant)()
    base.name = f"correct-{level}"
    assert _passes(base, [failed]), failed.id
