"""Run cases against backends and produce one report record per (case, backend).

Per case, once: draw the inputs at τ, run the float64 reference on the rounded values and
the same-dtype eager baselines (err_base). Per backend: run it on a fresh copy of the
inputs, measure, bound, judge (DESIGN §6) and record (DESIGN §7).

err_base is the field-wise worst of two eager paths at τ with different operation orders:
the materialized path (DESIGN §6) and the factored reference math itself (FlashAttention's
`out_pt`: the reference function run at the low dtype). One order alone is a poor sample
when few outputs carry large cancelling terms (near_cancel with q×100 and one valid slot:
the two orders' errors differ by 3× either way). The layer-model level keeps the training
form only: the incremental path is what it judges.
"""

from __future__ import annotations

import math
import shlex
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from ..reference.lrkv import decode_attention, layer_forward, layer_step, materialized_decode_attention
from ..spec import as_dtype, dtype_name
from .bounds import (U64, Conditioning, ConditioningProbe, kernel_conditioning, layer_gain, oracle_check,
                     oracle_reference)
from .cases import Case, case_shapes, empty_cache, make_inputs
from .metrics import ErrorMetrics, error_metrics, json_float, worst_of
from .tolerance import Policy, Tolerance, fa3_atol, judge, make_bound

LEVEL_NEEDS = {"kernel": "kernel", "layer": "layer", "layer-model": "layer"}  # case level -> backend level
REASON_CHARS = 600  # keep reasons readable in a PR comment


@dataclass
class Prepared:
    """Everything about a case that does not depend on the backend."""

    case: Case
    inputs: object  # KernelInputs | LayerInputs | ModelInputs, at τ
    ref: dict[str, torch.Tensor]  # float64 reference outputs: out/lse or y
    base: dict[str, ErrorMetrics]  # err_base per output
    atol: dict[str, float]  # atol(τ) per output
    cond: Conditioning = field(default_factory=Conditioning)
    oracle: torch.Tensor | None = None  # the mpmath oracle's out (tiny float64 kernel cases)


def decode_sequence(step: Callable, weights, x: torch.Tensor, case: Case) -> torch.Tensor:
    """Feed x [B, T, d] one token at a time through step(weights, x_t, cache, positions).  # [B, T, d]"""
    cache = empty_cache(case, x.dtype)
    ys = []
    for t in range(x.shape[1]):
        y, cache = step(weights, x[:, t], cache, torch.full((x.shape[0],), t, dtype=torch.int64, device=x.device))
        ys.append(y)
    return torch.stack(ys, dim=1)


def kernel_reference(inp) -> tuple[dict, dict, Conditioning]:
    """float64 reference (out, lse) on kernel inputs at τ, err_base of the eager baselines at τ,
    and the conditioning for the float64 bound."""
    inp64 = inp.to(torch.float64)
    out_ref, lse_ref = inp64.call(decode_attention)
    out_m, lse_m = inp.call(materialized_decode_attention)
    out_f, lse_f = inp.call(decode_attention)
    ref = {"out": out_ref, "lse": lse_ref}
    base = {"out": worst_of(error_metrics(out_m, out_ref), error_metrics(out_f, out_ref)),
            "lse": worst_of(error_metrics(lse_m, lse_ref), error_metrics(lse_f, lse_ref))}
    return ref, base, kernel_conditioning(*inp64.args(), **inp64.kwargs())


def _layer_reference(inp) -> tuple[dict, dict, Conditioning]:
    inp64 = inp.to(torch.float64)
    probe = ConditioningProbe(decode_attention)
    y_ref, _ = layer_step(inp64.weights, inp64.x_t, inp64.cache.clone(), inp64.positions, decode=probe)
    y_m, _ = layer_step(inp.weights, inp.x_t, inp.cache.clone(), inp.positions, decode=materialized_decode_attention)
    y_f, _ = layer_step(inp.weights, inp.x_t, inp.cache.clone(), inp.positions)
    return {"y": y_ref}, {"y": worst_of(error_metrics(y_m, y_ref), error_metrics(y_f, y_ref))}, probe.cond


def _model_reference(inp, case: Case) -> tuple[dict, dict, Conditioning]:
    """The model is the training form over the whole sequence; so is its baseline."""
    inp64 = inp.to(torch.float64)
    ref = {"y": layer_forward(inp64.weights, inp64.x)}
    base = {"y": error_metrics(layer_forward(inp.weights, inp.x), ref["y"])}
    probe = ConditioningProbe(decode_attention)
    decode_sequence(lambda w, x, c, p: layer_step(w, x, c, p, decode=probe), inp64.weights, inp64.x, case)
    return ref, base, probe.cond


