"""Soundness of the sub-checks: each one that used to hold for every input now compares against
something the input can get wrong, and each is fed a wrong input here and must fail.

Run: pytest -m proofs tests/proofs/test_soundness.py
"""

from __future__ import annotations

import copy
from fractions import Fraction

import pytest
import sympy as sp

from lrkv.proofs.algebra import diversity, layouts
from lrkv.proofs.algebra.decode_cost import DECODE_SAMPLES, macs_per_head
from lrkv.proofs.paper import data
from lrkv.proofs.registry import REGISTRY, load_all

pytestmark = pytest.mark.proofs

load_all()


def _drop(layout_fn, name):
    """A layout function that forgets one tensor (a wrong reading of the allocation)."""
    return lambda spec: {k: v for k, v in layout_fn(spec).items() if k != name}


def _materialized_step(s):
    """The materialized decode (rebuilds K_h, V_h): not the factored contractions Eqs. 6–7 count."""
    import torch

    from lrkv.reference import lrkv as lrkv_ref

    from lrkv.proofs.algebra.layouts import DH, H, R
    from lrkv.proofs.algebra.formula_check import T

    g = torch.Generator().manual_seed(0)
    rn = lambda *shape: torch.randn(*shape, generator=g, dtype=torch.float64)  # noqa: E731
    Hh, dh, r, t = s[H], s[DH], s[R], s[T]
    lrkv_ref.materialized_decode_attention(rn(1, Hh, dh), rn(1, t, dh), rn(1, t, dh), rn(1, t, Hh, r), rn(1, t, Hh, r),
                                           rn(Hh, dh, r), rn(Hh, dh, r), torch.tensor([t], dtype=torch.int32),
                                           scale=dh**-0.5)


def _rank_deficient_centring(n):
    """I − 11^T/n with one more direction removed: rank n − 2, a ceiling below the true one."""
    e = sp.zeros(n, 1)
    e[0], e[1] = 1, -1
    return diversity.centring_matrix(n) - e * e.T / 2


def _tampered(table, path, value):
    t = copy.deepcopy(table)
    node = t
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return t


# (proof, wrong input, the sub-check it must make fail)
SOUND = [
    # derivations from what the reference allocates / computes, not restatements of the formula
    ("cache_ratio_eq9", dict(layout=_drop(layouts.reference_layout, "shared_v")), "derivation"),
    ("tp_replication", dict(per_device=lambda shapes, s, devices=layouts.P: layouts.per_token(shapes, s)), "derivation"),
    ("param_ratio_eq10", dict(shapes=lambda spec: {k: v for k, v in layouts.reference_kv_weight_shapes(spec).items()
                                                   if k != "basis_v"}), "derivation"),
    ("decode_arithmetic", dict(lrkv_step=_materialized_step), "derivation"),
    ("rmsnorm_key_scale_overhead", dict(layout=_drop(layouts.reference_layout, "key_scale")), "derivation"),
    ("rmsnorm_key_scale_overhead", dict(spec_fn=lambda spec: Fraction(1, spec.head_dim)), "spec_on_grid"),
    # GQA: the image dimension, against the Jacobian rank (a count without the r² gauge is wrong)
    ("v1_gqa_special_case", dict(dim=lambda d, d_h, g, r: d * d_h + g * r * (d + d_h)), "dimension_count"),
    # Gibbs: the inequality, through a bound that is actually valid
    ("centred_gram_ceiling", dict(log_lower_bound=lambda x: 1 - x), "gibbs"),
    # Fig. 9 / Table 3: ceilings computed from the centring, not typed
    ("paper_fig9_ceiling", dict(centring=lambda n: sp.eye(n)), "above_centred_ceiling"),
    ("paper_table3_centred_ceiling", dict(printed=_tampered(data.TABLE3, ("centred", "128M", "LRKV"), "84.0")),
     "centred_below_computed_ceiling"),
    ("paper_table3_centred_ceiling", dict(centring=lambda n: sp.eye(n) - sp.ones(n, n) / n
                                          if n != 6 else _rank_deficient_centring(n)), "centred_below_computed_ceiling"),
    # MLRA: the bound both ways
    ("mlra_decode_speedup", dict(printed=_tampered(data.MLRA_SPEEDUP, ("speedup",), "3.5")), "at_most_bound"),
    ("mlra_decode_speedup", dict(printed=_tampered(data.MLRA_SPEEDUP, ("speedup",), "1.0")), "above_one"),
    # Table 2: the definition where the cells are printed
    ("paper_table2_combined", dict(printed=_tampered(data.TABLE2, ("combined", "MHA"), ("17.9", "36.3", "38.8"))),
     "mean_reproduces_2p5b"),
    # English review: re-reading the shared block
    ("shared_reread_per_head", dict(reads=lambda shapes, s: layouts.per_token(shapes, s)), "shared_alone_equals_mha"),
    ("shared_reread_per_head", dict(reads=lambda shapes, s: sum(
        (layouts.H * layouts.symbol_of(v[2], s) for v in shapes.values() if len(v) == 3), sp.Integer(0))),
     "more_than_mha"),
    # English review: identical maps
    ("identical_maps_centred_gram", dict(centring=lambda n: sp.eye(n)), "zero_matrix"),
    ("identical_maps_centred_gram", dict(centring=lambda n: sp.eye(n)), "trace_zero"),
    ("identical_maps_centred_gram", dict(centring=lambda n: sp.zeros(n, n)), "distinct_maps_nonzero"),
]


