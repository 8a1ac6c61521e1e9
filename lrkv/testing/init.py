"""`lrkv init [DIR]`: set up lrkv verification in a downstream repository.

Writes, from the templates packaged in lrkv/testing/templates/:

    lrkv.toml                      the project's config (policy overrides, commented out)
    lrkv_backend.py                a starter backend that passes (flash-decoding in PyTorch,
                                   decode and paged decode; --layout: its paged decode in a
                                   server's cache layout, e.g. vllm-blocks)
    tests/test_lrkv.py             the equivalence suite on that backend, via the pytest plugin
    .github/workflows/lrkv.yml     CI: install lrkv, pytest -m equivalence, lrkv verify, lrkv gate
    .gitignore                     reports/ and the test caches (lines added to an existing one)

then prints the next steps, from `git init` to the merge gate. Existing files are never
overwritten without --force (exit 2 naming the file); an existing .gitignore only gains the
lines it lacks.

The workflow installs lrkv from where this lrkv came from, when its distribution metadata
says (PEP 610 `direct_url.json`: a git URL at its commit or an https archive; none: an index,
by version); a local wheel or checkout is nothing CI can reach, so LRKV_PACKAGE is left empty
and the workflow's first step fails with one line saying what to set.

All or nothing: every target is checked first — an existing file without --force, a
directory or other non-file where a file goes, a file where a directory is needed (say a
`.github` file), a symbolic link at a target or at a folder inside the project (init never
writes through a link, not even with --force) — and any of them is exit 2 naming the path
before anything is written. The files are then written into a temporary folder inside the
project and moved into place; if one cannot be written (permissions, a full disk), the ones
already moved are taken back, overwritten ones restored, and the error names the path.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from importlib import resources
from pathlib import Path

from ..checks import arg_out_dir
from ..reference.cache_layouts import CACHE_LAYOUTS, DEFAULT as DEFAULT_LAYOUT

EXIT_USAGE = 2
BASELINE = "lrkv-baseline.json"
MODULE = "lrkv_backend"
# template -> path in the project
FILES = {
    "lrkv.toml.tmpl": "lrkv.toml",
    "backend.py.tmpl": f"{MODULE}.py",
    "test_lrkv.py.tmpl": "tests/test_lrkv.py",
    "workflow.yml.tmpl": ".github/workflows/lrkv.yml",
    "gitignore.tmpl": ".gitignore",
}
MERGED = (".gitignore",)  # an existing one gains the template's missing lines; never refused, never replaced


def register(subparsers) -> None:
    p = subparsers.add_parser(
        "init", help="set up lrkv verification in your own repository",
        description=__doc__ + "\nexit codes: 0 written · 2 a file exists (use --force), a target that cannot be "
                    "written (nothing is), a template missing from the package, or bad input · 130 interrupted "
                    "(1, 3 and 4 do not arise: init only writes files)",
        formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("dir", nargs="?", default=".", type=arg_out_dir(), help="the project directory (default: .)")
    p.add_argument("--force", action="store_true", help="overwrite files that exist")
    p.add_argument("--layout", choices=CACHE_LAYOUTS, default=DEFAULT_LAYOUT,
                   help="the cache layout of the starter's paged decode (default: pages, the contract's own)")
    p.set_defaults(func=cmd_init)


class InitError(ValueError):
    """A target of `lrkv init` that cannot be written as asked (or a template that cannot be
    read); the message names the path."""


def render(template: str, **values: str) -> str:
    path = resources.files("lrkv.testing").joinpath("templates", template)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:  # the template is read, not written: a wheel built without it
        raise InitError(f"cannot read {path} (the package is incomplete: reinstall lrkv)") from None
    for key, value in values.items():
        text = text.replace(f"@{key}@", value)
    return text


def requirement(direct_url: str | None, version: str) -> str:
    """The pip requirement CI installs lrkv (with its `test` extra) by, from the installed
    distribution's PEP 610 `direct_url.json` (None: installed from an index by name); '' when
    it came from a local wheel, folder or editable checkout, which a CI runner cannot reach."""
    if direct_url is None:
        return f"lrkv[test]=={version}"
    try:
        info = json.loads(direct_url)
    except ValueError:
        return ""
    url = info.get("url", "") if isinstance(info, dict) else ""
    if not url.startswith(("https://", "http://", "ssh://", "git@")):
        return ""  # file://: this machine only
    vcs = info.get("vcs_info") or {}
    if vcs.get("vcs") == "git" and vcs.get("commit_id"):
        return f"lrkv[test] @ git+{url}@{vcs['commit_id']}"
    return f"lrkv[test] @ {url}" if "archive_info" in info else ""


def installed_requirement() -> str:
    """`requirement` for the lrkv running now."""
    from importlib import metadata

    try:
        dist = metadata.distribution("lrkv")
    except metadata.PackageNotFoundError:
        return ""
    return requirement(dist.read_text("direct_url.json"), dist.version)


def _merged(path: Path, text: str) -> str | None:
    """An existing file's text plus the template's lines it lacks (None: nothing to add)."""
    if not path.is_file() or path.is_symlink():
        return text
    old = path.read_text(encoding="utf-8")
    have = set(old.splitlines())
    missing = [line for line in text.splitlines() if line.strip() and not line.startswith("#") and line not in have]
    return (old + ("" if old.endswith("\n") or not old else "\n") + "# added by lrkv init\n"
            + "".join(f"{line}\n" for line in missing)) if missing else None


def in_layout(starter: str, layout: str) -> str:
    """The starter backend with its paged decode in `layout` (templates/layouts/<layout>.tmpl:
    the contract's paragraph, then the class attribute and the method)."""
    if layout == DEFAULT_LAYOUT:
        return starter
    contract, method = render(f"layouts/{layout}.tmpl").split("#----\n")
    head, rest = starter.split("    paged_decode_attention(q, <the same four parts", 1)
    starter = head + contract + rest.split("# lrkv's own page table\n", 1)[1]
    attribute, method = method.split("\n\n", 1)
    head, rest = starter.split("    def paged_decode_attention(", 1)
    starter = head + method + "\n" + "    def gathered_decode(" + rest.split("    def gathered_decode(", 1)[1]
    head, rest = starter.split("    cache_formats = ", 1)
    line, rest = rest.split("\n", 1)
    return head + "    cache_formats = " + line + "\n" + attribute + "\n" + rest


def plan(directory: Path, package: str | None = None, layout: str = DEFAULT_LAYOUT) -> dict[Path, str]:
    """Every file `init` writes, with its content (package: LRKV_PACKAGE, default the running lrkv's;
    layout: the starter's paged cache layout)."""
    values = {"BACKEND_REF": f"{MODULE}:backend", "BACKEND_NAME": "my-backend", "BASELINE": BASELINE,
              "PACKAGE": installed_requirement() if package is None else package}
    files = {}
    for src, dest in FILES.items():
        text = render(src, **values)
        if src == "backend.py.tmpl":
            text = in_layout(text, layout)
        if dest in MERGED:
            text = _merged(directory / dest, text)
            if text is None:
                continue
        files[directory / dest] = text
    return files


def _folders(path: Path, directory: Path) -> list[Path]:
    """The folders between `directory` (excluded) and `path` (excluded), outermost first."""
    rel = path.relative_to(directory)
    return [directory.joinpath(*rel.parts[:i]) for i in range(1, len(rel.parts))]


def check_targets(directory: Path, files: dict[Path, str], *, force: bool = False) -> None:
    """Raise InitError (or FileExistsError, without --force) naming the first target that
    cannot be written; nothing is touched."""
    if directory.is_symlink() and not directory.is_dir():
        raise InitError(f"{directory} is a broken symbolic link")
    if directory.exists() and not directory.is_dir():
        raise InitError(f"{directory} exists and is not a directory")
    for path in files:
        for folder in _folders(path, directory):
            if folder.is_symlink():
                raise InitError(f"{folder} is a symbolic link; lrkv init does not write through links")
            if folder.exists() and not folder.is_dir():
                raise InitError(f"{folder} is a file, not a directory (needed for {path.relative_to(directory)})")
        if path.is_symlink():
            raise InitError(f"{path} is a symbolic link; lrkv init does not write through links")
        if path.exists() and not path.is_file():
            raise InitError(f"{path} exists and is not a regular file")
        if path.exists() and not force and path.name not in MERGED:
            raise FileExistsError(f"{path} exists; use --force to overwrite it")


def _oserror(e: OSError, fallback: Path) -> InitError:
    return InitError(f"cannot write {e.filename or fallback}: {e.strerror or e}")


def _undo(placed: list[Path], backups: dict[Path, Path], made: list[Path]) -> None:
    """Take back a write that failed midway: remove the files moved into place, put back the
    ones they replaced, remove the folders made. Best effort — each step is tried even if an
    earlier one failed (a folder someone else filled meanwhile stays)."""
    for path in reversed(placed):
        try:
            path.unlink(missing_ok=True)
        except OSError:
            pass
    for path, old in backups.items():
        try:
            os.replace(old, path)
        except OSError:
            pass
    for folder in reversed(made):
        try:
            folder.rmdir()
        except OSError:
            pass


def init_project(directory: str | Path, *, force: bool = False, package: str | None = None,
                 layout: str = DEFAULT_LAYOUT) -> list[Path]:
    """Write the starter files, all or nothing (see the module doc); raise FileExistsError
    naming the first existing one unless force, InitError naming a path that cannot be written."""
    directory = Path(directory)
    files = plan(directory, package, layout)
    check_targets(directory, files, force=force)
    made: list[Path] = []  # folders this call created, outermost first
    placed: list[Path] = []
    backups: dict[Path, Path] = {}
    staging = None
    try:
        for folder in [*reversed(directory.parents), directory]:
            if not folder.exists():
                folder.mkdir()
                made.append(folder)
        staging = Path(tempfile.mkdtemp(prefix=".lrkv-init-", dir=directory))
        staged = {}
        for i, (path, text) in enumerate(files.items()):
            staged[path] = staging / f"{i}.new"
            try:
                staged[path].write_text(text, encoding="utf-8")
            except OSError as e:
                raise _oserror(e, path) from None
        for i, (path, tmp) in enumerate(staged.items()):
            try:
                for folder in _folders(path, directory):
                    if not folder.exists():
                        folder.mkdir()
                        made.append(folder)
                if path.exists():  # --force: kept until every file is in place
                    backups[path] = staging / f"{i}.old"
                    os.replace(path, backups[path])
                os.replace(tmp, path)  # replaces a name, never writes through a link
                placed.append(path)
            except OSError as e:
                raise _oserror(e, path) from None
    except BaseException:
        _undo(placed, backups, made)
        raise
    finally:
        if staging is not None:
            shutil.rmtree(staging, ignore_errors=True)
    return list(files)


def next_steps(directory: Path, package: str) -> str:
    cd = "" if directory.resolve() == Path.cwd().resolve() else f"cd {directory}\n  "
    in_git = any((d / ".git").exists() for d in (directory.resolve(), *directory.resolve().parents))
    git = "" if in_git else "git init -q                                 # the gate ties each report to a commit\n  "
    verify = f"lrkv verify --backend {MODULE}:backend --out reports/lrkv"
    steps = (f"Next, from the project root:\n"
             f"  {cd}{git}python -m pytest -m equivalence -q          # the suite on the starter backend\n"
             f"  {verify}\n"
             f"  lrkv gate reports/lrkv/report.json --baseline {BASELINE} --update-baseline   # the first baseline\n"
             f"  git add -A && git commit -qm \"lrkv: starter backend and its baseline\"\n"
             f"Then, for each change to {MODULE}.py (your kernel): commit it, and gate a report of that commit:\n"
             f"  {verify}\n"
             f"  lrkv gate reports/lrkv/report.json --baseline {BASELINE} --require-commit --replay 8")
    if not package:
        steps += (f"\nBefore pushing: set LRKV_PACKAGE in .github/workflows/lrkv.yml — this lrkv came from a "
                  f"local wheel or checkout, which CI cannot install from.")
    return steps


def cmd_init(args) -> int:
    package = installed_requirement()
    merged = {Path(args.dir) / name for name in MERGED if (Path(args.dir) / name).is_file()}
    try:
        written = init_project(args.dir, force=args.force, package=package, layout=args.layout)
    except (FileExistsError, InitError) as e:
        print(f"lrkv init: {e} (nothing written)", file=sys.stderr)
        return EXIT_USAGE
    except OSError as e:  # e.g. the project folder cannot be created
        print(f"lrkv init: cannot write {e.filename or args.dir}: {e.strerror or e} (nothing written)",
              file=sys.stderr)
        return EXIT_USAGE
    for path in written:
        print(f"added lrkv's lines to {path}" if path in merged else f"wrote {path}")
    print(next_steps(args.dir, package))
    return 0
