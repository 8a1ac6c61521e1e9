"""Judge a tensor-parallel decode: output against the single-process float64 oracle, and the
bytes each rank holds against the cache formula (DESIGN §6).

Output. The oracle is the family's reference `layer_step` (lrkv.reference.layers), one
process, float64, on the job's inputs rounded to τ, token by token from an empty cache. The
rule is DESIGN §6's: err_base is the same single-process reference run at τ against its
float64 run; at τ = float64 the bound is raised to the float64 rounding bound c·u·n·(1 + 2L)·V·g
(lrkv.verify.bounds), whose L (logit scale), V (value norm) and n (reduction length) are taken
from the job's own projections — sharding reorders sums, it must not change them by more.
Every rank holds the all-reduced y, so every rank's y must agree with rank 0's within the same
bound (a missing all-reduce leaves partial sums that do not).

Bytes. Each rank reports numel·element_size of its cache tensors. Per token per layer that is
`partition.rank_cache_elements` elements; where `lrkv.spec.per_device_cache_elements` applies
(P | H, the formula the proofs use) it must equal that too, and the payload over all ranks
(key_scale excluded, as in Eq. 8) divided by MHA's must equal `lrkv.spec.tp_cache_ratio` —
P/H + r/d_h for lrkv. Any mismatch fails the job.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

import torch

from ..reference.layers import layer_module
from ..spec import as_dtype, dtype_bytes, mha_cache_elements, per_device_cache_elements, tp_cache_ratio
from ..verify.bounds import Conditioning, ConditioningProbe, through_output_projection
from ..verify.metrics import ErrorMetrics, error_metrics
from ..verify.tolerance import Bound, Tolerance, fa3_atol, judge, make_bound
from .partition import plan_rank, rank_cache_elements
from .runner import TPJob, job_inputs


@dataclass
class TPVerdict:
    job: TPJob
    tp: int
    status: str  # pass | fail | error
    reason: str = ""
    metrics: ErrorMetrics | None = None  # rank 0's y against the float64 oracle
    baseline_metrics: ErrorMetrics | None = None  # err_base: single-process reference at τ
    bound: Bound | None = None
    ranks: list[dict] = field(default_factory=list)  # per rank: heads, bytes, elements, formula, all-reduces

    @property
    def ok(self) -> bool:
        return self.status == "pass"


# ----------------------------------------------------------------------------- the oracle
def _decode(weights, x: torch.Tensor, **kw) -> torch.Tensor:
    """Single-process incremental decode of x [B, T, d] through the family's reference.  # [B, T, d]"""
    fam = layer_module(weights.spec)
    B, T, _ = x.shape
    cache = fam.allocate_cache(weights.spec, B, T, x.dtype)
    ys = []
    for t in range(T):
        y, cache = fam.layer_step(weights, x[:, t], cache, torch.full((B,), t, dtype=torch.int64), **kw)
        ys.append(y)
    return torch.stack(ys, dim=1)


def _norm_max(t: torch.Tensor) -> float:
    return float(t.double().norm(dim=-1).max()) if t.numel() else 0.0


def _op_max(w: torch.Tensor) -> float:
    """max over leading dims of the spectral norm of the trailing [d_c, d_h] matrices."""
    return float(torch.linalg.matrix_norm(w.double().flatten(0, -3), ord=2).max())


def _latent_conditioning(weights, x: torch.Tensor) -> Conditioning:
    """mla/mlra: ||K_h|| <= ||c||·||W_UK[h]||_2 + ||k_pe||, ||V_h|| <= ||c||·||W_UV[h]||_2."""
    spec = weights.spec
    B, T, _ = x.shape
    p = layer_module(spec).module.project_token(weights, x, torch.arange(T)[None, :].expand(B, T))
    c = _norm_max(p["latent"])
    kpe = _norm_max(p["k_rope"]) if "k_rope" in p else 0.0
    logit = spec.scale * _norm_max(p["q"]) * (c * _op_max(weights.w_uk) + kpe)
    return Conditioning(n=T + spec.latent_dim + spec.head_dim + spec.rope_dim, logit=logit,
                        value=c * _op_max(weights.w_uv))


def _dense_conditioning(weights, x: torch.Tensor) -> Conditioning:
    spec = weights.spec
    B, T, _ = x.shape
    p = layer_module(spec).module.project_token(weights, x, torch.arange(T)[None, :].expand(B, T))
    return Conditioning(n=T + spec.head_dim, logit=spec.scale * _norm_max(p["q"]) * _norm_max(p["k"]),
                        value=_norm_max(p["v"]))


