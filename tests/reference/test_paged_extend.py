"""The float64 paged-decode and extend oracles (DESIGN §4): paged == contiguous for every
page size and page permutation; extend with n_b = 1 == decode; extend over a whole sequence
== the training-form layer forward; bad inputs rejected by name before any math."""

from __future__ import annotations

import pytest
import torch

from lrkv.reference import lrkv as L
from lrkv.reference.extend import extend_attention, materialized_extend_attention, query_positions
from lrkv.reference.paged import gather_pages, materialized_paged_decode_attention, paged_decode_attention
from lrkv.reference.rope import ExactRope
from lrkv.reference.weights import init_lrkv_weights
from lrkv.spec import AttentionSpec

from ..test_helpers.inputs import paginate, ragged_queries, random_factored_inputs, split_kw

TIGHT = dict(rtol=0, atol=1e-12)
# ----------------------------------------------------------------------------- paged
@pytest.mark.equivalence
@pytest.mark.parametrize("page", [1, 16, 7])  # 7 does not divide T = 37
@pytest.mark.parametrize("rope,key_scale", [(None, False), (ExactRope(), True)], ids=["none", "exact-ks"])
def test_paged_equals_contiguous(page, rope, key_scale):
    inp = random_factored_inputs(B=3, T=37, H=3, d_h=8, r=5, lengths=[37, 16, 0], key_scale=key_scale, seed=1)
    args, kw = split_kw(inp)
    want = L.decode_attention(*args, scale=0.3, rope=rope, **kw)
    paged, table = paginate(inp, page, seed=page)
    pargs, pkw = split_kw(paged)
    for fn in (paged_decode_attention, materialized_paged_decode_attention):
        out, lse = fn(*pargs, table, scale=0.3, rope=rope, **pkw)
        torch.testing.assert_close(out, want[0], **TIGHT)
        torch.testing.assert_close(lse, want[1], **TIGHT)
        assert torch.isfinite(out).all()  # NaN in unused pages never leaks


@pytest.mark.equivalence
def test_paged_shared_prefix_pages():
    inp = random_factored_inputs(B=2, T=32, H=2, d_h=8, r=3, lengths=[32, 27], seed=2)
    for name in ("shared_k", "shared_v", "latent_k", "latent_v"):
        inp[name][1, :16] = inp[name][0, :16]  # a common 16-token prompt
    paged, table = paginate(inp, 8, seed=3, share_prefix=2)
    assert torch.equal(table[0, :2], table[1, :2])
    want = L.decode_attention(*split_kw(inp)[0], scale=0.3)
    out, lse = paged_decode_attention(*split_kw(paged)[0], table, scale=0.3)
    torch.testing.assert_close(out, want[0], **TIGHT)
    torch.testing.assert_close(lse, want[1], **TIGHT)


def test_gather_pages_follows_the_table():
    pages = torch.arange(4 * 2, dtype=torch.float64).reshape(4, 2)  # page p holds 2p, 2p+1
    table = torch.tensor([[3, 0], [1, -1]], dtype=torch.int32)
    got = gather_pages(table, torch.tensor([3, 2]), pages)
    assert got[0, :3].tolist() == [6.0, 7.0, 0.0] and got[1, :2].tolist() == [2.0, 3.0]
    assert got[0, 3].isnan() and got[1, 2:].isnan().all()  # past the length: NaN, whatever the entry


# ----------------------------------------------------------------------------- extend
@pytest.mark.equivalence
@pytest.mark.parametrize("rope,key_scale", [(None, False), (ExactRope(), True)], ids=["none", "exact-ks"])
def test_extend_one_token_each_is_decode(rope, key_scale):
    inp = random_factored_inputs(B=3, T=9, H=3, d_h=8, r=4, lengths=[9, 4, 1], key_scale=key_scale, seed=4)
    args, kw = split_kw(inp)
    cu = torch.arange(4, dtype=torch.int32)
    want = L.decode_attention(*args, scale=0.3, rope=rope, **kw)
    out, lse = extend_attention(inp["q"], cu, *args[1:], scale=0.3, rope=rope, **kw)
    torch.testing.assert_close(out, want[0], **TIGHT)
    torch.testing.assert_close(lse, want[1], **TIGHT)


def test_query_positions_are_the_last_n_b_tokens():
    seq, pos = query_positions(torch.tensor([0, 2, 2, 5], dtype=torch.int32), torch.tensor([7, 3, 5]))
    assert seq.tolist() == [0, 0, 2, 2, 2] and pos.tolist() == [5, 6, 2, 3, 4]


