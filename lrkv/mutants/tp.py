"""Wrong tensor-parallel LRKV layers that a TP check must reject.

Each is a plausible bug of a hand-written TP layer, built from the reference step:

    foreign-basis        a rank loads another rank's head slice of B_h (K and V): rank p's
                         local head i uses B of head (first head of rank p+1) + i, mod H
    sharded-shared       W_shared and the shared cache split column-wise over the ranks like a
                         column-parallel linear, instead of replicated: each rank keeps d_h/P
                         columns (fewer bytes than the formula) and attends with zeros elsewhere
    missing-allreduce    the row-parallel output projection without its all-reduce: every rank
                         returns only its partial sum
    double-count-shared  the shared-value part a_h S_V W_O is all-reduced on its own and then
                         again inside the final all-reduce: P copies of it reach y

Each is also a backend for the harness level `tp` (name `tp-<mutant>`), e.g.
`lrkv verify --tp 2 --backend lrkv.mutants.tp:foreign_basis` must fail.
"""

from __future__ import annotations

import torch

from ..distributed.partition import plan_rank, split_blocks
from ..distributed.shard import Shard, shard_lrkv
from ..distributed.steps import TPLayer
from ..reference.cache import FactoredCache
from ..reference.lrkv import append, decode_attention, decode_rope, project_token
from ..verify.protocol import BaseBackend


class ForeignBasis(TPLayer):
    name = "foreign-basis"

    def shard(self, weights, plan) -> Shard:
        H = weights.spec.n_heads
        first = plan_rank(weights.spec, plan.tp, (plan.rank + 1) % plan.tp).heads[0]
        wrong = [(first + i) % H for i in range(len(plan.heads))]
        return Shard(weights.spec, plan, shard_lrkv(weights, plan, basis_heads=wrong))


class ShardedShared(TPLayer):
    name = "sharded-shared"

    def shard(self, weights, plan) -> Shard:
        shard = super().shard(weights, plan)
        d_h = weights.spec.head_dim
        self.cols = torch.tensor(split_blocks(list(range(d_h)), plan.tp)[plan.rank], dtype=torch.long)
        w = shard.weights
        for name in ("w_shared_k", "w_shared_v"):  # keep only this rank's columns
            full = getattr(w, name)
            kept = torch.zeros_like(full)
            kept[:, self.cols] = full[:, self.cols]
            setattr(w, name, kept)
        return shard

    def allocate(self, shard, batch, t_max, dtype) -> FactoredCache:
        cache = super().allocate(shard, batch, t_max, dtype)
        narrow = torch.full((batch, t_max, len(self.cols)), float("nan"), dtype=dtype)
        cache.shared_k, cache.shared_v = narrow, narrow.clone()
        return cache

    def local_step(self, shard, x_t, cache, positions):
        w = shard.weights
        entries = project_token(w, x_t, positions)
        entries["shared_k"] = entries["shared_k"][..., self.cols]
        entries["shared_v"] = entries["shared_v"][..., self.cols]
        append(cache, entries, positions)

        def widen(t):  # [B, T, d_h/P] -> [B, T, d_h], zeros in the other ranks' columns
            out = torch.zeros(*t.shape[:2], w.spec.head_dim, dtype=t.dtype)
            out[..., self.cols] = t
            return out

        out, _ = decode_attention(entries["q"], widen(cache.shared_k), widen(cache.shared_v), cache.latent_k,
                                  cache.latent_v, w.basis_k, w.basis_v, cache.lengths, scale=w.spec.head_dim ** -0.5,
                                  key_scale=cache.key_scale, rope=decode_rope(w.spec))
        return torch.einsum("bhd,hde->be", out, w.w_o), cache


class MissingAllReduce(TPLayer):
    name = "missing-allreduce"

    def step(self, shard, x_t, cache, positions, comm):
        return self.local_step(shard, x_t, cache, positions)  # partial sums left on each rank


class DoubleCountShared(TPLayer):
    name = "double-count-shared"

    def step(self, shard, x_t, cache, positions, comm):
        w = shard.weights
        entries = project_token(w, x_t, positions)
        append(cache, entries, positions)
        args = [entries["q"], cache.shared_k, cache.shared_v, cache.latent_k, cache.latent_v, w.basis_k, w.basis_v,
                cache.lengths]
        kw = dict(scale=w.spec.head_dim ** -0.5, key_scale=cache.key_scale, rope=decode_rope(w.spec))
        out, _ = decode_attention(*args, **kw)
        args[4] = torch.zeros_like(cache.latent_v)  # a_h S_V alone: the weights a_h depend on keys only
        shared, _ = decode_attention(*args, **kw)
        y_shared = comm.all_reduce(torch.einsum("bhd,hde->be", shared, w.w_o))
        y = y_shared + torch.einsum("bhd,hde->be", out - shared, w.w_o)
        return comm.all_reduce(y), cache


MUTANTS: dict[str, type[TPLayer]] = {
    m.name: m for m in (ForeignBasis, ShardedShared, MissingAllReduce, DoubleCountShared)
}


class MutantBackend(BaseBackend):
    """A harness backend whose TP layer is one of the mutants (it has no single-device kernel)."""

    levels = frozenset({"kernel"})  # the level the `tp` case level needs
    dtypes = (torch.float64, torch.float32, torch.bfloat16, torch.float16)

    def __init__(self, mutant: str):
        self.name = f"tp-{mutant}"
        self.description = f"TP mutant: {mutant} (must be rejected)"
        self.tp_layer = MUTANTS[mutant]()


foreign_basis = MutantBackend("foreign-basis")
sharded_shared = MutantBackend("sharded-shared")
missing_allreduce = MutantBackend("missing-allreduce")
double_count_shared = MutantBackend("double-count-shared")
