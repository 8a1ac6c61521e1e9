"""`--tp` faults: a backend that hangs on the ranks is an ERROR within its case_timeout, its
later cases are not run while other backends' still are, and no process outlives `lrkv
verify` — not after a deadline, nor after SIGTERM, SIGINT or SIGKILL of it.

Each test spawns ranks (seconds each): every one stays under ~30 s on two loaded cores.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from lrkv.cli import main
from lrkv.distributed import runner
from lrkv.distributed.runner import GRACE_S, TimedOut, TPJob, run_jobs, sweep_stale_spawn_dirs
from lrkv.spec import AttentionSpec as S
from tests.test_helpers import tp_backends

ROOT = Path(__file__).resolve().parents[2]
LRKV = S.lrkv(4, 8, 2)
HANGING = "tests.test_helpers.tp_backends:hanging_decode"
LIMIT = 2.0  # the policy's case_timeout in these tests
SLACK = 6.0  # past the deadline: stopping the ranks (GRACE_S at most), the oracle of 3 cases, the report


def _policy(tmp_path: Path, seconds: float) -> Path:
    p = tmp_path / "policy.toml"
    p.write_text(f"[defaults]\ncase_timeout = {seconds}\n")
    return p


def _stamps(path: Path) -> list[tuple[float, int]]:
    """(time, pid) of each rank's decode of HangingDecode."""
    lines = path.read_text().splitlines() if path.exists() else []
    return [(float(t), int(pid)) for t, pid in (line.split() for line in lines)]


def _running(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture()
def spawns(monkeypatch) -> list[int]:
    """The number of jobs of each spawn run_jobs starts."""
    seen: list[int] = []
    real = runner._spawn

    def counted(jobs, *args):
        seen.append(len(jobs))
        return real(jobs, *args)

    monkeypatch.setattr(runner, "_spawn", counted)
    return seen


# ----------------------------------------------------------------------------- deadlines
def test_a_hanging_tp_case_is_an_error_within_its_case_timeout(tmp_path, monkeypatch, spawns):
    """It was a spawn-wide 100 s per job (300 s here), then the same again for each later case."""
    stamp = tmp_path / "stamp"
    monkeypatch.setattr(tp_backends.hanging_decode, "stamp", str(stamp))
    out = tmp_path / "out"
    code = main(["verify", "--tp", "2", "--backend", HANGING, "--filter", "float64", "--policy",
                 str(_policy(tmp_path, LIMIT)), "--out", str(out), "--no-progress"])
    ended = time.time()
    assert code == 1
    first, *rest = json.loads((out / "report.json").read_text())["records"]
    assert first["status"] == "error", first
    assert first["reason"].startswith(f"timeout: no result within the per-case time limit of {LIMIT:g} s "
                                      "(policy case_timeout)"), first["reason"]
    assert len(rest) == 2 and all(r["status"] == "error" and "hung earlier" in r["reason"] for r in rest), rest
    began = _stamps(stamp)
    assert len(began) == 2, began  # one decode on each rank: the two later cases never ran
    assert ended - min(t for t, _ in began) < LIMIT + SLACK  # the deadline ended it, not a spawn-wide limit
    assert spawns == [3]
    assert not any(_running(pid) for _, pid in began)  # the hung ranks were stopped, not abandoned


def test_after_a_hang_the_backends_later_jobs_are_not_run_and_the_others_are(tmp_path, spawns):
    hang = tp_backends.HangingDecode(str(tmp_path / "stamp"))
    jobs = [TPJob(LRKV, backend=hang), TPJob(LRKV, seed=1), TPJob(LRKV, backend=hang, seed=2), TPJob(LRKV, seed=3)]
    out = run_jobs(jobs, 2, timeout_s=[LIMIT, 60, LIMIT, 60], pg_timeout_s=30)
    assert isinstance(out[0], TimedOut) and f"per-case time limit of {LIMIT:g} s" in out[0], out[0]
    assert "ranks [0, 1]; the ranks were killed" in out[0]
    assert out[2] == f"an earlier tp case of this backend hung ({jobs[0].label}); not run"
    assert not isinstance(out[2], TimedOut)  # never ran: no time limit of its own passed
    assert all(isinstance(o, list) and len(o) == 2 for o in (out[1], out[3])), out
    assert spawns == [4, 2]  # the reference's two jobs in a fresh spawn, the hung backend's not again
    began = _stamps(tmp_path / "stamp")
    assert len(began) == 2 and not any(_running(pid) for _, pid in began), began


def test_ranks_that_never_start_end_the_spawn_once(spawns):
    t0 = time.monotonic()
    out = run_jobs([TPJob(LRKV), TPJob(LRKV, backend=tp_backends.SlowToLoad())], 2, timeout_s=60, start_s=3)
    assert all(isinstance(o, str) and "the ranks did not start within 3 s" in o for o in out), out
    assert spawns == [2]  # a fresh spawn would unpickle the same backend again
    assert time.monotonic() - t0 < 3 + GRACE_S + 5


# ----------------------------------------------------------------------------- nothing left running
def _marked(mark: str) -> list[int]:
    """Live processes whose environment holds LRKV_TEST_TP_MARK=mark: the `lrkv verify` started
    below and every descendant (the forkserver, its ranks), wherever they were reparented."""
    needle = f"LRKV_TEST_TP_MARK={mark}".encode()
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if needle in (d / "environ").read_bytes().split(b"\0"):  # a zombie's reads empty
                    pids.append(int(d.name))
            except OSError:
                continue
    return pids


def _wait_for(predicate, seconds: float, step: float = 0.1) -> bool:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return predicate()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="finds processes through /proc")
@pytest.mark.parametrize("sig, code", [(signal.SIGTERM, -signal.SIGTERM), (signal.SIGINT, 130),
                                       (signal.SIGKILL, -signal.SIGKILL)], ids=["SIGTERM", "SIGINT", "SIGKILL"])
