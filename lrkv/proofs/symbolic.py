"""Symbolic building blocks shared by the proofs.

Two kinds of proof objects:
  * general symbols — `MatrixSymbol`s with symbolic dimensions, symbolic angles; an identity
    that sympy reduces to ZeroMatrix holds for every size;
  * fully symbolic small matrices — every entry its own real symbol, so a residual that
    expands to zero is a polynomial (or rational / trigonometric) identity in all entries,
    not a check on sampled numbers.

When a residual does not vanish, `witness` finds small integer values of the symbols at
which it is non-zero: that assignment is the counterexample reported as evidence.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from fractions import Fraction

import sympy as sp
from sympy.core.function import AppliedUndef


# ----------------------------------------------------------------------------- construction
def matrix(name: str, rows: int, cols: int) -> sp.Matrix:
    """A rows×cols matrix whose every entry is a distinct real symbol name_{i}{j}."""
    return sp.Matrix(rows, cols, lambda i, j: sp.Symbol(f"{name}_{i}{j}", real=True))


def row(name: str, n: int) -> sp.Matrix:
    """A 1×n row vector of distinct real symbols name_{j} (the paper's row-vector convention)."""
    return sp.Matrix(1, n, lambda _, j: sp.Symbol(f"{name}_{j}", real=True))


def rope_matrix(angles: Sequence[sp.Expr]) -> sp.Matrix:
    """R with rope(x) = x R for a rotate-half vector of width 2P, plane i = dims (i, i+P).

    Block [[c, s], [-s, c]] per plane, the convention of lrkv.reference.rope (DESIGN §5).
    """
    P = len(angles)
    R = sp.zeros(2 * P, 2 * P)
    for i, a in enumerate(angles):
        c, s = sp.cos(a), sp.sin(a)
        R[i, i], R[i, i + P], R[i + P, i], R[i + P, i + P] = c, s, -s, c
    return R


# ----------------------------------------------------------------------------- simplification
def expand_inside(expr: sp.Expr) -> sp.Expr:
    """Expand polynomial arguments of exp/sqrt/powers so equal radicands become equal objects."""
    return expr.replace(
        lambda e: isinstance(e, sp.exp) or (e.is_Pow and not e.exp.is_Integer),
        lambda e: sp.exp(sp.expand(e.args[0])) if isinstance(e, sp.exp) else sp.Pow(sp.expand(e.base), e.exp),
    )


def trig_reduce(expr: sp.Expr) -> sp.Expr:
    """Canonical form of a polynomial in sines and cosines of symbolic angles.

    Expand arguments, split sums and integer multiples (expand_trig), then rewrite every
    sin(a)² as 1 − cos(a)²: in R[cos a, sin a]/(cos² + sin² − 1) each element has a unique
    representative of degree ≤ 1 in sin a, so the result is 0 iff the identity holds (for
    angles that are independent symbols or their integer combinations).
    """
    e = expr.replace(lambda x: isinstance(x, (sp.sin, sp.cos)), lambda x: x.func(sp.expand(x.args[0])))
    e = sp.expand(sp.expand_trig(e))
    for _ in range(8):  # higher powers: repeat until no sin(a)**k with k >= 2 remains
        sq = {x.base for x in e.atoms(sp.Pow) if isinstance(x.base, sp.sin) and x.exp.is_Integer and x.exp >= 2}
        if not sq:
            break
        for s_ in sq:
            e = e.replace(lambda x: x.is_Pow and x.base == s_ and x.exp.is_Integer and x.exp >= 2,
                          lambda x: (1 - sp.cos(s_.args[0]) ** 2) * s_ ** (x.exp - 2))
        e = sp.expand(e)
    return e


def simplify_entry(expr: sp.Expr, how: str = "expand") -> sp.Expr:
    """Canonical form of one residual entry.

    expand    polynomial identities (associativity, gradients, norms)
    rational  rational functions (softmax weights, online-softmax merges)
    trig      identities needing sin²+cos² = 1 or angle addition
    """
    if how == "expand":
        return sp.expand(expand_inside(expr))
    if how == "rational":
        # power_exp=False keeps exp(l1 + l2) whole: splitting it into products only slows cancel.
        return sp.cancel(sp.together(sp.expand(expand_inside(expr), power_exp=False)))
    if how == "trig":
        return trig_reduce(expr)
    raise ValueError(f"unknown simplification {how!r}")


def residual(lhs, rhs, how: str = "expand") -> sp.Matrix:
    """Entry-wise simplified lhs − rhs; raises ShapeError on a shape mismatch."""
    lhs, rhs = sp.Matrix(lhs), sp.Matrix(rhs)
    if lhs.shape != rhs.shape:
        raise sp.ShapeError(f"shapes differ: {lhs.shape} vs {rhs.shape}")
    return (lhs - rhs).applyfunc(lambda e: simplify_entry(e, how))


def is_zero(m) -> bool:
    m = sp.Matrix(m) if not isinstance(m, sp.Expr) else sp.Matrix([[m]])
    return all(e == 0 for e in m)


def general_residual(lhs: sp.MatrixExpr, rhs: sp.MatrixExpr) -> sp.MatrixExpr:
    """lhs − rhs for MatrixSymbol expressions (symbolic sizes), expanded and evaluated."""
    return sp.expand((lhs - rhs).doit()).doit()


def general_is_zero(res) -> bool:
    return isinstance(res, sp.ZeroMatrix) or res == 0 or (hasattr(res, "is_ZeroMatrix") and res.is_ZeroMatrix)


# ----------------------------------------------------------------------------- counterexamples
def find_witness(expr, *, values: Sequence = (1, 2, -1, 3, 0, -2), max_tries: int = 200) -> dict | None:
    """Small integer values of the free symbols at which expr (scalar or matrix) is non-zero.

    Deterministic, so reports are reproducible. Returns {Symbol: int}, or None when no
    assignment in the budget makes it non-zero (the caller then reports the residual only).
    """
    m = sp.Matrix(expr) if not isinstance(expr, sp.Expr) else sp.Matrix([[expr]])
    if m.has(AppliedUndef):  # an undefined function has no value at integers: report the residual only
        return None
    syms = sorted(m.free_symbols, key=lambda s: s.name)
    if not syms:
        return {} if not is_zero(m) else None
    for k in range(max_tries):
        # assignment k gives symbol i the value values[(i·(k+1) + k) mod n]: k = 0 cycles the
        # list once, later k stride through it differently so ties between symbols break.
        sub = {s: values[(i * (k + 1) + k) % len(values)] for i, s in enumerate(syms)}
        # respect positivity (exponentials, sizes): a witness must lie in the symbol's domain
        sub = {s: (v if v > 0 else abs(v) + 1) if s.is_positive else v for s, v in sub.items()}
        try:
            val = m.subs(sub)
            if any(v.has(sp.zoo, sp.nan, sp.oo, -sp.oo) for v in val):
                continue
            # Numerical evaluation at 30 digits: a value this far from 0 is certainly non-zero,
            # and the exact residual at the witness is reported beside it.
            if any(abs(complex(v.evalf(30))) > 1e-12 for v in val):
                return sub
        except (ZeroDivisionError, ValueError, TypeError):
            continue
    return None


def witness(expr, **kw) -> dict | None:
    """find_witness with symbol names as keys (JSON-ready)."""
    sub = find_witness(expr, **kw)
    return None if sub is None else {str(k): int(v) for k, v in sub.items()}


# ----------------------------------------------------------------------------- JSON
def jsonable(x):
    """Evidence value -> JSON: sympy objects and matrices as strings, Fractions as 'p/q'."""
    if isinstance(x, dict):
        return {str(k): jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v) for v in x]
    if isinstance(x, bool) or x is None or isinstance(x, (int, str)):
        return x
    if isinstance(x, float):
        return x if x == x and abs(x) != float("inf") else str(x)
    if isinstance(x, Fraction):
        return str(x)
    if isinstance(x, (sp.MatrixBase, sp.MatrixExpr)):
        return str(x.tolist()) if isinstance(x, sp.MatrixBase) else str(x)
    if isinstance(x, sp.Basic):
        return str(x)
    return str(x)


