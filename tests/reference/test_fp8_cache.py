"""FP8 LRKV caches in the float64 references (DESIGN §4, "FP8 caches"): the oracle on an fp8
cache IS the oracle on its exact float64 dequantization (decode, materialized, paged,
extend); every malformed fp8 call is refused by name; garbage NaN patterns are ignored; the
dequantize-then-attend path at bfloat16 stays near the oracle; the quantization cost orders
the formats; the reference append quantizes (static and dynamic scales) and allocation
builds fp8 caches."""

from __future__ import annotations

import math

import pytest
import torch

from lrkv.reference import lrkv as L
from lrkv.reference.cache import allocate_cache
from lrkv.reference.extend import extend_attention, materialized_extend_attention
from lrkv.reference.fp8 import (
    DYNAMIC_GRANULARITIES, E4M3, E5M2, GRANULARITIES, PARTS, PER_HEAD, PER_TENSOR, PER_TOKEN, PER_TOKEN_HEAD,
    dynamic_scale, fp8_format, quantize,
)
from lrkv.reference.fp8_cache import CacheScales, quantize_cache
from lrkv.reference.paged import (
    materialized_paged_decode_attention, paged_decode_attention, scatter_pages, scatter_scales,
)
from lrkv.reference.rope import ExactRope
from lrkv.spec import AttentionSpec

from ..test_helpers.inputs import ragged_queries, random_factored_inputs

FMTS = [E4M3, E5M2]
FMT_IDS = {E4M3: "e4m3fn", E5M2: "e5m2"}
SCALE = 8**-0.5


