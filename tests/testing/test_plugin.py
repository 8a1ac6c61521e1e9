"""The pytest plugin on a backend given by --lrkv-backend, in a directory with no tests of its
own (as in a user's repository): it adds the suite, says NO on a planted bug with the replay,
and fails — never skips — a backend that cannot be loaded."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from lrkv.testing import grid_cases

REPO = Path(__file__).resolve().parents[2]


def _pytest(tmp_path, *args) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, (str(REPO), os.environ.get("PYTHONPATH")))),
               HYPOTHESIS_PROFILE="ci", OMP_NUM_THREADS="1")
    cmd = [sys.executable, "-m", "pytest", "-p", "lrkv.testing.plugin", "-p", "no:cacheprovider", "-q",
           "--rootdir", str(tmp_path), "-m", "equivalence", *args]
    return subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)


def _quick(ref: str, level: str = "", grid: str = "quick") -> tuple[int, int]:
    """(cases run, cases skipped) of a grid (the quick one) for a backend at a level (every level:
    ''), as the plugin parametrizes them: a case declined for its dtype or fp8 cache is a skip
    followed by its twin."""
    from lrkv.testing import cases_for

    params = [p for p in cases_for(ref, grid) if p.id.startswith(f"{level}:") or not level]
    return sum(not p.marks for p in params), sum(bool(p.marks) for p in params)


def test_plugin_runs_the_grid_and_says_no_with_the_replay(tmp_path):
    ok = _pytest(tmp_path, "--lrkv-backend", "examples.my_backend:backend", "-k", "grid_case or permutation")
    assert ok.returncode == 0, ok.stdout[-3000:]
    # the kernel and paged cases (a float64 one at its float32 twin) and the permutation property;
    # the cases not claimed (the float64 ones, the layer levels, extend) are skips
    ran, skipped = _quick("examples.my_backend:backend")
    assert f"{ran + 1} passed, {skipped} skipped" in ok.stdout
    bad = _pytest(tmp_path, "--lrkv-backend", "tests.testing.test_api:SCALED", "-k", "grid_case")
    assert bad.returncode == 1, bad.stdout[-3000:]
    counts = re.search(r"(\d+) failed, (\d+) passed, (\d+) skipped", bad.stdout)  # twins included
    assert counts and int(counts[1]) + int(counts[2]) == ran and int(counts[3]) == skipped, bad.stdout[-500:]
    assert "replay: lrkv verify --backend tests.testing.test_api:SCALED --case '" in bad.stdout


def test_a_backend_that_cannot_load_fails(tmp_path):
    r = _pytest(tmp_path, "--lrkv-backend", "no_such_module_xyz:backend", "-k", "grid_case or garbage")
    assert r.returncode == 1, r.stdout[-3000:]
    assert "cannot load" in r.stdout and "no_such_module_xyz" in r.stdout


NO_CUDA = '''
from examples.my_backend import SplitKDecode


class NoCuda(SplitKDecode):
    name = "no-cuda"

    def available(self):
        return False, "no CUDA"


class Declines(SplitKDecode):
    name = "declines"

    def supports(self, case):
        return False, "only on Tuesdays"


backend = NoCuda()
declines = Declines()
'''


def test_a_session_that_verified_nothing_fails_naming_why(tmp_path):
    """An unavailable backend used to give "15 skipped" and exit 0: green on nothing."""
    (tmp_path / "nocuda_backend.py").write_text(NO_CUDA)
    r = _pytest(tmp_path, "--lrkv-backend", "nocuda_backend:backend")
    assert r.returncode == 1, r.stdout[-3000:]
    assert "passed" not in r.stdout and "failed" not in r.stdout.split("lrkv: FAILED")[0]
    assert "lrkv: nocuda_backend:backend: 0 cases verified" in r.stdout
    assert "lrkv: FAILED: nocuda_backend:backend verified no case: unavailable here: no CUDA" in r.stdout
    ok = _pytest(tmp_path, "--lrkv-backend", "nocuda_backend:backend", "--lrkv-allow-empty")
    assert ok.returncode == 0, ok.stdout[-3000:]
    assert "accepted by --lrkv-allow-empty" in ok.stdout


def test_cases_declined_by_supports_are_skips_and_not_a_pass(tmp_path):
    (tmp_path / "nocuda_backend.py").write_text(NO_CUDA)
    r = _pytest(tmp_path, "--lrkv-backend", "nocuda_backend:declines", "-k", "grid_case")
    assert r.returncode == 1, r.stdout[-3000:]
    n = len(grid_cases("quick"))  # no twin: supports() declines every variant
    assert f"{n} skipped" in r.stdout and "passed" not in r.stdout
    assert f"verified no case: {n} skipped" in r.stdout and "only on Tuesdays" in r.stdout


LEVELS = '''
from examples.my_backend import SplitKDecode
from examples.my_paged_backend import PagedDecode


class Both(SplitKDecode):
    name = "both"
    levels = frozenset({"kernel", "kernel-paged"})
    cache_formats = ()  # the paged example reads no fp8 cache
    paged_decode_attention = PagedDecode.paged_decode_attention


class DeclinesPaged(Both):
    name = "declines-paged"

    def supports(self, case):
        return case.level != "kernel-paged", "pages not yet"


class WrongPaged(Both):
    name = "wrong-paged"

    def paged_decode_attention(self, *args, **kw):
        out, lse = Both.paged_decode_attention(self, *args, **kw)
        return out * 2, lse


both = Both()
declines_paged = DeclinesPaged()
wrong_paged = WrongPaged()
'''


def test_every_declared_level_must_verify_a_case(tmp_path, monkeypatch):
    """The default (quick) grid reaches every level a backend declares; a declared level whose
    every case was declined fails the session, naming the level, though the kernel level passed."""
    (tmp_path / "levels_backend.py").write_text(LEVELS)
    monkeypatch.syspath_prepend(str(tmp_path))
    kernel, paged = _quick("levels_backend:both", "kernel")[0], _quick("levels_backend:both", "kernel-paged")[0]
    ok = _pytest(tmp_path, "--lrkv-backend", "levels_backend:both", "-k", "grid_case")
    assert ok.returncode == 0, ok.stdout[-3000:]
    assert f"cases verified — kernel {kernel} (features " in ok.stdout
    assert f", kernel-paged {paged} (features " in ok.stdout
    # the verdicts below on the mutants grid (10 cases, kernel and paged ones among them): the same code, less time
    small = ("-k", "grid_case", "--lrkv-grid", "mutants")
    kernel, paged = (_quick("levels_backend:both", level, "mutants")[0] for level in ("kernel", "kernel-paged"))
    bad = _pytest(tmp_path, "--lrkv-backend", "levels_backend:declines_paged", *small)
    assert bad.returncode == 1, bad.stdout[-3000:]
    assert "failed" not in bad.stdout.split("lrkv: FAILED")[0]  # every test passed or skipped
    assert re.search("lrkv: FAILED: levels_backend:declines_paged verified no case at a level it declares: "
                     r"level kernel-paged: \d+ skipped", bad.stdout) and "pages not yet" in bad.stdout
    allowed = _pytest(tmp_path, "--lrkv-backend", "levels_backend:declines_paged", *small, "--lrkv-allow-empty")
    assert allowed.returncode == 0 and "accepted by --lrkv-allow-empty" in allowed.stdout
    # a level whose cases ran and failed says so (it once read "no case of it ran")
    wrong = _pytest(tmp_path, "--lrkv-backend", "levels_backend:wrong_paged", *small)
    assert wrong.returncode == 1 and f"{paged} failed, {kernel} passed" in wrong.stdout, wrong.stdout[-3000:]
    assert (f"verified no case at a level it declares: level kernel-paged: {paged} ran and failed"
            in wrong.stdout), wrong.stdout[-3000:]
    # under pytest-xdist the workers run the tests and the controller judges: the same verdict
    parallel = _pytest(tmp_path, "--lrkv-backend", "levels_backend:declines_paged", *small, "-n", "2")
    assert parallel.returncode == 1, parallel.stdout[-3000:]
    assert re.search(r"verified no case at a level it declares: level kernel-paged: \d+ skipped", parallel.stdout)


def test_the_summary_counts_the_verified_cases(tmp_path):
    r = _pytest(tmp_path, "--lrkv-backend", "examples.my_backend:backend", "-k", "grid_case")
    assert r.returncode == 0, r.stdout[-3000:]
    ran, skipped = _quick("examples.my_backend:backend")
    kernel = _quick("examples.my_backend:backend", "kernel")[0]
    assert f"{ran} passed, {skipped} skipped" in r.stdout
    assert f"lrkv: examples.my_backend:backend: {ran} cases verified — kernel {kernel} (features " in r.stdout
    deselected = _pytest(tmp_path, "--lrkv-backend", "examples.my_backend:backend", "-k", "no_such_test")
    assert deselected.returncode != 0 and "verified no case" in deselected.stdout


CRASHING = '''
import ctypes
import time

from examples.my_backend import SplitKDecode


class Segfaults(SplitKDecode):
    name = "segfaults"

    def decode_attention(self, *args, **kw):
        ctypes.string_at(0)


class Hangs(SplitKDecode):
    name = "hangs"

    def decode_attention(self, *args, **kw):
        time.sleep(600)


segfaults = Segfaults()
hangs = Hangs()
'''


def test_a_crashing_or_hanging_backend_fails_its_tests_not_the_session(tmp_path):
    """A segfault used to kill pytest (no output, no summary); a hang in a property hung it
    forever. In lrkv's worker process each is a failing test naming the signal or the limit."""
    (tmp_path / "crashing_backend.py").write_text(CRASHING)
    (tmp_path / "lrkv.toml").write_text("[policy.defaults]\ncase_timeout = 3.0\n")
    r = _pytest(tmp_path, "--lrkv-backend", "crashing_backend:segfaults", "-k", "grid_case or permutation")
    assert r.returncode == 1, r.stdout[-3000:]
    assert "SIGSEGV" in r.stdout and " failed" in r.stdout and "lrkv: crashing_backend:segfaults" in r.stdout
    h = _pytest(tmp_path, "--lrkv-backend", "crashing_backend:hangs", "-k", "permutation")
    assert h.returncode == 1, h.stdout[-3000:]
    assert "no result within the per-case time limit of 3 s" in h.stdout


