"""`lrkv init`: the starter files of a downstream repository (the full round trip, with the
wheel in a fresh venv, is tests/testing/test_downstream.py)."""

from __future__ import annotations

import pytest

from lrkv import cli
from lrkv.testing import check_backend
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
    assert f"lrkv verify --backend {MODULE}:backend" in wf and f"--baseline {BASELINE}" in wf
    assert "GITHUB_STEP_SUMMARY" in wf and "upload-artifact" in wf and "pytest -m equivalence" in wf
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
    assert report.ok and report.counts["pass"] == 3


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
