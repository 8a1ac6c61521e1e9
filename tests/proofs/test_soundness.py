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
