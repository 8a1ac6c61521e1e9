"""`lrkv gate`: re-judge a tolerance report against the accepted baseline (DESIGN §7; its help
text is GATE_DOC, the exit codes GATE_EXITS)."""

from __future__ import annotations

import argparse
import sys

from ..checks import arg_int, arg_out_file
from .gate import EXIT_BLOCKED, EXIT_OK

EXIT_USAGE = 2  # bad input or usage, as every verb

GATE_DOC = """Re-judge a report written by `lrkv verify` under the policy its baseline pins, and sort
every case into PASS/FAIL/REGRESSED/MISSING/ERROR/IMPROVED/UNVERIFIED (+XFAIL/SKIP), and
every feature a backend left uncovered into UNCOVERED (lrkv/verify/coverage.py); print
the summary as Markdown (or JSON with --json). The first baseline is made on purpose:
  lrkv gate REPORT --baseline FILE --update-baseline
With GITHUB_ACTIONS=true each blocking case is also an ::error annotation.
"""

GATE_EXITS = """exit codes:
  0    nothing is FAIL, REGRESSED, MISSING, UNCOVERED, ERROR or UNVERIFIED, and something was verified
  1    blocked: a case is FAIL/REGRESSED/MISSING/ERROR, a required or baseline feature is
       UNCOVERED, a gated backend verified nothing, the report is incomplete or altered
       (a case of its selection without exactly one record, a skip the backend would not make
       again), a replayed record did not reproduce (--replay), the report is not of this
       checkout's HEAD (--require-commit), or it was made under another policy than the baseline's;
       with --update-baseline: the report has FAIL/ERROR records, or covers fewer features than
       the baseline without --drop-coverage; the baseline is unchanged
  2    bad input or usage: unreadable or malformed report/baseline (the file and field are named)
  4    nothing verified (no non-baseline backend has a passing case); with --update-baseline:
       the baseline would be empty, so it is not written
  130  interrupted (the baseline is written atomically: never half-updated)
"""



DROPPED_SHOWN = 3  # feature names shown per backend · level when a baseline update would drop coverage


def _dropped_summary(lost: list[str]) -> str:
    """'tiled · kernel-paged: 40 (page size 1, …); …': the dropped features per backend and level."""
    groups: dict[str, list[str]] = {}
    for item in lost:
        where, _, feature = item.rpartition(" · ")
        groups.setdefault(where, []).append(feature)
    return "; ".join(f"{where}: {len(fs)} ({', '.join(fs[:DROPPED_SHOWN])}{', …' if len(fs) > DROPPED_SHOWN else ''})"
                     for where, fs in groups.items())


