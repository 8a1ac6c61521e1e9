"""Item 10 — the v1 summary's numeric claims (arXiv 2601.11471v1, as the v1 summary reports them)
against what the sources let one check.
"""

from __future__ import annotations

import sympy as sp

from lrkv.spec import PAPER_SCALES, cache_ratio, decode_arithmetic_ratio, kv_param_ratio

from ..record import Verdict
from ..registry import proof
from . import data
from .printed import dec, half_unit, in_range, matches, pct, show

LN2 = sp.log(2)


# ----------------------------------------------------------------------------- v1: FLOPs −20–25 %
def flops_readings(printed: dict, fig3: dict) -> dict[str, dict]:
    """Every reading of 'total FLOPs −20–25% at 2.5B' the sources support, with its number and
    what it rests on. The v1 summary's own premises come first: its limitations section says the
    FLOP figure rests on a compute model dominated by KV-cache reads, and it reports ~15% fewer
    steps (which, at an unchanged per-step cost, is the FLOP saving)."""
    s = PAPER_SCALES[printed["flops_scale"]].spec("lrkv")
    out: dict[str, dict] = {
        "cache_reads_eq9": {"saving_pct": 100 - pct(cache_ratio(s)), "basis": "the v1 summary's stated compute "
                            "model (KV-cache reads dominate): bytes read per step fall by 1 − Eq. 9", "v1_premise": True},
        "steps_at_unchanged_step_cost": {"saving_pct": dec(printed["fewer_steps_pct"]), "basis": "the v1 summary's "
                                         "own 'about 15% fewer steps', each step costing what an MHA step costs",
                                         "v1_premise": True},
        "kv_projection_macs_eq10": {"saving_pct": 100 - pct(kv_param_ratio(s)), "basis": "per-token K/V projection "
                                    "work (Eq. 10 weights)", "v1_premise": False},
    }
    for T in (2048, 8192, 32768):
        out[f"decode_arithmetic_T{T}"] = {"saving_pct": 100 - pct(decode_arithmetic_ratio(s, T)),
                                          "basis": "decode MACs per step, 1 + r/d_h + r/T", "v1_premise": False}
    savings = [dec(x) for x in fig3["fig3_savings_pct"]]
    for name, v in zip(("MQA", "MLA", "GQA", "MHA"), savings):
        out[f"v3_fig3_steps_to_{name}_loss"] = {"saving_pct": v, "basis": "v3 Fig. 3 steps to the baseline's loss "
                                                "(sample efficiency, a later version's run)", "v1_premise": False}
    out["v3_fig3_mean"] = {"saving_pct": sum(savings) / len(savings), "basis": "mean of the four v3 Fig. 3 "
                           "savings (sample efficiency)", "v1_premise": False}
    return out


