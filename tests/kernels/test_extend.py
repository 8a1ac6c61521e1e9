"""The Triton extend kernel (DESIGN §4) vs the float64 extend oracle: ragged queries, causal,
one online softmax over shared + private logits, contiguous and paged.

On a CPU machine these run in Triton's interpreter (kernel_context), which executes programs
one by one — one per (query token, head group) here — so shapes and token counts are tiny.
"""

from __future__ import annotations

import pytest
import torch


from lrkv.kernels import runtime
from lrkv.kernels.triton_backend import TritonBackend
from lrkv.kernels.decode import decode_attention
from lrkv.kernels.extend import extend_attention
from lrkv.kernels.paged import paginate
from lrkv.kernels.testing import make_case, tight_check, tolerance_rule
from lrkv.reference.cache import FactoredCache
from lrkv.reference.extend import extend_attention as reference_extend
from lrkv.reference.extend import materialized_extend_attention
from lrkv.reference.rope import ExactRope

pytestmark = pytest.mark.equivalence


def ragged(case, n: list[int], seed: int = 0):
    """Queries for n_b new tokens per sequence (the last n_b of each length), at the case dtype."""
    H, d_h = case.inputs["q"].shape[1:]
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(n), H, d_h, generator=g, dtype=torch.float64).to(case.inputs["q"].dtype)
    cu = torch.tensor([0, *torch.tensor(n).cumsum(0).tolist()], dtype=torch.int32)
    dev = case.inputs["q"].device
    return q.to(dev), cu.to(dev)


def cache_args(case):
    i = case.inputs
    return [i[k] for k in ("shared_k", "shared_v", "latent_k", "latent_v", "basis_k", "basis_v", "lengths")]


def paged_args(case, page: int, seed: int = 1):
    i = case.inputs
    cache = FactoredCache(shared_k=i["shared_k"], shared_v=i["shared_v"], latent_k=i["latent_k"],
                          latent_v=i["latent_v"], lengths=i["lengths"], key_scale=i["key_scale"])
    p = paginate(cache, page, generator=torch.Generator().manual_seed(seed))  # unused pages: NaN
    return [p.shared_k, p.shared_v, p.latent_k, p.latent_v, i["basis_k"], i["basis_v"], i["lengths"]], \
        p.key_scale, p.page_table


def reference(q, cu, args, case, **kw):
    f = lambda t: None if t is None else (t.double() if t.is_floating_point() else t)  # noqa: E731
    kw = {k: f(v) if isinstance(v, torch.Tensor) and k != "page_table" else v for k, v in kw.items()}
    return reference_extend(f(q), cu, *[f(a) for a in args], scale=case.scale, rope=case.rope, check=False, **kw)


@pytest.mark.parametrize("private,num_splits,page", [("wide", 1, None), ("per_head", 4, None), ("wide", 3, 16),
                                                     ("per_head", 1, 16)])
def test_private_paths_and_splits(private, num_splits, page):
    # extend runs decode's split kernel over each token's causal range: both private paths, and
    # splits that leave the early tokens' later splits empty (the merge must ignore them);
    # block_t 16 with page 16 keeps each tile inside one page
    case = make_case(B=3, T=40, H=5, d_h=16, r=6, lengths=[40, 9, 23], key_scale=True, seed=33)
    q, cu = ragged(case, [17, 3, 1])
    args, ks, table = cache_args(case), case.inputs["key_scale"], None
    if page is not None:
        args, ks, table = paged_args(case, page)
    out, lse = extend_attention(q, cu, *args, scale=case.scale, key_scale=ks, rope=case.rope, page_table=table,
                                private=private, num_splits=num_splits, block_t=16)
    ref_out, ref_lse = reference(q, cu, args, case, key_scale=ks, page_table=table)
    for name, a, b in (("out", out, ref_out), ("lse", lse, ref_lse)):
        ok, err, bound = tight_check(a, b, torch.float64)
        assert ok, f"{name} ({private}, {num_splits} splits): max|err| {err:.3g} > {bound:.3g}"


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("rope,key_scale", [(None, False), (ExactRope(), True)], ids=["none", "exact-ks"])
@pytest.mark.parametrize("page", [None, 16, 5], ids=["contiguous", "page16", "page5"])
def test_tight_vs_reference(dtype, rope, key_scale, page):
    # one ragged batch: a 20-token chunk, speculative n_b = 3, plain decode n_b = 1, and n_b = 0
    case = make_case(B=4, T=21, H=3, d_h=16, r=5, lengths=[20, 9, 1, 12], dtype=dtype, rope=rope,
                     key_scale=key_scale, seed=30)
    q, cu = ragged(case, [20, 3, 1, 0])
    args, ks, table = cache_args(case), case.inputs["key_scale"], None
    if page is not None:
        args, ks, table = paged_args(case, page)
    out, lse = extend_attention(q, cu, *args, scale=case.scale, key_scale=ks, rope=case.rope, page_table=table)
    assert out.dtype == dtype and lse.dtype == dtype  # float32/float64 accumulate in their own dtype
    ref_out, ref_lse = reference(q, cu, args, case, key_scale=ks, page_table=table)
    for name, a, b in (("out", out, ref_out), ("lse", lse, ref_lse)):
        ok, err, bound = tight_check(a, b, dtype)
        assert ok, f"{name}: max|err| {err:.3g} > {bound:.3g}"


