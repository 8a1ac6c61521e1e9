"""Float64 references of the baseline families (MHA/GQA/MQA, MLA, MLRA) and their links to LRKV.

What is pinned down (DESIGN §4, §8, §10):
  * every family's incremental decode (prefill + layer_step, varlen, NaN garbage) reproduces
    its training-form layer_forward;
  * naive == absorbed decode for MLA (both forms) and MLRA (MLRA-4, MLRA-2);
  * the family identities: MQA = GQA(n_kv=1), MHA = GQA(n_kv=H), GQA = MHA with repeated KV
    heads, LRKV(r=0) = MQA, LRKV(U_h = W_h − W_S, B_h = I) = MHA, MLRA(L=1) = DeepSeek MLA;
  * MLRA's branch → latent-head mapping equals the public code's kv_b_proj layout;
  * measured cache bytes equal the spec's accounting; K/V parameter counts equal Eq. 10's;
  * malformed inputs raise ValueError/TypeError naming the problem.
Shapes are tiny: the whole file runs in seconds on two CPU cores.
"""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from lrkv.reference import dense, mla, mlra
from lrkv.reference.layers import LAYER_FAMILIES, LayerFamily, layer_module
from lrkv.reference.weights import LRKVWeights, init_lrkv_weights
from lrkv.spec import FAMILIES, AttentionSpec, cache_components, cache_elements, dtype_bytes, kv_param_count

ATOL = 1e-12  # float64, O(1) outputs, reductions over a few dozen terms: rounding is ~1e-15
NAN = float("nan")

SPECS: dict[str, AttentionSpec] = {
    "mha": AttentionSpec.mha(3, 4, d_model=10),
    "mha-rope-qkn": AttentionSpec.mha(4, 4, rope="exact", qk_norm=True),
    "gqa-rope": AttentionSpec.gqa(6, 4, 2, rope="exact", d_model=10),
    "gqa-qkn": AttentionSpec.gqa(6, 4, 3, qk_norm=True, d_model=10),
    "mqa-rope-qkn": AttentionSpec.mqa(4, 6, rope="exact", qk_norm=True, d_model=12),
    "mla-simplified": AttentionSpec.mla(4, 6, latent_dim=10, d_model=16),
    "mla-deepseek": AttentionSpec.mla(4, 6, latent_dim=10, rope_dim=4, d_model=16),
    "mlra-4": AttentionSpec.mlra(4, 6, latent_dim=5, n_latent_heads=4, n_branches=4, rope_dim=4, d_model=16),
    "mlra-2": AttentionSpec.mlra(4, 6, latent_dim=5, n_latent_heads=4, n_branches=2, rope_dim=4, d_model=16),
    "mlra-2-norope": AttentionSpec.mlra(6, 4, latent_dim=3, n_latent_heads=4, n_branches=2, rope_dim=0, d_model=12),
    "lrkv": AttentionSpec.lrkv(3, 6, 2, d_model=10),
    "lrkv-rope-qkn": AttentionSpec.lrkv(4, 8, 3, rope="exact", qk_norm=True),
}
LATENT = [n for n, s in SPECS.items() if s.family in ("mla", "mlra")]
# (spec name, layer_step keywords): the latent families decode both ways
DECODE_CASES = [(n, {}) for n in SPECS] + [(n, {"absorbed": False}) for n in LATENT]


def _id(case) -> str:
    name, kw = case
    return name + ("-naive" if kw.get("absorbed") is False else "")


def randn(*shape, seed: int, scale: float = 1.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g, dtype=torch.float64) * scale


def close(actual: torch.Tensor, expected: torch.Tensor, atol: float = ATOL) -> None:
    torch.testing.assert_close(actual, expected, atol=atol, rtol=0)


def run_decode(fam: LayerFamily, w, x: torch.Tensor, prompt: torch.Tensor, garbage: float | None = None, **kw):
    """Prefill x[:, :P] (sequence b keeps prompt[b] tokens; padding replaced by `garbage` when set),
    then step every sequence token by token to x's end. Returns (y_prefill, [(positions, y)], cache)."""
    B, T, _ = x.shape
    P = int(prompt.max())
    xp = x[:, :P].clone()
    if garbage is not None:
        xp[torch.arange(P)[None, :] >= prompt[:, None]] = garbage
    y_prefill, cache = fam.prefill(w, xp, prompt, t_max=T)
    steps = []
    rows = torch.arange(B)
    for _ in range(T - P):
        pos = cache.lengths.clone()
        y, cache = fam.layer_step(w, x[rows, pos.long()], cache, pos, **kw)
        steps.append((pos, y))
    return y_prefill, steps, cache


