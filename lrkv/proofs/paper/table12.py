"""Table 12 and App. G.4 (p. 29; App. G.1's method, p. 28): the cache "measurements" at rank 64, 2,048 tokens.

The capacities are searched over every reading of the unstated factors (unit × dtype × context
× batch × layers × rank) and the readings are ranked by how many independent statements of the
paper they agree with; the percentages are searched over ranks and rounding rules, per row and
for one rule that fits every row.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction

import sympy as sp

from lrkv.spec import AttentionSpec, model_cache_bytes

from ..record import Verdict
from ..registry import proof
from . import data
from .printed import dec, matches, pct, round_half_up, show, truncate, truncates_to
from .readings import ROUNDING, audit, perturbed

LN2 = sp.log(2)


# ----------------------------------------------------------------------------- byte searches
UNITS = {"MiB": 2**20, "MB": 10**6}
DTYPES = {"float8": 1, "bfloat16": 2, "float32": 4, "float64": 8}
# The search space for Table 12's unstated quantities: every power-of-two context the paper's
# runs or a serving engineer would use, batches 1–32, the four storage widths, 1–128 layers.
CONTEXTS = (512, 1024, 2048, 4096, 8192, 16384, 32768)
BATCHES = (1, 2, 4, 8, 16, 32)


def byte_readings(H: int, d_h: int, mha_printed: str, lrkv_printed: str | None, *, unit_names=("MiB", "MB"),
                  contexts=CONTEXTS, batches=BATCHES, dtypes=DTYPES, max_layers=128, max_rank=256) -> list[dict]:
    """All (unit, dtype, context, batch, layers, rank) under which model_cache_bytes reproduces the
    printed MHA (and LRKV) capacities. Layers and rank are solved for, then verified with the spec."""
    out = []
    mha = AttentionSpec.mha(H, d_h)
    for unit in unit_names:
        ub = UNITS[unit]
        for dtype, nbytes in dtypes.items():
            spec_dtype = "float8_e4m3fn" if dtype == "float8" else dtype
            for T in contexts:
                for B in batches:
                    per_layer = model_cache_bytes(mha, 1, dtype=spec_dtype, batch=B, seq_len=T)
                    guess = dec(mha_printed) * ub / per_layer
                    for N in sorted({math.floor(guess), math.ceil(guess)}):
                        if not (1 <= N <= max_layers):
                            continue
                        if not matches(Fraction(model_cache_bytes(mha, N, dtype=spec_dtype, batch=B, seq_len=T), ub),
                                       mha_printed):
                            continue
                        if lrkv_printed is None:
                            out.append({"unit": unit, "dtype": dtype, "context": T, "batch": B, "layers": N})
                            continue
                        # LRKV bytes = N·B·T·b·2(d_h + H r): solve for r, then verify with the spec.
                        r_guess = (dec(lrkv_printed) * ub / (N * B * T * nbytes * 2) - d_h) / H
                        for r in sorted({math.floor(r_guess), math.ceil(r_guess)}):
                            if 0 <= r <= max_rank:
                                lb = model_cache_bytes(AttentionSpec.lrkv(H, d_h, r), N, dtype=spec_dtype,
                                                       batch=B, seq_len=T)
                                if matches(Fraction(lb, ub), lrkv_printed):
                                    out.append({"unit": unit, "dtype": dtype, "context": T, "batch": B,
                                                "layers": N, "rank": r})
    return out


# ----------------------------------------------------------------------------- Table 12
@proof(
    "paper_table12_bytes",
    item=10,
    claim="Table 12's capacities (MHA / LRKV 'MB': 72 / 48 at 128M, 648 / 360 at 2.5B, 1152 / 612 at 6.3B, stated rank 64, 2,048 tokens) follow from Eq. 8.",
    source="Table 12, p. 29; App. G.1, p. 28; Table 5 layer counts; English review Sec. 8; Chinese review §4.7",
    expected="inconsistent",
)
def paper_table12_bytes(*, printed=data.TABLE12, table5=data.TABLE5, search=byte_readings) -> Verdict:
    """Search every reading (unit × dtype × context × batch × layers × rank) and report all that
    reproduce the printed pair at each scale. The conclusion is only as strong as the search:
    the capacities fix the product layers·batch·context·bytes-per-scalar (and the rank), never
    the factors separately."""
    d_h, T_stated, r_stated = data.TABLE7["head_dim"], printed["context"], printed["stated_rank"]
    per_scale, as_stated = {}, True
    for label, row in printed["rows"].items():
        sols = search(row["H"], d_h, row["mha"], row["lrkv"])
        ratio = Fraction(dec(row["lrkv"]), dec(row["mha"]))
        products = sorted({s["layers"] * s["batch"] * s["context"] * DTYPES[s["dtype"]] for s in sols})
        n5 = table5["layers"].get(label)
        per_scale[label] = {
            "byte_ratio_pct": show(pct(ratio)), "reading_count": len(sols), "readings": sols,
            "ranks": sorted({s["rank"] for s in sols}), "units": sorted({s["unit"] for s in sols}),
            "layers_batch_context_bytes": products,
            "readings_with_table5_layers": [s for s in sols if n5 is not None and s["layers"] == n5],
            "readings_at_2048_tokens_batch_1": [s for s in sols if s["context"] == T_stated and s["batch"] == 1],
        }
        # "as stated": rank 64, 2,048 tokens, one sequence, MB = 10^6 bytes, bf16 (App. G), Table 5's layers
        as_stated &= any(s["rank"] == r_stated and s["context"] == T_stated and s["unit"] == "MB"
                         and s["batch"] == 1 and s["dtype"] == "bfloat16"
                         and (n5 is None or s["layers"] == n5) for s in sols)
    # A common reading for all scales: same unit, context, batch and dtype, each with its own layer count.
    keys = {(s["unit"], s["context"], s["batch"], s["dtype"]) for s in per_scale["2.5B"]["readings"]}
    common = []
    for key in sorted(keys):
        layers = {}
        for label, v in per_scale.items():
            hit = [s for s in v["readings"] if (s["unit"], s["context"], s["batch"], s["dtype"]) == key]
            if not hit:
                break
            layers[label] = {"layers": hit[0]["layers"], "rank": hit[0]["rank"]}
        else:
            common.append({"unit": key[0], "context": key[1], "batch": key[2], "dtype": key[3], "per_scale": layers})
    searched = (f"unit MiB/MB × dtype {'/'.join(DTYPES)} × context {min(CONTEXTS)}–{max(CONTEXTS)} (powers of 2) "
                f"× batch {min(BATCHES)}–{max(BATCHES)} × layers 1–128 × rank 0–256")
    ranked = rank_readings(common, printed["statements"]) if common else []
    ev = {"searched": searched, "per_scale": per_scale, "common_readings": common, "ranked_readings": ranked[:6],
          "statements": printed["statements"],
          "common_reading_count": len(common), "table5_layers": table5["layers"],
          "figures_2p5b_layers": table5["figure_layers_2p5b"], "unit_label_printed": printed["unit_label"]}
    if as_stated:
        return Verdict("proved", "The capacities follow from Eq. 8 exactly as stated.", ev)
    # The one assumption, declared before the search: 'MB' means MiB; everything else as stated
    # (rank 64, 2,048 tokens, one sequence, bf16, Table 5's layers where Table 5 gives them).
    def declared(label: str, v: dict) -> list[dict]:
        n5 = table5["layers"].get(label)
        return [s for s in v["readings"] if s["unit"] == "MiB" and s["rank"] == r_stated and s["context"] == T_stated
                and s["batch"] == 1 and s["dtype"] == "bfloat16" and (n5 is None or s["layers"] == n5)]
    under = {label: declared(label, v) for label, v in per_scale.items()}
    ev["declared_assumption"] = "'MB' means MiB (2^20 bytes); rank, context, batch, dtype and Table 5's layers as stated"
    ev["under_declared_assumption"] = {k: [s["layers"] for s in v] for k, v in under.items()}
    ev["byte_ratios_force_stated_rank"] = {k: v["ranks"] for k, v in per_scale.items()}
    # audit of the wide search: readings for the 2.5B MHA capacity moved by one printed unit
    row = printed["rows"]["2.5B"]
    tried = len(UNITS) * len(DTYPES) * len(CONTEXTS) * len(BATCHES) * 128 * 257
    ev["search_audit_2p5b_mha"] = audit(lambda m: search(row["H"], d_h, m, row["lrkv"]), row["mha"], tried)
    if all(under.values()):
        return Verdict("reconciled", "Every capacity is reproduced with 'MB' read as MiB and everything else as "
                       "stated.", ev, assumption=ev["declared_assumption"])
    if not common:
        return Verdict("inconsistent", f"No searched reading ({searched}) reproduces every printed capacity.", ev)
    best = ranked[0]
    ev["best_reading"] = {"reading": reading_text(best), "agrees": best["agrees"], "contradicts": best["contradicts"]}
    misses = [k for k, v in under.items() if not v]
    return Verdict("inconsistent", "The LRKV/MHA byte ratios (66.67/55.56/53.13%) are Eq. 9 at the stated rank 64, "
                   f"but the capacities are not Eq. 8 as stated (2.5B MHA: 324 MiB at Table 5's 18 layers, printed "
                   f"{row['mha']}), and the one declared assumption ('MB' = MiB) does not fit {', '.join(misses)}. "
                   f"Every reading that fits all three rows takes two: MiB and a doubled layers·batch product at "
                   f"2.5B — the best, {reading_text(best)}, contradicts {', '.join(best['contradicts'])}; "
                   f"{ev['search_audit_2p5b_mha']['matching_printed']} of {tried:,} readings fit 2.5B's printed pair.", ev)


def rank_readings(common: list[dict], statements: dict[str, str]) -> list[dict]:
    """Each reading common to all three scales, with the paper's statements it agrees with and
    those it contradicts; sorted by agreements, then by needing no unstated batch (a batch other
    than one sequence is a factor no source states), then by the search order."""
    tests = {
        "context_2048": lambda c: c["context"] == 2048,
        "rank_64": lambda c: all(v["rank"] == 64 for v in c["per_scale"].values()),
        "bf16": lambda c: c["dtype"] == "bfloat16",
        "figures_36_layers_2p5b": lambda c: c["per_scale"]["2.5B"]["layers"] == 36,
        "table5_18_layers_2p5b": lambda c: c["per_scale"]["2.5B"]["layers"] == 18,
        "unit_MB": lambda c: c["unit"] == "MB",
    }
    if set(tests) != set(statements):
        raise ValueError(f"statements {sorted(statements)} do not match the tests {sorted(tests)}")
    ranked = []
    for i, c in enumerate(common):
        agrees = [k for k, t in tests.items() if t(c)]
        ranked.append({**c, "agrees": agrees, "contradicts": [k for k in tests if k not in agrees],
                       "agreement_count": len(agrees), "_order": (-len(agrees), c["batch"] != 1, i)})
    ranked.sort(key=lambda c: c["_order"])
    return [{k: v for k, v in c.items() if k != "_order"} for c in ranked]


def reading_text(c: dict) -> str:
    layers = "/".join(str(v["layers"]) for v in c["per_scale"].values())
    return f"{c['dtype']}, batch {c['batch']}, {c['context']} tokens, {c['unit']}, layers {layers}"


def pct_readings(H: int, d_h: int, printed_pct: str, max_rank: int = 256) -> list[dict]:
    """Integer ranks and formula readings that print as `printed_pct`."""
    out = []
    for r in range(0, max_rank + 1):
        forms = {
            "eq9": Fraction(1, H) + Fraction(r, d_h),
            "eq9_with_key_scale": Fraction(2 * d_h + 2 * H * r + H, 2 * H * d_h),
        }
        for form, v in forms.items():
            if matches(pct(v), printed_pct):
                out.append({"rank": r, "formula": form, "rounding": "nearest", "value_pct": show(pct(v))})
            elif truncates_to(pct(v), printed_pct):
                out.append({"rank": r, "formula": form, "rounding": "truncate", "value_pct": show(pct(v))})
    return out


# Ways a percentage of 1/H + r/d_h can be computed and printed: the exact sum rounded (or cut) at
# the printed precision, or each term rounded (or cut) to 2–4 decimals of the fraction before adding.
ROUNDERS = {"round": round_half_up, "truncate": truncate}


def pct_rules() -> dict[str, object]:
    """name -> f(H, d_h, r) giving the fraction a rule computes (before the final print)."""
    rules: dict[str, object] = {"sum": lambda H, d_h, r: Fraction(1, H) + Fraction(r, d_h)}
    for how, fn in ROUNDERS.items():
        for k in (2, 3, 4):
            rules[f"terms_{how}_{k}dp"] = (lambda fn, k: lambda H, d_h, r: fn(Fraction(1, H), k) + fn(Fraction(r, d_h), k))(fn, k)
    return rules


PRINTS = {"nearest": matches, "truncate": truncates_to}


def rule_fits(rule, H: int, d_h: int, r: int, printed_pct: str) -> str | None:
    """'nearest' / 'truncate' when the rule's value prints as printed_pct that way, else None."""
    v = pct(rule(H, d_h, r))
    return next((how for how, prints in PRINTS.items() if prints(v, printed_pct)), None)


