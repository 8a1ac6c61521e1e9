"""The merge gate (DESIGN §7): a report against the accepted baseline.

The gate trusts nothing in the report it is given. It validates it against the published
schema, refuses an incomplete (interrupted) report and one made under another policy than
the one the baseline pins (sha256), and RE-JUDGES every record from its evidence with
`tolerance.judge_record` — a stored status that the evidence does not support is ERROR
"report altered". Every (backend, case) key is then sorted into one class:

  PASS        within the bound, and not significantly worse than the baseline (or new)
  IMPROVED    passes where the baseline did not, or an error shrank beyond the regression
              factor — reported; accept it on purpose with --update-baseline
  XFAIL       an expected difference (rope='latent' vs the model), still differing
  SKIP        skipped, and not a pass in the baseline
  FAIL        the tolerance bound is exceeded
  REGRESSED   passes, but an error grew beyond regression_factor × baseline
              (+ regression_slack × bound, so that noise near zero does not count);
              or a baseline pass now reported as an expected difference
  MISSING     in the baseline as pass/xfail, absent (or skipped) now; or a case of the report's
              own selection with no record (ledger.py: the gate rebuilds the case list)
  UNCOVERED   a feature of a level the backend implements (coverage.py) that no passing
              record exercises: required by the policy, or covered by the baseline
  ERROR       the backend raised, crashed or hung, the oracle was inconsistent, or the report was
              altered (a duplicate or foreign record, an edited case, a skip the backend
              would not make again)
  UNVERIFIED  a gated backend verified no case at all

Exit 0 only when nothing is FAIL, REGRESSED, MISSING, UNCOVERED, ERROR or UNVERIFIED and at least one
non-baseline backend verified a case; 4 when nothing was verified; 1 otherwise.
(PyTorch's inductor accuracy CI gates on expected-results CSVs the same way.)
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .coverage import coverage, covered_features, uncovered
from .ledger import account, check_info, live_backends, missing_twins, recheck_skip
from .metrics import parse_float
from .tolerance_report import SCHEMA as REPORT_SCHEMA
from .tolerance_report import read_json, validate_file, write_atomic
from .tolerance import Policy, judge_record

BASELINE_SCHEMA = "lrkv.tolerance-baseline/1"
CLASSES = ("PASS", "IMPROVED", "XFAIL", "SKIP", "FAIL", "REGRESSED", "MISSING", "UNCOVERED", "ERROR", "UNVERIFIED")
BLOCKING = frozenset({"FAIL", "REGRESSED", "MISSING", "UNCOVERED", "ERROR", "UNVERIFIED"})
BASELINE_DIGITS = 4  # significant digits kept in the baseline: enough to judge growth, stable in diffs
EXIT_OK, EXIT_BLOCKED, EXIT_NOTHING = 0, 1, 4


@dataclass(frozen=True)
class GateEntry:
    key: str
    backend: str
    case_id: str
    dtype: str
    klass: str
    detail: str


def _sig(x) -> float | None:
    v = parse_float(x)
    return None if v is None else float(f"{v:.{BASELINE_DIGITS}g}")


def _errors(rec: dict) -> dict:
    """The errors the gate tracks for growth, with their bounds: max and mean of every output."""
    out = {}
    for name, ev in (rec.get("outputs") or {}).items():
        m, b = ev["metrics"], ev["bound"]
        prefix = "" if name in ("out", "y") else f"{name}_"
        out[f"{prefix}max_abs"] = (_sig(m["max_abs"]), _sig(b["max_abs"]))
        if not prefix:
            out["mean_abs"] = (_sig(m["mean_abs"]), _sig(b["mean_abs"]))
    return out


def baseline_from_report(report: dict) -> dict:
    """The accepted state: pass and xfail records, with their errors and bounds, and the policy's sha256."""
    entries = {}
    for r in report["records"]:
        if r["status"] in ("pass", "xfail"):
            entries[r["key"]] = {"backend": r["backend"], "id": r["id"], "dtype": r["dtype"], "level": r["level"],
                                 "role": r.get("role", "verified"), "status": r["status"],
                                 "errors": {k: {"value": v, "bound": bd} for k, (v, bd) in _errors(r).items()}}
    roles = [b["name"] for b in report.get("backends", []) if b.get("role") == "baseline"]
    cov = coverage(((r, r["status"]) for r in report["records"]), report["policy"].get("coverage"), roles)
    return {"schema": BASELINE_SCHEMA, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "source": {"suite_version": report["suite_version"], "git": report["git"], "grid": report.get("grid"),
                       "device": report["environment"]["device"]},
            "policy": {"source": report["policy"]["source"], "sha256": report["policy"]["sha256"]},
            "coverage": covered_features(cov),
            "properties": held_properties(report.get("properties") or {}),
            "entries": dict(sorted(entries.items()))}


