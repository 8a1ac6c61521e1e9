"""Tensor-parallel decode on torch.distributed: the split rule, the per-rank bytes
against lrkv.spec's formula, P = 2 and 4 ranks on gloo against the float64 oracle, the four TP
mutants rejected, a rank that fails or hangs reported as an error, NCCL where ≥ 2 GPUs exist.

Spawning P processes costs seconds, so each P spawns once for a batch of jobs (module fixtures).
"""

from __future__ import annotations

from fractions import Fraction
from types import SimpleNamespace

import pytest
import torch

from lrkv.distributed import (
    TPJob, TPLayer, judge_job, oracle, plan_all, plan_rank, rank_cache_elements, run_jobs, split_sizes, verify_tp,
)
from lrkv.distributed.check import bytes_check
from lrkv.distributed.runner import TimedOut
from lrkv.mutants.tp import MUTANTS
from lrkv.spec import AttentionSpec as S
from lrkv.spec import per_device_cache_elements, tp_cache_ratio
from lrkv.verify.metrics import error_metrics

LRKV = S.lrkv(4, 8, 2)
MLRA4 = S.mlra(4, 8, latent_dim=6, n_latent_heads=4, n_branches=4, rope_dim=4)
MLRA2 = S.mlra(4, 8, latent_dim=6, n_latent_heads=4, n_branches=2, rope_dim=4)
MLA = S.mla(4, 8, 6, rope_dim=4)


def mutant_step(name: str) -> str:
    """The import path of a TP mutant's layer, as a job names its step."""
    return f"lrkv.mutants.tp:{MUTANTS[name].__name__}"


# ----------------------------------------------------------------------------- the split rule
def test_split_rule_front_loads_the_remainder():
    assert split_sizes(6, 4) == [2, 2, 1, 1]
    assert split_sizes(8, 4) == [2, 2, 2, 2]
    heads = [p.heads for p in plan_all(S.lrkv(6, 8, 2), 4)]
    assert heads == [(0, 1), (2, 3), (4,), (5,)]  # contiguous, every head exactly once


@pytest.mark.parametrize("spec, tp", [
    (S.lrkv(32, 8, 3), 4), (S.lrkv(8, 8, 2, qk_norm=True), 2), (S.mha(8, 4), 4), (S.gqa(8, 4, 4), 2),
    (S.gqa(8, 4, 2), 4), (S.mqa(8, 4), 4), (MLA, 2), (S.mla(4, 8, 6), 4), (MLRA4, 4), (MLRA4, 2), (MLRA2, 4),
])
def test_per_rank_elements_equal_the_spec_formula_where_it_applies(spec, tp):
    for plan in plan_all(spec, tp):
        assert rank_cache_elements(spec, plan) == per_device_cache_elements(spec, tp, include_key_scale=True)


def test_replicated_kv_and_latent_heads():
    gqa = [(p.kv_heads, p.heads) for p in plan_all(S.gqa(8, 4, 2), 4)]
    assert gqa == [((0,), (0, 1)), ((0,), (2, 3)), ((1,), (4, 5)), ((1,), (6, 7))]
    plans = plan_all(MLRA2, 8)  # L = 4 < P = 8: each latent head on two ranks, its pairs split
    assert [p.latent_heads for p in plans] == [(0,), (0,), (1,), (1,), (2,), (2,), (3,), (3,)]
    pairs = sorted(pr for p in plans for pr in p.pairs)
    assert pairs == sorted((b, h) for b in range(2) for h in range(4))  # every (branch, head) once


@pytest.mark.parametrize("spec, tp, field", [
    (S.lrkv(4, 8, 2), 5, "n_heads"), (S.gqa(8, 4, 2), 3, "n_kv_heads"), (S.mqa(4, 4), 8, "n_heads"),
    (S.mlra(4, 8, latent_dim=6, n_latent_heads=2, n_branches=2, rope_dim=4), 3, "n_latent_heads"),
])
def test_split_refuses_ranks_without_work(spec, tp, field):
    with pytest.raises(ValueError, match=field):
        plan_rank(spec, tp, 0)


