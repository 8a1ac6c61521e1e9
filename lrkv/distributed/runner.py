"""Spawn P ranks on torch.distributed and decode token by token on each.

`run_jobs(jobs, tp)` starts P processes with `torch.multiprocessing` (spawn); each joins a
process group on localhost — gloo on CPU, NCCL on GPUs (device="cuda", one GPU per rank) —
through a free TCP port, then runs every job in turn: build the layer's weights and inputs
from the job's seed (identical on every rank), keep only its own shard, allocate its own
cache and decode `steps` tokens, one `step` per token. Per job each rank reports its output
y [B, T, d] (replicated by the all-reduce), the bytes its cache tensors actually hold
(numel·element_size of each) and how many all-reduces it issued.

Spawning costs seconds, so one spawn runs a list of jobs. Nothing hangs: the process group
has a bounded timeout, and the parent gives each job its own time limit (the policy's
case_timeout, in the harness), counted from the end of the job before it — the first from
the moment every rank has joined the process group, a start-up bounded by START_S. A rank
that raises or dies ends that spawn, its job becomes an error outcome naming the rank, and
the jobs after it run in a fresh spawn; a job past its limit is a `TimedOut` outcome, and
the later jobs of the same backend are not run (each would wait as long again).

Nothing outlives a spawn: the ranks are stopped in a `finally` (deadline, error, Ctrl-C),
and each rank dies with the harness even when that is killed outright (`_die_with_harness`).
"""

from __future__ import annotations

import dataclasses
import os
import shutil
import signal
import socket
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path

import torch

from ..checks import check_choice, check_float, check_int
from ..reference.layers import layer_module
from ..spec import AttentionSpec, as_dtype, dtype_name
from .partition import plan_rank

DTYPES = ("float64", "float32", "bfloat16", "float16")
DEVICES = ("cpu", "cuda")
DEFAULT_TIMEOUT_S = 120.0  # one job (the policy's default case_timeout; the tp level passes the policy's own)
START_S = 60.0  # the ranks' start-up: fork, unpickle the jobs, join the process group
DEFAULT_PG_TIMEOUT_S = 60.0  # one collective: a rank waiting longer for a peer gives up
START_METHOD = "forkserver" if os.name == "posix" else "spawn"  # see _preload
SPAWN_PREFIX = "lrkv-tp-"  # + <pid>-: a spawn's temporary directory (sweep_stale_spawn_dirs)
GRACE_S = 2.0  # how long ranks get to exit after one fails, or after SIGTERM before SIGKILL
PR_SET_PDEATHSIG = 1  # linux/prctl.h


class TimedOut(str):
    """An error outcome of a job that outlived its time limit (the ranks were killed)."""


@dataclass(frozen=True)
class TPJob:
    """One TP decode to run: the layer, the sizes, and which per-rank step runs it."""

    spec: AttentionSpec  # the full layer
    batch: int = 2  # B sequences, decoded in lock step
    steps: int = 3  # tokens decoded from an empty cache; also T_max
    seed: int = 0  # seeds weights (seed) and inputs (seed + 1)
    dtype: str = "float64"  # τ of weights, inputs, cache and all-reduce
    backend: object = None  # a backend: name, 'module:attribute' or the object (steps.tp_layer_for)
    step: str | None = None  # 'module:attribute' of a TP layer or step function (steps.as_tp_layer)
    case: dict | None = None  # a harness Case (as a dict): draw the inputs as its level does

    def __post_init__(self) -> None:
        if not isinstance(self.spec, AttentionSpec):
            raise TypeError(f"spec must be an AttentionSpec, got {type(self.spec).__name__}")
        check_int("batch", self.batch, minimum=1)
        check_int("steps", self.steps, minimum=1)
        check_int("seed", self.seed, minimum=0)
        try:
            name = dtype_name(self.dtype)
        except TypeError:
            raise ValueError(f"dtype must be one of {', '.join(DTYPES)}; got {self.dtype!r}") from None
        object.__setattr__(self, "dtype", check_choice("dtype", name, DTYPES))
        if self.backend is not None and self.step is not None:
            raise ValueError("give at most one of backend, step")

    @property
    def label(self) -> str:
        backend = self.backend if self.backend is None or isinstance(self.backend, str) else self.backend.name
        who = backend or self.step or "reference"
        return f"{who}/{self.spec.short()}/B{self.batch}-T{self.steps}-s{self.seed}/{self.dtype}"