def keep_worst(old: dict, new: dict) -> dict:
    """`new` with every error that `old` also holds for the same key and status raised to the larger
    of the two, the server properties cut to those both held, and the devices of both recorded.

    Float32 errors below the rounding noise of the output move with the CPU's BLAS (a lse error
    of 3.5e-6 on one machine is 2.0e-5 on another): a baseline accepted on every machine CI runs
    on holds on each of them, and growth beyond the worst of them still regresses."""
    merged = dict(new, entries={k: dict(e, errors={n: dict(v) for n, v in e["errors"].items()})
                                for k, e in new["entries"].items()})
    for key, entry in merged["entries"].items():
        was = old.get("entries", {}).get(key)
        if not was or was["status"] != entry["status"]:
            continue
        for name, err in entry["errors"].items():
            prev = was["errors"].get(name, {}).get("value")
            if prev is not None and (err["value"] is None or prev > err["value"]):
                err["value"] = prev
    held = old.get("properties") or {}
    merged["properties"] = {b: [n for n in names if b not in held or n in held[b]]
                            for b, names in (new.get("properties") or {}).items()}
    seen = [*(old.get("source") or {}).get("devices", [(old.get("source") or {}).get("device")]),
            new["source"]["device"]]
    merged["source"] = dict(new["source"], devices=sorted({d for d in seen if d}))
    return merged


def held_properties(table: dict) -> dict:
    """backend -> the server properties that ran and held on every case (what a baseline keeps)."""
    return {b: sorted(n for n, t in props.items() if t["ran"] and not t["failed"]) for b, props in sorted(table.items())}


def load_baseline(path: str | Path) -> dict:
    """A baseline file (validated against its schema), or a full report used as one."""
    path = Path(path)
    if not path.exists():
        raise ValueError(f"{path}: no such baseline; create the first one from a verified report with "
                         f"`lrkv gate REPORT --baseline {path} --update-baseline`")
    data = read_json(path)
    if data.get("schema") == REPORT_SCHEMA:
        validate_file(data, path, "report.schema.json")
        return baseline_from_report(data)
    if data.get("schema") != BASELINE_SCHEMA:
        raise ValueError(f"{path}: field schema: neither a baseline ({BASELINE_SCHEMA}) nor a report ({REPORT_SCHEMA})")
    validate_file(data, path, "baseline.schema.json")
    return data


def write_baseline(baseline: dict, path: str | Path) -> None:
    write_atomic(path, json.dumps(baseline, indent=1, allow_nan=False) + "\n")


# ----------------------------------------------------------------------------- re-judging
def report_policy(report: dict) -> Policy:
    """The policy the report says it was judged under (ValueError if its sha256 does not match)."""
    return Policy.from_dict(report["policy"])


