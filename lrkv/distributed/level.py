"""The `tp` level: `lrkv verify --backend X --tp P` (DESIGN §6, §7) — tensor-parallel decode.

A `tp` case is a whole sequence (lengths = t_max), decoded token by token on P ranks
(`runner.run_jobs`: torch.multiprocessing + gloo) by the backend's TP layer
(`steps.tp_layer_for`: its own `tp_layer`, else its kernel — or layer — on each rank's head
shard). The oracle is the single-process reference decode in float64 (and, as a second path
that must agree, the materialized decode); the usual rule judges three outputs, each an
ordinary record output the gate re-judges from its evidence:

    y                  [B, T, d]  rank 0's y against the float64 oracle (err_base: the
                                  single-process reference decode at τ vs its own float64 run)
    rank_disagreement  [B, T, d]  max over ranks r of |y_r − y_0|: the all-reduce leaves y
                                  replicated, so the oracle's value is 0 (a missing all-reduce
                                  leaves partial sums that differ)
    cache_excess       [P]        per rank, cache elements per token actually allocated
                                  (numel·element_size of its cache tensors / B·T_max·bytes)
                                  minus the formula (`lrkv.spec.per_device_cache_elements`
                                  where it applies, `partition.rank_cache_elements` otherwise);
                                  oracle 0, atol 0: one element off fails

Spawning ranks costs seconds, so `prefetch` runs every (backend, case) of a run in one spawn
per P before the runner asks for them, each case within its backend's case_timeout (the
policy's) once the ranks have started. A case past it is the runner's "timeout" ERROR — the
backend is then not run again, as anywhere in the harness — and no rank is left running.
Under `--tp` every backend is wrapped (`TPBackend`) with role 'verified': what its records
verify is the backend's tensor-parallel decode — sharding, replication and the all-reduce —
against the single-process oracle, which none of them is, not even the float64 reference
run sharded.
"""

from __future__ import annotations

import torch

from ..spec import AttentionSpec, per_device_cache_elements
from ..verify.case import Case
from ..verify.levels import Level, named_axes
from ..verify.levels.model import incremental_y, make_model_inputs, model_conditioning
from ..verify.isolation import Timeout
from ..verify.runner import not_applicable
from ..verify.tolerance import Policy
from .partition import plan_rank, rank_cache_elements
from .runner import TimedOut, TPJob, run_jobs

TP_PG_TIMEOUT_S = 30.0

_RESULTS: dict[tuple[int, str], tuple[object, list[dict] | str]] = {}  # (id(b), case id) -> (b, outcome)


def _job(backend, case: Case) -> TPJob:
    return TPJob(case.spec, batch=case.batch, steps=case.t_max, seed=case.seed, dtype=case.dtype,
                 backend=backend, case=case.to_dict())


def model_inputs(case: Case):
    """The layer-model level's draw for the same seed: weights and x [B, T, d] at τ."""
    return make_model_inputs(case.replace(level="layer-model", tp=1))


# ----------------------------------------------------------------------------- running
def prefetch(cases: list[Case], backends: list[tuple[str, object]], policy: Policy | None = None) -> None:
    """Run every (backend, tp case) pair, one spawn per P, each within the policy's case_timeout
    for its backend and dtype, and keep the outcomes for `call`."""
    policy = policy or Policy({}, {}, {})
    _RESULTS.clear()  # an earlier run's leftovers: cases the runner did not ask for (their backend hung)
    by_tp: dict[int, list[tuple[object, Case]]] = {}
    for case in cases:
        if case.level == "tp":
            for _, b in backends:
                if _applies(b, case):
                    by_tp.setdefault(case.tp, []).append((b, case))
    for tp, pairs in by_tp.items():
        limits = [policy.resolve(b.name, c.dtype).case_timeout for b, c in pairs]
        outcomes = run_jobs([_job(b, c) for b, c in pairs], tp, timeout_s=limits, pg_timeout_s=TP_PG_TIMEOUT_S)
        for (b, c), out in zip(pairs, outcomes):
            _RESULTS[(id(b), c.id)] = (b, out)  # b held: its id names no other backend meanwhile


def _applies(backend, case: Case) -> bool:
    try:
        ok, _ = backend.available()
    except Exception:  # noqa: BLE001 — the runner records why
        return False
    return ok and not not_applicable(backend, case)


def _outcome(backend, case: Case) -> list[dict]:
    _, out = _RESULTS.pop((id(backend), case.id), (None, None))
    if out is None:  # not prefetched (Python API): the runner's case_timeout bounds the call, run_jobs' the ranks
        out = run_jobs([_job(backend, case)], case.tp, pg_timeout_s=TP_PG_TIMEOUT_S)[0]
    if isinstance(out, TimedOut):  # a hang, as the runner records any: "timeout: …", the backend not run again
        raise Timeout(out)
    if isinstance(out, str):
        raise RuntimeError(f"tensor-parallel run on {case.tp} ranks failed: {out}")
    return out