def assert_matches_forward(y_full, y_prefill, steps, prompt) -> None:
    for b, n in enumerate(prompt.tolist()):
        close(y_prefill[b, :n], y_full[b, :n])
    rows = torch.arange(y_full.shape[0])
    for pos, y in steps:
        close(y, y_full[rows, pos.long()])


def step_outputs(steps) -> torch.Tensor:
    return torch.stack([y for _, y in steps])


PROMPT = torch.tensor([1, 3, 5], dtype=torch.int32)  # lengths 1, odd, full
B, P, T = 3, 5, 9


# ----------------------------------------------------------------------------- decode == forward
@pytest.mark.equivalence
@pytest.mark.parametrize("case", DECODE_CASES, ids=_id)
def test_incremental_decode_matches_layer_forward(case):
    name, kw = case
    spec = SPECS[name]
    fam = layer_module(spec)
    w = fam.init_weights(spec, seed=3)
    x = randn(B, T, spec.d_model, seed=4)
    y_full = fam.layer_forward(w, x)
    # Padding tokens of the prompt are large garbage: they must reach neither outputs nor cache.
    y_prefill, steps, cache = run_decode(fam, w, x, PROMPT, garbage=1e3, **kw)
    assert_matches_forward(y_full, y_prefill, steps, PROMPT)
    assert cache.lengths.tolist() == (PROMPT + T - P).tolist()
    # The cache was allocated NaN-filled: every slot past a sequence's length is still NaN.
    for t in cache.tensors().values():
        for b, n in enumerate(cache.lengths.tolist()):
            assert torch.isnan(t[b, n:]).all() and torch.isfinite(t[b, :n]).all()


@pytest.mark.equivalence
@pytest.mark.parametrize("name", list(SPECS))
def test_layer_forward_lengths_equal_truncation(name):
    """Masking keys past lengths[b] is the same as running the truncated sequence alone."""
    spec = SPECS[name]
    fam = layer_module(spec)
    w = fam.init_weights(spec, seed=7)
    x = randn(3, 6, spec.d_model, seed=8)
    lengths = torch.tensor([2, 5, 0], dtype=torch.int32)
    y = fam.layer_forward(w, x, lengths)
    for b, n in enumerate(lengths.tolist()):
        if n:
            close(y[b, :n], fam.layer_forward(w, x[b:b + 1, :n])[0])


@pytest.mark.equivalence
@pytest.mark.parametrize("name", list(SPECS))
def test_layer_forward_nan_padding_does_not_leak(name):
    spec = SPECS[name]
    fam = layer_module(spec)
    w = fam.init_weights(spec, seed=9)
    x = randn(2, 5, spec.d_model, seed=10)
    lengths = torch.tensor([2, 5], dtype=torch.int32)
    y_clean = fam.layer_forward(w, x, lengths)
    x[0, 2:] = NAN
    y = fam.layer_forward(w, x, lengths)
    close(y[0, :2], y_clean[0, :2])
    close(y[1], y_clean[1])


# ----------------------------------------------------------------------------- kernel level
def _latent_cache(spec: AttentionSpec, lengths: torch.Tensor, t_max: int, seed: int):
    """A cache of random valid slots and NaN garbage past lengths, plus a query."""
    Bk = lengths.shape[0]
    shape = (Bk, t_max, spec.latent_dim) if spec.family == "mla" else (Bk, t_max, spec.n_latent_heads, spec.latent_dim)
    valid = torch.arange(t_max)[None, :] < lengths[:, None]
    latent = randn(*shape, seed=seed)
    latent[~valid] = NAN
    k_rope = None
    if spec.rope_dim:
        k_rope = randn(Bk, t_max, spec.rope_dim, seed=seed + 1)
        k_rope[~valid] = NAN
    q = randn(Bk, spec.n_heads, spec.head_dim + spec.rope_dim, seed=seed + 2)
    return q, latent, k_rope