# the example backend with a server bug planted: right answers, then its cache written in place
# (tests/testing/test_init.py plants the same class in an `lrkv init` project)
WRITES_CACHE = '''

class WritesCache(SplitKDecode):
    name = "writes-cache"

    def decode_attention(self, q, shared_k, *args, **kw):
        result = super().decode_attention(q, shared_k, *args, **kw)
        shared_k.neg_()  # the server's cache, corrupted for the next step
        return result


writes_cache = WritesCache()
'''


def test_server_properties_pass_on_the_examples_and_fail_on_a_kernel_that_writes_its_cache(tmp_path):
    """test_server_properties used to hand the check the plugin's Target, not the backend: a
    TypeError on every backend, correct or not."""
    import re

    (tmp_path / "writes_cache_backend.py").write_text("from examples.my_backend import SplitKDecode\n" + WRITES_CACHE)
    examples = [f"examples.{m}:backend" for m in ("my_backend", "my_paged_backend", "my_extend_backend")]
    args = [a for label in [*examples, "writes_cache_backend:writes_cache"] for a in ("--lrkv-backend", label)]
    r = _pytest(tmp_path, *args, "-k", "server_properties", "-rA")
    assert r.returncode == 1, r.stdout[-3000:]
    assert "1 failed, 3 passed" in r.stdout, r.stdout[-3000:]
    for label in examples:
        assert re.search(rf"PASSED \S*suite\.py::test_server_properties\[{re.escape(label)}\]", r.stdout), label
    assert re.search(r"FAILED \S*suite\.py::test_server_properties\[writes_cache_backend:writes_cache\]", r.stdout)
    assert "PROPERTY inputs_untouched writes-cache" in r.stdout and "wrote into its inputs: shared_k" in r.stdout