@pytest.mark.parametrize("name,variant,check", SOUND, ids=[f"{n}:{c}" for n, _, c in SOUND])
def test_fixed_subcheck_fails_on_a_wrong_input(name, variant, check):
    good = REGISTRY[name].fn()
    assert good.evidence["checks"][check] is True, f"{name}: {check} fails on the correct input"
    bad = REGISTRY[name].fn(**variant)
    assert bad.evidence["checks"][check] is False, f"{name}: sub-check {check} accepted a wrong input"
    assert bad.status != good.status


def test_decode_macs_are_counted_from_the_reference():
    """The six einsums of the factored decode give 2T d_h + 2T r + 2 r d_h per head."""
    from lrkv.proofs.algebra.decode_cost import lrkv_decode_step, mha_decode_step
    from lrkv.proofs.algebra.formula_check import T
    from lrkv.proofs.algebra.layouts import DH, R, derive

    lr, _ = derive(macs_per_head(lrkv_decode_step), DECODE_SAMPLES)
    mh, _ = derive(macs_per_head(mha_decode_step), DECODE_SAMPLES)
    assert sp.expand(lr - (2 * T * DH + 2 * T * R + 2 * R * DH)) == 0
    assert sp.expand(mh - 2 * T * DH) == 0


def test_a_size_that_matches_no_sample_is_an_error():
    with pytest.raises(ValueError, match="not one of the sample sizes"):
        layouts.per_token({"merged": (1, 1, 15)}, layouts.SAMPLES[0])  # 15 = H·r: a merged axis is not named


def test_mlra_speedup_of_one_is_a_verdict_not_an_exception():
    for s in ("1.0", "0.5", "1"):
        p = REGISTRY["mlra_decode_speedup"].fn(printed=_tampered(data.MLRA_SPEEDUP, ("speedup",), s))
        assert p.status == "inconsistent"
    with pytest.raises(ValueError):
        REGISTRY["mlra_decode_speedup"].fn(printed=_tampered(data.MLRA_SPEEDUP, ("speedup",), "fast"))


# ----------------------------------------------------------------------------- the claims this suite newly covers
def _zeros_like_factors():
    import torch

    return tuple(torch.zeros(2, 2) for _ in range(4))


def _with_factored_cache(spec, T):
    """A 'training' forward that also fills the factored cache, as prefill does: it grows with r."""
    from lrkv.proofs.paper.v1_summary import cache_allocation, training_allocations

    return training_allocations(spec, T) + cache_allocation(spec, T)


def _extra_lrkv_pairs(spec, T):
    """LRKV combining one more pair per token than MHA (a different function, not another implementation)."""
    from lrkv.proofs.paper.v1_summary import dependent_pairs

    return dependent_pairs(spec, T) + (T if spec.family == "lrkv" else 0)