def test_bad_input_is_refused_before_any_process_starts():
    with pytest.raises(ValueError, match="rank"):
        plan_rank(LRKV, 2, 2)
    with pytest.raises(TypeError, match="tp"):
        plan_rank(LRKV, 2.0, 0)
    with pytest.raises(ValueError, match="batch"):
        TPJob(LRKV, batch=0)
    with pytest.raises(ValueError, match="dtype"):
        TPJob(LRKV, dtype="int8")
    with pytest.raises(ValueError, match="at most one"):
        TPJob(LRKV, step=mutant_step("foreign-basis"), backend="reference")
    with pytest.raises(ValueError, match="n_heads"):
        run_jobs([TPJob(LRKV)], 8)
    with pytest.raises(ValueError, match="device"):
        run_jobs([TPJob(LRKV)], 2, device="tpu")


# ----------------------------------------------------------------------------- in one process
def _simulate(spec: S, tp: int, seed: int = 0) -> tuple[torch.Tensor, TPJob]:
    """All ranks' local steps in one process, summed: the sharding math without processes."""
    job = TPJob(spec, batch=2, steps=3, seed=seed)
    from lrkv.distributed.runner import job_inputs

    weights, x = job_inputs(job)
    layer = TPLayer()
    shards = [layer.shard(weights, p) for p in plan_all(spec, tp)]
    caches = [layer.allocate(s, 2, 3, torch.float64) for s in shards]
    ys = []
    for t in range(3):
        pos = torch.full((2,), t, dtype=torch.int64)
        ys.append(sum(layer.local_step(s, x[:, t], c, pos)[0] for s, c in zip(shards, caches)))
    return torch.stack(ys, dim=1), job


@pytest.mark.parametrize("spec, tp", [
    (S.lrkv(6, 8, 2), 4), (S.lrkv(5, 8, 3, qk_norm=True, rope="exact"), 2), (S.lrkv(3, 8, 2, rope="aligned"), 2),
    (S.lrkv(3, 8, 2, rope="latent"), 3), (S.mla(5, 8, 6, rope_dim=4), 3), (S.mla(3, 8, 6), 2),
    (S.gqa(8, 4, 4, qk_norm=True, rope="exact"), 3), (S.gqa(8, 4, 2), 8), (S.mha(5, 4), 3), (MLRA2, 8), (MLRA4, 2),
])
def test_shards_sum_to_the_oracle_also_for_uneven_splits(spec, tp):
    y, job = _simulate(spec, tp)
    y64, _, cond = oracle(job)
    assert error_metrics(y, y64).max_abs <= cond.bound(8.0)


def test_paper_tp_number_from_allocated_rank_caches():
    """English review Sec. 4: H = 32, r = 54, d_h = 128 at P = 4 holds 54.6875 % of MHA's payload —
    measured here from the caches the ranks allocate, not from the formula."""
    spec = S.lrkv(32, 128, 54)
    results = []
    for plan in plan_all(spec, 4):
        local = spec.replace(n_heads=len(plan.heads))
        shard = SimpleNamespace(spec=spec, weights=SimpleNamespace(spec=local))
        cache = TPLayer().allocate(shard, 1, 2, torch.bfloat16)
        results.append({"rank": plan.rank, "heads": list(plan.heads), "nbytes": cache.nbytes(), "all_reduces": 1,
                        "cache": {}})
    rows, problems = bytes_check(TPJob(spec, batch=1, steps=2, dtype="bfloat16"), 4, results)
    assert problems == []
    assert sum(Fraction(r["elements"]) for r in rows) / (2 * 32 * 128) == tp_cache_ratio(spec, 4) == Fraction(175, 320)


