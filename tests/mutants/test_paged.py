"""Each paged / extend mutant (lrkv.mutants.paged) differs from the float64 reference
on an ordinary case, while the same code without the bug (the base classes) matches it."""

from __future__ import annotations

import pytest
import torch

from lrkv.mutants.paged import EXTEND_MUTANTS, PAGED_MUTANTS, ExtendMutant, PagedMutant
from lrkv.reference.extend import extend_attention
from lrkv.reference.paged import paged_decode_attention
from lrkv.reference.rope import ExactRope

from ..test_helpers.inputs import paginate, ragged_queries, random_factored_inputs, split_kw


def _differs(got, want) -> bool:
    out, lse = got
    if not torch.equal(out.isnan(), want[0].isnan()) or not torch.equal(lse.isneginf(), want[1].isneginf()):
        return True
    fin = torch.isfinite(want[0])
    return float((out - want[0])[fin].abs().max()) > 1e-6


@pytest.fixture(scope="module")
def paged_case():
    inp = random_factored_inputs(B=3, T=40, H=2, d_h=8, r=3, lengths=[40, 16, 23], key_scale=True, seed=40)
    paged, table = paginate(inp, 8, seed=41)
    args, kw = split_kw(paged)
    return args, table, kw


@pytest.fixture(scope="module")
def extend_case():
    inp = random_factored_inputs(B=3, T=20, H=2, d_h=8, r=3, lengths=[20, 9, 12], key_scale=True, seed=42)
    q, cu = ragged_queries(inp, [6, 3, 1])
    args, kw = split_kw(inp)
    return q, cu, args[1:], kw


@pytest.mark.parametrize("mutant", [PagedMutant, *PAGED_MUTANTS], ids=lambda m: m.__name__)
def test_paged_mutants_differ_from_the_reference(mutant, paged_case):
    args, table, kw = paged_case
    want = paged_decode_attention(*args, table, scale=0.3, rope=ExactRope(), **kw)
    got = mutant().paged_decode_attention(*args, table, scale=0.3, rope=ExactRope(), **kw)
    if mutant is PagedMutant:
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    else:
        assert mutant.bug and _differs(got, want), mutant.name


@pytest.mark.parametrize("mutant", [ExtendMutant, *EXTEND_MUTANTS], ids=lambda m: m.__name__)
def test_extend_mutants_differ_from_the_reference(mutant, extend_case):
    q, cu, args, kw = extend_case
    want = extend_attention(q, cu, *args, scale=0.3, rope=ExactRope(), **kw)
    got = mutant().extend_attention(q, cu, *args, scale=0.3, rope=ExactRope(), **kw)
    if mutant is ExtendMutant:
        torch.testing.assert_close(got, want, rtol=0, atol=1e-12)
    else:
        assert mutant.bug and _differs(got, want), mutant.name
