"""`lrkv init`: the starter files of a downstream repository (the full round trip, with the
wheel in a fresh venv, is tests/testing/test_downstream.py)."""

from __future__ import annotations

import pytest

from lrkv import cli
from lrkv.testing import check_backend, grid_cases
from lrkv.testing.init import BASELINE, FILES, MODULE


def _init(tmp_path, *extra) -> int:
    return cli.main(["init", str(tmp_path), *extra])


def test_writes_the_project_and_says_how_to_make_the_first_baseline(tmp_path, capsys):
    assert _init(tmp_path) == 0
    out = capsys.readouterr().out
    for dest in FILES.values():
        assert (tmp_path / dest).is_file(), dest
        assert "@" + "BACKEND" not in (tmp_path / dest).read_text()  # every placeholder filled
    assert f"--baseline {BASELINE} --update-baseline" in out
    wf = (tmp_path / ".github/workflows/lrkv.yml").read_text()
    assert 'pip install "$LRKV_PACKAGE"' in wf and ".[dev]" not in wf and "-e ." not in wf
    assert "lrkv==" not in wf  # never a default that cannot resolve: LRKV_PACKAGE comes from the metadata
    assert f"lrkv verify --backend {MODULE}:backend" in wf and f"--baseline {BASELINE}" in wf
    assert "GITHUB_STEP_SUMMARY" in wf and "upload-artifact" in wf and "pytest -m equivalence" in wf
    assert f"--baseline {BASELINE} --require-commit --replay 8" in wf  # the gate ties the report to HEAD, re-runs some
    test = (tmp_path / "tests/test_lrkv.py").read_text()
    assert f'BACKEND = "{MODULE}:backend"' in test and "pytestmark = pytest.mark.equivalence" in test


def test_refuses_to_overwrite_unless_forced(tmp_path, capsys):
    assert _init(tmp_path) == 0
    (tmp_path / "lrkv.toml").write_text("# mine\n")
    capsys.readouterr()
    assert _init(tmp_path) == 2
    assert "lrkv.toml exists; use --force" in capsys.readouterr().err
    assert (tmp_path / "lrkv.toml").read_text() == "# mine\n"
    assert _init(tmp_path, "--force") == 0
    assert (tmp_path / "lrkv.toml").read_text() != "# mine\n"


def test_a_file_in_place_of_the_directory_is_a_usage_error(tmp_path, capsys):
    (tmp_path / "f").write_text("x")
    with pytest.raises(SystemExit) as e:
        cli.main(["init", str(tmp_path / "f" / "proj")])
    assert e.value.code == 2 and "is a file" in capsys.readouterr().err


def test_the_starter_backend_passes(tmp_path, monkeypatch):
    assert _init(tmp_path) == 0
    monkeypatch.syspath_prepend(str(tmp_path))
    report = check_backend(f"{MODULE}:backend", grid="quick")
    # every quick kernel and paged case (a float64 one at its float32 twin); the rest are skips
    mine = [c for c in grid_cases("quick") if c.level in ("kernel", "kernel-paged")]
    assert report.ok and report.counts["pass"] == len(mine)


@pytest.mark.parametrize("layout", ["vllm-blocks", "flashinfer-csr", "fused-rows"])
def test_the_starter_in_a_server_layout_passes(tmp_path, monkeypatch, capsys, layout):
    assert _init(tmp_path, "--layout", layout) == 0
    text = (tmp_path / f"{MODULE}.py").read_text()
    assert f'cache_layout = "{layout}"' in text and text.count("def paged_decode_attention(") == 1
    module = f"{MODULE}_{layout.replace('-', '_')}"  # the run's worker processes keep modules imported before
    (tmp_path / f"{module}.py").write_text(text)
    monkeypatch.syspath_prepend(str(tmp_path))
    # the layout changes the paged decode only: the quick grid's paged cases (its decode: the test above)
    report = check_backend(f"{module}:backend", grid="quick", levels=["kernel-paged"])
    paged = [r for r in report.records if r["level"] == "kernel-paged"]
    assert report.ok and [r for r in paged if r["status"] == "pass"] and not report.failures
    assert {r["cache_layout"] for r in paged} == {layout}


