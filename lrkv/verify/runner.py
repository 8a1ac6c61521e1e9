"""Run cases against backends and produce one report record per (case, backend).

Per case, once (`prepare`): draw the inputs at τ; run every oracle path of the case's level
(levels.py) in float64 on the rounded values; require the paths to agree within the float64
rounding bound (and, on tiny kernel shapes, the mpmath oracle) — otherwise every backend's
record is ERROR "oracle inconsistent" and nothing is judged; then run each path again at
the precision each output is produced in (τ for out/y, the accumulation dtype for lse)
against its OWN float64 run: err_base is the worst of those (DESIGN §6).

Per backend (`run_case`): call it on a fresh copy of the inputs, in the run's worker process
(isolation.py) with the policy's per-case time limit; check what came back (tensors, real floating dtype, the
input's device, the contract's shapes and dtypes); measure; record the evidence; and let
`tolerance.judge_record` — the same function the gate re-runs — decide the status.

Every (case, backend) pair yields a record: a case the backend does not implement, at a
dtype it does not support, or while it is unavailable is a skip with its reason, never
dropped; a case the backend declines (supports() false, or its dtype) is also run at its
twin — the nearest variant the backend supports, every non-capability feature kept
(twins.py) — recorded beside the skip; anything the backend raises (SystemExit included) is an
ERROR record, and so is a crash of the worker (the signal or exit code named; a fresh worker
takes the next call); a backend that hangs gets an ERROR record, its worker is killed, and it
is not called again in this run.
"""

from __future__ import annotations

import math
import shlex
import time
import warnings
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from ..reference.fp8 import FP8_WEIGHT_PHASES
from ..spec import as_dtype, dtype_name
from ..reference.cache_layouts import DEFAULT as DEFAULT_LAYOUT
from ..reference.cache_layouts.pool_views import VIEWS
from .protocol import cache_layout, check_available, fp8_claims, pool_views
from .bounds import U64, Conditioning, oracle_reference
from .case import Case, case_shapes
from .levels import get_level
from .cells import failing_cells
from .metrics import ErrorMetrics, error_metrics, json_float, locate, unnamed, worst_of
from .tolerance import Policy, Tolerance, fa3_atol, judge, judge_record, make_bound, ulp
from .coverage import declined
from .twins import changes_text, find_twin, forced_changes, twin_id
from .isolation import Calls, Timeout, WorkerDied, default_mode, unusable
from .server_properties import required as prop_required
from .server_properties import (FIRST_DRAW_FAILED, NEED_A_PASSING_CASE, NO_SECOND_DRAW, declarations, named_tensors,
                                plan, second_draws, selected)
from .isolation import call_in_thread

REASON_CHARS = 600  # keep reasons readable in a PR comment
ORACLE_TOLERANCE_KEY = "oracle"  # the policy is resolved for this pseudo-backend for the oracle's own checks


@dataclass
class Prepared:
    """Everything about a case that does not depend on the backend."""

    case: Case
    inputs: object  # the level's input bundle, at τ
    ref: dict[str, torch.Tensor]  # float64 reference outputs (the level's first path)
    base: dict[str, ErrorMetrics]  # err_base per output
    atol: dict[str, float]  # atol per output, at its own magnitude and dtype
    expected: dict[str, tuple]  # output -> (shape, dtype) of the contract
    cond: Conditioning = field(default_factory=Conditioning)
    float64: dict[str, float] | None = None  # float64 rounding bound per output (τ = float64)
    oracle: torch.Tensor | None = None  # the mpmath oracle's out (tiny float64 kernel cases)
    inconsistent: str = ""  # why the oracle paths disagree ('' when they agree)
    quantization_cost: dict | None = None  # an fp8 case's cost (max_abs, mean_abs, SQNR), never gated


