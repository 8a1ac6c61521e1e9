"""Cut a layer's float64 reference weights into one rank's shard (partition.py's rule).

For lrkv, mla and dense the shard is the family's own weights object over a *local spec*
(n_heads = the rank's heads, d_model unchanged), so the reference `layer_step` of
`lrkv.reference` runs the rank's part unchanged: its output projection over the local rows of
W_O is exactly the row-parallel partial sum Σ_{h∈rank} out_h W_O[h]. Replicated blocks
(lrkv's W_shared, mla's W_KV_A, mlra's k_pe columns) are copied whole.

mlra has no local spec (a rank computes (branch, head) pairs, not whole heads), so its shard
is an `MLRAShard` of per-(branch, latent) groups, run by `steps.MLRARankStep`.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..reference.dense import DenseWeights
from ..reference.mla import MLAWeights
from ..reference.mlra import MLRAWeights, latent_of_head
from ..reference.weights import LRKVWeights
from ..spec import AttentionSpec
from .partition import RankPlan


@dataclass
class Shard:
    """One rank's part of a layer."""

    spec: AttentionSpec  # the FULL layer's spec
    plan: RankPlan
    weights: object  # lrkv/mla/dense: family weights over the local spec; mlra: MLRAShard


@dataclass
class MLRAGroup:
    """The heads of one branch that read one latent head held on this rank."""

    branch: int  # b
    latent: int  # index into this rank's cached latent heads
    heads: torch.Tensor  # [n] int64, indices into the rank's local query heads
    w_uk: torch.Tensor  # [n, d_c, d_h]  W_UK[b, h]
    w_uv: torch.Tensor  # [n, d_c, d_h]  W_UV[b, h]
    w_o: torch.Tensor  # [n, d_h, d]    W_O[h] (row-parallel)


@dataclass
class MLRAShard:
    spec: AttentionSpec  # the full spec (norm_eps, scale, sizes)
    w_q: torch.Tensor  # [d, H_p, d_h + d_rope]  the rank's local query heads
    w_kv_a: torch.Tensor  # [d, L_p·d_c + d_rope]   its latent heads' columns + the k_pe columns
    kv_gain: torch.Tensor  # [L_p, d_c]
    groups: list[MLRAGroup]

    @property
    def dtype(self) -> torch.dtype:
        return self.w_q.dtype


def _idx(ids) -> torch.Tensor:
    return torch.tensor(list(ids), dtype=torch.long)


def _opt(t: torch.Tensor | None, hs: torch.Tensor) -> torch.Tensor | None:
    return None if t is None else t[hs].clone()


def shard_lrkv(weights: LRKVWeights, plan: RankPlan, *, basis_heads=None) -> LRKVWeights:
    """The rank's heads of W_Q, U_h, B_h, W_O; W_shared replicated. `basis_heads` overrides which
    heads' B_h are taken (only the foreign-basis mutant uses it)."""
    hs = _idx(plan.heads)
    bs = hs if basis_heads is None else _idx(basis_heads)
    local = weights.spec.replace(n_heads=len(plan.heads))
    return LRKVWeights(
        local, weights.w_q[:, hs].clone(), weights.w_shared_k.clone(), weights.w_shared_v.clone(),
        weights.u_k[hs].clone(), weights.u_v[hs].clone(), weights.basis_k[bs].clone(), weights.basis_v[bs].clone(),
        weights.w_o[hs].clone(), _opt(weights.q_gain, hs), _opt(weights.k_gain, hs), _opt(weights.latent_freqs, bs),
    )


def shard_mla(weights: MLAWeights, plan: RankPlan) -> MLAWeights:
    hs = _idx(plan.heads)
    local = weights.spec.replace(n_heads=len(plan.heads))
    kv_gain = None if weights.kv_gain is None else weights.kv_gain.clone()
    return MLAWeights(local, weights.w_q[:, hs].clone(), weights.w_kv_a.clone(), weights.w_uk[hs].clone(),
                      weights.w_uv[hs].clone(), weights.w_o[hs].clone(), kv_gain)


def shard_dense(weights: DenseWeights, plan: RankPlan) -> DenseWeights:
    hs, kv = _idx(plan.heads), _idx(plan.kv_heads)
    # gqa over the local heads: it accepts any n_kv dividing H, including 1 and H
    local = weights.spec.replace(family="gqa", n_heads=len(plan.heads), n_kv_heads=len(plan.kv_heads))
    return DenseWeights(local, weights.w_q[:, hs].clone(), weights.w_k[:, kv].clone(), weights.w_v[:, kv].clone(),
                        weights.w_o[hs].clone(), _opt(weights.q_gain, hs), _opt(weights.k_gain, kv))


def shard_mlra(weights: MLRAWeights, plan: RankPlan) -> MLRAShard:
    spec = weights.spec
    d_c, L = spec.latent_dim, spec.n_latent_heads
    owner = latent_of_head(L, spec.n_branches, spec.n_heads)  # [n_b, H]
    cols = [c for latent in plan.latent_heads for c in range(latent * d_c, (latent + 1) * d_c)]
    cols += list(range(L * d_c, L * d_c + spec.rope_dim))  # k_pe: replicated
    local_of = {h: i for i, h in enumerate(plan.heads)}
    groups = []
    for b in range(spec.n_branches):
        for li, latent in enumerate(plan.latent_heads):
            heads = [h for (bb, h) in plan.pairs if bb == b and int(owner[b, h]) == latent]
            if heads:
                hs = _idx(heads)
                groups.append(MLRAGroup(b, li, _idx(local_of[h] for h in heads), weights.w_uk[b, hs].clone(),
                                        weights.w_uv[b, hs].clone(), weights.w_o[hs].clone()))
    return MLRAShard(spec, weights.w_q[:, _idx(plan.heads)].clone(), weights.w_kv_a[:, _idx(cols)].clone(),
                     weights.kv_gain[_idx(plan.latent_heads)].clone(), groups)


def shard_weights(weights, plan: RankPlan) -> Shard:
    """The rank's shard of a family's reference weights."""
    spec = weights.spec
    cut = {"lrkv": shard_lrkv, "mla": shard_mla, "mlra": shard_mlra}.get(spec.family, shard_dense)
    return Shard(spec, plan, cut(weights, plan))