def test_the_starter_backend_is_the_example_backend(tmp_path):
    """examples/my_backend.py and the starter `lrkv init` writes are one backend: the same code
    below their docstrings (only the name differs), so a fix to one cannot miss the other."""
    from pathlib import Path

    assert _init(tmp_path) == 0
    body = lambda text: text.split('"""', 2)[2]  # noqa: E731 — everything after the module docstring
    example = (Path(__file__).resolve().parents[2] / "examples" / "my_backend.py").read_text()
    starter = (tmp_path / f"{MODULE}.py").read_text()
    name = lambda text: text.split('name = "', 1)[1].split('"', 1)[0]  # noqa: E731
    assert body(starter).replace(name(starter), name(example)) == body(example)


def test_the_generated_test_file_runs_every_suite_test(tmp_path):
    """The file `lrkv init` writes runs every test the suite defines, and nothing else (it
    used to name eight and miss test_server_properties, among others)."""
    import importlib.util
    import inspect

    from lrkv.testing import suite

    assert _init(tmp_path) == 0
    spec = importlib.util.spec_from_file_location("generated_test_lrkv", tmp_path / FILES["test_lrkv.py.tmpl"])
    generated = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(generated)
    imported = {n for n, f in vars(generated).items() if n.startswith("test_") and f is getattr(suite, n, None)}
    defined = {n for n, f in vars(suite).items() if n.startswith("test_") and inspect.isfunction(f)}
    assert "test_server_properties" in defined and len(defined) >= 11
    assert imported == defined
    assert {n for n in vars(generated) if n.startswith("test_")} == imported  # no test of its own


def test_the_generated_test_file_fails_a_kernel_that_writes_its_cache(tmp_path):
    """The starter with a server bug planted: the project's own test file (no --lrkv-backend)
    runs test_server_properties, and it fails naming the property."""
    from .test_plugin import WRITES_CACHE, _pytest

    assert _init(tmp_path) == 0
    with open(tmp_path / f"{MODULE}.py", "a") as f:
        f.write(WRITES_CACHE + "backend = writes_cache\n")
    r = _pytest(tmp_path, "-k", "server_properties")
    assert r.returncode == 1, r.stdout[-3000:]
    assert r.stdout.splitlines()[-1].startswith("1 failed, "), r.stdout[-3000:]  # and the rest deselected
    assert f"FAILED tests/test_lrkv.py::test_server_properties[{MODULE}:backend]" in r.stdout
    assert "PROPERTY inputs_untouched writes-cache" in r.stdout


def _nothing_written(tmp_path, *keep) -> bool:
    """No starter file (and no staging folder) exists under tmp_path, apart from `keep`."""
    left = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file() or p.is_symlink()}
    return left <= set(keep) and not list(tmp_path.glob(".lrkv-init-*"))


@pytest.mark.parametrize("force", [False, True])
@pytest.mark.parametrize("make, path", [
    (lambda d: (d / ".github").write_text("x"), ".github"),  # a file where a folder is needed
    (lambda d: (d / ".github" / "workflows").mkdir(parents=True) or (d / ".github/workflows/lrkv.yml").mkdir(),
     ".github/workflows/lrkv.yml"),
    (lambda d: (d / "lrkv.toml").mkdir(), "lrkv.toml"),  # a folder where a file goes
])
def test_a_target_of_the_wrong_kind_is_exit_2_and_nothing_is_written(make, path, force, tmp_path, capsys):
    """lrkv.toml and lrkv_backend.py used to be written before `.github` turned out to be a file."""
    make(tmp_path)
    keep = {p.relative_to(tmp_path).as_posix() for p in tmp_path.rglob("*") if p.is_file()}
    assert _init(tmp_path, *(["--force"] if force else [])) == 2
    err = capsys.readouterr().err
    assert str(tmp_path / path) in err and "nothing written" in err, err
    assert _nothing_written(tmp_path, *keep)


@pytest.mark.parametrize("link", ["lrkv.toml", "tests"])
def test_never_writes_through_a_symlink(link, tmp_path, capsys):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "lrkv.toml").write_text("# someone else's\n")
    project = tmp_path / "proj"
    project.mkdir()
    (project / link).symlink_to(outside / "lrkv.toml" if link == "lrkv.toml" else outside)
    for extra in ([], ["--force"]):
        assert _init(project, *extra) == 2
        err = capsys.readouterr().err
        assert f"{project / link} is a symbolic link" in err, err
    assert (outside / "lrkv.toml").read_text() == "# someone else's\n" and len(list(outside.iterdir())) == 1
    assert _nothing_written(project, link)