def expected_elements(spec: AttentionSpec, tp: int, rank: int) -> int:
    """Cache elements per token per layer rank `rank` must hold (key_scale included)."""
    n = rank_cache_elements(spec, plan_rank(spec, tp, rank))
    try:
        formula = per_device_cache_elements(spec, tp, include_key_scale=True)
    except ValueError:  # P does not divide H: the per-rank split rule is the formula
        return n
    if formula != n:
        raise AssertionError(f"split rule {n} != per_device_cache_elements {formula} (rank {rank})")
    return formula


def _call(backend, inp, case: Case) -> dict[str, torch.Tensor]:
    results = sorted(_outcome(backend, case), key=lambda r: r["rank"])
    tau, tokens = case.torch_dtype, case.batch * case.t_max
    y0 = results[0]["y"]
    spread = torch.zeros_like(y0)
    for r in results[1:]:
        if r["y"].shape != y0.shape:
            raise ValueError(f"rank {r['rank']} returned y {list(r['y'].shape)}, rank 0 {list(y0.shape)}")
        spread = torch.maximum(spread, (r["y"] - y0).abs())
    esize = torch.empty((), dtype=tau).element_size()
    excess = [r["nbytes"] / (tokens * esize) - expected_elements(case.spec, case.tp, r["rank"]) for r in results]
    return {"y": y0, "rank_disagreement": spread, "cache_excess": torch.tensor(excess, dtype=torch.float64).to(tau)}


# ----------------------------------------------------------------------------- the oracle
def _single_process(decode_name: str, case: Case):
    def path(inp):
        y = incremental_y(decode_name, inp, case)
        return {"y": y, "rank_disagreement": torch.zeros_like(y),
                "cache_excess": torch.zeros(case.tp, dtype=y.dtype)}  # replicated y, exact bytes
    return path


def _outputs(case: Case) -> dict:
    B, T, d, tau = case.batch, case.t_max, case.spec.d_model, case.torch_dtype
    return {"y": ((B, T, d), tau), "rank_disagreement": ((B, T, d), tau), "cache_excess": ((case.tp,), tau)}


# ----------------------------------------------------------------------------- backends
def distributed_unavailable() -> str:
    """Why `tp` cases cannot run here ('' when they can): torch.distributed with gloo is needed."""
    import torch.distributed as dist

    if not dist.is_available():
        return "this torch build has no torch.distributed"
    if not dist.is_gloo_available():
        return "this torch build has no gloo backend for torch.distributed"
    return ""


class TPBackend:
    """A backend as the `tp` level runs it: same name, dtypes and levels, role 'verified' (see
    the module docstring), pickled whole into every rank."""

    role = "verified"
    isolation = "inprocess"  # its call already runs the backend on rank processes of its own

    def __init__(self, inner):
        self.inner = inner
        self.name, self.levels, self.dtypes = inner.name, inner.levels, inner.dtypes
        self.description = f"{getattr(inner, 'description', '')} — on tensor-parallel ranks".strip(" —")

    def available(self):
        why = distributed_unavailable()
        return (False, why) if why else self.inner.available()

    def supports(self, case: Case) -> tuple[bool, str]:
        """The inner backend asked about what each rank runs: its kernel on the case's shapes."""
        inner = getattr(self.inner, "supports", None)
        return (True, "") if inner is None else inner(per_rank_case(case))

    def configure(self, case: Case) -> None:
        inner = getattr(self.inner, "configure", None)
        if inner is not None:
            inner(per_rank_case(case))

    def __getattr__(self, name):  # decode_attention, layer_step, tp_layer …
        if name == "inner":
            raise AttributeError(name)
        return getattr(self.inner, name)


def per_rank_case(case: Case) -> Case:
    """A `tp` case as the kernel-level case each rank's decode is (hints such as splits kept)."""
    return case.replace(level="kernel", tp=1) if case.level == "tp" else case


def tp_backends(backends: list[tuple[str, object]]) -> list[tuple[str, object]]:
    return [(label, TPBackend(b)) for label, b in backends]


LEVEL = Level(
    name="tp", needs="kernel", make_inputs=model_inputs,
    paths=lambda case: {"incremental": _single_process("decode_attention", case),
                        "incremental-materialized": _single_process("materialized_decode_attention", case)},
    consistency=lambda case: [("incremental", "incremental-materialized")], call=_call, outputs=_outputs,
    conditioning=model_conditioning, wrap_backends=tp_backends, prefetch=prefetch,
    position=named_axes(y=("batch", "position", "feature"), rank_disagreement=("batch", "position", "feature"),
                        cache_excess=("rank",)),
)
