"""Paged decode, tested as FlashAttention's kvcache tests do: the harness's kernel-paged case
scatters the contiguous cache into a random permutation of pages, every slot no sequence owns
is garbage (NaN), and the kernel over the page table must pass the harness's rule against the
float64 oracle over the contiguous cache."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from lrkv.kernels.decode import decode_attention, paged_decode_attention
from lrkv.kernels.testing import check, kernel_case, kernel_inputs
from lrkv.reference.cache import FactoredCache

pytestmark = pytest.mark.equivalence


def drop_unused(p):
    """Point the pages past each length nowhere (-1), as a server would (the Case's table
    lists every page of the allocation)."""
    page = p.cache.shared_k.shape[1]
    needed = -(-p.cache.lengths.long() // page)  # [B]
    cols = torch.arange(p.cache.page_table.shape[1], device=needed.device)[None, :]
    return replace(p, cache=replace(p.cache, page_table=torch.where(cols < needed[:, None], p.cache.page_table, -1)
                                                  .to(torch.int32)))


@pytest.mark.parametrize("page_size", [1, 16])
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32], ids=str)
@pytest.mark.parametrize("rope,key_scale", [("none", False), ("exact", True)], ids=["none", "exact-ks"])
def test_paged_matches_reference(page_size, dtype, rope, key_scale):
    case = kernel_case(level="kernel-paged", page_size=page_size, H=3, d_h=16, r=5, lengths=[37, 16, 0],
                       dtype=dtype, rope=rope, key_scale=key_scale, seed=20)
    check(paged_decode_attention, case, inputs=drop_unused(kernel_inputs(case)), num_splits=3)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16], ids=str)
def test_paged_low_precision(dtype):
    case = kernel_case(level="kernel-paged", page_size=16, H=4, d_h=32, r=6, lengths=[40, 21], dtype=dtype,
                       seed=21, key_scale=True)
    check(paged_decode_attention, case, inputs=drop_unused(kernel_inputs(case)))


def test_page_size_invariance():
    # the same draw (same seed and shape) paged at 1, 4 and 16 slots per page, and contiguous
    shape = dict(H=3, d_h=16, r=5, lengths=[48, 30], seed=22, rope="exact")
    outs = [kernel_inputs(kernel_case(level="kernel-paged", page_size=ps, **shape)).call(
        paged_decode_attention, num_splits=2)[0] for ps in (1, 4, 16)]
    contiguous, _ = kernel_inputs(kernel_case(**shape)).call(decode_attention, num_splits=2)
    for o in outs:
        torch.testing.assert_close(o, contiguous, rtol=0, atol=1e-13)


def test_shared_prefix_pages():
    # two sequences reading the same physical pages (a shared prompt) is legal for decode
    case = kernel_case(level="kernel-paged", page_size=16, shared_prefix=32, H=2, d_h=16, r=4, lengths=[32, 32],
                       seed=23)
    p = kernel_inputs(case)
    assert torch.equal(p.cache.page_table[0], p.cache.page_table[1])
    check(paged_decode_attention, case, inputs=p)


def test_to_contiguous_roundtrip_keeps_nan_garbage():
    # FactoredCache.paginate (the bench's and paged_append's paging) and its gather through
    # the page table are inverses on every slot inside a length
    inp = kernel_inputs(kernel_case(H=2, d_h=16, r=3, lengths=[20, 5], seed=24))
    paged = inp.cache.paginate(
        4, generator=torch.Generator().manual_seed(0))
    back = paged.gather()
    sk, lv = back.shared_k, back.latent_v
    assert torch.equal(sk.isnan(), inp.cache.shared_k.isnan())
    torch.testing.assert_close(lv, inp.cache.latent_v, equal_nan=True, rtol=0, atol=0)
    # pages owned by nobody are NaN
    owned = torch.zeros(paged.num_pages, dtype=torch.bool)
    owned[paged.page_table.flatten().long().cpu()] = True
    assert paged.shared_k[~owned.to(paged.shared_k.device)].isnan().all()


LAYOUT_SPEC_EXACT = dict(rope="exact", qk_norm=True)


def _vllm_cases():
    from lrkv.spec import AttentionSpec
    from lrkv.verify.case import Case

    s = AttentionSpec.lrkv(3, 8, 2, **LAYOUT_SPEC_EXACT)
    return [Case.flat("kernel-paged", s, "float32", (5, 8, 0, 4), 12, page_size=4, page_hnd=hnd, seed=1)
            for hnd in (False, True)] + [
        Case.flat("kernel-extend", s, "float32", (9, 4, 6, 0), 12, n_new=(3, 0, 6, 0), page_size=4, seed=2),
        Case.flat("kernel-paged", s, "bfloat16", (9, 4, 6, 0), 12, page_size=3, seed=3, page_hnd=True,
                  cache_format="float8_e4m3fn", scale_granularity="per_token_head")]


def test_the_kernels_take_vllm_block_pools_as_they_are(monkeypatch):
    """triton-vllm-blocks passes in vLLM's layout (null block 0, head-major pools, extend, fp8),
    and a token-major pool reaches the kernel without a copy: the same storage, not a conversion."""
    from lrkv.kernels import decode
    from lrkv.kernels.triton_backend import TritonVllmBlocks
    from lrkv.testing import check_backend
    from lrkv.verify.levels.paged import make_paged_inputs

    report = check_backend(TritonVllmBlocks(), grid=_vllm_cases())
    assert report.counts["pass"] == 4 and {r["cache_layout"] for r in report.records} == {"vllm-blocks"}
    copied, real = [], decode._dense_pair

    def spy(k, v):  # the storage of K and V as the kernel gets them
        out = real(k, v)
        copied.append([t.data_ptr() for t in out])
        return out
    monkeypatch.setattr(decode, "_dense_pair", spy)
    for case, copies in zip(_vllm_cases()[:2], (False, True)):  # NHD: none; HND latents: made dense once
        inp = make_paged_inputs(case).in_layout("vllm-blocks")
        pools = inp.arranged()
        copied.clear()
        TritonVllmBlocks().paged_decode_attention(*inp.args(), **inp.kwargs())
        assert copied[0] == [pools["shared_k"].data_ptr(), pools["shared_v"].data_ptr()]
        assert (copied[1] != [pools["latent_k"].data_ptr(), pools["latent_v"].data_ptr()]) == copies