def job_inputs(job: TPJob) -> tuple[object, torch.Tensor]:
    """The float64 weights and inputs x [B, T, d], both rounded to τ (DESIGN §6: the oracle then
    runs on the rounded values upcast). Every rank and the parent build the same tensors."""
    if job.case is not None:
        from ..verify.case import Case
        from ..verify.levels.model import make_model_inputs

        inp = make_model_inputs(Case.from_dict(job.case).replace(level="layer-model", tp=1))
        return inp.weights, inp.x
    tau = as_dtype(job.dtype)
    weights = layer_module(job.spec).init_weights(job.spec, seed=job.seed).to(tau)
    g = torch.Generator().manual_seed(job.seed + 1)
    x = torch.randn(job.batch, job.steps, job.spec.d_model, generator=g, dtype=torch.float64)
    return weights, x.to(tau)


def tp_layer(job: TPJob):
    """The TP layer a job runs on each rank."""
    from .steps import TPLayer, as_tp_layer, tp_layer_for

    if job.backend is not None:
        from ..verify.backend_registry import get_backend

        backend = get_backend(job.backend) if isinstance(job.backend, str) else job.backend
        if job.case is not None and hasattr(backend, "configure"):  # the harness's per-case hints, on this rank
            from ..verify.case import Case

            backend.configure(Case.from_dict(job.case))
        return tp_layer_for(backend, job.spec)
    if job.step is not None:
        from ..verify.backend_registry import resolve_path

        return as_tp_layer(resolve_path(job.step))
    return TPLayer()


def cache_tensors(cache) -> dict[str, torch.Tensor]:
    """The payload tensors of a rank's cache: `cache.tensors()`, a dict, or its tensor attributes
    (`lengths` is bookkeeping, not payload)."""
    if hasattr(cache, "tensors"):
        items = dict(cache.tensors())
    elif isinstance(cache, dict):
        items = dict(cache)
    else:
        items = dict(vars(cache))
    return {k: v for k, v in items.items() if isinstance(v, torch.Tensor) and k != "lengths"}


def _to_device(obj, device):
    if device == "cpu":
        return obj
    return dataclasses.replace(obj, **{f.name: getattr(obj, f.name).to(device) for f in dataclasses.fields(obj)
                                       if isinstance(getattr(obj, f.name), torch.Tensor)})


def run_rank_job(job: TPJob, rank: int, tp: int, comm, device: str = "cpu") -> dict:
    """One rank's decode of one job: its shard, its cache, one step per token."""
    weights, x = job_inputs(job)
    weights, x = _to_device(weights, device), x.to(device)
    layer = tp_layer(job)
    plan = plan_rank(job.spec, tp, rank)
    shard = layer.shard(weights, plan)
    del weights  # the rank keeps its shard only
    cache = _to_device(layer.allocate(shard, job.batch, job.steps, as_dtype(job.dtype)), device)
    comm.calls = 0
    ys = []
    for t in range(job.steps):
        pos = torch.full((job.batch,), t, dtype=torch.int64, device=device)
        y, cache = layer.step(shard, x[:, t], cache, pos, comm)
        ys.append(y)
    tensors = cache_tensors(cache)
    return {
        "rank": rank, "heads": list(plan.heads), "y": torch.stack(ys, dim=1).detach().cpu(),
        "cache": {k: {"shape": list(v.shape), "dtype": dtype_name(v.dtype), "bytes": v.numel() * v.element_size()}
                  for k, v in tensors.items()},
        "nbytes": sum(v.numel() * v.element_size() for v in tensors.values()), "all_reduces": comm.calls,
    }


# ----------------------------------------------------------------------------- one rank process
def _atomic_save(obj, path: Path) -> None:
    tmp = path.with_suffix(".tmp")
    torch.save(obj, tmp)
    os.replace(tmp, path)


def _die_with_harness() -> None:
    """Make this rank die with the harness, even with one killed by SIGKILL.

    The rank is a child of the forkserver, not of the harness: the kernel sends it SIGKILL when
    the forkserver exits (PR_SET_PDEATHSIG; torch arms SIGINT, which a rank stuck in C never
    acts on), and the forkserver exits once every write end of its lifeline pipe is closed. The
    harness holds one until it dies, but each forked child inherits one too: the rank closes
    its copy, or it would keep the forkserver, and so itself, alive for ever."""
    if sys.platform.startswith("linux"):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
    if START_METHOD == "forkserver":  # after the prctl: the server cannot exit while we hold the lifeline
        from multiprocessing import forkserver

        server = forkserver._forkserver  # noqa: SLF001 — no public handle on the inherited lifeline
        if getattr(server, "_forkserver_alive_fd", None) is not None:
            os.close(server._forkserver_alive_fd)
            server._forkserver_alive_fd = None  # a forkserver this rank needs is then one of its own


