"""`lrkv verify --jobs N` (lrkv/verify/jobs.py): no case lost, and how many jobs run (the report is
the serial one: test_merge.py compares them on the selection its shards split)."""

from __future__ import annotations

import pytest

from lrkv.verify.backend_registry import get_backend
from lrkv.verify.case import Case
from lrkv.verify.jobs import DEFAULT_CASES_PER_JOB, run_jobs, usable_jobs
from lrkv.verify.selection import Selection
from lrkv.verify.server_properties import plan
from lrkv.verify.tolerance import load_policy


PLANTED = '''
import os
from lrkv.verify.tiled import TiledBackend


class ExitsOn24(TiledBackend):
    """os._exit in the worker on the cases of cache length 24 (a crash mid-run)."""
    name = "exits-on-24"
    def decode_attention(self, q, shared_k, *args, **kw):
        if shared_k.shape[1] == 24:
            os._exit(3)
        return super().decode_attention(q, shared_k, *args, **kw)


def _die():
    os._exit(7)


class KillsItsJob(TiledBackend):
    """Unpickling it ends the process: every job process dies before its first case."""
    name = "kills-its-job"
    def __reduce__(self):
        return (_die, ())
'''


def test_a_crash_under_jobs_is_an_error_record_and_no_case_is_lost(tmp_path, monkeypatch):
    (tmp_path / "planted_jobs.py").write_text(PLANTED)
    monkeypatch.syspath_prepend(str(tmp_path))
    cases = [c for c in Selection(grid="quick", level=("kernel",)).resolve() if c.dtype != "float64"][:3]
    assert sum(c.t_max == 24 for c in cases) >= 1
    backends = [("planted_jobs:ExitsOn24", get_backend("planted_jobs:ExitsOn24")), ("tiled", get_backend("tiled"))]
    recs = run_jobs(cases, backends, load_policy(), 2, shares=plan(cases), properties=False)
    assert [(r["id"], r["backend"]) for r in recs if "twin" not in r] == \
        [(c.id, b) for c in cases for b in ("exits-on-24", "tiled")]
    crashed = [r for r in recs if r["backend"] == "exits-on-24" and r["case"]["t_max"] == 24]
    assert crashed and all(r["status"] == "error" and "exited with code 3" in r["reason"] for r in crashed)
    assert all(r["status"] == "pass" for r in recs if r["backend"] == "tiled")


def test_jobs_that_all_die_leave_an_error_record_per_case(tmp_path, monkeypatch):
    (tmp_path / "planted_jobs.py").write_text(PLANTED)
    monkeypatch.syspath_prepend(str(tmp_path))
    cases = Selection(grid="quick", level=("kernel",)).resolve()[:3]
    recs = run_jobs(cases, [("planted_jobs:KillsItsJob", get_backend("planted_jobs:KillsItsJob"))], load_policy(), 2,
                    shares={}, properties=False)
    assert [r["id"] for r in recs] == [c.id for c in cases]
    assert all(r["status"] == "error" and "every job process died" in r["reason"] for r in recs)


@pytest.mark.parametrize("requested, cases, isolation, want", [
    (None, 1000, "process", None),  # the machine's cores
    (None, 2 * DEFAULT_CASES_PER_JOB - 1, "process", 1),  # a small run stays in one job
    (8, 3, "process", 3),  # at most one per case
    (4, 100, "inprocess", 1),  # --in-process: a debugger's run
])
def test_how_many_jobs(requested, cases, isolation, want, monkeypatch):
    monkeypatch.setattr("os.cpu_count", lambda: 16)
    jobs, _ = usable_jobs(requested, cases, [("tiled", get_backend("tiled"))], isolation)
    assert jobs == (16 if want is None else want)


@pytest.mark.parametrize("cores, want", [(2, 1), (3, 1), (4, 4)])
def test_no_second_job_by_default_below_four_cores(cores, want, monkeypatch):
    """Two jobs on two cores ran the default grid 3.5x slower (their torch threads spin against
    each other): by default a small machine keeps one job; asked for, it gets two."""
    monkeypatch.setattr("os.cpu_count", lambda: cores)
    tiled = [("tiled", get_backend("tiled"))]
    assert usable_jobs(None, 1000, tiled, "process")[0] == want
    assert usable_jobs(2, 1000, tiled, "process")[0] == 2


def test_a_backend_that_cannot_travel_keeps_the_run_in_one_job():
    import threading

    b = get_backend("tiled")
    b.lock = threading.Lock()  # not picklable
    jobs, why = usable_jobs(4, 100, [("tiled", b)], "process")
    assert jobs == 1 and "cannot be pickled" in why
