"""The float64 LRKV oracle: factored (Eqs. 6–7) == materialized == the training form."""

import pytest
import torch

from lrkv.reference import lrkv as L
from lrkv.reference.cache import allocate_cache
from lrkv.reference.rope import ExactRope, apply_rope, rope_freqs, rotation_matrix
from lrkv.reference.weights import init_lrkv_weights
from lrkv.spec import AttentionSpec, cache_components, cache_elements

from ..test_helpers.inputs import prefill_then_steps, random_factored_inputs, split_kw

TIGHT = dict(rtol=0, atol=1e-12)


# ----------------------------------------------------------------------------- kernel level
@pytest.mark.equivalence
@pytest.mark.parametrize("r", [0, 1, 5, 8])  # 0, 1, odd, r = d_h
@pytest.mark.parametrize("H", [1, 3])
@pytest.mark.parametrize("lengths", [[1], [7], [7, 1, 4, 0]])
@pytest.mark.parametrize("rope", [None, ExactRope(10000.0)])
@pytest.mark.parametrize("key_scale", [False, True])
def test_factored_equals_materialized(r, H, lengths, rope, key_scale):
    inp = random_factored_inputs(B=len(lengths), T=7, H=H, d_h=8, r=r, lengths=lengths, key_scale=key_scale)
    args, kw = split_kw(inp)
    o1, l1 = L.decode_attention(*args, scale=8**-0.5, rope=rope, **kw)
    o2, l2 = L.materialized_decode_attention(*args, scale=8**-0.5, rope=rope, **kw)
    torch.testing.assert_close(o1, o2, **TIGHT)
    torch.testing.assert_close(l1, l2, **TIGHT)
    assert torch.isfinite(o1).all()  # NaN garbage past lengths never leaks


@pytest.mark.equivalence
def test_long_cache_factored_equals_materialized():
    inp = random_factored_inputs(B=3, T=1301, H=2, d_h=16, r=7, lengths=[1301, 1031, 1], key_scale=True)
    args, kw = split_kw(inp)
    for rope in (None, ExactRope(10000.0)):
        o1, l1 = L.decode_attention(*args, scale=0.25, rope=rope, **kw)
        o2, l2 = L.materialized_decode_attention(*args, scale=0.25, rope=rope, **kw)
        torch.testing.assert_close(o1, o2, rtol=0, atol=1e-11)
        torch.testing.assert_close(l1, l2, rtol=0, atol=1e-11)


@pytest.mark.equivalence
def test_empty_sequence_gives_zero_and_minus_inf():
    inp = random_factored_inputs(B=2, T=5, lengths=[0, 3])
    args, kw = split_kw(inp)
    out, lse = L.decode_attention(*args, scale=0.3, **kw)
    assert torch.equal(out[0], torch.zeros_like(out[0]))
    assert torch.isneginf(lse[0]).all() and torch.isfinite(lse[1]).all()


@pytest.mark.equivalence
def test_garbage_past_length_is_ignored():
    a = random_factored_inputs(B=2, T=6, lengths=[6, 2], seed=3)
    b = {k: v.clone() for k, v in a.items()}
    b["shared_k"][1, 2:] = 1e30  # different garbage: huge instead of NaN
    b["latent_v"][1, 2:] = -7.0
    oa, la = L.decode_attention(*split_kw(a)[0], scale=0.3)
    ob, lb = L.decode_attention(*split_kw(b)[0], scale=0.3)
    assert torch.equal(oa, ob) and torch.equal(la, lb)


@pytest.mark.equivalence
def test_one_softmax_over_the_sum_not_two():
    """Separately normalised shared and private branches give a different answer (Eq. 6)."""
    inp = random_factored_inputs(B=1, T=6, H=2, d_h=8, r=4, seed=5)
    args, _ = split_kw(inp)
    out, _ = L.decode_attention(*args, scale=8**-0.5)
    q, sk, sv, lk, lv, bk, bv, _ = args
    a_s = torch.softmax(torch.einsum("bhd,btd->bht", q, sk) * 8**-0.5, -1)
    a_p = torch.softmax(torch.einsum("bhr,bthr->bht", torch.einsum("bhd,hdr->bhr", q, bk), lk) * 8**-0.5, -1)
    wrong = torch.einsum("bht,btd->bhd", a_s, sv) + torch.einsum(
        "bhr,hdr->bhd", torch.einsum("bht,bthr->bhr", a_p, lv), bv)
    assert (wrong - out).abs().max() > 1e-3


