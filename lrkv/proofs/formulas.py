"""Item 5 — cache, parameter and decode-cost formulas (paper Eqs. 8–10, Sec. 3 p. 4).

Every formula is proved twice:
  * symbolically, from the element/weight/MAC counts it summarises (general symbols H, d_h,
    r, P, T, d, c; precision, layers, batch and length cancel as symbols);
  * on an integer grid, against the lrkv.spec function the rest of the suite uses — exact
    Fractions, no tolerance — so the code cannot drift from the algebra.

The formula is an input of each proof (`formula=`), so a wrong one (e.g. a TP ratio
without replication, 1/H + r/d_h) is rejected on both counts.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction

import sympy as sp

from lrkv.spec import (
    AttentionSpec, break_even_rank, cache_elements, cache_ratio, decode_arithmetic_ratio,
    kv_param_count, kv_param_ratio, lrkv_cache_ratio, lrkv_param_ratio, mha_cache_elements,
    model_cache_bytes, per_device_cache_elements, rank_ceiling, tp_cache_ratio,
)

from .record import Verdict
from .registry import proof
from .symbolic import grid, jsonable

H, DH, R, P, T, D, C = sp.symbols("H d_h r P T d c", positive=True)
b_, N_, BT_ = sp.symbols("b N BT", positive=True)  # bytes/scalar, layers, batch·length: must cancel

# Grids small enough to stay fast, wide enough to hit odd sizes and the paper's presets.
HEADS = (1, 2, 3, 6, 12, 18, 32)
HEAD_DIMS = (2, 8, 64, 128)
RANKS = (0, 1, 7, 46, 51, 55, 64, 128)


def exact(x) -> Fraction:
    """A sympy/int/Fraction number as an exact Fraction (raises on anything irrational)."""
    if isinstance(x, Fraction):
        return x
    x = sp.nsimplify(x) if not isinstance(x, sp.Basic) else x
    if not x.is_Rational:
        raise ValueError(f"not an exact rational: {x}")
    return Fraction(int(x.p), int(x.q))


def check_formula(*, derived: sp.Expr, formula: Callable, impls: dict[str, Callable],
                  points: list[dict], symbols: dict) -> tuple[bool, dict]:
    """derived − formula must simplify to 0, and every impl must equal the formula on the grid."""
    try:
        res = sp.simplify(derived - formula(**symbols))
    except (TypeError, ValueError) as e:
        res = sp.Symbol(f"error: {e}")
    mismatches = []
    for pt in points:
        want = exact(formula(**{k: sp.Integer(v) if isinstance(v, int) else sp.Rational(str(v))
                                for k, v in pt.items()}))
        for label, fn in impls.items():
            got = fn(**pt)
            if Fraction(got) != want:
                mismatches.append({"point": jsonable(pt), "impl": label, "impl_value": str(got), "formula": str(want)})
    evidence = {
        "derived": str(derived), "formula": str(formula(**symbols)), "residual": str(res),
        "grid_points": len(points), "impls": list(impls), "mismatches": mismatches[:10],
        "mismatch_count": len(mismatches),
    }
    return res == 0 and not mismatches, evidence


def _verdict(ok: bool, evidence: dict, why: str) -> Verdict:
    if ok:
        return Verdict("proved", why, evidence)
    return Verdict("refuted", "The formula does not follow from the counts, or the lrkv.spec function "
                   "disagrees with it on the grid (see residual / mismatches).", evidence)


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
def cache_ratio_eq9(*, formula=eq9_ratio) -> Verdict:
    derived = (2 * b_ * N_ * BT_ * (DH + H * R)) / (2 * b_ * N_ * BT_ * H * DH)
    pts = grid(H=HEADS, d_h=HEAD_DIMS, r=RANKS)
    impls = {
        "lrkv_cache_ratio": lambda H, d_h, r: lrkv_cache_ratio(H, d_h, r),
        "cache_ratio(spec)": lambda H, d_h, r: cache_ratio(AttentionSpec.lrkv(H, d_h, r)),
        "cache_elements/mha_cache_elements": lambda H, d_h, r: Fraction(
            cache_elements(AttentionSpec.lrkv(H, d_h, r)), mha_cache_elements(AttentionSpec.lrkv(H, d_h, r))),
    }
    ok, ev = check_formula(derived=derived, formula=formula, impls=impls, points=pts,
                           symbols=dict(H=H, d_h=DH, r=R))
    # Eq. 8 in bytes against model_cache_bytes (bf16 = 2 bytes), including uneven lengths.
    eq8_bad = []
    for Hv, dh, rv, Nv, lengths in ((18, 128, 55, 18, (2048,)), (6, 64, 7, 3, (5, 0, 11)), (1, 2, 0, 1, (1,))):
        spec = AttentionSpec.lrkv(Hv, dh, rv)
        want = 2 * 2 * Nv * sum(lengths) * (dh + Hv * rv)
        got = model_cache_bytes(spec, Nv, dtype="bfloat16", lengths=lengths)
        if got != want:
            eq8_bad.append({"H": Hv, "d_h": dh, "r": rv, "N": Nv, "lengths": list(lengths), "got": got, "want": want})
    ev["eq8_bytes_mismatches"] = eq8_bad
    return _verdict(ok and not eq8_bad, ev, "(2bNBT(d_h + Hr)) / (2bNBT·H d_h) simplifies to 1/H + r/d_h with "
                    "b, N, B·T symbolic; lrkv_cache_ratio, cache_ratio and the element counts equal it on "
                    f"{len(pts)} grid points, and model_cache_bytes equals 2bN(ΣT)(d_h + Hr).")


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
def break_even_rank_proof(*, bound=break_even_bound) -> Verdict:
    # ratio < 1 ⇔ d_h(ratio − 1) < 0 (d_h > 0), and d_h(ratio − 1) = r − bound identically.
    res = sp.simplify(sp.expand(DH * (eq9_ratio(H, DH, R) - 1) - (R - bound(H=H, d_h=DH))))
    mismatches = []
    for Hv in HEADS:
        for dh in HEAD_DIMS:
            brute = max((rv for rv in range(0, 2 * dh + 1) if lrkv_cache_ratio(Hv, dh, rv) < 1), default=-1)
            b = exact(bound(H=sp.Integer(Hv), d_h=sp.Integer(dh)))
            closed = math.ceil(b) - 1
            code = break_even_rank(Hv, dh)
            if not (brute == closed == code):
                mismatches.append({"H": Hv, "d_h": dh, "brute_force": brute, "closed_form": closed, "spec": code})
    ev = {"identity": "d_h·(1/H + r/d_h − 1) − (r − bound)", "residual": str(res),
          "grid_points": len(HEADS) * len(HEAD_DIMS), "mismatches": mismatches,
          "examples": {"H=18,d_h=128": break_even_rank(18, 128), "H=6,d_h=128": break_even_rank(6, 128)}}
    return _verdict(res == 0 and not mismatches, ev, "Multiplying 1/H + r/d_h < 1 by d_h > 0 gives exactly "
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
def full_rank_ratio(*, formula=full_rank_ratio_formula) -> Verdict:
    ok, ev = check_formula(
        derived=eq9_ratio(H, DH, DH), formula=formula,
        impls={"lrkv_cache_ratio(H, d_h, d_h)": lambda H, d_h: lrkv_cache_ratio(H, d_h, d_h)},
        points=grid(H=HEADS, d_h=HEAD_DIMS), symbols=dict(H=H, d_h=DH))
    return _verdict(ok, ev, "Substituting r = d_h in 1/H + r/d_h gives 1 + 1/H > 1; the spec agrees.")


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
def rank_ceiling_proof(*, bound=rank_ceiling_bound) -> Verdict:
    res = sp.simplify(sp.expand(DH * (eq9_ratio(H, DH, R) - C) - (R - bound(H=H, d_h=DH, c=C))))
    budgets = (Fraction(1, 8), Fraction(1, 4), Fraction(1, 3), Fraction(1, 2), Fraction(2, 3), Fraction(1))
    mismatches, below_floor_ok = [], True
    for Hv in HEADS:
        for dh in HEAD_DIMS:
            for c in budgets:
                b = exact(bound(H=sp.Integer(Hv), d_h=sp.Integer(dh), c=sp.Rational(c.numerator, c.denominator)))
                if b < 0:
                    try:
                        rank_ceiling(Hv, dh, c)
                        below_floor_ok = False
                    except ValueError:
                        pass
                    continue
                brute = max((rv for rv in range(0, 2 * dh + 1) if lrkv_cache_ratio(Hv, dh, rv) <= c), default=None)
                try:
                    code = rank_ceiling(Hv, dh, c)
                except ValueError as e:  # the spec says no rank fits where the bound says one does
                    code = f"ValueError: {e}"
                if not (brute == math.floor(b) == code):
                    mismatches.append({"H": Hv, "d_h": dh, "c": str(c), "brute_force": brute,
                                       "closed_form": math.floor(b), "spec": code})
    ev = {"identity": "d_h·(1/H + r/d_h − c) − (r − bound)", "residual": str(res), "mismatches": mismatches[:10],
          "below_floor_raises": below_floor_ok,
          "examples": {"H=18,d_h=128,c=1/2": rank_ceiling(18, 128, Fraction(1, 2)),
                       "H=18,d_h=128,c=1/3": rank_ceiling(18, 128, Fraction(1, 3))}}
    return _verdict(res == 0 and not mismatches and below_floor_ok, ev,
                    "1/H + r/d_h ≤ c ⇔ r ≤ d_h(c − 1/H) (d_h > 0); rank_ceiling equals the floor and a "
                    "brute-force search on the grid, and raises when c < 1/H.")


# ----------------------------------------------------------------------------- tensor parallel
def tp_ratio_formula(H, d_h, r, P, **_):
    return P / H + r / d_h


@proof(
    "tp_replication",
    item=5,
    claim="With P tensor-parallel shards that each keep their own copy of the shared block, the aggregate LRKV payload is 2b(P d_h + H r) per token, i.e. P/H + r/d_h of MHA.",
    source="English review Sec. 4 (tensor parallelism); lrkv.spec.tp_cache_ratio, per_device_cache_elements",
    expected="proved",
)
def tp_replication(*, formula=tp_ratio_formula) -> Verdict:
    derived = P * 2 * (DH + (H / P) * R) / (2 * H * DH)
    pts = [pt for pt in grid(H=(4, 8, 12, 18, 32), d_h=(2, 64, 128), r=(0, 7, 54, 55), P=(1, 2, 4, 8))
           if pt["H"] % pt["P"] == 0]
    impls = {
        "tp_cache_ratio": lambda H, d_h, r, P: tp_cache_ratio(AttentionSpec.lrkv(H, d_h, r), P),
        "P·per_device/mha": lambda H, d_h, r, P: Fraction(
            P * per_device_cache_elements(AttentionSpec.lrkv(H, d_h, r), P), 2 * H * d_h),
    }
    ok, ev = check_formula(derived=derived, formula=formula, impls=impls, points=pts,
                           symbols=dict(H=H, d_h=DH, r=R, P=P))
    return _verdict(ok, ev, "Each shard holds 2(d_h + (H/P) r); P of them over 2H d_h is P/H + r/d_h. "
                    f"tp_cache_ratio agrees on {len(pts)} grid points (P | H).")


# ----------------------------------------------------------------------------- Eq. 10
def eq10_ratio(H, d_h, r, d, **_):
    return 1 / H + (r / d_h) * (1 + d_h / d)


@proof(
    "param_ratio_eq10",
    item=5,
    claim="K/V projection weights: P_LRKV = 2 d d_h + 2 H r (d + d_h), so P_LRKV / P_MHA = 1/H + (r/d_h)(1 + d_h/d), which is 1/H + (r/d_h)(1 + 1/H) when d = H d_h.",
    source="Eq. 10 (Sec. 3, p. 4); English review Sec. 4; lrkv.spec.kv_param_ratio, lrkv_param_ratio",
    expected="proved",
)
def param_ratio_eq10(*, formula=eq10_ratio) -> Verdict:
    derived = (2 * D * DH + 2 * H * R * (D + DH)) / (2 * H * D * DH)
    pts = grid(H=(1, 6, 12, 18, 32), d_h=(2, 64, 128), r=(0, 7, 55), d=(64, 768, 2304, 4096))
    impls = {
        "kv_param_ratio(spec)": lambda H, d_h, r, d: kv_param_ratio(AttentionSpec.lrkv(H, d_h, r, d_model=d)),
        "lrkv_param_ratio": lambda H, d_h, r, d: lrkv_param_ratio(H, d_h, r, d),
        "kv_param_count/2dHd_h": lambda H, d_h, r, d: Fraction(
            kv_param_count(AttentionSpec.lrkv(H, d_h, r, d_model=d)), 2 * d * H * d_h),
    }
    ok, ev = check_formula(derived=derived, formula=formula, impls=impls, points=pts,
                           symbols=dict(H=H, d_h=DH, r=R, d=D))
    square = sp.simplify(formula(H=H, d_h=DH, r=R, d=H * DH) - (1 / H + (R / DH) * (1 + 1 / H)))
    ev["d_equals_H_d_h_residual"] = str(square)
    return _verdict(ok and square == 0, ev, "Shared K and V weights 2 d d_h plus 2H r(d + d_h) for the factors, "
                    "over MHA's 2 H d d_h, simplify to the stated form (and to 1/H + (r/d_h)(1 + 1/H) at "
                    "d = H d_h); the spec functions agree on the grid.")


# ----------------------------------------------------------------------------- decode arithmetic
def arithmetic_formula(d_h, r, T, **_):
    return 1 + r / d_h + r / T


@proof(
    "decode_arithmetic",
    item=5,
    claim="Per head and decode step, MHA's history contractions cost 2T d_h MACs and factored LRKV adds 2T r + 2 r d_h, a ratio of 1 + r/d_h + r/T (→ 1 + r/d_h for long histories).",
    source="Sec. 3 (O(Lr + r d_h), p. 4); English review Sec. 4; lrkv.spec.decode_arithmetic_ratio",
    expected="proved",
)
def decode_arithmetic(*, formula=arithmetic_formula) -> Verdict:
    derived = (2 * T * DH + 2 * T * R + 2 * R * DH) / (2 * T * DH)
    pts = grid(H=(1, 18), d_h=(2, 64, 128), r=(0, 7, 55), T=(1, 3, 2048, 8192))
    impls = {"decode_arithmetic_ratio": lambda H, d_h, r, T: decode_arithmetic_ratio(AttentionSpec.lrkv(H, d_h, r), T)}
    ok, ev = check_formula(derived=derived, formula=formula, impls=impls, points=pts,
                           symbols=dict(d_h=DH, r=R, T=T))
    ev["limit_T_to_infinity"] = str(sp.limit(formula(d_h=DH, r=R, T=T), T, sp.oo))
    return _verdict(ok, ev, "(2T d_h + 2T r + 2 r d_h)/(2T d_h) = 1 + r/d_h + r/T; "
                    "decode_arithmetic_ratio agrees on the grid; the T → ∞ limit is 1 + r/d_h.")


# ----------------------------------------------------------------------------- TP payload per device
def per_device_formulas():
    """Elements per token per layer on ONE of P devices, by family (DESIGN §10)."""
    return {
        "mha": lambda H, d_h, P, **_: 2 * H * d_h / P,  # KV heads shard with the query heads
        "lrkv": lambda H, d_h, r, P, **_: 2 * (d_h + (H / P) * r),  # shared block replicated
        "mla": lambda d_c, d_rope, P, **_: d_c + d_rope,  # one latent: cannot shard
        "mlra": lambda L, d_c, d_rope, P, **_: (L / P) * d_c + d_rope,  # P | L latent heads; k_rope replicated
    }


@proof(
    "tp_payload_mla_mlra",
    item=5,
    claim="Per device under P-way tensor parallelism: MLA keeps its whole d_c + d_rope latent on every device (576 at DeepSeek-V3 sizes), MLRA shards latent heads ((L/P) d_c + d_rope: 192 at 4-way), LRKV holds 2(d_h + (H/P) r), MHA 2 H d_h / P.",
    source="MLRA review (seed 003: MLA cannot be partitioned, MLRA 4-way TP); DESIGN §10; lrkv.spec.per_device_cache_elements",
    expected="proved",
)
def tp_payload_mla_mlra(*, formulas=per_device_formulas) -> Verdict:
    f = formulas()
    mism, count = [], 0

    def check(label, spec, P, want):
        nonlocal count
        count += 1
        got = per_device_cache_elements(spec, P)
        if Fraction(got) != exact(want):
            mism.append({"family": label, "spec": spec.short(), "P": P, "spec_value": got, "formula": str(want)})

    I = sp.Integer
    for P_ in (1, 2, 4, 8):
        for Hv in (8, 16, 128):
            check("mha", AttentionSpec.mha(Hv, 128), P_, f["mha"](H=I(Hv), d_h=I(128), P=I(P_)))
            for rv in (0, 55):
                check("lrkv", AttentionSpec.lrkv(Hv, 128, rv), P_, f["lrkv"](H=I(Hv), d_h=I(128), r=I(rv), P=I(P_)))
            for dc, dr in ((128, 0), (512, 64)):
                check("mla", AttentionSpec.mla(Hv, 128, dc, rope_dim=dr), P_, f["mla"](d_c=I(dc), d_rope=I(dr), P=I(P_)))
            if P_ <= 4:
                for nb in (4, 2):
                    check("mlra", AttentionSpec.mlra(Hv, 128, n_branches=nb), P_,
                          f["mlra"](L=I(4), d_c=I(128), d_rope=I(64), P=I(P_)))
    L_, dc_, dr_ = sp.symbols("L d_c d_rope", positive=True)
    ev = {
        "grid_points": count, "mismatches": mism[:10], "mismatch_count": len(mism),
        "symbolic": {k: str(v(H=H, d_h=DH, r=R, P=P, L=L_, d_c=dc_, d_rope=dr_)) for k, v in f.items()},
        "deepseek_v3_mla_per_device": str(f["mla"](d_c=512, d_rope=64, P=4)),
        "mlra4_per_device_at_P4": str(f["mlra"](L=4, d_c=128, d_rope=64, P=sp.Integer(4))),
        "mlra4_single_device": str(f["mlra"](L=4, d_c=128, d_rope=64, P=sp.Integer(1))),
    }
    return _verdict(not mism, ev, "MLA's single latent is read whole on every device (576 = 512 + 64 at "
                    "V3 sizes, whatever P), MLRA-4 at 4-way holds one 128-wide latent head plus the "
                    "replicated 64-wide k_rope (192), LRKV replicates its shared block; "
                    "per_device_cache_elements agrees on every grid point.")
