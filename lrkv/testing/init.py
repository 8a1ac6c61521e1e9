"""`lrkv init [DIR]`: set up lrkv verification in a downstream repository.

Writes, from the templates packaged in lrkv/testing/templates/:

    lrkv.toml                      the project's config (policy overrides, commented out)
    lrkv_backend.py                a starter backend that passes (flash-decoding in PyTorch)
    tests/test_lrkv.py             the equivalence suite on that backend, via the pytest plugin
    .github/workflows/lrkv.yml     CI: install lrkv, pytest -m equivalence, lrkv verify, lrkv gate

then prints how to create the first baseline. Existing files are never overwritten without
--force (exit 2 naming the file).
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path

from ..checks import arg_out_dir

EXIT_USAGE = 2
BASELINE = "lrkv-baseline.json"
MODULE = "lrkv_backend"
# template -> path in the project
FILES = {
    "lrkv.toml.tmpl": "lrkv.toml",
    "backend.py.tmpl": f"{MODULE}.py",
    "test_lrkv.py.tmpl": "tests/test_lrkv.py",
    "workflow.yml.tmpl": ".github/workflows/lrkv.yml",
}


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "init", help="set up lrkv verification in your own repository",
        description=__doc__ + "\nexit codes: 0 written · 2 a file exists (use --force) or bad input · 130 interrupted "
                    "(1, 3 and 4 do not arise: init only writes files)",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", nargs="?", default=".", type=arg_out_dir(), help="the project directory (default: .)")
    p.add_argument("--force", action="store_true", help="overwrite files that exist")
    p.set_defaults(func=cmd_init)


def render(template: str, **values: str) -> str:
    text = resources.files("lrkv.testing").joinpath("templates", template).read_text(encoding="utf-8")
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text


def plan(directory: Path) -> dict[Path, str]:
    """Every file `init` writes, with its content."""
    from lrkv import __version__

    values = {"BACKEND_REF": f"{MODULE}:backend", "BACKEND_NAME": "my-backend", "BASELINE": BASELINE,
              "VERSION": __version__}
    return {directory / dest: render(src, **values) for src, dest in FILES.items()}


def init_project(directory: str | Path, *, force: bool = False) -> list[Path]:
    """Write the starter files; raise FileExistsError naming the first existing one unless force."""
    files = plan(Path(directory))
    if not force:
        for path in files:
            if path.exists():
                raise FileExistsError(f"{path} exists; use --force to overwrite it")
    for path, text in files.items():
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return list(files)


def next_steps(directory: Path) -> str:
    cd = "" if directory.resolve() == Path.cwd().resolve() else f"cd {directory}\n  "
    return (f"Next, from the project root:\n"
            f"  {cd}python -m pytest -m equivalence          # the suite on the starter backend\n"
            f"  lrkv verify --backend {MODULE}:backend --out reports/lrkv\n"
            f"The first baseline (commit {BASELINE}; the workflow gates against it):\n"
            f"  lrkv gate reports/lrkv/report.json --baseline {BASELINE} --update-baseline\n"
            f"Then replace the body of {MODULE}.py with your kernel.")


def cmd_init(args) -> int:
    try:
        written = init_project(args.dir, force=args.force)
    except FileExistsError as e:
        print(f"lrkv init: {e}", file=sys.stderr)
        return EXIT_USAGE
    for path in written:
        print(f"wrote {path}")
    print(next_steps(args.dir))
    return 0
