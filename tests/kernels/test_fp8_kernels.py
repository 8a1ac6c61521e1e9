"""The Triton kernels on fp8 LRKV caches (DESIGN §4.1): decode, paged decode (shuffled pages,
a shared prefix) and extend read each granularity of both formats against the reference's
fp8 paths — the dequantize-then-attend path at q's dtype and the float64 oracle on the
dequantized cache — and the test inputs are checked to be sensitive to the bugs that matter
(K/V scales swapped, shared/latent scales swapped, a per-head scale read from head 0). The
fp8 append is bit-exact against the reference quantizer (outlier tokens and channels, the
double-rounding tie, saturation), never writes a NaN pattern into a valid slot, and every
malformed fp8 call is refused before launch. Inputs and references are built on the CPU; the
kernels run natively on a GPU, else in the interpreter (conftest)."""

from __future__ import annotations

import pytest
import torch

from lrkv.kernels import append as kappend
from lrkv.kernels import decode as kdecode
from lrkv.kernels import extend as kextend
from lrkv.reference import lrkv as L
from lrkv.reference.cache import FactoredCache, allocate_cache
from lrkv.reference.extend import extend_attention as ref_extend
from lrkv.reference.fp8 import (
    DYNAMIC_GRANULARITIES, E4M3, E5M2, GRANULARITIES, PARTS, PER_HEAD, PER_TENSOR, PER_TOKEN, PER_TOKEN_HEAD,
    fp8_format, quantize,
)
from lrkv.reference.fp8_cache import CacheScales, quantize_cache
from lrkv.reference.paged import paged_decode_attention as ref_paged
from lrkv.spec import AttentionSpec

from ..test_helpers.device import in_place, on_kernel
from ..test_helpers.inputs import paginate, ragged_queries, random_factored_inputs

# inputs and references are built on the CPU; the kernels run on the kernel device (natively
# CUDA, else the interpreter on the CPU) through these wrappers
decode_attention = on_kernel(kdecode.decode_attention)
paged_decode_attention = on_kernel(kdecode.paged_decode_attention)
extend_attention = on_kernel(kextend.extend_attention)


def append(cache, entries, positions):
    return in_place(kappend.append, cache, entries, positions)


def paged_append(cache, entries, positions):
    return in_place(kappend.paged_append, cache, entries, positions)

pytestmark = pytest.mark.equivalence

FMTS = [E4M3, E5M2]
FMT_IDS = {E4M3: "e4m3fn", E5M2: "e5m2"}
SCALE = 16**-0.5
H, D, R = 3, 16, 5
# |kernel − reference| / max|oracle| allowed per q dtype: a few roundings of the dtype at the
# output's scale (the kernel accumulates in fp32; the reference at τ rounds every dequantized
# value to τ first), as the low-precision kernel tests allow.
TOL = {torch.float32: 2e-6, torch.float16: 4 * 2.0**-11, torch.bfloat16: 4 * 2.0**-8}
# distinct magnitudes per part, so that each part's scale differs from every other's
PART_GAIN = {"shared_k": 3.0, "shared_v": 0.25, "latent_k": 9.0, "latent_v": 0.04}


def fp8_case(fmt, granularity, *, lengths=(20, 7, 0), T=20, seed=1):
    """Float64 kernel inputs with the cache quantized (NaN patterns, NaN per-token scales past
    each length); the parts scaled apart and the latent heads too (head h × 1 + 3h)."""
    inp = random_factored_inputs(B=len(lengths), T=T, H=H, d_h=D, r=R, lengths=list(lengths), seed=seed)
    heads = (1.0 + 3.0 * torch.arange(H, dtype=torch.float64))[:, None]  # [H, 1]
    parts = {p: inp[p] * PART_GAIN[p] * (heads if p.startswith("latent") else 1.0) for p in PARTS}
    stored, scales = quantize_cache(parts, inp["lengths"], fmt, granularity)
    return {**inp, **stored}, scales


