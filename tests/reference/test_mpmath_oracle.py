"""The float64 reference against a 50-digit mpmath oracle on tiny shapes."""

import pytest
import torch

from lrkv.reference import lrkv as L
from lrkv.reference.cache import FactoredCache
from lrkv.reference.mpmath_oracle import decode_attention_mp, to_tensor
from lrkv.reference.rope import ExactRope

from ..test_helpers.inputs import random_factored_inputs, split_kw

EPS64 = torch.finfo(torch.float64).eps


def oracle(q, *args, key_scale=None, **kw):
    """The mpmath oracle on the decode contract's tensors (packed into a FactoredCache)."""
    *parts, basis_k, basis_v, lengths = args
    return decode_attention_mp(q, FactoredCache(*parts, lengths, key_scale), basis_k, basis_v, **kw)


def _rel_err(x, ref):
    return ((x - ref).abs().max() / ref.abs().max().clamp_min(1e-300)).item()


@pytest.mark.equivalence
@pytest.mark.parametrize("rope", [None, ExactRope(10000.0)])
@pytest.mark.parametrize("key_scale", [False, True])
def test_reference_within_float64_rounding_of_mpmath(rope, key_scale):
    inp = random_factored_inputs(B=2, T=5, H=2, d_h=4, r=3, lengths=[5, 2], key_scale=key_scale, seed=11)
    args, kw = split_kw(inp)
    out_mp, lse_mp = oracle(*args, scale=0.5, rope=rope, **kw)
    out, lse = L.decode_attention(*args, scale=0.5, rope=rope, **kw)
    # bound: a few ulps times the reduction length (T·(d_h + r) terms)
    bound = 64 * EPS64 * 5 * (4 + 3)
    assert _rel_err(out, to_tensor(out_mp)) < bound
    assert _rel_err(lse, to_tensor(lse_mp)) < bound


@pytest.mark.equivalence
def test_near_cancelling_keys_roundoff_not_algebra():
    """Shared and private keys that nearly cancel: factored and materialized float64 differ
    only by rounding, and both sit within rounding of the exact value."""
    inp = random_factored_inputs(B=1, T=6, H=2, d_h=4, r=4, seed=2)
    # choose S_K = -(R_h B_h^T) of head 0 plus a 1e-9 perturbation: the head-0 key ≈ 0
    priv0 = torch.einsum("btr,dr->btd", inp["latent_k"][:, :, 0], inp["basis_k"][0])
    inp["shared_k"] = -priv0 + 1e-9 * torch.randn_like(priv0)
    inp["q"] = inp["q"] * 1e6  # large queries amplify any cancellation error
    args, kw = split_kw(inp)
    out_mp, lse_mp = oracle(*args, scale=0.5, **kw)
    exact_out, exact_lse = to_tensor(out_mp), to_tensor(lse_mp)
    fac, lse_f = L.decode_attention(*args, scale=0.5)
    mat, lse_m = L.materialized_decode_attention(*args, scale=0.5)
    # condition: |q|·|s| over the tiny key — the cancellation error the inputs allow
    cond = (inp["q"].abs().max() * inp["shared_k"].abs().max() * 4).item()
    bound = 16 * EPS64 * cond
    for lse in (lse_f, lse_m):
        assert (lse - exact_lse).abs().max().item() < bound
    assert (lse_f - lse_m).abs().max().item() < 2 * bound
    # the outputs too: a logit error δ moves out by at most ~2δ·max|v| (softmax is 1-Lipschitz up to 2)
    v_max = (inp["shared_v"].abs().max() + (inp["latent_v"].abs().sum(-1, keepdim=True) *
                                            inp["basis_v"].abs().amax((0, 1))).max()).item()
    out_bound = 2 * bound * v_max + 16 * EPS64 * v_max
    for out in (fac, mat):
        assert (out - exact_out).abs().max().item() < out_bound
    # and the check can fail: the exact output of a different value cache is far away
    assert (L.decode_attention(*args[:2], 2 * args[2], *args[3:], scale=0.5)[0] - exact_out).abs().max() > out_bound


def test_oracle_refuses_large_shapes():
    inp = random_factored_inputs(B=2, T=600, H=4, d_h=8, r=4)
    args, kw = split_kw(inp)
    with pytest.raises(ValueError, match="too large"):
        oracle(*args, scale=0.5, **kw)