def test_bytes_check_says_no_to_one_missing_element():
    results = [{"rank": p.rank, "heads": list(p.heads), "all_reduces": 1, "cache": {},
                "nbytes": rank_cache_elements(LRKV, p) * 2 * 3 * 8} for p in plan_all(LRKV, 2)]
    assert bytes_check(TPJob(LRKV), 2, results)[1] == []
    results[1]["nbytes"] -= 2 * 3 * 8  # one element per token short on rank 1
    (problem,) = bytes_check(TPJob(LRKV), 2, results)[1]
    assert "rank 1" in problem


# ----------------------------------------------------------------------------- on P ranks (gloo)
REFERENCE_JOBS = {
    2: [TPJob(LRKV), TPJob(S.lrkv(4, 8, 2, qk_norm=True, rope="exact"), seed=1), TPJob(S.lrkv(3, 8, 2)),
        TPJob(S.mha(4, 8)), TPJob(S.gqa(4, 8, 1)), TPJob(MLA), TPJob(MLRA4), TPJob(LRKV, dtype="float32"),
        TPJob(LRKV, step="tests.test_helpers.tp_steps:user_step"), TPJob(LRKV, backend="materialized")],
    4: [TPJob(S.lrkv(6, 8, 2)), TPJob(S.lrkv(4, 8, 2, qk_norm=True)), TPJob(S.gqa(8, 4, 2)), TPJob(MLA),
        TPJob(MLRA4), TPJob(MLRA2)],
}


FAILING = {2: TPJob(LRKV, step="tests.test_helpers.tp_steps:raise_on_rank1"),  # mid-batch: the rest needs a fresh spawn
           4: TPJob(LRKV, step="tests.test_helpers.tp_steps:hang_in_collective")}  # last: its peers time out


@pytest.fixture(scope="module", params=[2, 4], ids=["P2", "P4"])
def tp_run(request):
    """Per P, as few spawns as possible: the reference jobs, a rank that fails (P = 2: raises,
    then the remaining jobs run in a fresh spawn; P = 4: hangs inside a collective), the mutants."""
    tp = request.param
    mutants = [TPJob(LRKV, step=mutant_step(m), seed=2) for m in MUTANTS]
    jobs = REFERENCE_JOBS[tp] + ([FAILING[2]] + mutants if tp == 2 else mutants + [FAILING[4]])
    return tp, verify_tp(jobs, tp, timeout_s=240, pg_timeout_s=5)


def test_reference_tp_decode_matches_the_oracle_and_the_formula(tp_run):
    tp, verdicts = tp_run
    for v in verdicts[:len(REFERENCE_JOBS[tp])]:
        assert v.status == "pass", (v.job.label, v.reason)
        assert len(v.ranks) == tp and all(r["all_reduces"] == v.job.steps for r in v.ranks)  # one per step
        heads = sorted(h for r in v.ranks for h in r["heads"])
        assert heads == list(range(v.job.spec.n_heads)) or v.job.spec.family == "mlra"
        for r in v.ranks:
            assert r["elements"] == rank_cache_elements(v.job.spec, plan_rank(v.job.spec, tp, r["rank"]))


def test_every_tp_mutant_is_rejected(tp_run):
    tp, verdicts = tp_run
    steps = {mutant_step(m): m for m in MUTANTS}
    mutants = {steps[v.job.step]: v for v in verdicts if v.job.step in steps}
    assert set(mutants) == set(MUTANTS)
    for name, v in mutants.items():
        assert v.status == "fail", name
        assert "y: max|err|" in v.reason, (name, v.reason)
    assert "cache elements per token" in mutants["sharded-shared"].reason  # fewer bytes than replicated
    assert "ranks disagree" in mutants["missing-allreduce"].reason


def test_a_rank_that_fails_or_hangs_is_an_error(tp_run):
    tp, verdicts = tp_run
    (v,) = [v for v in verdicts if v.job == FAILING[tp]]
    assert v.status == "error" and "returned no result" in v.reason
    if tp == 2:
        assert "deliberate failure on rank 1" in v.reason


