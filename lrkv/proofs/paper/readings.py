"""The audit standard for a search over readings of a printed number (docs/proofs.md, "Statuses").

A record may call a printed number `reconciled` only through ONE named assumption, declared
before any search, that reproduces the value under round-to-nearest at the printed precision
(the rule every sibling percentage of Tables 7–9 obeys). Any wider search over readings is
evidence only, and reports two counts: how many candidate readings it tried, and how many of
them would also have matched the printed value moved by one unit in its last digit (±0.1 for
"48.4"). A search that finds readings for the perturbed values as easily as for the printed
one has shown nothing about the printed one.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from decimal import Decimal
from fractions import Fraction

from .printed import decimals, matches

# The rounding rule of the standard, named once so the evidence can say which rule was applied.
ROUNDING = "round to nearest at the printed precision"


def perturbed(printed: str, steps: Sequence[int] = (-1, 1)) -> list[str]:
    """The printed decimal moved by `steps` units in its last digit: '48.4' -> ['48.3', '48.5']."""
    unit = Decimal(1).scaleb(-decimals(printed))
    return [str(Decimal(printed) + s * unit) for s in steps]


def audit(fits: Callable[[str], list], printed: str, tried: int) -> dict:
    """Run a search (`fits(value) -> the readings that print as value`) on the printed value and
    on its ±1-unit perturbations. `tried` is the number of candidate readings the search covers."""
    hits = fits(printed)
    moved = {p: len(fits(p)) for p in perturbed(printed)}
    return {"candidates_tried": tried, "matching_printed": len(hits), "matching_perturbed": moved,
            "is_evidence": bool(hits) and not any(moved.values())}


def range_reproduced(values: Sequence[Fraction], lo: str, hi: str) -> bool:
    """A printed range 'lo–hi' reproduces a set of values when its ends are the rounded minimum
    and maximum (containment alone also holds for the ranges one unit wider or narrower)."""
    return matches(min(values), lo) and matches(max(values), hi)


def range_audit(values: Sequence[Fraction], lo: str, hi: str) -> dict:
    """range_reproduced for the printed ends and for each end moved by one unit."""
    moved = {f"{a}–{b}": range_reproduced(values, a, b)
             for a, b in [(p, hi) for p in perturbed(lo)] + [(lo, p) for p in perturbed(hi)]}
    return {"reproduced": range_reproduced(values, lo, hi), "perturbed_ranges_reproduced": moved}
