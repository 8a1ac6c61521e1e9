"""`lrkv cache` (lrkv/spec/planner.py) against the counts of the allocated caches:
whole-model bytes (Eq. 8), per-device bytes, the fitting token count, padded widths.
"""

from __future__ import annotations

import math

from lrkv.spec import AttentionSpec

from ..record import Verdict, failing
from ..registry import proof
from .layouts import reference_layout, shard_by_head_axis


# ----------------------------------------------------------------------------- the planner
def layout_padded_elements(shapes: dict[str, tuple[int, ...]], align: int) -> int:
    """Elements per token of the layout with each tensor's innermost width rounded up to `align`."""
    total = 0
    for shape in shapes.values():
        heads = shape[2] if len(shape) == 4 else 1
        total += heads * (-(-shape[-1] // align) * align)
    return total


@proof(
    "planner_formulas",
    item=5,
    claim="`lrkv cache` computes whole-model bytes N·(B·T)·b·elements (Eq. 8), per-device bytes under P-way TP, the largest token count that fits a per-device budget, and padded physical bytes exactly as the cache layouts give them, for every family.",
    source="Eq. 8; lrkv.spec.planner (the `lrkv cache` verb); the reference cache layouts (tp_payload_mla_mlra)",
    expected="proved",
)
def planner_formulas(*, model_bytes=None, per_device_bytes=None, tokens_that_fit=None, padded_elements=None) -> Verdict:
    """Each planner function against an independent count from the reference's cache shapes."""
    from lrkv.spec import planner

    model_bytes = model_bytes or planner.model_bytes
    per_device_bytes = per_device_bytes or planner.per_device_bytes
    tokens_that_fit = tokens_that_fit or planner.tokens_that_fit
    padded_elements = padded_elements or planner.padded_elements
    specs = [AttentionSpec.mha(12, 64), AttentionSpec.gqa(12, 64, 4), AttentionSpec.mqa(12, 64),
             AttentionSpec.mla(12, 64, 384), AttentionSpec.mla(12, 64, 512, rope_dim=64),
             AttentionSpec.mlra(12, 64, latent_dim=128, n_latent_heads=4, n_branches=4, rope_dim=64),
             AttentionSpec.lrkv(12, 64, 55), AttentionSpec.lrkv(12, 64, 0)]
    bad: dict[str, list] = {"model_bytes": [], "per_device_bytes": [], "tokens_that_fit": [], "padded": []}
    count = 0
    for spec in specs:
        shapes = reference_layout(spec)
        elems = sum(math.prod(s[2:]) for s in shapes.values())  # per token: drop [B, T]
        for N, tokens, dtype, b in ((1, 1, "float32", 4), (18, 2048 * 3, "bfloat16", 2), (7, 5, "float8_e4m3fn", 1)):
            count += 1
            if model_bytes(spec, N, tokens, dtype) != N * tokens * b * elems:
                bad["model_bytes"].append([spec.short(), N, tokens, dtype])
            for P in (1, 2, 4):
                dev = sum(shard_by_head_axis(s, P) for s in shapes.values())
                if per_device_bytes(spec, N, tokens, dtype, P) != N * tokens * b * dev:
                    bad["per_device_bytes"].append([spec.short(), N, tokens, dtype, P])
                budget = 10**9 + 12345
                fit = tokens_that_fit(spec, N, budget, dtype, P)
                if not (N * fit * b * dev <= budget < N * (fit + 1) * b * dev):
                    bad["tokens_that_fit"].append([spec.short(), N, dtype, P, fit])
        for align in (1, 16, 64):
            if padded_elements(spec, align) != layout_padded_elements(shapes, align):
                bad["padded"].append([spec.short(), align])
    checks = {k: not v for k, v in bad.items()}
    ev = {"cases": count, "mismatches": {k: v[:5] for k, v in bad.items()}, "checks": checks}
    if all(checks.values()):
        return Verdict("proved", "For MHA, GQA, MQA, MLA (with and without k_rope), MLRA-4 and LRKV (r = 55, 0), at "
                       "three (N, tokens, dtype) points, TP 1/2/4 and alignments 1/16/64, the planner's bytes, "
                       "per-device bytes, fitting token count (largest that fits, one more does not) and padded "
                       "elements equal the counts taken from the reference's cache shapes.", ev)
    return Verdict("refuted", f"Planner function(s) {failing(checks)} disagree with the "
                   "cache layouts.", ev)

