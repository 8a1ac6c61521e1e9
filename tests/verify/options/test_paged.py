import subprocess
import sys

import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st

from lrkv.verify.case import Case, Paged
from lrkv.verify.options import paged as options
from lrkv.verify.grids import BASE


def paged(**kw):
    return Case.flat(kw.pop("level", "kernel-paged"), BASE, "float32", kw.pop("lengths", (9, 8)), 12, **kw)


@pytest.mark.parametrize("kw, exc, match", [
    (dict(), ValueError, "page_size: a kernel-paged case needs page_size >= 1"),
    (dict(page_size=-1), ValueError, "page_size"),
    (dict(level="kernel", page_size=4), ValueError, "page_size, page_shuffle, shared_prefix, page_hnd, page_pool and pool_view apply"),
    (dict(level="layer", page_shuffle=False), ValueError, "page_size, page_shuffle, shared_prefix, page_hnd, page_pool and pool_view apply"),
    (dict(page_size=4, shared_prefix=6), ValueError, "shared_prefix .* whole number of pages"),
    (dict(page_size=4, shared_prefix=12), ValueError, "shared_prefix .* must not exceed"),
    (dict(page_size=4, shared_prefix=4, lengths=(9,)), ValueError, "shared_prefix needs"),
    (dict(page_size=4, page_shuffle="yes"), TypeError, "page_shuffle"),
    (dict(page_size=4, page_hnd=1), TypeError, "page_hnd"),
    (dict(page_size=4, page_pool=-1), ValueError, "page_pool"),
    (dict(level="kernel-extend", n_new=(1, 1), page_hnd=True), ValueError, "page_hnd, page_pool and pool_view need page_size"),
])
def test_a_bad_paged_option_is_refused_naming_the_field(kw, exc, match):
    with pytest.raises(exc, match=match):
        paged(**kw)


def test_the_paged_option_owns_its_flags_and_shapes():
    case = paged(page_size=4, page_shuffle=False, shared_prefix=8)
    assert case.pages == Paged(4, False, 8) and case.id.endswith("+page4+inorder+prefix8")
    assert Paged(4).shapes() == {"page_size": 4} and Paged().shapes() == {}
    assert paged(level="kernel-extend", n_new=(1, 1)).pages is None  # a contiguous extend cache: no option


def test_head_major_pages_and_a_large_pool_are_flags_of_the_id():
    case = paged(page_size=4, page_hnd=True, page_pool=1500)
    assert case.pages == Paged(4, hnd=True, pool=1500) and case.id.endswith("+page4+hnd+pool1500")
    assert Case.from_json(case.to_json()) == case


# The option's hypothesis draws (`lrkv.verify.strategies.paged_cases` composes them).

@given(t_max=st.integers(1, 64), data=st.data())
def test_a_drawn_page_size_is_positive_and_a_drawn_length_stays_in_range(t_max, data):
    size = data.draw(options.sizes(t_max))
    lo = data.draw(st.integers(0, t_max))
    n = data.draw(options.lengths(t_max, size, lo))
    assert 1 <= size <= max(options.POW2_SIZES[-1], t_max + 3) and lo <= n <= t_max


@pytest.mark.parametrize("t_max, kind", [
    (12, lambda p: p == 1), (12, lambda p: p in (16, 32)), (12, lambda p: p in (3, 5, 6, 7, 11)),
    (12, lambda p: 12 % p), (12, lambda p: p > 12), (2, lambda p: p == 3),  # no size below 2 fails to divide it
    (1, lambda p: p in options.ODD_SIZES),  # at T_max 1 only the odd sizes give 3, 5, 6, 7 or 11
])
def test_every_kind_of_page_size_is_drawn(t_max, kind):
    find(options.sizes(t_max), kind, settings=settings(database=None))


def test_lengths_are_often_at_a_page_boundary():
    for target in (0, 1, 3, 4, 5, 12):  # T_max 12, page 4: 0, 1, T_max and k·4 ± 1
        find(options.lengths(12, 4), lambda n, t=target: n == t, settings=settings(database=None))


@given(size=st.integers(1, 8), lengths=st.lists(st.integers(8, 40), min_size=2, max_size=4), data=st.data())
def test_a_drawn_shared_prefix_is_whole_pages_within_both_sequences(size, lengths, data):
    shared = data.draw(st.composite(lambda draw: options.draw_prefix(draw, size, lengths))())
    assert shared >= size and shared % size == 0 and shared <= min(lengths[:2])


@given(size=st.integers(0, 8), seed=st.integers(0, 2**16), data=st.data())
def test_the_drawn_option_takes_head_major_pages_and_a_large_pool_from_the_seed(size, seed, data):
    opt = data.draw(st.composite(lambda draw: options.draw_option(draw, size, 0, seed))())
    assert opt.size == size and opt.hnd == (size > 0 and seed % 2 == 1)
    assert opt.pool == (options.HUNT_POOL if size and seed % 5 == 3 else 0) and (opt.shuffle or size > 0)


def test_a_case_and_its_options_load_without_hypothesis():
    """The draws import hypothesis when they draw: `lrkv gate` and `--case` never need it."""
    code = ("import sys\nimport lrkv.verify.case, lrkv.verify.options.paged, lrkv.verify.options.extend\n"
            "assert 'hypothesis' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True)