@pytest.mark.equivalence
@pytest.mark.parametrize("rope,qk_norm", [("none", False), ("exact", True), ("aligned", True), ("aligned", False)])
def test_extend_whole_sequence_is_the_training_form(rope, qk_norm):
    # The prompt of each sequence extended in one chunk, n_b = lengths[b]: the layer's
    # attention outputs must be those of the training-form forward (padding masked).
    spec = AttentionSpec.lrkv(3, 8, 4, rope=rope, qk_norm=qk_norm)
    w = init_lrkv_weights(spec, seed=6)
    B, T = 3, 10
    lengths = torch.tensor([10, 6, 1], dtype=torch.int32)
    x = torch.randn(B, T, spec.d_model, generator=torch.Generator().manual_seed(7), dtype=torch.float64)
    y_train, cache = L.prefill(w, x, lengths, t_max=T + 2)
    q = L.project_token(w, x, torch.arange(T)[None, :].expand(B, T))["q"]  # [B, T, H, d_h]
    valid = torch.arange(T)[None, :] < lengths[:, None]
    q_ragged = q[valid]  # [N, H, d_h], sequence-major
    cu = torch.tensor([0, *lengths.cumsum(0).tolist()], dtype=torch.int32)
    args = (cache.shared_k, cache.shared_v, cache.latent_k, cache.latent_v, w.basis_k, w.basis_v, cache.lengths)
    for fn in (extend_attention, materialized_extend_attention):
        out, _ = fn(q_ragged, cu, *args, scale=spec.head_dim ** -0.5, key_scale=cache.key_scale,
                    rope=L.decode_rope(spec))
        y = torch.einsum("nhd,hde->ne", out, w.w_o)
        torch.testing.assert_close(y, y_train[valid], **TIGHT)


@pytest.mark.equivalence
@pytest.mark.parametrize("page", [None, 1, 16, 5])
def test_extend_ragged_batch_paged_and_contiguous_agree(page):
    # n_b of 0, 1, 3 and a 20-token chunk in one batch; factored == materialized; paged == contiguous
    lengths = [20, 9, 1, 12]
    n = [20, 3, 1, 0]
    inp = random_factored_inputs(B=4, T=21, H=2, d_h=8, r=3, lengths=lengths, key_scale=True, seed=8)
    q, cu = ragged_queries(inp, n)
    args, kw = split_kw(inp)
    want = extend_attention(q, cu, *args[1:], scale=0.3, rope=ExactRope(), **kw)
    mat = materialized_extend_attention(q, cu, *args[1:], scale=0.3, rope=ExactRope(), **kw)
    torch.testing.assert_close(mat[0], want[0], **TIGHT)
    if page is None:
        got = want
    else:
        paged, table = paginate(inp, page, seed=9, share_prefix=0)
        pargs, pkw = split_kw(paged)
        got = extend_attention(q, cu, *pargs[1:], scale=0.3, rope=ExactRope(), page_table=table, **pkw)
    torch.testing.assert_close(got[0], want[0], **TIGHT)
    torch.testing.assert_close(got[1], want[1], **TIGHT)
    assert got[0].shape == (24, 2, 8) and torch.isfinite(got[0]).all()
    # causality: the chunk's first query sees only slot 0, so its output is v_0 exactly
    v0 = inp["shared_v"][0, 0] + torch.einsum("hdr,hr->hd", inp["basis_v"], inp["latent_v"][0, 0])
    torch.testing.assert_close(got[0][0], v0, **TIGHT)


@pytest.mark.equivalence
def test_extend_with_no_queries():
    inp = random_factored_inputs(B=2, T=4, lengths=[4, 2], seed=10)
    args, kw = split_kw(inp)
    out, lse = extend_attention(inp["q"][:0], torch.zeros(3, dtype=torch.int32), *args[1:], scale=0.3, **kw)
    assert out.shape == (0, 3, 8) and lse.shape == (0, 3) and lse.dtype == torch.float64


# ----------------------------------------------------------------------------- validation
def _extend_call(**change):
    inp = random_factored_inputs(B=2, T=6, H=2, d_h=8, r=3, lengths=[6, 3], seed=11)
    q, cu = ragged_queries(inp, [2, 1])
    kw = dict(q=q, cu_seqlens_q=cu, **{k: inp[k] for k in ("shared_k", "shared_v", "latent_k", "latent_v",
                                                            "basis_k", "basis_v", "lengths")})
    kw.update(change)
    return extend_attention(**kw, scale=0.3)


