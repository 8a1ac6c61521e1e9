"""Deliberately broken paged-decode and extend backends: one classic bug each.

These are the bugs real paged / chunked-prefill kernels have had (FlashAttention's and
vLLM's block-table code, speculative-decoding verifiers). Each mutant runs the float64
reference math on what its buggy index arithmetic would read, so the ONLY difference from a
correct backend is the bug; the gate must reject every one (tests/mutants/test_paged.py), and a
clean run of a correct backend on the same cases must pass.

Paged decode (level kernel-paged): slot j of sequence b should come from flat row
    page_table[b, j // page] · page + j % page      of the [P · page, ...] page pool.
Extend (level kernel-extend): query i of sequence b sits at position
    p = lengths[b] − n_b + i and should see slots 0 … p.
Out-of-range reads wrap around the pool, as a kernel reading "somewhere else in the
allocation" would; they never leave it.
"""

from __future__ import annotations

from dataclasses import replace

import torch

from ..reference.cache import FactoredCache
from ..reference.contract import validate_cache_inputs
from ..reference.lrkv import attend, query_positions
from ..reference.rope import apply_rope, rope_freqs
from ..verify.protocol import BaseBackend



# ----------------------------------------------------------------------------- paged decode
def correct_rows(page_table: torch.Tensor, page: int, capacity: int) -> torch.Tensor:
    """Flat pool row of every logical slot: page_table[b, j // page] · page + j % page.  # [B, T]"""
    j = torch.arange(capacity, device=page_table.device)
    return page_table[:, j // page].long() * page + j % page


class PagedMutant(BaseBackend):
    """A paged-decode backend whose `rows` reads the pool at the wrong place (its `bug`)."""

    levels = frozenset({"kernel-paged"})
    dtypes = (torch.float64, torch.float32)
    bug = ""

    def rows(self, page_table, lengths, page: int, capacity: int) -> torch.Tensor:
        return correct_rows(page_table, page, capacity)

    def read_lengths(self, lengths, page: int, capacity: int, page_table) -> torch.Tensor:
        return lengths

    def attend(self, q, cache, basis_k, basis_v, *, scale, rope=None, cu_seqlens_q=None):
        validate_cache_inputs(q, cache, basis_k, basis_v, scale=scale, rope=rope)
        P, page, capacity, table = cache.num_pages, cache.page_size, cache.t_max, cache.page_table
        rows = self.rows(table, cache.lengths, page, capacity) % (P * page)  # [B, T], inside the pool
        pool = lambda t: None if t is None else t.reshape(P * page, *t.shape[2:])[rows]  # noqa: E731
        read = FactoredCache(*map(pool, cache.parts), self.read_lengths(cache.lengths, page, capacity, table),
                             pool(cache.key_scale))
        return attend(q, read, basis_k, basis_v, scale=scale, rope=rope)


class PageOffByOne(PagedMutant):
    name = "mutant-page-off-by-one"
    bug = "physical page index off by one: page_table[b, j // page] + 1"

    def rows(self, page_table, lengths, page, capacity):
        return correct_rows(page_table, page, capacity) + page


class WrongPageSizeOffset(PagedMutant):
    name = "mutant-wrong-page-size-offset"
    bug = "row offset computed with the wrong page size: page_table[b, j // page] · (page + 1) + j % page"

    def rows(self, page_table, lengths, page, capacity):
        j = torch.arange(capacity, device=page_table.device)
        return page_table[:, j // page].long() * (page + 1) + j % page


class OtherSequencePages(PagedMutant):
    name = "mutant-other-sequence-pages"
    bug = "follows the next sequence's page-table row: page_table[(b + 1) % B, j // page]"

    def rows(self, page_table, lengths, page, capacity):
        return correct_rows(page_table.roll(-1, 0), page, capacity)


class ReadsPastLastPage(PagedMutant):
    name = "mutant-reads-past-last-page"
    bug = "loop bound cdiv(length, page) + 1 pages: reads the whole page past the last one"

    def read_lengths(self, lengths, page, capacity, page_table):
        return ((-(-lengths // page) + 1) * page).clamp(max=capacity).to(lengths.dtype)


# ----------------------------------------------------------------------------- extend
class ExtendMutant(BaseBackend):
    """An extend backend whose `visible` slot counts or queries are wrong (its `bug`).

    Each query n is a decode over the first visible[n] slots of its sequence (correct:
    position + 1)."""

    levels = frozenset({"kernel-extend"})
    dtypes = (torch.float64, torch.float32)
    bug = ""

    def visible(self, cu_seqlens_q, lengths) -> torch.Tensor:
        return query_positions(cu_seqlens_q, lengths)[1] + 1

    def queries(self, q, cu_seqlens_q, lengths, rope) -> torch.Tensor:
        return q

    def attend(self, q, cache, basis_k, basis_v, *, scale, rope=None, cu_seqlens_q=None):
        validate_cache_inputs(q, cache, basis_k, basis_v, scale=scale, rope=rope, cu_seqlens_q=cu_seqlens_q)
        lengths, full = cache.lengths, cache.gather()
        seq, _ = query_positions(cu_seqlens_q, lengths)
        per_query = replace(full, lengths=self.visible(cu_seqlens_q, lengths),  # [N, T, ...] each query's sequence
                            **{n: t[seq] for n, t in full.tensors().items()})
        return attend(self.queries(q, cu_seqlens_q, lengths, rope), per_query, basis_k, basis_v, scale=scale,
                      rope=rope)


class CausalOffByOne(ExtendMutant):
    name = "mutant-causal-off-by-one"
    bug = "causal mask j <= p + 1 inside a chunk: each query but the last also sees the next token"

    def visible(self, cu_seqlens_q, lengths):
        seq, pos = query_positions(cu_seqlens_q, lengths)
        return torch.minimum(pos + 2, lengths.long()[seq])


class RopeAtLastPosition(ExtendMutant):
    name = "mutant-rope-last-position"
    bug = "every query of a chunk rotated for the chunk's last position (a decode kernel's RoPE reused)"

    def queries(self, q, cu_seqlens_q, lengths, rope):
        if rope is None:  # no RoPE in the kernel: nothing to get wrong
            return q
        seq, pos = query_positions(cu_seqlens_q, lengths)
        last = lengths.long()[seq] - 1
        return apply_rope(q, (last - pos)[:, None], rope_freqs(q.shape[-1], rope.theta))  # rotations add


class CuSeqlensAsLengths(ExtendMutant):
    name = "mutant-cu-seqlens-as-lengths"
    bug = "cu_seqlens_q[b + 1] read as n_b (the cumulative count, not the difference)"

    def visible(self, cu_seqlens_q, lengths):
        seq, pos = query_positions(cu_seqlens_q, lengths)
        return (pos - cu_seqlens_q.long()[seq] + 1).clamp(min=1)  # p = lengths[b] − cu[b+1] + i


PAGED_MUTANTS = (PageOffByOne, WrongPageSizeOffset, OtherSequencePages, ReadsPastLastPage)
EXTEND_MUTANTS = (CausalOffByOne, RopeAtLastPosition, CuSeqlensAsLengths)
ALL_PAGED_EXTEND_MUTANTS = PAGED_MUTANTS + EXTEND_MUTANTS