def register(subparsers) -> None:
    g = subparsers.add_parser("gate", help="gate a tolerance report against the accepted baseline",
                              description=GATE_DOC, epilog=GATE_EXITS,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    g.add_argument("report", help="report.json written by `lrkv verify`")
    g.add_argument("--baseline", required=True, help="accepted baseline (e.g. ci/baseline.json)")
    g.add_argument("--update-baseline", action="store_true",
                   help="accept this report on purpose: (re)write the baseline from its pass/xfail records; "
                        "refused if any case fails or errors")
    g.add_argument("--drop-coverage", action="store_true",
                   help="with --update-baseline: accept a baseline that covers fewer features than the old one "
                        "(the dropped features are listed); refused without it")
    g.add_argument("--keep-worst", action="store_true",
                   help="with --update-baseline: keep, per error, the larger of the old baseline's value and the "
                        "report's (accept a second machine's rounding noise; growth beyond both still regresses)")
    g.add_argument("--markdown", metavar="PATH", type=arg_out_file(), help="also write the gate summary as Markdown")
    g.add_argument("--subset", action="store_true",
                   help="only judge baseline entries of backends that appear in the report")
    g.add_argument("--replay", type=arg_int(minimum=0, maximum=100000), default=0, metavar="N",
                   help="re-run N pass/xfail records drawn at gate time (all of them when fewer are eligible; tp "
                        "records are not replayed), and every record whose status differs from the baseline; "
                        "block on any that does not reproduce (lrkv/verify/replay.py)")
    g.add_argument("--replay-seed", type=arg_int(minimum=0, maximum=2**32 - 1), metavar="S",
                   help="with --replay: draw the records from this seed (to repeat a replay; default: a fresh one)")
    g.add_argument("--require-commit", action="store_true",
                   help="block unless the report was made from this checkout's HEAD with a clean tree, and the "
                        "tree is clean now")
    g.add_argument("--backend-path", action="append", default=[], metavar="DIR",
                   help="directory to import the report's backends from (to re-ask supports() and replay)")
    g.add_argument("--json", action="store_true", help="print the verdict as JSON (exit code, counts, entries) "
                                                       "instead of Markdown")
    g.set_defaults(func=cmd_gate)


def commit_entries(report: dict) -> list:
    """ERROR unless the report was made from this checkout's HEAD with a clean tree, and the tree
    is still clean now: the code the gate rebuilds the selection from and replays with must be
    the code that made the report."""
    from .gate import GateEntry
    from .tolerance_report import NO_COMMIT, git_info

    here, there = git_info(), report.get("git") or {}
    if here["commit"] is None:
        why = "this directory is not a git checkout (or git is missing), so the report's commit cannot be checked"
    elif there.get("commit") != here["commit"]:
        why = f"the report was made from commit {there.get('commit') or NO_COMMIT}, the checkout is at {here['commit']}"
    elif there.get("dirty") is not False:
        why = f"the report was made from a tree with uncommitted changes (dirty: {there.get('dirty')})"
    elif here["dirty"]:
        why = "the checkout has uncommitted changes now, so the code here is not the commit the report names"
    else:
        return []
    todo = "commit your changes, then re-run `lrkv verify` and this gate"
    return [GateEntry("commit", "*", "*", "*", "ERROR", f"--require-commit: {why}; {todo}")]


def _replayed(entries: list, report: dict, baseline: dict, args, live: dict) -> list:
    """The entries with every record that did not reproduce on replay turned into an ERROR."""
    from .gate import GateEntry, report_policy
    from .replay import replay

    try:
        policy = report_policy(report)
    except ValueError:
        return entries  # already an ERROR entry: nothing can be replayed under an altered policy
    from .isolation import NotIsolated

    try:
        res = replay(report, baseline, args.replay, live, policy, seed=args.replay_seed)
    except NotIsolated as e:  # a backend no worker can hold: nothing was replayed
        return entries + [GateEntry("replay", "*", "*", "*", "ERROR", f"replay: {e}")]
    print(res.summary(), file=sys.stderr if args.json else sys.stdout)
    bad = {rec["key"]: why for rec, why in res.mismatches}
    out = [GateEntry(e.key, e.backend, e.case_id, e.dtype, "ERROR", f"replay: {bad.pop(e.key)}")
           if e.key in bad else e for e in entries]
    for rec, why in ((r, w) for r, w in res.mismatches if r["key"] in bad):  # keys without an entry of their own
        out.append(GateEntry(rec["key"], rec["backend"], rec["id"], rec["dtype"], "ERROR", f"replay: {why}"))
    return out


def cmd_gate(args) -> int:
    from pathlib import Path

    from .gate import (BLOCKING, EXIT_NOTHING as GATE_NOTHING, baseline_from_report, classify, counts, exit_code,
                       keep_worst, load_baseline, render_markdown, write_baseline)
    from .tolerance_report import load_report

    from .console import annotate_entries

    baseline_path = Path(args.baseline)
    try:
        report = load_report(args.report)
        if args.update_baseline and not baseline_path.exists():
            baseline = {"entries": {}, "policy": None}
        elif not baseline_path.exists():
            raise ValueError(f"{baseline_path}: no such baseline; to accept this report as the first one, run "
                             f"`lrkv gate {args.report} --baseline {baseline_path} --update-baseline` and commit it")
        else:
            baseline = load_baseline(baseline_path)
    except (ValueError, OSError) as e:
        print(f"lrkv gate: {e}", file=sys.stderr)
        return EXIT_USAGE
    from .ledger import live_backends

    if args.keep_worst and not args.update_baseline:
        print("lrkv gate: --keep-worst needs --update-baseline", file=sys.stderr)
        return EXIT_USAGE
    if args.replay_seed is not None and not args.replay:
        print("lrkv gate: --replay-seed needs --replay N", file=sys.stderr)
        return EXIT_USAGE
    live = live_backends(report, tuple(args.backend_path))
    entries = classify(report, baseline, subset=args.subset, check_policy=not args.update_baseline, live=live)
    if args.require_commit:
        entries += commit_entries(report)
    if args.replay:
        entries = _replayed(entries, report, baseline, args, live)
    md = render_markdown(entries, report=report)
    if args.json:
        import json
        from dataclasses import asdict

        print(json.dumps({"report": str(args.report), "baseline": str(baseline_path),
                          "exit_code": exit_code(entries, report), "counts": counts(entries),
                          "entries": [asdict(e) for e in entries]}, indent=1))
    else:
        print(md, end="")
    if not args.update_baseline:
        annotate_entries(entries, report, BLOCKING)
    if args.markdown:
        from .tolerance_report import write_atomic
        write_atomic(args.markdown, md)
    if args.update_baseline:
        bad = [e for e in entries if e.klass in ("FAIL", "ERROR")]
        if bad:
            print(f"lrkv gate: refusing to update {baseline_path}: {len(bad)} FAIL/ERROR "
                  f"(e.g. {bad[0].klass} {bad[0].key}: {bad[0].detail[:160]}); the baseline is unchanged",
                  file=sys.stderr)
            return EXIT_BLOCKED
        new = baseline_from_report(report)
        if args.keep_worst and baseline.get("entries"):
            new = keep_worst(baseline, new)
        if not any(e["status"] == "pass" for e in new["entries"].values()):
            print(f"lrkv gate: refusing to write an empty baseline to {baseline_path}: the report verified "
                  "nothing", file=sys.stderr)
            return GATE_NOTHING
        from .gate import coverage_dropped

        lost = coverage_dropped(baseline, new)
        if lost and not args.drop_coverage:
            print(f"lrkv gate: refusing to update {baseline_path}: {len(lost)} features the baseline covered are "
                  f"not covered by the report ({_dropped_summary(lost)}); accept that on purpose with "
                  "--drop-coverage, which lists them", file=sys.stderr)
            return EXIT_BLOCKED
        if lost:
            print(f"lrkv gate: dropping coverage of {len(lost)} features on purpose: {'; '.join(lost)}")
        write_baseline(new, baseline_path)
        c = counts(entries)
        print(f"baseline updated: {baseline_path} (accepted REGRESSED {c['REGRESSED']}, MISSING {c['MISSING']}, "
              f"IMPROVED {c['IMPROVED']}, UNVERIFIED {c['UNVERIFIED']}; policy sha256 {new['policy']['sha256'][:12]})")
        return EXIT_OK
    code = exit_code(entries, report)
    if code and not any(e.klass in BLOCKING for e in entries):
        print("lrkv gate: nothing verified — no non-baseline backend has a passing case", file=sys.stderr)
    return code
