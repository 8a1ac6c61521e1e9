"""lrkv — reference and verification for Low-Rank Key-Value (LRKV) attention.

Run `lrkv VERB --help` for a verb's options.

exit codes (every verb):
  0    ok
  1    a check failed
  2    bad input or usage (the message names the file or field)
  3    a toolchain is missing here
  4    nothing was verified
  130  interrupted
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from importlib import resources

# verb -> (module that registers it, one-line help). Only the chosen verb's module is
# imported: `lrkv --version` and `lrkv --help` never import torch.
VERBS: dict[str, tuple[str, str]] = {
    "verify": ("lrkv.verify.verify_cli", "run decode backends against the float64 oracle; write a tolerance report"),
    "gate": ("lrkv.verify.gate_cli", "gate a tolerance report against an accepted baseline"),
    "merge": ("lrkv.verify.merge_cli", "merge the shard reports of `lrkv verify --shard I/N` into one report"),
    "proofs": ("lrkv.proofs.proofs_cli", "run the symbolic proofs of the paper's algebra"),
    "export": ("lrkv.compiled.export_cli", "export a verified ONNX / AOTInductor / TensorRT engine"),
    "bench": ("lrkv.bench.bench_cli", "time one decode step of LRKV and its peers side by side"),
    "cache": ("lrkv.spec.cache_cli", "size a deployment: KV cache of LRKV and its peers side by side"),
    "init": ("lrkv.testing.init", "set up lrkv verification in your own repository"),
}
EXIT_USAGE = 2


def _present(module: str) -> bool:
    """Whether the verb's module ships in this installation (checked without importing it)."""
    parts = module.split(".")
    return resources.files(parts[0]).joinpath(*parts[1:-1], parts[-1] + ".py").is_file()


def available_verbs() -> dict[str, tuple[str, str]]:
    return {verb: entry for verb, entry in VERBS.items() if _present(entry[0])}


def _global_options(parser: argparse.ArgumentParser) -> None:
    from lrkv import __version__

    parser.add_argument("--version", action="version", version=f"lrkv {__version__}")
    noise = parser.add_mutually_exclusive_group()
    noise.add_argument("-q", "--quiet", action="count", default=0,
                       help="less output: no progress bar, no summary table")
    noise.add_argument("-v", "--verbose", action="count", default=0,
                       help="more output: every record with its reason (-vv: debug logging too)")


def _noise_after_verb(parser: argparse.ArgumentParser) -> None:
    """-q / -v after the verb as well (a printed replay command takes `-v` at its end); counted
    from there, and flags the verb already uses for itself are left to it."""
    taken = set(parser._option_string_actions)
    group = parser.add_mutually_exclusive_group()
    for flags, dest in ((("-q", "--quiet"), "quiet"), (("-v", "--verbose"), "verbose")):
        free = [f for f in flags if f not in taken]
        if free:
            group.add_argument(*free, dest=dest, action="count", default=argparse.SUPPRESS,
                               help=f"as `lrkv {free[0]} VERB`")


def build_parser(verb: str | None = None) -> argparse.ArgumentParser:
    """The `lrkv` parser; with a verb, that verb's module registers its real sub-parser
    (the others appear in the verb list only)."""
    parser = argparse.ArgumentParser(prog="lrkv", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    _global_options(parser)
    sub = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs = available_verbs()
    if verb in verbs:
        module = importlib.import_module(verbs[verb][0])
        module.register(sub)
        _noise_after_verb(sub.choices[verb])
    for name, (_, help_) in verbs.items():
        if name not in sub.choices:
            sub.add_parser(name, help=help_, add_help=False)
    return parser


def _chosen_verb(argv: list[str]) -> str | None:
    """The first argument that is a verb name (global options come before it)."""
    for arg in argv:
        if arg == "--":
            return None
        if not arg.startswith("-"):
            return arg if arg in VERBS else None
    return None


def _logging(args) -> int:
    verbosity = args.verbose - args.quiet
    level = {-1: logging.WARNING, 0: logging.WARNING, 1: logging.INFO}.get(verbosity, logging.DEBUG)
    logging.basicConfig(level=logging.ERROR if verbosity < -1 else level, format="lrkv: %(message)s")
    return verbosity


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    verb = _chosen_verb(argv)
    try:
        parser = build_parser(verb)
    except Exception as e:  # noqa: BLE001 — a broken verb module is named, never a traceback
        module = VERBS[verb][0] if verb else "lrkv"
        print(f"lrkv {verb}: cannot load {module}: {type(e).__name__}: {e}", file=sys.stderr)
        return EXIT_USAGE
    args = parser.parse_args(argv)
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return EXIT_USAGE
    args.verbosity = _logging(args)
    if args.verbosity < 0 and hasattr(args, "no_progress"):
        args.no_progress = True
    try:
        return int(args.func(args) or 0)
    except KeyboardInterrupt:
        print(f"lrkv {args.verb}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
