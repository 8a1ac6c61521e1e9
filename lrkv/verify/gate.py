"""The merge gate (DESIGN §7): a report against the accepted baseline.

Every (backend, case) key is sorted into one class:

  PASS       within the bound, and not significantly worse than the baseline (or new)
  IMPROVED   passes where the baseline did not, or an error shrank beyond the regression
             factor — reported; accept it on purpose with --update-baseline
  XFAIL      an expected difference (rope='latent' vs the model), still differing
  SKIP       skipped, and not a pass in the baseline
  FAIL       the tolerance bound is exceeded
  REGRESSED  passes, but an error grew beyond regression_factor × baseline
             (+ regression_slack × bound, so that noise near zero does not count)
  MISSING    in the baseline as pass/xfail, absent (or skipped) now
  ERROR      the backend raised

Exit 0 only when nothing is FAIL, REGRESSED, MISSING or ERROR (PyTorch's inductor accuracy
CI gates on expected-results CSVs the same way).
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .metrics import parse_float
from .report import SCHEMA as REPORT_SCHEMA
from .tolerance import Policy

BASELINE_SCHEMA = "lrkv.tolerance-baseline/1"
CLASSES = ("PASS", "IMPROVED", "XFAIL", "SKIP", "FAIL", "REGRESSED", "MISSING", "ERROR")
BLOCKING = frozenset({"FAIL", "REGRESSED", "MISSING", "ERROR"})
BASELINE_DIGITS = 4  # significant digits kept in the baseline: enough to judge growth, stable in diffs


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
    """The errors the gate tracks for growth, with their bounds: out max/mean, lse max."""
    m, b = rec["metrics"], rec["bound"]
    out = {"max_abs": (_sig(m["max_abs"]), _sig(b["max_abs"])), "mean_abs": (_sig(m["mean_abs"]), _sig(b["mean_abs"]))}
    if rec.get("lse"):
        out["lse_max_abs"] = (_sig(rec["lse"]["metrics"]["max_abs"]), _sig(rec["lse"]["bound"]["max_abs"]))
    return out


def baseline_from_report(report: dict) -> dict:
    """The accepted state: pass and xfail records, with their errors and bounds."""
    entries = {}
    for r in report["records"]:
        if r["status"] in ("pass", "xfail"):
            entries[r["key"]] = {"backend": r["backend"], "id": r["id"], "dtype": r["dtype"], "level": r["level"],
                                 "status": r["status"],
                                 "errors": {k: {"value": v, "bound": bd} for k, (v, bd) in _errors(r).items()}}
    return {"schema": BASELINE_SCHEMA, "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "source": {"suite_version": report["suite_version"], "git": report["git"], "grid": report.get("grid"),
                       "device": report["environment"]["device"]},
            "entries": dict(sorted(entries.items()))}


def load_baseline(path: str | Path) -> dict:
    """A baseline file, or a full report used as one."""
    data = json.loads(Path(path).read_text())
    if data.get("schema") == REPORT_SCHEMA:
        return baseline_from_report(data)
    if data.get("schema") != BASELINE_SCHEMA:
        raise ValueError(f"{path}: neither a baseline ({BASELINE_SCHEMA}) nor a report ({REPORT_SCHEMA})")
    return data


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


def classify(report: dict, baseline: dict, *, subset: bool = False) -> list[GateEntry]:
    """One entry per key in the report or the baseline. subset=True ignores baseline entries of
    backends that the report did not run at all (a report for one backend gated against the
    whole baseline)."""
    policy = Policy.from_dict(report["policy"])
    base = baseline["entries"]
    entries = []
    seen = set()
    for r in report["records"]:
        key, b = r["key"], base.get(r["key"])
        seen.add(key)
        st = r["status"]
        if st == "error":
            klass, detail = "ERROR", r["reason"]
        elif st == "fail":
            klass, detail = "FAIL", r["reason"]
        elif st == "skip":
            klass, detail = ("MISSING", f"skipped now: {r['reason']}") if b else ("SKIP", r["reason"])
        elif st == "xfail":
            klass, detail = "XFAIL", r["reason"]
        elif b is None:
            klass, detail = "PASS", "new (not in the baseline)"
        elif b["status"] != "pass":
            klass, detail = "IMPROVED", f"baseline status {b['status']}, now pass"
        else:
            klass, detail = _compare(r, b, policy)
        entries.append(GateEntry(key, r["backend"], r["id"], r["dtype"], klass, detail))
    ran = {r["backend"] for r in report["records"]}
    for key, b in base.items():
        if key in seen or (subset and b["backend"] not in ran):
            continue
        entries.append(GateEntry(key, b["backend"], b["id"], b["dtype"], "MISSING",
                                 "in the baseline, absent from the report"))
    return entries


def exit_code(entries: list[GateEntry]) -> int:
    return 1 if any(e.klass in BLOCKING for e in entries) else 0


def counts(entries: list[GateEntry]) -> dict[str, int]:
    c = Counter(e.klass for e in entries)
    return {k: c.get(k, 0) for k in CLASSES}


def render_markdown(entries: list[GateEntry], max_rows: int = 40) -> str:
    c = counts(entries)
    verdict = "❌ blocked" if exit_code(entries) else "✅ ok"
    lines = [f"## LRKV merge gate — {verdict}", "",
             " · ".join(f"{k} {v}" for k, v in c.items() if v or k in BLOCKING), ""]
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


def write_baseline(baseline: dict, path: str | Path) -> None:
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    Path(path).write_text(json.dumps(baseline, indent=1, allow_nan=False) + "\n")
