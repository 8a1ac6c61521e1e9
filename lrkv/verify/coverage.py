"""What each backend's records covered, per level and feature (DESIGN §7, §8).

For a backend and a level it implements, every feature the level declares (features.py)
gets one status:

  covered        a passing record (a twin included) exercises it, or an expected difference
                 that still differs (xfail: what the grid expects of that case)
  uncovered      required and never exercised by a pass: the gate blocks (UNCOVERED)
  not supported  a capability the backend declines (every case with it was declined and
                 none passed), or a feature that needs only declined capabilities
  optional       the policy's [coverage] table exempts it for this backend
  not in grid    no case of the run exercises it (nothing to cover)

The statuses come from the records' cases through `features.case_features` — a pure
function — and from the records' statuses, so the gate recomputes this table from the
re-judged records; the table a report carries is for people to read. Baseline paths (role
'baseline') get a table but are never required to cover anything: they verify nothing.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from .case import Case
from .features import BY_NAME, case_features, level_features

STATUSES = ("covered", "uncovered", "not supported", "optional", "not in grid")
NOT_RUN = ("not implemented:", "backend unavailable:")  # a level the backend never ran here
DECLINED = ("unsupported: ", "dtype ", "cache ", "not applicable: ")  # reason prefixes of a case the backend declined (runner.py)
VERIFIED = ("pass", "xfail")  # statuses that cover their case's features
REASONS_KEPT = 2  # skip reasons shown for an uncovered feature


def declined(rec: dict) -> bool:
    """Whether a skip record is a case its backend declined (supports() false, or its dtype)."""
    return rec["status"] == "skip" and rec["reason"].startswith(DECLINED)


def _features(rec: dict, memo: dict) -> frozenset[str]:
    key = id(rec["case"])
    if key not in memo:
        try:
            memo[key] = case_features(Case.from_dict(rec["case"]))
        except (ValueError, TypeError, KeyError):
            memo[key] = frozenset()  # an unreadable case covers nothing (the gate makes it an ERROR)
    return memo[key]


def optional_features(coverage_policy: dict, backend: str) -> frozenset[str]:
    """Features the policy exempts for this backend: [coverage] optional + [coverage.backend.<name>] optional."""
    table = coverage_policy or {}
    mine = (table.get("backend") or {}).get(backend) or {}
    return frozenset(table.get("optional", ())) | frozenset(mine.get("optional", ()))


def _reasons(recs: list[tuple[dict, str]]) -> list[str]:
    c = Counter(f"{st}: {r['reason'][:120]}" if r.get("reason") else st for r, st in recs)
    return [f"{n}× {why}" for why, n in c.most_common(REASONS_KEPT)]


def level_table(level: str, mine: list[tuple[dict, str]], grid: frozenset[str], optional: frozenset[str],
                memo: dict) -> dict:
    """The coverage table of one backend at one level (mine: its (record, status) pairs there)."""
    covered = set()
    for r, st in mine:
        if st in VERIFIED:
            covered |= _features(r, memo)
    declined_caps = set()
    for f in level_features(level):
        if f.dim and f.name in grid and f.name not in covered:
            carrying = [(r, st) for r, st in mine if f.name in _features(r, memo) and "twin" not in r]
            if carrying and any(st == "skip" and r["reason"].startswith(DECLINED) for r, st in carrying):
                declined_caps.add(f.name)
    table = {}
    for f in level_features(level):
        if f.name in covered:
            status = "covered"
        elif f.name not in grid:
            status = "not in grid"
        elif f.name in declined_caps or (f.needs and all(n in declined_caps or n not in grid for n in f.needs)):
            status = "not supported"
        elif f.name in optional:
            status = "optional"
        else:
            status = "uncovered"
        entry = {"status": status}
        if status in ("uncovered", "not supported"):
            entry["reasons"] = _reasons([(r, st) for r, st in mine
                                         if f.name in _features(r, memo) and st not in VERIFIED])
        table[f.name] = entry
    counts = Counter(e["status"] for e in table.values())
    return {"covered": counts["covered"], "of": len(table) - counts["not in grid"],
            "uncovered": counts["uncovered"], "not_supported": counts["not supported"], "features": table}


def coverage(judged: Iterable[tuple[dict, str]], coverage_policy: dict | None = None,
             baseline_roles: Iterable[str] = ()) -> dict:
    """backend -> level -> table, from (record, status) pairs (the gate passes re-judged statuses).

    A level appears for a backend when at least one of its records there was run or declined
    (not 'not implemented' or 'backend unavailable')."""
    judged = list(judged)
    memo: dict = {}
    grid: dict[str, set[str]] = {}
    for r, _ in judged:
        if "twin" not in r:  # the grid is the run's own cases; twins only cover
            grid.setdefault(r["level"], set()).update(_features(r, memo))
    by: dict[str, dict[str, list]] = {}
    for r, st in judged:
        by.setdefault(r["backend"], {}).setdefault(r["level"], []).append((r, st))
    out = {}
    baseline_roles = set(baseline_roles)
    for backend, levels in sorted(by.items()):
        optional = optional_features(coverage_policy or {}, backend)
        tables = {}
        for level, mine in levels.items():
            if all(st == "skip" and r["reason"].startswith(NOT_RUN) for r, st in mine):
                continue
            tables[level] = level_table(level, mine, frozenset(grid.get(level, ())), optional, memo)
            tables[level]["required"] = backend not in baseline_roles
        if tables:
            out[backend] = tables
    return out


def covered_features(cov: dict) -> dict[str, dict[str, list[str]]]:
    """backend -> level -> the covered features (what a baseline keeps)."""
    return {b: {lv: sorted(n for n, e in t["features"].items() if e["status"] == "covered")
                for lv, t in levels.items()} for b, levels in cov.items()}


def uncovered(cov: dict) -> list[tuple[str, str, str, list[str]]]:
    """(backend, level, feature, reasons) of every required feature left uncovered."""
    out = []
    for b, levels in cov.items():
        for lv, t in levels.items():
            if not t.get("required", True):
                continue
            for name, e in t["features"].items():
                if e["status"] == "uncovered":
                    out.append((b, lv, name, e.get("reasons", [])))
    return out


def describe(name: str) -> str:
    f = BY_NAME.get(name)
    return f.why if f else ""