def bits(t):
    return t.view({1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def fp8_inputs(fmt, granularity, *, B=3, T=9, lengths=(9, 4, 0), key_scale=False, seed=0):
    """Float64 kernel inputs with the cache quantized (NaN patterns and NaN scales past each length)."""
    inp = random_factored_inputs(B=B, T=T, H=3, d_h=8, r=3, lengths=list(lengths), key_scale=key_scale, seed=seed)
    stored, scales = quantize_cache({p: inp[p] for p in PARTS}, inp["lengths"], fmt, granularity)
    return inp, {**inp, **stored}, scales


def args_of(d):
    return [d[k] for k in ("q", "shared_k", "shared_v", "latent_k", "latent_v", "basis_k", "basis_v", "lengths")]


def dequantized(d, scales, dtype=torch.float64):
    """The parts as float(stored) × scale, written out here (not with the module's helpers):
    per_head scales [H] multiply the head axis, the others the leading axes."""
    out = dict(d)
    for p in PARTS:
        x, s = d[p].to(torch.float64), scales.of(p).to(torch.float64)
        if scales.granularity_of(p) == PER_HEAD:
            s = s[:, None]
        else:
            s = s.reshape(*s.shape, *[1] * (x.dim() - s.dim()))
        out[p] = (x * s).to(dtype)
    return out


# ----------------------------------------------------------------------------- the oracle
@pytest.mark.equivalence
@pytest.mark.parametrize("fmt", FMTS, ids=FMT_IDS.get)
@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("rope, key_scale", [(None, False), (ExactRope(), True)], ids=["none", "exact-ks"])
def test_oracle_on_fp8_is_the_oracle_on_the_exact_dequantization(fmt, granularity, rope, key_scale):
    _, q8, scales = fp8_inputs(fmt, granularity, key_scale=key_scale)
    deq = dequantized(q8, scales)
    kw = dict(scale=SCALE, key_scale=q8.get("key_scale"), rope=rope)
    for fn in (L.decode_attention, L.materialized_decode_attention):
        out8, lse8 = fn(*args_of(q8), cache_scales=scales, **kw)
        out, lse = fn(*args_of(deq), **kw)
        assert out8.dtype == torch.float64 and torch.equal(bits(out8), bits(out)) and torch.equal(bits(lse8), bits(lse))
        assert torch.isfinite(out8).all()  # NaN patterns past the lengths never leak


def page_fp8(d: dict, scales: CacheScales, page: int, seed: int = 3):
    """Scatter the fp8 parts and any per-token scales into shuffled pages (one table for all)."""
    B, T = d["shared_k"].shape[:2]
    max_pages = -(-T // page)
    n_pages = B * max_pages + 2
    table = torch.randperm(n_pages, generator=torch.Generator().manual_seed(seed))[: B * max_pages]
    table = table.reshape(B, max_pages).to(torch.int32)
    out = dict(d)
    for p in PARTS:
        pool = torch.full((n_pages, page, *d[p].shape[2:]), float("nan"), dtype=d[p].dtype)
        out[p] = scatter_pages(d[p], table, pool)
    return out, table, scatter_scales(scales, table, n_pages, page)


@pytest.mark.equivalence
@pytest.mark.parametrize("fmt", FMTS, ids=FMT_IDS.get)
@pytest.mark.parametrize("granularity", [PER_HEAD, PER_TOKEN_HEAD])
@pytest.mark.parametrize("page", [1, 4])
def test_paged_and_extend_oracles_on_fp8(fmt, granularity, page):
    _, q8, scales = fp8_inputs(fmt, granularity, key_scale=True)
    contiguous, _ = L.decode_attention(*args_of(q8), scale=SCALE, key_scale=q8["key_scale"], cache_scales=scales)
    paged, table, pscales = page_fp8(q8, scales, page)
    pk = dict(scale=SCALE, key_scale=scatter_pages(q8["key_scale"], table, torch.full(
        (paged["shared_k"].shape[0], page, 3), float("nan"), dtype=torch.float64)))
    deq = dequantized(paged, pscales)
    for fn in (paged_decode_attention, materialized_paged_decode_attention):
        out8, _ = fn(*args_of(paged), table, cache_scales=pscales, **pk)
        out, _ = fn(*args_of(deq), table, **pk)
        assert torch.equal(bits(out8), bits(out))
    assert torch.equal(bits(paged_decode_attention(*args_of(paged), table, cache_scales=pscales, **pk)[0]),
                       bits(contiguous))
    # extend: ragged chunks over the same fp8 cache, contiguous and paged
    q, cu = ragged_queries(q8, [3, 2, 0])
    ext = args_of(q8)[1:]
    for fn in (extend_attention, materialized_extend_attention):
        got, _ = fn(q, cu, *ext, scale=SCALE, key_scale=q8["key_scale"], cache_scales=scales)
        want, _ = fn(q, cu, *args_of(dequantized(q8, scales))[1:], scale=SCALE, key_scale=q8["key_scale"])
        assert torch.equal(bits(got), bits(want))
        got_p, _ = fn(q, cu, *args_of(paged)[1:], page_table=table, cache_scales=pscales, **pk)
        assert torch.equal(bits(got_p), bits(got))


def test_garbage_nan_patterns_are_ignored():
    _, q8, scales = fp8_inputs(E4M3, PER_TOKEN_HEAD)
    assert (q8["latent_k"][1, 4:].view(torch.uint8) == 0x7F).all()  # past length 4: the NaN pattern
    assert scales.latent_k[1, 4:].isnan().all()  # and NaN dynamic scales
    zeroed = dict(q8)
    for p in PARTS:  # garbage replaced by zero bits and unit scales: the same output
        m = torch.arange(9)[None, :] < q8["lengths"][:, None]
        zeroed[p] = torch.where(m.reshape(3, 9, *[1] * (q8[p].dim() - 2)), q8[p], torch.zeros_like(q8[p]))
    ones = CacheScales(E4M3, PER_TOKEN_HEAD, **{p: torch.nan_to_num(scales.of(p), nan=1.0) for p in PARTS})
    a, _ = L.decode_attention(*args_of(q8), scale=SCALE, cache_scales=scales)
    b, _ = L.decode_attention(*args_of(zeroed), scale=SCALE, cache_scales=ones)
    assert torch.isfinite(a).all() and torch.equal(bits(a), bits(b))


# ----------------------------------------------------------------------------- the τ path, the cost
@pytest.mark.parametrize("fmt", FMTS, ids=FMT_IDS.get)
def test_dequantize_then_attend_at_bfloat16_is_near_the_oracle(fmt):
    _, q8, scales = fp8_inputs(fmt, PER_TOKEN_HEAD, lengths=(9, 9, 5))
    oracle, _ = L.decode_attention(*args_of(q8), scale=SCALE, cache_scales=scales)
    bf = {k: (v.to(torch.bfloat16) if k in ("q", "basis_k", "basis_v") else v) for k, v in q8.items()}
    out, lse = L.decode_attention(*args_of(bf), scale=SCALE, cache_scales=scales)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    # it is exactly the existing bf16 path on the cache dequantized (rounded once) to bf16 ...
    same, _ = L.decode_attention(*args_of(dequantized(bf, scales, torch.bfloat16)), scale=SCALE)
    assert torch.equal(bits(out), bits(same))
    # ... and within bf16 arithmetic of the fp8 oracle: a few bf16 ulps of the output's scale
    err = (out.double() - oracle).abs().max()
    assert 0 < err <= 8 * 2.0**-8 * oracle.abs().max()


# ----------------------------------------------------------------------------- bad input
def _call(d, scales, **kw):
    return L.decode_attention(*args_of(d), scale=SCALE, cache_scales=scales, **kw)


def _with(scales, **over):
    return CacheScales(**{"format": scales.format, "granularity": scales.granularity, **scales.tensors(), **over})


@pytest.mark.parametrize("make, err, words", [
    (lambda d, s: (d, None), TypeError, r"shared_k has dtype torch.float8_e4m3fn: an fp8 cache needs cache_scales"),
    (lambda d, s: ({**d, **{p: d[p].to(torch.float64) for p in PARTS}}, s), TypeError,
     r"cache_scales was given but shared_k has dtype torch.float64: scales apply only to an fp8 cache"),
    (lambda d, s: ({**d, "latent_v": d["latent_v"].to(torch.float32).to(E5M2)}, s), TypeError,
     r"latent_v has dtype torch.float8_e5m2 but cache_scales.format is torch.float8_e4m3fn: the four cached parts "
     r"share one fp8 format"),
    (lambda d, s: (d, {"shared_k": s.shared_k}), TypeError, r"cache_scales must be a CacheScales or None, got dict"),
    (lambda d, s: (d, _with(s, format=torch.bfloat16)), TypeError, r"cache_scales.format must be one of"),
    (lambda d, s: (d, _with(s, granularity="per_channel")), ValueError, r"cache_scales.granularity must be one of"),
    (lambda d, s: (d, _with(s, latent_k=s.latent_k.double())), TypeError,
     r"cache_scales.latent_k must be float32, got torch.float64"),
    (lambda d, s: (d, _with(s, shared_v=s.shared_v[:, :4])), ValueError,
     r"cache_scales.shared_v \(per_token_head\) must have shape \[3, 9\], got \[3, 4\]"),
    (lambda d, s: (d, _with(s, latent_v=s.latent_v[..., 0])), ValueError,
     r"cache_scales.latent_v \(per_token_head\) must have shape \[3, 9, 3\]"),
    (lambda d, s: (d, _with(s, latent_k=s.latent_k.index_put((torch.tensor(0), torch.tensor(2)),
                                                              torch.tensor(float("nan"))))),
     ValueError, r"cache_scales.latent_k contains NaN or Inf inside the valid length"),
    (lambda d, s: (d, _with(s, shared_k=s.shared_k.index_put((torch.tensor(1), torch.tensor(3)), torch.tensor(0.0)))),
     ValueError, r"cache_scales.shared_k must be > 0"),
    (lambda d, s: (d, _with(s, shared_v=-s.shared_v)), ValueError, r"cache_scales.shared_v must be > 0"),
    (lambda d, s: (d, _with(s, latent_v=s.latent_v.index_put((torch.tensor(0), torch.tensor(2)),
                                                              torch.tensor(3e38)))), ValueError,
     r"cache_scales.latent_v must be <= 7.596e\+35 \(float32 max / 448.*got 3e\+38: the dequantized cache would overflow"),
    (lambda d, s: ({**d, "latent_k": d["latent_k"].view(torch.uint8).index_fill(1, torch.tensor([2]), 0x7F)
                    .view(E4M3)}, s), ValueError, r"latent_k contains NaN or Inf inside the valid length"),
    (lambda d, s: ({**d, "q": d["q"].to(torch.float32).to(E4M3)}, s), TypeError, r"q has dtype torch.float8_e4m3fn"),
    (lambda d, s: ({**d, "basis_k": d["basis_k"].to(torch.float32).to(E4M3)}, s), TypeError,
     r"basis_k has dtype torch.float8_e4m3fn but q has torch.float64"),
], ids=["no-scales", "scales-for-float", "mixed-formats", "not-CacheScales", "bad-format", "bad-granularity",
        "scale-float64", "shared-scale-shape", "latent-scale-shape", "nan-scale", "zero-scale", "negative-scale",
        "overflowing-scale",
        "nan-pattern-inside", "fp8-q", "fp8-basis"])
def test_bad_fp8_input_is_refused_naming_the_field(make, err, words):
    _, q8, scales = fp8_inputs(E4M3, PER_TOKEN_HEAD)
    d, s = make(q8, scales)
    with pytest.raises(err, match=words):
        _call(d, s)


@pytest.mark.parametrize("granularity, part, value", [
    (PER_TENSOR, "latent_v", float("inf")), (PER_HEAD, "latent_k", float("nan")), (PER_TENSOR, "shared_k", 0.0),
])
def test_a_static_scale_is_read_everywhere_so_it_is_checked_everywhere(granularity, part, value):
    _, q8, scales = fp8_inputs(E5M2, granularity, lengths=(0, 0, 0))  # nothing valid: static scales still read
    s = scales.of(part).clone()
    s.reshape(-1)[0] = value
    with pytest.raises(ValueError, match=rf"cache_scales.{part} (contains NaN or Inf|must be > 0)"):
        _call(q8, _with(scales, **{part: s}))


def test_a_dynamic_scale_past_the_length_may_be_anything():
    _, q8, scales = fp8_inputs(E4M3, PER_TOKEN)
    s = scales.shared_k.clone()
    s[1, 4:] = -7.0  # past length 4: never read
    out, _ = _call(q8, _with(scales, shared_k=s))
    assert torch.isfinite(out).all()


def test_paged_scales_are_checked_against_the_page_layout():
    _, q8, scales = fp8_inputs(E4M3, PER_TOKEN, key_scale=False)
    paged, table, pscales = page_fp8(q8, scales, 4)
    with pytest.raises(ValueError, match=r"cache_scales.shared_k \(per_token\) must have shape \[11, 4\], got "
                                         r"\[3, 9\]"):
        paged_decode_attention(*args_of(paged), table, scale=SCALE, cache_scales=scales)
    q, cu = ragged_queries(q8, [1, 1, 0])
    with pytest.raises(ValueError, match=r"cache_scales.latent_k \(per_token\) must have shape \[3, 9\]"):
        extend_attention(q, cu, *args_of(q8)[1:], scale=SCALE, cache_scales=_with(scales, latent_k=pscales.latent_k))


# ----------------------------------------------------------------------------- append, allocation
SPEC = AttentionSpec.lrkv(3, 8, 3, qk_norm=True)


@pytest.mark.parametrize("fmt", FMTS, ids=FMT_IDS.get)
@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_allocate_fp8_cache(fmt, granularity):
    c = allocate_cache(SPEC, 2, 5, torch.bfloat16, fp8=fmt, granularity=granularity)
    assert all(c.tensors()[p].dtype == fmt and (c.tensors()[p].view(torch.uint8) == 0x7F).all() for p in PARTS)
    assert c.key_scale.dtype == torch.bfloat16 and c.key_scale.isnan().all()
    assert set(c.tensors()) == {*PARTS, "key_scale"}  # scales are bookkeeping, not slot payload
    want = {PER_TENSOR: ((), ()), PER_HEAD: ((), (3,)), PER_TOKEN: ((2, 5), (2, 5)),
            PER_TOKEN_HEAD: ((2, 5), (2, 5, 3))}[granularity]
    assert [tuple(c.scales.of(p).shape) for p in PARTS] == [want[0], want[0], want[1], want[1]]
    assert all(c.scales.of(p).dtype == torch.float32 for p in PARTS)
    dynamic = granularity in DYNAMIC_GRANULARITIES
    assert all(c.scales.of(p).isnan().all() if dynamic else (c.scales.of(p) == 1).all() for p in PARTS)
    scale_bytes = 4 * sum(math.prod(s) for s in (want[0], want[0], want[1], want[1]))
    assert c.nbytes() == 2 * 5 * (2 * 8 + 2 * 3 * 3) + 2 * 5 * 3 * 2 + scale_bytes
    clone = c.clone()
    assert clone.scales is not c.scales and clone.scales.latent_k.data_ptr() != c.scales.latent_k.data_ptr()


@pytest.mark.parametrize("kw, err, words", [
    (dict(fp8=torch.float16), TypeError, "fp8 format must be one of"),
    (dict(fp8=E4M3, fill=0.0), ValueError, "fill must stay NaN"),
    (dict(fp8=E4M3, granularity="per_block"), ValueError, "granularity must be one of"),
    (dict(fp8=E4M3, static_scale=0.0), ValueError, "static_scale must be finite and > 0"),
])
def test_allocate_refuses_bad_fp8_options(kw, err, words):
    with pytest.raises(err, match=words):
        allocate_cache(SPEC, 2, 5, torch.float32, **kw)
    with pytest.raises(TypeError, match="pass fp8=torch.float8_e4m3fn"):
        allocate_cache(SPEC, 2, 5, E4M3)


def _entries(B=2, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: (torch.randn(*s, generator=g, dtype=torch.float64) * 3).to(dtype)  # noqa: E731
    return {"shared_k": r(B, 8), "shared_v": r(B, 8), "latent_k": r(B, 3, 3), "latent_v": r(B, 3, 3),
            "key_scale": r(B, 3).abs()}


@pytest.mark.parametrize("fmt", FMTS, ids=FMT_IDS.get)
def test_append_with_static_scales_quantizes_with_them(fmt):
    c = allocate_cache(SPEC, 2, 4, torch.float32, fp8=fmt, granularity=PER_HEAD)
    c.scales.latent_k.copy_(torch.tensor([0.5, 0.01, 2.0]))
    c.scales.shared_v.fill_(0.03)
    e = _entries()
    L.append(c, e, c.lengths.clone())
    assert c.lengths.tolist() == [1, 1]
    assert torch.equal(bits(c.latent_k[:, 0]), bits(quantize(e["latent_k"], fmt, c.scales.latent_k, PER_HEAD)))
    assert torch.equal(bits(c.shared_v[:, 0]), bits(quantize(e["shared_v"], fmt, c.scales.shared_v)))
    assert torch.equal(bits(c.key_scale[:, 0]), bits(e["key_scale"]))  # key_scale as given
    assert (c.latent_k[:, 1:].view(torch.uint8) == 0x7F).all()  # the rest stays garbage
    # 0.01 is too small a scale for head 1's entries: they saturate instead of becoming NaN
    assert (c.latent_k[:, 0, 1].to(torch.float32).abs() <= fp8_format(fmt).max_finite).all()


@pytest.mark.parametrize("fmt", FMTS, ids=FMT_IDS.get)
@pytest.mark.parametrize("granularity", DYNAMIC_GRANULARITIES)
def test_append_with_dynamic_scales_writes_them(fmt, granularity):
    c = allocate_cache(SPEC, 2, 4, torch.bfloat16, fp8=fmt, granularity=granularity)
    for step in range(2):
        e = _entries(seed=step, dtype=torch.bfloat16)
        L.append(c, e, c.lengths.clone())
        for p in PARTS:
            s = c.scales.of(p)[:, step]
            g = c.scales.granularity_of(p)
            assert torch.equal(s, dynamic_scale(e[p], fmt, granularity, part=p))
            stored = getattr(c, p)[:, step]
            assert torch.equal(bits(stored), bits(quantize(e[p], fmt, s, g)))
            feat = tuple(range(1, stored.dim())) if g == PER_TOKEN else (stored.dim() - 1,)
            assert (stored.to(torch.float32).abs().amax(dim=feat) == fp8_format(fmt).max_finite).all()
    assert c.scales.latent_k[:, 2:].isnan().all()  # slots not yet written keep NaN scales


def test_append_refuses_fp8_or_non_finite_entries():
    c = allocate_cache(SPEC, 2, 4, torch.float32, fp8=E4M3, granularity=PER_TOKEN)
    e = _entries()
    before = bits(c.shared_k).clone()
    with pytest.raises(TypeError, match=r"entries\['latent_v'\] has dtype torch.float8_e4m3fn: an fp8 cache's "
                                        r"entries come at compute precision"):
        L.append(c, {**e, "latent_v": e["latent_v"].to(E4M3)}, c.lengths.clone())
    with pytest.raises(ValueError, match=r"entries\['shared_k'\] contains NaN or Inf"):
        L.append(c, {**e, "shared_k": e["shared_k"] * float("inf")}, c.lengths.clone())
    with pytest.raises(TypeError, match=r"entries\['key_scale'\] has dtype torch.float64 but the cache holds "
                                        r"torch.float32"):
        L.append(c, {**e, "key_scale": e["key_scale"].double()}, c.lengths.clone())
    assert torch.equal(bits(c.shared_k), before) and c.lengths.tolist() == [0, 0]


@pytest.mark.parametrize("granularity", [PER_TENSOR, PER_TOKEN_HEAD])
def test_layer_step_runs_on_an_fp8_cache(granularity):
    from lrkv.reference.weights import init_lrkv_weights

    spec = AttentionSpec.lrkv(3, 8, 3, d_model=12, qk_norm=True, rope="exact")
    w = init_lrkv_weights(spec, seed=0)
    cache = allocate_cache(spec, 2, 4, torch.float64, fp8=E4M3, granularity=granularity)
    if granularity == PER_TENSOR:
        for p in PARTS:
            cache.scales.of(p).fill_(0.02)
    x = torch.randn(2, 3, 12, generator=torch.Generator().manual_seed(1), dtype=torch.float64)
    for t in range(3):
        y, cache = L.layer_step(w, x[:, t], cache, cache.lengths.clone())
        assert torch.isfinite(y).all()
    # the last step's output is the float64 decode over the cache's exact dequantization
    deq = dequantized({p: getattr(cache, p) for p in PARTS}, cache.scales)
    q = L.project_token(w, x[:, 2], torch.tensor([2, 2]))["q"]
    out, _ = L.decode_attention(q, *(deq[p] for p in PARTS), w.basis_k, w.basis_v, cache.lengths, scale=8**-0.5,
                                key_scale=cache.key_scale, rope=ExactRope())
    assert torch.equal(bits(torch.einsum("bhd,hde->be", out, w.w_o)), bits(y))
