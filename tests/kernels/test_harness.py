"""The `triton` backend through the verification harness (lrkv.verify): the harness's quick
grid passes, and every kernel mutant fails at least one case of the harness's mutant grid —
judged by the harness's own tolerance rule under the packaged policy, as the gate judges."""

from __future__ import annotations

import pytest

from lrkv.kernels import runtime
from lrkv.kernels.kernel_mutants import KERNEL_MUTANTS
from lrkv.kernels.testing import policy
from lrkv.kernels.triton_backend import TritonBackend
from lrkv.verify import grids, runner

pytestmark = pytest.mark.equivalence


def test_quick_grid_passes():
    # the rule only (the server properties: tests/verify/test_server_properties.py, .ci/run's Triton grid)
    recs = runner.run(grids.quick_grid(), [("triton", TritonBackend())], policy(), properties=False)
    assert recs, "the quick grid produced no records for the triton backend"
    bad = [(r["id"], r["status"], r["reason"]) for r in recs if r["status"] not in ("pass", "xfail")]
    assert not bad, bad


@pytest.mark.parametrize("name", KERNEL_MUTANTS)
def test_kernel_mutant_fails_the_mutant_grid(name):
    # the grid's long (T > 4096) case costs seconds per mutant in the interpreter and is
    # not needed to expose these bugs; natively (ci/gpu-check) the whole grid runs
    cases = grids.mutant_grid()
    if runtime.is_interpreted():
        cases = [c for c in cases if c.t_max <= 1024] or cases
    recs = runner.run(cases, [(f"triton:{name}", TritonBackend(mutant=name))], policy(), properties=False)
    assert any(r["status"] == "fail" for r in recs), [(r["id"], r["status"]) for r in recs]
    assert not any(r["status"] == "error" for r in recs), [r["reason"] for r in recs if r["status"] == "error"]
