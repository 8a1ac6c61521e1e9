"""Eq. 10, the K/V projection weights (paper Sec. 3, p. 4; English review Sec. 4;
Chinese review §2.6).

The count is read off the weights the reference initialises (lrkv.reference.weights for
LRKV: w_shared_k/v [d, d_h], u_k/v [H, d, r], basis_k/v [H, d_h, r]; lrkv.reference.dense for
MHA: w_k/v [d, H, d_h]), not typed from the equation.
"""

from __future__ import annotations

from fractions import Fraction

import sympy as sp

from lrkv.spec import AttentionSpec, kv_param_count, kv_param_ratio, lrkv_param_ratio

from ..record import Verdict
from ..registry import proof
from ..symbolic import grid
from .formula_check import DH, H, R, check_formula, formula_verdict
from .layouts import D, derive_or_error, reference_kv_weight_shapes, weight_count


def kv_weights_over_mha(shapes=reference_kv_weight_shapes):
    """Elements of the reference's LRKV K/V weights over its MHA K/V weights, at one sample."""
    return lambda s: (weight_count(shapes(AttentionSpec.lrkv(s[H], s[DH], s[R], d_model=s[D])), s)
                      / weight_count(shapes(AttentionSpec.mha(s[H], s[DH], d_model=s[D])), s))


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
def param_ratio_eq10(*, formula=eq10_ratio, spec_impls=None, shapes=reference_kv_weight_shapes) -> Verdict:
    derived, how, err = derive_or_error(kv_weights_over_mha(shapes))
    pts = grid(H=(1, 6, 12, 18, 32), d_h=(2, 64, 128), r=(0, 7, 55), d=(64, 768, 2304, 4096))
    impls = {
        "kv_param_ratio(spec)": lambda H, d_h, r, d: kv_param_ratio(AttentionSpec.lrkv(H, d_h, r, d_model=d)),
        "lrkv_param_ratio": lambda H, d_h, r, d: lrkv_param_ratio(H, d_h, r, d),
        "kv_param_count/2dHd_h": lambda H, d_h, r, d: Fraction(
            kv_param_count(AttentionSpec.lrkv(H, d_h, r, d_model=d)), 2 * d * H * d_h),
    }
    ok, ev = check_formula(derived=derived, formula=formula, impls=spec_impls or impls, points=pts,
                           symbols=dict(H=H, d_h=DH, r=R, d=D), derivation_error=err)
    ev["derivation_samples"] = how
    # The paper's printed special form at d = H d_h (Chinese review §2.6), against the general one.
    square = sp.simplify(formula(H=H, d_h=DH, r=R, d=H * DH) - (1 / H + (R / DH) * (1 + 1 / H)))
    ev["d_equals_H_d_h_residual"] = str(square)
    ev["checks"]["d_equals_H_d_h"] = square == 0
    return formula_verdict(ok and square == 0, ev, "The reference initialises 2 d d_h shared K/V weights plus "
                    "2H r(d + d_h) in the factors, against MHA's 2 H d d_h (counted from the tensors at two prime "
                    "size assignments); the ratio simplifies to the stated form (and to 1/H + (r/d_h)(1 + 1/H) at "
                    "d = H d_h); the spec functions agree on the grid.")


