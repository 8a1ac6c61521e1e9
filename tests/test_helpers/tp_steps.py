"""Per-rank TP steps used by tests/distributed/test_distributed.py through `TPJob(step='tests.test_helpers.tp_steps:…')`
(spawned ranks import them by name, as they would a user's module)."""

from __future__ import annotations

import time

from lrkv.distributed import TPLayer

_REF = TPLayer()


def user_step(shard, x_t, cache, positions, comm):
    """A user's step written against the documented signature: local attention, one all-reduce."""
    y, cache = _REF.local_step(shard, x_t, cache, positions)
    return comm.all_reduce(y), cache


def raise_on_rank1(shard, x_t, cache, positions, comm):
    """Rank 1 raises before the all-reduce its peers are waiting in."""
    if comm.rank == 1:
        raise RuntimeError("deliberate failure on rank 1")
    return user_step(shard, x_t, cache, positions, comm)


def hang_in_collective(shard, x_t, cache, positions, comm):
    """Rank 1 stalls before the all-reduce: its peers must time out, not wait forever."""
    if comm.rank == 1:
        time.sleep(600)
    return user_step(shard, x_t, cache, positions, comm)


def hang_after_last_step(shard, x_t, cache, positions, comm):
    """Rank 1 stalls after its last all-reduce: the peers finish, the parent's deadline ends it."""
    y, cache = user_step(shard, x_t, cache, positions, comm)
    if comm.rank == 1 and int(positions[0]) == cache.t_max - 1:
        time.sleep(600)
    return y, cache
