"""The benchmark's code path, on CPU: `python3 -m lrkv.kernels.bench --smoke` runs tiny sizes
through the interpreter and writes its JSON and Markdown (timings meaningless). The real
numbers come from ci/gpu-check on a GPU."""

from __future__ import annotations

import json

import pytest
import torch

pytest.importorskip("triton")

from lrkv.kernels import bench  # noqa: E402

pytestmark = [pytest.mark.triton]


@pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: ci/gpu-check runs the real benchmark")
def test_bench_smoke_writes_reports(tmp_path):
    rc = bench.main(["--out", str(tmp_path), "--smoke", "--shapes", "lrkv-H18-dh128-r55", "--no-sweep"])
    assert rc == 0
    result = json.loads((tmp_path / "kernel_bench.json").read_text())
    kinds = [r["kind"] for r in result["rows"]]
    assert kinds == ["lrkv", "rope-exact"] and not any(r["error"] for r in result["rows"]), result["rows"]
    row = result["rows"][0]
    assert row["bytes_unique"] > 0 and row["sdpa_ms"] is not None and row["launch"]["num_splits"] >= 1
    assert "| lrkv-H18-dh128-r55 |" in (tmp_path / "kernel_bench.md").read_text()
