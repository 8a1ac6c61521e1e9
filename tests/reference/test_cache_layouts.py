"""The server cache layouts (lrkv.reference.cache_layouts): each adapter hands over the paged
cache object's content exactly — read back, every valid slot is the cache's own — with each
layout's own conventions: vLLM's null block 0 (NaN, never a sequence's block) and the slot
an append writes through, FlashInfer's CSR pages with last-page lengths in 1 … page, fused
rows in the stated part order; head-major (HND) pools stay head-major, fp8 scales go along."""

import re

import pytest
import math

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


# ------------------------------------------------------------- docs/harness.md "Layouts"
def _contract_tables():
    """docs/harness.md's two layout tables: the argument order per layout, and each argument."""
    from pathlib import Path

    from tests.test_helpers.doc_blocks import tables

    doc = Path(__file__).resolve().parents[2] / "docs" / "harness.md"
    found = {next(iter(t[0])): t for t in tables(doc, "Layouts: the cache as the server keeps it") if t}
    return found["`cache_layout`"], found["argument"]


def _names(cell: str) -> tuple[str, ...]:
    return () if cell == "—" else tuple(n.strip() for n in cell.strip("`").split(","))


def _layouts(row: dict) -> tuple[str, ...]:
    return CACHE_LAYOUTS if row["layouts"] == "all" else _names(row["layouts"])


def _shape(cell: str, extend: bool, sizes: dict) -> tuple[int, ...]:
    spans = [s for s in re.findall(r"`([^`]*)`", cell) if s.startswith("[")]
    dims = spans[-1 if extend else 0].strip("[]").replace("·", "*")
    return tuple(eval(d, {}, sizes) for d in dims.split(",")) if dims else ()  # noqa: S307 — the doc's own sizes


def test_the_docs_layout_order_is_the_adapters():
    from lrkv.verify.levels.extend import ExtendInputs
    from lrkv.verify.levels.paged import PagedInputs

    order, _ = _contract_tables()
    assert [row["`cache_layout`"].split()[0].strip("`") for row in order] == list(CACHE_LAYOUTS)
    for row in order:
        layout = row["`cache_layout`"].split()[0].strip("`")
        own = (PagedInputs.ARGS, ExtendInputs.ARGS, ("page_table",)) if layout == "pages" else (
            ADAPTERS[layout].DECODE, ADAPTERS[layout].EXTEND, ADAPTERS[layout].EXTEND_KEYWORDS)
        assert (_names(row["paged decode: positional"]), _names(row["extend: positional"]),
                _names(row["extend: keyword"])) == own, layout


def test_the_docs_layout_arguments_are_what_the_harness_hands_over():
    """Every argument a backend of each layout is handed — by position in the doc's order, then
    the keywords — has the doc's shape, dtype and memory order, head-major or not, fp8 or not;
    and every row of the doc's table is met by some argument."""
    from lrkv.verify.levels.extend import make_extend_inputs

    order, rows = _contract_tables()
    rows = [(set(_names(r["argument"].replace("`", ""))), r) for r in rows]
    met = set()
    for hnd, fp8, view in ((False, "", "dense"), (True, "float8_e4m3fn", "dense"), (False, "", "rows-padded"),
                           (True, "float8_e4m3fn", "kv-interleaved")):
        extra = {"cache_format": fp8, "scale_granularity": "per_token_head"} if fp8 else {}
        extra |= {"pool_view": view}
        bundles = {
            "decode": make_paged_inputs(Case.flat("kernel-paged", SPEC, "float32", (5, 9, 0, 4, 8), 12, page_size=4,
                                                  page_hnd=hnd, **extra)),
            "extend": make_extend_inputs(Case.flat("kernel-extend", SPEC, "float32", (9, 4, 6), 12, n_new=(3, 0, 6),
                                                   page_size=4, page_hnd=hnd, **extra))}
        for entry, bundle in bundles.items():
            c = bundle.cache
            H, d_h, r = bundle.basis_k.shape
            P, page = c.shared_k.shape[:2]
            sizes = {"B": len(c.lengths), "H": H, "d_h": d_h, "r": r, "P": P, "page": page, "N": bundle.q.shape[0],
                     "max_pages": c.page_table.shape[1], "nnz": int(((c.lengths + page - 1) // page).sum())}
            for layout_row in order:
                layout = layout_row["`cache_layout`"].split()[0].strip("`")
                handed = bundle.in_layout(layout)
                names = _names(layout_row["paged decode: positional" if entry == "decode" else "extend: positional"])
                keywords = _names(layout_row["extend: keyword"]) if entry == "extend" else ()
                kwargs = handed.kwargs()
                assert set(kwargs) == {"scale", "rope", "key_scale", *keywords, *(("cache_scales",) if fp8 else ())}
                args = dict(zip(names, handed.args(), strict=True)) | {n: kwargs[n] for n in ("key_scale", *keywords)}
                if fp8:
                    args |= {f"cache_scales.{p}": t for p, t in kwargs["cache_scales"].tensors().items()}
                for name, t in args.items():
                    where = f"{layout} {entry} {name} (hnd={hnd}, fp8={fp8!r})"
                    found = [i for i, (n, r) in enumerate(rows) if name in n and layout in _layouts(r)]
                    assert len(found) == 1, f"{where}: {len(found)} rows of the doc's table"
                    row = rows[found[0]][1]
                    met.add((found[0], layout))
                    assert tuple(t.shape) == _shape(row["shape"], entry == "extend", sizes), where
                    dtypes = {"τ": torch.float32, "fp8": torch.float8_e4m3fn, "int32": torch.int32,
                              "int64": torch.int64, "float32": torch.float32}
                    kinds = row["dtype"].split(" or ")
                    assert t.dtype == dtypes["fp8" if fp8 and "fp8" in kinds else kinds[0]], where
                    memory = row["memory"].removesuffix(" or a view").rstrip(",")
                    assert memory in ("dense", "NHD or HND"), where
                    head_major = memory == "NHD or HND" and hnd
                    if view != "dense" and row["memory"].endswith("or a view"):  # a view of a larger allocation
                        assert t.stride(0) > math.prod(t.shape[1:]), where
                    else:
                        assert t.is_contiguous() != head_major, where
                    assert not head_major or t.stride(2) > t.stride(1), where
    every = {(i, layout) for i, (_, row) in enumerate(rows) for layout in _layouts(row)}
    assert every - met == set(), "rows of the doc's table no argument met"
