"""Verification before release: the harness's cases over the engine's exported range.

The grid covers the range of T_max at both ends and inside it (t_min, t_min+1, an odd
midpoint, t_max−1, t_max). At each T there is a variable-length batch — the full cache, a
single token, an empty sequence (kernel level), an odd length in between — and at t_max
also a batch of one (the lower end of the batch range). Garbage past each length is NaN.

Layer engines also run one `layer-model` case: a whole sequence decoded step by step from
an empty cache through the engine — each step reads the cache the previous step wrote —
against the training-form model. That is what checks the engine's cache *outputs*.
(rope='latent' is the paper's claim that the suite shows false: it is expected to differ.)

Inputs come from the harness (`lrkv.verify.levels`): drawn in float64 from real
projections, rounded to the engine dtype; the float64 reference runs on the rounded
values and the baseline is the materialized path at the engine dtype (DESIGN §6). For an
engine with embedded weights the cases use the seed the weights were initialised with, so
the harness draws exactly the embedded weights.
"""

from __future__ import annotations

from ..verify.case import Case
from . import harness
from .config import ExportConfig

MODEL_T = 12  # sequence length of the layer-model case: every step is one engine call


def length_grid(config: ExportConfig) -> list[int]:
    """Cache lengths T_max to check: both ends of the range and points inside it."""
    lo, hi = config.t_min, config.t_max
    mid = (lo + hi) // 2 | 1  # odd, so no tile size divides it
    return sorted({t for t in (lo, lo + 1, mid, hi - 1, hi) if lo <= t <= hi})


def batch_lengths(config: ExportConfig, T: int) -> list[tuple[int, ...]]:
    """Per-sequence lengths (after the new token, as `Case.lengths`) to run at cache length T."""
    B = min(config.b_max, 4)
    inner = max(1, min(T, (T // 2) | 1))
    if config.level == "kernel":
        varlen = (T, 1, 0, inner)[:B]  # full, one token, empty, odd
    else:
        varlen = (T, 1, inner, max(1, T - 1))[:B]  # the layer level appends, so lengths >= 1
    out = [varlen]
    if T == config.t_max and B > 1:
        out.append((T,))  # B = 1: the lower end of the batch range
    return out


def grid_cases(config: ExportConfig, seeds: tuple[int, ...]) -> list[Case]:
    cases = [Case(config.level, config.spec, config.dtype, lengths, T, seed=seed)
             for seed in seeds for T in length_grid(config) for lengths in batch_lengths(config, T)]
    if config.level == "layer":
        T = max(config.t_min, min(config.t_max, MODEL_T))
        expect = "differ" if config.spec.rope == "latent" else "match"
        cases += [Case("layer-model", config.spec, config.dtype, (T,) * min(2, config.b_max), T, seed=seed,
                       expect=expect) for seed in seeds]
    return cases


def grid_name(config: ExportConfig, seeds: tuple[int, ...]) -> str:
    """The report's `grid`: level, dtype, both dynamic ranges and the seeds it was verified on.

    `lrkv export --check` compares it with the manifest's config, so a range widened in the
    manifest after release no longer matches the report that verified the engine."""
    return (f"export:{config.level}:{config.dtype}:T{config.t_min}-{config.t_max}:B1-{config.b_max}"
            f":seeds{','.join(map(str, seeds))}")


def verify(backend, config: ExportConfig, *, seeds: tuple[int, ...] = (0,), policy_path=None) -> dict:
    """Run the grid through `backend` and return the tolerance report (not yet gated)."""
    return harness.verify_cases(backend, grid_cases(config, seeds), grid=grid_name(config, seeds),
                                policy_path=policy_path)
