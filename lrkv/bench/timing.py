"""Timing: median over interleaved rounds, after warm-up.

A shape's rows (every family and backend at one (scale, B, T)) are timed together, round
robin: one sample of each row per round, the order rotated each round. A slow drift of the
machine — another job starting, thermal throttling — then hits every row alike, and the
ratio to MHA is taken per round (`round_ratios`) before the median, so the headline ratio
survives noise that moves the absolute times (docs/bench.md shows how much, on a shared box).

One sample is the mean time per call over enough calls to last `min_sample_s`:
  CPU  torch.utils.benchmark.Timer.timeit(number), with the run's thread count (Timer
       defaults to ONE thread, which would time a different machine);
  GPU  triton.testing.do_bench (median of its repetitions, L2 flushed between them).
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

MIN_SAMPLE_S = 0.02  # a CPU sample lasts at least this long (timer resolution, scheduler noise)


@dataclass
class Samples:
    """Seconds per call, one entry per round."""

    values: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def min(self) -> float:
        return min(self.values)

    @property
    def spread(self) -> float:
        """(max − min) / median: how noisy this row was."""
        return (max(self.values) - min(self.values)) / self.median if self.values else math.nan


def cpu_sampler(fn: Callable[[], object], *, threads: int, min_sample_s: float = MIN_SAMPLE_S) -> Callable[[], float]:
    """A zero-argument function returning one sample (s/call) of fn, timed by torch's Timer."""
    from torch.utils.benchmark import Timer

    timer = Timer("fn()", globals={"fn": fn}, num_threads=threads)
    once = timer.timeit(1).median  # calibrate: how many calls make one sample
    number = max(1, math.ceil(min_sample_s / max(once, 1e-9)))
    return lambda: timer.timeit(number).median


def gpu_sampler(fn: Callable[[], object], *, rep_ms: int = 40) -> Callable[[], float]:
    """One sample = the median of triton.testing.do_bench's repetitions (s/call)."""
    import triton.testing

    return lambda: float(triton.testing.do_bench(fn, warmup=5, rep=rep_ms, return_mode="median")) * 1e-3


def time_call(fn: Callable[[], object], device: str, *, rep_ms: int = 60) -> float:
    """One timing of fn in s/call, outside the interleaved rounds (the launch-shape sweep):
    on a GPU the median of do_bench's repetitions (L2 flushed; fn is a CUDA-graph replay
    when it came from `lrkv.bench.backends`), on a CPU one torch Timer sample."""
    if device == "cuda":
        return gpu_sampler(fn, rep_ms=rep_ms)()
    import torch

    return cpu_sampler(fn, threads=torch.get_num_threads(), min_sample_s=0.0)()


def interleave(
    samplers: dict[str, Callable[[], float]], rounds: int, *, on_sample: Callable[[str, int], None] | None = None,
) -> dict[str, Samples]:
    """Round-robin sampling; the starting row rotates each round."""
    if rounds < 1:
        raise ValueError(f"rounds must be >= 1, got {rounds}")
    keys = list(samplers)
    out: dict[str, list[float]] = {k: [] for k in keys}
    for r in range(rounds):
        shift = r % len(keys) if keys else 0
        for key in keys[shift:] + keys[:shift]:
            out[key].append(samplers[key]())
            if on_sample:
                on_sample(key, r)
    return {k: Samples(v) for k, v in out.items()}


def round_ratios(num: Samples, den: Samples) -> float:
    """Median over rounds of num[r] / den[r]: the ratio measured side by side."""
    if len(num.values) != len(den.values):
        raise ValueError("ratio of samples from different runs")
    return statistics.median(a / b for a, b in zip(num.values, den.values))
