"""The LRKV cache formulas: Eqs. 8–9, break-even, r = d_h, the rank ceiling
(paper Sec. 3, p. 4; English review Sec. 4; Chinese review §2.5).

Eq. 9 is derived from the cache the reference allocates (algebra/layouts.py): the element
count per token of `lrkv.reference.cache.allocate_cache` over that of the dense MHA cache.
The other three follow from Eq. 9 by solving an inequality; each is also brute-forced over
integer ranks and compared with the lrkv.spec function.
"""

from __future__ import annotations

import math
from fractions import Fraction

import sympy as sp

from lrkv.spec import (
    AttentionSpec, break_even_rank, cache_elements, cache_ratio, lrkv_cache_ratio, mha_cache_elements,
    model_cache_bytes, rank_ceiling,
)

from ..record import Verdict
from ..registry import proof
from ..symbolic import grid
from .formula_check import C, DH, HEAD_DIMS, HEADS, RANKS, H, R, check_formula, exact, formula_verdict
from .layouts import derive_or_error, numel, per_token, reference_layout


def lrkv_over_mha_layout(layout=reference_layout):
    """Eq. 9 read off the allocated caches: per-token elements of LRKV's over MHA's."""
    return lambda s: (per_token(layout(AttentionSpec.lrkv(s[H], s[DH], s[R])), s)
                      / per_token(layout(AttentionSpec.mha(s[H], s[DH])), s))


# ----------------------------------------------------------------------------- Eq. 8–9
def eq9_ratio(H, d_h, r, **_):
    return 1 / H + r / d_h


@proof(
    "cache_ratio_eq9",
    item=5,
    claim="M_LRKV = 2bNBT(d_h + H r) and M_LRKV / M_MHA = 1/H + r/d_h, independent of precision, layers, batch and length.",
    source="Eqs. 8–9 (Sec. 3, p. 4); lrkv.spec.lrkv_cache_ratio, cache_ratio, model_cache_bytes",
    expected="proved",
)
def cache_ratio_eq9(*, formula=eq9_ratio, spec_impls=None, bytes_fn=model_cache_bytes,
                    layout=reference_layout) -> Verdict:
    """derivation: the allocated LRKV cache (shared_k/v [B, T, d_h], latent_k/v [B, T, H, r]) over
    the dense MHA cache (k/v [B, T, H, d_h]), as polynomials in H, d_h, r; precision, layers,
    batch and length multiply both counts and cancel. eq8_bytes: model_cache_bytes equals
    layers × Σ lengths × bytes × the per-token elements of the allocated layout."""
    derived, how, err = derive_or_error(lrkv_over_mha_layout(layout))
    pts = grid(H=HEADS, d_h=HEAD_DIMS, r=RANKS)
    impls = {
        "lrkv_cache_ratio": lambda H, d_h, r: lrkv_cache_ratio(H, d_h, r),
        "cache_ratio(spec)": lambda H, d_h, r: cache_ratio(AttentionSpec.lrkv(H, d_h, r)),
        "cache_elements/mha_cache_elements": lambda H, d_h, r: Fraction(
            cache_elements(AttentionSpec.lrkv(H, d_h, r)), mha_cache_elements(AttentionSpec.lrkv(H, d_h, r))),
    }
    ok, ev = check_formula(derived=derived, formula=formula, impls=spec_impls or impls, points=pts,
                           symbols=dict(H=H, d_h=DH, r=R), derivation_error=err)
    ev["derivation_samples"] = how
    # Eq. 8 in bytes against model_cache_bytes (bf16 = 2 bytes), including uneven lengths.
    eq8_bad = []
    for Hv, dh, rv, Nv, lengths in ((18, 128, 55, 18, (2048,)), (6, 64, 7, 3, (5, 0, 11)), (1, 2, 0, 1, (1,))):
        spec = AttentionSpec.lrkv(Hv, dh, rv)
        elements = sum(numel(s[2:]) for s in layout(spec).values())  # per token, from the allocation
        want = 2 * Nv * sum(lengths) * elements
        got = bytes_fn(spec, Nv, dtype="bfloat16", lengths=lengths)
        if got != want:
            eq8_bad.append({"H": Hv, "d_h": dh, "r": rv, "N": Nv, "lengths": list(lengths), "got": got, "want": want})
    ev["eq8_bytes_mismatches"] = eq8_bad
    ev["checks"]["eq8_bytes"] = not eq8_bad
    return formula_verdict(ok and not eq8_bad, ev, "The reference allocates 2 d_h + 2 H r elements per token "
                           "(shared_k/v [B, T, d_h], latent_k/v [B, T, H, r]) against MHA's 2 H d_h (k/v "
                           "[B, T, H, d_h]), counted at two prime size assignments; the ratio simplifies to "
                           "1/H + r/d_h, and precision, layers, batch and length multiply both counts. "
                           f"lrkv_cache_ratio, cache_ratio and the element counts equal it on {len(pts)} grid "
                           "points, and model_cache_bytes equals layers × Σ lengths × bytes × the allocated "
                           "elements per token.")


# ----------------------------------------------------------------------------- break-even
def break_even_bound(H, d_h, **_):
    return d_h * (1 - 1 / H)


