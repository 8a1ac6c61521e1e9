"""ci/gpu-check on a machine without a GPU: its plan lists every step with a time share and
exits 0; a real run records why each step could not run and exits 1, because the required
steps (native Triton tests, verify, gate) did not pass; either way $OUT is packed into the
few files a device run brings back (ci/gpu-pack). The GPU run itself is `ci/gpu-check` on a
GPU (docs/kernels.md)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "ci" / "gpu-check"
PACK = ROOT / "ci" / "gpu-pack"
MAX_BACK = 6  # files ci/gpu-check leaves in $OUT: the device run brings back 8, two folders down at most

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="ci/gpu-check is a bash script using coreutils' timeout")


def _run(tmp_path, *args, seconds=None):
    env = {**os.environ, "OUT": str(tmp_path), "GPU_CHECK_SITE": str(tmp_path.parent / "site")}
    env.pop("TRITON_INTERPRET", None)
    if seconds is not None:
        env["GPU_CHECK_SECONDS"] = str(seconds)
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=300)


REQUIRED = ("pytest-triton", "verify-triton", "gate-triton")
DEADLINE = 480  # ci/gpu-check's default GPU_CHECK_SECONDS: 8 minutes


def test_plan_lists_every_step(tmp_path):
    proc = _run(tmp_path, "--plan")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert doc["plan"] and not doc["failed"]
    steps = {s["step"]: s for s in doc["steps"]}
    # the gate's evidence first, then the measurements; the optional tail only with time left
    assert list(steps) == ["env", "pytest-triton", "verify-warm", "verify-triton", "gate-triton", "sanitizer", "sweep",
                           "bench", "bench-paged-rope", "bench-fp8", "profile", "verify-inductor", "gate-inductor",
                           "bench-compiled", "pytest-gpu-other"]
    planned = [n for n, s in steps.items() if s["status"] == "planned"]
    assert planned == list(steps)[1:10]  # every required step and the core measurements fit the worst case
    assert all(steps[n]["status"] == "skip" and "no time left" in steps[n]["note"] for n in list(steps)[10:])
    assert sum(int(steps[n]["seconds"]) for n in planned) <= DEADLINE - 10  # env's ~10 s
    assert "--sweep" in steps["sweep"]["note"] and "--check-targets" in steps["bench"]["note"]
    assert "private=wide" in steps["sweep"]["note"] and "group_size=9,4" in steps["sweep"]["note"]
    for word in ("gqa-eq", "128K", "1,8,16", "2.5B,6.3B", "sdpa"):
        assert word in steps["bench"]["note"], word
    assert "triton-paged" in steps["bench-paged-rope"]["note"] and "triton-rope" in steps["bench-paged-rope"]["note"]
    assert "triton-fp8" in steps["bench-fp8"]["note"] and "gqa-eq8" in steps["bench-fp8"]["note"]
    if importlib.util.find_spec("xdist"):  # the native tests compile their kernels on 12 workers
        assert "-n 12" in steps["pytest-triton"]["note"]
    gate = steps["gate-triton"]["note"]
    assert "ci/baseline-triton.json" in gate and "--subset" not in gate  # gated on the whole baseline
    assert "memcheck" in steps["sanitizer"]["note"] and "gpu-launch.py variants" in steps["sanitizer"]["note"]
    _assert_packed(tmp_path)


def _assert_packed(out: Path) -> set[str]:
    """$OUT holds at most MAX_BACK plain files, none in a folder; returns the archive's names."""
    left = list(out.iterdir())
    assert len(left) <= MAX_BACK and all(p.is_file() for p in left), sorted(p.name for p in left)
    assert {"summary.md", "summary.json", "results.tar.gz"} <= {p.name for p in left}
    with tarfile.open(out / "results.tar.gz") as tar:
        return set(tar.getnames())