def rejudge(rec: dict, policy: Policy) -> tuple[str, str]:
    """(status, reason) the record's evidence supports; status 'error' if the record was altered."""
    from .case import Case
    from .levels import get_level

    st = rec["status"]
    try:
        case = Case.from_dict(rec["case"])
        want_id = case.id
        if "twin" in rec:  # a twin's id is its declined case's, and the twin must be re-derivable from it
            from .twins import check_twin

            declined = Case.from_dict(rec["twin"]["case"])
            why = check_twin(declined, rec["twin"]["changes"], case) or \
                ("" if declined.id == rec["twin"]["of"] else "its declined case's id does not match")
            if why:
                return "error", f"report altered: twin {rec['id']}: {why}"
            want_id = f"{declined.id}~{rec['twin']['changes']}"
        if want_id != rec["id"] or rec["key"] != f"{rec['backend']}::{want_id}" or case.expect != rec["expect"] \
                or case.dtype != rec["dtype"] or case.level != rec["level"]:
            return "error", "report altered: the record's id, key, level, dtype or expect does not match its case"
        if st in ("error", "skip"):
            if not (rec.get("reason") or "").strip():
                return "error", f"report altered: a {st} record must say why"
            if st == "skip" and any(rec.get(k) is not None for k in ("outputs", "metrics", "bound")):
                return "error", "report altered: a skip record carries results"
            return st, rec["reason"]
        want = set(get_level(case.level).outputs(case))
        if set(rec.get("outputs") or {}) != want:
            return "error", f"report altered: outputs {sorted(rec.get('outputs') or {})}, the level has {sorted(want)}"
        got, reason = judge_record(rec, policy.resolve(rec["backend"], rec["dtype"]))
    except (ValueError, TypeError, KeyError) as e:
        return "error", f"report altered: the record cannot be re-judged ({type(e).__name__}: {e})"
    if got != st:
        return "error", f"report altered: stored status {st!r}, its evidence says {got!r}" + (f" ({reason})" if reason else "")
    return got, reason


def _compare(rec: dict, base: dict, policy: Policy) -> tuple[str, str]:
    tol = policy.resolve(rec["backend"], rec["dtype"])
    grew, shrank = [], []
    for name, (new, bound) in _errors(rec).items():
        old = base["errors"].get(name, {}).get("value")
        if old is None or new is None:
            continue
        slack = tol.regression_slack * (bound or 0.0)
        if new > tol.regression_factor * old + slack:
            grew.append(f"{name} {old:.3g} -> {new:.3g} (> {tol.regression_factor:g}x + {slack:.2g})")
        elif new * tol.regression_factor + slack < old:
            shrank.append(f"{name} {old:.3g} -> {new:.3g}")
    if grew:
        return "REGRESSED", "; ".join(grew)
    if shrank:
        return "IMPROVED", "; ".join(shrank)
    return "PASS", ""


