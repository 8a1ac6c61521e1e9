"""The Chinese review's own arithmetic about the setup and the tables: the batch
composition, the midtraining mix, Table 5's duplicated row and Table 9's CE/BPB ratio.

Each recomputes what the review states from the numbers it prints (paper/data.py).
"""

from __future__ import annotations

from fractions import Fraction

from ..record import Verdict
from ..registry import proof
from . import data
from .printed import dec, interval, show


def thousands(printed: str) -> int:
    """'568K' -> 568000; ValueError on anything else."""
    if not (isinstance(printed, str) and printed.endswith("K") and printed[:-1].isdigit()):
        raise ValueError(f"expected a count like '568K', got {printed!r}")
    return int(printed[:-1]) * 1000


@proof(
    "review_batch_tokens",
    item=10,
    claim="Every pre-training group sees 32,768 tokens per optimiser step: 8 × 2 × 2,048 (the larger models, physical batch 8, accumulation 2) = 16 × 2,048 (128M) = 4 × 8,192 (512M at 8K).",
    source="Tables 5–6, p. 23 (Chinese review §3.1: '较大模型用物理 batch 8、累积 2 步；128M 用 batch 16，8K 组用 batch 4', 32,768 tokens/batch)",
    expected="proved",
)
def review_batch_tokens(*, printed=data.TRAINING_SETUP) -> Verdict:
    """The 128M and 8K groups' accumulation is not stated; 1 is what 32,768 requires of them."""
    want = int(printed["tokens_per_batch"])
    rows = {k: {**v, "tokens": v["physical"] * v["accumulation"] * v["context"]} for k, v in printed["batches"].items()}
    checks = {"every_group_32768": all(r["tokens"] == want for r in rows.values())}
    ev = {"rows": rows, "stated_tokens_per_batch": want, "checks": checks,
          "note": "accumulation is stated (2) only for the larger models; the 128M and 8K groups are taken at 1"}
    if all(checks.values()):
        return Verdict("proved", "8·2·2048 = 16·2048 = 4·8192 = 32,768: the groups differ in sequence length and "
                       "physical batch, not in tokens per step (taking no accumulation for 128M and 8K, which "
                       "the review does not state).", ev)
    return Verdict("inconsistent", f"Group(s) {[k for k, r in rows.items() if r['tokens'] != want]} do not give "
                   f"{want} tokens per step.", ev)


@proof(
    "review_midtraining_mix",
    item=10,
    claim="The ~568K midtraining examples are 460K SmolTalk + 100K MMLU auxiliary train + 8K GSM8K.",
    source="App. D.2, p. 24 (Chinese review §3.3; English review Sec. 5: 'about 568K examples')",
    expected="proved",
)
def review_midtraining_mix(*, printed=data.TRAINING_SETUP) -> Verdict:
    mix = printed["midtraining"]
    parts = {k: thousands(v) for k, v in mix["parts"].items()}
    total = thousands(mix["total"])
    checks = {"parts_sum_to_total": sum(parts.values()) == total}
    ev = {"parts": parts, "sum": sum(parts.values()), "total": total, "checks": checks}
    if all(checks.values()):
        return Verdict("proved", "460K + 100K + 8K = 568K.", ev)
    return Verdict("inconsistent", f"The parts sum to {sum(parts.values())}, not {total}.", ev)


@proof(
    "review_table5_shared_row",
    item=10,
    claim="Table 5 gives the 512M and 1.2B models one configuration (24 layers, width 1536; Table 7: 12 heads, rank 51, 4 KV groups, latent 256), so the two labels cannot both be their parameter counts.",
    source="Table 5, p. 23; Table 7, p. 24 (Chinese review §3.1: 'Table 5 把 512M 与 1.2B 都列为 24 层、1536 宽')",
    expected="proved",
)
def review_table5_shared_row(*, table5=data.TABLE5, table7=data.TABLE7) -> Verdict:
    """Every printed field of the two rows is compared; equal fields give equal counts under any
    parameter formula, while the labels differ by 1.2B/512M."""
    a, b = "512M", "1.2B"
    fields = {"layers": (table5["layers"][a], table5["layers"][b]), "width": (table5["width"][a], table5["width"][b]),
              **{f"table7_{k}": (table7["scales"][a][k], table7["scales"][b][k]) for k in table7["scales"][a]}}
    differing = [k for k, (x, y) in fields.items() if x != y]
    checks = {"rows_identical": not differing}
    ev = {"fields": {k: list(v) for k, v in fields.items()}, "differing": differing,
          "label_ratio": show(Fraction(1200, 512), 3), "checks": checks}
    if not differing:
        return Verdict("proved", "Every field the sources print for the two rows is equal (24 layers, 1536 wide, "
                       "H = 12, r = 51, 4 KV groups, d_c = 256): any parameter count computed from them is the "
                       "same, so '512M' and '1.2B' (2.34× apart) cannot both be parameter counts of these rows.", ev)
    return Verdict("refuted", f"The rows differ in {differing}.", ev)


