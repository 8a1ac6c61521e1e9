"""lrkv used as a downstream repository uses it: ci/downstream-check builds the wheel,
installs it into a fresh venv outside this checkout, runs the README's Quick start 2, and runs its
tests through the pytest plugin and `lrkv verify` + `lrkv gate` on the starter backend
(pass) and on a planted bug (fail, with a replay command that resolves), and runs the
documented `pytest --lrkv-backend ... -m equivalence` on the starter (pass); a kernel that
writes into its cache fails test_server_properties both ways; `lrkv init --layout L` works
for every cache layout and that starter's tests pass. A few minutes: marked slow, so the test
command leaves it out and .ci/run runs it as a step of its own (`pytest -m slow`)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from lrkv.reference.cache_layouts import CACHE_LAYOUTS, DEFAULT

pytestmark = pytest.mark.slow

SCRIPT = Path(__file__).resolve().parents[2] / "ci" / "downstream-check"
LIMIT_S = 900


@pytest.mark.skipif(shutil.which("bash") is None, reason="ci/downstream-check is a bash script")
def test_downstream_round_trip(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    r = subprocess.run([str(SCRIPT), str(tmp_path / "work")], capture_output=True, text=True, env=env,
                       timeout=LIMIT_S, cwd=tmp_path)
    assert r.returncode == 0, r.stdout[-6000:] + r.stderr[-2000:]
    assert "ok: the wheel's lrkv" in r.stdout and "downstream check: ok" in r.stdout
    assert "ok: pytest --lrkv-backend (no test file needed) (exit 0)" in r.stdout
    for path in ("pytest -m equivalence", "pytest --lrkv-backend"):
        assert f"ok: {path} -k server_properties (writes its cache) (exit 1)" in r.stdout
    for layout in CACHE_LAYOUTS:  # each from the wheel, and its starter's own tests (the default's ran above)
        assert f"ok: lrkv init --layout {layout} (exit 0)" in r.stdout
        assert layout == DEFAULT or f"ok: pytest -m equivalence ({layout} starter) (exit 0)" in r.stdout
    assert "ok: pytest -m equivalence (vllm-blocks starter, full last block dropped) (exit 1)" in r.stdout
    assert "ok: pytest -m equivalence (vllm-blocks starter, head-major read as token-major) (exit 1)" in r.stdout
