import pytest

from lrkv.verify.case import Case, Paged
from lrkv.verify.grids import BASE


def paged(**kw):
    return Case.flat(kw.pop("level", "kernel-paged"), BASE, "float32", kw.pop("lengths", (9, 8)), 12, **kw)


@pytest.mark.parametrize("kw, exc, match", [
    (dict(), ValueError, "page_size: a kernel-paged case needs page_size >= 1"),
    (dict(page_size=-1), ValueError, "page_size"),
    (dict(level="kernel", page_size=4), ValueError, "page_size, page_shuffle, shared_prefix, page_hnd and page_pool apply"),
    (dict(level="layer", page_shuffle=False), ValueError, "page_size, page_shuffle, shared_prefix, page_hnd and page_pool apply"),
    (dict(page_size=4, shared_prefix=6), ValueError, "shared_prefix .* whole number of pages"),
    (dict(page_size=4, shared_prefix=12), ValueError, "shared_prefix .* must not exceed"),
    (dict(page_size=4, shared_prefix=4, lengths=(9,)), ValueError, "shared_prefix needs"),
    (dict(page_size=4, page_shuffle="yes"), TypeError, "page_shuffle"),
    (dict(page_size=4, page_hnd=1), TypeError, "page_hnd"),
    (dict(page_size=4, page_pool=-1), ValueError, "page_pool"),
    (dict(level="kernel-extend", n_new=(1, 1), page_hnd=True), ValueError, "page_hnd and page_pool need page_size"),
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