def ce_over_bpb(ce: str, bpb: str) -> tuple[Fraction, Fraction]:
    """The interval of CE/BPB (= ln 2 × bytes per token) the printed pair allows."""
    (c0, c1), (b0, b1) = interval(ce), interval(bpb)
    return c0 / b1, c1 / b0


@proof(
    "review_table9_ce_bpb_ratio",
    item=10,
    claim="Table 9's CE/BPB ratio (≈ 5.54) differs from the short-context tables' (≈ 3.30), so BPB is not compared across the 8K and 2K groups.",
    source="Table 9, p. 26; Tables 1 and 8, pp. 5 and 25 (Chinese review §4.2: '该组 BPB 与短上下文表的 CE/BPB 比例不同')",
    expected="proved",
)
def review_table9_ce_bpb_ratio(*, table9=data.TABLE9, table9_bpb=data.TABLE9_BPB, table1=data.TABLE1,
                               table1_bpb=data.TABLE1_BPB, table8=data.TABLE8_CE, table8_bpb=data.TABLE8_BPB) -> Verdict:
    """CE/BPB = ln 2 × bytes per token; every printed pair gives an interval. The 8K rows' intervals
    must all lie above every short-context interval (a gap beyond the printed rounding)."""
    long_ = {f"Table 9 {k}": ce_over_bpb(table9["ce"][k], table9_bpb[k]) for k in table9_bpb}
    short = {}
    for fam in ("LRKV", "MHA"):
        for i, scale in enumerate(table1["scales"]):
            short[f"Table 1 {fam} {scale}"] = ce_over_bpb(table1["ce"][fam][i], table1_bpb["bpb"][fam][i])
    for r, ce in table8["lrkv_ce"].items():
        short[f"Table 8 LRKV-{r}"] = ce_over_bpb(ce, table8_bpb["lrkv"][r])
    for c, ce in table8["mla_ce"].items():
        short[f"Table 8 MLA-{c}"] = ce_over_bpb(ce, table8_bpb["mla"][c])
    short["Table 8 MHA"] = ce_over_bpb(table8["mha_ce"], table8_bpb["mha"])
    lo_long, hi_short = min(v[0] for v in long_.values()), max(v[1] for v in short.values())
    checks = {"intervals_disjoint": lo_long > hi_short}
    fmt = lambda d: {k: [show(a, 3), show(b, 3)] for k, (a, b) in d.items()}  # noqa: E731
    ev = {"long_context_8k": fmt(long_), "short_context_2k": fmt(short), "lowest_8k": show(lo_long, 3),
          "highest_2k": show(hi_short, 3), "ln2": "0.693", "checks": checks,
          "bytes_per_token": {"8k": show(dec(table9["ce"]["MHA"]) / dec(table9_bpb["MHA"]) / Fraction(693147, 10**6), 2),
                              "2k": show(dec(table1["ce"]["MHA"][0]) / dec(table1_bpb["bpb"]["MHA"][0]) / Fraction(693147, 10**6), 2)}}
    if all(checks.values()):
        return Verdict("proved", f"Every 8K row of Table 9 has CE/BPB ≥ {show(lo_long, 2)} and every 2K row of Tables "
                       f"1 and 8 ≤ {show(hi_short, 2)}, beyond the printed rounding: the implied bytes per token "
                       f"differ (≈ {ev['bytes_per_token']['8k']} vs ≈ {ev['bytes_per_token']['2k']}, MHA rows) for the same data, so the BPB columns are not on one scale.", ev)
    return Verdict("refuted", "The CE/BPB intervals overlap: the ratios need not differ.", ev)
