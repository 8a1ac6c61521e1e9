"""FactoredCache (lrkv.reference.cache): construction, check, paginate/gather, sequence, dequantize."""

import pytest
import torch

from lrkv.reference import lrkv as L
from lrkv.reference.cache import FactoredCache, allocate_cache
from lrkv.reference.fp8 import E4M3, PER_TOKEN_HEAD
from lrkv.reference.fp8_cache import quantize_cache
from lrkv.spec import AttentionSpec

from ..test_helpers.inputs import random_factored_inputs


def _cache(key_scale=False, lengths=(7, 3)) -> tuple[FactoredCache, dict]:
    d = random_factored_inputs(B=2, T=7, H=3, d_h=8, r=3, lengths=list(lengths), key_scale=key_scale, seed=5)
    return FactoredCache(d["shared_k"], d["shared_v"], d["latent_k"], d["latent_v"], d["lengths"],
                         d.get("key_scale")), d


def test_construction_and_shapes():
    c, _ = _cache(key_scale=True)
    assert (c.batch, c.t_max, c.paged) == (2, 7, False)
    assert list(c.tensors()) == ["shared_k", "shared_v", "latent_k", "latent_v", "key_scale"]
    assert len(c.parts) == 4 and c.parts[2] is c.latent_k
    assert set(c.contract_kwargs()) == {"key_scale"}  # no cache_scales without fp8
    empty = allocate_cache(AttentionSpec.lrkv(3, 8, 3), 2, 5)
    assert empty.lengths.tolist() == [0, 0] and empty.shared_k.isnan().all()


@pytest.mark.parametrize("page", [1, 3, 7])
def test_paginate_gather_round_trip(page):
    c, _ = _cache(key_scale=True)
    p = c.paginate(page, generator=torch.Generator().manual_seed(1))
    assert p.paged and p.page_size == page and p.t_max >= c.t_max and p.batch == 2
    back = p.gather()
    valid = torch.arange(c.t_max)[None, :] < c.lengths[:, None]  # [B, T]
    for name, t in c.tensors().items():
        got = back.tensors()[name][:, : c.t_max]
        assert torch.equal(got[valid], t[valid]), name  # bit-equal inside every length
        assert got[~valid].isnan().all(), name  # NaN past it
    owned = torch.zeros(p.num_pages, dtype=torch.bool)
    owned[p.page_table.flatten().long()] = True
    assert p.shared_k[~owned].isnan().all()  # pages nobody owns stay garbage


def test_paged_reference_equals_contiguous():
    c, d = _cache()
    p = c.paginate(3, generator=torch.Generator().manual_seed(2))
    want = L.attend(d["q"], c, d["basis_k"], d["basis_v"], scale=0.3, check=True)
    got = L.attend(d["q"], p, d["basis_k"], d["basis_v"], scale=0.3, check=True)
    # the same float64 math over gathered pages: equal up to the summation order a gathered
    # (non-contiguous) operand may take in BLAS — 1–2 ulps on an Intel Xeon, none on an AMD EPYC
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=1e-14)


def test_sequence_slices_one_sequence():
    c, _ = _cache(key_scale=True)
    s = c.sequence(1, 3, torch.tensor([1, 2, 3]))
    assert s.batch == 3 and s.lengths.tolist() == [1, 2, 3]
    for name, t in s.tensors().items():
        assert all(t[i].data_ptr() == c.tensors()[name][1].data_ptr() for i in range(3))  # views, not copies
    with pytest.raises(ValueError, match="contiguous"):
        c.paginate(2).sequence(0, 1, torch.tensor([1]))


def test_dequantize_and_gather_of_an_fp8_cache():
    c, _ = _cache()
    stored, scales = quantize_cache(dict(zip(("shared_k", "shared_v", "latent_k", "latent_v"), c.parts)),
                                    c.lengths, E4M3, PER_TOKEN_HEAD)
    q8 = FactoredCache(*stored.values(), c.lengths, scales=scales)
    assert set(q8.contract_kwargs()) == {"key_scale", "cache_scales"}
    p8 = q8.paginate(2, generator=torch.Generator().manual_seed(3))
    with pytest.raises(ValueError, match="dequantize"):
        p8.gather()
    a, b = q8.dequantize(torch.float64), p8.dequantize(torch.float64).gather()
    valid = torch.arange(c.t_max)[None, :] < c.lengths[:, None]
    assert a.scales is None and torch.equal(a.latent_v[valid], b.latent_v[:, : c.t_max][valid])
    assert c.dequantize(torch.float64) is c  # not fp8: unchanged