def prepare(case: Case) -> Prepared:
    """Draw the case's inputs and run everything that does not depend on the backend."""
    inp = make_inputs(case)
    oracle = None
    if case.level == "kernel":
        ref, base, cond = kernel_reference(inp)
        oracle = oracle_reference(inp)
    elif case.level == "layer":
        ref, base, cond = _layer_reference(inp)
    else:
        ref, base, cond = _model_reference(inp, case)
    if case.level != "kernel":
        extra, cond.gain = layer_gain(inp.weights)
        cond.n += extra
    atol = {name: fa3_atol(t, case.torch_dtype) for name, t in ref.items()}
    return Prepared(case, inp, ref, base, atol, cond, oracle)


def judge_outputs(prep: Prepared, outs: dict[str, torch.Tensor], tol: Tolerance) -> dict[str, tuple]:
    """Per output name: (metrics, bound, ok, reason) under the rule."""
    f64 = _float64_bounds(prep, tol)
    verdicts = {}
    for name, t in outs.items():
        m = error_metrics(t, prep.ref[name])
        bound = make_bound(prep.base[name], prep.atol[name], tol, None if f64 is None else f64[name])
        verdicts[name] = (m, bound, *judge(m, bound, name))
    return verdicts


# ----------------------------------------------------------------------------- one backend
def applicable(backend, case: Case) -> bool:
    """Whether the backend claims this case's level and dtype (otherwise no record at all)."""
    return LEVEL_NEEDS[case.level] in backend.levels and as_dtype(case.dtype) in tuple(backend.dtypes)


def repro_command(label: str, case: Case) -> str:
    return f"lrkv verify --backend {shlex.quote(label)} --case {shlex.quote(case.to_json())}"


def _record(case: Case, backend, label: str) -> dict:
    return {
        "key": f"{backend.name}::{case.id}", "id": case.id, "level": case.level, "backend": backend.name,
        "backend_ref": label, "dtype": case.dtype, "spec": case.spec.to_dict(), "shapes": case_shapes(case),
        "seed": case.seed, "case": case.to_dict(), "expect": case.expect, "metrics": None,
        "baseline_metrics": None, "bound": None, "ratio": None, "lse": None, "oracle": None,
        "status": "skip", "reason": "", "seconds": 0.0, "out_dtype": None, "repro": repro_command(label, case),
    }


def skip_record(case: Case, backend, label: str, reason: str) -> dict:
    rec = _record(case, backend, label)
    rec["reason"] = reason
    return rec


def _check_shape(name: str, t, shape: tuple) -> torch.Tensor:
    if not isinstance(t, torch.Tensor) or tuple(t.shape) != tuple(shape):
        got = list(t.shape) if isinstance(t, torch.Tensor) else type(t).__name__
        raise ValueError(f"backend returned {name} {got}, the contract says {list(shape)}")
    return t


def _call(prep: Prepared, backend) -> dict[str, torch.Tensor]:
    case = prep.case
    B, H, d_h, d = case.batch, case.spec.n_heads, case.spec.head_dim, case.spec.d_model
    if case.level == "kernel":
        res = prep.inputs.clone().call(backend.decode_attention)
        if not (isinstance(res, tuple) and len(res) == 2):
            raise ValueError(f"decode_attention must return (out, lse), got {type(res).__name__}")
        return {"out": _check_shape("out", res[0], (B, H, d_h)), "lse": _check_shape("lse", res[1], (B, H))}
    if case.level == "layer":
        inp = prep.inputs.clone()
        y, _ = backend.layer_step(inp.weights, inp.x_t, inp.cache, inp.positions)
        return {"y": _check_shape("y", y, (B, d))}
    y = decode_sequence(backend.layer_step, prep.inputs.weights, prep.inputs.x.clone(), case)
    return {"y": _check_shape("y", y, (B, case.t_max, d))}


def _float64_bounds(prep: Prepared, tol: Tolerance) -> dict[str, float] | None:
    if prep.case.dtype != "float64":
        return None
    out = {name: prep.cond.bound(tol.float64_c) for name in prep.ref if name != "lse"}
    if "lse" in prep.ref:  # lse = m + log l: logit error plus the rounding of log over T terms
        c = prep.cond
        out["lse"] = tol.float64_c * U64 * c.n * (1.0 + 2.0 * c.logit + math.log(prep.case.t_max + 1))
    return out


