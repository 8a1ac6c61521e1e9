"""Tensor-parallel LRKV decode on torch.distributed, verified against the float64 oracle.

    partition.py  the split rule: which rank holds which heads / KV heads / latent heads
    shard.py      one rank's shard of a layer's reference weights
    steps.py      the per-rank step (reference: local attention + one all-reduce), pluggable
    runner.py     spawn P ranks (gloo on CPU, NCCL on GPUs), decode token by token
    check.py      judge the gathered output and each rank's cache bytes
    level.py      the harness's `tp` case level (`lrkv verify --tp P`), which drives the above

The wrong TP layers the check must reject are lrkv.mutants.tp (a layer above this package).
"""

from .check import TPVerdict, bytes_check, judge_job, oracle, verify_tp
from .partition import RankPlan, plan_all, plan_rank, rank_cache_elements, split_sizes
from .runner import TimedOut, TPJob, run_jobs
from .steps import Comm, FunctionTP, TPLayer, as_tp_layer, tp_layer_for

__all__ = [
    "Comm", "FunctionTP", "RankPlan", "TPJob", "TPLayer", "TPVerdict", "TimedOut", "as_tp_layer",
    "bytes_check", "judge_job", "oracle", "plan_all", "plan_rank", "rank_cache_elements", "run_jobs",
    "split_sizes", "tp_layer_for", "verify_tp",
]