def float64_bounds(case: Case, cond: Conditioning, names: Iterable[str], c: float) -> dict[str, float]:
    """The a-priori float64 rounding bound of each output (bounds.py)."""
    out = {}
    for name in names:
        if name == "lse":  # lse = m + log l: logit error plus the rounding of log over T terms
            out[name] = c * U64 * cond.n * (1.0 + 2.0 * cond.logit + math.log(case.t_max + 1))
        else:
            out[name] = cond.bound(c)
    return out


def logit_rounding(cond: Conditioning, acc_dtype: torch.dtype) -> float:
    """One rounding of the largest logit term at the accumulation precision.

    A logit is a sum of terms (Eq. 6: the shared q·s_j and the private (q B_h)·z_j), each
    known only to about ulp(|term|) in the dtype the scores accumulate in — and the terms can
    be far larger than their sum (nearly cancelling keys, queries ×100: terms of ~10^2-10^3
    whose float32 rounding moves a correct kernel past 2×err_base). lse = m + log Σ exp(·)
    inherits that error directly; a softmax output moves by at most 2·max|δlogit|·max‖v‖.
    cond.logit bounds every term (Cauchy–Schwarz, bounds.py), so this is an a-priori allowance
    added to atol: ulp(L) for lse, V·ulp(L) for out.
    """
    if cond.logit <= 0:
        return 0.0
    return ulp(cond.logit, acc_dtype)


def _consistency(case: Case, level, f64: dict, bounds: dict[str, float], oracle) -> str:
    """'' when the oracle's float64 paths (and the mpmath oracle) agree within rounding."""
    problems = []
    for a, b in level.consistency(case):
        for name, bound in bounds.items():
            m = error_metrics(f64[a][name], f64[b][name])
            if not (m.nonfinite_match and m.max_abs <= 2.0 * bound):  # each within `bound` of the exact value
                problems.append(f"{name}: {a} vs {b} differ by {m.max_abs:.3g} (float64 rounding bound "
                                f"{2 * bound:.3g}{'' if m.nonfinite_match else ', non-finite positions differ'})")
    if oracle is not None:
        first = next(iter(f64))
        m = error_metrics(f64[first]["out"], oracle)
        if not (m.nonfinite_match and m.max_abs <= bounds["out"]):
            problems.append(f"out: {first} vs the mpmath oracle differ by {m.max_abs:.3g} (bound {bounds['out']:.3g})")
    return "; ".join(problems)


def _fp8_compute_effect(case: Case, paths: dict, inp64, f64: dict) -> dict[str, torch.Tensor]:
    """An FA3-style case's roundings on their own (fp8 compute): per output, element by
    element, the largest |rounded − exact| of the float64 paths over every rounding phase of
    the weights (fp8.FP8_WEIGHT_PHASES) — the roundings' effect free of τ's, and of where a
    kernel's running max sat. {} for a case without them."""
    if not (case.fp8 and case.fp8.compute):
        return {}
    phases = range(FP8_WEIGHT_PHASES) if "p" in case.fp8.compute else range(1)
    effect: dict[str, torch.Tensor] = {}
    for k in phases:
        for p, fn in paths.items():
            for name, t in fn(inp64, **case.fp8.reference_kw, fp8_phase=k).items():
                exact = f64[p][name]
                d = torch.where(torch.isfinite(exact) & torch.isfinite(t), (t - exact).abs(), 0.0)
                effect[name] = d if name not in effect else torch.maximum(effect[name], d)
    return effect


def _widened(low: torch.Tensor, exact: torch.Tensor, effect: torch.Tensor | None) -> torch.Tensor:
    """The τ run moved away from the exact one by `effect` (the declared roundings' own
    error): |result − exact| = |low − exact| + effect, element by element — their errors
    added, never allowed to cancel in err_base's favour or a kernel's disfavour."""
    if effect is None:
        return low
    low = low.to(torch.float64)
    direction = torch.where(low >= exact, 1.0, -1.0)
    return low + direction * effect


def prepare(case: Case, policy: Policy | None = None) -> Prepared:
    """Draw the case's inputs, run and cross-check the oracle, and measure err_base."""
    return prepare_inputs(case, get_level(case.level).make_inputs(case), policy)