# ----------------------------------------------------------------------------- input validation
@pytest.mark.parametrize(
    "mutate, exc, match",
    [
        (lambda i: i.update(q=i["q"][:, :, :-1]), ValueError, "shared_k"),
        (lambda i: i.update(latent_k=i["latent_k"][..., :-1]), ValueError, "latent_v"),
        (lambda i: i.update(basis_v=i["basis_v"].float()), TypeError, "basis_v"),
        (lambda i: i.update(lengths=torch.tensor([8, 1], dtype=torch.int32)), ValueError, "lengths"),
        (lambda i: i.update(lengths=torch.tensor([1.0, 1.0])), TypeError, "lengths"),
        (lambda i: i["q"].__setitem__((0, 0, 0), float("nan")), ValueError, "q contains NaN"),
        (lambda i: i["shared_v"].__setitem__((0, 0, 0), float("nan")), ValueError, "shared_v"),
        (lambda i: i.update(q=i["q"].to(torch.int64)), TypeError, "dtype"),
    ],
)
def test_bad_input_is_named(mutate, exc, match):
    inp = random_factored_inputs(B=2, T=7, lengths=[7, 3])
    mutate(inp)
    args, kw = split_kw(inp)
    with pytest.raises(exc, match=match):
        L.decode_attention(*args, scale=0.3, **kw)


def test_bad_scale_and_rope():
    args, _ = split_kw(random_factored_inputs())
    with pytest.raises(ValueError, match="scale"):
        L.decode_attention(*args, scale=0.0)
    for scale in (float("inf"), float("nan")):  # inf used to pass `scale > 0` and give NaN out
        with pytest.raises(ValueError, match="scale must be"):
            L.decode_attention(*args, scale=scale)
    with pytest.raises(TypeError, match="rope"):
        L.decode_attention(*args, scale=0.3, rope="exact")


@pytest.mark.parametrize("H, d_h, field", [(0, 8, "H"), (2, 0, "d_h")])
def test_no_heads_or_no_head_dim_is_refused(H, d_h, field):
    """H = 0 or d_h = 0 used to return empty outputs as if that were an attention layer."""
    z = lambda *s: torch.zeros(*s, dtype=torch.float64)  # noqa: E731
    B, T, r = 2, 3, 1
    args = [z(B, H, d_h), z(B, T, d_h), z(B, T, d_h), z(B, T, H, r), z(B, T, H, r), z(H, d_h, r), z(H, d_h, r),
            torch.tensor([3, 1], dtype=torch.int32)]
    with pytest.raises(ValueError, match=rf"{field} \(q.shape\[\d\]\) must be >= 1, got 0"):
        L.decode_attention(*args, scale=0.3)


def test_negative_key_scale_inside_the_length_is_refused():
    inp = random_factored_inputs(B=2, T=7, lengths=[7, 3], key_scale=True)
    args, kw = split_kw(inp)
    ks = kw["key_scale"].clone()
    ks[1, 5] = -1.0  # past length 3: garbage, never read
    L.decode_attention(*args, scale=0.3, key_scale=ks)
    ks[1, 2, 1] = -0.5  # inside
    with pytest.raises(ValueError, match=r"key_scale must be >= 0 \(an inverse RMS\).*-0.5 at \[1, 2, 1\]"):
        L.decode_attention(*args, scale=0.3, key_scale=ks)


# ----------------------------------------------------------------------------- layer level
MODES = [("none", False), ("none", True), ("exact", False), ("exact", True), ("aligned", False), ("aligned", True)]


