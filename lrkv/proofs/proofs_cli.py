"""`lrkv proofs` — run the symbolic proofs, print a table, write JSON and Markdown."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from ..checks import arg_out_file

STDOUT = "-"
EXIT_CODES = """exit codes:
  0    every selected proof returned its expected status
  1    a status differs from its expectation, or a proof raised
  2    bad input: an unknown --only name, or a --json/--markdown path that cannot be written
  3    sympy or mpmath, which the proofs need, is not installed here
  4    not used: every run proves at least one claim (an --only that selects nothing is exit 2)
  130  interrupted (Ctrl-C); no report is written
"""


def _markdown_path(text: str):
    """argparse type of --markdown PATH: '-' is stdout, anything else a writable file path."""
    return STDOUT if text == STDOUT else arg_out_file()(text)


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "proofs",
        help="run the sympy proofs of the paper's claims (exit 1 if any status differs from its expectation)",
        description=__doc__,
        epilog=EXIT_CODES,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--json", metavar="PATH", type=arg_out_file(), help="write the JSON report (schema lrkv.proofs-report/2)")
    p.add_argument("--markdown", metavar="PATH", nargs="?", const=STDOUT, default=None, type=_markdown_path,
                   help="write the Markdown summary to PATH, or to stdout when PATH is omitted "
                        "(the table then goes to stderr)")
    p.add_argument("--only", metavar="NAME", action="append", default=None,
                   help="run only these proofs: exact names or globs (e.g. 'paper_*'); repeat or comma-separate")
    p.add_argument("--list", action="store_true", help="list the registered proofs and their expected statuses")
    p.set_defaults(func=run_cli)


def run_cli(args: argparse.Namespace) -> int:
    try:
        return _run(args)
    except KeyboardInterrupt:
        print("lrkv proofs: interrupted; no report written", file=sys.stderr)
        return 130
    except ModuleNotFoundError as e:  # the proofs' toolchain; any other missing module is a bug
        if e.name not in ("sympy", "mpmath"):
            raise
        print(f"lrkv proofs: {e.name} is not installed here; the proofs need it (pip install {e.name})",
              file=sys.stderr)
        return 3


def _run(args: argparse.Namespace) -> int:
    from rich.console import Console

    from .registry import EXPECTED, REGISTRY, run, select
    from .proof_report import build_report, print_table, to_markdown, validate_report

    md_to_stdout = args.markdown == STDOUT
    # A pipe or CI log has no width: give the table room instead of folding every cell.
    console = Console(stderr=md_to_stdout, width=None if sys.stdout.isatty() else 160)
    patterns = [x.strip() for arg in (args.only or []) for x in arg.split(",") if x.strip()] or None
    try:
        names = select(patterns)
    except KeyError as e:
        console.print(f"[red]{e.args[0]}[/]")
        return 2
    if args.list:
        for n in names:
            console.print(f"{REGISTRY[n].item:>2}  {n:<32} {EXPECTED[n]:<13} {REGISTRY[n].source}", soft_wrap=True)
        return 0
    t0 = time.perf_counter()
    results = run(names)
    report = build_report(results, selection=patterns, elapsed_s=time.perf_counter() - t0)
    problems = validate_report(report)
    if problems:  # a malformed report is a bug of the suite: say so and fail
        console.print("[red]report failed its own schema:[/]\n" + "\n".join(problems))
        return 1
    print_table(report, console)
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(report, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
        console.print(f"JSON report: {args.json}")
    if args.markdown is not None:
        md = to_markdown(report)
        if md_to_stdout:
            sys.stdout.write(md)
        else:
            path = Path(args.markdown)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(md, encoding="utf-8")
            console.print(f"Markdown summary: {path}")
    for r in results:
        if r.error:
            console.print(f"[red]{r.name} raised:[/]\n{r.error}")
    return 0 if report["ok"] else 1