def test_killing_lrkv_verify_leaves_no_process(tmp_path, sig, code):
    """Killing `lrkv verify --tp 2` while a backend hung on its ranks left the forkserver and both
    ranks running (for ever): each rank held the forkserver's lifeline."""
    mark = f"{os.getpid()}-{sig.name}-{time.monotonic_ns()}"
    stamp = tmp_path / "stamp"
    env = {**os.environ, "LRKV_TEST_TP_MARK": mark, "LRKV_TEST_TP_STAMP": str(stamp),
           "TMPDIR": str(tmp_path),  # a killed run leaves its spawn's temporary directory behind
           "PYTHONPATH": os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)}
    # Python's SIGINT handler as in a terminal (a shell starts background jobs with SIGINT ignored)
    run = "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); " \
          "from lrkv.cli import main; sys.exit(main())"
    argv = [sys.executable, "-c", run, "verify", "--tp", "2", "--backend", HANGING, "--filter", "float64",
            "--policy", str(_policy(tmp_path, 300.0)), "--out", str(tmp_path / "out"), "--no-progress"]
    with open(tmp_path / "log", "w") as log:
        proc = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        assert _wait_for(lambda: len(_stamps(stamp)) == 2, 60), (tmp_path / "log").read_text()[-2000:]
        running = _marked(mark)
        assert proc.pid in running and len(running) >= 4, running  # lrkv, the forkserver, two ranks
        proc.send_signal(sig)
        assert proc.wait(30) == code, (tmp_path / "log").read_text()[-2000:]
        assert _wait_for(lambda: not _marked(mark), 10), [
            (pid, Path(f"/proc/{pid}/cmdline").read_bytes()[:120]) for pid in _marked(mark)]
        sweep_stale_spawn_dirs(tmp_path)  # what the next run does first: a killed run's directory goes
        assert not list(tmp_path.glob("lrkv-tp-*"))
    finally:
        if proc.poll() is None:  # a failed check must not leave its processes behind
            proc.kill()
        proc.wait()
        for pid in _marked(mark):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def test_stale_spawn_directories_are_swept_and_live_ones_kept(tmp_path):
    dead, live, other = (tmp_path / n for n in ("lrkv-tp-999999999-x", f"lrkv-tp-{os.getpid()}-y", "lrkv-tp-z"))
    for d in (dead, live, other):
        d.mkdir()
        (d / "0-0.pt").write_bytes(b"partial result")
    assert sweep_stale_spawn_dirs(tmp_path) == [dead]
    assert not dead.exists() and live.exists() and other.exists()
