"""Paged decode, tested as FlashAttention's kvcache tests do: the contiguous cache is
scattered into a random permutation of pages, every slot no sequence owns is NaN, and the
kernel over the page table must match the float64 reference over the contiguous cache."""

from __future__ import annotations

import pytest
import torch


from lrkv.kernels.decode import decode_attention, paged_decode_attention
from lrkv.kernels.paged import paginate, to_contiguous
from lrkv.kernels.testing import make_case, tight_check, tolerance_rule
from lrkv.reference.cache import FactoredCache
from lrkv.reference.rope import ExactRope

pytestmark = pytest.mark.equivalence


def paged_from_case(case, page_size, seed=0, drop_unused=True):
    i = case.inputs
    cache = FactoredCache(shared_k=i["shared_k"], shared_v=i["shared_v"], latent_k=i["latent_k"],
                          latent_v=i["latent_v"], lengths=i["lengths"], key_scale=i["key_scale"])
    paged = paginate(cache, page_size, generator=torch.Generator().manual_seed(seed))
    if drop_unused:
        # pages past each length are not needed: point them nowhere (-1), as a server would
        needed = -(-i["lengths"].long() // page_size)  # [B]
        cols = torch.arange(paged.page_table.shape[1], device=needed.device)[None, :]
        paged.page_table = torch.where(cols < needed[:, None], paged.page_table, -1).to(torch.int32)
    return paged


def run_paged(case, paged, **kw):
    return paged_decode_attention(case.inputs["q"], paged.shared_k, paged.shared_v, paged.latent_k,
                                  paged.latent_v, case.inputs["basis_k"], case.inputs["basis_v"],
                                  paged.lengths, paged.page_table, scale=case.scale,
                                  key_scale=paged.key_scale, rope=case.rope, **kw)


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("rope,key_scale", [(None, False), (ExactRope(), True)], ids=["none", "exact-ks"])
def test_paged_matches_reference(page_size, dtype, rope, key_scale):
    case = make_case(B=3, T=37, H=3, d_h=16, r=5, lengths=[37, 16, 0], dtype=dtype, rope=rope,
                     key_scale=key_scale, seed=20)
    paged = paged_from_case(case, page_size, seed=page_size)
    out, lse = run_paged(case, paged, num_splits=3)
    ref_out, ref_lse = case.reference()
    for name, a, b in (("out", out, ref_out), ("lse", lse, ref_lse)):
        ok, err, bound = tight_check(a, b, dtype)
        assert ok, f"{name}: {err:.3g} > {bound:.3g}"


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_paged_low_precision(dtype):
    case = make_case(B=2, T=40, H=4, d_h=32, r=6, lengths=[40, 21], dtype=dtype, seed=21, key_scale=True)
    out, _ = run_paged(case, paged_from_case(case, 16, seed=3))
    res = tolerance_rule(out, case.reference()[0], case.baseline()[0], dtype)
    assert res.passed, str(res)


def test_page_size_invariance():
    case = make_case(B=2, T=48, H=3, d_h=16, r=5, lengths=[48, 30], seed=22, rope=ExactRope())
    outs = [run_paged(case, paged_from_case(case, ps, seed=ps), num_splits=2)[0] for ps in (1, 4, 16)]
    contiguous, _ = decode_attention(*case.args(), scale=case.scale, rope=case.rope, num_splits=2)
    for o in outs:
        torch.testing.assert_close(o, contiguous, rtol=0, atol=1e-13)


def test_shared_prefix_pages():
    # two sequences reading the same physical pages (a shared prompt) is legal for decode
    case = make_case(B=2, T=32, H=2, d_h=16, r=4, lengths=[32, 32], seed=23)
    i = case.inputs
    for k in ("shared_k", "shared_v", "latent_k", "latent_v"):
        i[k][1] = i[k][0]
    i["q"][1] = i["q"][0] * 0.5
    paged = paged_from_case(case, 16, seed=4)
    paged.page_table[1] = paged.page_table[0]
    out, lse = run_paged(case, paged)
    ok, err, bound = tight_check(out, case.reference()[0], torch.float64)
    assert ok, f"{err:.3g} > {bound:.3g}"


def test_to_contiguous_roundtrip_keeps_nan_garbage():
    case = make_case(B=2, T=20, H=2, d_h=16, r=3, lengths=[20, 5], seed=24)
    paged = paged_from_case(case, 4, drop_unused=False)
    back = to_contiguous(paged)
    assert torch.equal(back.shared_k.isnan(), case.inputs["shared_k"].isnan())
    torch.testing.assert_close(back.latent_v, case.inputs["latent_v"], equal_nan=True, rtol=0, atol=0)
    # pages owned by nobody are NaN
    owned = torch.zeros(paged.num_pages, dtype=torch.bool)
    owned[paged.page_table.flatten().long().cpu()] = True
    assert paged.shared_k[~owned.to(paged.shared_k.device)].isnan().all()
