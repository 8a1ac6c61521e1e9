"""Console output of `lrkv verify` / `lrkv gate`: what a terminal and a CI log both read well.

- Plain text only (rich markup off): a reason such as `[red]` is printed as written.
- Never wrapped when not on a terminal: a replay command must stay one line that can be
  copied from a CI log (rich's default width off a TTY is 80 columns).
- GitHub Actions workflow commands (`::error ...::`) per failing case when
  GITHUB_ACTIONS=true, so each failure shows on the run page and the PR.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable

NO_WRAP_WIDTH = 100_000  # "unlimited": rich needs a number


def make_console(stderr: bool = True):
    from rich.console import Console

    stream = sys.stderr if stderr else sys.stdout
    tty = stream.isatty()
    return Console(stderr=stderr, soft_wrap=True, width=None if tty else NO_WRAP_WIDTH,
                   highlight=False, markup=False, emoji=False)


def say(console, text: str, style: str = "") -> None:
    console.print(text, style=style or None, markup=False, highlight=False, soft_wrap=True)


def in_github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def _escape_data(s: str) -> str:
    # the workflow-command escapes of @actions/core (toCommandValue / escapeData)
    return s.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def _escape_property(s: str) -> str:
    return _escape_data(s).replace(":", "%3A").replace(",", "%2C")


def annotation(title: str, message: str) -> str:
    """One `::error title=...::message` workflow command line."""
    return f"::error title={_escape_property(title)}::{_escape_data(message)}"


def annotate_records(records: Iterable[dict], out=None) -> int:
    """An ::error line per FAIL/ERROR record (with its replay) when in GitHub Actions; how many."""
    if not in_github_actions():
        return 0
    out = out or sys.stdout
    n = 0
    for r in records:
        if r["status"] in ("fail", "error"):
            print(annotation(f"lrkv {r['status'].upper()} {r['backend']} {r['id']}",
                             f"{r['reason']}\nreplay: {r['repro']}"), file=out)
            n += 1
    return n


def annotate_entries(entries, report: dict, blocking: Iterable[str], out=None) -> int:
    """An ::error line per blocking gate entry (with the record's replay, when there is one)."""
    if not in_github_actions():
        return 0
    out = out or sys.stdout
    repro = {r["key"]: r.get("repro", "") for r in report.get("records", [])}
    n = 0
    for e in entries:
        if e.klass in blocking:
            replay = repro.get(e.key, "")
            print(annotation(f"lrkv gate {e.klass} {e.backend} {e.case_id}",
                             e.detail + (f"\nreplay: {replay}" if replay else "")), file=out)
            n += 1
    return n


def summary_table(report: dict):
    """The per-backend summary (records per status, and role) as a rich Table."""
    from rich.table import Table
    from rich.text import Text

    statuses = ("pass", "fail", "error", "skip", "xfail")
    table = Table(title=None, show_edge=False, pad_edge=False)
    for col in ("backend", "role", *statuses, "verdict"):
        table.add_column(col, justify="left" if col in ("backend", "role", "verdict") else "right")
    roles = {b["name"]: b.get("role", "verified") for b in report.get("backends", [])}
    for name, c in report["summary"]["by_backend"].items():
        bad = c.get("fail", 0) + c.get("error", 0)
        verdict = "FAILED" if bad else ("nothing verified" if not c.get("pass", 0) else
                                        "baseline" if roles.get(name) == "baseline" else "ok")
        table.add_row(*(Text(str(x)) for x in (name, roles.get(name, "verified"),
                                                  *(c.get(s, 0) for s in statuses), verdict)))
    return table
