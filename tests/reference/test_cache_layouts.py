"""The server cache layouts (lrkv.reference.cache_layouts): each adapter hands over the paged
cache object's content exactly — read back, every valid slot is the cache's own — with each
layout's own conventions: vLLM's null block 0 (NaN, never a sequence's block) and the slot
an append writes through, FlashInfer's CSR pages with last-page lengths in 1 … page, fused
rows in the stated part order; head-major (HND) pools stay head-major, fp8 scales go along."""

import pytest
import torch

from lrkv.reference.cache import FactoredCache
from lrkv.reference.cache_layouts import ADAPTERS, CACHE_LAYOUTS, check_layout, flashinfer_csr, fused_rows, vllm_blocks
from lrkv.spec import AttentionSpec
from lrkv.verify.case import Case
from lrkv.verify.levels.extend import make_extend_inputs
from lrkv.verify.levels.paged import make_paged_inputs

H, R = 3, 2
SPEC = AttentionSpec.lrkv(H, 8, R, qk_norm=True)


def _paged(hnd=False, fp8="", gran="per_token_head", lengths=(5, 9, 0, 4, 8)):
    extra = {"cache_format": fp8, "scale_granularity": gran} if fp8 else {}
    return make_paged_inputs(Case.flat("kernel-paged", SPEC, "float32", lengths, 12, page_size=4, page_hnd=hnd,
                                       **extra)).cache


def _read(name, args):
    return fused_rows.read(args, H, R) if name == "fused-rows" else ADAPTERS[name].read(args)


def _same_valid_slots(a: FactoredCache, b: FactoredCache) -> bool:
    ga, gb = a.dequantize(torch.float64).gather(), b.dequantize(torch.float64).gather()
    return torch.equal(ga.lengths, gb.lengths) and all(
        torch.equal(torch.nan_to_num(x, 7.0), torch.nan_to_num(y, 7.0))
        for x, y in zip((*ga.parts, ga.key_scale), (*gb.parts, gb.key_scale)))


@pytest.mark.parametrize("hnd", [False, True])
@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_every_layout_hands_over_the_cache_exactly(name, hnd):
    cache = _paged(hnd)
    assert _same_valid_slots(cache, _read(name, ADAPTERS[name].arrange(cache)))


@pytest.mark.parametrize("name", sorted(ADAPTERS))
def test_per_token_fp8_scales_stay_beside_their_tokens(name):
    cache = _paged(hnd=True, fp8="float8_e4m3fn")
    args = ADAPTERS[name].arrange(cache)
    assert args["cache_scales"] is not None and _same_valid_slots(cache, _read(name, args))


def test_a_head_major_pool_stays_head_major():
    cache = _paged(hnd=True)
    assert cache.latent_k.stride(1) < cache.latent_k.stride(2)  # [P, page, H, r] stored [P, H, page, r]
    for name in ("vllm-blocks", "flashinfer-csr"):
        lk = ADAPTERS[name].arrange(cache)["latent_k"]
        assert lk.stride(1) < lk.stride(2) and lk.shape[1:] == cache.latent_k.shape[1:]


def test_vllm_block_zero_is_a_nan_null_block_no_sequence_owns():
    cache = _paged()
    args = vllm_blocks.arrange(cache)
    for p in ("shared_k", "latent_v", "key_scale"):
        assert args[p][0].isnan().all() and torch.equal(args[p][1:].nan_to_num(7.0), getattr(cache, p).nan_to_num(7.0))
    owned = torch.arange(args["block_table"].shape[1])[None, :] < (cache.lengths[:, None] + 3) // 4
    assert (args["block_table"][owned] > 0).all() and (args["block_table"][~owned] == 0).all()
    assert torch.equal(args["seq_lens"], cache.lengths)


def test_vllm_slot_mapping_names_where_each_new_token_lives():
    inp = make_extend_inputs(Case.flat("kernel-extend", SPEC, "float32", (9, 4, 6), 12, n_new=(3, 0, 6),
                                       page_size=4))
    args = vllm_blocks.arrange(inp.cache, inp.cu_seqlens_q)
    flat = args["latent_k"].reshape(-1, H, R)  # [blocks · block_size, H, r]: slot s is row s
    contiguous = inp.cache.gather().latent_k
    rows = [(0, p) for p in range(6, 9)] + [(2, p) for p in range(6)]
    assert args["slot_mapping"].tolist() != list(range(len(rows)))
    for slot, (b, p) in zip(args["slot_mapping"].tolist(), rows):
        assert torch.equal(flat[slot], contiguous[b, p])


def test_csr_pages_and_last_page_lengths():
    cache = _paged(lengths=(5, 8, 0, 1))
    args = flashinfer_csr.arrange(cache)
    assert args["kv_indptr"].tolist() == [0, 2, 4, 4, 5]
    assert args["kv_last_page_len"].tolist() == [1, 4, 0, 1]  # full last page: 4, never 0; no page: 0
    assert args["kv_indices"].tolist() == [*cache.page_table[0, :2].tolist(), *cache.page_table[1, :2].tolist(),
                                           cache.page_table[3, 0].item()]
    assert args["latent_k"] is cache.latent_k  # the pools are the cache's own: no copy


def test_fused_rows_hold_the_parts_in_the_stated_order():
    cache = _paged()
    rows = fused_rows.arrange(cache)["kv_rows"]
    d = cache.shared_k.shape[-1]
    assert rows.shape[-1] == 2 * d + 2 * H * R
    assert torch.equal(rows[..., d:2 * d].nan_to_num(7.0), cache.shared_v.nan_to_num(7.0))
    assert torch.equal(rows[..., 2 * d:2 * d + H * R].nan_to_num(7.0), cache.latent_k.flatten(2).nan_to_num(7.0))


def test_an_unknown_layout_is_named():
    assert CACHE_LAYOUTS[0] == "pages" and check_layout("vllm-blocks") == "vllm-blocks"
    with pytest.raises(ValueError, match="cache_layout must be one of pages, vllm-blocks"):
        check_layout("vllm")