def args(d, dtype, oracle=False):
    """The call's arguments with q and the bases at `dtype` — or, `oracle`, those values in
    float64 (the float64 oracle runs on the τ-rounded inputs); the fp8 parts as stored."""
    def cast(k):
        if k not in ("q", "basis_k", "basis_v"):
            return d[k]
        return d[k].to(dtype).double() if oracle else d[k].to(dtype)
    return [cast(k) for k in ("q", *PARTS, "basis_k", "basis_v", "lengths")]


def mutated_scales(scales: CacheScales) -> dict[str, CacheScales]:
    """The scale bugs a kernel could ship with, where the granularity makes them expressible."""
    s = scales.tensors()
    out = {"kv_swapped": dict(s, shared_k=s["shared_v"], shared_v=s["shared_k"], latent_k=s["latent_v"],
                              latent_v=s["latent_k"])}
    if s["shared_k"].shape == s["latent_k"].shape:
        out["shared_latent_swapped"] = dict(s, shared_k=s["latent_k"], latent_k=s["shared_k"],
                                            shared_v=s["latent_v"], latent_v=s["shared_v"])
    if scales.granularity in (PER_HEAD, PER_TOKEN_HEAD):
        out["head0"] = dict(s, **{p: s[p][..., :1].expand_as(s[p]).contiguous() for p in ("latent_k", "latent_v")})
    return {k: CacheScales(scales.format, scales.granularity, **v) for k, v in out.items()}


def assert_close_to_refs(out, lse, ref_tau, ref64, dtype):
    """out/lse against the reference at q's dtype and the float64 oracle, within TOL."""
    o64, l64 = ref64
    scale = o64.abs().max().item()
    assert out.dtype == dtype and lse.dtype == torch.float32
    assert (out.double() - ref_tau[0].double()).abs().max().item() <= TOL[dtype] * scale
    assert (out.double() - o64).abs().max().item() <= TOL[dtype] * scale
    fin = torch.isfinite(l64)
    assert torch.equal(torch.isfinite(lse), fin) and (lse[fin].double() - l64[fin]).abs().max().item() <= 1e-5
    return scale


def assert_sensitive(ref_fn, scales, true_out, scale, dtype):
    """Each scale bug moves the float64 oracle by far more than the tolerance on these inputs."""
    for name, bad in mutated_scales(scales).items():
        wrong, _ = ref_fn(bad)
        assert (wrong - true_out).abs().max().item() > 10 * TOL[dtype] * scale, name


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("fmt", FMTS, ids=FMT_IDS.get)
def test_decode_reads_fp8(fmt, granularity, dtype):
    d, sc = fp8_case(fmt, granularity)
    out, lse = decode_attention(*args(d, dtype), scale=SCALE, cache_scales=sc, num_splits=2)
    ref_tau = L.decode_attention(*args(d, dtype), scale=SCALE, cache_scales=sc)
    ref64 = L.decode_attention(*args(d, dtype, oracle=True), scale=SCALE, cache_scales=sc)
    s = assert_close_to_refs(out, lse, ref_tau, ref64, dtype)
    assert torch.all(out[2] == 0) and torch.all(lse[2] == float("-inf"))
    assert_sensitive(lambda bad: L.decode_attention(*args(d, dtype, oracle=True), scale=SCALE, cache_scales=bad),
                     sc, ref64[0], s, dtype)


def page_scales(scales: CacheScales, B: int, page: int, share_prefix: int) -> CacheScales:
    """Per-token scales paged exactly as `paginate` pages the parts (same seed, same table)."""
    out = scales.tensors()
    if scales.dynamic:
        paged, _ = paginate({"lengths": torch.zeros(B, dtype=torch.int64), **out}, page, share_prefix=share_prefix)
        out = {p: paged[p] for p in PARTS}
    return CacheScales(scales.format, scales.granularity, **out)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("fmt", FMTS, ids=FMT_IDS.get)
