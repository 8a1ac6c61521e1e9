"""`lrkv gate`: re-judge a tolerance report against the accepted baseline (DESIGN §7; its help
text is GATE_DOC, the exit codes GATE_EXITS)."""

from __future__ import annotations

import argparse
import sys

from ..checks import arg_out_file
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
       UNCOVERED, a gated backend verified nothing, the
       report is incomplete or altered, or it was made under another policy than the baseline's;
       with --update-baseline: the report has FAIL/ERROR records, or covers fewer features than
       the baseline without --drop-coverage; the baseline is unchanged
  2    bad input or usage: unreadable or malformed report/baseline (the file and field are named)
  4    nothing verified (no non-baseline backend has a passing case); with --update-baseline:
       the baseline would be empty, so it is not written
  130  interrupted (the baseline is written atomically: never half-updated)
"""


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
    g.add_argument("--markdown", metavar="PATH", type=arg_out_file(), help="also write the gate summary as Markdown")
    g.add_argument("--subset", action="store_true",
                   help="only judge baseline entries of backends that appear in the report")
    g.add_argument("--json", action="store_true", help="print the verdict as JSON (exit code, counts, entries) "
                                                       "instead of Markdown")
    g.set_defaults(func=cmd_gate)


def cmd_gate(args) -> int:
    from pathlib import Path

    from .gate import (BLOCKING, EXIT_NOTHING as GATE_NOTHING, baseline_from_report, classify, counts, exit_code,
                       load_baseline, render_markdown, write_baseline)
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
    entries = classify(report, baseline, subset=args.subset, check_policy=not args.update_baseline)
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
        if not any(e["status"] == "pass" for e in new["entries"].values()):
            print(f"lrkv gate: refusing to write an empty baseline to {baseline_path}: the report verified "
                  "nothing", file=sys.stderr)
            return GATE_NOTHING
        from .gate import coverage_dropped

        lost = coverage_dropped(baseline, new)
        if lost and not args.drop_coverage:
            print(f"lrkv gate: refusing to update {baseline_path}: the report covers {len(lost)} features the "
                  f"baseline covered ({'; '.join(lost[:8])}{' …' if len(lost) > 8 else ''}); accept that on "
                  "purpose with --drop-coverage", file=sys.stderr)
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