@pytest.mark.equivalence
@pytest.mark.parametrize("name", LATENT)
def test_naive_equals_absorbed_kernel(name):
    spec = SPECS[name]
    mod = mla if spec.family == "mla" else mlra
    w = mod.init_weights(spec, seed=11)
    lengths = torch.tensor([0, 1, 4, 7], dtype=torch.int32)  # empty, 1, even, full
    q, latent, k_rope = _latent_cache(spec, lengths, 7, seed=12)
    # queries ×100 sharpen the softmax: the two orders of operation must still agree
    for qq in (q, 100 * q):
        args = (qq, latent, k_rope, w.w_uk, w.w_uv, lengths)
        out_n, lse_n = mod.naive_decode_attention(*args, scale=spec.scale)
        out_a, lse_a = mod.absorbed_decode_attention(*args, scale=spec.scale)
        close(out_a, out_n, atol=ATOL * qq.abs().max().item())
        close(lse_a, lse_n, atol=ATOL * qq.abs().max().item())
        assert (out_a[0] == 0).all() and torch.isneginf(lse_a[0]).all()  # empty length → 0, −inf
        assert torch.isfinite(out_a[1:]).all()
    if spec.family == "mlra":
        assert lse_a.shape == (4, spec.n_branches, spec.n_heads)  # one softmax per branch