@pytest.mark.parametrize("change,exc,match", [
    (dict(cu_seqlens_q=torch.tensor([1, 2, 3], dtype=torch.int32)), ValueError, r"cu_seqlens_q\[0\]"),
    (dict(cu_seqlens_q=torch.tensor([0, 3, 2], dtype=torch.int32)), ValueError, "non-decreasing"),
    (dict(cu_seqlens_q=torch.tensor([0, 2, 4], dtype=torch.int32)), ValueError, "number of query tokens"),
    (dict(cu_seqlens_q=torch.tensor([0, 2], dtype=torch.int32)), ValueError, "lengths"),
    (dict(cu_seqlens_q=torch.tensor([0., 2., 3.])), TypeError, "cu_seqlens_q"),
    (dict(lengths=torch.tensor([6, 0], dtype=torch.int32)), ValueError, "extends by n_b = 1"),
    (dict(q=torch.full((3, 2, 8), float("nan"), dtype=torch.float64)), ValueError, "q contains NaN"),
    (dict(q=torch.zeros(3, 2, 4, dtype=torch.float64)), ValueError, "shared_k must have shape"),
    (dict(q=torch.zeros(3, 2, 8)), TypeError, "all float inputs must match"),
])
def test_extend_rejects_bad_input_by_name(change, exc, match):
    with pytest.raises(exc, match=match):
        _extend_call(**change)


def test_paged_rejects_bad_page_table():
    inp = random_factored_inputs(B=2, T=8, H=2, d_h=8, r=3, lengths=[8, 3], seed=12)
    paged, table = paginate(inp, 4)
    args = split_kw(paged)[0]
    bad = table.clone()
    bad[1, 0] = paged["shared_k"].shape[0]  # one past the last page
    with pytest.raises(ValueError, match=r"page_table\[1, 0\]"):
        paged_decode_attention(*args, bad, scale=0.3)
    with pytest.raises(TypeError, match="page_table must be int32"):
        paged_decode_attention(*args, table.long(), scale=0.3)
    with pytest.raises(ValueError, match="max_pages\\*page_size"):
        paged_decode_attention(*args[:7], torch.tensor([9, 3], dtype=torch.int32), table, scale=0.3)
    # a page-table entry past the length is never read: -1 there is legal
    assert int(table[1, 1]) == -1
    nan_page = dict(paged)
    nan_page["latent_k"] = paged["latent_k"].clone()
    nan_page["latent_k"][int(table[1, 0])] = float("nan")  # inside sequence 1's valid length
    with pytest.raises(ValueError, match="latent_k contains NaN"):
        paged_decode_attention(*split_kw(nan_page)[0], table, scale=0.3)


def test_a_page_listed_twice_in_one_sequence_is_refused():
    """Two logical pages of one sequence on one physical page alias its slots; sharing a page
    between sequences (a common prefix) stays legal."""
    inp = random_factored_inputs(B=2, T=8, H=2, d_h=8, r=3, lengths=[8, 5], seed=13, key_scale=True)
    paged, table = paginate(inp, 4, share_prefix=1)
    args, kw = split_kw(paged)
    paged_decode_attention(*args, table, scale=0.3, **kw)  # sequence 1 reads sequence 0's page 0
    twice = table.clone()
    twice[0, 1] = twice[0, 0]
    with pytest.raises(ValueError, match=r"page_table\[0, 1\] = \d+ repeats page_table\[0, 0\]: sequence 0"):
        paged_decode_attention(*args, twice, scale=0.3, **kw)
    q, cu = ragged_queries(paged, [2, 1])
    with pytest.raises(ValueError, match="lists one page twice"):
        extend_attention(q, cu, *args[1:], scale=0.3, page_table=twice, **kw)
    negative = dict(paged)
    negative["key_scale"] = paged["key_scale"].clone()
    negative["key_scale"][int(table[1, 1]), 0, 0] = -2.0  # slot 4 of sequence 1 (length 5)
    with pytest.raises(ValueError, match="key_scale must be >= 0"):
        paged_decode_attention(*split_kw(negative)[0], table, scale=0.3, key_scale=negative["key_scale"])


def test_scatter_pages_is_the_inverse_of_gather_pages():
    """scatter_pages writes what gather_pages reads back, shared pages holding sequence 0's
    copy; a sequence's slots past its length come back NaN from the gather."""
    from lrkv.reference.paged import scatter_pages

    g = torch.Generator().manual_seed(3)
    t = torch.randn(3, 10, 2, 4, generator=g, dtype=torch.float64)  # [B, T, H, r]
    table = torch.tensor([[5, 0, 2], [5, 7, 3], [1, 6, 4]], dtype=torch.int32)  # page 5 shared by 0 and 1
    pool = scatter_pages(t, table, torch.full((8, 4, 2, 4), float("nan"), dtype=torch.float64))
    lengths = torch.tensor([10, 7, 0])
    back = gather_pages(table, lengths, pool)
    want = t.clone()
    want[1, :4] = t[0, :4]  # the shared page holds sequence 0's copy
    for b, n in enumerate(lengths.tolist()):
        torch.testing.assert_close(back[b, :n], want[b, :n], rtol=0, atol=0)
        assert back[b, n:].isnan().all()
    assert pool[[2]].isnan().sum() == 2 * 2 * 4  # sequence 0's last page: slots 10, 11 are padding