def sourced_ranks(label: str, stated_rank: int) -> dict[str, int]:
    """The ranks a source gives for this row: the stated one and Table 7's."""
    return {"stated": stated_rank, "table7": data.TABLE7["scales"][label]["rank"]}


def rule_search(H: int, d_h: int, ranks: dict[str, int]):
    """The wider search the standard demotes to evidence: every rule of pct_rules at every sourced
    rank, printed by rounding or truncation. Returns (fits(value) -> hits, candidates tried)."""
    rules = pct_rules()

    def fits(printed_pct: str) -> list[dict]:
        return [{"rank": r, "rank_source": which, "rule": name, "print": how}
                for which, r in ranks.items() for name, rule in rules.items()
                if (how := rule_fits(rule, H, d_h, r, printed_pct))]
    return fits, len(ranks) * len(rules) * len(PRINTS)


def pct_evidence(label: str, H: int, printed_pct: str, stated_rank: int) -> dict:
    """Eq. 9 at the stated rank and at the one declared alternative (Table 7's rank), and the
    audits of the two wider searches: sourced ranks × 7 rules × 2 prints, and integer ranks 0–256."""
    d_h, t7 = data.TABLE7["head_dim"], data.TABLE7["scales"][label]["rank"]
    fits, tried = rule_search(H, d_h, sourced_ranks(label, stated_rank))
    at_t7 = pct(Fraction(1, H) + Fraction(t7, d_h))
    declared = audit(lambda p: [t7] if matches(at_t7, p) else [], printed_pct, 1)
    return {"printed_pct": printed_pct, "rounding": ROUNDING, "stated_rank": stated_rank, "declared_audit": declared,
            "eq9_at_stated_rank_pct": show(pct(Fraction(1, H) + Fraction(stated_rank, d_h))),
            "declared_assumption": f"Table 7's rank {t7} (the main configuration's rank) in place of the stated {stated_rank}",
            "table7_rank": t7, "eq9_at_table7_rank_pct": show(pct(Fraction(1, H) + Fraction(t7, d_h))),
            "rule_search": {"readings_matching_printed": fits(printed_pct), **audit(fits, printed_pct, tried)},
            "open_rank_search": audit(lambda p: pct_readings(H, d_h, p), printed_pct, 257 * 2 * 2)}


