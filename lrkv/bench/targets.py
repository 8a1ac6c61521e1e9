"""The performance targets, checked on a result's rows (PASS / MISS per row, per rule).

  the CPU compiled-step target
               compiled factored LRKV step at T ≥ 8K takes at most 1.15 x (payload ratio)
               x the compiled MHA step, MHA timed in the same rounds (`vs_mha`, inductor
               vs inductor).
  the H200 speed targets
               bf16 rows of one run, every ratio taken against rows timed in the same rounds:
    bandwidth  Triton LRKV at T ≥ 16K, B ≥ 8, at both paper scales (2.5B: H=18/r=55,
               6.3B: H=32/r=54): bytes the step must read / time ≥ 75 % of the copy
               bandwidth measured in the same run,
    vs-mha     ... and its time ≤ 0.6 x SDPA MHA's;
    latency    Triton LRKV at B = 1, T = 32K: time ≤ 0.7 x SDPA MHA's;
    vs-gqa     Triton LRKV at T ≥ 16K within 1.15 x of SDPA GQA whose cache is LRKV's size
               (the `gqa-eq` family: n_kv chosen for equal bytes);
    paged      the Triton kernel on a paged cache (page 16) at T ≥ 16K within 1.10 x of the
               contiguous cache;
    rope       the Triton kernel with exact RoPE at T ≥ 16K within 1.6 x of no RoPE.

A row meets its target when every rule that applies to it passes; `target_rule` spells
out each rule with the measured value, `checks` holds them as data. A rule whose peer row
is not in the run at all (a `--backend`/`--families` choice) is SKIP with that reason; a
peer row that is there but errored or was skipped makes the rule MISS — never a pass. A
target is a property of a machine and an implementation, not of correctness: it is
reported, never turned into a unit test (the `benchmark`-marked suite and `lrkv bench --check-targets` can enforce it).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass

from .result import BenchResult, BenchRow

CPU_RATIO_SLACK = 1.15  # allowed excess over the payload ratio
CPU_MIN_SEQ_LEN = 8 * 1024

GPU_SCALES = ("2.5B", "6.3B")  # the paper scales the GPU targets are stated at
GPU_BANDWIDTH_FRACTION = 0.75
GPU_MIN_SEQ_LEN = 16 * 1024
GPU_MIN_BATCH = 8
GPU_VS_MHA = 0.6  # Triton LRKV time / SDPA MHA time at T >= 16K, B >= 8
LATENCY_BATCH, LATENCY_SEQ_LEN, LATENCY_VS_MHA = 1, 32 * 1024, 0.7
GQA_EQUAL_BYTES_SLACK = 1.15
PAGED_SLACK = 1.10
ROPE_SLACK = 1.6


def cpu_rule() -> str:
    return f"t_lrkv/t_mha <= {CPU_RATIO_SLACK} x payload ratio (CPU, inductor, T >= {CPU_MIN_SEQ_LEN})"


def cpu_target_applies(row: BenchRow) -> bool:
    return (row.status == "ok" and row.device == "cpu" and row.family == "lrkv" and row.backend == "inductor"
            and row.seq_len >= CPU_MIN_SEQ_LEN)


@dataclass(frozen=True)
class GpuRule:
    name: str
    text: str  # the rule as the table prints it
    backend: str  # the LRKV row it judges (family lrkv)
    applies: Callable[[BenchRow], bool]  # beyond family/backend/device/status
    peer: tuple[str, str] | None  # (family, backend) of the row it is measured against; None: bandwidth
    bound: float  # value <= bound passes (bandwidth: value >= bound)


def _big(row: BenchRow) -> bool:
    return row.seq_len >= GPU_MIN_SEQ_LEN and row.batch >= GPU_MIN_BATCH and row.scale in GPU_SCALES


def _long(row: BenchRow) -> bool:
    return row.seq_len >= GPU_MIN_SEQ_LEN


_T = f"T >= {GPU_MIN_SEQ_LEN // 1024}K"
GPU_RULES: tuple[GpuRule, ...] = (
    GpuRule("bandwidth", f"bandwidth >= {GPU_BANDWIDTH_FRACTION:.0%} of copy ({_T}, B >= {GPU_MIN_BATCH})",
            "triton", _big, None, GPU_BANDWIDTH_FRACTION),
    GpuRule("vs-mha", f"t/t_sdpa_mha <= {GPU_VS_MHA} ({_T}, B >= {GPU_MIN_BATCH})",
            "triton", _big, ("mha", "sdpa"), GPU_VS_MHA),
    GpuRule("latency", f"t/t_sdpa_mha <= {LATENCY_VS_MHA} (B = {LATENCY_BATCH}, T = {LATENCY_SEQ_LEN // 1024}K)",
            "triton", lambda r: r.batch == LATENCY_BATCH and r.seq_len == LATENCY_SEQ_LEN, ("mha", "sdpa"),
            LATENCY_VS_MHA),
    GpuRule("vs-gqa", f"t/t_sdpa_gqa_equal_bytes <= {GQA_EQUAL_BYTES_SLACK} ({_T})",
            "triton", _long, ("gqa-eq", "sdpa"), GQA_EQUAL_BYTES_SLACK),
    GpuRule("paged", f"t_paged16/t_contiguous <= {PAGED_SLACK} ({_T})",
            "triton-paged", _long, ("lrkv", "triton"), PAGED_SLACK),
    GpuRule("rope", f"t_exact_rope/t_no_rope <= {ROPE_SLACK} ({_T})",
            "triton-rope", _long, ("lrkv", "triton"), ROPE_SLACK),
)


def time_ratio(row: BenchRow, peer: BenchRow) -> float:
    """row time / peer time: the median of per-round ratios when both were timed in the same
    rounds (lrkv.bench.timing.round_ratios), else the ratio of the medians."""
    a, b = row.samples_s, peer.samples_s
    if a and len(a) == len(b):
        return statistics.median(x / y for x, y in zip(a, b))
    return row.time_s / peer.time_s


def _gpu_checks(row: BenchRow, index: dict) -> list[dict]:
    out = []
    for rule in GPU_RULES:
        if row.backend != rule.backend or not rule.applies(row):
            continue
        if rule.peer is None:
            if row.bandwidth_frac is None:
                continue
            value, ok = row.bandwidth_frac, row.bandwidth_frac >= rule.bound
        else:
            peer = index.get((row.scale, row.batch, row.seq_len, *rule.peer))
            if peer is None:  # the run did not include the peer (e.g. --backend left it out): not judged
                out.append(dict(rule=rule.name, text=rule.text, value=None, bound=rule.bound, verdict="SKIP",
                                why=f"no {'/'.join(rule.peer)} row in this run"))
                continue
            if peer.status != "ok" or not peer.time_s:  # it was meant to run and did not: no pass
                out.append(dict(rule=rule.name, text=rule.text, value=None, bound=rule.bound, verdict="MISS",
                                why=f"{'/'.join(rule.peer)} {peer.status}: {peer.reason}"[:120]))
                continue
            value = time_ratio(row, peer)
            ok = value <= rule.bound
        out.append(dict(rule=rule.name, text=rule.text, value=value, bound=rule.bound,
                        verdict="PASS" if ok else "MISS", why=""))
    return out


def _describe(checks: list[dict]) -> str:
    parts = []
    for c in checks:
        got = c["why"] if c["value"] is None else f"{c['value']:.3g}"
        parts.append(f"{c['text']}: {got} {c['verdict']}")
    return "; ".join(parts)


def check_targets(result: BenchResult) -> list[BenchRow]:
    """Set target/target_rule/checks on every row a target applies to; return those rows."""
    index = {(r.scale, r.batch, r.seq_len, r.family, r.backend): r for r in result.rows}
    checked = []
    for row in result.rows:
        if cpu_target_applies(row) and row.vs_mha is not None and row.mha_backend == "inductor":
            ok = row.vs_mha <= CPU_RATIO_SLACK * row.payload_ratio
            row.target_rule = cpu_rule()
            row.target = "PASS" if ok else "MISS"
            row.checks = [dict(rule="cpu", text=cpu_rule(), value=row.vs_mha,
                               bound=CPU_RATIO_SLACK * row.payload_ratio, verdict=row.target, why="")]
            checked.append(row)
        elif row.status == "ok" and row.device == "cuda" and row.family == "lrkv":
            checks = _gpu_checks(row, index)
            verdicts = {c["verdict"] for c in checks}
            if checks:
                row.checks, row.target_rule = checks, _describe(checks)
            if verdicts - {"SKIP"}:
                row.target = "MISS" if "MISS" in verdicts else "PASS"
                checked.append(row)
    return checked
