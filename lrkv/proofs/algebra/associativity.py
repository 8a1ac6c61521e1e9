"""Score and value associativity (paper Eqs. 6–7, Sec. 3 p. 4).

With the head key/value K_h = S + R_h B_h^T (Eqs. 2–5; S = X W_shared [T, d_h],
R_h = X U_h [T, r], B_h [d_h, r]) a query row q_h [1, d_h] and softmax weights a_h [1, T]:

    q_h K_h^T = q_h S_K^T + (q_h B_h^K) (R_h^K)^T        (Eq. 6)
    a_h V_h   = a_h S_V   + (a_h R_h^V) (B_h^V)^T        (Eq. 7)

Both are proved twice: with MatrixSymbols of symbolic sizes T, d_h, r (sympy reduces the
residual to ZeroMatrix) and with fully symbolic 3×3 / 3×2 matrices, every entry a symbol.
The candidate factored functions are inputs, so a wrong contraction order is rejected.
"""

from __future__ import annotations

from fractions import Fraction

import sympy as sp

from ..record import Verdict
from ..registry import proof
from ..symbolic import check_identity, general_is_zero, general_residual, jsonable, matrix, row

T_, DH_, R_ = sp.symbols("T d_h r", positive=True, integer=True)


# ----------------------------------------------------------------------------- the paper's forms
def materialized_scores(q, S, R, B):
    """q (S + R B^T)^T: rebuild every head key, then one full-width dot product per token."""
    return q * (S + R * B.T).T


def factored_scores(q, S, R, B):
    """Eq. 6: project the query once (q B, d_h → r), then scan the r-wide latents."""
    return q * S.T + (q * B) * R.T


def materialized_values(a, S, R, B):
    return a * (S + R * B.T)


def factored_values(a, S, R, B):
    """Eq. 7: reduce the r-wide latents under the weights, then lift once through B^T."""
    return a * S + (a * R) * B.T


# ----------------------------------------------------------------------------- the check
def _associativity(candidate, reference, lead: str, sizes: tuple[int, int, int]) -> tuple[bool, dict]:
    """Residual reference − candidate, for symbolic sizes and for fully symbolic matrices."""
    evidence: dict = {}
    # General sizes: the lead operand is a row [1, d_h] (query) or [1, T] (weights).
    lead_sym = sp.MatrixSymbol(lead, 1, DH_ if lead == "q" else T_)
    S, R, B = sp.MatrixSymbol("S", T_, DH_), sp.MatrixSymbol("R", T_, R_), sp.MatrixSymbol("B", DH_, R_)
    try:
        gen = general_residual(reference(lead_sym, S, R, B), candidate(lead_sym, S, R, B))
        gen_ok = general_is_zero(gen)
        evidence["general_sizes"] = {"residual": jsonable(gen), "sizes": "T, d_h, r symbolic"}
    except (sp.ShapeError, ValueError, TypeError) as e:
        gen_ok = False
        evidence["general_sizes"] = {"error": f"{type(e).__name__}: {e}"}
    T, d_h, r = sizes
    lead_m = row(lead, d_h if lead == "q" else T)
    Sm, Rm, Bm = matrix("s", T, d_h), matrix("z", T, r), matrix("b", d_h, r)
    ok, ev = check_identity(lambda: reference(lead_m, Sm, Rm, Bm), lambda: candidate(lead_m, Sm, Rm, Bm))
    evidence["explicit"] = {"T": T, "d_h": d_h, "r": r, "entries": "all symbols", **ev}
    return gen_ok and ok, evidence


def _review_example(scores, values) -> dict:
    """The English review's hand calculation (Sec. 3): q=(2,1), s=(1,3), z=4, b=(1,−1)^T."""
    q, s, z, b = sp.Matrix([[2, 1]]), sp.Matrix([[1, 3]]), sp.Matrix([[4]]), sp.Matrix([[1], [-1]])
    a = sp.Matrix([[Fraction(1, 4), Fraction(3, 4)]])
    zv, S0 = sp.Matrix([[2], [6]]), sp.zeros(2, 2)
    return {
        "score": jsonable(scores(q, s, z, b)[0]), "score_expected": 9,
        "private_value": jsonable(values(a, S0, zv, b)), "private_value_expected": "[[5, -5]]",
    }


@proof(
    "score_associativity",
    item=1,
    claim="For every query, q_h K_h^T = q_h S_K^T + (q_h B_h^K)(R_h^K)^T: the factored score equals the score against the rebuilt head keys.",
    source="Eq. 6 (Sec. 3, p. 4)",
    expected="proved",
)
def score_associativity(*, factored=factored_scores, sizes=(3, 3, 2)) -> Verdict:
    ok, ev = _associativity(factored, materialized_scores, "q", sizes)
    ev["review_example"] = _review_example(factored, factored_values) if ok else None
    if ok:
        return Verdict("proved", "Transposition distributes over S + R B^T and matrix products "
                       "associate; the residual is ZeroMatrix for symbolic T, d_h, r and zero entry "
                       "by entry for fully symbolic 3×3 / 3×2 matrices. The review's hand example "
                       "gives 5 + 4 = 9 both ways.", ev)
    return Verdict("refuted", "The candidate factored score differs from the materialized score.", ev)


@proof(
    "value_associativity",
    item=1,
    claim="For any weights a_h, a_h V_h = a_h S_V + (a_h R_h^V)(B_h^V)^T: the r-wide weighted latent sum lifted once by B^T equals weighting the rebuilt values.",
    source="Eq. 7 (Sec. 3, p. 4)",
    expected="proved",
)
def value_associativity(*, factored=factored_values, sizes=(3, 3, 2)) -> Verdict:
    ok, ev = _associativity(factored, materialized_values, "a", sizes)
    if ok:
        return Verdict("proved", "Left multiplication distributes over S + R B^T and associates, "
                       "so (a R) B^T = a (R B^T); zero residual for symbolic sizes and for fully "
                       "symbolic matrices.", ev)
    return Verdict("refuted", "The candidate factored value path differs from the materialized one.", ev)