def _pct_verdict(label: str, row: dict, stated_rank: int, what: str) -> Verdict:
    """One Table 12 / App. G.4 percentage: proved at the stated rank, reconciled only through the one
    declared assumption (Table 7's rank, rounded to nearest), else inconsistent. The wider searches
    are reported with their audits and never reconcile: at 2.5B the 28-reading rule search fits 47.0,
    48.4, 48.5, 48.6 and 49.0 alike, so a hit there is not evidence."""
    H, d_h = row["H"], data.TABLE7["head_dim"]
    ev = pct_evidence(label, H, row["pct"], stated_rank)
    t7 = ev["table7_rank"]
    if matches(pct(Fraction(1, H) + Fraction(stated_rank, d_h)), row["pct"]):
        return Verdict("proved", f"{what}: Eq. 9 at the stated rank {stated_rank} prints as {row['pct']}%.", ev)
    if matches(pct(Fraction(1, H) + Fraction(t7, d_h)), row["pct"]):
        return Verdict("reconciled", f"{what}: {row['pct']}% is not Eq. 9 at the stated rank {stated_rank} "
                       f"({show(pct(Fraction(1, H) + Fraction(stated_rank, d_h)), 2)}%), but Eq. 9 at Table 7's rank "
                       f"{t7} gives {ev['eq9_at_table7_rank_pct']}%, which rounds to it; "
                       f"{'/'.join(perturbed(row['pct']))} would not.", ev,
                       assumption=f"the percentage was computed at Table 7's rank {t7}, not the stated {stated_rank}")
    hits = ev["rule_search"]["readings_matching_printed"]
    wider = (f" The wider rule search ({ev['rule_search']['candidates_tried']} readings) fits it only by combining "
             f"Table 7's rank with a per-term rounding no sibling row obeys ({hits[0]['rule']}), and fits "
             + ", ".join(f"{n} at {v}" for v, n in ev["rule_search"]["matching_perturbed"].items())
             + " (one unit away) too: not evidence.") if hits else ""
    return Verdict("inconsistent", f"{what}: {row['pct']}% is neither Eq. 9 at the stated rank {stated_rank} "
                   f"({show(pct(Fraction(1, H) + Fraction(stated_rank, d_h)), 2)}%) nor at Table 7's rank {t7} "
                   f"({ev['eq9_at_table7_rank_pct']}%), rounded to nearest.{wider}", ev)