def test_a_rank_that_never_exits_hits_the_deadline():
    out = run_jobs([TPJob(LRKV, step="tests.test_helpers.tp_steps:hang_after_last_step")], 2, timeout_s=5, pg_timeout_s=5)
    assert isinstance(out[0], TimedOut) and "no result within the per-case time limit of 5 s" in out[0]
    assert "from ranks [1]" in out[0]  # rank 0 finished: the deadline, not start-up, ended it
    assert judge_job(TPJob(LRKV), 2, out[0]).status == "error"


# ----------------------------------------------------------------------------- harness level tp
TP_MUTANT_BACKENDS = ("foreign_basis", "sharded_shared", "missing_allreduce", "double_count_shared")


def test_harness_tp_level_and_gate_reject_every_mutant(tmp_path):
    """`lrkv verify --tp 2` with the reference and the four mutants as backends (one spawn), then
    `lrkv gate`: the reference passes, each mutant FAILs on the evidence the gate re-judges."""
    from lrkv.cli import main
    from lrkv.verify.gate import classify, load_baseline
    from lrkv.verify.tolerance_report import load_report

    out = tmp_path / "tp"
    argv = ["verify", "--tp", "2", "--filter", "rope_none:float64:T5", "--out", str(out), "--no-progress",
            "--backend", "reference"]
    for m in TP_MUTANT_BACKENDS:
        argv += ["--backend", f"lrkv.mutants.tp:{m}"]
    assert main(argv) == 1  # a case failed
    report = load_report(out / "report.json")
    recs = {r["backend"]: r for r in report["records"]}
    assert recs["reference"]["status"] == "pass" and recs["reference"]["level"] == "tp"
    assert recs["reference"]["outputs"]["cache_excess"]["metrics"]["max_abs"] == 0.0
    why = {name: recs[name]["reason"] for name in recs if name != "reference"}
    assert all(recs[n]["status"] == "fail" and "y: max|err|" in r for n, r in why.items()), why
    assert "cache_excess" in why["tp-sharded-shared"] and "rank_disagreement" in why["tp-missing-allreduce"]
    entries = classify(report, load_baseline(out / "report.json"))
    klass = {e.backend: e.klass for e in entries if e.case_id != "*" and not e.case_id.startswith("coverage:")}
    assert klass == {"reference": "PASS", **{f"tp-{m.replace('_', '-')}": "FAIL" for m in TP_MUTANT_BACKENDS}}
    # a failing case covers nothing: the mutants' features are UNCOVERED too, the reference's are not
    assert {e.backend for e in entries if e.klass == "UNCOVERED"} == set(klass) - {"reference"}
    assert main(["gate", str(out / "report.json"), "--baseline", str(out / "report.json")]) == 1


def test_tp_cases_are_validated():
    from lrkv.verify.case import Case

    with pytest.raises(ValueError, match="tp"):
        Case("layer-model", LRKV, "float64", (3,), 3, tp=2)
    with pytest.raises(ValueError, match="t_max"):
        Case("tp", LRKV, "float64", (2, 3), 3, tp=2)
    with pytest.raises(ValueError, match="tp"):
        Case("tp", LRKV, "float64", (3,), 3, tp=0)
    assert Case("tp", LRKV, "float64", (3,), 3, tp=4).id.endswith("+tp4")


# ----------------------------------------------------------------------------- NCCL
@pytest.mark.gpu
@pytest.mark.skipif(torch.cuda.device_count() < 2,
                    reason=f"NCCL tensor parallelism needs >= 2 CUDA devices, found {torch.cuda.device_count()}")
def test_nccl_tp_decode_on_gpus():
    tp = 2 if torch.cuda.device_count() < 4 else 4
    jobs = [TPJob(S.lrkv(4, 8, 2)), TPJob(MLRA4), TPJob(LRKV, dtype="float32")]
    jobs += [TPJob(LRKV, step=mutant_step(m)) for m in MUTANTS]
    verdicts = verify_tp(jobs, tp, device="cuda", timeout_s=300)
    assert [v.status for v in verdicts] == ["pass"] * 3 + ["fail"] * len(MUTANTS), [v.reason for v in verdicts]