def prepare_inputs(case: Case, inp, policy: Policy | None = None) -> Prepared:
    """`prepare` for given inputs at τ (a property test's transformed inputs, say)."""
    policy = policy or Policy({}, {}, {})
    c = policy.resolve(ORACLE_TOLERANCE_KEY, "float64").float64_c
    level = get_level(case.level)
    inp64 = inp.to(torch.float64)
    paths = level.paths(case)
    f64 = {name: fn(inp64) for name, fn in paths.items()}
    ref = f64[next(iter(paths))]
    expected = level.outputs(case)
    cond = level.conditioning(inp64, case)
    bounds = float64_bounds(case, cond, expected, c)
    oracle = oracle_reference(inp) if case.level == "kernel" else None
    inconsistent = _consistency(case, level, f64, bounds, oracle)
    # err_base: each path at each output's own precision against its own float64 run
    base: dict[str, ErrorMetrics] = {}
    runs = {}
    rounding = _fp8_compute_effect(case, paths, inp64, f64)
    for name, (_, dt) in expected.items():
        if dt not in runs:
            # an fp8 cache is dequantized to τ first, as the dequantize-then-attend path at τ
            # stores it, also for an output accumulated wider (lse: float32 for half inputs)
            if dt == case.torch_dtype:
                low = inp
            else:
                low = (inp.dequantize_to(case.torch_dtype) if case.cache_fp8 else inp).to(dt)
            runs[dt] = {p: fn(low) for p, fn in paths.items()}
        base[name] = worst_of(*(error_metrics(_widened(runs[dt][p][name], f64[p][name], rounding.get(name)),
                                              f64[p][name]) for p in paths))
    atol = {name: fa3_atol(ref[name], dt) for name, (_, dt) in expected.items()}
    if "out" in atol and "lse" in expected:  # scores accumulate in lse's dtype
        carried = logit_rounding(cond, expected["lse"][1])
        atol["lse"] += carried
        atol["out"] += cond.value * carried
    cost = None
    if case.cache_fp8 and level.unquantized is not None:
        # what storing the cache in fp8 costs: dequantize-then-attend at τ against the float64
        # oracle on the cache at τ before quantization (reported per case, never gated)
        main, first = next(iter(expected)), next(iter(paths))
        unquantized = paths[first](level.unquantized(case).to(torch.float64))
        m = error_metrics(runs[case.torch_dtype][first][main], unquantized[main])
        cost = {"max_abs": json_float(m.max_abs), "mean_abs": json_float(m.mean_abs), "sqnr_db": json_float(m.sqnr_db)}
    return Prepared(case, inp, ref, base, atol, expected, cond,
                    bounds if case.dtype == "float64" else None, oracle, inconsistent, cost)


# ----------------------------------------------------------------------------- records
def repro_command(label: str, case: Case) -> str:
    return f"lrkv verify --backend {shlex.quote(label)} --case {shlex.quote(case.to_json())}"


def role_of(backend) -> str:
    return "baseline" if getattr(backend, "role", "verified") == "baseline" else "verified"


def handed(inputs, backend):
    """The inputs as the backend is handed them: a paged cache in its cache_layout."""
    if not (hasattr(inputs, "cache_layout") and inputs.cache.paged):
        return inputs
    return inputs.in_layout(cache_layout(backend))


def _record(case: Case, backend, label: str) -> dict:
    paged = {"cache_layout": cache_layout(backend)} if case.pages and case.pages.size else {}
    return paged | {
        "key": f"{backend.name}::{case.id}", "id": case.id, "level": case.level, "backend": backend.name,
        "backend_ref": label, "role": role_of(backend), "dtype": case.dtype, "spec": case.spec.to_dict(),
        "shapes": case_shapes(case), "seed": case.seed, "case": case.to_dict(), "expect": case.expect,
        "outputs": None, "metrics": None, "baseline_metrics": None, "bound": None, "ratio": None, "oracle": None,
        "status": "skip", "reason": "", "seconds": 0.0, "repro": repro_command(label, case),
    }