@pytest.mark.equivalence
@pytest.mark.parametrize(
    "rope, qk_norm, rank",
    # aligned needs an even rank (whole rotary planes); odd ranks there are a spec error
    [(m, n, r) for m, n in MODES for r in (0, 1, 4, 16) if not (m == "aligned" and r % 2)],
)
def test_incremental_decode_reproduces_training_form(rope, qk_norm, rank):
    spec = AttentionSpec.lrkv(3, 16, rank, rope=rope, qk_norm=qk_norm)
    w = init_lrkv_weights(spec, seed=rank)
    x = torch.randn(2, 11, spec.d_model, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    y_full = L.layer_forward(w, x)
    ys, _ = prefill_then_steps(w, x, n_prefill=3)
    torch.testing.assert_close(ys, y_full[:, 3:], **TIGHT)


@pytest.mark.equivalence
def test_varlen_batch_layer_level():
    spec = AttentionSpec.lrkv(2, 8, 3, rope="exact", qk_norm=True)
    w = init_lrkv_weights(spec, seed=7)
    x = torch.randn(3, 9, spec.d_model, dtype=torch.float64)
    lengths = torch.tensor([9, 4, 1], dtype=torch.int32)
    y_full = L.layer_forward(w, x, lengths)
    y_pre, cache = L.prefill(w, x, lengths, t_max=12)
    assert cache.lengths.tolist() == [9, 4, 1]
    torch.testing.assert_close(y_pre, y_full, rtol=0, atol=0)
    for b, n in enumerate(lengths.tolist()):  # padding never reaches a valid row
        torch.testing.assert_close(y_full[b, :n], L.layer_forward(w, x[b:b + 1, :n])[0], **TIGHT)
    # next token of each row at its own position
    x_next = torch.randn(3, spec.d_model, dtype=torch.float64)
    y, cache = L.layer_step(w, x_next, cache, cache.lengths.clone())
    for b, n in enumerate(lengths.tolist()):
        xb = torch.cat([x[b:b + 1, :n], x_next[b:b + 1, None]], dim=1)
        torch.testing.assert_close(y[b], L.layer_forward(w, xb)[0, -1], **TIGHT)


@pytest.mark.equivalence
def test_append_then_decode_equals_prefill():
    spec = AttentionSpec.lrkv(3, 8, 5, rope="exact", qk_norm=True)
    w = init_lrkv_weights(spec, seed=2)
    x = torch.randn(2, 8, spec.d_model, dtype=torch.float64)
    y_pre, cache_pre = L.prefill(w, x, t_max=10)
    cache = allocate_cache(spec, 2, 10)
    ys = []
    for t in range(8):
        y, cache = L.layer_step(w, x[:, t], cache, cache.lengths.clone())
        ys.append(y)
    torch.testing.assert_close(torch.stack(ys, 1), y_pre, **TIGHT)
    for name, t in cache.tensors().items():
        torch.testing.assert_close(t[:, :8], cache_pre.tensors()[name][:, :8], **TIGHT)
        assert torch.isnan(t[:, 8:]).all()  # untouched slots stay garbage


@pytest.mark.equivalence
@pytest.mark.parametrize("qk_norm", [False, True])
def test_latent_rope_differs_from_exact(qk_norm):
    """The paper's Sec. 3 claim (rotate the latent, then B_h^T) is not full RoPE for a generic B_h."""
    spec = AttentionSpec.lrkv(2, 8, 4, rope="latent", qk_norm=qk_norm)
    w = init_lrkv_weights(spec, seed=4)
    x = torch.randn(1, 9, spec.d_model, dtype=torch.float64)
    ys, _ = prefill_then_steps(w, x, n_prefill=1)
    gap = (ys - L.layer_forward(w, x)[:, 1:]).abs().max()
    assert gap > 1e-4, gap
    # ... while the same weights decoded with rope='exact' reproduce the model.
    w_exact = type(w)(**{**w.__dict__, "spec": spec.replace(rope="exact")})
    ys_exact, _ = prefill_then_steps(w_exact, x, n_prefill=1)
    torch.testing.assert_close(ys_exact, L.layer_forward(w, x)[:, 1:], **TIGHT)


def test_aligned_basis_commutes_with_rotation():
    spec = AttentionSpec.lrkv(2, 8, 4, rope="aligned")
    w = init_lrkv_weights(spec)
    freqs = rope_freqs(8, spec.rope_theta)
    for h in range(2):
        Bt = w.basis_k[h].T  # [r, d_h]
        for j in (1, 5, 37):
            R = rotation_matrix(8, j, freqs)
            E = rotation_matrix(4, j, w.latent_freqs[h])
            torch.testing.assert_close(Bt @ R, E @ Bt, **TIGHT)  # B^T R_j = E_j B^T


def test_rope_is_rotation():
    x = torch.randn(5, 8, dtype=torch.float64)
    y = apply_rope(x, torch.arange(5), rope_freqs(8, 10000.0))
    torch.testing.assert_close(x.norm(dim=-1), y.norm(dim=-1), **TIGHT)


def test_init_residual_is_a_tenth_of_shared():
    w = init_lrkv_weights(AttentionSpec.lrkv(8, 64, 16), seed=0)
    ratio = torch.einsum("hdr,her->hde", w.u_k, w.basis_k).norm(dim=(1, 2)).mean() / w.w_shared_k.norm()
    assert 0.05 < ratio < 0.2, ratio


def test_layer_step_rejects_bad_positions_and_full_cache():
    spec = AttentionSpec.lrkv(2, 8, 2)
    w = init_lrkv_weights(spec)
    cache = allocate_cache(spec, 1, 2)
    x = torch.randn(1, spec.d_model, dtype=torch.float64)
    with pytest.raises(ValueError, match="positions must equal"):
        L.layer_step(w, x, cache, torch.tensor([1]))
    L.layer_step(w, x, cache, torch.tensor([0]))
    L.layer_step(w, x, cache, torch.tensor([1]))
    with pytest.raises(ValueError, match="full"):
        L.layer_step(w, x, cache, torch.tensor([2]))
    with pytest.raises(ValueError, match="x_t"):
        L.layer_step(w, x[:, :-1], cache, torch.tensor([2]))


# ----------------------------------------------------------------------------- accounting vs tensors
@pytest.mark.parametrize("qk_norm", [False, True])
@pytest.mark.parametrize("dtype", [torch.float64, torch.bfloat16])
def test_measured_cache_bytes_equal_the_formula(qk_norm, dtype):
    spec = AttentionSpec.lrkv(6, 16, 5, qk_norm=qk_norm)
    cache = allocate_cache(spec, 3, 11, dtype)
    comp = cache_components(spec)
    size = torch.empty((), dtype=dtype).element_size()
    for name, t in cache.tensors().items():
        assert t.numel() * t.element_size() == comp[name] * 3 * 11 * size, name
    assert cache.nbytes() == cache_elements(spec) * 3 * 11 * size