NEW = [
    ("zero_init_kills_residual_gradients", dict(init=lambda d, d_h, r: (sp.ones(d, r), sp.zeros(d_h, r))), "both_vanish"),
    ("zero_init_kills_residual_gradients", dict(init=lambda d, d_h, r: (sp.ones(d, r), sp.zeros(d_h, r))), "stays_zero"),
    ("zero_init_kills_residual_gradients", dict(loss=lambda W, G: sp.Integer(0)), "one_zero_factor_recovers"),
    ("zero_init_kills_residual_gradients", dict(factors=_zeros_like_factors), "reference_init_nonzero"),
    ("v1_no_quadratic_growth", dict(pairs=lambda spec, T: 2 * T - 1), "lrkv_pairs_quadratic"),
    ("v1_no_quadratic_growth", dict(pairs=_extra_lrkv_pairs), "same_pairs_as_mha"),
    ("v1_no_quadratic_growth", dict(cache=lambda spec, T: T * T), "caches_linear"),
    ("v1_training_memory_halved", dict(training=_with_factored_cache), "per_token_independent_of_rank"),
    ("v1_training_memory_halved", dict(cache=lambda spec, T: 10 * T), "cache_depends_on_rank"),
    ("v1_mqa_gqa_query_sharing", dict(printed=_tampered(data.TABLE9, ("cache_pct", "GQA"), "50.0")),
     "printed_is_kv_sharing"),
    ("v1_mqa_gqa_query_sharing", dict(reading=lambda H, n_kv: {"query_sharing_only": Fraction(n_kv, H),
                                                               "kv_sharing": Fraction(n_kv, H)}),
     "printed_is_not_query_sharing"),
    ("review_batch_tokens", dict(printed=_tampered(data.TRAINING_SETUP, ("batches", "128M", "accumulation"), 2)),
     "every_group_32768"),
    ("review_midtraining_mix", dict(printed=_tampered(data.TRAINING_SETUP, ("midtraining", "parts", "GSM8K"), "18K")),
     "parts_sum_to_total"),
    ("review_table5_shared_row", dict(table5=_tampered(data.TABLE5, ("layers", "1.2B"), 28)), "rows_identical"),
    ("review_table9_ce_bpb_ratio", dict(table9_bpb={**data.TABLE9_BPB, "MHA": "0.830"}), "intervals_disjoint"),
    ("paper_table1_bpb_order", dict(printed=_tampered(data.TABLE1_BPB, ("bpb", "LRKV"), ("0.872", "0.758", "0.723", "0.692"))),
     "lrkv_below_mha_everywhere"),
    ("paper_table1_bpb_order", dict(printed=_tampered(data.TABLE1_BPB, ("mla_2p5b",), "0.719")), "lrkv_below_mla_2p5b"),
    ("paper_table2_lrkv_top_combined", dict(printed=_tampered(data.TABLE2, ("combined", "MLA"), ("18.0", "36.9", "41.0"))),
     "lrkv_top_everywhere"),
    ("paper_humaneval_lrkv_below_mha", dict(printed=_tampered(data.HUMANEVAL, ("cells", "LRKV"), (None, "11.7", "15.0"))),
     "lrkv_below_mha"),
    ("paper_mqa_humaneval_lowest", dict(printed=_tampered(data.HUMANEVAL, ("cells", "LRKV"), (None, "3.0", "12.8"))),
     "below_every_printed_cell"),
    ("mlra_no_extra_memory", dict(layout=lambda spec: {k: v for k, v in layouts.reference_layout(spec).items()
                                                       if not (spec.family == "mlra" and len(v) == 3)}),
     "equal_at_one_device"),
    ("mlra_no_extra_memory", dict(printed={**data.MLRA_MEMORY, "tp": 1}), "less_per_device_at_tp"),
]


@pytest.mark.parametrize("name,variant,check", NEW, ids=[f"{n}:{c}" for n, _, c in NEW])
def test_new_claim_subcheck_fails_on_a_wrong_input(name, variant, check):
    good = REGISTRY[name].fn()
    assert good.evidence["checks"][check] is True
    bad = REGISTRY[name].fn(**variant)
    assert bad.evidence["checks"][check] is False, f"{name}: sub-check {check} accepted a wrong input"
    assert bad.status != good.status


def test_mqa_humaneval_becomes_checkable_with_the_missing_cells():
    full = {"MHA": ("5.0", "13.4", "14.6"), "LRKV": ("5.5", "11.7", "12.8"), "MQA": ("2.4", "3.7", "4.3"),
            "GQA": ("4.0", "9.0", "9.5"), "MLA": ("4.5", "10.0", "11.0")}
    p = REGISTRY["mlra_decode_speedup"].fn()
    assert p.status == "consistent" and p.evidence["bound"] == "3.000"
    q = REGISTRY["paper_mqa_humaneval_lowest"].fn(printed={**data.HUMANEVAL, "cells": full})
    assert q.status == "proved"


def test_one_rounding_rule_would_reconcile_a_consistent_table():
    t12 = _tampered(data.TABLE12, ("rows", "2.5B", "pct"), "48.5")
    t12 = _tampered(t12, ("rows", "6.3B", "pct"), "45.3")
    g4 = _tampered(data.APPENDIX_G4, ("lines", "2.5B", "printed_fraction"), "0.485")
    p = REGISTRY["paper_table12_pct_one_rule"].fn(table12=t12, g4=g4)
    assert p.status == "reconciled" and "table7 rank, sum" in p.assumption