def _table12_pct(label: str):
    def body(*, printed=data.TABLE12) -> Verdict:
        row = printed["rows"][label]
        v = _pct_verdict(label, row, printed["stated_rank"], f"Table 12 at {label}")
        v.evidence["byte_ratio_pct"] = show(pct(Fraction(dec(row["lrkv"]), dec(row["mha"]))))
        return v
    return body


paper_table12_pct_128m = proof(
    "paper_table12_pct_128m", item=10,
    claim="Table 12's 128M percentage 52.6% is the LRKV/MHA cache fraction of its rank-64 configuration.",
    source="Table 12, p. 29; Eq. 9; English review Sec. 8; Chinese review §4.7", expected="reconciled",
)(_table12_pct("128M"))
paper_table12_pct_2p5b = proof(
    "paper_table12_pct_2p5b", item=10,
    claim="Table 12's 2.5B percentage 48.4% is the LRKV/MHA cache fraction of its rank-64 configuration.",
    source="Table 12, p. 29; Eq. 9; English review Sec. 8; Chinese review §4.7", expected="inconsistent",
)(_table12_pct("2.5B"))
paper_table12_pct_6p3b = proof(
    "paper_table12_pct_6p3b", item=10,
    claim="Table 12's 6.3B percentage 45.1% is the LRKV/MHA cache fraction of its rank-64 configuration.",
    source="Table 12, p. 29; Eq. 9; English review Sec. 8; Chinese review §4.7", expected="inconsistent",
)(_table12_pct("6.3B"))


