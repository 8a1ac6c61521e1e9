"""The pytest plugin on a backend given by --lrkv-backend, in a directory with no tests of its
own (as in a user's repository): it adds the suite, says NO on a planted bug with the replay,
and fails — never skips — a backend that cannot be loaded."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _pytest(tmp_path, *args) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))),
               HYPOTHESIS_PROFILE="ci", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "pytest", "-p", "lrkv.testing.plugin", "-p", "no:cacheprovider", "-q",
           "--rootdir", str(tmp_path), "-m", "equivalence", *args]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def test_plugin_runs_the_grid_and_says_no_with_the_replay(tmp_path):
    ok = _pytest(tmp_path, "--lrkv-backend", "examples.my_backend:backend", "-k", "grid_case or permutation")
    assert ok.returncode == 0, ok.stdout[-3000:]
    assert "4 passed, 3 skipped" in ok.stdout  # 3 kernel cases + the permutation property; 3 cases not claimed
    bad = _pytest(tmp_path, "--lrkv-backend", "tests.testing.test_api:SCALED", "-k", "grid_case")
    assert bad.returncode == 1, bad.stdout[-3000:]
    assert "2 failed, 1 passed, 3 skipped" in bad.stdout
    assert "replay: lrkv verify --backend tests.testing.test_api:SCALED --case '" in bad.stdout


def test_a_backend_that_cannot_load_fails(tmp_path):
    r = _pytest(tmp_path, "--lrkv-backend", "no_such_module_xyz:backend", "-k", "grid_case or garbage")
    assert r.returncode == 1, r.stdout[-3000:]
    assert "cannot load" in r.stdout and "no_such_module_xyz" in r.stdout
