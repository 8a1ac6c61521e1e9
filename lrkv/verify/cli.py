"""`lrkv verify` and `lrkv gate`.

    lrkv verify [--backend NAME|module:attr ...] [--grid default|quick] [--case JSON ...]
                [--dtype D ...] [--level L ...] [--filter TEXT] [--out DIR] [--policy TOML]
                [--backend-path DIR ...] [--no-progress]
        runs the cases, writes DIR/report.json and DIR/report.md; exit 1 if any case fails
        or errors, 2 on a usage error.

    lrkv gate REPORT --baseline ci/baseline.json [--update-baseline] [--markdown PATH] [--subset]
        sorts every case into PASS/FAIL/REGRESSED/MISSING/ERROR/IMPROVED (+XFAIL/SKIP);
        exit 0 only when nothing is FAIL, REGRESSED, MISSING or ERROR.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

DEFAULT_BACKENDS = ("reference", "materialized", "eager", "inductor")
DEFAULT_OUT = "reports/verify"
GRIDS = ("default", "quick", "mutants")
PROGRESS_CHARS = 48  # keep the bar and the clock visible on an 80-column terminal


def register(subparsers) -> None:
    v = subparsers.add_parser("verify", help="run decode backends against the float64 oracle; write a report",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    v.add_argument("--backend", action="append", metavar="NAME|module:attr",
                   help="a registered name or package.module:attribute (repeatable; default: "
                        f"{', '.join(DEFAULT_BACKENDS)})")
    v.add_argument("--grid", choices=GRIDS, default="default", help="the case grid (default: default)")
    v.add_argument("--case", action="append", metavar="JSON", help="run this case (a Case as JSON) instead of a grid")
    v.add_argument("--dtype", action="append", help="keep only cases at these dtypes")
    v.add_argument("--level", action="append", choices=("kernel", "layer", "layer-model"),
                   help="keep only these levels")
    v.add_argument("--filter", metavar="TEXT", help="keep only cases whose id contains TEXT")
    v.add_argument("--out", default=DEFAULT_OUT, help=f"report directory (default: {DEFAULT_OUT})")
    v.add_argument("--policy", help="tolerance policy TOML (default: ci/tolerance.toml if present)")
    v.add_argument("--backend-path", action="append", default=[], metavar="DIR",
                   help="directory to import --backend modules from (the working directory is tried too)")
    v.add_argument("--no-progress", action="store_true", help="no progress bar")
    v.set_defaults(func=cmd_verify)

    g = subparsers.add_parser("gate", help="gate a tolerance report against the accepted baseline")
    g.add_argument("report", help="report.json written by `lrkv verify`")
    g.add_argument("--baseline", required=True, help="accepted baseline (ci/baseline.json)")
    g.add_argument("--update-baseline", action="store_true",
                   help="accept this report: rewrite the baseline from its pass/xfail records")
    g.add_argument("--markdown", metavar="PATH", help="also write the gate summary as Markdown")
    g.add_argument("--subset", action="store_true",
                   help="only judge baseline entries of backends that appear in the report")
    g.set_defaults(func=cmd_gate)


def _cases(args):
    from ..spec import dtype_name
    from .cases import Case, default_grid, mutant_grid, quick_grid

    if args.case:
        cases = [Case.from_json(text) for text in args.case]
    else:
        cases = {"default": default_grid, "quick": quick_grid, "mutants": mutant_grid}[args.grid]()
    if args.dtype:
        keep = {dtype_name(d) for d in args.dtype}
        cases = [c for c in cases if c.dtype in keep]
    if args.level:
        cases = [c for c in cases if c.level in args.level]
    if args.filter:
        cases = [c for c in cases if args.filter in c.id]
    return cases


def cmd_verify(args) -> int:
    from rich.console import Console

    from .backend import add_backend_path, get_backend
    from .report import build_report, write_report
    from .runner import backend_info
    from .tolerance import load_policy

    console = Console(stderr=True)
    for d in args.backend_path:
        add_backend_path(d)
    try:
        backends = [(label, get_backend(label)) for label in (args.backend or DEFAULT_BACKENDS)]
        cases = _cases(args)
        policy = load_policy(args.policy)
    except (ValueError, TypeError, OSError, json.JSONDecodeError) as e:
        console.print(f"[red]lrkv verify: {e}[/red]")
        return 2
    if not cases:
        console.print("[red]lrkv verify: no cases selected[/red]")
        return 2
    infos = [backend_info(b, label) for label, b in backends]
    for info in infos:
        if not info["available"]:
            console.print(f"[yellow]{info['name']}: unavailable — {info['reason']}[/yellow]")
    t0 = time.perf_counter()
    records = _run_with_progress(cases, backends, policy, console, not args.no_progress)
    seconds = time.perf_counter() - t0
    grid = "case" if args.case else args.grid
    report = build_report(records, policy, infos, grid=grid, argv=sys.argv[1:], seconds=seconds)
    jpath, mpath = write_report(report, args.out)
    tot = report["summary"]["total"]
    console.print(f"{len(cases)} cases, {len(records)} records in {seconds:.1f}s: "
                  + ", ".join(f"{n} {s}" for s, n in tot.items() if n))
    for r in records:
        if r["status"] in ("fail", "error"):
            console.print(f"[red]{r['status'].upper()}[/red] {r['backend']} {r['id']}: {r['reason']}", markup=False,
                          highlight=False)
            console.print(f"  replay: {r['repro']}", markup=False, highlight=False)
    console.print(f"report: {jpath}  summary: {mpath}")
    return 1 if tot["fail"] or tot["error"] else 0


def _run_with_progress(cases, backends, policy, console, show: bool):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .runner import run, total_steps

    if not show:
        return run(cases, backends, policy)
    with Progress(TextColumn("verify"), BarColumn(bar_width=24), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}"), console=console, transient=True) as progress:
        task = progress.add_task("", total=total_steps(cases, backends))
        return run(cases, backends, policy,  # description: the step just finished
                   on_step=lambda what: progress.update(task, advance=1, description=what[:PROGRESS_CHARS]))


def cmd_gate(args) -> int:
    from .gate import baseline_from_report, classify, counts, exit_code, load_baseline, render_markdown, write_baseline
    from .report import load_report

    try:
        report = load_report(args.report)
        baseline_path = Path(args.baseline)
        if args.update_baseline and not baseline_path.exists():
            baseline = {"entries": {}}
        else:
            baseline = load_baseline(baseline_path)
    except (ValueError, OSError, json.JSONDecodeError) as e:
        print(f"lrkv gate: {e}", file=sys.stderr)
        return 2
    entries = classify(report, baseline, subset=args.subset)
    md = render_markdown(entries)
    print(md, end="")
    if args.markdown:
        Path(args.markdown).parent.mkdir(parents=True, exist_ok=True)
        Path(args.markdown).write_text(md)
    if args.update_baseline:
        write_baseline(baseline_from_report(report), baseline_path)
        c = counts(entries)
        print(f"baseline updated: {baseline_path} (accepted REGRESSED {c['REGRESSED']}, MISSING {c['MISSING']}, "
              f"IMPROVED {c['IMPROVED']})")
        # FAIL and ERROR are never accepted: a baseline cannot make a failing case pass.
        return 1 if c["FAIL"] or c["ERROR"] else 0
    return exit_code(entries)