def _rank_main(rank: int, tp: int, port: int, jobs: list[TPJob], out_dir: str, pg_timeout_s: float,
               device: str) -> None:
    """Entry point of one spawned rank (must be importable: spawn pickles it by name)."""
    _die_with_harness()
    import torch.distributed as dist

    from .steps import Comm

    torch.set_num_threads(1)  # P ranks share the machine's cores
    out = Path(out_dir)
    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=tp, timeout=timedelta(seconds=pg_timeout_s))
    (out / f"ready-{rank}").touch()  # the first job's clock starts when every rank is here
    try:
        comm = Comm()
        for j, job in enumerate(jobs):
            try:
                result = run_rank_job(job, rank, tp, comm, device)
            except BaseException:
                (out / f"{j}-{rank}.err").write_text(traceback.format_exc()[-3000:])
                raise  # the peers may be inside a collective: end the spawn, never continue out of step
            _atomic_save(result, out / f"{j}-{rank}.pt")
    finally:
        dist.destroy_process_group()


# ----------------------------------------------------------------------------- the parent
def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _preload() -> None:
    """The forkserver imports torch and this module once; every rank is then a cheap fork of a
    process that has run no torch code yet (no OpenMP pool, no CUDA context: fork-safe), instead
    of a fresh interpreter importing torch again — seconds per rank on a loaded machine."""
    import multiprocessing

    if START_METHOD == "forkserver":
        multiprocessing.get_context("forkserver").set_forkserver_preload([__name__])


def _spawn(jobs: list[TPJob], tp: int, limits: list[float], start_s: float, pg_timeout_s: float, device: str):
    """Run jobs in one spawn. Returns ({job index: [per-rank results]}, failure): failure is None
    when every job has its results, else (index of the first job without, why, kind), kind one
    of 'failed' (a rank raised or died), 'hung' (past its limit), 'start' (the ranks never started)."""
    import torch.multiprocessing as mp

    _preload()
    sweep_stale_spawn_dirs()
    with tempfile.TemporaryDirectory(prefix=f"{SPAWN_PREFIX}{os.getpid()}-") as tmp:
        out = Path(tmp)
        ctx = mp.start_processes(_rank_main, args=(tp, free_port(), jobs, tmp, pg_timeout_s, device), nprocs=tp,
                                 join=False, start_method=START_METHOD)
        try:
            kind, detail = _watch(ctx, out, tp, [start_s, *limits])
        finally:
            _stop(ctx.processes)  # past a deadline, after a failure, on Ctrl-C: no rank outlives its spawn
        done, j, missing, errs = _collect(out, len(jobs), tp)
        if j is None:
            return done, None  # every result is in (a rank that would not exit afterwards was killed)
        if kind == "start":
            late = [r for r in range(tp) if not (out / f"ready-{r}").exists()]
            why = f"the ranks did not start within {start_s:g} s (ranks {late} never joined); not run"
        elif kind == "hung":
            why = (f"no result within the per-case time limit of {limits[j]:g} s (policy case_timeout) from "
                   f"ranks {missing}; the ranks were killed")
        else:
            why = f"ranks {missing} returned no result: {'; '.join(errs) or detail or 'no result'}"
        return done, (j, why, kind or "failed")


def sweep_stale_spawn_dirs(root: str | Path | None = None) -> list[Path]:
    """Remove the spawn directories (lrkv-tp-<pid>-*) of this user's runs whose process is gone:
    a run killed by SIGTERM or SIGKILL cannot clean up after itself, so the next one does. A
    live run's directory, another user's and any other name are left alone."""
    removed = []
    for d in Path(root or tempfile.gettempdir()).glob(f"{SPAWN_PREFIX}*-*"):
        pid = d.name[len(SPAWN_PREFIX):].split("-", 1)[0]
        try:
            if not (pid.isdigit() and d.is_dir() and d.stat().st_uid == os.getuid()):
                continue
            os.kill(int(pid), 0)  # alive (or another user's): keep
        except ProcessLookupError:
            shutil.rmtree(d, ignore_errors=True)
            removed.append(d)
        except (OSError, OverflowError):
            continue
    return removed


