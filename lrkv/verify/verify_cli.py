"""`lrkv verify`: run backends on a case grid against the float64 oracle and write the report
(its help text is VERIFY_DOC; the exit codes VERIFY_EXITS; `lrkv gate` is gate_cli.py)."""

from __future__ import annotations

import argparse
import sys
import time

from ..checks import arg_in_file, arg_int, arg_out_dir

DEFAULT_BACKENDS = ("reference", "materialized", "eager", "inductor")
DEFAULT_TP_BACKENDS = ("reference", "eager")  # inductor would compile once in every rank
DEFAULT_OUT = "reports/verify"
GRIDS = ("default", "quick", "mutants")
FAILURES_SHOWN = 3  # per group of failures (backend, level, output) printed in full; -v prints all
PROGRESS_CHARS = 48  # keep the bar and the clock visible on an 80-column terminal
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_TOOLCHAIN, EXIT_NOTHING, EXIT_INTERRUPTED = 0, 1, 2, 3, 4, 130

VERIFY_DOC = """Run decode backends on a case grid against the float64 oracle (DESIGN §6) and write
DIR/report.json and DIR/report.md; print a summary per backend and each failing case with
the one-line command that replays it. With GITHUB_ACTIONS=true each failing case is also
an ::error annotation. --tp P runs the `tp` grid instead: token-by-token decode on P
torch.distributed ranks (lrkv.distributed.level).
"""

VERIFY_EXITS = """exit codes:
  0    every verified case passed, and at least one backend was independently verified
  1    a case failed or errored (FAIL / ERROR records; see report.md)
  2    bad input or usage: the message names the option, file or field
  3    a requested backend is unavailable here (a toolchain is missing) and verified nothing
  4    nothing verified: a requested backend verified no case, or only baseline paths ran
       (--allow-empty accepts that explicitly; under --shard a part may hold no case of a
       backend: exit 0, the merged report is what the gate judges)
  130  interrupted: the report is written and marked incomplete (the gate refuses it)
"""

