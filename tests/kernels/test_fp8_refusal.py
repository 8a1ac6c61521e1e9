"""An fp8 LRKV cache (DESIGN §4.1) without its `cache_scales` is refused by dtype with a
TypeError that says so — by decode, paged decode, extend and both appends, with check=False
too — rather than read as if it were the compute dtype; and the triton backend declines an
fp8 case, which the verify layer cannot express yet."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from lrkv.kernels.append import append, paged_append
from lrkv.kernels.decode import decode_attention, paged_decode_attention
from lrkv.kernels.extend import extend_attention
from lrkv.kernels.testing import kernel_case, kernel_inputs
from lrkv.kernels.triton_backend import TritonBackend
from lrkv.reference.cache import FactoredCache, allocate_cache
from lrkv.reference.fp8 import E4M3, E5M2, PARTS, PER_TOKEN_HEAD
from lrkv.reference.fp8_cache import quantize_cache
from lrkv.spec import AttentionSpec

REFUSED = r"shared_k has dtype torch.float8_e\w+: an fp8 cache needs cache_scales"


def fp8_kernel_args(fmt, paged=False):
    case = kernel_case(H=3, d_h=16, r=4, lengths=[8, 3], seed=30,
                       **(dict(level="kernel-paged", page_size=4) if paged else {}))
    inp = kernel_inputs(case)
    named = {p: inp.named_tensors()[p] for p in ("q", *PARTS, "basis_k", "basis_v", "lengths")}
    if not paged:  # contiguous: quantize properly (the refusal must not depend on the values)
        stored, _ = quantize_cache({p: named[p] for p in PARTS}, named["lengths"], fmt, PER_TOKEN_HEAD)
        named.update(stored)
    else:
        named.update({p: named[p].to(torch.float32).to(fmt) for p in PARTS})
    return named, inp


@pytest.mark.parametrize("fmt", [E4M3, E5M2], ids=["e4m3fn", "e5m2"])
@pytest.mark.parametrize("check", [True, False])
def test_decode_and_extend_refuse_fp8_without_scales(fmt, check):
    # the kernels read fp8 caches with cache_scales (test_fp8_kernels.py); without them an fp8
    # cache is refused by dtype, with check=False too, rather than read as the compute dtype
    d, _ = fp8_kernel_args(fmt)
    args = [d[k] for k in ("q", *PARTS, "basis_k", "basis_v", "lengths")]
    with pytest.raises(TypeError, match=REFUSED):
        decode_attention(*args, scale=0.25, check=check)
    cu = torch.tensor([0, 1, 2], dtype=torch.int32, device=d["q"].device)
    with pytest.raises(TypeError, match=REFUSED):
        extend_attention(d["q"], cu, *args[1:], scale=0.25, check=check)


def test_paged_decode_refuses_fp8_without_scales():
    d, inp = fp8_kernel_args(E4M3, paged=True)
    args = [d[k] for k in ("q", *PARTS, "basis_k", "basis_v", "lengths")]
    with pytest.raises(TypeError, match=REFUSED):
        paged_decode_attention(*args, inp.cache.page_table, scale=0.25)


def test_appends_refuse_fp8_caches_without_scales():
    spec = AttentionSpec.lrkv(3, 16, 4)
    cache = allocate_cache(spec, 2, 8, torch.float32, fp8=E4M3)
    cache.scales = None
    entries = {"shared_k": torch.zeros(2, 16), "shared_v": torch.zeros(2, 16), "latent_k": torch.zeros(2, 3, 4),
               "latent_v": torch.zeros(2, 3, 4)}
    with pytest.raises(TypeError, match=REFUSED):
        append(cache, entries, cache.lengths.clone())
    assert cache.lengths.tolist() == [0, 0]
    paged = FactoredCache(**{p: getattr(cache, p) for p in PARTS}, lengths=cache.lengths.clone(),
                          page_table=torch.arange(2, dtype=torch.int32)[:, None])
    with pytest.raises(TypeError, match=REFUSED):
        paged_append(paged, entries, paged.lengths.clone())


def test_triton_backend_declines_an_fp8_case():
    # Case itself takes compute dtypes only (fp8 cases are the verify grid's next step): a stand-in
    case = SimpleNamespace(level="kernel", spec=AttentionSpec.lrkv(3, 16, 4), dtype="float8_e4m3fn")
    ok, why = TritonBackend().supports(case)
    assert not ok and "float8_e4m3fn" in why
