"""Every case accounted for (DESIGN §7): the gate's check that a report holds exactly one
record per (gated backend, case of its selection), and that each skip is one the backend
would make again.

The gate rebuilds the report's case list from its Selection (selection.py) and never takes
a record's word for which cases exist or what they expect. Findings:

  MISSING  a case of the selection with no record for a backend the report lists
  ERROR    two records for one (backend, case); a record whose case is not in the selection,
           or differs from the selection's case of that id (an edited `expect`, say); a twin
           beside a case that was not declined, or two twins; a record of a backend the
           report does not list; a skip the backend does not make again — it claims the level
           or dtype, its supports() now accepts the case, or a backend listed as available
           skipped as unavailable

Re-asking supports() runs no kernel; where the backend cannot be imported here the skip is
kept and its detail says it was not re-asked (a report from elsewhere can only be
spot-checked, by `lrkv gate --replay`).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from .case import Case
from .selection import Selection

UNAVAILABLE = "backend unavailable: "
UNSUPPORTED = "unsupported: "
NOT_APPLICABLE = ("not implemented: ", "dtype ", "cache ", "not applicable: ")  # runner.not_applicable's reasons


@dataclass(frozen=True)
class Finding:
    key: str
    backend: str
    case_id: str
    dtype: str
    klass: str  # MISSING or ERROR
    detail: str


@dataclass
class Ledger:
    selection: Selection | None
    expected: dict[str, Case]  # case id -> the selection's case
    findings: list[Finding] = field(default_factory=list)
    rejected: set[int] = field(default_factory=set)  # indices of records the findings replace


def _case(data) -> Case | None:
    try:
        return Case.from_dict(data)
    except (ValueError, TypeError, KeyError):
        return None  # the record's own re-judging names what is wrong with it


def account(report: dict) -> Ledger:
    """Check the records against the report's selection (see the module docstring)."""
    try:
        sel = Selection.from_dict(report.get("selection"))
        expected = {c.id: c for c in sel.resolve()}
    except (ValueError, TypeError) as e:
        led = Ledger(None, {})
        led.findings.append(Finding("selection", "*", "*", "*", "ERROR",
                                    f"report altered: its selection cannot be rebuilt ({e})"))
        led.rejected = set(range(len(report["records"])))
        return led
    led = Ledger(sel, expected)
    names = [b["name"] for b in report.get("backends", [])]
    for name, n in Counter(names).items():
        if n > 1:
            led.findings.append(Finding(f"{name}::*", name, "*", "*", "ERROR", f"report altered: backend {name!r} "
                                        f"is listed {n} times"))
    primary: dict[tuple[str, str], list[int]] = {}
    twins: dict[tuple[str, str], list[int]] = {}
    for i, r in enumerate(report["records"]):
        b, rid = r["backend"], r["id"]
        if b not in names:
            led.findings.append(Finding(r["key"], b, rid, r["dtype"], "ERROR",
                                        f"report altered: a record of backend {b!r}, which the report does not list"))
            led.rejected.add(i)
            continue
        twin = r.get("twin")
        of = twin.get("of") if isinstance(twin, dict) else rid
        want = expected.get(of)
        if want is None:
            led.findings.append(Finding(r["key"], b, rid, r["dtype"], "ERROR",
                                        f"report altered: case {of} is not in the report's selection "
                                        f"({sel.describe()})"))
            led.rejected.add(i)
            continue
        got = _case(twin.get("case") if isinstance(twin, dict) else r.get("case"))
        if got is not None and got != want:
            led.findings.append(Finding(r["key"], b, rid, r["dtype"], "ERROR",
                                        "report altered: the record's case differs from the selection's case "
                                        f"{of} (fields {_differing(got, want)})"))
            led.rejected.add(i)
            continue
        (twins if isinstance(twin, dict) else primary).setdefault((b, of), []).append(i)
    recs = report["records"]
    for b in dict.fromkeys(names):
        for cid, case in expected.items():
            mine = primary.get((b, cid), [])
            if not mine:
                led.findings.append(Finding(f"{b}::{cid}", b, cid, case.dtype, "MISSING",
                                            "no record of this case of the selection"))
            elif len(mine) > 1:
                led.findings.append(Finding(f"{b}::{cid}", b, cid, case.dtype, "ERROR",
                                            f"report altered: {len(mine)} records of one case"))
                led.rejected.update(mine)
            extra = twins.get((b, cid), [])
            if len(extra) > 1 or (extra and not (len(mine) == 1 and _declined(recs[mine[0]]))):
                why = f"{len(extra)} twins of one case" if len(extra) > 1 else "a twin of a case that was not declined"
                led.findings.append(Finding(recs[extra[0]]["key"], b, recs[extra[0]]["id"], case.dtype, "ERROR",
                                            f"report altered: {why}"))
                led.rejected.update(extra)
    return led


def _declined(rec: dict) -> bool:
    from .coverage import declined

    return declined(rec)


def _differing(a: Case, b: Case) -> str:
    da, db = a.to_dict(), b.to_dict()
    return ", ".join(sorted(k for k in set(da) | set(db) if da.get(k) != db.get(k))) or "?"


