"""`lrkv verify --jobs N` (DESIGN §7 "Jobs"): the cases of one run in N job processes at once.

Serially, one process prepares every case's oracle and waits on each backend call; a GPU
machine's first Triton launches compile one shape at a time. N jobs each run `runner.run` on
the cases they pull from one queue (so a slow case never holds up a whole pre-assigned part),
each with its own isolation worker (isolation.py): a crash, os._exit or hang in a backend is
an ERROR record exactly as in a serial run, and Triton's on-disk compile cache is filled by N
processes at once. The records come back per case and are put in selection order, so the
report is the serial one record for record (timings aside). What differs from one process:

  * each job counts its own server-property share from the whole run's `shares` (given), so
    a case runs the properties it would run serially;
  * a backend that hangs is not called again by the job it hung in (serially: by the run);
  * a job process that dies (it is not where backends run; an oracle that exhausts memory)
    leaves an ERROR record per backend for the case it held, and a fresh job takes the rest;
  * nothing else: each job and its worker keep torch's intra-op threads as one process has them
    (OMP_NUM_THREADS, else the cores), since a reduction split over another number of threads
    rounds differently (inductor's CPU kernels do: its errors moved in the last bits with one
    thread a job). N jobs then run up to N × that many threads: OMP_NUM_THREADS=1 bounds them,
    and gives the same report with any --jobs.

Jobs start as the isolation worker does (forked by a server that imported torch once, else
spawned), without the harness's __main__ (a user's script is not run again), and take the
harness's environment, import path and directory.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import sys
from collections.abc import Callable

from .isolation import _context, _sigint_ignored, _without_main, dumps

POLL_S = 1.0  # how often the harness looks for a dead job while no message arrives
# by default, a job per this many cases at most: each job starts a worker server of its own (a
# torch import) and traces inductor's kernels again, which a few sub-second cases do not pay back
# (docs/status.md: on 2 shared cores two jobs were slower than one on the default grid)
DEFAULT_CASES_PER_JOB = 16
# by default, no second job below this many cores: on 2 cores each job's and its worker's torch
# threads spin against the others' (the default grid 3.5x slower with --jobs 2 on an idle 2-core
# machine, 1.46x under load: ci/logs/jobs-idle-3e87c5e.log, jobs-bench-cf20b6b.log)
MIN_CORES_FOR_JOBS = 4


def usable_jobs(requested: int | None, cases: int, backends, isolation: str) -> tuple[int, str]:
    """(jobs, why fewer than asked): at most one per case; by default the machine's cores, at
    most one per DEFAULT_CASES_PER_JOB cases, and one below MIN_CORES_FOR_JOBS cores; one where a backend cannot travel to a job
    (defined in __main__, not picklable, or running its own processes, as the tp level does)
    or calls run in-process on purpose."""
    if requested is None:
        cores = os.cpu_count() or 1
        requested = min(cores, cases // DEFAULT_CASES_PER_JOB) if cores >= MIN_CORES_FOR_JOBS else 1
    jobs = max(1, min(requested, cases))
    if jobs == 1:
        return 1, ""
    if isolation == "inprocess":
        return 1, "--in-process runs every call in this process"
    for label, b in backends:
        why = ""
        if getattr(b, "isolation", "process") == "inprocess":
            why = "it runs its own processes"
        elif type(b).__module__ == "__main__":
            why = "its class is defined in __main__"
        else:
            try:
                dumps(b)
            except Exception as e:  # noqa: BLE001 — any pickling failure keeps the run in one job
                why = f"it cannot be pickled ({type(e).__name__})"
        if why:
            return 1, f"backend {label!r} cannot be sent to a job process: {why}"
    return jobs, ""


def _stop_job(*_) -> None:
    """SIGTERM in a job (the harness was interrupted): kill its worker, then leave at once.

    Not sys.exit: the SystemExit would land inside the backend call it is waiting on and be
    recorded as that call's error, the job would go on to its next case, and its worker (busy,
    or hung) would outlive the run holding the terminal's pipes; nor atexit's polite stop, which
    waits for that call. os._exit also leaves the queues' feeder threads unflushed: the harness
    has stopped reading (a flush could fail with a broken pipe)."""
    import multiprocessing as mp

    for child in mp.active_children():  # the isolation worker(s) this job started
        child.kill()
    os._exit(143)


def _job(slot: int, blobs: list[tuple[str, bytes]], policy, cases, shares: dict, twins: bool, properties: bool,
         here: tuple, tasks, results) -> None:
    """A job process: run the cases pulled from `tasks` (indices into `cases`) until None."""
    import pickle

    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the harness's to handle
    signal.signal(signal.SIGTERM, _stop_job)
    env, path, cwd = here  # the harness's now, not the server's it was forked from (as isolation's "load")
    os.environ.clear()
    os.environ.update(env)
    sys.path[:] = path
    os.chdir(cwd)
    from .runner import run

    backends = [(label, pickle.loads(blob)) for label, blob in blobs]
    held: list[int] = []

    def pull():
        for index in iter(tasks.get, None):
            held.append(index)
            results.put((slot, "start", index, None))
            yield cases[index]

    def on_case(case, recs):
        results.put((slot, "case", held[-1], recs))

    notes: list[str] = []
    run(pull(), backends, policy, records=[], twins=twins, notes=notes, properties=properties, shares=shares,
        on_case=on_case, on_step=lambda what: results.put((slot, "step", None, what)))
    results.put((slot, "done", None, notes))


def run_jobs(cases, backends, policy, jobs: int, *, shares: dict, twins: bool = True, properties: bool = True,
             on_step: Callable[[str], None] | None = None, records: list[dict] | None = None,
             notes: list[str] | None = None) -> list[dict]:
    """runner.run's records for `cases` (in order), made by `jobs` job processes (see the module
    docstring). records: filled as cases finish (in finishing order; an interrupted run keeps
    them), then put in selection order."""
    import multiprocessing as mp

    from .runner import error_record

    cases = list(cases)
    records = [] if records is None else records
    ctx = _context()  # forked from the server that already imported torch: a job starts in well under a second
    tasks, results = ctx.Queue(), ctx.Queue()
    for i in range(len(cases)):
        tasks.put(i)
    blobs = [(label, dumps(b)) for label, b in backends]
    procs: dict[int, object] = {}
    started: dict[int, int] = {}  # slot -> cases it started (a job that dies before one is not replaced)
    by_case: dict[int, list[dict]] = {}
    holding: dict[int, int] = {}  # slot -> the case index it is running
    job_notes: list[str] = []
    slots = iter(range(1 << 30))

    def start() -> None:
        slot = next(slots)
        p = ctx.Process(target=_job, name=f"lrkv-verify-job-{slot}", daemon=False,
                        args=(slot, blobs, policy, cases, shares, twins, properties,
                              (dict(os.environ), list(sys.path), os.getcwd()), tasks, results))
        server = ctx.get_start_method() == "forkserver"
        if server:
            from multiprocessing import forkserver

            with _without_main(), _sigint_ignored():
                forkserver.ensure_running()
        with _without_main(), (contextlib.nullcontext() if server else _sigint_ignored()):
            p.start()
        procs[slot], started[slot] = p, 0

    def lost(index: int, why: str) -> None:
        recs = [error_record(cases[index], b, label, why) for label, b in backends]
        by_case[index] = recs
        records.extend(recs)

    for _ in range(jobs):
        tasks.put(None)
        start()
    try:
        while procs:  # until every job said done (its notes) or died
            try:
                slot, kind, index, payload = results.get(timeout=POLL_S)
            except queue.Empty:
                for slot, p in list(procs.items()):
                    if p.is_alive():
                        continue
                    p.join()
                    del procs[slot]
                    if slot in holding:
                        from .isolation import describe_exit

                        lost(holding.pop(slot), f"crashed: the job process died running this case "
                                                f"({describe_exit(p.exitcode)})")
                    if started[slot] and len(by_case) < len(cases):
                        tasks.put(None)
                        start()
                continue
            if kind == "start":
                holding[slot] = index
                started[slot] += 1
            elif kind == "case":
                holding.pop(slot, None)
                by_case[index] = payload
                records.extend(payload)
            elif kind == "step" and on_step is not None:
                on_step(payload)
            elif kind == "done":
                job_notes.extend(payload)
                procs.pop(slot).join()
        for index in range(len(cases)):
            if index not in by_case:  # every job died before reaching it: never a lost case
                lost(index, "not run: every job process died before this case (see the ERROR records before it)")
    finally:
        for p in procs.values():
            if p.is_alive():
                p.terminate()
        for p in procs.values():
            p.join(10)
            if p.is_alive():
                p.kill()
                p.join()
    if notes is not None:
        notes.extend(dict.fromkeys(job_notes))
    records[:] = [r for i in range(len(cases)) for r in by_case[i]]
    return records