def _g4(label: str):
    """App. G.4 prints rank-64 arithmetic with a result: an arithmetic statement, true or false.
    A rank that would produce the printed result explains the slip; it does not make the printed
    equation true, so the record is refuted, not reconciled, whatever the explanation."""
    def body(*, printed=data.APPENDIX_G4) -> Verdict:
        line = printed["lines"][label]
        H, r, d_h = line["H"], line["stated_rank"], data.TABLE7["head_dim"]
        printed_pct = str(Decimal(line["printed_fraction"]).scaleb(2))  # '0.526' -> '52.6', same precision
        ev = pct_evidence(label, H, printed_pct, r)
        exact = Fraction(1, H) + Fraction(r, d_h)
        ev["printed_fraction"], ev["exact_fraction"] = line["printed_fraction"], show(exact, 4)
        if matches(pct(exact), printed_pct):
            return Verdict("proved", f"App. G.4 at {label}: 1/{H} + {r}/{d_h} = {show(exact, 4)} prints as "
                           f"{line['printed_fraction']}.", ev)
        t7 = ev["table7_rank"]
        why = (f"Table 7's rank {t7} would give {show(Fraction(1, H) + Fraction(t7, d_h), 4)}, which prints as "
               f"{line['printed_fraction']}: an explanation of the slip, not a reconciliation (the line names {r})"
               if matches(pct(Fraction(1, H) + Fraction(t7, d_h)), printed_pct) else
               f"Table 7's rank {t7} would give {show(Fraction(1, H) + Fraction(t7, d_h), 4)}, which does not print "
               f"as {line['printed_fraction']} either")
        return Verdict("refuted", f"App. G.4 at {label}: 1/{H} + {r}/{d_h} = {show(exact, 4)}, not "
                       f"{line['printed_fraction']}. {why}.", ev)
    return body