def classify(report: dict, baseline: dict, *, subset: bool = False, check_policy: bool = True,
             live: dict | None = None) -> list[GateEntry]:
    """One entry per key in the report or the baseline, plus report-level ERROR/UNVERIFIED entries.

    Every case of the report's selection is accounted for first (ledger.py): exactly one
    record per gated backend and case. subset=True ignores baseline entries of backends that
    the report did not run at all (a report for one backend gated against the whole
    baseline); it never excuses a case of the report's own selection. check_policy=False skips
    the baseline's policy pin (only for --update-baseline, which changes the pin on purpose).
    live: name -> (backend importable here or None, why not), for re-asking supports() of
    skipped cases (default: ledger.live_backends imports them)."""
    entries: list[GateEntry] = []
    try:
        policy = report_policy(report)
    except ValueError as e:
        return [GateEntry("policy", "*", "*", "*", "ERROR", f"report altered: {e}")]
    if not report.get("complete", False):
        entries.append(GateEntry("complete", "*", "*", "*", "ERROR",
                                 "the report is incomplete (the run was interrupted): re-run lrkv verify"))
    entries += shard_entries(report)
    pinned = (baseline.get("policy") or {}).get("sha256")
    if check_policy and pinned and pinned != policy.sha256:
        entries.append(GateEntry("policy", "*", "*", "*", "ERROR",
                                 f"the report was judged under policy {policy.source!r} (sha256 {policy.sha256[:12]}), "
                                 f"the baseline pins {pinned[:12]} ({baseline['policy'].get('source')!r}); "
                                 "accept a policy change on purpose with --update-baseline"))
    base = baseline["entries"]
    seen, verified = set(), Counter()
    led = account(report)
    for f in led.findings:
        entries.append(GateEntry(f.key, f.backend, f.case_id, f.dtype, f.klass, f.detail))
        seen.add(f.key)
    infos = {b["name"]: b for b in report.get("backends", [])}
    live = _live_for_skips(report, led, live)
    for f in missing_twins(report, led, live, lambda b, dt: policy.resolve(b, dt).case_timeout):
        entries.append(GateEntry(f.key, f.backend, f.case_id, f.dtype, f.klass, f.detail))
        seen.add(f.key)
    for name, (b, _) in live.items():
        why = check_info(infos[name], b) if b is not None and name in infos else ""
        if why:
            entries.append(GateEntry(f"{name}::*", name, "*", "*", "ERROR", why))
    judged = []
    for i, r in enumerate(report["records"]):
        key, b = r["key"], base.get(r["key"])
        seen.add(key)
        if i in led.rejected:
            continue
        st, reason = rejudge(r, policy)
        info = infos.get(r["backend"], {})
        if st == "skip":
            lb, why_not = live.get(r["backend"], (None, "not imported"))
            st, reason = recheck_skip(r, info, lb, why_not, policy.resolve(r["backend"], r["dtype"]).case_timeout)
        elif st in ("pass", "fail", "xfail") and not info.get("available", True):
            st, reason = "error", "report altered: a result of a backend the report lists as unavailable"
        judged.append((r, st))
        if st == "error":
            klass, detail = "ERROR", reason
        elif st == "fail":
            klass, detail = "FAIL", reason
        elif st == "skip":
            klass, detail = ("MISSING", f"skipped now: {reason}") if b else ("SKIP", reason)
        elif st == "xfail":
            klass, detail = ("REGRESSED", f"a baseline pass is now an expected difference: {reason}") \
                if b and b["status"] == "pass" else ("XFAIL", reason)
        elif b is None:
            klass, detail = "PASS", "new (not in the baseline)"
        elif b["status"] != "pass":
            klass, detail = "IMPROVED", f"baseline status {b['status']}, now pass"
        else:
            klass, detail = _compare(r, b, policy)
        if st == "pass":
            verified[r["backend"]] += 1
        entries.append(GateEntry(key, r["backend"], r["id"], r["dtype"], klass, detail))
    ran = {r["backend"] for r in report["records"]} | {b["name"] for b in report.get("backends", [])}
    for key, b in base.items():
        if key in seen or (subset and b["backend"] not in ran):
            continue
        entries.append(GateEntry(key, b["backend"], b["id"], b["dtype"], "MISSING",
                                 "in the baseline, absent from the report"))
    entries += coverage_entries(report, judged, policy, baseline, ran if subset else None)
    entries += property_entries(report, judged, policy, baseline, live, led, ran if subset else None)
    for name in sorted(ran):
        if not verified[name]:
            n = sum(1 for r in report["records"] if r["backend"] == name)
            entries.append(GateEntry(f"{name}::*", name, "*", "*", "UNVERIFIED",
                                     f"no case of {name} was verified ({n} records, none a pass)"))
    return entries


def shard_entries(report: dict) -> list[GateEntry]:
    """A shard alone is never green; a merged report's shards are re-checked (merge.py)."""
    if "shard" in report:
        s = report["shard"]
        return [GateEntry("shard", "*", "*", "*", "ERROR",
                          f"shard {s['index']}/{s['count']} ({len(s['cases'])} cases): one part of a run, "
                          f"incomplete on its own; merge the {s['count']} shard reports with `lrkv merge` and gate "
                          "the merged report")]
    if "merged" in report:
        from .merge import problems

        return [GateEntry(key, "*", "*", "*", "ERROR", why) for key, why in problems(report)]
    return []