class _Config:
    """What the plugin's summary reads of a pytest config: its options and its tally."""

    def __init__(self, tally, backends):
        self._lrkv_tally, self._opts = tally, {"lrkv_backend": backends, "collectonly": False}

    def getoption(self, name, default=None):
        return self._opts.get(name, default)


def _tally_of(label, verified_levels, spanning, failed_levels, skipped_levels=()):
    """A session's tally: verified cases per case level, checks of no level, grid nodes that failed."""
    from collections import Counter

    from lrkv.testing.tally import Tally

    t = Tally()
    t.declared[label] = frozenset({"kernel", "kernel-paged"})
    t.grid_labels.add(label)
    for level, n in verified_levels.items():
        for _ in range(n):
            t.verified[label] += 1
            t.levels.setdefault(label, Counter())[level] += 1
            t.features.setdefault(label, {}).setdefault(level, set())
    t.verified[label] += spanning
    for i, level in enumerate([*failed_levels, *skipped_levels]):
        node = f"suite.py::test_grid_case[{label}-{level}-{i}]"
        t.labels[node], t.grid_levels[node] = label, level
        if i < len(failed_levels):
            t.failed.add(node)
        else:
            t.skipped(label, "pages not yet", level)
    return t


def test_the_summary_adds_up_and_says_which_cases_ran_and_failed():
    """"113 cases verified — kernel 110 …, kernel-paged 2 …" left the server properties out of the
    parts; a level whose 2 cases ran and failed was said to have had "no case of it ran"."""
    from lrkv.testing.plugin import _empty, _levels_line

    label = "mine:backend"
    t = _tally_of(label, {"kernel": 110, "kernel-paged": 2}, spanning=1, failed_levels=())
    line = _levels_line(t, label)
    assert t.verified[label] == 113 and line.endswith(", server properties 1")
    assert sum(int(n) for n in re.findall(r"(?:^ — |, )[\w -]+? (\d+)", line)) == 113
    t = _tally_of(label, {"kernel": 5}, spanning=0, failed_levels=("kernel-paged",) * 2)
    assert _empty(_Config(t, [label])) == {label: "level kernel-paged: 2 ran and failed"}
    t = _tally_of(label, {"kernel": 5}, spanning=0, failed_levels=("kernel-paged",),
                     skipped_levels=("kernel-paged",))
    assert _empty(_Config(t, [label]))[label] == "level kernel-paged: 1 ran and failed; 1 skipped: pages not yet (1)"
    t = _tally_of(label, {"kernel": 5}, spanning=0, failed_levels=())
    assert _empty(_Config(t, [label]))[label] == "level kernel-paged: no case of it ran (deselected)"
    t = _tally_of(label, {}, spanning=0, failed_levels=("kernel", "kernel-paged"))
    assert _empty(_Config(t, [label]))[label] == "2 ran and failed"
    back = type(t)()
    back.merge(t.export())  # a pytest-xdist worker's failures reach its controller
    assert back.failures(label) == 2 and back.failures(label, "kernel") == 1