def _watch(ctx, out: Path, tp: int, limits: list[float]) -> tuple[str | None, str]:
    """Wait for the ranks stage by stage — start-up, then each job — each stage on its own clock
    (a stage ends when every rank has written its file). Returns (None, '') once the ranks have
    exited or, every job done, have had START_S to; ('failed', why) when a rank raised or died;
    ('start' or 'hung', '') when a stage outlived its limit."""
    stage, since = 0, time.monotonic()
    marker = lambda k, r: out / (f"ready-{r}" if k == 0 else f"{k - 1}-{r}.pt")  # noqa: E731
    while True:
        try:
            if ctx.join(timeout=0.2, grace_period=GRACE_S):
                return None, ""
        except Exception as e:  # noqa: BLE001 — a rank raised or died
            return "failed", f"rank {getattr(e, 'error_index', '?')} failed: {str(e).strip().splitlines()[-1][:300]}"
        while stage < len(limits) and all(marker(stage, r).exists() for r in range(tp)):
            stage, since = stage + 1, time.monotonic()
        limit = limits[stage] if stage < len(limits) else START_S  # the last: time to exit
        if time.monotonic() - since > limit:
            return ("start" if stage == 0 else "hung" if stage < len(limits) else None), ""


def _stop(procs) -> None:
    """SIGTERM each rank still running, SIGKILL those left after GRACE_S, and reap them all."""
    for p in procs:
        if p.is_alive():
            p.terminate()
    end = time.monotonic() + GRACE_S
    for p in procs:
        p.join(max(0.0, end - time.monotonic()))
        if p.is_alive():
            p.kill()
            p.join()


def _collect(tmp: Path, n_jobs: int, tp: int):
    """(results of the jobs done, the first job without all its results or None, its ranks
    without one, the errors its ranks wrote)."""
    done = {}
    for j in range(n_jobs):
        paths = [tmp / f"{j}-{r}.pt" for r in range(tp)]
        if not all(p.exists() for p in paths):
            missing = [r for r, p in enumerate(paths) if not p.exists()]
            errs = [f"rank {r}: {(tmp / f'{j}-{r}.err').read_text().strip().splitlines()[-1]}"
                    for r in range(tp) if (tmp / f"{j}-{r}.err").exists()]
            return done, j, missing, errs
        done[j] = [torch.load(p, weights_only=False) for p in paths]
    return done, None, [], []


def _owner(job: TPJob):
    """Whose code a job runs: one job of it that hangs condemns its later ones."""
    b = job.backend
    return ("backend", b if isinstance(b, str) else id(b)) if b is not None else ("step", job.step)


def run_jobs(jobs: list[TPJob], tp: int, *, timeout_s: float | list[float] = DEFAULT_TIMEOUT_S,
             start_s: float = START_S, pg_timeout_s: float = DEFAULT_PG_TIMEOUT_S,
             device: str = "cpu") -> list[list[dict] | str]:
    """Per job: the P rank results, or an error message (str; a `TimedOut` for a job that ran
    past its limit). timeout_s: each job's time limit (one for all, or one per job), counted
    once every rank has started (start_s) or the job before has its results. Jobs after a
    failed one run in a fresh spawn, so one broken step does not lose the others; after a
    hang, the same backend's later jobs are errors without running."""
    tp = check_int("tp", tp, minimum=1)
    jobs = list(jobs)
    limits = list(timeout_s) if isinstance(timeout_s, (list, tuple)) else [timeout_s] * len(jobs)
    if len(limits) != len(jobs):
        raise ValueError(f"timeout_s: {len(limits)} limits for {len(jobs)} jobs")
    for t in limits:
        check_float("timeout_s", t, minimum=0, exclusive_minimum=True)
    check_float("start_s", start_s, minimum=0, exclusive_minimum=True)
    check_float("pg_timeout_s", pg_timeout_s, minimum=0, exclusive_minimum=True)
    check_choice("device", device, DEVICES)
    for job in jobs:
        if not isinstance(job, TPJob):
            raise TypeError(f"jobs must be TPJob, got {type(job).__name__}")
        plan_rank(job.spec, tp, 0)  # the split rule's ValueError before any process starts
    outcomes: list = [None] * len(jobs)
    pending = list(range(len(jobs)))
    while pending:
        done, failure = _spawn([jobs[i] for i in pending], tp, [limits[i] for i in pending], start_s,
                               pg_timeout_s, device)
        for j, res in done.items():
            outcomes[pending[j]] = res
        if failure is None:
            break
        j, why, kind = failure
        if kind == "start":  # a fresh spawn would wait as long again
            for i in pending[j:]:
                outcomes[i] = why
            break
        hung = pending[j]
        outcomes[hung] = TimedOut(why) if kind == "hung" else why
        if kind == "hung":  # its next job would most likely hang as long: not run
            for i in pending[j + 1:]:
                if _owner(jobs[i]) == _owner(jobs[hung]):
                    outcomes[i] = f"an earlier tp case of this backend hung ({jobs[hung].label}); not run"
        pending = [i for i in pending[j + 1:] if outcomes[i] is None]
    return outcomes