def property_entries(report: dict, judged: list[tuple[dict, str]], policy: Policy, baseline: dict, live: dict,
                     led, ran: set[str] | None) -> list[GateEntry]:
    """The server properties (server_properties.py), re-judged: each judged record must carry
    exactly the properties the harness runs on its case (`plan` and `selected`, counted from the
    selection, led: ledger.account's); `required` recomputed from what the backend declares (as
    it imports here, else the report's entry) and what the policy asks; a property with outputs
    re-judged from them by judge_record; a skip is an altered report but same_buffers'
    NO_SECOND_DRAW and, on a record that fails, FIRST_DRAW_FAILED of NEED_A_PASSING_CASE; a
    required one that failed is FAIL (ERROR if it could not run); one the baseline held that
    fails now is REGRESSED, and one not checked now MISSING."""
    from .server_properties import (FIRST_DRAW_FAILED, NEED_A_PASSING_CASE, NO_SECOND_DRAW, declarations, plan,
                                    required, second_draws, selected)
    from .case import Case

    infos = {b["name"]: b for b in report.get("backends", [])}
    shares = plan(led.expected.values()) if led.selection is not None else {}
    out: list[GateEntry] = []
    for r, st in judged:
        if st == "error":
            continue
        b = r["backend"]
        live_b = (live.get(b) or (None, ""))[0]
        declared = declarations(live_b) if live_b is not None else ((infos.get(b) or {}).get("declares") or {})
        asked = policy.required_properties(b)
        judged_here = st in ("pass", "fail", "xfail") and (infos.get(b) or {}).get("role") != "baseline"
        share = shares.get((r.get("twin") or {}).get("of", r["id"]))  # a twin runs its declined case's share
        should = set(selected(share, declared, asked)) if judged_here and share is not None else set()
        have = set(r.get("properties") or {})
        if have != should:
            what = [f"no {n}" for n in sorted(should - have)] + [f"an unexpected {n}" for n in sorted(have - should)]
            out.append(GateEntry(f"{r['key']}#properties", b, r["id"], r["dtype"], "ERROR",
                                 f"report altered: the record has {', '.join(what)} (the harness runs "
                                 f"{', '.join(sorted(should)) or 'no server property'} on this case)"))
            continue
        tol = policy.resolve(b, r["dtype"])
        for name, e in (r.get("properties") or {}).items():
            key = f"{r['key']}#{name}"
            want = required(name, declared, asked)
            why = "" if e.get("required") == want else \
                f"report altered: property {name} recorded as required={e.get('required')}, the backend " \
                f"declares and the policy asks {want}"
            if not why and e.get("status") == "skip" and (name, e.get("reason")) != ("same_buffers", NO_SECOND_DRAW) \
                    and not (name in NEED_A_PASSING_CASE and e.get("reason") == FIRST_DRAW_FAILED and st != "pass"):
                why = f"report altered: property {name} is a skip ({e.get('reason', '')[:120]}) on a record " \
                      f"that {'passes' if st == 'pass' else 'fails'}, where the harness judges it"
            if not why and "outputs" in e:
                case = Case.from_dict(r["case"])
                expected = second_draws(case) if name == "same_buffers" else [case]
                got, _ = judge_record({"outputs": e["outputs"], "dtype": r["dtype"], "expect": "match",
                                       "spec": r["spec"], "oracle": None}, tol)
                try:
                    drawn = Case.from_dict(e.get("case"))
                except (ValueError, TypeError, KeyError, AttributeError):
                    drawn = None
                if drawn not in expected:
                    why = f"report altered: property {name}'s case is not the one the harness draws"
                elif got != e["status"]:
                    why = f"report altered: property {name} stored {e['status']!r}, its evidence says {got!r}"
            if why:
                out.append(GateEntry(key, b, r["id"], r["dtype"], "ERROR", why))
            elif want and e["status"] in ("fail", "error"):
                out.append(GateEntry(key, b, r["id"], r["dtype"], "FAIL" if e["status"] == "fail" else "ERROR",
                                     f"property {name}: {e.get('reason', '')}"))
    from .tolerance_report import property_table

    now = property_table([r for r, st in judged if st != "error"])
    for b, names in (baseline.get("properties") or {}).items():
        if ran is not None and b not in ran:
            continue
        for name in names:
            t = now.get(b, {}).get(name)
            key = f"{b}::property:{name}"
            if t is None or not t["ran"]:
                out.append(GateEntry(key, b, f"property:{name}", "*", "MISSING",
                                     f"held by the baseline, not checked in this report: {name}"))
            elif t["failed"] and not any(e.key.startswith(f"{b}::") and e.key.endswith(f"#{name}") for e in out):
                out.append(GateEntry(key, b, f"property:{name}", "*", "REGRESSED",
                                     f"held by the baseline, fails now: {name} ({t['first']})"))
    return out


def _live_for_skips(report: dict, led, live: dict | None) -> dict:
    """The backends to re-ask about skipped cases: given, or imported when a record needs them."""
    if live is not None:
        return live
    if not any(r["status"] == "skip" for r in report["records"]):
        return {}
    return live_backends(report)


