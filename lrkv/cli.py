"""The `lrkv` command. Each verb lives in its own module with a `register(subparsers)`."""

from __future__ import annotations

import argparse
import importlib
import sys

# module -> verbs it registers; a module that is not importable is reported, not hidden.
VERB_MODULES = (
    "lrkv.selfcheck",
    "lrkv.verify.cli",
    "lrkv.proofs.cli",
    "lrkv.compiled.cli",
    "lrkv.bench.cli",
    "lrkv.spec.cache_cli",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="lrkv", description=__doc__)
    from lrkv import __version__

    parser.add_argument("--version", action="version", version=f"lrkv {__version__}")
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    for name in VERB_MODULES:
        try:
            mod = importlib.import_module(name)
        except ModuleNotFoundError as e:
            if e.name == name:
                continue  # verb not built yet
            raise
        mod.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help()
        return 2
    return int(args.func(args) or 0)


if __name__ == "__main__":
    sys.exit(main())
