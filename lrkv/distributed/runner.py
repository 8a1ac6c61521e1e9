"""Spawn P ranks on torch.distributed and decode token by token on each.

`run_jobs(jobs, tp)` starts P processes with `torch.multiprocessing` (spawn); each joins a
process group on localhost — gloo on CPU, NCCL on GPUs (device="cuda", one GPU per rank) —
through a free TCP port, then runs every job in turn: build the layer's weights and inputs
from the job's seed (identical on every rank), keep only its own shard, allocate its own
cache and decode `steps` tokens, one `step` per token. Per job each rank reports its output
y [B, T, d] (replicated by the all-reduce), the bytes its cache tensors actually hold
(numel·element_size of each) and how many all-reduces it issued.

Spawning costs seconds, so one spawn runs a list of jobs. Nothing hangs: the process group
has a bounded timeout, the parent a deadline; a rank that raises, dies or hangs ends that
spawn, its job becomes an error outcome naming the rank, and the jobs after it run in a
fresh spawn.
"""

from __future__ import annotations

import dataclasses
import os
import socket
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
DEFAULT_TIMEOUT_S = 300.0  # whole spawn, including every rank's start-up (imports take seconds)
DEFAULT_PG_TIMEOUT_S = 60.0  # one collective: a rank waiting longer for a peer gives up
START_METHOD = "forkserver" if os.name == "posix" else "spawn"  # see _preload
GRACE_S = 2.0  # after one rank fails, how long the others get to exit before SIGTERM


@dataclass(frozen=True)
class TPJob:
    """One TP decode to run: the layer, the sizes, and which per-rank step runs it."""

    spec: AttentionSpec  # the full layer
    batch: int = 2  # B sequences, decoded in lock step
    steps: int = 3  # tokens decoded from an empty cache; also T_max
    seed: int = 0  # seeds weights (seed) and inputs (seed + 1)
    dtype: str = "float64"  # τ of weights, inputs, cache and all-reduce
    mutant: str | None = None  # a name in mutants.MUTANTS
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
        chosen = [f for f in ("mutant", "backend", "step") if getattr(self, f) is not None]
        if len(chosen) > 1:
            raise ValueError(f"give at most one of mutant, backend, step; got {chosen}")
        if self.mutant is not None:
            from .tp_mutants import MUTANTS

            check_choice("mutant", self.mutant, tuple(MUTANTS))
            if self.spec.family != "lrkv":
                raise ValueError(f"mutant {self.mutant!r} needs an lrkv spec, got family {self.spec.family!r}")

    @property
    def label(self) -> str:
        backend = self.backend if self.backend is None or isinstance(self.backend, str) else self.backend.name
        who = self.mutant or backend or self.step or "reference"
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
    from .tp_mutants import MUTANTS
    from .steps import TPLayer, as_tp_layer, tp_layer_for

    if job.mutant is not None:
        return MUTANTS[job.mutant]()
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


def _rank_main(rank: int, tp: int, port: int, jobs: list[TPJob], out_dir: str, pg_timeout_s: float,
               device: str) -> None:
    """Entry point of one spawned rank (must be importable: spawn pickles it by name)."""
    import torch.distributed as dist

    from .steps import Comm

    torch.set_num_threads(1)  # P ranks share the machine's cores
    out = Path(out_dir)
    if device == "cuda":
        torch.cuda.set_device(rank)
    dist.init_process_group("nccl" if device == "cuda" else "gloo", init_method=f"tcp://127.0.0.1:{port}",
                            rank=rank, world_size=tp, timeout=timedelta(seconds=pg_timeout_s))
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


def _spawn(jobs: list[TPJob], tp: int, timeout_s: float, pg_timeout_s: float, device: str):
    """Run jobs in one spawn. Returns ({job index: [per-rank results]}, (index, error) or None)."""
    import torch.multiprocessing as mp

    _preload()
    with tempfile.TemporaryDirectory(prefix="lrkv-tp-") as tmp:
        ctx = mp.start_processes(_rank_main, args=(tp, free_port(), jobs, tmp, pg_timeout_s, device), nprocs=tp,
                                 join=False, start_method=START_METHOD)
        deadline, failure = time.monotonic() + timeout_s, None
        while True:
            try:
                if ctx.join(timeout=0.2, grace_period=GRACE_S):
                    break
            except Exception as e:  # noqa: BLE001 — a rank raised or died
                failure = f"rank {getattr(e, 'error_index', '?')} failed: {str(e).strip().splitlines()[-1][:300]}"
                break
            if time.monotonic() > deadline:
                for p in ctx.processes:
                    if p.is_alive():
                        p.kill()
                for p in ctx.processes:
                    p.join()
                failure = f"timed out after {timeout_s:g} s (a rank hung)"
                break
        return _collect(Path(tmp), len(jobs), tp, failure)


def _collect(tmp: Path, n_jobs: int, tp: int, failure: str | None):
    done = {}
    for j in range(n_jobs):
        paths = [tmp / f"{j}-{r}.pt" for r in range(tp)]
        if all(p.exists() for p in paths):
            done[j] = [torch.load(p, weights_only=False) for p in paths]
            continue
        errs = [f"rank {r}: {(tmp / f'{j}-{r}.err').read_text().strip().splitlines()[-1]}"
                for r in range(tp) if (tmp / f"{j}-{r}.err").exists()]
        missing = [r for r, p in enumerate(paths) if not p.exists()]
        why = "; ".join(errs) or failure or "no result"
        return done, (j, f"ranks {missing} returned no result: {why}")
    return done, None


def run_jobs(jobs: list[TPJob], tp: int, *, timeout_s: float = DEFAULT_TIMEOUT_S,
             pg_timeout_s: float = DEFAULT_PG_TIMEOUT_S, device: str = "cpu") -> list[list[dict] | str]:
    """Per job: the P rank results, or an error message (str). Jobs after a failed one run in a
    fresh spawn, so one broken step does not lose the others."""
    tp = check_int("tp", tp, minimum=1)
    check_float("timeout_s", timeout_s, minimum=0, exclusive_minimum=True)
    check_float("pg_timeout_s", pg_timeout_s, minimum=0, exclusive_minimum=True)
    check_choice("device", device, DEVICES)
    jobs = list(jobs)
    for job in jobs:
        if not isinstance(job, TPJob):
            raise TypeError(f"jobs must be TPJob, got {type(job).__name__}")
        plan_rank(job.spec, tp, 0)  # the split rule's ValueError before any process starts
    outcomes: list = [None] * len(jobs)
    pending = list(range(len(jobs)))
    while pending:
        done, failure = _spawn([jobs[i] for i in pending], tp, timeout_s, pg_timeout_s, device)
        for j, res in done.items():
            outcomes[pending[j]] = res
        if failure is None:
            break
        j, why = failure
        outcomes[pending[j]] = why
        pending = pending[j + 1:]
    return outcomes