def coverage_entries(report: dict, judged: list[tuple[dict, str]], policy: Policy, baseline: dict,
                     ran: set[str] | None) -> list[GateEntry]:
    """UNCOVERED entries: required features no re-judged pass exercises, and features the
    baseline's report covered that this one does not (ran: limit the latter to these backends)."""
    roles = [b["name"] for b in report.get("backends", []) if b.get("role") == "baseline"]
    cov = coverage(judged, policy.coverage, roles)
    now = covered_features(cov)
    out: dict[str, GateEntry] = {}
    for b, lv, name, reasons in uncovered(cov):
        key = f"{b}::coverage:{lv}:{name}"
        out[key] = GateEntry(key, b, f"coverage:{lv}:{name}", "*", "UNCOVERED",
                             f"no passing record of {b} exercises {name!r} at level {lv}"
                             + (f" ({'; '.join(reasons)})" if reasons else ""))
    for b, levels in (baseline.get("coverage") or {}).items():
        if ran is not None and b not in ran:
            continue
        for lv, names in levels.items():
            mine = set(now.get(b, {}).get(lv, ()))
            for name in names:
                key = f"{b}::coverage:{lv}:{name}"
                if name not in mine and key not in out:
                    out[key] = GateEntry(key, b, f"coverage:{lv}:{name}", "*", "UNCOVERED",
                                         f"covered by the baseline, not by this report: {name!r} at level {lv}")
    return list(out.values())


def coverage_dropped(old: dict, new: dict) -> list[str]:
    """'backend · level · feature' for every feature the old baseline covered and the new one does not."""
    lost = []
    for b, levels in (old.get("coverage") or {}).items():
        for lv, names in levels.items():
            keep = set((new.get("coverage") or {}).get(b, {}).get(lv, ()))
            lost += [f"{b} · {lv} · {n}" for n in names if n not in keep]
    return lost


def independently_verified(report: dict, entries: list[GateEntry]) -> list[str]:
    """Non-baseline backends with at least one case the gate accepted as a pass."""
    roles = {b["name"]: b.get("role", "verified") for b in report.get("backends", [])}
    passed = {e.backend for e in entries if e.klass in ("PASS", "IMPROVED", "REGRESSED") and e.case_id != "*"}
    return sorted(b for b in passed if roles.get(b, "verified") != "baseline")


def exit_code(entries: list[GateEntry], report: dict | None = None) -> int:
    """1 if anything blocks; 4 if nothing was independently verified; 0 otherwise."""
    if any(e.klass in BLOCKING - {"UNVERIFIED"} for e in entries):
        return EXIT_BLOCKED
    if report is not None and not independently_verified(report, entries):
        return EXIT_NOTHING
    if any(e.klass == "UNVERIFIED" for e in entries):
        return EXIT_BLOCKED
    return EXIT_OK


def counts(entries: list[GateEntry]) -> dict[str, int]:
    c = Counter(e.klass for e in entries)
    return {k: c.get(k, 0) for k in CLASSES}


def render_markdown(entries: list[GateEntry], max_rows: int = 40, report: dict | None = None) -> str:
    c = counts(entries)
    code = exit_code(entries, report)
    verdict = {EXIT_OK: "✅ ok", EXIT_BLOCKED: "❌ blocked", EXIT_NOTHING: "⚠️ nothing verified"}[code]
    props = sum(e.klass == "FAIL" and "#" in e.key for e in entries)  # `<record key>#<property>` entries
    lines = [f"## LRKV merge gate — {verdict}", "",
             " · ".join(f"{k} {v}" for k, v in c.items() if v or k in BLOCKING)
             + (f" (FAIL: {c['FAIL'] - props} cases, {props} server properties)" if props else ""), ""]
    notable = [e for e in entries if e.klass not in ("PASS", "SKIP", "XFAIL")]
    notable.sort(key=lambda e: (e.klass not in BLOCKING, e.klass, e.key))
    if notable:
        lines += ["| class | backend | case | detail |", "| --- | --- | --- | --- |"]
        for e in notable[:max_rows]:
            detail = e.detail.replace("|", "\\|").replace("\n", " ")[:200]
            lines.append(f"| {e.klass} | {e.backend} | `{e.case_id}` | {detail} |")
        if len(notable) > max_rows:
            lines.append(f"\n… {len(notable) - max_rows} more")
    return "\n".join(lines) + "\n"