def test_paged_decode_reads_fp8(fmt, granularity, dtype):
    # shuffled pages, sequence 1 reading sequence 0's first page (a shared prefix), pages of 4
    d, sc = fp8_case(fmt, granularity, lengths=(20, 13, 0))
    pd, table = paginate(d, 4, share_prefix=1)
    psc = page_scales(sc, 3, 4, 1)
    a = lambda oracle=False: [*args(pd, dtype, oracle), table]  # noqa: E731
    out, lse = paged_decode_attention(*a(), scale=SCALE, cache_scales=psc, num_splits=2)
    ref_tau = ref_paged(*a(), scale=SCALE, cache_scales=psc)
    ref64 = ref_paged(*a(True), scale=SCALE, cache_scales=psc)
    s = assert_close_to_refs(out, lse, ref_tau, ref64, dtype)
    assert_sensitive(lambda bad: ref_paged(*a(True), scale=SCALE, cache_scales=bad), psc, ref64[0], s, dtype)


@pytest.mark.parametrize("paged", [False, True], ids=["contiguous", "paged"])
@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("fmt", FMTS, ids=FMT_IDS.get)
def test_extend_reads_fp8(fmt, granularity, paged):
    dtype = torch.bfloat16
    d, sc = fp8_case(fmt, granularity, lengths=(20, 9, 3))
    q, cu = ragged_queries(d, [3, 2, 0])
    kw = dict(scale=SCALE, cache_scales=sc)
    if paged:
        d, table = paginate(d, 4, share_prefix=1)
        kw.update(cache_scales=page_scales(sc, 3, 4, 1), page_table=table)
    cache = args(d, dtype)[1:]
    out, lse = extend_attention(q.to(dtype), cu, *cache, **kw)
    ref_tau = ref_extend(q.to(dtype), cu, *cache, **kw)
    cache64 = args(d, dtype, oracle=True)[1:]
    ref64 = ref_extend(q.to(dtype).double(), cu, *cache64, **kw)
    s = assert_close_to_refs(out, lse, ref_tau, ref64, dtype)
    assert_sensitive(lambda bad: ref_extend(q.to(dtype).double(), cu, *cache64, **{**kw, "cache_scales": bad}),
                     kw["cache_scales"], ref64[0], s, dtype)


@pytest.mark.parametrize("kind,private", [("decode", "wide"), ("decode", "per_head"), ("paged", "wide"),
                                          ("extend", "wide")])
@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("fmt", FMTS, ids=FMT_IDS.get)
def test_16bit_products_read_fp8(fmt, granularity, private, kind):
    # dot='lp' (the GPU's default for a bf16/fp16 q): the fp8 tiles meet q in q's 16-bit
    # dtype. float16 is the one the interpreter multiplies; its normal range (6e-5) is where a
    # weight times an e5m2 scale would fall, so a scale on the weights shows here.
    dtype = torch.float16
    d, sc = fp8_case(fmt, granularity, lengths=(20, 13, 0))
    kw = dict(scale=SCALE, dot="lp", private=private)
    if kind == "extend":
        q, cu = ragged_queries(d, [3, 2, 0])
        cache, cache64 = args(d, dtype)[1:], args(d, dtype, oracle=True)[1:]
        out, lse = extend_attention(q.to(dtype), cu, *cache, cache_scales=sc, **kw)
        ref_tau = ref_extend(q.to(dtype), cu, *cache, scale=SCALE, cache_scales=sc)
        ref64 = ref_extend(q.to(dtype).double(), cu, *cache64, scale=SCALE, cache_scales=sc)
    elif kind == "paged":
        pd, table = paginate(d, 4, share_prefix=1)
        psc = page_scales(sc, 3, 4, 1)
        out, lse = paged_decode_attention(*args(pd, dtype), table, cache_scales=psc, num_splits=2, **kw)
        ref_tau = ref_paged(*args(pd, dtype), table, scale=SCALE, cache_scales=psc)
        ref64 = ref_paged(*args(pd, dtype, oracle=True), table, scale=SCALE, cache_scales=psc)
    else:
        out, lse = decode_attention(*args(d, dtype), cache_scales=sc, num_splits=2, **kw)
        ref_tau = L.decode_attention(*args(d, dtype), scale=SCALE, cache_scales=sc)
        ref64 = L.decode_attention(*args(d, dtype, oracle=True), scale=SCALE, cache_scales=sc)
    assert_close_to_refs(out, lse, ref_tau, ref64, dtype)


