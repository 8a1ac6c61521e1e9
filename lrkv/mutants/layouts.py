"""Deliberately broken paged-decode backends of the server cache layouts
(`lrkv.reference.cache_layouts`): one layout-handling bug each — the bugs that live in the
conversion code a user would otherwise write and never test (last-page lengths, the null
block, stride orders, CSR offsets, fused-row offsets, pitches taken from shapes). Each reads its layout back the way
its bug would and runs the reference math on that, so the ONLY difference from a correct
backend of the layout (`LayoutBackend`, which passes) is the bug; `lrkv verify` and the gate
must reject every one (tests/mutants/test_layouts.py).
"""

from __future__ import annotations

import math

import torch

from ..reference.cache_layouts import ADAPTERS, fused_rows
from ..reference.fp8 import PARTS
from ..reference.lrkv import attend
from ..verify.protocol import BaseBackend


class LayoutBackend(BaseBackend):
    """A correct backend of `cache_layout`: its layout read back (the adapter's `read`), then
    the reference decode. Subclasses plant one bug in `misread`."""

    name = "layout-reference"
    levels = frozenset({"kernel-paged", "kernel-extend"})
    dtypes = (torch.float64, torch.float32)
    cache_layout = "vllm-blocks"
    bug = ""

    def misread(self, args: dict) -> dict:
        return args

    def paged_decode_attention(self, *args, scale, key_scale=None, rope=None, cache_scales=None):
        return self._attend("DECODE", args, scale=scale, rope=rope, key_scale=key_scale, cache_scales=cache_scales)

    def extend_attention(self, *args, scale, key_scale=None, rope=None, cache_scales=None, **layout_kw):
        return self._attend("EXTEND", args, scale=scale, rope=rope, key_scale=key_scale, cache_scales=cache_scales,
                            **layout_kw)

    def _attend(self, signature: str, args: tuple, *, scale, rope, **keywords):
        adapter = ADAPTERS[self.cache_layout]
        laid = self.misread(dict(zip(getattr(adapter, signature), args)) | keywords)
        H, _, r = laid["basis_k"].shape
        cache = adapter.read(laid, H, r) if adapter is fused_rows else adapter.read(laid)
        return attend(laid["q"], cache, laid["basis_k"], laid["basis_v"], scale=scale, rope=rope,
                      cu_seqlens_q=laid.get("cu_seqlens_q"))


class LayoutMutant(LayoutBackend):
    levels = frozenset({"kernel-paged"})  # one bug, shown at paged decode


class LastPageOffByOne(LayoutMutant):
    name = "mutant-last-page-off-by-one"
    cache_layout = "flashinfer-csr"
    bug = "kv_last_page_len − 1 rows read from each last page (a length of 1 … page taken as 0 … page − 1)"

    def misread(self, args):
        return args | {"kv_last_page_len": (args["kv_last_page_len"] - 1).clamp(min=0)}


class IndptrAsPageCounts(LayoutMutant):
    name = "mutant-indptr-as-page-counts"
    cache_layout = "flashinfer-csr"
    bug = "kv_indptr[b + 1] read as sequence b's page count (the cumulative offset, not the difference)"

    def misread(self, args):
        nnz = len(args["kv_indices"])
        counts = args["kv_indptr"][1:].long()
        wrong = torch.cat([counts.new_zeros(1), counts.cumsum(0)]).clamp(max=nnz)  # inside kv_indices
        return args | {"kv_indptr": wrong.to(torch.int32)}


class NullBlockForEmpty(LayoutMutant):
    name = "mutant-null-block-for-empty"
    cache_layout = "vllm-blocks"
    bug = "an empty sequence reads one token of its first block-table entry: the null block"

    def misread(self, args):
        return args | {"seq_lens": args["seq_lens"].clamp(min=1)}


def _latents_addressed(args, head_major: bool):
    """The latent pools [N, bs, H, r] with their dense memory addressed as head-major
    [N, H, bs, r] or token-major, whatever their strides say."""
    def view(t):
        N, bs, H, r = t.shape
        strides = (H * bs * r, r, bs * r, 1) if head_major else (bs * H * r, H * r, r, 1)
        return torch.as_strided(t, t.shape, strides, t.storage_offset())
    return args | {p: view(args[p]) for p in ("latent_k", "latent_v")}


class NhdReadAsHnd(LayoutMutant):
    name = "mutant-nhd-read-as-hnd"
    cache_layout = "vllm-blocks"
    bug = "latent pools addressed as head-major [N, H, bs, r] whatever their stride order"

    def misread(self, args):
        return _latents_addressed(args, head_major=True)


class HndReadAsNhd(LayoutMutant):
    name = "mutant-hnd-read-as-nhd"
    cache_layout = "vllm-blocks"
    bug = "latent pools addressed as token-major [N, bs, H, r] whatever their stride order"

    def misread(self, args):
        return _latents_addressed(args, head_major=False)


def _pitch_from_shape(t: torch.Tensor, *inner: int) -> torch.Tensor:
    """t [P, …] addressed with a block pitch of prod(shape[1:]) and `inner` strides (t's own
    when none): the strides of a dense pool, whatever t's are."""
    strides = (math.prod(t.shape[1:]), *(inner or t.stride()[1:]))
    return torch.as_strided(t, t.shape, strides, t.storage_offset())


class BlockPitchFromShape(LayoutMutant):
    name = "mutant-block-pitch-from-shape"
    cache_layout = "vllm-blocks"
    bug = "a block's pitch taken from the pool's shape, not its stride (wrong when K and V interleave per block)"

    def misread(self, args):
        return args | {p: _pitch_from_shape(args[p]) for p in PARTS}


class RowPitchFromWidth(LayoutMutant):
    name = "mutant-row-pitch-from-width"
    cache_layout = "fused-rows"
    bug = "the fused row's pitch taken as 2·d_h + 2·H·r, not the tensor's stride (wrong on rows padded for alignment)"

    def misread(self, args):
        rows = args["kv_rows"]
        return args | {"kv_rows": _pitch_from_shape(rows, rows.shape[-1], 1)}


class FusedPartsSwapped(LayoutMutant):
    name = "mutant-fused-parts-swapped"
    cache_layout = "fused-rows"
    bug = "fused row read as [shared_k | latent_k | shared_v | latent_v]: shared V and latent K offsets swapped"

    def misread(self, args):
        H, d, r = args["basis_k"].shape
        sk, lk, sv, lv = args["kv_rows"].split((d, H * r, d, H * r), dim=-1)
        return args | {"kv_rows": torch.cat([sk, sv, lk, lv], dim=-1)}


LAYOUT_MUTANTS = (LastPageOffByOne, IndptrAsPageCounts, NullBlockForEmpty, NhdReadAsHnd, HndReadAsNhd,
                  BlockPitchFromShape, RowPitchFromWidth, FusedPartsSwapped)
