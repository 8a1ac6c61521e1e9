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

from ..record import Verdict
from ..registry import proof
from ..symbolic import grid, jsonable

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
        "checks": {"derivation": res == 0, "spec_on_grid": not mismatches},
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
def cache_ratio_eq9(*, formula=eq9_ratio, spec_impls=None, bytes_fn=model_cache_bytes) -> Verdict:
    derived = (2 * b_ * N_ * BT_ * (DH + H * R)) / (2 * b_ * N_ * BT_ * H * DH)
    pts = grid(H=HEADS, d_h=HEAD_DIMS, r=RANKS)
    impls = {
        "lrkv_cache_ratio": lambda H, d_h, r: lrkv_cache_ratio(H, d_h, r),
        "cache_ratio(spec)": lambda H, d_h, r: cache_ratio(AttentionSpec.lrkv(H, d_h, r)),
        "cache_elements/mha_cache_elements": lambda H, d_h, r: Fraction(
            cache_elements(AttentionSpec.lrkv(H, d_h, r)), mha_cache_elements(AttentionSpec.lrkv(H, d_h, r))),
    }
    ok, ev = check_formula(derived=derived, formula=formula, impls=spec_impls or impls, points=pts,
                           symbols=dict(H=H, d_h=DH, r=R))
    # Eq. 8 in bytes against model_cache_bytes (bf16 = 2 bytes), including uneven lengths.
    eq8_bad = []
    for Hv, dh, rv, Nv, lengths in ((18, 128, 55, 18, (2048,)), (6, 64, 7, 3, (5, 0, 11)), (1, 2, 0, 1, (1,))):
        spec = AttentionSpec.lrkv(Hv, dh, rv)
        want = 2 * 2 * Nv * sum(lengths) * (dh + Hv * rv)
        got = bytes_fn(spec, Nv, dtype="bfloat16", lengths=lengths)
        if got != want:
            eq8_bad.append({"H": Hv, "d_h": dh, "r": rv, "N": Nv, "lengths": list(lengths), "got": got, "want": want})
    ev["eq8_bytes_mismatches"] = eq8_bad
    ev["checks"]["eq8_bytes"] = not eq8_bad
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
def full_rank_ratio(*, formula=full_rank_ratio_formula, spec_impls=None) -> Verdict:
    ok, ev = check_formula(
        derived=eq9_ratio(H, DH, DH), formula=formula,
        impls=spec_impls or {"lrkv_cache_ratio(H, d_h, d_h)": lambda H, d_h: lrkv_cache_ratio(H, d_h, d_h)},
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
def tp_replication(*, formula=tp_ratio_formula, spec_impls=None) -> Verdict:
    derived = P * 2 * (DH + (H / P) * R) / (2 * H * DH)
    pts = [pt for pt in grid(H=(4, 8, 12, 18, 32), d_h=(2, 64, 128), r=(0, 7, 54, 55), P=(1, 2, 4, 8))
           if pt["H"] % pt["P"] == 0]
    impls = {
        "tp_cache_ratio": lambda H, d_h, r, P: tp_cache_ratio(AttentionSpec.lrkv(H, d_h, r), P),
        "P·per_device/mha": lambda H, d_h, r, P: Fraction(
            P * per_device_cache_elements(AttentionSpec.lrkv(H, d_h, r), P), 2 * H * d_h),
    }
    ok, ev = check_formula(derived=derived, formula=formula, impls=spec_impls or impls, points=pts,
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
def param_ratio_eq10(*, formula=eq10_ratio, spec_impls=None) -> Verdict:
    derived = (2 * D * DH + 2 * H * R * (D + DH)) / (2 * H * D * DH)
    pts = grid(H=(1, 6, 12, 18, 32), d_h=(2, 64, 128), r=(0, 7, 55), d=(64, 768, 2304, 4096))
    impls = {
        "kv_param_ratio(spec)": lambda H, d_h, r, d: kv_param_ratio(AttentionSpec.lrkv(H, d_h, r, d_model=d)),
        "lrkv_param_ratio": lambda H, d_h, r, d: lrkv_param_ratio(H, d_h, r, d),
        "kv_param_count/2dHd_h": lambda H, d_h, r, d: Fraction(
            kv_param_count(AttentionSpec.lrkv(H, d_h, r, d_model=d)), 2 * d * H * d_h),
    }
    ok, ev = check_formula(derived=derived, formula=formula, impls=spec_impls or impls, points=pts,
                           symbols=dict(H=H, d_h=DH, r=R, d=D))
    square = sp.simplify(formula(H=H, d_h=DH, r=R, d=H * DH) - (1 / H + (R / DH) * (1 + 1 / H)))
    ev["d_equals_H_d_h_residual"] = str(square)
    ev["checks"]["d_equals_H_d_h"] = square == 0
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
def decode_arithmetic(*, formula=arithmetic_formula, spec_impls=None) -> Verdict:
    derived = (2 * T * DH + 2 * T * R + 2 * R * DH) / (2 * T * DH)
    pts = grid(H=(1, 18), d_h=(2, 64, 128), r=(0, 7, 55), T=(1, 3, 2048, 8192))
    impls = {"decode_arithmetic_ratio": lambda H, d_h, r, T: decode_arithmetic_ratio(AttentionSpec.lrkv(H, d_h, r), T)}
    ok, ev = check_formula(derived=derived, formula=formula, impls=spec_impls or impls, points=pts,
                           symbols=dict(d_h=DH, r=R, T=T))
    ev["limit_T_to_infinity"] = str(sp.limit(formula(d_h=DH, r=R, T=T), T, sp.oo))
    return _verdict(ok, ev, "(2T d_h + 2T r + 2 r d_h)/(2T d_h) = 1 + r/d_h + r/T; "
                    "decode_arithmetic_ratio agrees on the grid; the T → ∞ limit is 1 + r/d_h.")


# ----------------------------------------------------------------------------- TP payload per device
def reference_layout(spec: AttentionSpec) -> dict[str, tuple[int, ...]]:
    """The shapes of every cached tensor that the float64 reference allocates for `spec`
    (batch 1, one slot, on the meta device): [B, T, width] or [B, T, heads, width]."""
    import dataclasses

    import torch

    from lrkv.reference import cache as lrkv_cache, dense, mla, mlra

    alloc = {"mha": dense.allocate_cache, "gqa": dense.allocate_cache, "mqa": dense.allocate_cache,
             "mla": mla.allocate_cache, "mlra": mlra.allocate_cache, "lrkv": lrkv_cache.allocate_cache}[spec.family]
    c = alloc(spec, 1, 1, device="meta")
    return {f.name: tuple(getattr(c, f.name).shape) for f in dataclasses.fields(c)
            if f.name != "lengths" and isinstance(getattr(c, f.name), torch.Tensor)}


def shard_by_head_axis(shape: tuple[int, ...], P: int) -> int:
    """Elements per token ONE of P devices holds of a [B, T, ...] tensor.

    A [B, T, heads, width] tensor splits along its head axis (each device keeps the heads its
    queries read; a tensor with fewer heads than devices is replicated, one head each); a
    [B, T, width] tensor has no head axis, every device's queries read all of it, so every
    device holds it whole (DeepSeek-V3's kv_cache/pe_cache, LRKV's shared block, MLRA's k_pe).
    """
    if len(shape) == 3:
        return shape[2]
    heads, width = shape[2], shape[3]
    if heads >= P and heads % P:
        raise ValueError(f"{heads} heads do not split over {P} devices")
    return max(1, heads // P) * width


@proof(
    "tp_payload_mla_mlra",
    item=5,
    claim="Per device under P-way tensor parallelism, derived from the cache layouts: MLA keeps its whole d_c + d_rope on every device (576 at DeepSeek-V3 sizes), MLRA shards its latent heads ((L/P) d_c + d_rope: 192 at 4-way at those sizes), LRKV holds 2(d_h + (H/P) r), MHA 2 H d_h / P.",
    source="deepseek-ai/DeepSeek-V3 inference/model.py (absorb: kv_cache [B, S, kv_lora_rank = 512], pe_cache [B, S, qk_rope_head_dim = 64], no head axis); SongtaoLiu0823/MLRA model/mlra_4_gen.py (4 latent heads of kv_lora_rank/4, one k_cache of qk_rope_head_dim shared by all); MLRA summary (seed 003: MLA's single latent head cannot be partitioned, 4-way TP); lrkv.spec.per_device_cache_elements",
    expected="proved",
)
def tp_payload_mla_mlra(*, shard=shard_by_head_axis, layout=reference_layout) -> Verdict:
    """Derive each family's per-device payload from the shapes the reference allocates and one
    sharding rule, then compare with lrkv.spec.per_device_cache_elements (written separately).

    The 576/192 instance uses DeepSeek-V3's public sizes (kv_lora_rank 512, qk_rope_head_dim 64)
    in MLRA-4's layout (kv_lora_rank split into 4 latent heads, one shared k_pe); the MLRA
    summary itself gives only K_C ∈ R^{L×(H·d_c)}, 4-way TP and 2.8×. The MLRA code's default
    small config (kv_lora_rank 256, qk_rope_head_dim 32) gives 288 and 96 by the same rule.
    """
    mism, count = [], 0
    derived: dict[str, dict] = {}

    def check(spec, P_):
        nonlocal count
        count += 1
        try:
            got = sum(shard(shape, P_) for shape in layout(spec).values())
        except ValueError as e:
            got = f"ValueError: {e}"
        want = per_device_cache_elements(spec, P_)
        if got != want:
            mism.append({"spec": spec.short(), "P": P_, "derived_from_layout": got, "spec_value": want})
        return got

    for P_ in (1, 2, 4, 8):
        for Hv in (8, 16, 128):
            check(AttentionSpec.mha(Hv, 128), P_)
            check(AttentionSpec.gqa(Hv, 128, 8), P_)
            check(AttentionSpec.mqa(Hv, 128), P_)
            for rv in (0, 55):
                check(AttentionSpec.lrkv(Hv, 128, rv), P_)
            for dc, dr in ((128, 0), (512, 64)):
                check(AttentionSpec.mla(Hv, 128, dc, rope_dim=dr), P_)
            if P_ <= 4:
                for nb in (4, 2):
                    check(AttentionSpec.mlra(Hv, 128, latent_dim=128, n_latent_heads=4, n_branches=nb, rope_dim=64), P_)
    v3_mla = AttentionSpec.mla(128, 128, 512, rope_dim=64)
    v3_mlra = AttentionSpec.mlra(128, 128, latent_dim=128, n_latent_heads=4, n_branches=4, rope_dim=64)
    code_mlra = AttentionSpec.mlra(16, 64, latent_dim=64, n_latent_heads=4, n_branches=4, rope_dim=32)
    for label, spec in (("deepseek_v3_mla", v3_mla), ("mlra4_at_v3_sizes", v3_mlra), ("mlra4_code_default", code_mlra)):
        derived[label] = {"layout": {k: list(v) for k, v in layout(spec).items()},
                          **{f"P{P_}": check(spec, P_) for P_ in (1, 4)}}
    instances_ok = (derived["deepseek_v3_mla"]["P1"] == derived["deepseek_v3_mla"]["P4"] == 576
                    and derived["mlra4_at_v3_sizes"]["P1"] == 576 and derived["mlra4_at_v3_sizes"]["P4"] == 192)
    ev = {"grid_points": count, "mismatches": mism[:10], "mismatch_count": len(mism), "derived": derived,
          "rule": "[B, T, heads, width] splits by heads (replicated below one head per device); [B, T, width] "
                  "is held whole by every device", "instances_576_192": instances_ok}
    if not mism and instances_ok:
        return Verdict("proved", "From the reference's cache shapes and one rule (head-indexed tensors "
                       "split, head-free tensors are held whole): MLA's [B, T, 512] + [B, T, 64] stays 576 "
                       "on every device at DeepSeek-V3 sizes, MLRA-4's [B, T, 4, 128] + [B, T, 64] gives "
                       "128 + 64 = 192 at 4-way, LRKV keeps its [B, T, d_h] shared block whole and splits "
                       "[B, T, H, r]; per_device_cache_elements agrees on every grid point.", ev)
    return Verdict("refuted", "The per-device payload derived from the layouts differs from "
                   "per_device_cache_elements (or from 576/192 at DeepSeek-V3 sizes).", ev)


# ----------------------------------------------------------------------------- the planner
def layout_padded_elements(shapes: dict[str, tuple[int, ...]], align: int) -> int:
    """Elements per token of the layout with each tensor's innermost width rounded up to `align`."""
    total = 0
    for shape in shapes.values():
        heads = shape[2] if len(shape) == 4 else 1
        total += heads * (-(-shape[-1] // align) * align)
    return total


@proof(
    "planner_formulas",
    item=5,
    claim="`lrkv cache` computes whole-model bytes N·(B·T)·b·elements (Eq. 8), per-device bytes under P-way TP, the largest token count that fits a per-device budget, and padded physical bytes exactly as the cache layouts give them, for every family.",
    source="Eq. 8; lrkv.spec.planner (the `lrkv cache` verb); the reference cache layouts (tp_payload_mla_mlra)",
    expected="proved",
)
def planner_formulas(*, model_bytes=None, per_device_bytes=None, tokens_that_fit=None, padded_elements=None) -> Verdict:
    """Each planner function against an independent count from the reference's cache shapes."""
    from lrkv.spec import planner

    model_bytes = model_bytes or planner.model_bytes
    per_device_bytes = per_device_bytes or planner.per_device_bytes
    tokens_that_fit = tokens_that_fit or planner.tokens_that_fit
    padded_elements = padded_elements or planner.padded_elements
    specs = [AttentionSpec.mha(12, 64), AttentionSpec.gqa(12, 64, 4), AttentionSpec.mqa(12, 64),
             AttentionSpec.mla(12, 64, 384), AttentionSpec.mla(12, 64, 512, rope_dim=64),
             AttentionSpec.mlra(12, 64, latent_dim=128, n_latent_heads=4, n_branches=4, rope_dim=64),
             AttentionSpec.lrkv(12, 64, 55), AttentionSpec.lrkv(12, 64, 0)]
    bad: dict[str, list] = {"model_bytes": [], "per_device_bytes": [], "tokens_that_fit": [], "padded": []}
    count = 0
    for spec in specs:
        shapes = reference_layout(spec)
        elems = sum(math.prod(s[2:]) for s in shapes.values())  # per token: drop [B, T]
        for N, tokens, dtype, b in ((1, 1, "float32", 4), (18, 2048 * 3, "bfloat16", 2), (7, 5, "float8_e4m3fn", 1)):
            count += 1
            if model_bytes(spec, N, tokens, dtype) != N * tokens * b * elems:
                bad["model_bytes"].append([spec.short(), N, tokens, dtype])
            for P in (1, 2, 4):
                dev = sum(shard_by_head_axis(s, P) for s in shapes.values())
                if per_device_bytes(spec, N, tokens, dtype, P) != N * tokens * b * dev:
                    bad["per_device_bytes"].append([spec.short(), N, tokens, dtype, P])
                budget = 10**9 + 12345
                fit = tokens_that_fit(spec, N, budget, dtype, P)
                if not (N * fit * b * dev <= budget < N * (fit + 1) * b * dev):
                    bad["tokens_that_fit"].append([spec.short(), N, dtype, P, fit])
        for align in (1, 16, 64):
            if padded_elements(spec, align) != layout_padded_elements(shapes, align):
                bad["padded"].append([spec.short(), align])
    checks = {k: not v for k, v in bad.items()}
    ev = {"cases": count, "mismatches": {k: v[:5] for k, v in bad.items()}, "checks": checks}
    if all(checks.values()):
        return Verdict("proved", "For MHA, GQA, MQA, MLA (with and without k_rope), MLRA-4 and LRKV (r = 55, 0), at "
                       "three (N, tokens, dtype) points, TP 1/2/4 and alignments 1/16/64, the planner's bytes, "
                       "per-device bytes, fitting token count (largest that fits, one more does not) and padded "
                       "elements equal the counts taken from the reference's cache shapes.", ev)
    return Verdict("refuted", f"Planner function(s) {[k for k, v in checks.items() if not v]} disagree with the "
                   "cache layouts.", ev)
