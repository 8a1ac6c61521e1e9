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
