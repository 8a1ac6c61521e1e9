"""The English review's hand calculation of Eqs. 6–7, recomputed.
"""

from __future__ import annotations

import sympy as sp

from ..record import Verdict
from ..registry import proof
from . import data

LN2 = sp.log(2)


# ----------------------------------------------------------------------------- the hand example
@proof(
    "review_hand_example",
    item=1,
    claim="The English review's hand calculation of Eqs. 6–7: q = (2, 1), shared key (1, 3), latent 4, basis column (1, −1) give the materialised key (5, −1) and score 9 = 5 + 1·4; weights (1/4, 3/4) on private values (2, 6) give 5, contributing (5, −5).",
    source="English review Sec. 3 (hand calculation); Eqs. 6–7",
    expected="proved",
)
def review_hand_example(*, printed=data.HAND_EXAMPLE) -> Verdict:
    p = printed["printed"]
    q, s = sp.Matrix([printed["q"]]), sp.Matrix([printed["shared_key"]])
    z, B = sp.Matrix([[printed["latent"]]]), sp.Matrix(printed["basis_column"])  # B: [d_h, r] = [2, 1]
    k = s + z * B.T  # Eq. 5: materialised head key
    a = sp.Matrix([[sp.Rational(w) for w in p["weights"]]])
    R_V = sp.Matrix(p["private_values"])  # [T, r] = [2, 1]
    got = {"materialized_key": tuple(k), "score": (q * k.T)[0], "shared_score": (q * s.T)[0],
           "projected_query": (q * B)[0], "factored_score": (q * s.T)[0] + ((q * B) * z.T)[0],
           "weighted_private": (a * R_V)[0], "private_contribution": tuple((a * R_V) * B.T)}
    checks = {"materialized_key": got["materialized_key"] == tuple(p["materialized_key"]),
              "score": got["score"] == p["score"] == got["factored_score"],
              "shared_and_projected": (got["shared_score"], got["projected_query"]) == (p["shared_score"], p["projected_query"]),
              "weighted_private": got["weighted_private"] == p["weighted_private"],
              "private_contribution": got["private_contribution"] == tuple(p["private_contribution"])}
    ev = {"recomputed": {k_: str(v) for k_, v in got.items()}, "checks": checks}
    if all(checks.values()):
        return Verdict("proved", "k = (1,3) + 4·(1,−1) = (5,−1); q·k = 9 = q·s + (qB)·z = 5 + 1·4; "
                       "(1/4)·2 + (3/4)·6 = 5 and 5·(1,−1) = (5,−5).", ev)
    return Verdict("refuted", f"Sub-check(s) {[k_ for k_, v in checks.items() if not v]} do not reproduce the "
                   "printed numbers.", ev)