def test_pack_keeps_every_file_in_six(tmp_path):
    # a run's output as ci/gpu-check writes it: ~25 files, reports two and three folders down
    names = ["summary.md", "summary.json", "env.txt", "nvidia-smi.txt", "sweep.log", "bench.log",
             "pytest-triton.log", "pytest-triton.xml", "verify-triton.log", "gate-triton.log", "gate-triton.md",
             "profile.log", "bench/bench.json", "bench/bench.md", "sweep/bench.json", "sweep/bench.md",
             "bench-fp8/bench.json", "verify-triton/report.json", "verify-triton/report.md",
             "verify-triton/cases/a/b.json", "bench-compiled/bench.json", "verify-inductor/report.json"]
    for i, n in enumerate(names):
        (tmp_path / n).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / n).write_text(f"{n} {i}\n")
    proc = subprocess.run([sys.executable, str(PACK), str(tmp_path)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    packed = _assert_packed(tmp_path)
    assert packed == set(names)  # nothing lost: every file, its path kept
    with tarfile.open(tmp_path / "results.tar.gz") as tar:
        assert tar.extractfile("verify-triton/cases/a/b.json").read().decode() == "verify-triton/cases/a/b.json 19\n"
    assert (tmp_path / "bench.json").read_text() == "bench/bench.json 12\n"  # lifted to the top
    assert (tmp_path / "sweep.json").read_text() == "sweep/bench.json 14\n"


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="CUDA present: the steps would run")
def test_without_gpu_the_required_steps_fail(tmp_path):
    proc = _run(tmp_path, seconds=20)  # no time for any step: each is recorded, none silently passes
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "summary.json").read_text())
    steps = {s["step"]: s for s in doc["steps"]}
    assert doc["failed"] and steps["cuda"]["status"] == "fail"
    for name in REQUIRED:
        assert steps[name]["status"] == "skip" and "(required)" in steps[name]["note"], steps[name]
    assert steps["verify-inductor"]["status"] == "skip"
    assert (tmp_path / "env.txt").exists() and "FAILED" in (tmp_path / "summary.md").read_text()
    assert "nvidia-smi.txt" in _assert_packed(tmp_path)


def test_a_dependency_that_does_not_import_stops_the_run_in_one_line(tmp_path):
    # the device's image lacks some runtime dependencies (ci/gpu-wheels carries them): a run
    # without them must say which at once, not fail later inside a step
    shadow = tmp_path / "shadow"
    shadow.mkdir()
    (shadow / "jsonschema.py").write_text("raise ImportError('not on this machine')\n")
    out = tmp_path / "out"
    env = {**os.environ, "OUT": str(out), "PYTHONPATH": str(shadow), "GPU_CHECK_SITE": str(tmp_path / "site")}
    env.pop("TRITON_INTERPRET", None)
    proc = subprocess.run(["bash", str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "gpu-check: cannot import jsonschema" in proc.stdout
    doc = json.loads((out / "summary.json").read_text())
    steps = {s["step"]: s for s in doc["steps"]}
    assert steps["deps"]["status"] == "fail" and "jsonschema" in steps["deps"]["note"]
    assert all(s["status"] == "skip" for n, s in steps.items() if n not in ("env", "deps", "cuda")), steps


def test_failure_log_is_written_as_each_failure_is_reported(tmp_path):
    # ci/gpu-check kills a step at its time limit, before pytest prints any traceback: with
    # LRKV_FAILURE_LOG each failure is written as it is reported, once, under xdist too
    t = tmp_path / "test_two.py"
    t.write_text("def test_ok():\n    pass\n\n\ndef test_bad():\n    assert 1 == 2, 'planted'\n")
    log = tmp_path / "failures.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_XDIST")}  # an outer xdist run's worker
    proc = subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.conftest", "-q", "-p", "no:cacheprovider",
                           "-n", "2", str(t)], cwd=ROOT, env={**env, "LRKV_FAILURE_LOG": str(log)},
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    text = log.read_text()
    assert text.count("==== ") == 1 and "test_bad (call)" in text and "planted" in text