def pct(x: Fraction | float, digits: int = 4) -> str:
    """A fraction as a percentage string with `digits` decimals (exact input, rounded once)."""
    return f"{float(x) * 100:.{digits}f}%"


def check_identity(
    lhs_fn: Callable[[], object], rhs_fn: Callable[[], object], how: str = "expand"
) -> tuple[bool, dict]:
    """Evaluate both sides (either may raise a shape error), return (holds, evidence)."""
    try:
        res = residual(lhs_fn(), rhs_fn(), how)
    except (sp.ShapeError, ValueError, TypeError) as e:
        return False, {"error": f"{type(e).__name__}: {e}"}
    if is_zero(res):
        return True, {"residual": "0"}
    return False, nonzero_evidence(res)


def short(x, limit: int = 600) -> str:
    """str(x), cut to `limit` characters so a residual stays readable in a report."""
    s = jsonable(x) if not isinstance(x, str) else x
    s = s if isinstance(s, str) else str(s)
    return s if len(s) <= limit else s[:limit] + f" … ({len(s) - limit} more characters)"


def nonzero_evidence(res) -> dict:
    """A non-vanishing residual, a small-integer witness, and the residual's value there."""
    sub = find_witness(res)
    ev = {"residual": short(res), "witness": None if sub is None else {str(k): int(v) for k, v in sub.items()}}
    if sub:
        m = sp.Matrix(res) if not isinstance(res, sp.Expr) else sp.Matrix([[res]])
        ev["residual_at_witness"] = short(m.subs(sub).applyfunc(sp.simplify))
    return ev


def grid(**axes: Sequence) -> list[dict]:
    """Cartesian product of named axes as a list of dicts."""
    keys = list(axes)
    return [dict(zip(keys, vals)) for vals in itertools.product(*(axes[k] for k in keys))]
