"""The per-rank decode step of a tensor-parallel layer, and how a user plugs in their own.

A TP layer is an object with three methods (`TPLayer` supplies the defaults):

    shard(weights, plan) -> Shard                              the rank's weights (shard.py)
    allocate(shard, batch, t_max, dtype) -> cache              the rank's cache (NaN-filled)
    step(shard, x_t [B, d], cache, positions [B], comm) -> (y [B, d], cache)

`step` owns its communication: the reference runs the rank's heads through the family's
reference `layer_step` over the local spec (attention local, no communication) and then
calls `comm.all_reduce(y)` once — the row-parallel output projection (Megatron's
RowParallelLinear). A plain function with `step`'s signature is accepted too
(`as_tp_layer`), and a backend may provide `tp_layer`; otherwise an lrkv backend's kernel
(`decode_attention`) or layer (`layer_step`) is run on each rank's shard (`tp_layer_for`).
"""

from __future__ import annotations

import math

import torch

from ..reference.dense import LayerCache
from ..reference.layers import layer_module
from ..reference.lrkv import append
from ..reference.mla import latent_decode_attention
from ..reference.mlra import MLRACache, project_token as mlra_project_token
from .shard import MLRAShard, Shard, shard_weights


class Comm:
    """The collective a step may use: a sum all-reduce over the TP group (counted)."""

    def __init__(self, group=None):
        import torch.distributed as dist

        self._dist, self.group = dist, group
        self.rank, self.world = dist.get_rank(group), dist.get_world_size(group)
        self.calls = 0  # all-reduces issued; the reference issues one per step

    def all_reduce(self, t: torch.Tensor) -> torch.Tensor:
        """Sum t over the ranks, in place; returns t."""
        self._dist.all_reduce(t, op=self._dist.ReduceOp.SUM, group=self.group)
        self.calls += 1
        return t


# ----------------------------------------------------------------------------- mlra
def mlra_local_step(shard: MLRAShard, x_t, cache: MLRACache, positions):
    """Σ over the rank's (branch, head) pairs of O_{b,h} W_O[h] / sqrt(n_b) — the rank's partial y."""
    spec = shard.spec
    d_h = spec.head_dim
    entries = mlra_project_token(shard, x_t, positions)  # the rank's latent and query heads
    append(cache, entries, positions)
    q = entries["q"]  # [B, H_p, d_h + d_rope]
    y = torch.zeros(x_t.shape[0], spec.d_model, dtype=x_t.dtype, device=x_t.device)
    for g in shard.groups:
        q_latent = torch.einsum("bhd,hcd->bhc", q[:, g.heads, :d_h], g.w_uk)  # qv_b = q_nope W_UK[b]^T
        q_pe = q[:, g.heads, d_h:] if spec.rope_dim else None
        o, _ = latent_decode_attention(q_latent, q_pe, cache.latent[:, :, g.latent], cache.k_rope, cache.lengths,
                                       scale=spec.scale)  # [B, n, d_c]
        y = y + torch.einsum("bhd,hde->be", torch.einsum("bhc,hcd->bhd", o, g.w_uv), g.w_o)
    return y / math.sqrt(spec.n_branches), cache


def allocate_mlra(shard: MLRAShard, batch: int, t_max: int, dtype: torch.dtype) -> MLRACache:
    s = shard.spec
    full = lambda *shape: torch.full(shape, float("nan"), dtype=dtype)  # noqa: E731
    return MLRACache(latent=full(batch, t_max, shard.kv_gain.shape[0], s.latent_dim),
                     lengths=torch.zeros(batch, dtype=torch.int32),
                     k_rope=full(batch, t_max, s.rope_dim) if s.rope_dim else None)


# ----------------------------------------------------------------------------- the reference
class TPLayer:
    """The reference TP layer: shard by the split rule, the family's reference step on the
    local spec, one all-reduce. `decode` / `layer_step` plug a backend's kernel or layer in
    (lrkv; `decode` also for mha/gqa/mqa, whose reference step takes one)."""

    name = "reference"

    def __init__(self, *, decode=None, layer_step=None):
        self.decode, self.layer_step = decode, layer_step

    def shard(self, weights, plan) -> Shard:
        return shard_weights(weights, plan)

    def allocate(self, shard: Shard, batch: int, t_max: int, dtype: torch.dtype) -> LayerCache:
        if shard.spec.family == "mlra":
            return allocate_mlra(shard.weights, batch, t_max, dtype)
        local = shard.weights.spec
        return layer_module(local).allocate_cache(local, batch, t_max, dtype)

    def local_step(self, shard: Shard, x_t, cache, positions):
        """The rank's partial output Σ_{h∈rank} out_h W_O[h]: attention is local, no communication."""
        if shard.spec.family == "mlra":
            return mlra_local_step(shard.weights, x_t, cache, positions)
        if self.layer_step is not None:
            return self.layer_step(shard.weights, x_t, cache, positions)
        fam = layer_module(shard.weights.spec)
        kw = {"decode": self.decode} if self.decode is not None else {}
        return fam.layer_step(shard.weights, x_t, cache, positions, **kw)

    def step(self, shard: Shard, x_t, cache, positions, comm: Comm):
        y, cache = self.local_step(shard, x_t, cache, positions)
        return comm.all_reduce(y), cache  # row-parallel W_O: one all-reduce


class FunctionTP(TPLayer):
    """A user's `step(shard, x_t, cache, positions, comm) -> (y, cache)` with the default
    sharding and allocation."""

    def __init__(self, fn):
        super().__init__()
        self.fn, self.name = fn, getattr(fn, "__name__", "step")

    def step(self, shard, x_t, cache, positions, comm):
        return self.fn(shard, x_t, cache, positions, comm)


def as_tp_layer(obj) -> TPLayer:
    """A TP layer from an object with `step` (missing `shard`/`allocate` taken from TPLayer), a
    class or zero-argument factory of one, or a bare step function."""
    if isinstance(obj, type):
        obj = obj()
    if hasattr(obj, "step"):
        if all(hasattr(obj, m) for m in ("shard", "allocate")):
            return obj
        base = TPLayer()
        layer = FunctionTP(obj.step)
        layer.shard = getattr(obj, "shard", base.shard)
        layer.allocate = getattr(obj, "allocate", base.allocate)
        layer.name = getattr(obj, "name", layer.name)
        return layer
    if callable(obj):
        return FunctionTP(obj)
    raise TypeError(f"a TP step must be a function step(shard, x_t, cache, positions, comm) or an object with "
                    f"step(...); got {type(obj).__name__}")


def tp_layer_for(backend, spec) -> TPLayer:
    """How `backend` runs one rank: its own `tp_layer`, else its kernel or layer on the shard."""
    own = getattr(backend, "tp_layer", None)
    if own is not None:
        return as_tp_layer(own)
    levels = getattr(backend, "levels", frozenset())
    if spec.family == "lrkv" and "kernel" in levels:
        return TPLayer(decode=backend.decode_attention)
    if spec.family == "lrkv" and "layer" in levels:
        return TPLayer(layer_step=backend.layer_step)
    raise TypeError(f"backend {getattr(backend, 'name', backend)!r} provides no TP step for family "
                    f"{spec.family!r}: give it a `tp_layer`, or the lrkv kernel/layer level")
