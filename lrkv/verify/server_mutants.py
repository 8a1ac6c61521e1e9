"""Backends that pass the tolerance rule on fresh tensors and break a server: each server
property (server_properties.py) must reject its mutant through `lrkv verify` and `lrkv gate`.

All are the tiled split-K decoder (tiled.py) with one server bug planted:

  PointerCache        returns the result cached for the same data pointers (stale on reuse)
  UnwrittenHead       an output from torch.empty with head 0 never written — in memory just
                      freed by a correct result, so the plain call usually looks right
  RotatesCache        negates the shared key cache in place after computing the answer
  RandomOrder         declares deterministic = True; each call draws a new split count at random
  BatchDependentSplit declares batch_invariant = True; its split count is the batch size + 1
  GraphBreaks         declares compile_safe = True; reads a tensor value in Python mid-call
"""

from __future__ import annotations

import random

import torch

from .tiled import TiledBackend


class PointerCache(TiledBackend):
    name = "mutant-pointer-cache"
    description = "tiled decode that caches its result by the inputs' data pointers"

    def __init__(self, *a, **kw):
        super().__init__(*a, **kw)
        self._cache: dict[tuple, tuple] = {}

    def decode_attention(self, q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, **kw):
        key = tuple(t.data_ptr() for t in (q, shared_k, shared_v, latent_k, latent_v, lengths))
        if key not in self._cache:  # the graph-replay bug: same pointers, so "same inputs"
            out, lse = super().decode_attention(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v,
                                                lengths, **kw)
            self._cache[key] = (out.clone(), lse.clone())
        out, lse = self._cache[key]
        return out.clone(), lse.clone()


class UnwrittenHead(TiledBackend):
    name = "mutant-unwritten-head"
    description = "tiled decode into a torch.empty output whose head 0 is never written"

    def decode_attention(self, *args, **kw):
        out, lse = super().decode_attention(*args, **kw)
        answer = out.clone()  # a correct result, freed just before the output is allocated:
        del answer  # the allocator tends to hand the same block back, right answer included
        res = torch.empty_like(out)
        res[:, 1:] = out[:, 1:]  # head 0 left as the memory was
        return res, lse


class RotatesCache(TiledBackend):
    name = "mutant-rotates-cache"
    description = "tiled decode that negates the shared key cache in place after reading it"

    def decode_attention(self, q, shared_k, *args, **kw):
        out, lse = super().decode_attention(q, shared_k, *args, **kw)
        shared_k.neg_()  # the server's cache, corrupted for the next step
        return out, lse


class RandomOrder(TiledBackend):
    name = "mutant-random-order"
    description = "tiled decode whose split count (so its reduction order) is drawn at random per call"
    deterministic = True
    ORDERS = (1, 2, 3, 5, 7)

    def decode_attention(self, *args, **kw):
        # drawn among the counts other than the last one: a free draw repeats one call in five,
        # and a mutant the tests reject only sometimes is no test
        self.decoder.splits = random.choice([s for s in self.ORDERS if s != self.decoder.splits])
        return super().decode_attention(*args, **kw)


class BatchDependentSplit(TiledBackend):
    name = "mutant-batch-split"
    description = "tiled decode whose split count grows with the batch"
    batch_invariant = True

    def decode_attention(self, q, *args, **kw):
        self.decoder.splits = q.shape[0] + 1
        return super().decode_attention(q, *args, **kw)


class GraphBreaks(TiledBackend):
    name = "mutant-graph-breaks"
    description = "tiled decode that reads a tensor value in Python (a graph break under fullgraph)"
    compile_safe = True

    def decode_attention(self, q, *args, **kw):
        if float(q.abs().max()) > 1e30:  # data-dependent Python control flow
            q = q / 2
        return super().decode_attention(q, *args, **kw)


SERVER_MUTANTS = {"same_buffers": PointerCache, "outputs_written": UnwrittenHead, "inputs_untouched": RotatesCache,
                  "deterministic": RandomOrder, "batch_invariant": BatchDependentSplit, "compiles": GraphBreaks}