@pytest.mark.equivalence
@pytest.mark.parametrize("name", ["mha", "gqa-rope", "gqa-qkn", "mqa-rope-qkn"])
def test_dense_kernel_against_explicit_softmax(name):
    spec = SPECS[name]
    H, d_h, n_kv = spec.n_heads, spec.head_dim, spec.n_kv_heads
    lengths = torch.tensor([0, 1, 3, 6], dtype=torch.int32)
    q = randn(4, H, d_h, seed=13)
    k, v = randn(4, 6, n_kv, d_h, seed=14), randn(4, 6, n_kv, d_h, seed=15)
    valid = torch.arange(6)[None, :] < lengths[:, None]
    k[~valid], v[~valid] = NAN, NAN
    out, lse = dense.decode_attention(q, k, v, lengths, scale=spec.scale)
    for b, n in enumerate(lengths.tolist()):
        if n == 0:
            assert (out[b] == 0).all() and torch.isneginf(lse[b]).all()
            continue
        kh = k[b, :n].repeat_interleave(H // n_kv, dim=1)  # [n, H, d_h]
        vh = v[b, :n].repeat_interleave(H // n_kv, dim=1)
        logits = torch.einsum("hd,thd->ht", q[b], kh) * spec.scale
        close(out[b], torch.einsum("ht,thd->hd", logits.softmax(-1), vh))
        close(lse[b], logits.logsumexp(-1))


# ----------------------------------------------------------------------------- family identities
def _decode_pair(fam_a, w_a, fam_b, w_b, seed: int):
    x = randn(B, T, w_a.spec.d_model, seed=seed)
    close(fam_a.layer_forward(w_a, x), fam_b.layer_forward(w_b, x))
    ya, sa, _ = run_decode(fam_a, w_a, x, PROMPT)
    yb, sb, _ = run_decode(fam_b, w_b, x, PROMPT)
    for b, n in enumerate(PROMPT.tolist()):
        close(ya[b, :n], yb[b, :n])
    close(step_outputs(sa), step_outputs(sb))


@pytest.mark.equivalence
@pytest.mark.parametrize("rope,qk_norm", [("none", False), ("exact", True)])
def test_mqa_equals_gqa_with_one_kv_head_and_mha_equals_gqa_with_h(rope, qk_norm):
    fam = layer_module("gqa")
    mqa_spec = AttentionSpec.mqa(4, 4, rope=rope, qk_norm=qk_norm, d_model=10)
    w = dense.init_weights(mqa_spec, seed=16)
    _decode_pair(fam, w, fam, dataclasses.replace(w, spec=AttentionSpec.gqa(4, 4, 1, rope=rope, qk_norm=qk_norm,
                                                                              d_model=10)), seed=17)
    mha_spec = AttentionSpec.mha(4, 4, rope=rope, qk_norm=qk_norm, d_model=10)
    w = dense.init_weights(mha_spec, seed=18)
    _decode_pair(fam, w, fam, dataclasses.replace(w, spec=AttentionSpec.gqa(4, 4, 4, rope=rope, qk_norm=qk_norm,
                                                                              d_model=10)), seed=19)


@pytest.mark.equivalence
@pytest.mark.parametrize("rope,qk_norm", [("none", False), ("exact", True)])
def test_gqa_equals_mha_with_repeated_kv_heads(rope, qk_norm):
    """Head h reads KV head h // (H / n_kv): repeating each KV head's weights G times is MHA."""
    gqa_spec = AttentionSpec.gqa(6, 4, 2, rope=rope, qk_norm=qk_norm, d_model=10)
    w = dense.init_weights(gqa_spec, seed=20)
    G = gqa_spec.group_size
    rep = lambda t: None if t is None else t.repeat_interleave(G, dim=-2)  # noqa: E731  (KV-head axis)
    w_mha = dense.DenseWeights(AttentionSpec.mha(6, 4, rope=rope, qk_norm=qk_norm, d_model=10),
                               w.w_q, rep(w.w_k), rep(w.w_v), w.w_o, w.q_gain, rep(w.k_gain))
    _decode_pair(layer_module("gqa"), w, layer_module("mha"), w_mha, seed=21)


ROPE_QKN = [("none", False), ("none", True), ("exact", False), ("exact", True)]


@pytest.mark.equivalence
@pytest.mark.parametrize("rope,qk_norm", ROPE_QKN)
def test_lrkv_rank_zero_equals_mqa(rope, qk_norm):
    """r = 0: every head's key and value is the shared X W_S — MQA's single KV head."""
    spec = AttentionSpec.lrkv(4, 6, 0, rope=rope, qk_norm=qk_norm, d_model=12)
    w_l = init_lrkv_weights(spec, seed=22)
    if qk_norm:  # MQA normalises its one key with one gain: make LRKV's per-head key gains equal
        w_l = dataclasses.replace(w_l, k_gain=w_l.k_gain[:1].expand(4, -1).clone())
    w_m = dense.DenseWeights(
        AttentionSpec.mqa(4, 6, rope=rope, qk_norm=qk_norm, d_model=12),
        w_q=w_l.w_q, w_k=w_l.w_shared_k[:, None, :], w_v=w_l.w_shared_v[:, None, :], w_o=w_l.w_o,
        q_gain=w_l.q_gain, k_gain=None if w_l.k_gain is None else w_l.k_gain[:1],
    )
    _decode_pair(layer_module("lrkv"), w_l, layer_module("mqa"), w_m, seed=23)


@pytest.mark.equivalence
@pytest.mark.parametrize("rope,qk_norm", ROPE_QKN)
def test_lrkv_identity_basis_equals_mha(rope, qk_norm):
    """r = d_h, B_h = I, U_h = W_h − W_S: W_S + U_h B_h^T = W_h for any W_S — MHA exactly, and the
    factored decode (shared + latent, exact RoPE rebuilt per slot) must reproduce it."""
    H, d_h, d = 3, 4, 10
    mha_spec = AttentionSpec.mha(H, d_h, rope=rope, qk_norm=qk_norm, d_model=d)
    w_m = dense.init_weights(mha_spec, seed=24)
    w_sk, w_sv = randn(d, d_h, seed=25, scale=d**-0.5), randn(d, d_h, seed=26, scale=d**-0.5)
    eye = torch.eye(d_h, dtype=torch.float64).expand(H, d_h, d_h).clone()
    w_l = LRKVWeights(
        AttentionSpec.lrkv(H, d_h, d_h, rope=rope, qk_norm=qk_norm, d_model=d),
        w_q=w_m.w_q, w_shared_k=w_sk, w_shared_v=w_sv,
        u_k=w_m.w_k.permute(1, 0, 2) - w_sk, u_v=w_m.w_v.permute(1, 0, 2) - w_sv,
        basis_k=eye, basis_v=eye.clone(), w_o=w_m.w_o, q_gain=w_m.q_gain, k_gain=w_m.k_gain,
    )
    close(w_l.head_k(), w_m.w_k.permute(1, 0, 2))
    _decode_pair(layer_module("lrkv"), w_l, layer_module("mha"), w_m, seed=27)


@pytest.mark.equivalence
def test_mlra_single_latent_head_equals_deepseek_mla():
    """L = n_b = 1: one latent head, one branch, output ÷ sqrt(1) — DeepSeek's MLA with the
    sqrt(d/d_c) latent scale folded into the kv_norm gain."""
    d, d_c = 16, 8
    s_r = AttentionSpec.mlra(4, 6, latent_dim=d_c, n_latent_heads=1, n_branches=1, rope_dim=4, d_model=d)
    w_r = mlra.init_weights(s_r, seed=28)
    w_m = mla.MLAWeights(AttentionSpec.mla(4, 6, latent_dim=d_c, rope_dim=4, d_model=d),
                         w_q=w_r.w_q, w_kv_a=w_r.w_kv_a, w_uk=w_r.w_uk[0], w_uv=w_r.w_uv[0], w_o=w_r.w_o,
                         kv_gain=w_r.kv_gain[0] * math.sqrt(d / d_c))
    _decode_pair(layer_module(s_r), w_r, layer_module("mla"), w_m, seed=29)


def _public_mlra_forward(w: mlra.MLRAWeights, x: torch.Tensor) -> torch.Tensor:
    """A transcription of the public training forward (SongtaoLiu0823/MLRA model/mlra_2.py, mlra_4.py,
    generalised to g = L/n_b groups) on its kv_b_proj layout, with an explicit causal softmax
    in place of flash_attn. Branch b takes latent heads b·g … b·g+g−1 and reshapes them to H heads."""
    s = w.spec
    Bx, Tx, _ = x.shape
    H, L, nb, d_h, d_r = s.n_heads, s.n_latent_heads, s.n_branches, s.head_dim, s.rope_dim
    g = L // nb
    p = mlra.project_token(w, x, torch.arange(Tx)[None, :].expand(Bx, Tx))
    kv = torch.einsum("btld,ldo->btlo", p["latent"], w.kv_b_proj()).view(Bx, Tx, L, H // g, 2 * d_h)
    causal = torch.ones(Tx, Tx, dtype=torch.bool).tril()
    y = 0.0
    for b in range(nb):
        k_nope, v = kv[:, :, b * g:(b + 1) * g].reshape(Bx, Tx, H, 2 * d_h).split([d_h, d_h], dim=-1)
        k = torch.cat((k_nope, p["k_rope"][:, :, None, :].expand(Bx, Tx, H, d_r)), dim=-1)
        scores = torch.einsum("bihe,bjhe->bhij", p["q"], k) * (d_h + d_r) ** -0.5
        a = scores.masked_fill(~causal, float("-inf")).softmax(-1)
        y = y + torch.einsum("bhij,bjhe->bihe", a, v) / math.sqrt(nb)
    return torch.einsum("bthe,hed->btd", y, w.w_o)


@pytest.mark.equivalence
@pytest.mark.parametrize("name", ["mlra-4", "mlra-2"])
def test_mlra_branch_mapping_matches_public_layout(name):
    w = mlra.init_weights(SPECS[name], seed=30)
    x = randn(2, 6, w.spec.d_model, seed=31)
    close(mlra.layer_forward(w, x), _public_mlra_forward(w, x))


def test_mlra_latent_of_head():
    # MLRA-4: every head reads latent b in branch b; MLRA-2 (H = 4): heads 0,1 ← 2b, heads 2,3 ← 2b+1
    assert mlra.latent_of_head(4, 4, 3).tolist() == [[0, 0, 0], [1, 1, 1], [2, 2, 2], [3, 3, 3]]
    assert mlra.latent_of_head(4, 2, 4).tolist() == [[0, 0, 1, 1], [2, 2, 3, 3]]


# ----------------------------------------------------------------------------- accounting
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", list(SPECS))
def test_cache_bytes_match_spec(name, dtype):
    spec = SPECS[name]
    fam = layer_module(spec)
    Bc, Tc = 2, 7
    cache = fam.allocate_cache(spec, Bc, Tc, dtype)
    comp = cache_components(spec)
    tensors = cache.tensors()
    assert set(tensors) == set(comp)
    for key, t in tensors.items():
        assert t.dtype == dtype and t.shape[:2] == (Bc, Tc)
        assert t.numel() == comp[key] * Bc * Tc, key
        assert torch.isnan(t).all()  # garbage until written
    measured = sum(t.numel() * t.element_size() for t in tensors.values())
    assert measured == cache_elements(spec) * dtype_bytes(dtype) * Bc * Tc
    assert cache.lengths.dtype == torch.int32 and (cache.lengths == 0).all()


@pytest.mark.parametrize("name", [n for n, s in SPECS.items() if s.family != "lrkv"])
def test_kv_param_count_matches_spec(name):
    spec = SPECS[name]
    w = layer_module(spec).init_weights(spec)
    if spec.family in dense.DENSE_FAMILIES:
        kv = (w.w_k, w.w_v)
    else:
        kv = (w.w_kv_a, w.w_uk, w.w_uv)
    assert sum(t.numel() for t in kv) == kv_param_count(spec)


@pytest.mark.parametrize("name", list(SPECS))
def test_weights_to_dtype_and_seed(name):
    spec = SPECS[name]
    fam = layer_module(spec)
    w = fam.init_weights(spec, seed=1)
    w32 = w.to(torch.float32)
    assert w32.dtype == torch.float32 and w32.spec == spec and w.dtype == torch.float64
    close(fam.init_weights(spec, seed=1).w_q, w.w_q, atol=0)  # seeded: reproducible
    assert not torch.equal(fam.init_weights(spec, seed=2).w_q, w.w_q)


# ----------------------------------------------------------------------------- registry, spec
def test_registry_covers_every_family():
    names = ("init_weights", "layer_forward", "allocate_cache", "prefill", "layer_step", "decode_attention")
    assert set(LAYER_FAMILIES) == set(FAMILIES)
    for fam in LAYER_FAMILIES.values():
        assert all(callable(getattr(fam, n)) for n in names)
    assert layer_module(SPECS["gqa-rope"]).module is dense
    assert layer_module("lrkv").init_weights is init_lrkv_weights
    with pytest.raises(ValueError, match="unknown family 'nope'"):
        layer_module("nope")


def test_mlra_spec_rejects_heads_not_divisible_by_groups():
    with pytest.raises(ValueError, match=r"n_heads \(3\) must be divisible"):
        AttentionSpec.mlra(3, 4, latent_dim=4, n_latent_heads=4, n_branches=2, rope_dim=2)
    AttentionSpec.mlra(3, 4, latent_dim=4, n_latent_heads=4, n_branches=4, rope_dim=2)  # g = 1: any H


def test_init_and_weights_reject_wrong_family_or_shape():
    with pytest.raises(ValueError, match="family"):
        dense.init_weights(SPECS["mla-deepseek"])
    with pytest.raises(ValueError, match="mla spec"):
        mla.init_weights(SPECS["mha"])
    with pytest.raises(ValueError, match="mlra spec"):
        mlra.allocate_cache(SPECS["mha"], 1, 2)
    w = dense.init_weights(SPECS["gqa-rope"])
    with pytest.raises(ValueError, match=r"w_k must have shape \[10, 2, 4\]"):
        dataclasses.replace(w, w_k=w.w_k[:, :1])
    w = mla.init_weights(SPECS["mla-simplified"])
    with pytest.raises(ValueError, match="kv_gain must be None"):
        dataclasses.replace(w, kv_gain=torch.ones(10, dtype=torch.float64))


# ----------------------------------------------------------------------------- bad inputs
def _dense_args():
    spec = SPECS["gqa-rope"]
    lengths = torch.tensor([1, 3], dtype=torch.int32)
    k = randn(2, 4, 2, 4, seed=40)
    k[0, 1:] = NAN
    return dict(q=randn(2, 6, 4, seed=41), k=k, v=k.clone(), lengths=lengths), spec.scale


def _latent_args(name):
    spec = SPECS[name]
    mod = mla if spec.family == "mla" else mlra
    w = mod.init_weights(spec)
    lengths = torch.tensor([1, 4], dtype=torch.int32)
    q, latent, k_rope = _latent_cache(spec, lengths, 4, seed=42)
    return dict(q=q, latent=latent, k_rope=k_rope, w_uk=w.w_uk, w_uv=w.w_uv, lengths=lengths), spec.scale


def _nan_q(a):
    a["q"] = a["q"].clone()
    a["q"][0, 0, 0] = NAN


def _nan_valid(key):
    def f(a):
        a[key] = a[key].clone()
        a[key][1, 0] = NAN  # slot 0 is inside sequence 1's length
    return f


COMMON_BAD = [
    ("q-2d", lambda a: a.update(q=a["q"][0]), ValueError, "q must be"),
    ("q-nan", _nan_q, ValueError, "q contains NaN"),
    ("q-f32", lambda a: a.update(q=a["q"].float()), TypeError, "has dtype"),
    ("lengths-past-tmax", lambda a: a.update(lengths=torch.tensor([1, 99], dtype=torch.int32)), ValueError,
     r"lengths must lie in \[0, T_max=4\]"),
    ("lengths-negative", lambda a: a.update(lengths=torch.tensor([-1, 2], dtype=torch.int32)), ValueError,
     "lengths must lie"),
    ("lengths-float", lambda a: a.update(lengths=a["lengths"].double()), TypeError, "lengths must be int32"),
    ("lengths-shape", lambda a: a.update(lengths=a["lengths"][:1]), ValueError, "lengths must have shape"),
    ("q-not-tensor", lambda a: a.update(q=a["q"].tolist()), TypeError, "q must be a torch.Tensor"),
]
DENSE_BAD = COMMON_BAD + [
    ("k-f32", lambda a: a.update(k=a["k"].float()), TypeError, "k has dtype"),
    ("v-shape", lambda a: a.update(v=a["v"][..., :3]), ValueError, "v must have shape"),
    ("kv-heads-not-dividing", lambda a: a.update(q=torch.randn(2, 5, 4, dtype=torch.float64)), ValueError,
     "must divide H"),
    ("k-nan-inside-length", _nan_valid("k"), ValueError, "inside the valid length"),
]
LATENT_BAD = COMMON_BAD + [
    ("latent-f32", lambda a: a.update(latent=a["latent"].float()), TypeError, "latent has dtype"),
    ("q-width", lambda a: a.update(q=a["q"][..., :-1]), ValueError, "q must have shape"),
    ("k_rope-missing", lambda a: a.update(k_rope=None), ValueError, "q must have shape"),
    ("w_uv-shape", lambda a: a.update(w_uv=a["w_uv"][..., :-1]), ValueError, "w_uv must have shape"),
    ("w_uk-nan", _nan_valid("w_uk"), ValueError, "w_uk contains NaN"),
    ("latent-nan-inside-length", _nan_valid("latent"), ValueError, "inside the valid length"),
]


@pytest.mark.parametrize("bad", DENSE_BAD, ids=lambda b: b[0])
def test_dense_kernel_rejects_bad_inputs(bad):
    _, mutate, exc, match = bad
    args, scale = _dense_args()
    dense.decode_attention(**args, scale=scale)  # the unmutated call is valid
    mutate(args)
    with pytest.raises(exc, match=match):
        dense.decode_attention(**args, scale=scale)


@pytest.mark.parametrize("bad", LATENT_BAD, ids=lambda b: b[0])
@pytest.mark.parametrize("name", ["mla-deepseek", "mlra-2"])
def test_latent_kernels_reject_bad_inputs(name, bad):
    _, mutate, exc, match = bad
    mod = mla if SPECS[name].family == "mla" else mlra
    for kernel in (mod.naive_decode_attention, mod.absorbed_decode_attention):
        args, scale = _latent_args(name)
        kernel(**args, scale=scale)
        mutate(args)
        with pytest.raises(exc, match=match):
            kernel(**args, scale=scale)


@pytest.mark.parametrize("kernel", [dense.decode_attention, mla.absorbed_decode_attention])
def test_kernels_reject_bad_scale(kernel):
    args, scale = _dense_args() if kernel is dense.decode_attention else _latent_args("mla-deepseek")
    for bad in (0.0, -1.0, "0.5", True):
        with pytest.raises(ValueError, match="scale must be a positive float"):
            kernel(**args, scale=bad)


def test_mlra_kernel_rejects_branches_not_dividing_latent_heads():
    args, scale = _latent_args("mlra-2")
    args["w_uk"] = torch.cat([args["w_uk"]] * 3 + [args["w_uk"][:1]])[:3]  # n_b = 3, L = 4
    args["w_uv"] = args["w_uk"].clone()
    with pytest.raises(ValueError, match="must divide L"):
        mlra.naive_decode_attention(**args, scale=scale)


@pytest.mark.parametrize("name", ["gqa-rope", "mla-deepseek", "mlra-2"])
def test_layer_level_rejects_bad_inputs(name):
    spec = SPECS[name]
    fam = layer_module(spec)
    w = fam.init_weights(spec)
    x = randn(2, 3, spec.d_model, seed=50)
    with pytest.raises(ValueError, match="x must be"):
        fam.layer_forward(w, x[0])
    with pytest.raises(ValueError, match="x must be"):
        fam.layer_forward(w, x[..., :-1])
    with pytest.raises(TypeError, match="x has dtype torch.float32"):
        fam.layer_forward(w, x.float())
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, T=3\]"):
        fam.layer_forward(w, x, torch.tensor([1, 4], dtype=torch.int32))
    with pytest.raises(ValueError, match=r"t_max \(2\) must be >= the prompt length \(3\)"):
        fam.prefill(w, x, t_max=2)
    _, cache = fam.prefill(w, x, torch.tensor([1, 3], dtype=torch.int32), t_max=4)
    x_t = randn(2, spec.d_model, seed=51)
    with pytest.raises(ValueError, match="x_t must be"):
        fam.layer_step(w, x_t[:, :-1], cache.clone(), cache.lengths.clone())
    with pytest.raises(ValueError, match=r"x_t must have shape \[2,"):
        fam.layer_step(w, x_t[:1], cache.clone(), cache.lengths.clone())
    with pytest.raises(TypeError, match="x_t has dtype"):
        fam.layer_step(w, x_t.float(), cache.clone(), cache.lengths.clone())
    with pytest.raises(ValueError, match="x_t contains NaN"):
        fam.layer_step(w, torch.full_like(x_t, NAN), cache.clone(), cache.lengths.clone())
    with pytest.raises(ValueError, match="positions must equal the cache lengths"):
        fam.layer_step(w, x_t, cache.clone(), cache.lengths + 1)
    with pytest.raises(TypeError, match="positions must be int32 or int64"):
        fam.layer_step(w, x_t, cache.clone(), cache.lengths.double())
    y, cache = fam.layer_step(w, x_t, cache, cache.lengths.clone())  # lengths [2, 4]: sequence 1 is full
    assert y.shape == (2, spec.d_model)
    with pytest.raises(ValueError, match="cache is full"):
        fam.layer_step(w, x_t, cache, cache.lengths.clone())
    with pytest.raises(ValueError, match="batch and t_max must be >= 1"):
        fam.allocate_cache(spec, 0, 4)


# ----------------------------------------------------------------------------- positions
@pytest.mark.parametrize("name", ["gqa-rope", "mqa-rope-qkn", "mla-deepseek", "mlra-2"])
def test_rope_logits_depend_on_relative_position_only(name):
    """q at position i against k at j: the rotary part of the logit depends on i − j alone, which
    fails if the cached key (dense k, or the decoupled k_pe) were left unrotated or rotated twice."""
    spec = SPECS[name]
    w = layer_module(spec).init_weights(spec, seed=60)
    project = layer_module(spec).module.project_token
    xq, xk = randn(spec.d_model, seed=61), randn(spec.d_model, seed=62)

    def logit(i: int, j: int) -> torch.Tensor:
        q = project(w, xq, torch.tensor(i))["q"]
        e = project(w, xk, torch.tensor(j))
        if spec.family in dense.DENSE_FAMILIES:
            return torch.einsum("gd,d->g", q[: spec.group_size], e["k"][0])  # heads reading KV head 0
        return q[:, spec.head_dim:] @ e["k_rope"]  # [H]  q_pe · k_pe

    close(logit(7, 3), logit(12, 8))
    close(logit(3, 3), logit(0, 0))
    assert not torch.allclose(logit(7, 3), logit(7, 4))