@pytest.mark.parametrize("force", [False, True])
def test_a_write_that_fails_midway_takes_back_what_was_written(force, tmp_path, monkeypatch, capsys):
    """A permission error on the third file: no partial project is left behind, and with
    --force the files it overwrote come back."""
    import os

    from lrkv.testing import init as init_mod

    if force:
        assert _init(tmp_path) == 0
        for dest in FILES.values():
            (tmp_path / dest).write_text("# mine\n")
    before = {p.relative_to(tmp_path).as_posix(): p.read_text() for p in tmp_path.rglob("*") if p.is_file()}
    real, calls = os.replace, []

    def replace(src, dst):
        if str(dst).endswith(FILES["test_lrkv.py.tmpl"]) and str(src).endswith(".new"):
            raise PermissionError(13, "Permission denied", str(dst))
        calls.append(dst)
        return real(src, dst)
    monkeypatch.setattr(init_mod.os, "replace", replace)
    assert _init(tmp_path, *(["--force"] if force else [])) == 2
    err = capsys.readouterr().err
    assert f"cannot write {tmp_path / 'tests' / 'test_lrkv.py'}: Permission denied" in err, err
    assert calls  # some files had been moved into place before the failure
    after = {p.relative_to(tmp_path).as_posix(): p.read_text() for p in tmp_path.rglob("*") if p.is_file()}
    assert after == before and not list(tmp_path.glob(".lrkv-init-*"))
    assert force or not (tmp_path / "tests").exists()  # the folder it made is gone too


@pytest.mark.skipif(not hasattr(__import__("os"), "geteuid") or __import__("os").geteuid() == 0,
                    reason="root writes into a read-only folder")
def test_a_read_only_folder_is_exit_2_naming_it(tmp_path, capsys):
    (tmp_path / "tests").mkdir()
    (tmp_path / "tests").chmod(0o500)
    try:
        assert _init(tmp_path) == 2
        assert "cannot write" in capsys.readouterr().err
        assert _nothing_written(tmp_path)
    finally:
        (tmp_path / "tests").chmod(0o700)


def test_the_workflow_installs_lrkv_from_where_it_came_from():
    """PEP 610 metadata: a git install at its commit, an https wheel, an index by version; a
    local wheel, folder or editable checkout (nothing CI can reach) leaves it empty."""
    from lrkv.testing.init import requirement

    git = '{"url": "https://github.com/acme/lrkv.git", "vcs_info": {"vcs": "git", "commit_id": "abc123"}}'
    assert requirement(git, "0.1.0") == "lrkv[test] @ git+https://github.com/acme/lrkv.git@abc123"
    wheel = '{"url": "https://example.com/lrkv-0.1.0-py3-none-any.whl", "archive_info": {}}'
    assert requirement(wheel, "0.1.0") == "lrkv[test] @ https://example.com/lrkv-0.1.0-py3-none-any.whl"
    assert requirement(None, "0.2.0") == "lrkv[test]==0.2.0"
    for local in ('{"url": "file:///tmp/dist/lrkv-0.1.0-py3-none-any.whl", "archive_info": {}}',
                  '{"url": "file:///home/me/lrkv", "dir_info": {"editable": true}}', "not json", "[]"):
        assert requirement(local, "0.1.0") == "", local


def test_an_empty_package_fails_the_workflow_with_one_line(tmp_path, capsys):
    from lrkv.testing.init import init_project

    init_project(tmp_path, package="")
    wf = (tmp_path / ".github/workflows/lrkv.yml").read_text()
    assert 'LRKV_PACKAGE: ""' in wf and 'if [ -z "$LRKV_PACKAGE" ]; then' in wf and "::error::set LRKV_PACKAGE" in wf


