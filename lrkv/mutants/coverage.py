"""Broken backends that only a feature reaches: coverage, not a tolerance, must catch them.

Each is correct on most of the grid and wrong only where one feature is exercised — a page
size that is not a power of two, a page shared by two sequences, RoPE or QK-norm past 100
tokens, a batch of 16 or more, heads wider than 128 — the code paths real kernels switch on.
The two paged ones also decline exact RoPE and QK-norm, as a first paged kernel would: the
grid's twins (verify/twins.py) must still bring every paging feature to them
(tests/verify/test_coverage.py rejects each through `lrkv verify` + `lrkv gate`).
"""

from __future__ import annotations

import abc
import math

import torch

from .decode import Mutant
from .paged import PagedMutant

DRIFT = 1.05  # the decode mutants' outputs are 5 % off where their feature is exercised
LONG_TOKENS = 100
BIG_BATCH = 16
WIDE_HEAD = 128


class _NoExactRopeNoQkNorm:
    """A first paged kernel: rope='none' only (aligned/latent reach it as cache values), no QK-norm."""

    def supports(self, case) -> tuple[bool, str]:
        if case.spec.rope == "exact" or case.spec.qk_norm:
            return False, "exact RoPE and QK-norm are not implemented"
        return True, ""


class PowerOfTwoPages(_NoExactRopeNoQkNorm, PagedMutant):
    name = "mutant-power-of-two-pages"
    bug = "page and row computed with a shift and a mask, as if the page size were a power of two"

    def rows(self, page_table, lengths, page, capacity):
        shift = int(math.log2(page))  # floor: page 7 is treated as 4
        j = torch.arange(capacity, device=page_table.device)
        pages = (j >> shift) % page_table.shape[1]  # past the table: somewhere else in the allocation
        return page_table[:, pages].long() * page + (j & ((1 << shift) - 1))


class SharedPageFirstOwner(_NoExactRopeNoQkNorm, PagedMutant):
    name = "mutant-shared-page-first-owner"
    bug = "a physical page in several sequences' page tables is attended only by the first sequence using it"

    def _owned(self, page_table, lengths, page: int, capacity: int) -> tuple[torch.Tensor, torch.Tensor]:
        """Each sequence's pool rows with the pages an earlier sequence listed left out, and how many."""
        owned: set[int] = set()
        rows, kept = [], []
        for b in range(page_table.shape[0]):
            n = int(lengths[b])
            mine = [int(page_table[b, i]) for i in range(-(-n // page))]
            slots = [p * page + o for i, p in enumerate(mine) for o in range(page)
                     if i * page + o < n and p not in owned]  # a page seen earlier is skipped
            owned.update(mine)
            kept.append(len(slots))
            rows.append(slots + [0] * (capacity - len(slots)))
        return torch.tensor(rows, dtype=torch.long), torch.tensor(kept)  # [B, capacity], [B]

    def rows(self, page_table, lengths, page, capacity):
        return self._owned(page_table, lengths, page, capacity)[0]

    def read_lengths(self, lengths, page, capacity, page_table):  # the kept slots are packed at the front
        return self._owned(page_table, lengths, page, capacity)[1].to(lengths.dtype)


class _Drift(Mutant, abc.ABC):
    """Correct decode, with out ×DRIFT where `drifts` says so (a second code path gone wrong)."""

    dtypes = (torch.float64, torch.float32)

    @abc.abstractmethod
    def drifts(self, q, shared_k, lengths, key_scale, rope) -> bool:
        """Whether this call takes the broken path."""

    def attend(self, q, cache, basis_k, basis_v, *, scale, rope=None, cu_seqlens_q=None):
        out, lse = super().attend(q, cache, basis_k, basis_v, scale=scale, rope=rope)
        if self.drifts(q, cache.shared_k, cache.lengths, cache.key_scale, rope):
            out = out * DRIFT
        return out, lse


class LongRopeDrift(_Drift):
    name = "mutant-long-rope-drift"
    bug = f"5 % off with RoPE or QK-norm past {LONG_TOKENS} tokens (a long-context path with its own scaling)"

    def drifts(self, q, shared_k, lengths, key_scale, rope):
        return (rope is not None or key_scale is not None) and int(lengths.max()) > LONG_TOKENS


class BigBatchDrift(_Drift):
    name = "mutant-big-batch-drift"
    bug = f"5 % off at batch >= {BIG_BATCH} (the launch path without split-K)"

    def drifts(self, q, shared_k, lengths, key_scale, rope):
        return q.shape[0] >= BIG_BATCH


class WideHeadDrift(_Drift):
    name = "mutant-wide-head-drift"
    bug = f"5 % off at head_dim > {WIDE_HEAD} (a second register tiling)"

    def drifts(self, q, shared_k, lengths, key_scale, rope):
        return q.shape[-1] > WIDE_HEAD


PAGED_COVERAGE_MUTANTS = (PowerOfTwoPages, SharedPageFirstOwner)
DECODE_COVERAGE_MUTANTS = (LongRopeDrift, BigBatchDrift, WideHeadDrift)
COVERAGE_MUTANTS = PAGED_COVERAGE_MUTANTS + DECODE_COVERAGE_MUTANTS