@proof(
    "break_even_rank",
    item=5,
    claim="LRKV's cache is smaller than MHA's iff r < d_h(1 − 1/H); the largest such integer rank is ceil(d_h(1 − 1/H)) − 1.",
    source="Eq. 9 and the break-even remark (Sec. 3, p. 4); Chinese review §2.5; lrkv.spec.break_even_rank",
    expected="proved",
)
def break_even_rank_proof(*, bound=break_even_bound, spec_fn=break_even_rank) -> Verdict:
    # ratio < 1 ⇔ d_h(ratio − 1) < 0 (d_h > 0), and d_h(ratio − 1) = r − bound identically.
    res = sp.simplify(sp.expand(DH * (eq9_ratio(H, DH, R) - 1) - (R - bound(H=H, d_h=DH))))
    mismatches = []
    for Hv in HEADS:
        for dh in HEAD_DIMS:
            brute = max((rv for rv in range(0, 2 * dh + 1) if lrkv_cache_ratio(Hv, dh, rv) < 1), default=-1)
            b = exact(bound(H=sp.Integer(Hv), d_h=sp.Integer(dh)))
            closed = math.ceil(b) - 1
            code = spec_fn(Hv, dh)
            if not (brute == closed == code):
                mismatches.append({"H": Hv, "d_h": dh, "brute_force": brute, "closed_form": closed, "spec": code})
    ev = {"identity": "d_h·(1/H + r/d_h − 1) − (r − bound)", "residual": str(res),
          "grid_points": len(HEADS) * len(HEAD_DIMS), "mismatches": mismatches,
          "examples": {"H=18,d_h=128": break_even_rank(18, 128), "H=6,d_h=128": break_even_rank(6, 128)},
          "checks": {"derivation": res == 0, "brute_force_closed_form_spec_agree": not mismatches}}
    return formula_verdict(res == 0 and not mismatches, ev, "Multiplying 1/H + r/d_h < 1 by d_h > 0 gives exactly "
                    "r < d_h(1 − 1/H); break_even_rank equals both ceil(bound) − 1 and a brute-force "
                    "search over r on the grid (e.g. 120 at H = 18, d_h = 128).")


# ----------------------------------------------------------------------------- r = d_h
def full_rank_ratio_formula(H, d_h, **_):
    return 1 + 1 / H


@proof(
    "full_rank_ratio",
    item=5,
    claim="At r = d_h the factored cache costs 1 + 1/H of MHA's: more than MHA, because the shared block is still paid.",
    source="Sec. 3 (endpoints), Chinese review §2.1; lrkv.spec.lrkv_cache_ratio",
    expected="proved",
)
def full_rank_ratio(*, formula=full_rank_ratio_formula, spec_impls=None) -> Verdict:
    ok, ev = check_formula(
        derived=eq9_ratio(H, DH, DH), formula=formula,
        impls=spec_impls or {"lrkv_cache_ratio(H, d_h, d_h)": lambda H, d_h: lrkv_cache_ratio(H, d_h, d_h)},
        points=grid(H=HEADS, d_h=HEAD_DIMS), symbols=dict(H=H, d_h=DH))
    return formula_verdict(ok, ev, "Substituting r = d_h in 1/H + r/d_h gives 1 + 1/H > 1; the spec agrees.")


# ----------------------------------------------------------------------------- rank ceiling
def rank_ceiling_bound(H, d_h, c, **_):
    return d_h * (c - 1 / H)


@proof(
    "rank_ceiling",
    item=5,
    claim="For a cache budget c (fraction of MHA), the largest admissible rank is floor(d_h(c − 1/H)); no rank fits below c = 1/H.",
    source="Eq. 9 solved for r (English review Sec. 4); lrkv.spec.rank_ceiling",
    expected="proved",
)
def rank_ceiling_proof(*, bound=rank_ceiling_bound, spec_fn=rank_ceiling) -> Verdict:
    res = sp.simplify(sp.expand(DH * (eq9_ratio(H, DH, R) - C) - (R - bound(H=H, d_h=DH, c=C))))
    budgets = (Fraction(1, 8), Fraction(1, 4), Fraction(1, 3), Fraction(1, 2), Fraction(2, 3), Fraction(1))
    mismatches, below_floor_ok = [], True
    for Hv in HEADS:
        for dh in HEAD_DIMS:
            for c in budgets:
                b = exact(bound(H=sp.Integer(Hv), d_h=sp.Integer(dh), c=sp.Rational(c.numerator, c.denominator)))
                if b < 0:
                    try:
                        spec_fn(Hv, dh, c)
                        below_floor_ok = False
                    except ValueError:
                        pass
                    continue
                brute = max((rv for rv in range(0, 2 * dh + 1) if lrkv_cache_ratio(Hv, dh, rv) <= c), default=None)
                try:
                    code = spec_fn(Hv, dh, c)
                except ValueError as e:  # the spec says no rank fits where the bound says one does
                    code = f"ValueError: {e}"
                if not (brute == math.floor(b) == code):
                    mismatches.append({"H": Hv, "d_h": dh, "c": str(c), "brute_force": brute,
                                       "closed_form": math.floor(b), "spec": code})
    ev = {"identity": "d_h·(1/H + r/d_h − c) − (r − bound)", "residual": str(res), "mismatches": mismatches[:10],
          "below_floor_raises": below_floor_ok,
          "examples": {"H=18,d_h=128,c=1/2": rank_ceiling(18, 128, Fraction(1, 2)),
                       "H=18,d_h=128,c=1/3": rank_ceiling(18, 128, Fraction(1, 3))},
          "checks": {"derivation": res == 0, "brute_force_closed_form_spec_agree": not mismatches,
                     "below_floor_raises": below_floor_ok}}
    return formula_verdict(res == 0 and not mismatches and below_floor_ok, ev,
                    "1/H + r/d_h ≤ c ⇔ r ≤ d_h(c − 1/H) (d_h > 0); rank_ceiling equals the floor and a "
                    "brute-force search on the grid, and raises when c < 1/H.")


