"""`lrkv merge`: one report from the shard reports of a run (merge.py; its help text is MERGE_DOC)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..checks import arg_out_dir

EXIT_OK, EXIT_USAGE = 0, 2

MERGE_DOC = """Merge the N reports of `lrkv verify --shard I/N` (each a DIR holding report.json, or the
file itself) into OUT/report.json and OUT/report.md: the report a serial run would have
written, which `lrkv gate` reads. Refused, naming the file, unless the reports are exactly
shards 1..N of one selection, commit, policy and set of backends, complete and unedited.
"""

MERGE_EXITS = """exit codes:
  0    merged
  2    bad input: a shard missing, duplicated, foreign, incomplete or edited (the file is named);
       nothing is written
  130  interrupted (the report is written atomically: never half-written)
"""


def register(subparsers) -> None:
    m = subparsers.add_parser("merge", help="merge the shard reports of `lrkv verify --shard I/N` into one report",
                              description=MERGE_DOC, epilog=MERGE_EXITS,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    m.add_argument("shards", nargs="+", metavar="DIR", help="a shard's report directory (or its report.json)")
    m.add_argument("--out", required=True, type=arg_out_dir(), help="directory of the merged report")
    m.set_defaults(func=cmd_merge)


def cmd_merge(args) -> int:
    from .merge import merge
    from .tolerance_report import clear_report, headline, load_report, write_report

    clear_report(args.out)  # first: a refused merge leaves no earlier merged report behind
    try:
        shards = []
        for given in args.shards:
            path = Path(given) / "report.json" if Path(given).is_dir() else Path(given)
            shards.append((str(path), load_report(path)))
        report = merge(shards, argv=["merge", *args.shards])
    except (ValueError, OSError) as e:
        print(f"lrkv merge: {e}", file=sys.stderr)
        return EXIT_USAGE
    jpath, mpath = write_report(report, args.out)
    print(f"merged {report['merged']['count']} shards, {len(report['records'])} records: {headline(report)}")
    print(f"report: {jpath}  summary: {mpath}")
    return EXIT_OK