def run_case(prep: Prepared, backend, label: str, tol: Tolerance) -> dict:
    """Run one backend on a prepared case and judge it."""
    case = prep.case
    rec = _record(case, backend, label)
    if hasattr(backend, "configure"):
        backend.configure(case)
    t0 = time.perf_counter()
    try:
        outs = _call(prep, backend)
    except Exception as e:  # noqa: BLE001 — any failure of the backend is an ERROR record
        rec.update(status="error", seconds=time.perf_counter() - t0,
                   reason=f"{type(e).__name__}: {e}"[:REASON_CHARS],
                   detail="".join(traceback.format_exception(e)[-3:])[-2000:])
        return rec
    rec["seconds"] = time.perf_counter() - t0
    main = "out" if case.level == "kernel" else "y"
    rec["out_dtype"] = dtype_name(outs[main].dtype)
    verdicts = judge_outputs(prep, outs, tol)
    f64 = _float64_bounds(prep, tol)
    m, bound, ok, reason = verdicts[main]
    rec.update(metrics=m.to_dict(), baseline_metrics=prep.base[main].to_dict(), bound=bound.to_dict(),
               ratio=json_float(m.max_abs / bound.max_abs) if bound.max_abs > 0 else None)
    if "lse" in verdicts:
        lm, lb, lok, lreason = verdicts["lse"]
        rec["lse"] = {"metrics": lm.to_dict(), "baseline_metrics": prep.base["lse"].to_dict(),
                      "bound": lb.to_dict(), "status": "pass" if lok else "fail"}
        ok, reason = ok and lok, "; ".join(r for r in (reason, lreason) if r)
    if f64 is not None:
        rec["oracle"] = oracle_check(prep.oracle, outs[main], f64[main])
        if rec["oracle"] is not None and rec["oracle"]["status"] == "fail":
            ok, reason = False, "; ".join(r for r in (reason, "out: differs from the mpmath oracle") if r)
    if case.expect == "differ":
        rec["status"] = "xfail" if not ok else "fail"
        rec["reason"] = (f"expected difference (rope={case.spec.rope} is not the model): {reason}" if not ok else
                         "expected to differ from the model but matched within the bound")
    else:
        rec["status"], rec["reason"] = ("pass" if ok else "fail"), reason
    return rec


# ----------------------------------------------------------------------------- many
def backend_info(backend, label: str) -> dict:
    ok, why = backend.available()
    return {"name": backend.name, "ref": label, "available": bool(ok), "reason": why or "",
            "levels": sorted(backend.levels), "dtypes": [dtype_name(d) for d in backend.dtypes],
            "description": getattr(backend, "description", "")}


def plan(cases: Iterable[Case], backends: list[tuple[str, object]]) -> list[tuple[Case, list[tuple[str, object]]]]:
    """For each case, the backends that claim its level and dtype."""
    out = []
    for case in cases:
        users = [(label, b) for label, b in backends if applicable(b, case)]
        if users:
            out.append((case, users))
    return out


def run(cases: Iterable[Case], backends: list[tuple[str, object]], policy: Policy,
        on_step: Callable[[str], None] | None = None) -> list[dict]:
    """All records. on_step(description) is called once per (case, backend) — for a progress bar."""
    avail = {label: b.available() for label, b in backends}
    records = []
    for case, users in plan(cases, backends):
        runnable = []
        for label, b in users:
            ok, why = avail[label]
            if not ok:
                records.append(skip_record(case, b, label, f"backend unavailable: {why}"))
                continue
            sup, why = b.supports(case) if hasattr(b, "supports") else (True, "")
            if not sup:
                records.append(skip_record(case, b, label, f"unsupported: {why}"))
                continue
            runnable.append((label, b))
        prep = prepare(case) if runnable else None
        for label, b in users:
            if (label, b) in runnable:
                records.append(run_case(prep, b, label, policy.resolve(b.name, case.dtype)))
            if on_step is not None:
                on_step(f"{b.name} {case.id}")
    return records


def total_steps(cases: Iterable[Case], backends: list[tuple[str, object]]) -> int:
    return sum(len(users) for _, users in plan(cases, backends))
