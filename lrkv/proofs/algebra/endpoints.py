"""Item 6 — the endpoints of the rank knob (Sec. 3, p. 3; Chinese review §2.1).

  r = 0      W_h = W_S for every head: all heads share one K and one V projection — MQA-style
             sharing, with MQA's cache (2 d_h per token and layer) and K/V weights (2 d d_h).
  r ≥ d_h    any set of MHA projections {W_h} is expressible: U_h = W_h − W_S (padded with
             zero columns to width r), B_h = [I_{d_h} | 0]. Below d_h it is not: U_h B_h^T has
             rank ≤ r, so a head whose difference from W_S has rank d_h is out of reach.
"""

from __future__ import annotations

from itertools import combinations

import sympy as sp

from lrkv.spec import AttentionSpec, cache_elements, kv_param_count

from ..record import Verdict
from ..registry import proof
from ..symbolic import check_identity, jsonable, matrix


def head_projection(W_S, U, B):
    """Eqs. 2–5: W_h = W_S + U_h B_h^T."""
    return W_S + U * B.T


def lrkv_cache(H: int, d_h: int) -> int:
    return cache_elements(AttentionSpec.lrkv(H, d_h, 0))


@proof(
    "endpoint_rank0_mqa",
    item=6,
    claim="At r = 0 every head's K/V projection is the shared one (W_h = W_S), i.e. MQA-style sharing, with MQA's cache and K/V parameter counts.",
    source="Sec. 3 (r = 0 endpoint, p. 3); English review Sec. 3; Chinese review §2.1",
    expected="proved",
)
def endpoint_rank0_mqa(*, projection=head_projection, cache=lrkv_cache) -> Verdict:
    d, d_h, H = 3, 2, 3
    W_S = matrix("w", d, d_h)
    # r = 0: U_h is d×0 and B_h is d_h×0; their product is the d×d_h zero matrix.
    heads = [projection(W_S, sp.zeros(d, 0), sp.zeros(d_h, 0)) for _ in range(H)]
    shared = all(check_identity(lambda h=h: h, lambda: W_S)[0] for h in heads)
    bad = []
    for Hv in (1, 2, 6, 18, 32):
        for dh in (2, 64, 128):
            mqa = AttentionSpec.mqa(Hv, dh)
            lr = AttentionSpec.lrkv(Hv, dh, 0)
            if cache(Hv, dh) != cache_elements(mqa) or kv_param_count(lr) != kv_param_count(mqa):
                bad.append({"H": Hv, "d_h": dh, "lrkv_cache": cache(Hv, dh), "mqa_cache": cache_elements(mqa),
                            "lrkv_params": kv_param_count(lr), "mqa_params": kv_param_count(mqa)})
    ev = {"heads_equal_W_S": shared, "d": d, "d_h": d_h, "H": H, "grid_mismatches": bad,
          "checks": {"heads_equal_W_S": shared, "cache_and_params_are_mqa": not bad},
          "cache_at_r0": "2 d_h per token and layer = MQA", "ratio_at_r0": "1/H"}
    if shared and not bad:
        return Verdict("proved", "With empty factors U_h (d×0) and B_h (d_h×0) every W_h equals the "
                       "symbolic W_S, so all heads read one K and one V; the spec's cache and K/V weight "
                       "counts equal MQA's on the grid.", ev)
    return Verdict("refuted", "At r = 0 the candidate projection or cache accounting is not MQA's.", ev)


def full_rank_construction(W_S, W_h, r):
    """U_h = W_h − W_S padded with zero columns to width r; B_h = [I_{d_h} | 0] (needs r ≥ d_h)."""
    d, d_h = W_h.shape
    U = (W_h - W_S).row_join(sp.zeros(d, r - d_h)) if r >= d_h else (W_h - W_S)[:, :r]
    B = sp.eye(d_h).row_join(sp.zeros(d_h, r - d_h)) if r >= d_h else sp.eye(d_h)[:, :r]
    return U, B


@proof(
    "endpoint_full_rank_mha",
    item=6,
    claim="With r ≥ d_h, LRKV can express any MHA: for any W_S and any per-head W_h, U_h = W_h − W_S and B_h = [I | 0] give W_S + U_h B_h^T = W_h; with r < d_h it cannot (U_h B_h^T has rank ≤ r).",
    source="Sec. 3 (full-rank endpoint); Chinese review §2.1; English review Sec. 3",
    expected="proved",
)
def endpoint_full_rank_mha(*, construct=full_rank_construction, below_rank=1) -> Verdict:
    d, d_h, H = 3, 2, 2
    W_S = matrix("w", d, d_h)
    targets = [matrix(f"m{h}", d, d_h) for h in range(H)]
    ev: dict = {"d": d, "d_h": d_h, "H": H, "entries": "all symbols", "constructions": []}
    ok = True
    for r in (d_h, d_h + 1):
        for h, W_h in enumerate(targets):
            U, B = construct(W_S, W_h, r)
            holds, e = check_identity(lambda: head_projection(W_S, U, B), lambda: W_h)
            ok &= holds and U.shape == (d, r) and B.shape == (d_h, r)
            ev["constructions"].append({"r": r, "head": h, "U_shape": list(U.shape), "B_shape": list(B.shape), **e})
    # Below d_h: every d_h×d_h minor of a symbolic U (d×1) B^T (1×d_h) vanishes identically.
    U1, B1 = matrix("u", d, below_rank), matrix("b", d_h, below_rank)
    prod = U1 * B1.T
    minors = [sp.expand(prod.extract(list(rows), list(range(d_h))).det()) for rows in combinations(range(d), d_h)]
    target = sp.Matrix([[1, 0], [0, 1], [0, 0]])  # W_h − W_S with rank 2
    ev["rank_below_d_h"] = {"r": below_rank, "minors_of_UBt": [str(m) for m in minors],
                            "target_difference": jsonable(target), "target_minor": str(target[:2, :].det())}
    below = all(m == 0 for m in minors) and target[:2, :].det() != 0
    ev["checks"] = {"construction_at_and_above_d_h": ok, "unreachable_below_d_h": below}
    if ok and below:
        return Verdict("proved", "For symbolic W_S and W_h (3×2) the construction reproduces W_h exactly "
                       "at r = d_h and r = d_h + 1; at r = 1 < d_h every 2×2 minor of U B^T is identically "
                       "0 while a target difference of rank 2 has minor 1, so it is unreachable.", ev)
    return Verdict("refuted", "The candidate construction does not reproduce every MHA head.", ev)