def test_gitignore_is_written_or_extended_never_refused(tmp_path, capsys):
    assert _init(tmp_path / "new") == 0
    assert "reports/" in (tmp_path / "new/.gitignore").read_text().splitlines()
    (tmp_path / "old").mkdir()
    (tmp_path / "old/.gitignore").write_text("build/\nreports/")
    capsys.readouterr()
    assert _init(tmp_path / "old") == 0
    assert "added lrkv's lines to" in capsys.readouterr().out
    lines = (tmp_path / "old/.gitignore").read_text().splitlines()
    assert lines[:2] == ["build/", "reports/"] and lines.count("reports/") == 1 and ".hypothesis/" in lines


def test_next_steps_run_git_init_commit_and_the_commit_tied_gate(tmp_path, capsys):
    assert _init(tmp_path / "p") == 0
    out = capsys.readouterr().out
    assert "git init" in out and "git add -A && git commit" in out
    assert out.index("--update-baseline") < out.index("git commit") < out.index("--require-commit")


def test_an_empty_directory_name_is_refused(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["init", ""])
    assert e.value.code == 2 and "empty path" in capsys.readouterr().err


@pytest.mark.parametrize("layout", ["vllm-blocks", "pages"])
def test_a_template_missing_from_the_package_is_cannot_read_exit_2(layout, tmp_path, monkeypatch, capsys):
    """A wheel built without a template (package-data once left out templates/layouts/): exit 2,
    naming the file it could not READ and what to do, and nothing written."""
    import shutil
    from pathlib import Path
    from types import SimpleNamespace

    from lrkv.testing import init

    packaged = tmp_path / "site" / "lrkv" / "testing"
    shutil.copytree(Path(init.__file__).parent / "templates", packaged / "templates")
    missing = packaged / "templates" / ("layouts/vllm-blocks.tmpl" if layout != "pages" else "backend.py.tmpl")
    missing.unlink()
    monkeypatch.setattr(init, "resources", SimpleNamespace(files=lambda package: packaged))
    project = tmp_path / "proj"
    assert _init(project, "--layout", layout) == 2
    err = capsys.readouterr().err
    assert err == f"lrkv init: cannot read {missing} (the package is incomplete: reinstall lrkv) (nothing written)\n"
    assert not project.exists()
    if layout != "pages":  # the rest of the package still serves the layouts it has
        assert _init(project) == 0 and (project / f"{MODULE}.py").is_file()


def test_the_layouts_doc_init_line_runs_as_written(tmp_path, monkeypatch, capsys):
    """docs/harness.md "Layouts" tells the user `lrkv init --layout vllm-blocks`: run verbatim."""
    import shlex
    from pathlib import Path

    from tests.test_helpers.doc_blocks import blocks

    doc = Path(__file__).resolve().parents[2] / "docs" / "harness.md"
    lines = [line for line in blocks(doc, "Layouts: the cache", "sh")[0].splitlines() if line.startswith("lrkv init")]
    assert lines
    monkeypatch.chdir(tmp_path)
    for line in lines:
        argv = shlex.split(line, comments=True)
        assert cli.main(argv[1:]) == 0, line
        layout = argv[argv.index("--layout") + 1]
        assert f'cache_layout = "{layout}"' in (tmp_path / f"{MODULE}.py").read_text()


def test_the_workflow_verifies_in_shards_and_gates_their_merge(tmp_path):
    """A matrix of shards (GitHub Actions' engine), then one job that merges their reports and
    gates the merge: every shard's artifact is what the merge reads, and N is the matrix's length."""
    import re

    assert _init(tmp_path) == 0
    wf = (tmp_path / ".github/workflows/lrkv.yml").read_text()
    verify, gate = wf.split("\n  verify:\n")[1].split("\n  gate:\n")
    shards = re.search(r"shard: \[([\d, ]+)\]", verify).group(1)
    assert [int(s) for s in shards.split(",")] == [1, 2, 3, 4]
    assert (f"lrkv verify --backend {MODULE}:backend --shard ${{{{ matrix.shard }}}}/${{{{ strategy.job-total }}}} "
            "--out reports/shard-${{ matrix.shard }}") in verify
    assert "fail-fast: false" in verify and "name: lrkv-shard-${{ matrix.shard }}" in verify
    assert "needs: verify" in gate and "if: ${{ !cancelled() }}" in gate
    order = [gate.index(s) for s in ("pattern: lrkv-shard-*", "lrkv merge reports/lrkv-shard-* --out reports/lrkv",
                                     "lrkv gate reports/lrkv/report.json")]
    assert order == sorted(order)
