"""Printed precision: what a decimal printed in the paper or a review stands for.

"48.4" is any value in [48.35, 48.45]; a recomputed exact Fraction *matches* it when it lies
in that interval (either rounding direction at the exact midpoint). Every paper-audit proof
compares through these helpers, so one rule of rounding applies to the whole audit.
"""

from __future__ import annotations

import math
from decimal import ROUND_HALF_UP, Decimal
from fractions import Fraction

from ..record import Verdict


def dec(printed: str) -> Fraction:
    """The printed decimal as an exact Fraction ('48.4' -> 242/5); ValueError on a non-number."""
    if not isinstance(printed, str):
        raise TypeError(f"a printed number is a decimal string, got {type(printed).__name__}: {printed!r}")
    return Fraction(printed)


def decimals(printed: str) -> int:
    """How many digits follow the decimal point in the printed string."""
    return len(printed.split(".")[1]) if "." in printed else 0


def half_unit(printed: str) -> Fraction:
    """Half a unit in the last printed digit: '48.4' -> 1/20."""
    return Fraction(1, 2 * 10 ** decimals(printed))


def interval(printed: str) -> tuple[Fraction, Fraction]:
    """The values a printed decimal stands for: '2.894' -> [2.8935, 2.8945]."""
    return dec(printed) - half_unit(printed), dec(printed) + half_unit(printed)


def matches(value: Fraction, printed: str) -> bool:
    """value rounds to the printed decimal (either rounding direction at the exact midpoint)."""
    return abs(Fraction(value) - dec(printed)) <= half_unit(printed)


def truncate(value: Fraction, digits: int) -> Fraction:
    """value cut (towards −∞) after `digits` decimals."""
    return Fraction(math.floor(Fraction(value) * 10**digits), 10**digits)


def round_half_up(value: Fraction, digits: int) -> Fraction:
    """value rounded to `digits` decimals, halves up (the paper's tables round this way)."""
    return Fraction(math.floor(Fraction(value) * 10**digits + Fraction(1, 2)), 10**digits)


def truncates_to(value: Fraction, printed: str) -> bool:
    return truncate(value, decimals(printed)) == dec(printed)


def in_range(x: Fraction, lo: str, hi: str) -> bool:
    """x lies in a printed range 'lo–hi', each end widened by its printed half unit."""
    return interval(lo)[0] <= x <= interval(hi)[1]


def pct(x: Fraction) -> Fraction:
    return 100 * Fraction(x)


def show(x: Fraction, digits: int = 4) -> str:
    """Exact value rounded half-up at `digits` decimals (53.125 -> '53.13', not float's '53.12')."""
    x = Fraction(x)
    q = Decimal(x.numerator) / Decimal(x.denominator)
    return str(q.quantize(Decimal(1).scaleb(-digits), rounding=ROUND_HALF_UP))


def reproduced(all_match: bool, why_ok: str, why_bad: str, evidence: dict) -> Verdict:
    """proved when every printed number was reproduced, else inconsistent."""
    if all_match:
        return Verdict("proved", why_ok, evidence)
    return Verdict("inconsistent", why_bad, evidence)