@pytest.mark.parametrize("mutant", ["read_past_length", "length_off_by_one", "separate_softmax", "scale_rank"])
def test_kernel_mutants_rejected_in_extend(mutant):
    # The split kernel's bug switches reach extend too. read_past_length is the causal bug
    # there: each query also attends the NEXT token, a valid (already appended) slot — a
    # finite, plausible-looking output that only the comparison catches. The tight check
    # must say no for every mutant, on the same case the correct kernel passes.
    case = make_case(B=2, T=24, H=3, d_h=16, r=5, lengths=[24, 10], key_scale=True, seed=34, q_mult=3.0)
    q, cu = ragged(case, [6, 3])
    args = cache_args(case)
    kw = dict(scale=case.scale, key_scale=case.inputs["key_scale"])
    ref_out, _ = reference(q, cu, args, case, key_scale=case.inputs["key_scale"])
    good, _ = extend_attention(q, cu, *args, **kw)
    assert tight_check(good, ref_out, torch.float64)[0]
    bad, _ = extend_attention(q, cu, *args, mutant=mutant, **kw)
    ok, err, bound = tight_check(bad, ref_out, torch.float64)
    assert not ok, f"mutant {mutant} passed the extend check: max|err| {err:.3g} <= {bound:.3g}"
    if mutant == "read_past_length":  # every query but each sequence's last reads a valid slot
        inner = [0, 1, 2, 3, 4, 6, 7]  # (the last ones read NaN garbage past the length)
        assert torch.isfinite(bad[inner]).all()
        assert not tight_check(bad[inner], ref_out[inner], torch.float64)[0]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_low_precision_tolerance_rule(dtype):
    case = make_case(B=2, T=24, H=3, d_h=16, r=5, lengths=[24, 6], dtype=dtype, key_scale=True,
                     rope=ExactRope(), seed=31)
    q, cu = ragged(case, [8, 2])
    args, ks = cache_args(case), case.inputs["key_scale"]
    out, lse = extend_attention(q, cu, *args, scale=case.scale, key_scale=ks, rope=case.rope)
    assert out.dtype == dtype and lse.dtype == torch.float32  # DESIGN §4: lse in fp32 for half inputs
    ref_out, ref_lse = reference(q, cu, args, case, key_scale=ks)
    base_out, base_lse = materialized_extend_attention(q, cu, *args, scale=case.scale, key_scale=ks,
                                                       rope=case.rope, check=False)
    for name, a, ref, base in (("out", out, ref_out, base_out), ("lse", lse, ref_lse, base_lse)):
        res = tolerance_rule(a, ref, base, dtype)
        assert res.passed, f"{name} {dtype}: {res}"


def test_one_token_per_sequence_is_the_decode_kernel():
    case = make_case(B=3, T=19, H=4, d_h=16, r=3, lengths=[19, 7, 1], seed=32, key_scale=True)
    cu = torch.arange(4, dtype=torch.int32, device=case.inputs["q"].device)
    got = extend_attention(case.inputs["q"], cu, *cache_args(case), scale=case.scale,
                           key_scale=case.inputs["key_scale"])
    want = decode_attention(*case.args(), scale=case.scale, key_scale=case.inputs["key_scale"], num_splits=1)
    torch.testing.assert_close(got[0], want[0], rtol=0, atol=1e-13)
    torch.testing.assert_close(got[1], want[1], rtol=0, atol=1e-13)


