"""The two-sided check every accounting formula of Eqs. 8–10 gets.

  * derivation    the formula against the count read off what the reference allocates or
                  computes (algebra/layouts.py, algebra/tracing.py), as polynomials in general
                  symbols — never against a restatement of the formula;
  * spec_on_grid  the lrkv.spec function the rest of the suite uses against the formula on an
                  integer grid, exact Fractions, no tolerance — the code cannot drift from it.
"""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import sympy as sp

from ..record import Verdict
from ..symbolic import jsonable
from .layouts import DH, H, R

T = sp.Symbol("T", positive=True)  # history length
C = sp.Symbol("c", positive=True)  # a cache budget, fraction of MHA's

# Grids small enough to stay fast, wide enough to hit odd sizes and the paper's presets.
HEADS = (1, 2, 3, 6, 12, 18, 32)
HEAD_DIMS = (2, 8, 64, 128)
RANKS = (0, 1, 7, 46, 51, 55, 64, 128)

__all__ = ["C", "DH", "H", "HEADS", "HEAD_DIMS", "R", "RANKS", "T", "check_formula", "exact", "formula_verdict"]


def exact(x) -> Fraction:
    """A sympy/int/Fraction number as an exact Fraction (raises on anything irrational)."""
    if isinstance(x, Fraction):
        return x
    x = sp.nsimplify(x) if not isinstance(x, sp.Basic) else x
    if not x.is_Rational:
        raise ValueError(f"not an exact rational: {x}")
    return Fraction(int(x.p), int(x.q))


def check_formula(*, derived: sp.Expr | None, formula: Callable, impls: dict[str, Callable],
                  points: list[dict], symbols: dict, derivation_error: str | None = None) -> tuple[bool, dict]:
    """derived − formula must simplify to 0, and every impl must equal the formula on the grid.

    `derived` is None when the count could not be read off the reference (derivation_error says why):
    the derivation sub-check then fails rather than being skipped."""
    res = None
    if derived is not None:
        try:
            res = sp.simplify(derived - formula(**symbols))
        except (TypeError, ValueError) as e:
            res, derivation_error = None, f"{type(e).__name__}: {e}"
    mismatches = []
    for pt in points:
        want = exact(formula(**{k: sp.Integer(v) if isinstance(v, int) else sp.Rational(str(v))
                                for k, v in pt.items()}))
        for label, fn in impls.items():
            got = fn(**pt)
            if Fraction(got) != want:
                mismatches.append({"point": jsonable(pt), "impl": label, "impl_value": str(got), "formula": str(want)})
    derivation_ok = res is not None and res == 0
    evidence = {
        "derived_from_reference": str(derived), "formula": str(formula(**symbols)),
        "residual": str(res) if res is not None else f"not derived: {derivation_error}",
        "grid_points": len(points), "impls": list(impls), "mismatches": mismatches[:10],
        "mismatch_count": len(mismatches),
        "checks": {"derivation": derivation_ok, "spec_on_grid": not mismatches},
    }
    return derivation_ok and not mismatches, evidence


def formula_verdict(ok: bool, evidence: dict, why: str) -> Verdict:
    if ok:
        return Verdict("proved", why, evidence)
    return Verdict("refuted", "The formula does not follow from the counts of what the reference allocates, or "
                   "the lrkv.spec function disagrees with it on the grid (see residual / mismatches).", evidence)