@proof(
    "v1_flops_reduction",
    item=10,
    claim="At 2.5B, LRKV reduces total FLOPs by 20%–25% (v1 summary).",
    source="v1 summary (key contributions: '将总 FLOPs 减少 20‑25 %'; limitations: the FLOP reduction rests on a compute model dominated by KV-cache reads; results: '约提前15 %'); Fig. 3(b), p. 6 and its footnote (Chinese review §4.1)",
    expected="inconsistent",
)
def v1_flops_reduction(*, printed=data.V1_SUMMARY, fig3=data.TABLE1, readings=flops_readings) -> Verdict:
    """Every reading is reported with its number; the verdict follows the readings that rest on
    the v1 summary's own premises. A reading outside them (a v3 figure, another cost model) that
    lands in the range is listed, not chosen."""
    lo, hi = printed["flops_reduction_pct"]
    rows = {k: {"saving_pct": show(v["saving_pct"], 2), "in_20_25": in_range(v["saving_pct"], lo, hi),
                "basis": v["basis"], "v1_premise": v["v1_premise"]} for k, v in readings(printed, fig3).items()}
    premise_hits = [k for k, r in rows.items() if r["v1_premise"] and r["in_20_25"]]
    other_hits = [k for k, r in rows.items() if not r["v1_premise"] and r["in_20_25"]]
    ev = {"readings": rows, "v1_premise_hits": premise_hits, "other_hits": other_hits, "printed_range_pct": [lo, hi]}
    if premise_hits:
        return Verdict("reconciled", f"The v1 summary's own premise {premise_hits[0]} gives "
                       f"{rows[premise_hits[0]]['saving_pct']}%, inside 20–25%.", ev,
                       assumption=rows[premise_hits[0]]["basis"])
    cr, st = rows["cache_reads_eq9"]["saving_pct"], rows["steps_at_unchanged_step_cost"]["saving_pct"]
    others = ", ".join(f"{k} {rows[k]['saving_pct']}%" for k in other_hits) or "none"
    return Verdict("inconsistent", f"On the v1 summary's own premises the figure does not follow: its stated "
                   f"compute model (KV-cache reads dominate) gives a {cr}% saving at 2.5B (1 − Eq. 9 at r = 55), "
                   f"above 20–25%; its own '15% fewer steps' at an unchanged per-step cost gives {st}%, below it; "
                   "per-step decode arithmetic rises instead (1 + r/d_h + r/T). Readings inside the range rest "
                   f"on v3's Fig. 3 step savings ({others}), which the paper calls sample efficiency and which "
                   "would contradict the same summary's 15%.", ev)


# ----------------------------------------------------------------------------- v1: 15 % fewer steps
@proof(
    "v1_fewer_steps",
    item=10,
    claim="LRKV reaches the same loss about 15% earlier in training steps (v1 summary).",
    source="v1 summary (results: '约提前15 % 达到相同的损失水平'); Fig. 3(b), p. 6 (v3; Chinese review §4.1; English review Sec. 5)",
    expected="unverifiable",
)
def v1_fewer_steps(*, printed=data.V1_SUMMARY, fig3=data.TABLE1, v1_figure=None) -> Verdict:
    """The claim is about v1's runs; only v3's Fig. 3 is in the sources. With a v1 figure
    (`v1_figure`: savings per baseline, as Fig. 3 prints them) the claim is checked against it;
    without one the record says so and shows what v3 reports."""
    want = printed["fewer_steps_pct"]
    v3 = {n: dec(x) for n, x in zip(("MQA", "MLA", "GQA", "MHA"), fig3["fig3_savings_pct"])}
    shown = {"v3_fig3_savings_pct": {k: show(v, 1) for k, v in v3.items()},
             "v3_fig3_mean_pct": show(sum(v3.values()) / len(v3), 3),
             "v3_below_all": all(dec(want) + half_unit(want) < v for v in v3.values()),
             "v3_nearest_reading": {"s/(1+s) vs MHA": show(100 * (v3["MHA"] / 100) / (1 + v3["MHA"] / 100), 2)}}
    ev = {"printed_pct": want, "what_v3_shows": shown}
    if v1_figure is not None:
        got = {n: dec(x) for n, x in v1_figure.items()}
        hits = [n for n, v in got.items() if matches(v, want)]
        ev["v1_figure"] = {k: show(v, 1) for k, v in got.items()}
        if hits:
            return Verdict("proved", f"The v1 figure's saving against {hits} prints as {want}%.", ev)
        return Verdict("inconsistent", f"No saving of the v1 figure prints as {want}%.", ev)
    ev["missing"] = "v1's Fig. 3 (or any v1 step count): the sources hold only v3's figure and the v1 summary's prose"
    return Verdict("unverifiable", "The claim is about v1's training runs, and no v1 figure is in the sources, so "
                   "it cannot be checked against v1. What v3's Fig. 3 shows: 18.7–29.7% fewer steps to each "
                   "baseline's final loss (mean 23.575%), every one above 15%; v3 reports larger savings than the "
                   "v1 summary's figure, which may describe different runs.", ev)
