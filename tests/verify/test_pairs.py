"""The all-pairs arrays: every possible pair meets in a valid row, and the pairs left out are
the ones no valid row can hold."""

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lrkv.verify import grids
from lrkv.verify.pairs import all_pairs, impossible_pairs, pairs_of


def _possible(params, valid) -> set:
    """Every pair some valid row holds, by enumerating all rows (small spaces only)."""
    names = list(params)
    rows = (dict(zip(names, r)) for r in itertools.product(*params.values()))
    return set().union(*(pairs_of(names, r) for r in rows if valid(r)))


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 4), min_size=2, max_size=5),
       forbidden=st.sets(st.tuples(st.integers(0, 4), st.integers(0, 3), st.integers(0, 4), st.integers(0, 3)),
                         max_size=6))
def test_every_possible_pair_is_covered_and_every_row_is_valid(sizes, forbidden):
    params = {f"d{i}": tuple(range(n)) for i, n in enumerate(sizes)}

    def valid(row):  # rows holding a forbidden pair of values are not cases
        return not any(row.get(f"d{i}") == a and row.get(f"d{j}") == b for i, a, j, b in forbidden if i != j)

    rows = all_pairs(params, valid)
    assert all(valid(r) for r in rows)
    covered = set().union(*(pairs_of(list(params), r) for r in rows))
    assert covered >= _possible(params, valid)


def test_the_array_is_the_same_every_run():
    params = {"a": (0, 1, 2), "b": ("x", "y"), "c": (True, False)}
    assert all_pairs(params, lambda r: True) == all_pairs(params, lambda r: True)


def _paged_params():
    return dict(grids.PAGED_PARAMS)


def _makes(row) -> bool:
    try:
        grids._paged_case(row)
    except ValueError:
        return False
    return True


# Why each pair the paged array leaves out holds in no case: (dimension, value, dimension, value) -> reason
ODD_RANK_ROPE = "aligned and latent RoPE rotate latent pairs: an odd rank has none"
PAGED_IMPOSSIBLE = {
    **{("mode", m, "shape", s): ODD_RANK_ROPE for m in ("aligned", "latent", "aligned-qkn")
       for s in ((5, 128, 7), (1, 16, 1), (18, 64, 55))},
    **{("mode", m, "adversarial", "cancel"): "QK-RMSNorm normalises the keys that were to nearly cancel"
       for m in ("qkn", "qkn-exact", "aligned-qkn")},
    **{("dtype", "float64", "cache", f): "an fp8 cache is read at a compute dtype, not float64"
       for f in grids.FP8_FORMATS},
    **{("scales", g, "cache", "none"): "a cache at τ has no scales (one granularity stands for none)"
       for g in grids.FP8_SCALES[1:]},
    **{("dtype", "float64", "scales", g): "float64 has a cache at τ only, and that has no scales"
       for g in grids.FP8_SCALES[1:]},
    ("lengths", "single", "prefix", True): "one sequence shares no page",
}


def _ordered(pair, names):
    a, va, b, vb = pair
    return pair if names.index(a) < names.index(b) else (b, vb, a, va)


def test_the_paged_array_leaves_out_only_pairs_no_case_can_hold():
    params = _paged_params()
    names = list(params)
    rows = all_pairs(params, _makes)
    assert all(_makes(r) for r in rows)
    left_out = set(impossible_pairs(params, rows))
    assert left_out == {_ordered(p, names) for p in PAGED_IMPOSSIBLE}
    # and each is refused by the case itself: no completion in a spread sample (every 97th of
    # all) makes a case (the reasons above say why none can)
    for a, va, b, vb in left_out:
        others = [n for n in names if n not in (a, b)]
        for combo in itertools.islice(itertools.product(*(params[n] for n in others)), 0, None, 97):
            assert not _makes({a: va, b: vb, **dict(zip(others, combo))}), (a, va, b, vb)


def test_the_fp8_dimensions_meet_every_dtype_page_and_garbage_at_both_levels():
    for level in ("kernel-paged", "kernel-extend"):
        cases = [c for c in grids.default_grid() if c.level == level and c.cache_fp8]
        seen = {(c.fp8.format, c.fp8.granularity) for c in cases}
        assert len(seen) == 8, level
        for fmt in grids.FP8_FORMATS:
            mine = [c for c in cases if c.fp8.format == fmt]
            assert {c.dtype for c in mine} == {"float32", "bfloat16", "float16"}, (level, fmt)
            assert {c.nan_garbage for c in mine} == {True, False}, (level, fmt)


@pytest.mark.parametrize("draws", [1])
def test_too_few_draws_leave_possible_pairs_out(monkeypatch, draws):
    """The check above can fail: with one draw per pair the greedy search misses pairs."""
    import lrkv.verify.pairs as pairs

    monkeypatch.setattr(pairs, "DRAWS_PER_PAIR", draws)
    params = _paged_params()
    rows = pairs.all_pairs(params, _makes)
    assert len(impossible_pairs(params, rows)) > len(PAGED_IMPOSSIBLE)