def skip_record(case: Case, backend, label: str, reason: str) -> dict:
    rec = _record(case, backend, label)
    rec["reason"] = reason
    return rec


def error_record(case: Case, backend, label: str, reason: str, detail: str = "", seconds: float = 0.0) -> dict:
    rec = _record(case, backend, label)
    rec.update(status="error", reason=reason[:REASON_CHARS], seconds=seconds)
    if detail:
        rec["detail"] = detail[-2000:]
    return rec


def _describe(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def _namer(case: Case, output: str):
    """Index -> named position in `output` of the case's level (unnamed axes if it names none)."""
    position = get_level(case.level).position
    return unnamed if position is None else (lambda index: position(case, output, index))


def _evidence(prep: Prepared, outs: dict[str, torch.Tensor], tol: Tolerance) -> dict:
    """Per output: what the gate needs to re-judge — metrics, err_base, atol, float64 bound,
    dtypes — and where its worst element is, and for an output that fails the rule its
    failing cells (cells.py) — descriptive: the reason and the failure messages name them."""
    ev = {}
    for name, t in outs.items():
        m = error_metrics(t, prep.ref[name])
        f64 = None if prep.float64 is None else prep.float64[name]
        bound = make_bound(prep.base[name], prep.atol[name], tol, f64)
        namer = _namer(prep.case, name)
        where = locate(t, prep.ref[name], namer)
        if not judge(m, bound)[0]:  # only a failing output pays for naming its cells
            where["cells"] = failing_cells(t, prep.ref[name], bound.max_abs, bound.mean_abs, prep.case, namer)
        ev[name] = {"dtype": dtype_name(t.dtype), "expected_dtype": dtype_name(prep.expected[name][1]),
                    "metrics": m.to_dict(), "baseline_metrics": prep.base[name].to_dict(),
                    "atol": json_float(prep.atol[name]), "float64": None if f64 is None else json_float(f64),
                    "bound": bound.to_dict(), "where": where}
    return ev


def judge_outputs(prep: Prepared, outs: dict[str, torch.Tensor], tol: Tolerance) -> dict[str, tuple]:
    """Per output: (metrics, bound, ok, reason) — each output judged alone by `judge_record`
    (the one verdict of the runner and the gate: its dtype clause included)."""
    verdicts = {}
    for name, t in outs.items():
        ev = _evidence(prep, {name: t}, tol)[name]
        status, why = judge_record({"outputs": {name: ev}, "dtype": prep.case.dtype, "expect": "match",
                                    "spec": prep.case.spec.to_dict(), "oracle": None}, tol)
        f64 = None if prep.float64 is None else prep.float64[name]
        verdicts[name] = (error_metrics(t, prep.ref[name]), make_bound(prep.base[name], prep.atol[name], tol, f64),
                          status == "pass", why)
    return verdicts


def run_case(prep: Prepared, backend, label: str, tol: Tolerance, calls: Calls | None = None,
             server: tuple[list[str], Policy] | None = None) -> dict:
    """Run one backend on a prepared case and judge it (calls: where the call runs; default
    in this process, as a property or a replay outside `run` needs). server: the server
    properties to run on it (server_properties.py) and the policy for their second draw."""
    case = prep.case
    if prep.inconsistent:
        return error_record(case, backend, label, f"oracle inconsistent: {prep.inconsistent}")
    calls = calls or Calls([(label, backend)], "inprocess")
    t0 = time.perf_counter()
    expected = {name: shape for name, (shape, _) in prep.expected.items()}
    try:
        kind, outs = calls.call(label, backend, "call", (case.to_dict(), handed(prep.inputs, backend).clone(), expected),
                                tol.case_timeout)
    except Timeout as e:
        return error_record(case, backend, label, f"timeout: {e}", seconds=time.perf_counter() - t0)
    except WorkerDied as e:
        return error_record(case, backend, label, f"crashed: {e}, running case {case.id}",
                            seconds=time.perf_counter() - t0)
    except (Exception, SystemExit) as e:  # noqa: BLE001 — any failure of the backend is an ERROR record
        tb = getattr(e, "__lrkv_traceback__", None) or "".join(traceback.format_exception(e)[-3:])
        return error_record(case, backend, label, _describe(e), tb, time.perf_counter() - t0)
    seconds = time.perf_counter() - t0
    if kind == "bad":
        return error_record(case, backend, label, outs, seconds=seconds)
    rec = _record(case, backend, label)
    rec["seconds"] = seconds
    rec["outputs"] = _evidence(prep, {n: outs[n] for n in prep.expected}, tol)
    main = next(iter(prep.expected))
    mev = rec["outputs"][main]
    rec.update(metrics=mev["metrics"], baseline_metrics=mev["baseline_metrics"], bound=mev["bound"])
    rec["ratio"] = json_float(mev["metrics"]["max_abs"] / mev["bound"]["max_abs"]) \
        if mev["bound"]["max_abs"] > 0 and isinstance(mev["metrics"]["max_abs"], float) else None
    if prep.float64 is not None and prep.oracle is not None:
        m = error_metrics(outs[main], prep.oracle)
        rec["oracle"] = {"metrics": m.to_dict(), "bound": json_float(prep.float64[main])}
    rec["status"], rec["reason"] = judge_record(rec, tol)
    if prep.quantization_cost is not None:
        rec["quantization_cost"] = prep.quantization_cost
    if server is not None and server[0]:
        wanted, policy = server
        later = [p for p in wanted if p in NEED_A_PASSING_CASE] if rec["status"] != "pass" else []
        now = [p for p in wanted if p not in later]
        props = check_properties(prep, backend, label, tol, calls, now, policy) if now else {}
        rec["properties"] = {p: props[p] if p in props else not_judged(backend, p, policy) for p in wanted}
    return rec


def not_judged(backend, name: str, policy: Policy) -> dict:
    """A property of a case whose first draw already failed the rule (NEED_A_PASSING_CASE): not
    judged — a second draw (same_buffers), a compiled call or a batch variant of a wrong kernel
    fails for the same reason, and would send its reader after a server bug that is not there."""
    required = prop_required(name, declarations(backend), policy.required_properties(backend.name))
    return {"status": "skip", "required": required, "reason": FIRST_DRAW_FAILED}


def _same_shapes(a, b) -> bool:
    """Whether two input bundles' tensors have the same shapes (a second draw fits the buffers)."""
    ta, tb = named_tensors(a), named_tensors(b)
    return ta.keys() == tb.keys() and all(t.shape == tb[n].shape for n, t in ta.items())


def check_properties(prep: Prepared, backend, label: str, tol: Tolerance, calls: Calls, wanted: list[str],
                     policy: Policy) -> dict:
    """name -> {status, required, reason[, outputs]} for each wanted server property
    (server_properties.py): the bitwise ones decided in the backend's process, the ones with
    outputs (same_buffers, compiles) judged here by the tolerance rule, their evidence kept
    for the gate to re-judge."""
    case = prep.case
    wanted, second, prep_b, result = list(wanted), None, None, {}
    declared, asked = declarations(backend), policy.required_properties(backend.name)

    def must(p: str) -> bool:
        return prop_required(p, declared, asked)

    if "same_buffers" in wanted:
        for case_b in second_draws(case):
            try:
                prep_b = prepare(case_b, policy)
            except Exception:  # noqa: BLE001 — a draw the oracle cannot make: try the plain reseed
                continue
            if not prep_b.inconsistent and _same_shapes(prep.inputs, prep_b.inputs):
                second = prep_b.inputs
                break
        if second is None:
            wanted.remove("same_buffers")
            result["same_buffers"] = {"status": "skip", "required": False,
                                      "reason": NO_SECOND_DRAW}
    try:
        raw = calls.call(label, backend, "properties",
                         (case.to_dict(), handed(prep.inputs, backend), second and handed(second, backend), wanted,
                          must("batch_invariant")),
                         tol.case_timeout * (len(wanted) + 3))
    except (Exception, SystemExit, Timeout, WorkerDied) as e:  # noqa: BLE001 — recorded per property
        why = f"{'crashed' if isinstance(e, WorkerDied) else type(e).__name__}: {e}"[:REASON_CHARS]
        return result | {p: {"status": "error", "required": must(p), "reason": why} for p in wanted}
    for p in wanted:
        kind, value = raw[p]
        entry = {"required": must(p)}
        if kind == "outputs":
            target = prep_b if p == "same_buffers" else prep
            usable = unusable(value, {n: s for n, (s, _) in target.expected.items()})
            if usable:
                entry.update(status="fail", reason=usable)
            else:
                ev = _evidence(target, {n: value[n] for n in target.expected}, tol)
                status, why = judge_record({"outputs": ev, "dtype": case.dtype, "expect": "match",
                                            "spec": case.spec.to_dict(), "oracle": None}, tol)
                what = "the second draw in the same buffers" if p == "same_buffers" else "the compiled call"
                entry.update(status="pass" if status == "pass" else "fail",
                             reason="" if status == "pass" else f"{what}: {why}", outputs=ev,
                             case=target.case.to_dict())
        else:
            entry.update(status={"ok": "pass", "fail": "fail", "error": "error"}[kind], reason=value[:REASON_CHARS])
        result[p] = entry
    return result


# ----------------------------------------------------------------------------- many
def backend_info(backend, label: str) -> dict:
    try:
        ok, why = check_available(backend, label)
    except (ValueError, TypeError) as e:
        ok, why = False, str(e)
    info = {"name": backend.name, "ref": label, "role": role_of(backend), "available": bool(ok),
            "reason": why or "", "levels": sorted(backend.levels), "dtypes": [dtype_name(d) for d in backend.dtypes],
            "description": str(getattr(backend, "description", "")), "declares": declarations(backend)}
    if cache_layout(backend) != DEFAULT_LAYOUT:  # absent for the contract's own: older reports stay valid
        info["cache_layout"] = cache_layout(backend)
    if set(pool_views(backend)) != set(VIEWS):  # absent for a backend taking every view: older reports stay valid
        info["pool_views"] = list(pool_views(backend))
    formats, grans = fp8_claims(backend)
    if formats:  # absent for a backend without fp8 caches: older reports stay valid
        info.update(cache_formats=list(formats), scale_granularities=list(grans))
    device = getattr(backend, "device", None)  # where a device-generic backend runs ('cpu', 'cuda')
    if isinstance(device, str) and device:
        info["device"] = device
    return info


def not_applicable(backend, case: Case) -> str:
    """Why the backend does not claim this case ('' when it does)."""
    needs = get_level(case.level).needs
    if needs not in backend.levels:
        return f"not implemented: the case needs level {needs!r}; backend levels: {', '.join(sorted(backend.levels))}"
    if as_dtype(case.dtype) not in tuple(backend.dtypes):
        return (f"dtype {case.dtype} not supported; backend dtypes: "
                f"{', '.join(dtype_name(d) for d in backend.dtypes)}")
    if cache_layout(backend) != DEFAULT_LAYOUT and case.level == "kernel-extend" and not case.pages:
        return (f"not applicable: a contiguous cache; the backend's cache_layout {cache_layout(backend)!r} "
                "takes paged caches")
    if case.pages and case.pages.view not in pool_views(backend):
        return (f"unsupported: pool view {case.pages.view!r}; the backend takes pool views "
                f"{', '.join(pool_views(backend))}")
    if case.cache_fp8:
        formats, grans = fp8_claims(backend)
        if case.fp8.format not in formats or case.fp8.granularity not in grans:
            return (f"cache {case.cache_fp8} not supported; backend fp8 caches: "
                    + (f"{', '.join(formats)} with {', '.join(grans)} scales" if formats else "none"))
    return ""


def total_steps(cases: Iterable[Case], backends: list[tuple[str, object]]) -> int:
    return len(list(cases)) * len(backends)


def backend_accepts(b, tol: Tolerance, calls: Calls | None = None, label: str = "") -> Callable[[Case], bool]:
    """Whether backend b would run a case: its dtype is claimed and supports() says yes
    (asked through `calls`, the run's worker, when given)."""
    def accepts(case: Case) -> bool:
        if as_dtype(case.dtype) not in tuple(b.dtypes) or not_applicable(b, case):
            return False
        if not hasattr(b, "supports"):
            return True
        try:
            ok, _ = _supports(b, case, tol, calls, label)
        except (Exception, SystemExit, Timeout, WorkerDied):  # noqa: BLE001 — a supports() that fails accepts nothing
            return False
        return bool(ok)
    return accepts


def _supports(b, case: Case, tol: Tolerance, calls: Calls | None, label: str) -> tuple[bool, str]:
    """b.supports(case), which must return (bool, str): `(1, "")` or a bare True is no answer."""
    if calls is None:
        res = call_in_thread(lambda: b.supports(case), tol.case_timeout)
    else:
        res = calls.call(label, b, "supports", (case.to_dict(),), tol.case_timeout)
    if not (isinstance(res, tuple) and len(res) == 2 and isinstance(res[0], bool) and isinstance(res[1], str)):
        raise TypeError(f"backend {label or b.name!r}: supports() must return (bool, str), got {res!r}"[:300])
    return res


def twin_record(rec: dict, declined_case: Case, changes: dict) -> dict:
    """A twin's record: the twin case's record, keyed by the declined case's id (twins.py)."""
    rec = dict(rec)
    rec["id"] = twin_id(declined_case, changes)
    rec["key"] = f"{rec['backend']}::{rec['id']}"
    rec["twin"] = {"of": declined_case.id, "changes": changes_text(changes), "case": declined_case.to_dict()}
    return rec


def _run_prepared(case: Case, todo: list, policy: Policy, records: list[dict], hung: dict[str, str],
                  calls: Calls, wrap: Callable[[dict], dict] | None = None,
                  properties: Callable[[object], list[str]] | None = None) -> None:
    """Prepare the case once and run every (label, backend, tol) of todo on it."""
    try:
        prep = prepare(case, policy)
    except Exception as e:  # noqa: BLE001 — the oracle itself failed: nothing can be judged
        for label, b, _ in todo:
            rec = error_record(case, b, label, f"oracle failed: {_describe(e)}", traceback.format_exc())
            records.append(wrap(rec) if wrap else rec)
        return
    for label, b, tol in todo:
        wanted = properties(b) if properties is not None else []
        rec = run_case(prep, b, label, tol, calls, (wanted, policy) if wanted else None)
        if rec["status"] == "error" and rec["reason"].startswith("timeout:"):
            hung[label] = case.id
        records.append(wrap(rec) if wrap else rec)


def run(cases: Iterable[Case], backends: list[tuple[str, object]], policy: Policy,
        on_step: Callable[[str], None] | None = None, records: list[dict] | None = None,
        twins: bool = True, isolation: str | None = None, notes: list[str] | None = None,
        properties: bool = True, shares: dict | None = None,
        on_case: Callable[[Case, list[dict]], None] | None = None) -> list[dict]:
    """One record per (case, backend), plus a twin record per declined case (twins.py).

    on_step(description) is called after each case and backend — for a progress bar. Records
    are appended to `records` as they are made (pass a list to keep a partial result when the
    run is interrupted). twins=False records declined cases as skips only; baseline paths
    (role 'baseline') never get twins — they are the oracle's own algorithms. isolation:
    'process' (every backend call in a worker process, isolation.py) or 'inprocess'; default
    isolation.default_mode(). notes: receives what the isolation could not do (a backend
    kept in-process, and why). properties: run the server properties (server_properties.py)
    on their share of each kernel level's cases, for every verified (non-baseline) backend.
    shares: that share (server_properties.plan) counted over a larger run than `cases` — a
    shard's or a job's part of the selection must run what the whole selection would run; given,
    `cases` is consumed lazily (a job pulls its next case from a queue). on_case(case, records)
    is called after each case with the records made for it (twins included)."""
    records = [] if records is None else records
    calls = Calls(backends, isolation or default_mode())
    try:
        _run(cases, backends, policy, on_step, records, twins, calls, properties, shares, on_case)
    finally:
        calls.close()
        if notes is not None:
            notes.extend(dict.fromkeys(calls.notes))
        else:
            for note in dict.fromkeys(calls.notes):
                warnings.warn(f"lrkv isolation: {note}", RuntimeWarning, stacklevel=2)
    return records


def _run(cases, backends, policy: Policy, on_step, records: list[dict], twins: bool, calls: Calls,
         properties: bool = True, shares: dict | None = None, on_case=None) -> None:
    avail, broken = {}, {}
    for label, b in backends:
        try:
            avail[label] = check_available(b, label)
        except (ValueError, TypeError) as e:
            avail[label], broken[label] = (False, str(e)), str(e)
    hung: dict[str, str] = {}
    if shares is None:
        cases = list(cases)
        shares = plan(cases)  # every N-th small case of each kernel level (server_properties.py)
    shares = shares if properties else {}
    for case in cases:
        start = len(records)
        todo, declined_by = [], []
        wanted = None
        if case.id in shares:
            wanted = lambda b, i=shares[case.id]: selected(  # noqa: E731
                i, declarations(b), policy.required_properties(b.name)) if role_of(b) != "baseline" else []
        for label, b in backends:
            tol = policy.resolve(b.name, case.dtype)
            if label in broken:
                records.append(error_record(case, b, label, broken[label]))
                continue
            ok, why = avail[label]
            reason = (f"backend unavailable: {why}" if not ok else not_applicable(b, case))
            if not reason and label in hung:
                records.append(error_record(case, b, label, f"not run: the backend hung earlier ({hung[label]})"))
                continue
            if not reason and hasattr(b, "supports"):
                try:
                    sup, why = _supports(b, case, tol, calls, label)
                except (Exception, SystemExit, Timeout, WorkerDied) as e:  # noqa: BLE001 — incl. a non-tuple result
                    records.append(error_record(case, b, label, f"supports() failed: {_describe(e)}"))
                    continue
                reason = "" if sup else f"unsupported: {why}"
            if reason:
                rec = skip_record(case, b, label, reason)
                records.append(rec)
                if twins and declined(rec) and role_of(b) != "baseline" and label not in hung:
                    declined_by.append((label, b, tol))
                continue
            todo.append((label, b, tol))
        if todo:
            _run_prepared(case, todo, policy, records, hung, calls, properties=wanted)
        groups: list[tuple[Case, dict, list]] = []  # one prepare per distinct twin case
        for label, b, tol in declined_by:
            found = find_twin(case, backend_accepts(b, tol, calls, label), forced_changes(case, b))
            if found is None:
                continue
            twin, changes = found
            ttol = policy.resolve(b.name, twin.dtype)
            for t, ch, members in groups:
                if t == twin and ch == changes:
                    members.append((label, b, ttol))
                    break
            else:
                groups.append((twin, changes, [(label, b, ttol)]))
        for twin, changes, members in groups:  # with the declined case's properties: a level's
            # always-required ones must not go unchecked because its first case was float64
            _run_prepared(twin, members, policy, records, hung, calls,
                          wrap=lambda rec, ch=changes: twin_record(rec, case, ch), properties=wanted)
        if on_case is not None:
            on_case(case, records[start:])
        if on_step is not None:
            for label, b in backends:
                on_step(f"{b.name} {case.id}")
