"""ci/gpu-check on a machine without a GPU: its plan lists every step with a time share and
exits 0; a real run records why each step could not run and exits 1, because the required
steps (native Triton tests, verify, gate) did not pass. The GPU run itself is `ci/gpu-check`
on a GPU (docs/kernels.md)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "ci" / "gpu-check"

pytestmark = pytest.mark.skipif(shutil.which("bash") is None or shutil.which("timeout") is None,
                                reason="ci/gpu-check is a bash script using coreutils' timeout")


def _run(tmp_path, *args, seconds=None):
    env = {**os.environ, "OUT": str(tmp_path)}
    env.pop("TRITON_INTERPRET", None)
    if seconds is not None:
        env["GPU_CHECK_SECONDS"] = str(seconds)
    return subprocess.run(["bash", str(SCRIPT), *args], env=env, capture_output=True, text=True, timeout=300)


def test_plan_lists_every_step(tmp_path):
    proc = _run(tmp_path, "--plan")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "summary.json").read_text())
    assert doc["plan"] and not doc["failed"]
    steps = {s["step"]: s for s in doc["steps"]}
    assert list(steps) == ["env", "sweep", "sweep-per-head", "bench", "bench-compiled", "pytest-triton", "verify-triton",
                           "gate-triton", "verify-inductor", "gate-inductor", "pytest-gpu-other"]
    assert all(s["status"] == "planned" for n, s in steps.items() if n != "env")
    assert "--sweep" in steps["sweep"]["note"] and "--check-targets" in steps["bench"]["note"]
    assert "private=wide" in steps["sweep"]["note"] and "private=per_head" in steps["sweep-per-head"]["note"]
    for word in ("gqa-eq", "128K", "1,8,16", "2.5B,6.3B", "triton-paged", "triton-rope", "sdpa"):
        assert word in steps["bench"]["note"], word
    assert "--backend inductor" in steps["bench-compiled"]["note"]
    gate = steps["gate-triton"]["note"]
    assert "ci/baseline-triton.json" in gate and "--subset" not in gate  # gated on the whole baseline
    assert sum(int(steps[n]["seconds"]) for n in steps
               if n not in ("verify-inductor", "gate-inductor", "pytest-gpu-other")) <= 465


@pytest.mark.skipif(__import__("torch").cuda.is_available(), reason="CUDA present: the steps would run")
def test_without_gpu_the_required_steps_fail(tmp_path):
    proc = _run(tmp_path, seconds=20)  # no time for any step: each is recorded, none silently passes
    assert proc.returncode == 1, proc.stdout + proc.stderr
    doc = json.loads((tmp_path / "summary.json").read_text())
    steps = {s["step"]: s for s in doc["steps"]}
    assert doc["failed"] and steps["cuda"]["status"] == "fail"
    for name in ("pytest-triton", "verify-triton", "gate-triton"):
        assert steps[name]["status"] == "skip" and "(required)" in steps[name]["note"], steps[name]
    assert steps["verify-inductor"]["status"] == "skip"
    assert (tmp_path / "env.txt").exists() and "FAILED" in (tmp_path / "summary.md").read_text()