paper_g4_128m = proof(
    "paper_g4_128m", item=10,
    claim="Appendix G.4's rank-64 arithmetic for 128M, 1/6 + 64/128 = 0.526.",
    source="App. G.4, p. 29 (Chinese review §4.7)", expected="refuted",
)(_g4("128M"))
paper_g4_2p5b = proof(
    "paper_g4_2p5b", item=10,
    claim="Appendix G.4's rank-64 arithmetic for 2.5B gives 48.4%.",
    source="App. G.4, p. 29 (English review Sec. 8: 'repeats that smaller percentage')", expected="refuted",
)(_g4("2.5B"))


def pct_lines(table12=data.TABLE12, g4=data.APPENDIX_G4) -> dict[str, dict]:
    """Every printed percentage of Table 12 and App. G.4: {line: {H, pct, label, stated_rank}}."""
    out = {f"Table 12 {k}": {"H": v["H"], "pct": v["pct"], "label": k, "stated_rank": table12["stated_rank"]}
           for k, v in table12["rows"].items()}
    for k, v in g4["lines"].items():
        out[f"App. G.4 {k}"] = {"H": v["H"], "pct": str(Decimal(v["printed_fraction"]).scaleb(2)), "label": k,
                                "stated_rank": v["stated_rank"]}
    return out


@proof(
    "paper_table12_pct_one_rule",
    item=10,
    claim="One computation rule (a rank source, Eq. 9 exact or with each term rounded or cut first, the print by rounding or truncation) reproduces every percentage of Table 12 and App. G.4.",
    source="Table 12 and App. G.4, p. 29; Eq. 9; Table 7 (English review Sec. 8; Chinese review §4.7)",
    expected="inconsistent",
)
def paper_table12_pct_one_rule(*, table12=data.TABLE12, g4=data.APPENDIX_G4) -> Verdict:
    lines = pct_lines(table12, g4)
    d_h = data.TABLE7["head_dim"]
    fit_table: dict[str, list[str]] = {}
    for rank_src in ("stated", "table7"):
        for name, rule in pct_rules().items():
            for how in ("nearest", "truncate"):
                key = f"{rank_src} rank, {name}, {how}"
                fit_table[key] = [ln for ln, v in lines.items() if PRINTS[how](
                    pct(rule(v["H"], d_h, sourced_ranks(v["label"], v["stated_rank"])[rank_src])), v["pct"])]
    every = [k for k, v in fit_table.items() if len(v) == len(lines)]
    best = max(fit_table.values(), key=len)
    fitting = {k: v for k, v in fit_table.items() if v}
    ev = {"lines": {k: v["pct"] for k, v in lines.items()}, "rules_and_the_lines_they_fit": fitting,
          "rules_fitting_every_line": every, "most_lines_one_rule_fits": len(best)}
    if every:
        return Verdict("reconciled", f"One rule reproduces every printed percentage: {every[0]}.", ev,
                       assumption=f"the percentages were computed as: {every[0]}")
    per_line = {ln: [k for k, v in fit_table.items() if ln in v] for ln in lines}
    ev["rules_per_line"] = per_line
    txt = "; ".join(f"{ln}: {len(r)} rule(s)" + (f", e.g. {r[0]}" if r else "") for ln, r in per_line.items())
    return Verdict("inconsistent", f"No single rule fits every line: the best covers {len(best)} of {len(lines)} "
                   f"({txt}).", ev)