# ----------------------------------------------------------------------------- append
def outlier_entries(B, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    e = {"shared_k": torch.randn(B, D, generator=g), "shared_v": torch.randn(B, D, generator=g),
         "latent_k": torch.randn(B, H, R, generator=g), "latent_v": torch.randn(B, H, R, generator=g)}
    e["shared_k"][1] *= 1000  # an outlier token
    e["shared_v"][:, 3] *= 1000  # an outlier channel
    e["latent_k"][0, 2] *= 1000  # an outlier token-head
    e["latent_v"][:, :, 1] *= 1000  # an outlier latent channel
    return {k: v.to(dtype) for k, v in e.items()}


def assert_same_cache(a, b):
    for p in PARTS:
        assert torch.equal(a[p].view(torch.uint8), b[p].view(torch.uint8)), p
        sa, sb = a["scales"].of(p), b["scales"].of(p)
        assert torch.equal(sa.view(torch.int32), sb.view(torch.int32)), f"scale of {p}"


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
@pytest.mark.parametrize("granularity", GRANULARITIES)
@pytest.mark.parametrize("fmt", FMTS, ids=FMT_IDS.get)
def test_append_is_bit_exact(fmt, granularity, dtype):
    spec = AttentionSpec.lrkv(H, D, R)
    kw = dict(fp8=fmt, granularity=granularity, static_scale=0.37)
    ref, got = allocate_cache(spec, 4, 5, dtype, **kw), allocate_cache(spec, 4, 5, dtype, **kw)
    if granularity == PER_HEAD:  # distinct per-head static scales
        for c in (ref, got):
            c.scales.latent_k.copy_(torch.tensor([0.5, 3.0, 0.01]))
    for step in range(3):
        e = outlier_entries(4, dtype, seed=step)
        L.append(ref, e, ref.lengths.clone())
        append(got, e, got.lengths.clone())
    as_dict = lambda c: {**{p: getattr(c, p) for p in PARTS}, "scales": c.scales}  # noqa: E731
    assert_same_cache(as_dict(ref), as_dict(got))
    # valid slots never hold a NaN (or, e5m2, inf) pattern: saturation, not overflow
    special = 0x7F if fmt == E4M3 else 0x7C
    for p in PARTS:
        bits = getattr(got, p)[:, :3].view(torch.uint8)
        assert not ((bits & special) == special).any(), p
    assert got.lengths.tolist() == [3] * 4


@pytest.mark.parametrize("granularity", [PER_HEAD, PER_TOKEN_HEAD])
def test_paged_append_is_bit_exact(granularity):
    spec = AttentionSpec.lrkv(H, D, R)
    pages, page = 7, 2
    base = allocate_cache(spec, pages, page, torch.float32, fp8=E5M2, granularity=granularity, static_scale=2.0)
    table = torch.tensor([[5, 1], [0, 6], [3, 2]], dtype=torch.int32)  # shuffled
    mk = lambda: FactoredCache(**{p: getattr(base, p).clone() for p in PARTS}, page_table=table,  # noqa: E731
                               lengths=torch.zeros(3, dtype=torch.int32), scales=base.scales.clone())
    ref, got = mk(), mk()
    for step in range(3):
        e = outlier_entries(3, torch.float32, seed=10 + step)
        rows = table[torch.arange(3), ref.lengths.long() // page].long()
        ent = __import__("lrkv.reference.fp8_cache", fromlist=["x"]).quantize_append(
            ref.scales, e, rows, ref.lengths.long() % page)
        for p in PARTS:
            getattr(ref, p)[rows, ref.lengths.long() % page] = ent[p]
        ref.lengths += 1
        paged_append(got, e, got.lengths.clone())
    assert_same_cache({**ref.tensors(), "scales": ref.scales}, {**got.tensors(), "scales": got.scales})


@pytest.mark.parametrize("fmt", FMTS, ids=FMT_IDS.get)
def test_append_saturates_and_rounds_ties_exactly(fmt):
    # static scale 1: max finite stays, past it (the tie to the NaN / inf pattern included)
    # saturates; 16.442968 / 1.3154374 lies just above the e4m3 tie 12.5, which a float32
    # quotient would round onto (and then to even, the wrong way)
    m = fp8_format(fmt).max_finite
    top = 480.0 if fmt == E4M3 else 61440.0  # the midpoint between max finite and the next pattern
    vals = [m, top, m * 1.0001, 1e30, -top, -1e30, 2.0**-30, -0.0, 16.442968368530273, 0.0, 1.0625, -1.0625]
    spec = AttentionSpec.lrkv(1, len(vals), 1)
    ref = allocate_cache(spec, 1, 1, torch.float32, fp8=fmt, granularity=PER_TENSOR)
    got = allocate_cache(spec, 1, 1, torch.float32, fp8=fmt, granularity=PER_TENSOR)
    for c in (ref, got):
        c.scales.shared_k.fill_(1.0)
        c.scales.shared_v.fill_(1.3154374361038208)
    x = torch.tensor([vals], dtype=torch.float32)
    e = {"shared_k": x, "shared_v": x, "latent_k": torch.ones(1, 1, 1), "latent_v": torch.ones(1, 1, 1)}
    L.append(ref, e, ref.lengths.clone())
    append(got, e, got.lengths.clone())
    bits = got.shared_k[0, 0].view(torch.uint8)
    sat = 0x7E if fmt == E4M3 else 0x7B
    assert bits[:4].tolist() == [sat] * 4 and bits[4:6].tolist() == [sat | 0x80] * 2
    assert bits[7].item() == 0x80  # −0 keeps its sign, as the reference's
    assert torch.equal(bits, ref.shared_k[0, 0].view(torch.uint8))
    assert torch.equal(got.shared_v.view(torch.uint8), ref.shared_v.view(torch.uint8))
    if fmt == E4M3:
        assert got.shared_v[0, 0, 8].view(torch.uint8).item() == 0x55  # 13.0, not 12.0
        want = quantize(torch.tensor([16.442968368530273], dtype=torch.float32), fmt, torch.tensor(1.3154374361038208))
        assert want.view(torch.uint8).item() == 0x55


# ----------------------------------------------------------------------------- refusals
@pytest.fixture
def no_launch(monkeypatch):
    def boom(*a, **k):
        raise AssertionError("launched")
    monkeypatch.setattr(kdecode, "run_factored_decode", boom)


def _with(sc, **parts):
    return CacheScales(sc.format, sc.granularity, **{**sc.tensors(), **parts})


@pytest.mark.parametrize("check", [True, False])
def test_bad_scales_are_refused_before_launch(no_launch, check):
    d, sc = fp8_case(E4M3, PER_TOKEN_HEAD)
    a = args(d, torch.float32)
    with pytest.raises(ValueError, match=r"cache_scales.latent_k \(per_token_head\) must have shape \[3, 20, 3\]"):
        decode_attention(*a, scale=SCALE, check=check, cache_scales=_with(sc, latent_k=sc.latent_k[..., :2]))
    with pytest.raises(TypeError, match="cache_scales.shared_v must be float32"):
        decode_attention(*a, scale=SCALE, check=check, cache_scales=_with(sc, shared_v=sc.shared_v.double()))
    with pytest.raises(TypeError, match="an fp8 cache needs cache_scales"):
        decode_attention(*a, scale=SCALE, check=check)
    cu = torch.tensor([0, 1, 2, 2], dtype=torch.int32)
    with pytest.raises(TypeError, match="an fp8 cache needs cache_scales"):
        extend_attention(a[0][:2], cu, *a[1:], scale=SCALE, check=check)


@pytest.mark.parametrize("bad", [float("nan"), float("inf"), 0.0, -1.0])
def test_bad_static_scales_are_refused_before_launch(no_launch, bad):
    d, sc = fp8_case(E5M2, PER_HEAD)
    bad_lk = sc.latent_k.clone()
    bad_lk[1] = bad
    with pytest.raises(ValueError, match="cache_scales.latent_k"):
        decode_attention(*args(d, torch.float32), scale=SCALE, cache_scales=_with(sc, latent_k=bad_lk))
    spec = AttentionSpec.lrkv(H, D, R)
    cache = allocate_cache(spec, 2, 4, torch.float32, fp8=E5M2, granularity=PER_TENSOR)
    cache.scales.shared_v.fill_(bad)
    e = outlier_entries(2, torch.float32, 0)
    with pytest.raises(ValueError, match="cache_scales.shared_v"):
        append(cache, e, cache.lengths.clone())
    assert cache.lengths.tolist() == [0, 0] and (cache.shared_k.view(torch.uint8) == 0x7F).all()


def test_append_refuses_malformed_fp8_caches():
    spec = AttentionSpec.lrkv(H, D, R)
    cache = allocate_cache(spec, 2, 4, torch.float32, fp8=E4M3, granularity=PER_TOKEN)
    e = outlier_entries(2, torch.float32, 0)
    cache.scales.latent_v = cache.scales.latent_v[:, :3]
    with pytest.raises(ValueError, match=r"cache_scales.latent_v \(per_token\) must have shape \[2, 4\]"):
        append(cache, e, cache.lengths.clone())
    cache = allocate_cache(spec, 2, 4, torch.float32, fp8=E4M3, granularity=PER_TOKEN)
    cache.scales = None
    with pytest.raises(TypeError, match="an fp8 cache needs cache_scales"):
        append(cache, e, cache.lengths.clone())
    assert cache.lengths.tolist() == [0, 0]


def test_granularity_codes_follow_the_reference_names():
    # shared parts drop the head axis; the kernel's FP8_* constants match decode's table
    from lrkv.kernels import runtime
    K = runtime.kernels()
    assert kdecode.fp8_part_codes(PER_HEAD) == {"shared_k": 1, "shared_v": 1, "latent_k": 2, "latent_v": 2}
    assert kdecode.fp8_part_codes(PER_TOKEN_HEAD) == {"shared_k": 3, "shared_v": 3, "latent_k": 4, "latent_v": 4}
    assert kdecode.fp8_part_codes("") == dict.fromkeys(PARTS, 0)
    assert (K.FP8_TENSOR, K.FP8_HEAD, K.FP8_TOKEN, K.FP8_TOKEN_HEAD) == (1, 2, 3, 4)
    assert set(DYNAMIC_GRANULARITIES) == {PER_TOKEN, PER_TOKEN_HEAD}


def test_scales_past_int32_indexing_refused(monkeypatch):
    # the kernels index the fp8 scales with int32 (int64 offsets cost the wide fp8 tile a
    # register spill): a scale of 2^31 elements is refused before any launch
    from lrkv.kernels import decode as kdecode

    monkeypatch.setattr(kdecode, "check_cache_scales", lambda *a, **k: None)  # shapes are not the point here
    parts = {p: torch.zeros(2, 3, 1, 1) for p in PARTS}

    class Scales:
        def __init__(self, n):
            self.n = n

        def of(self, part):
            return torch.zeros(1).expand(self.n)  # no memory behind it

    kdecode.check_fp8_cache(parts, Scales(2 ** 31 - 1))
    with pytest.raises(ValueError, match=r"cache_scales.shared_k has 2147483648 elements.*int32"):
        kdecode.check_fp8_cache(parts, Scales(2 ** 31))
