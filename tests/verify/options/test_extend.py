import pytest

from lrkv.verify.case import Case, Extend
from lrkv.verify.grids import BASE


@pytest.mark.parametrize("kw, exc, match", [
    (dict(), ValueError, "n_new must give one count per sequence"),
    (dict(n_new=(1,)), ValueError, "n_new must give one count per sequence"),
    (dict(n_new=(1, 9)), ValueError, r"n_new\[1\] = 9 exceeds lengths\[1\]"),
    (dict(n_new=(1, -1)), ValueError, r"n_new\[1\]"),
    (dict(n_new="12"), TypeError, "n_new must be a sequence"),
    (dict(n_new=(1, 1), splits=2), ValueError, "kernel-extend cases take none"),
    (dict(level="kernel-paged", page_size=4, n_new=(1, 1)), ValueError, "n_new applies to level kernel-extend only"),
])
def test_a_bad_extend_option_is_refused_naming_the_field(kw, exc, match):
    with pytest.raises(exc, match=match):
        Case.flat(kw.pop("level", "kernel-extend"), BASE, "float32", (9, 8), 12, **kw)


def test_the_extend_option_owns_its_flags_and_shapes():
    case = Case("kernel-extend", BASE, "float32", (9, 8), 12, extend=Extend([3, 0]))
    assert case.extend.n_new == (3, 0) and case.id.endswith("+new3-0")
    assert Extend((3, 0)).shapes() == {"n_new": [3, 0]}
