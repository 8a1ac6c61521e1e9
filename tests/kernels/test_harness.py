"""The `triton` backend through the verification harness (lrkv.verify): the harness's quick
grid passes, and every kernel mutant fails at least one case of the harness's mutant grid —
judged by the harness's own tolerance rule, not this suite's copy of it."""

from __future__ import annotations

import pytest

runner = pytest.importorskip("lrkv.verify.runner")
grid = pytest.importorskip("lrkv.verify.grids")
tolerance = pytest.importorskip("lrkv.verify.tolerance")

from lrkv.kernels import runtime
from lrkv.kernels.triton_backend import TritonBackend, kernel_mutant_backends

pytestmark = pytest.mark.equivalence


def policy():
    return tolerance.Policy({}, {}, {})


def test_quick_grid_passes():
    recs = runner.run(grid.quick_grid(), [("triton", TritonBackend())], policy())
    assert recs, "the quick grid produced no records for the triton backend"
    bad = [(r["id"], r["status"], r["reason"]) for r in recs if r["status"] not in ("pass", "xfail")]
    assert not bad, bad


@pytest.mark.parametrize("name", list(kernel_mutant_backends()))
def test_kernel_mutant_fails_the_mutant_grid(name):
    backend = kernel_mutant_backends()[name]
    # the grid's long (T > 4096) case costs seconds per mutant in the interpreter and is
    # not needed to expose these bugs; natively (ci/gpu-check) the whole grid runs
    cases = grid.mutant_grid()
    if runtime.is_interpreted():
        cases = [c for c in cases if c.t_max <= 1024] or cases
    recs = runner.run(cases, [(f"triton:{name}", backend)], policy())
    assert any(r["status"] == "fail" for r in recs), [(r["id"], r["status"]) for r in recs]
    assert not any(r["status"] == "error" for r in recs), [r["reason"] for r in recs if r["status"] == "error"]