def register(subparsers) -> None:
    v = subparsers.add_parser("verify", help="run decode backends against the float64 oracle; write a report",
                              description=VERIFY_DOC, epilog=VERIFY_EXITS,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    v.add_argument("--backend", action="append", metavar="NAME|module:attr",
                   help="a registered name or package.module:attribute (repeatable; default: "
                        f"{', '.join(DEFAULT_BACKENDS)})")
    v.add_argument("--grid", choices=GRIDS, help="the case grid (default: default)")
    v.add_argument("--case", action="append", metavar="JSON", help="run this case (a Case as JSON) instead of a grid")
    v.add_argument("--dtype", action="append", help="keep only cases at these dtypes")
    v.add_argument("--level", action="append", help="keep only these case levels (kernel, layer, layer-model, …)")
    v.add_argument("--filter", metavar="TEXT", help="keep only cases whose id contains TEXT")
    v.add_argument("--out", default=DEFAULT_OUT, type=arg_out_dir(),
                   help=f"report directory (default: {DEFAULT_OUT}); its previous report is removed first")
    v.add_argument("--policy", type=arg_in_file(),
                   help="a whole tolerance policy TOML (default: the packaged policy, with the project's "
                        "lrkv.toml / [tool.lrkv.policy] override)")
    v.add_argument("--backend-path", action="append", default=[], metavar="DIR",
                   help="directory to import --backend modules from (the working directory is tried too)")
    v.add_argument("--allow-empty", action="store_true",
                   help="exit 0 even if a backend verified nothing (skips, unavailable, only baselines)")
    v.add_argument("--no-progress", action="store_true", help="no progress bar: a plain line on stderr every 30 s instead")
    v.add_argument("--no-twins", action="store_true",
                   help="record a declined case as a skip only; do not run its nearest supported variant "
                        "(its features then go uncovered)")
    v.add_argument("--in-process", action="store_true",
                   help="call the backends in this process instead of a worker process (for a debugger; a crash "
                        "or os._exit in a backend then ends the run without a report)")
    v.add_argument("--tp", type=arg_int(minimum=1, maximum=64), metavar="P",
                   help="tensor parallelism: decode the `tp` grid (instead of --grid) on P gloo ranks and judge the "
                        "gathered output and each rank's cache bytes (default backends: reference, eager)")
    v.add_argument("--jobs", type=arg_int(minimum=1, maximum=1024), metavar="N",
                   help="run the cases in N job processes at once, each with its own isolated worker (default: "
                        "this machine's cores from 4 up, at most one per 16 cases; one below 4 cores); the report is the same as with --jobs 1")
    v.add_argument("--shard", metavar="I/N", type=_shard_arg,
                   help="run shard I of N: a deterministic part of the selection balanced by cost; the report "
                        "names the selection's fingerprint, N, I and its cases. `lrkv merge` joins the N shard "
                        "reports into the one report the gate reads (a shard alone is never green)")
    v.add_argument("--costs", type=arg_in_file(), metavar="REPORT",
                   help="with --shard: balance the shards by the per-case seconds of this earlier report.json "
                        "(cases it lacks are estimated from their shapes); every shard must get the same file")
    v.set_defaults(func=cmd_verify)


def _shard_arg(text: str):
    from .shards import Shard

    try:
        return Shard.parse(text)
    except (ValueError, TypeError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _selection(args):
    """The run's Selection (selection.py): what the report records and the gate rebuilds."""
    from .case import Case
    from .selection import GIVEN, Selection

    narrow = {"dtype": tuple(args.dtype or ()), "level": tuple(args.level or ()), "filter": args.filter or "",
              "twins": not args.no_twins}
    if args.case:
        if args.grid is not None:
            raise ValueError(f"--grid {args.grid} and --case: give one (the cases, or the grid they come from)")
        cases = tuple(Case.from_json(text) for text in args.case)
        if args.tp:  # never silently ignored: every given case must be a tp case on exactly P ranks
            for c in cases:
                if c.level != "tp" or c.tp != args.tp:
                    what = f"runs on {c.tp} ranks" if c.level == "tp" else f"is a {c.level!r} case"
                    raise ValueError(f"--tp {args.tp}: --case {c.id} {what}; a case carries its own tp, so give "
                                     "--tp only to agree with it (or leave it out)")
        return Selection(grid=GIVEN, cases=cases, **narrow)
    if args.tp:
        if args.grid is not None:
            raise ValueError(f"--tp {args.tp} runs the tp grid; --grid {args.grid} would be ignored: give one")
        return Selection(grid="tp", tp=args.tp, **narrow)
    return Selection(grid=args.grid or "default", **narrow)


def _load_backends(args, console):
    from .protocol import check_available
    from .backend_registry import add_backend_path, get_backend

    for d in args.backend_path:
        add_backend_path(d)
    out = []
    if args.tp and not args.backend:
        args.backend = list(DEFAULT_TP_BACKENDS)
    for label in (args.backend or DEFAULT_BACKENDS):
        b = get_backend(label)
        check_available(b, label)
        out.append((label, b))
    names = [b.name for _, b in out]
    dup = {n for n in names if names.count(n) > 1}
    if dup:
        raise ValueError(f"--backend: two backends share the name {sorted(dup)[0]!r}; records would collide")
    return out


def _say(console, text: str, style: str = "") -> None:
    from .console import say

    say(console, text, style)


def cmd_verify(args) -> int:
    from .console import make_console

    console = make_console()
    state: dict = {"records": [], "t0": time.perf_counter()}
    try:
        return _verify(args, console, state)
    except KeyboardInterrupt:  # at any moment: an incomplete report, exit 130, no traceback
        return _interrupted(args, console, state)


def _interrupted(args, console, state: dict) -> int:
    """Write what the interrupted run has as an incomplete report (the gate refuses it)."""
    from .selection import Selection
    from .tolerance import load_policy
    from .tolerance_report import build_report, write_report

    records = state["records"]
    try:
        policy = state.get("policy") or load_policy(None)
        report = build_report(records, policy, state.get("infos", []), selection=state.get("selection") or Selection(),
                              argv=sys.argv[1:], seconds=time.perf_counter() - state["t0"], complete=False)
        jpath, _ = write_report(report, args.out)
    except (ValueError, TypeError, OSError) as e:
        _say(console, f"lrkv verify: interrupted; no report written ({e})", "yellow")
        return EXIT_INTERRUPTED
    _say(console, f"lrkv verify: interrupted after {len(records)} records; {jpath} is marked incomplete "
                  "(the gate refuses it)", "yellow")
    return EXIT_INTERRUPTED


def _verify(args, console, state: dict) -> int:
    from .console import annotate_records, summary_table
    from .tolerance_report import build_report, clear_report, verification, write_report
    from .runner import backend_info
    from .levels import get_level
    from .tolerance import load_policy

    clear_report(args.out)  # first: no later failure (even a usage error) may leave a stale green report
    try:
        backends = _load_backends(args, console)
        selection = state["selection"] = _selection(args)
        cases = selection.resolve()
        if args.costs and not args.shard:
            raise ValueError("--costs balances shards: it needs --shard I/N")
        everything, cases, shard = cases, *_shard(args, selection, cases)
        policy = state["policy"] = load_policy(args.policy)
        from .backend_registry import backend_names
        policy.check_property_backends(set(backend_names()) | {b.name for _, b in backends})
        tp = any(c.level == "tp" for c in cases)
        if tp and not all(c.level == "tp" for c in cases):
            raise ValueError("--case: tp cases run on their own ranks; do not mix them with other levels in one run")
        if tp:  # the ranks run each backend wrapped (lrkv.distributed.level)
            tp_level = get_level("tp")
            backends = tp_level.wrap_backends(backends)
    except (ValueError, TypeError, OSError) as e:
        _say(console, f"lrkv verify: {e}", "red")
        return EXIT_USAGE
    infos = state["infos"] = [backend_info(b, label) for label, b in backends]
    for info in infos:
        if not info["available"]:
            _say(console, f"{info['name']}: unavailable — {info['reason']}", "yellow")
    if shard is not None and not cases and everything:  # more shards than cases: an empty part is no failure
        report = build_report([], policy, infos, selection=selection, argv=sys.argv[1:], seconds=0.0,
                              shard=_shard_meta(shard, []))
        jpath, _ = write_report(report, args.out)
        _say(console, f"lrkv verify: shard {shard['index']}/{shard['count']} has no case of the selection's "
                      f"{len(everything)}; {jpath} says so for `lrkv merge`")
        return EXIT_OK
    if not cases:
        _say(console, "lrkv verify: nothing verified: no case matches the selection (--grid/--dtype/--level/"
                      "--filter)", "yellow")
        return EXIT_OK if args.allow_empty else EXIT_NOTHING
    t0 = state["t0"] = time.perf_counter()
    records: list[dict] = state["records"]
    notes: list[str] = []
    if tp:
        _say(console, f"lrkv verify: decoding on tensor-parallel ranks ({len(cases)} cases x {len(backends)} "
                      "backends, one spawn per P)")
        tp_level.prefetch(cases, backends, policy)  # each case within its backend's case_timeout
    from .isolation import NotIsolated, default_mode
    from .jobs import usable_jobs
    from .server_properties import plan

    isolation = "inprocess" if args.in_process else default_mode()
    jobs, fewer = usable_jobs(args.jobs, len(cases), backends, isolation)
    if fewer and args.jobs:
        _say(console, f"lrkv verify: --jobs {args.jobs}: one job, since {fewer}", "yellow")
    try:
        _run_with_progress(cases, backends, policy, console, not args.no_progress, records, not args.no_twins,
                           isolation, notes, jobs, plan(everything))
    except NotIsolated as e:  # raised before any backend call
        _say(console, f"lrkv verify: {e}", "red")
        return EXIT_USAGE
    seconds = time.perf_counter() - t0
    report = build_report(records, policy, infos, selection=selection, argv=sys.argv[1:], seconds=seconds,
                          shard=None if shard is None else _shard_meta(shard, records))
    jpath, mpath = write_report(report, args.out)
    tot = report["summary"]["total"]
    if getattr(args, "verbosity", 0) >= 0:
        console.print(summary_table(report))
    from .server_properties import failures

    props = failures(records)  # each is a FAIL entry of its own at the gate: counted apart, never hidden
    _say(console, f"{len(cases)} cases, {len(records)} records in {seconds:.1f}s: "
         + ", ".join(f"{n} {s}" for s, n in tot.items() if n)
         + (f"; {len(props)} required server properties failed" if props else ""))
    _print_coverage(console, report.get("coverage") or {})
    _print_properties(console, report.get("properties") or {})
    for note in notes:
        _say(console, f"isolation: {note}", "yellow")
    annotate_records(records)
    if getattr(args, "verbosity", 0) >= 1:  # -v: every other record too, with its reason
        for r in records:
            if r["status"] not in ("fail", "error"):
                why = f": {r['reason']}" if r["reason"] else ""
                _say(console, f"{r['status'].upper()} {r['backend']} {r['id']}{why}")
    _print_failures(console, records, everything=getattr(args, "verbosity", 0) >= 1)
    _say(console, f"report: {jpath}  summary: {mpath}")
    ver = verification(records, infos)
    if ver.failed:
        return EXIT_FAILED
    if ver.nothing_verified:
        _say(console, f"lrkv verify: {ver.message()}", "yellow")
        if args.allow_empty:
            return EXIT_OK
        if shard is not None:  # one part may hold no case of a backend; the merged report is judged
            _say(console, "lrkv verify: this shard alone verifies nothing for that backend; the merged report "
                          "is what the gate judges (lrkv merge)", "yellow")
            return EXIT_OK
        empty_unavailable = set(ver.empty) and set(ver.empty) <= ver.unavailable
        return EXIT_TOOLCHAIN if empty_unavailable else EXIT_NOTHING
    return EXIT_OK


def _shard(args, selection, cases) -> tuple[list, dict | None]:
    """(the cases this run makes, the shard's metadata without its records' digest, or None)."""
    if args.shard is None:
        return cases, None
    from .shards import fingerprint, measured_costs, records_digest, shard_cases
    from .tolerance_report import load_report

    measured = measured_costs(load_report(args.costs)) if args.costs else None
    mine = shard_cases(cases, args.shard, measured)
    costs = f"measured: {records_digest([measured])[:16]}" if measured else "estimated"
    return mine, {"index": args.shard.index, "count": args.shard.count, "fingerprint": fingerprint(selection, cases),
                  "costs": costs, "cases": [c.id for c in mine]}


def _shard_meta(shard: dict, records: list[dict]) -> dict:
    from .shards import records_digest

    return dict(shard, records_sha256=records_digest(records))


def failure_groups(records: list[dict]) -> list[tuple[str, list[dict]]]:
    """FAIL/ERROR records grouped by backend, level and the output that failed ('error' for an
    ERROR), each group worst ratio first, the group with the worst case first."""
    from .server_properties import failures

    groups: dict[str, list[dict]] = {}
    for r in records:
        if r["status"] not in ("fail", "error"):
            continue
        what = "error" if r["status"] == "error" else (r["reason"].split(":", 1)[0] or "out")
        groups.setdefault(f"{r['backend']} · {r['level']} · {what}", []).append(r)
    for r, name, e in failures(records):  # a required server property that failed: its own group
        if r["status"] in ("fail", "error"):
            continue  # the record's own failure is shown; its properties add nothing a person needs first
        groups.setdefault(f"{r['backend']} · {r['level']} · property {name}", []).append(
            {**r, "status": e["status"], "reason": f"property {name}: {e['reason']}", "ratio": None})
    ratio = lambda r: r["ratio"] if isinstance(r.get("ratio"), (int, float)) else float("inf")  # noqa: E731
    for recs in groups.values():
        recs.sort(key=ratio, reverse=True)
    return sorted(groups.items(), key=lambda kv: (-ratio(kv[1][0]), kv[0]))


def _print_failures(console, records: list[dict], everything: bool = False) -> None:
    """The first FAILURES_SHOWN of each group in full — where it fails, its replay; the rest
    counted (-v: all)."""
    from .cells import where_lines

    for title, recs in failure_groups(records):
        shown = recs if everything else recs[:FAILURES_SHOWN]
        _say(console, f"{len(recs)} failing in {title}:", "red")
        for r in shown:
            _say(console, f"{r['status'].upper()} {r['backend']} {r['id']}: {r['reason']}", "red")
            for line in where_lines(r):  # the failing sequences, heads and positions, and what they share
                _say(console, f"  where: {line}", "red")
            _say(console, f"  replay: {r['repro']}")
        if len(recs) > len(shown):
            _say(console, f"  … and {len(recs) - len(shown)} more in this group (report.md and report.json list "
                          "every one; -v prints them all)")


def _print_properties(console, props: dict) -> None:
    """One line per backend: each server property as held/ran (required ones marked *)."""
    for b, table in props.items():
        parts = [f"{name}{'*' if t['required'] else ''} {t['held']}/{t['ran']}" for name, t in table.items()]
        bad = any(t["failed"] and t["required"] for t in table.values())
        _say(console, f"server properties of {b} (held/ran; * required): " + ", ".join(parts), "red" if bad else "")


def _print_coverage(console, cov: dict) -> None:
    """One line per backend and level (covered/of), then every uncovered required feature."""
    from .coverage import uncovered
    from .tolerance_report import level_label

    if not cov:
        return
    parts = [f"{b} {level_label(lv, t)} {t['covered']}/{t['of']}" + (f" ({t['not_supported']} not supported)"
                                                       if t.get("not_supported") else "")
             for b, levels in cov.items() for lv, t in levels.items() if t.get("required", True)]
    if parts:
        _say(console, "coverage (features covered/of): " + ", ".join(parts))
    missing = uncovered(cov)
    if missing:
        _say(console, f"uncovered features ({len(missing)}; the gate blocks them as UNCOVERED, report.md says why):",
             "yellow")
        by: dict[tuple[str, str], list[str]] = {}
        for b, lv, name, _ in missing:
            by.setdefault((b, lv), []).append(name)
        for (b, lv), names in by.items():
            _say(console, f"  {b} · {lv}: {', '.join(names)}", "yellow")


PLAIN_PROGRESS_S = 30.0  # --no-progress: seconds between plain progress lines on stderr


def _plain_progress(total: int):
    """on_step for --no-progress: 'lrkv verify: 40/180 steps, 31 s (last: …)' on stderr, at most
    every PLAIN_PROGRESS_S seconds (a GPU's first launches compile for minutes; CI logs show it)."""
    start = last = time.monotonic()
    done = 0

    def on_step(what: str) -> None:
        nonlocal done, last
        done += 1
        now = time.monotonic()
        if now - last >= PLAIN_PROGRESS_S:
            last = now
            print(f"lrkv verify: {done}/{total} steps, {now - start:.0f} s (last: {what[:PROGRESS_CHARS]})",
                  file=sys.stderr, flush=True)
    return on_step


def _run_with_progress(cases, backends, policy, console, show: bool, records: list[dict], twins: bool = True,
                       isolation: str | None = None, notes: list[str] | None = None, jobs: int = 1,
                       shares: dict | None = None):
    """runner.run, or jobs.run_jobs for jobs > 1 (shares: the whole selection's property plan)."""
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from .jobs import run_jobs
    from .runner import run, total_steps

    def execute(on_step):
        if jobs > 1:
            return run_jobs(cases, backends, policy, jobs, shares=shares or {}, twins=twins, on_step=on_step,
                            records=records, notes=notes)
        return run(cases, backends, policy, records=records, twins=twins, isolation=isolation, notes=notes,
                   on_step=on_step, shares=shares)

    if not show:  # a CI log: a plain line at most every PLAIN_PROGRESS_S, so a long run is never silent
        return execute(_plain_progress(total_steps(cases, backends)))
    with Progress(TextColumn("verify"), BarColumn(bar_width=24), MofNCompleteColumn(), TimeElapsedColumn(),
                  TextColumn("{task.description}", markup=False), console=console, transient=True) as progress:
        task = progress.add_task("", total=total_steps(cases, backends))
        # description: the step just finished
        return execute(lambda what: progress.update(task, advance=1, description=what[:PROGRESS_CHARS]))
