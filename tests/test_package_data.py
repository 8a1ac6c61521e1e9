"""The wheel carries every data file under lrkv/: pyproject's package-data globs take each
non-Python file on disk (package-data once took testing/templates/*.tmpl and left
templates/layouts/ out, so `lrkv init --layout vllm-blocks` failed from the wheel;
ci/downstream-check builds the wheel and runs every layout)."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "lrkv"


def test_package_data_takes_every_data_file_under_lrkv():
    globs = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]["lrkv"]
    taken = {path for pattern in globs for path in PACKAGE.glob(pattern) if path.is_file()}  # setuptools' glob rules
    data = {path for path in PACKAGE.rglob("*") if path.is_file() and path.suffix not in (".py", ".pyc")
            and "__pycache__" not in path.parts}
    assert PACKAGE / "testing/templates/layouts/vllm-blocks.tmpl" in data
    assert sorted(p.relative_to(ROOT).as_posix() for p in data - taken) == []
    assert all(any(PACKAGE.glob(pattern)) for pattern in globs), "a package-data glob that takes nothing"