def test_causal_first_query_sees_one_slot_and_groups_agree():
    # a prefill chunk: its first token (position 0) attends slot 0 only, so its output is
    # v_0 exactly; head groups of 1 and 2 (H = 3: a padded group) match one group of 3
    case = make_case(B=1, T=17, H=3, d_h=16, r=4, lengths=[17], seed=33)
    q, cu = ragged(case, [17])
    out = extend_attention(q, cu, *cache_args(case), scale=case.scale, group_size=3, block_t=16)[0]
    i = case.inputs
    v0 = i["shared_v"][0, 0] + torch.einsum("hdr,hr->hd", i["basis_v"], i["latent_v"][0, 0])
    torch.testing.assert_close(out[0], v0, rtol=0, atol=1e-14)
    q4, cu4 = q[-4:], torch.tensor([0, 4], dtype=torch.int32, device=cu.device)  # positions 13 … 16
    torch.testing.assert_close(
        extend_attention(q4, cu4, *cache_args(case), scale=case.scale, group_size=2, block_t=16)[0],
        out[-4:], rtol=0, atol=1e-13)


def test_no_queries_and_validation_before_launch():
    case = make_case(B=2, T=8, H=2, d_h=16, r=3, lengths=[8, 3], seed=34)
    q, cu = ragged(case, [0, 0])
    out, lse = extend_attention(q, cu, *cache_args(case), scale=case.scale)
    assert out.shape == (0, 2, 16) and lse.shape == (0, 2)
    q, cu = ragged(case, [2, 4])  # n_1 = 4 > lengths[1] = 3
    with pytest.raises(ValueError, match="extends by n_b = 4"):
        extend_attention(q, cu, *cache_args(case), scale=case.scale)
    q, cu = ragged(case, [2, 1])
    with pytest.raises(ValueError, match="group_size"):
        extend_attention(q, cu, *cache_args(case), scale=case.scale, group_size=5)
    bad = cu.clone()
    bad[1] = 4  # [0, 4, 3]
    with pytest.raises(ValueError, match="non-decreasing"):
        extend_attention(q, bad, *cache_args(case), scale=case.scale)


def test_backend_declares_and_runs_the_new_levels():
    be = TritonBackend()
    assert {"kernel", "kernel-paged", "kernel-extend"} <= be.levels
    assert "kernel-extend" in TritonBackend(mutant="scale_rank").levels  # extend runs the same split kernel
    case = make_case(B=2, T=12, H=2, d_h=16, r=3, lengths=[12, 5], seed=35)
    q, cu = ragged(case, [4, 1])
    args, ks, table = paged_args(case, 4)
    out, _ = be.extend_attention(q, cu, *args, scale=case.scale, page_table=table)
    ok, err, bound = tight_check(out, reference(q, cu, args, case, page_table=table)[0], torch.float64)
    assert ok, f"{err:.3g} > {bound:.3g}"
    pout, _ = be.paged_decode_attention(case.inputs["q"], *args, table, scale=case.scale)
    ok, err, bound = tight_check(pout, case.reference()[0], torch.float64)
    assert ok, f"{err:.3g} > {bound:.3g}"


def test_paged_and_extend_levels_pass_through_the_harness():
    from lrkv.verify.grids import default_grid
    from lrkv.verify.runner import run
    from lrkv.verify.tolerance import load_policy

    # two small default-grid cases: page size 1 with a shared prefix, and a paged ragged extend
    grid = default_grid()
    cases = [next(c for c in grid if c.level == "kernel-paged" and c.page_size == 1 and c.dtype == "float32"),
             next(c for c in grid if c.level == "kernel-extend" and c.page_size == 1)]
    recs = run(cases, [("triton", TritonBackend())], load_policy())
    assert [r["status"] for r in recs] == ["pass", "pass"], [(r["id"], r["reason"]) for r in recs]


def test_extend_goes_through_decodes_custom_op():
    # one op for both contracts: its schema carries the optional cu_seqlens_q
    schema = str(torch.ops.lrkv.factored_decode.default._schema)
    assert "cu_seqlens_q" in schema and not hasattr(torch.ops.lrkv, "factored_extend")
    assert runtime.mode()[0] in ("cuda", "interpreter")


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: the native tests compile the kernel")
def test_extend_kernel_compiles_for_sm90():
    from lrkv.kernels.compile_check import EXTEND_VARIANTS, compile_variant

    try:
        res = compile_variant(EXTEND_VARIANTS[0], extend=True)
    except FileNotFoundError as e:
        pytest.skip(f"CUDA toolchain of the triton wheel not found: {e}")
    assert res["kernel"] == "decode_split_kernel[extend]" and res.get("stack", 0) == 0, res
