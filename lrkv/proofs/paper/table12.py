"""Table 12 and App. G.4 (p. 29): the cache "measurements" at rank 64, 2,048 tokens.

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
    source="Table 12 and App. G.1, p. 29; Table 5 layer counts; English review Sec. 8; Chinese review §4.7",
    expected="reconciled",
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
    ranks = {r for v in per_scale.values() for r in v["ranks"]}
    units = {u for v in per_scale.values() for u in v["units"]}
    if common and ranks == {r_stated}:
        prods = {label: v["layers_batch_context_bytes"] for label, v in per_scale.items()}
        single = all(len(p) == 1 for p in prods.values())
        prod_txt = "/".join(f"{p[0] // T_stated}·{T_stated}" for p in prods.values()) if single else str(prods)
        t5 = per_scale["2.5B"]["readings_with_table5_layers"]
        t5_txt = "; ".join(sorted({f"{s['dtype']} B={s['batch']} T={s['context']}" for s in t5}))
        natural = per_scale["2.5B"]["readings_at_2048_tokens_batch_1"]
        nat_txt = ", ".join(f"{s['dtype']} {s['layers']} layers" for s in natural)
        best, runner = ranked[0], ranked[1] if len(ranked) > 1 else None
        tie = runner is not None and runner["agreement_count"] == best["agreement_count"]
        ev["best_reading"] = {"reading": reading_text(best), "agrees": best["agrees"], "contradicts": best["contradicts"]}
        runner_txt = (f" The runner-up, {reading_text(runner)}, agrees with as many ({runner['agreement_count']}: "
                      f"{', '.join(runner['agrees'])}) but needs an unstated batch of {runner['batch']}."
                      if tie else "")
        assumption = (f"rank {r_stated} (not Table 7's 46/55/54), 'MB' meaning {'/'.join(sorted(units))} "
                      f"(2^20 bytes; no integer layer count fits 10^6), and layers·batch·context·bytes-per-scalar "
                      f"= {prod_txt} for 128M/2.5B/6.3B; of the {len(common)} readings common to all three scales, "
                      f"the one that agrees with most of the paper's statements is {reading_text(best)} "
                      f"({best['agreement_count']} of {len(printed['statements'])}: {', '.join(best['agrees'])}); it "
                      f"contradicts {', '.join(best['contradicts'])}.{runner_txt} At the stated 2,048 tokens and one "
                      f"sequence, 2.5B reads as {nat_txt}; Table 5's 18 layers at 2.5B fit {t5_txt}")
        return Verdict("reconciled", "As stated (rank 64, 2,048 tokens, one sequence, MB, bf16, Table 5's 18 "
                       "layers at 2.5B) Eq. 8 gives 324 MiB, not 648, for 2.5B MHA. Every printed capacity is "
                       "reproduced exactly once 'MB' is read as MiB and the product layers·batch·context·bytes "
                       "is adjusted; the LRKV/MHA byte ratios 66.67/55.56/53.13% force rank 64 at every scale. "
                       f"Ranked by the paper's own statements, the best reading is {reading_text(best)}: its 36 "
                       "layers at 2.5B match the 36-layer axes of Figs. 7, 8 and 14, and it contradicts Table 5's "
                       "18 layers and the 'MB' label." + runner_txt, ev, assumption=assumption)
    return Verdict("inconsistent", f"No searched reading ({searched}) reproduces every printed capacity.", ev)


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


def _pct_verdict(label: str, row: dict, stated_rank: int, what: str) -> Verdict:
    """Shared logic of the Table 12 / App. G.4 percentage checks for one scale: the stated rank,
    then every rule at a rank some source gives (reconciled only there), then the open search
    over integer ranks (reported, never used to reconcile: with ~8 rules and 257 ranks a 3-digit
    number is hit by chance)."""
    H, d_h = row["H"], data.TABLE7["head_dim"]
    t7 = data.TABLE7["scales"][label]["rank"]
    at_stated = pct(Fraction(1, H) + Fraction(stated_rank, d_h))
    at_t7 = pct(Fraction(1, H) + Fraction(t7, d_h))
    rules = pct_rules()
    fits = []
    for which, r in sourced_ranks(label, stated_rank).items():
        for name, rule in rules.items():
            how = rule_fits(rule, H, d_h, r, row["pct"])
            if how:
                fits.append({"rank": r, "rank_source": which, "rule": name, "print": how,
                             "value_pct": show(pct(rule(H, d_h, r)))})
    sols = pct_readings(H, d_h, row["pct"])
    ev = {"printed_pct": row["pct"], "stated_rank": stated_rank, "eq9_at_stated_rank_pct": show(at_stated),
          "table7_rank": t7, "eq9_at_table7_rank_pct": show(at_t7), "rules_at_sourced_ranks": fits,
          "open_search_any_rank": sols,
          "searched": f"ranks {{stated {stated_rank}, Table 7's {t7}}} × rules {sorted(rules)} × "
                      "{nearest, truncate} at the printed precision; the open search (integer rank 0–256 × "
                      "{Eq. 9, Eq. 9 + key-scale column}) is evidence only"}
    if matches(at_stated, row["pct"]):
        return Verdict("proved", f"{what}: Eq. 9 at the stated rank {stated_rank} prints as {row['pct']}%.", ev)
    if fits:
        # prefer the plainest rule: the exact sum before per-term rounding, rounding before cutting
        f = sorted(fits, key=lambda x: (x["rule"] != "sum", x["print"] != "nearest", x["rank_source"] != "table7"))[0]
        rule_txt = ("Eq. 9's exact value" if f["rule"] == "sum"
                    else f"Eq. 9 with each term {f['rule'].split('_')[1].replace('round', 'rounded').replace('truncate', 'truncated')} "
                         f"to {f['rule'].split('_')[2][0]} decimals before adding")
        src = " (Table 7's rank for this scale)" if f["rank_source"] == "table7" else ""
        return Verdict("reconciled", f"{what}: {row['pct']}% is not Eq. 9 at the stated rank {stated_rank} "
                       f"({show(at_stated, 2)}%), but {rule_txt} at rank {f['rank']}{src}, printed by "
                       f"{'rounding' if f['print'] == 'nearest' else 'truncation'}, gives {f['value_pct']}%.", ev,
                       assumption=f"the percentage was computed at rank {f['rank']}{src}, not the stated {stated_rank}, "
                                  f"as {rule_txt} (paper_table12_pct_one_rule: no single rule fits every row)")
    return Verdict("inconsistent", f"{what}: {row['pct']}% matches neither the stated rank {stated_rank} "
                   f"({show(at_stated, 2)}%) nor Table 7's rank {t7} ({show(at_t7, 2)}%), under Eq. 9 exact or with "
                   "each term rounded or cut to 2–4 decimals, printed by rounding or truncation; no integer rank "
                   f"under Eq. 9 (with or without a key-scale column) prints as {row['pct']}% either.", ev)


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
    source="Table 12, p. 29; Eq. 9; English review Sec. 8; Chinese review §4.7", expected="reconciled",
)(_table12_pct("2.5B"))
paper_table12_pct_6p3b = proof(
    "paper_table12_pct_6p3b", item=10,
    claim="Table 12's 6.3B percentage 45.1% is the LRKV/MHA cache fraction of its rank-64 configuration.",
    source="Table 12, p. 29; Eq. 9; English review Sec. 8; Chinese review §4.7", expected="inconsistent",
)(_table12_pct("6.3B"))


def _g4(label: str):
    def body(*, printed=data.APPENDIX_G4) -> Verdict:
        line = printed["lines"][label]
        # '0.526' -> '52.6': shift the decimal point, keeping the printed precision
        row = {"H": line["H"], "pct": str(Decimal(line["printed_fraction"]).scaleb(2))}
        return _pct_verdict(label, row, line["stated_rank"], f"App. G.4 at {label}")
    return body


paper_g4_128m = proof(
    "paper_g4_128m", item=10,
    claim="Appendix G.4's rank-64 arithmetic for 128M, 1/6 + 64/128 = 0.526.",
    source="App. G.4, p. 29 (Chinese review §4.7)", expected="reconciled",
)(_g4("128M"))
paper_g4_2p5b = proof(
    "paper_g4_2p5b", item=10,
    claim="Appendix G.4's rank-64 arithmetic for 2.5B gives 48.4%.",
    source="App. G.4, p. 29 (English review Sec. 8: 'repeats that smaller percentage')", expected="reconciled",
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
