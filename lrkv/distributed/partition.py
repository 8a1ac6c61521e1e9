"""Which rank holds what under P-way tensor parallelism (Megatron-style; English review Sec. 4).

The split rule, one for every sharded axis: n items over P ranks in contiguous blocks, the
first (n mod P) ranks taking ceil(n/P) items and the rest floor(n/P) — so P need not divide n
(H = 6 over P = 4 gives 2, 2, 1, 1 heads). The sharded axis per family:

    lrkv      query heads with their U_h, B_h and latents; W_shared and the shared cache
              replicated on every rank (the paper's TP analysis: P/H + r/d_h of MHA)
    mla       query heads with their W_UK[h], W_UV[h]; the one latent (and k_rope) replicated
    mha/gqa   KV heads with the query heads of their groups. With n_kv < P each KV head is
    /mqa      replicated on P/n_kv ranks (P must be a multiple of n_kv) and its group's
              query heads are split over those replicas by the same rule
    mlra      latent heads with every (branch, head) pair that reads them; with L < P each
              latent head is replicated on P/L ranks and its pairs split over the replicas

A rank that would receive no query work is an error (ValueError): P <= H (lrkv, mla, dense).
The output projection is row-parallel: each rank multiplies only its own heads' outputs by
their rows of W_O, and one all-reduce (sum) gives y on every rank.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..checks import check_int
from ..reference.mlra import latent_of_head
from ..spec import AttentionSpec


def split_sizes(n: int, parts: int) -> list[int]:
    """Block sizes of the split rule: the first n mod parts blocks get one more item."""
    base, extra = divmod(n, parts)
    return [base + (i < extra) for i in range(parts)]


def split_blocks(items: list, parts: int) -> list[list]:
    """`items` cut into `parts` contiguous blocks by the split rule."""
    out, start = [], 0
    for size in split_sizes(len(items), parts):
        out.append(items[start:start + size])
        start += size
    return out


@dataclass(frozen=True)
class RankPlan:
    """What one rank owns. Head and latent ids are global (indices into the full weights)."""

    tp: int  # P, ranks in the group
    rank: int  # this rank, 0 … P−1
    heads: tuple[int, ...]  # query heads this rank computes (lrkv, mla, dense: its W_O rows)
    kv_heads: tuple[int, ...] = ()  # dense: KV heads cached here
    latent_heads: tuple[int, ...] = ()  # mlra: latent heads cached here
    pairs: tuple[tuple[int, int], ...] = ()  # mlra: (branch, head) pairs computed here


def _check_tp(spec: AttentionSpec, tp: object, rank: object) -> tuple[int, int]:
    if not isinstance(spec, AttentionSpec):
        raise TypeError(f"spec must be an AttentionSpec, got {type(spec).__name__}")
    tp = check_int("tp", tp, minimum=1)
    rank = check_int("rank", rank, minimum=0, maximum=tp - 1)
    return tp, rank


def _replicated(n: int, tp: int, what: str, field: str) -> int:
    """Ranks per item when n < P items are replicated (P must be a multiple of n)."""
    if tp % n:
        raise ValueError(f"tp ({tp}) must be a multiple of {field} ({n}) when it exceeds it: each {what} "
                         f"is then replicated on tp/{field} ranks")
    return tp // n


def _dense_plan(spec: AttentionSpec, tp: int, rank: int) -> RankPlan:
    n_kv, G = spec.n_kv_heads, spec.group_size
    if n_kv >= tp:
        kv = split_blocks(list(range(n_kv)), tp)[rank]
        heads = [n * G + g for n in kv for g in range(G)]  # head h reads KV head h // G
        return RankPlan(tp, rank, tuple(heads), kv_heads=tuple(kv))
    per = _replicated(n_kv, tp, "KV head", "n_kv_heads")
    n, replica = divmod(rank, per)
    heads = split_blocks([n * G + g for g in range(G)], per)[replica]
    if not heads:
        raise ValueError(f"tp ({tp}) leaves rank {rank} without query heads: n_heads ({spec.n_heads}) "
                         f"must be >= tp")
    return RankPlan(tp, rank, tuple(heads), kv_heads=(n,))


def _mlra_plan(spec: AttentionSpec, tp: int, rank: int) -> RankPlan:
    L, nb, H = spec.n_latent_heads, spec.n_branches, spec.n_heads
    owner = latent_of_head(L, nb, H)  # [n_b, H]
    readers = {latent: [(b, h) for b in range(nb) for h in range(H) if int(owner[b, h]) == latent]
               for latent in range(L)}
    if L >= tp:
        latents = split_blocks(list(range(L)), tp)[rank]
        pairs = [p for latent in latents for p in readers[latent]]
    else:
        per = _replicated(L, tp, "latent head", "n_latent_heads")
        latent, replica = divmod(rank, per)
        latents, pairs = [latent], split_blocks(readers[latent], per)[replica]
        if not pairs:
            raise ValueError(f"tp ({tp}) leaves rank {rank} without (branch, head) pairs to compute")
    heads = sorted({h for _, h in pairs})
    return RankPlan(tp, rank, tuple(heads), latent_heads=tuple(latents), pairs=tuple(pairs))


def plan_rank(spec: AttentionSpec, tp: int, rank: int) -> RankPlan:
    """The rank's share of the layer under the split rule above."""
    tp, rank = _check_tp(spec, tp, rank)
    if spec.family == "mlra":
        return _mlra_plan(spec, tp, rank)
    if tp > spec.n_heads:
        raise ValueError(f"tp ({tp}) must be <= n_heads ({spec.n_heads}): every rank needs a query head")
    if spec.family in ("mha", "gqa", "mqa"):
        return _dense_plan(spec, tp, rank)
    return RankPlan(tp, rank, tuple(split_blocks(list(range(spec.n_heads)), tp)[rank]))


def plan_all(spec: AttentionSpec, tp: int) -> list[RankPlan]:
    return [plan_rank(spec, tp, rank) for rank in range(check_int("tp", tp, minimum=1))]


def rank_cache_elements(spec: AttentionSpec, plan: RankPlan, *, include_key_scale: bool = True) -> int:
    """Cache elements per token per layer that `plan`'s rank holds: the per-rank form of
    `lrkv.spec.per_device_cache_elements`, equal to it whenever that formula applies (P | H)
    and extending it to the uneven split. lrkv: 2(d_h + H_p r) (+ H_p for key_scale)."""
    f = spec.family
    if f in ("mha", "gqa", "mqa"):
        return 2 * len(plan.kv_heads) * spec.head_dim
    if f == "mla":
        return spec.latent_dim + spec.rope_dim
    if f == "mlra":
        return len(plan.latent_heads) * spec.latent_dim + spec.rope_dim
    local = len(plan.heads)
    n = 2 * (spec.head_dim + local * spec.rank)
    return n + (local if include_key_scale and spec.qk_norm else 0)