def oracle(job: TPJob) -> tuple[torch.Tensor, ErrorMetrics, Conditioning]:
    """The float64 y [B, T, d] on the job's rounded inputs, err_base (the single-process reference
    at τ against it), and the conditioning of the float64 bound."""
    weights, x = job_inputs(job)
    w64, x64 = weights.to(torch.float64), x.to(torch.float64)
    if job.spec.family == "lrkv":
        from ..reference.lrkv import decode_attention

        probe = ConditioningProbe(decode_attention)
        y64 = _decode(w64, x64, decode=probe)
        cond = probe.cond
    else:
        y64 = _decode(w64, x64)
        cond = (_latent_conditioning if job.spec.family in ("mla", "mlra") else _dense_conditioning)(w64, x64)
    cond = through_output_projection(cond, w64)
    base = error_metrics(_decode(weights, x) if x.dtype != torch.float64 else y64, y64)
    return y64, base, cond


# ----------------------------------------------------------------------------- bytes
def bytes_check(job: TPJob, tp: int, results: list[dict]) -> tuple[list[dict], list[str]]:
    """Per-rank rows (measured vs formula) and the mismatches found."""
    spec, tokens, esize = job.spec, job.batch * job.steps, dtype_bytes(job.dtype)
    try:
        formula = per_device_cache_elements(spec, tp, include_key_scale=True)
        ratio = tp_cache_ratio(spec, tp)
    except ValueError:  # outside the closed form (P does not divide H): the per-rank rule only
        formula = ratio = None
    rows, problems, payload = [], [], 0
    for res in results:
        plan = plan_rank(spec, tp, res["rank"])
        expected = rank_cache_elements(spec, plan)
        measured = Fraction(res["nbytes"], tokens * esize)
        payload += measured - (len(plan.heads) if spec.family == "lrkv" and spec.qk_norm else 0)
        row = {"rank": res["rank"], "heads": res["heads"], "bytes": res["nbytes"], "elements": float(measured),
               "expected": expected, "formula": formula, "all_reduces": res["all_reduces"], "cache": res["cache"]}
        rows.append(row)
        if measured != expected:
            problems.append(f"rank {res['rank']} holds {float(measured):g} cache elements per token, "
                            f"the split rule gives {expected}")
        elif formula is not None and measured != formula:
            problems.append(f"rank {res['rank']} holds {float(measured):g} elements per token, "
                            f"per_device_cache_elements gives {formula}")
    if ratio is not None and not problems and payload / mha_cache_elements(spec) != ratio:
        problems.append(f"aggregate payload is {float(payload / mha_cache_elements(spec)):.6g} of MHA, "
                        f"tp_cache_ratio gives {float(ratio):.6g}")
    return rows, problems


# ----------------------------------------------------------------------------- verdict
def judge_job(job: TPJob, tp: int, outcome: list[dict] | str, tol: Tolerance | None = None) -> TPVerdict:
    """The verdict of one job's outcome from `runner.run_jobs`."""
    tol = tol or Tolerance()
    if isinstance(outcome, str):
        return TPVerdict(job, tp, "error", outcome)
    y64, base, cond = oracle(job)
    tau = as_dtype(job.dtype)
    f64 = cond.bound(tol.float64_c) if tau == torch.float64 else None
    bound = make_bound(base, fa3_atol(y64, tau), tol, f64)
    rows, problems = bytes_check(job, tp, outcome)
    y0 = outcome[0]["y"]
    m = error_metrics(y0, y64) if y0.shape == y64.shape else None
    if m is None:
        problems.insert(0, f"y has shape {list(y0.shape)}, the oracle {list(y64.shape)}")
    else:
        ok, why = judge(m, bound, "y")
        if not ok:
            problems.insert(0, why)
    for res in outcome[1:]:
        d = error_metrics(res["y"], y0) if res["y"].shape == y0.shape else None
        if d is None or not d.nonfinite_match or not d.max_abs <= bound.max_abs:
            gap = "shape" if d is None else f"max|y_{res['rank']} − y_0| {d.max_abs:.3g}"
            problems.append(f"ranks disagree after the all-reduce: {gap} > bound {bound.max_abs:.3g}")
            break
    status = "fail" if problems else "pass"
    return TPVerdict(job, tp, status, "; ".join(problems), m, base, bound, rows)


def verify_tp(jobs: list[TPJob], tp: int, **run_kw) -> list[TPVerdict]:
    """Run the jobs on P ranks and judge each."""
    from .runner import run_jobs

    outcomes = run_jobs(jobs, tp, **run_kw)
    return [judge_job(job, tp, out) for job, out in zip(jobs, outcomes)]

