"""The performance targets of issue 7, checked on a result's rows (PASS / MISS per row).

  CPU  compiled factored LRKV step at T ≥ 8K takes at most 1.15 x (payload ratio) x the
       compiled MHA step, MHA timed in the same rounds (`vs_mha`, inductor vs inductor).
  GPU  the Triton LRKV kernel at T ≥ 16K, B ≥ 8 reaches at least 75% of the copy bandwidth
       measured in the same run (bytes the step must read / time).

A target is a property of a machine and an implementation, not of correctness: it is
reported, never turned into a unit test (the `benchmark`-marked suite can enforce it).
"""

from __future__ import annotations

from .result import BenchResult, BenchRow

CPU_RATIO_SLACK = 1.15  # allowed excess over the payload ratio
CPU_MIN_SEQ_LEN = 8 * 1024
GPU_BANDWIDTH_FRACTION = 0.75
GPU_MIN_SEQ_LEN = 16 * 1024
GPU_MIN_BATCH = 8


def cpu_rule() -> str:
    return f"t_lrkv/t_mha <= {CPU_RATIO_SLACK} x payload ratio (CPU, inductor, T >= {CPU_MIN_SEQ_LEN})"


def gpu_rule() -> str:
    return (f"bandwidth >= {GPU_BANDWIDTH_FRACTION:.0%} of copy bandwidth "
            f"(GPU, triton, T >= {GPU_MIN_SEQ_LEN}, B >= {GPU_MIN_BATCH})")


def cpu_target_applies(row: BenchRow) -> bool:
    return (row.status == "ok" and row.device == "cpu" and row.family == "lrkv" and row.backend == "inductor"
            and row.seq_len >= CPU_MIN_SEQ_LEN)


def gpu_target_applies(row: BenchRow) -> bool:
    return (row.status == "ok" and row.device == "cuda" and row.family == "lrkv" and row.backend == "triton"
            and row.seq_len >= GPU_MIN_SEQ_LEN and row.batch >= GPU_MIN_BATCH)


def check_targets(result: BenchResult) -> list[BenchRow]:
    """Set target/target_rule on every row a target applies to; return those rows."""
    checked = []
    for row in result.rows:
        if cpu_target_applies(row) and row.vs_mha is not None and row.mha_backend == "inductor":
            row.target_rule = cpu_rule()
            row.target = "PASS" if row.vs_mha <= CPU_RATIO_SLACK * row.payload_ratio else "MISS"
            checked.append(row)
        elif gpu_target_applies(row) and row.bandwidth_frac is not None:
            row.target_rule = gpu_rule()
            row.target = "PASS" if row.bandwidth_frac >= GPU_BANDWIDTH_FRACTION else "MISS"
            checked.append(row)
    return checked
