"""The quantization cost of an fp8 cache (lrkv.verify.quantization_cost): the fp8 path against
the float64 oracle on the unquantized cache — reported, never gating."""

from __future__ import annotations

import math

from lrkv.reference.fp8 import E4M3, E5M2, PER_TENSOR, PER_TOKEN_HEAD
from lrkv.verify.quantization_cost import quantization_cost

from ..test_helpers.inputs import random_factored_inputs

SCALE = 8**-0.5
ARGS = ("q", "shared_k", "shared_v", "latent_k", "latent_v", "basis_k", "basis_v", "lengths")


def test_quantization_cost_is_positive_finite_and_larger_for_e5m2():
    inp = random_factored_inputs(B=3, T=16, H=3, d_h=8, r=3, lengths=[16, 11, 7], seed=4)
    costs = {}
    for fmt in (E4M3, E5M2):
        for g in (PER_TENSOR, PER_TOKEN_HEAD):
            c = quantization_cost(*(inp[k] for k in ARGS), scale=SCALE, fmt=fmt, granularity=g)
            assert 0 < c.mean_abs <= c.max_abs and math.isfinite(c.max_abs) and math.isfinite(c.sqnr_db)
            assert c.sqnr_db > 0
            costs[fmt, g] = c
    for g in (PER_TENSOR, PER_TOKEN_HEAD):  # fewer mantissa bits: larger error, lower SQNR
        e4, e5 = costs[E4M3, g], costs[E5M2, g]
        assert e5.max_abs > e4.max_abs and e5.mean_abs > e4.mean_abs and e5.sqnr_db < e4.sqnr_db
