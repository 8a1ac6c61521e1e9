import pytest
from hypothesis import find, settings
from hypothesis.errors import NoSuchExample

from lrkv.verify.case import Case, Extend
from lrkv.verify.options.extend import new_tokens
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


# The option's hypothesis draw (`lrkv.verify.strategies.paged_cases` draws one n_b per sequence).

@pytest.mark.parametrize("length", [0, 1, 2, 8, 9, 40])
def test_a_drawn_new_token_count_is_part_of_the_length(length):
    with pytest.raises(NoSuchExample):  # a search for a count outside [0, length] finds none
        find(new_tokens(length), lambda n: not 0 <= n <= length, settings=settings(database=None))


@pytest.mark.parametrize("kind", [lambda n: n == 0, lambda n: n == 1, lambda n: 2 <= n <= 8, lambda n: n >= 9],
                         ids=["idle", "decode", "speculative", "prefill"])
def test_every_kind_of_step_is_drawn(kind):
    find(new_tokens(40), kind, settings=settings(database=None))