def missing_twins(report: dict, led: Ledger, live: dict, timeout_of) -> list[Finding]:
    """MISSING for every declined case whose twin the live backend would run but the report lacks
    (a deleted failing twin). timeout_of(backend, dtype) -> the per-call time limit."""
    from .runner import backend_accepts
    from .tolerance import Tolerance
    from .twins import find_twin, forced_changes, twin_id

    if led.selection is None or not led.selection.twins:
        return []
    recs = report["records"]
    have = {(r["backend"], r["twin"]["of"]) for r in recs if isinstance(r.get("twin"), dict)}
    roles = {b["name"]: b.get("role", "verified") for b in report.get("backends", [])}
    out = []
    for i, r in enumerate(recs):
        b = r["backend"]
        if i in led.rejected or "twin" in r or not _declined(r) or (b, r["id"]) in have or roles.get(b) == "baseline":
            continue
        backend = (live.get(b) or (None, ""))[0]
        case = led.expected.get(r["id"])
        if backend is None or case is None:
            continue
        found = find_twin(case, backend_accepts(backend, Tolerance(case_timeout=timeout_of(b, case.dtype))),
                          forced_changes(case, backend))
        if found is not None:
            tid = twin_id(case, found[1])
            out.append(Finding(f"{b}::{tid}", b, tid, found[0].dtype, "MISSING",
                               f"the twin of declined case {case.id} is not in the report"))
    return out


# ----------------------------------------------------------------------------- skips
def live_backends(report: dict, backend_paths: tuple[str, ...] = ()) -> dict[str, tuple[Any, str]]:
    """name -> (the backend as importable here, or None; why not) for every backend of the report."""
    from .backend_registry import add_backend_path, get_backend

    for d in backend_paths:
        add_backend_path(d)
    tp = any(r.get("level") == "tp" for r in report["records"])
    out = {}
    for info in report.get("backends", []):
        try:
            b = get_backend(info["ref"])
            if tp:
                from .levels import get_level
                ((_, b),) = get_level("tp").wrap_backends([(info["ref"], b)])
            out[info["name"]] = (b, "")
        except Exception as e:  # noqa: BLE001 — any import failure: the skip cannot be re-asked here
            out[info["name"]] = (None, f"{type(e).__name__}: {e}")
    return out


def check_info(info: dict, live) -> str:
    """'' when the report's levels/dtypes for a backend are the live backend's, else what differs."""
    from ..spec import dtype_name

    from .protocol import fp8_claims

    levels, dtypes = sorted(live.levels), [dtype_name(d) for d in live.dtypes]
    if sorted(info.get("levels", [])) != levels or sorted(info.get("dtypes", [])) != sorted(dtypes):
        return (f"report altered: backend {info['name']!r} is listed with levels {info.get('levels')} and dtypes "
                f"{info.get('dtypes')}; imported here it has {levels} and {dtypes}")
    formats, grans = fp8_claims(live)
    listed = (tuple(info.get("cache_formats", ())), tuple(info.get("scale_granularities", ())))
    if (sorted(listed[0]), sorted(listed[1])) != (sorted(formats), sorted(grans)):
        return (f"report altered: backend {info['name']!r} is listed with fp8 caches {list(listed[0])} "
                f"({list(listed[1])}); imported here it has {list(formats)} ({list(grans)})")
    return ""


def recheck_skip(rec: dict, info: dict, live, why_not_live: str, timeout: float) -> tuple[str, str]:
    """(status, detail) of a skip record: 'skip' when the backend would skip it again (or
    cannot be asked here: the detail says so), 'error' "report altered" when it would not."""
    from .isolation import call_in_thread
    from .runner import not_applicable

    reason, case = rec.get("reason") or "", _case(rec.get("case"))
    if case is None:
        return "error", "report altered: the record's case cannot be read"
    if reason.startswith(UNAVAILABLE):
        if info.get("available", True):
            return "error", "report altered: skipped as unavailable, but the report lists the backend as available"
        return "skip", reason
    if reason.startswith(NOT_APPLICABLE):
        if not not_applicable(_Info(info), case):
            return "error", (f"report altered: skipped ({reason[:80]}), but the backend's levels "
                             f"{info.get('levels')} and dtypes {info.get('dtypes')} claim the case")
        return "skip", reason
    if not reason.startswith(UNSUPPORTED):
        return "error", f"report altered: a skip needs one of the runner's reasons, got {reason[:80]!r}"
    if live is None or not hasattr(live, "supports"):
        note = why_not_live or "the backend has no supports() here"
        return "skip", f"{reason} (supports() not re-asked: {note[:160]})"
    try:
        ok, _ = call_in_thread(lambda: live.supports(case), timeout)
    except Exception as e:  # noqa: BLE001 — a supports() that fails here cannot confirm the skip
        return "skip", f"{reason} (supports() not re-asked: it raised {type(e).__name__}: {e})"
    if ok:
        return "error", f"report altered: skipped ({reason[:80]}), but the backend's supports() accepts the case"
    return "skip", reason


class _Info:
    """A report's backend entry with the attributes runner.not_applicable reads."""

    def __init__(self, info: dict):
        from ..spec import as_dtype

        self.levels = frozenset(info.get("levels", ()))
        self.dtypes = tuple(as_dtype(d) for d in info.get("dtypes", ()))
        self.cache_formats = tuple(info.get("cache_formats", ()))
        self.scale_granularities = tuple(info.get("scale_granularities", ()))
        self.cache_layout = info.get("cache_layout", "pages")
