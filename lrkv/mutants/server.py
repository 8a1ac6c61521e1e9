"""Backends that pass the tolerance rule on fresh tensors and break a server: each server
property (verify/server_properties.py) must reject its mutant through `lrkv verify` and `lrkv gate`.

All are the tiled split-K decoder (verify/tiled.py) with one server bug planted:

  PointerCache        returns the result cached for the same data pointers (stale on reuse)
  UnwrittenHead       an output from torch.empty with head 0 never written — in memory just
                      freed by a correct result, so the plain call usually looks right
  RotatesCache        negates the shared key cache in place after computing the answer
  RandomOrder         declares deterministic = True; each call draws a new split count at random
  BatchDependentSplit declares batch_invariant = True; its split count is the batch size + 1
  BatchSizeRule, TotalTokensRule, LongestRule
                      declare batch_invariant = True; two splits or one by the parity of the
                      batch size, of its total tokens, of its longest length (BATCH_RULE_MUTANTS)
  GraphBreaks         declares compile_safe = True; reads a tensor value in Python mid-call
"""

from __future__ import annotations

import random

import torch

from ..verify.tiled import TiledBackend


class PointerCache(TiledBackend):
    name = "mutant-pointer-cache"
    description = "tiled decode that caches its result by the inputs' data pointers"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._cache: dict[tuple, tuple] = {}

    def attend(self, q, cache, *args, **kw):
        key = tuple(t.data_ptr() for t in (q, *cache.parts, cache.lengths))
        if key not in self._cache:  # the graph-replay bug: same pointers, so "same inputs"
            out, lse = super().attend(q, cache, *args, **kw)
            self._cache[key] = (out.clone(), lse.clone())
        out, lse = self._cache[key]
        return out.clone(), lse.clone()


class UnwrittenHead(TiledBackend):
    name = "mutant-unwritten-head"
    description = "tiled decode into a torch.empty output whose head 0 is never written"

    def attend(self, *args, **kw):
        out, lse = super().attend(*args, **kw)
        answer = out.clone()  # a correct result, freed just before the output is allocated:
        del answer  # the allocator tends to hand the same block back, right answer included
        res = torch.empty_like(out)
        res[:, 1:] = out[:, 1:]  # head 0 left as the memory was
        return res, lse


class RotatesCache(TiledBackend):
    name = "mutant-rotates-cache"
    description = "tiled decode that negates the shared key cache in place after reading it"

    def attend(self, q, cache, *args, **kw):
        out, lse = super().attend(q, cache, *args, **kw)
        cache.shared_k.neg_()  # the server's cache, corrupted for the next step
        return out, lse


class RandomOrder(TiledBackend):
    name = "mutant-random-order"
    description = "tiled decode whose split count (so its reduction order) is drawn at random per call"
    deterministic = True
    ORDERS = (1, 2, 3, 5, 7)

    def attend(self, *args, **kw):
        # drawn among the counts other than the last one: a free draw repeats one call in five,
        # and a mutant the tests reject only sometimes is no test
        self.decoder.splits = random.choice([s for s in self.ORDERS if s != self.decoder.splits])
        return super().attend(*args, **kw)


class BatchDependentSplit(TiledBackend):
    name = "mutant-batch-split"
    description = "tiled decode whose split count grows with the batch"
    batch_invariant = True

    def attend(self, q, *args, **kw):
        self.decoder.splits = q.shape[0] + 1
        return super().attend(q, *args, **kw)


class _RuleSplit(TiledBackend):
    """Declares batch_invariant = True; its split count follows a rule on the batch (`key`), as
    a scheduler balancing the batch's work over the SMs does. Each rule gives the same count on
    the batch reversed and on the longest sequence alone — the two variants checked before."""

    batch_invariant = True

    def key(self, q, lengths) -> int:
        raise NotImplementedError

    def attend(self, q, cache, *args, **kw):
        self.decoder.splits = 1 + self.key(q, cache.lengths) % 2
        return super().attend(q, cache, *args, **kw)


class BatchSizeRule(_RuleSplit):
    name = "mutant-batch-size-rule"
    description = "tiled decode with two splits for an even batch size, one for an odd one"

    def key(self, q, lengths) -> int:
        return q.shape[0]


class TotalTokensRule(_RuleSplit):
    name = "mutant-total-tokens-rule"
    description = "tiled decode whose split count follows the parity of the batch's total tokens"

    def key(self, q, lengths) -> int:
        return int(lengths.sum())


class LongestRule(_RuleSplit):
    name = "mutant-longest-rule"
    description = "tiled decode whose split count follows the parity of the batch's longest sequence"

    def key(self, q, lengths) -> int:
        return int(lengths.max()) if lengths.numel() else 0


class GraphBreaks(TiledBackend):
    name = "mutant-graph-breaks"
    description = "tiled decode that reads a tensor value in Python (a graph break under fullgraph)"
    compile_safe = True

    def attend(self, q, *args, **kw):
        if float(q.abs().max()) > 1e30:  # data-dependent Python control flow
            q = q / 2
        return super().attend(q, *args, **kw)


SERVER_MUTANTS = {"same_buffers": PointerCache, "outputs_written": UnwrittenHead, "inputs_untouched": RotatesCache,
                  "deterministic": RandomOrder, "batch_invariant": BatchDependentSplit, "compiles": GraphBreaks}
# split-count rules a batch-invariant kernel must not have: each must fail batch_invariant
BATCH_RULE_MUTANTS = {"batch size": BatchSizeRule, "total tokens": TotalTokensRule, "longest sequence": LongestRule}
