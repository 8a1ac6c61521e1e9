"""`check_backend`, `check_case` and `cases_for`: the harness, called from a user's tests.

The same runner as `lrkv verify` (DESIGN §6 rule, §7 records), so a test and the merge
gate agree on every verdict; failures name their replay command,
`lrkv verify --backend <module:attr> --case '<json>'`. A failure's message says first which
case failed and where (its failing sequences, heads and positions, and what they share), then
the replay, then the full reason; these functions hide their own frames from pytest's
traceback (`__tracebackhide__`), so a failing test shows the caller's code and that message.
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from ..checks import check_bool, check_choice
from ..spec import dtype_name
from ..verify.case import CASE_LEVELS, DTYPES, Case
from .report_view import Report
from .target import Target, resolve

GRIDS = ("default", "quick", "mutants")


class NotVerified(ValueError):
    """`check_case` (or a property check) did not judge the case: the backend is unavailable
    here, does not implement its level or dtype, or its `supports()` declined it. Raised, not
    returned, so that a test which verified nothing cannot pass; `.record` is the skip record
    (None from a property check) and `.reason` why."""

    def __init__(self, message: str, reason: str, record: dict | None = None):
        super().__init__(message)
        self.reason = reason
        self.record = record


def grid_cases(grid: str | Iterable[Case] = "default") -> list[Case]:
    """A named grid of `lrkv.verify.grids`, or the given cases."""
    from ..verify import grids

    if isinstance(grid, str):
        check_choice("grid", grid, GRIDS)
        return {"default": grids.default_grid, "quick": grids.quick_grid, "mutants": grids.mutant_grid}[grid]()
    cases = list(_iterable("grid", grid, f"a grid name {GRIDS} or an iterable of Case"))
    for c in cases:
        if not isinstance(c, Case):
            raise TypeError(f"grid must be a grid name {GRIDS} or an iterable of Case, got a {type(c).__name__}")
    return cases


def _iterable(name: str, value, what: str):
    if isinstance(value, (str, bytes)) or not hasattr(value, "__iter__"):
        raise TypeError(f"{name} must be {what}, got {type(value).__name__} {value!r}")
    return value


def _filter(cases: list[Case], levels, dtypes) -> list[Case]:
    if levels is not None:
        levels = {check_choice("levels", lv, CASE_LEVELS)
                  for lv in ([levels] if isinstance(levels, str) else _iterable("levels", levels, "a level or levels"))}
        cases = [c for c in cases if c.level in levels]
    if dtypes is not None:
        names = set()
        one = isinstance(dtypes, str) or not hasattr(dtypes, "__iter__")  # a name or a torch.dtype
        for d in [dtypes] if one else dtypes:
            try:
                names.add(check_choice("dtypes", dtype_name(d), DTYPES))
            except TypeError:
                raise ValueError(f"dtypes must be among {', '.join(DTYPES)}; got {d!r}") from None
        cases = [c for c in cases if c.dtype in names]
    return cases


def _selection(grid, cases: list[Case], levels, dtypes):
    """What the report records as asked for: a named grid and its filters, or the cases given."""
    from ..verify.selection import GIVEN, Selection

    if not isinstance(grid, str):
        if not cases:
            raise ValueError("grid: no case to verify (the given cases, after the levels/dtypes filters, are none)")
        return Selection(grid=GIVEN, cases=tuple(cases))
    one = lambda v: isinstance(v, str) or not hasattr(v, "__iter__")  # noqa: E731 — a name, not a list
    levels_ = () if levels is None else tuple(sorted([levels] if one(levels) else set(levels)))
    dtypes_ = () if dtypes is None else tuple(sorted({dtype_name(d) for d in ([dtypes] if one(dtypes) else dtypes)}))
    return Selection(grid=grid, level=tuple(levels_), dtype=tuple(dtypes_))


def _policy(policy):
    from ..verify.tolerance import Policy, load_policy

    if policy is None or isinstance(policy, (str, Path)):
        return load_policy(policy)
    if isinstance(policy, Policy):
        return policy
    raise TypeError(f"policy must be None, a TOML path or a Policy, got {type(policy).__name__}")


def inapplicable(backend: Any, case: Case) -> str | None:
    """Why the backend does not run this case (its levels/dtypes), or None."""
    from ..verify.runner import not_applicable

    why = not_applicable(backend, case)
    return f"{backend.name}: {why}" if why else None


def cases_for(backend: Any, grid: str | Iterable[Case] = "default", *, levels=None, dtypes=None) -> list:
    """The grid's cases as `pytest.param`s for `pytest.mark.parametrize("case", ...)`, ids = case
    ids; a case the backend does not claim is a skip with its reason, never dropped, and one
    declined for its dtype is followed by its twin (id `<case id>~<changes>`)."""
    import pytest

    from ..verify.runner import backend_accepts, role_of
    from ..verify.tolerance import Tolerance
    from ..verify.twins import find_twin, forced_changes, twin_id

    target = resolve(backend) if not isinstance(backend, Target) else backend
    accepts = backend_accepts(target.backend, Tolerance())
    out = []
    for case in _filter(grid_cases(grid), levels, dtypes):
        why = inapplicable(target.backend, case)
        out.append(pytest.param(case, id=case.id, marks=pytest.mark.skip(reason=why) if why else ()))
        # a case declined for its dtype also runs at its twin (the nearest variant the backend
        # supports, every other feature kept: lrkv.verify.twins), as `lrkv verify` does
        if why and ": dtype " in why and role_of(target.backend) != "baseline":
            found = find_twin(case, accepts, forced_changes(case, target.backend))
            if found is not None:
                out.append(pytest.param(found[0], id=twin_id(case, found[1])))
    return out


def check_case(backend: Any, case: Case, *, policy=None, backend_ref: str | None = None,
               properties: bool = False) -> dict:
    """Run one case through the harness and return its record (status pass or xfail).

    Raises AssertionError (with the replay command) if the case fails or errors, and
    NotVerified (a ValueError) if it was not judged at all — the backend is unavailable here,
    does not implement the case's level or dtype, or its `supports()` declines the case — so
    that a test calling it can never pass on a case that was not checked. A declined case's
    twin (its nearest supported variant, lrkv.verify.twins) is run too: if the twin fails,
    that is the AssertionError."""
    __tracebackhide__ = True  # a failure shows the caller's test and the message, not this function
    from ..verify.cells import failure_text
    from ..verify.runner import run

    if not isinstance(case, Case):
        raise TypeError(f"case must be a lrkv.verify.case.Case, got {type(case).__name__}")
    target = backend if isinstance(backend, Target) else resolve(backend, backend_ref)
    check_bool("properties", properties)
    records = run([case], [(target.label, target.backend)], _policy(policy), properties=properties)
    rec = records[0]
    twin = next((r for r in records[1:] if "twin" in r), None)  # a declined case's nearest supported variant
    if rec["status"] == "skip" and twin is not None and twin["status"] in ("fail", "error"):
        raise AssertionError(failure_text(twin, f" (the twin of a declined case: {rec['reason']})") + _note(target))
    if rec["status"] in ("fail", "error"):
        raise AssertionError(failure_text(rec) + _note(target))
    if rec["status"] == "skip":
        raise NotVerified(f"NOT VERIFIED {rec['backend']} {rec['id']}: {rec['reason']}\n"
                          f"  replay: {rec['repro']}", rec["reason"], rec)
    return rec


def check_server_properties(backend: Any, cases: Iterable[Case] | None = None, *, policy=None,
                            backend_ref: str | None = None) -> dict:
    """Run the server properties (lrkv.verify.server_properties: same buffers, outputs written,
    inputs untouched, determinism, batch invariance, and compile when declared) on one case per
    kernel level the backend implements (the default grid's first it supports), as `lrkv
    verify` does. Raises AssertionError naming every required property that failed, and
    NotVerified if no case could run them; returns {property: {ran, held, ...}}."""
    __tracebackhide__ = True
    from ..verify.cells import failure_text
    from ..verify.levels import get_level
    from ..verify.runner import backend_accepts, run
    from ..verify.server_properties import LEVELS, failures
    from ..verify.tolerance import Tolerance
    from ..verify.tolerance_report import property_table

    target = backend if isinstance(backend, Target) else resolve(backend, backend_ref)
    if cases is None:
        accepts = backend_accepts(target.backend, Tolerance())
        cases = [next((c for c in grid_cases("default") if c.level == lv and accepts(c)), None)
                 for lv in LEVELS if get_level(lv).needs in target.backend.levels]
        cases = [c for c in cases if c is not None]
    records = run(list(cases), [(target.label, target.backend)], _policy(policy), twins=False)
    bad = failures(records)
    wrong = [r for r in records if r["status"] in ("fail", "error")]  # a case that fails: its own failure,
    if bad or wrong:  # after the properties that failed; it left same_buffers, batch_invariant, compiles unjudged
        raise AssertionError("\n".join([*(f"PROPERTY {n} {r['backend']} {r['id']}: {e['reason']}\n  replay: "
                                           f"{r['repro']}" for r, n, e in bad),
                                         *(failure_text(r, " (the case itself fails: its properties judged against "
                                                           "the oracle or other batches were not)") for r in wrong)])
                             + _note(target))
    table = property_table(records).get(target.backend.name, {})
    if not any(t["ran"] for t in table.values()):
        why = "; ".join(sorted({r["reason"] for r in records if r["reason"]})) or "no kernel-level case"
        raise NotVerified(f"NOT VERIFIED {target.label}: no server property ran ({why})", why)
    return table


def _note(target: Target) -> str:
    return f"\n  (note: {target.note})" if target.note else ""


def check_backend(backend: Any, *, grid: str | Iterable[Case] = "default", levels=None, dtypes=None,
                  policy=None, backend_ref: str | None = None, raise_on_failure: bool = True) -> Report:
    """Verify a backend on a case grid, as `lrkv verify --backend` does, and return the Report.

    backend: an object following the backend protocol, a class or factory, a registered
    name, or 'package.module:attribute'. backend_ref names an object for replay commands
    when it cannot be found as a module attribute. Raises AssertionError listing every
    failing case with its replay command — and when nothing was verified (every case
    skipped or inapplicable), because a check that checked nothing is not a pass.
    """
    __tracebackhide__ = True
    from ..verify.tolerance_report import build_report
    from ..verify.runner import backend_info, run

    check_bool("raise_on_failure", raise_on_failure)
    target = resolve(backend, backend_ref)
    cases = _filter(grid_cases(grid), levels, dtypes)
    selection = _selection(grid, cases, levels, dtypes)
    pol = _policy(policy)
    t0 = time.perf_counter()
    records = run(cases, [(target.label, target.backend)], pol)
    grid_name = grid if isinstance(grid, str) else "cases"
    data = build_report(records, pol, [backend_info(target.backend, target.label)], selection=selection,
                        argv=["lrkv.testing.check_backend", target.label, f"grid={grid_name}"],
                        seconds=time.perf_counter() - t0)
    report = Report(data)
    if raise_on_failure and not report.ok:  # fail/error, or nothing verified
        raise AssertionError(report.failure_message() + _note(target))
    return report
