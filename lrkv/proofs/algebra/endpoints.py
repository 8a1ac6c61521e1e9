"""The endpoints of the rank knob (Sec. 3, p. 3; Chinese review §2.1).

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

from ..record import Verdict, failing
from ..registry import proof
from ..symbolic import check_identity, jsonable, matrix


def head_projection(W_S, U, B):
    """Eqs. 2–5: W_h = W_S + U_h B_h^T."""
    return W_S + U * B.T


def lrkv_cache(H: int, d_h: int) -> int:
    return cache_elements(AttentionSpec.lrkv(H, d_h, 0))


def attention_output(q, K, V):
    """softmax(q K^T / sqrt(d_h)) V, one row per query, every key visible (row vectors)."""
    d_h = K.shape[1]
    logits = q * K.T / sp.sqrt(d_h)
    out = []
    for i in range(q.rows):
        w = [sp.exp(logits[i, j]) for j in range(K.rows)]
        out.append((sp.Matrix([w]) * V / sum(w)))
    return sp.Matrix.vstack(*out)


def lrkv_outputs(x, W_q, W_SK, W_SV, factors, projection=head_projection):
    """Every head's output with W_h = W_S + U_h B_h^T for keys and values (`factors[h]` =
    (U_k, B_k, U_v, B_v))."""
    return [attention_output(x * Wq, x * projection(W_SK, Uk, Bk), x * projection(W_SV, Uv, Bv))
            for Wq, (Uk, Bk, Uv, Bv) in zip(W_q, factors)]


def differs_at_a_point(diff: sp.Matrix) -> dict | None:
    """A deterministic rational point at which some entry of `diff` is non-zero (30 digits), or None."""
    syms = sorted(diff.free_symbols, key=lambda v: v.name)
    point = {v: sp.Rational((i % 5) - 2, 3) for i, v in enumerate(syms)}
    if any(abs(complex(e.subs(point).evalf(30))) > 1e-12 for e in diff):
        return {str(k): str(v) for k, v in point.items()}
    return None


def outputs_identical(a: sp.Matrix, b: sp.Matrix) -> tuple[bool, dict]:
    """a ≡ b as functions of every symbol: a point where they differ settles it cheaply (the
    counterexample); otherwise the residual must cancel to 0 symbolically."""
    try:
        point = differs_at_a_point(a - b)
    except (sp.ShapeError, ValueError, TypeError) as e:
        return False, {"error": f"{type(e).__name__}: {e}"}
    if point is not None:
        return False, {"differs_at": point}
    return check_identity(lambda: a, lambda: b, how="rational")


def mqa_outputs(x, W_q, W_K, W_V):
    """MQA: every head's query against the one shared K = x W_K and V = x W_V."""
    return [attention_output(x * Wq, x * W_K, x * W_V) for Wq in W_q]


@proof(
    "endpoint_rank0_mqa",
    item=6,
    claim="At r = 0 LRKV's attention output equals MQA's (one shared K and V, a query per head) for every input, with MQA's cache and K/V parameter counts.",
    source="Sec. 3 (r = 0 endpoint, p. 3); English review Sec. 3; Chinese review §2.1",
    expected="proved",
)
def endpoint_rank0_mqa(*, projection=head_projection, cache=lrkv_cache) -> Verdict:
    """outputs_equal_mqa: the two layers' outputs — softmax over symbolic logits, symbolic
    tokens, queries and shared weights — are the same rational function of exponentials;
    rank1_differs: at r = 1 (symbolic U_h, B_h) they differ, so the comparison can tell the two
    apart; cache_and_params_are_mqa: the spec's counts. (An earlier form compared the projection
    W_S + (d×0)(0×d_h) with W_S, which holds for every input.)"""
    T, d, d_h, H = 2, 2, 2, 2
    x = matrix("x", T, d)
    W_q = [matrix(f"q{h}", d, d_h) for h in range(H)]
    W_SK, W_SV = matrix("sk", d, d_h), matrix("sv", d, d_h)
    mqa = mqa_outputs(x, W_q, W_SK, W_SV)
    empty = [(sp.zeros(d, 0), sp.zeros(d_h, 0), sp.zeros(d, 0), sp.zeros(d_h, 0))] * H
    try:
        r0 = lrkv_outputs(x, W_q, W_SK, W_SV, empty, projection)
        equal = all(outputs_identical(a, b)[0] for a, b in zip(r0, mqa))
    except (sp.ShapeError, ValueError, TypeError) as e:
        equal, r0 = False, f"{type(e).__name__}: {e}"
    # Non-vacuity: at r = 1 the same comparison sees a difference (at a deterministic point).
    rank1 = [(matrix(f"uk{h}", d, 1), matrix(f"bk{h}", d_h, 1), matrix(f"uv{h}", d, 1), matrix(f"bv{h}", d_h, 1))
             for h in range(H)]
    point = differs_at_a_point(lrkv_outputs(x, W_q, W_SK, W_SV, rank1, projection)[0] - mqa[0])
    rank1_differs = point is not None
    bad = []
    for Hv in (1, 2, 6, 18, 32):
        for dh in (2, 64, 128):
            mqa_spec = AttentionSpec.mqa(Hv, dh)
            lr = AttentionSpec.lrkv(Hv, dh, 0)
            if cache(Hv, dh) != cache_elements(mqa_spec) or kv_param_count(lr) != kv_param_count(mqa_spec):
                bad.append({"H": Hv, "d_h": dh, "lrkv_cache": cache(Hv, dh), "mqa_cache": cache_elements(mqa_spec),
                            "lrkv_params": kv_param_count(lr), "mqa_params": kv_param_count(mqa_spec)})
    checks = {"outputs_equal_mqa": equal, "rank1_differs": rank1_differs, "cache_and_params_are_mqa": not bad}
    ev = {"T": T, "d": d, "d_h": d_h, "H": H, "entries": "all symbols (tokens, queries, shared K/V weights)",
          "rank1_differs_at": point, "grid_mismatches": bad, "checks": checks,
          "cache_at_r0": "2 d_h per token and layer = MQA", "ratio_at_r0": "1/H"}
    if all(checks.values()):
        return Verdict("proved", "For symbolic tokens (2×2), per-head queries and shared K/V weights, every "
                       "head's softmax(q K_h^T/√d_h) V_h with W_h = W_S + U_h B_h^T at r = 0 is identically "
                       "MQA's output (one K = x W_S^K, one V = x W_S^V); at r = 1 the outputs differ, so the "
                       "comparison is not vacuous. The spec's cache and K/V weight counts equal MQA's.", ev)
    return Verdict("refuted", f"Sub-check(s) {failing(checks)} fail.", ev)


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
