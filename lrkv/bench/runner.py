"""Run a grid: for each (scale, B, T), time every family x backend side by side.

Per shape: draw each spec's inputs once (lrkv and lrkv-mat share theirs), prepare every
row (compile on first use, two warm-up calls), then sample all rows in interleaved rounds
(`lrkv.bench.timing`) and derive bytes, bandwidth and the ratios to MHA. Inputs are freed
before the next shape. A row that cannot run becomes a skipped or error row with the
reason — a benchmark table that silently drops rows reads as a result it is not.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass

import torch

from ..spec import decode_arithmetic_ratio, dtype_name, preset
from .backends import step_backends
from .families import (
    BASELINE, FAMILIES, make_inputs, payload_ratio, read_bytes, temporaries_bytes,
)
from .grid import BenchGrid
from .machine import available_memory, describe_machine, measure
from .result import BenchResult, BenchRow
from .roofline import H200_SIMT, H200_TENSOR, machine_roof, summary
from .targets import check_targets
from .timing import MIN_SAMPLE_S, cpu_sampler, gpu_sampler, interleave, round_ratios

# dynamo's default per-code recompile limit (8) is plenty for one callable per (family,
# scale) — at most 4 compiles: B = 1 / B > 1, T <= 4096 / T > 4096 (lrkv.bench.backends) —
# but hitting it must fail loudly: past the limit dynamo would silently run eager code in
# a row labelled "inductor".
DYNAMO_CONFIG = dict(fail_on_recompile_limit_hit=True)


@dataclass
class RunOptions:
    device: str = "cpu"  # cpu | cuda
    dtype: torch.dtype = torch.float32  # storage + compute dtype of every step
    # None: inductor on CPU; inductor, triton, sdpa on CUDA. Built-in names, users'
    # 'package.module:attribute' backends, or backends step_backends built (lrkv.bench.backends).
    backends: list | None = None
    threads: int | None = None  # torch intra-op threads (None: torch's default)
    formulation: str = "bench"  # bench (time-major steps) | reference (the references' einsums)
    memory_fraction: float = 0.5  # of the available memory one shape may use
    min_sample_s: float = MIN_SAMPLE_S
    seed: int = 0
    measure_machine: bool = True  # copy bandwidth + GEMM peak (a few seconds)
    budget_s: float | None = None  # start no new shape after this many seconds (the rest: skipped rows)
    checkpoint: Callable[[list[BenchRow]], None] | None = None  # called with the rows so far after each shape


class Reporter:
    """Progress callbacks (duck-typed: the CLI passes a rich progress bar with these methods)."""

    def start(self, total_rows: int) -> None: ...

    def row_started(self, description: str) -> None: ...

    def rows_finished(self, rows: list[BenchRow]) -> None: ...


def _row(scale, fam, backend, opts, B, T, spec) -> BenchRow:
    return BenchRow(scale=scale, family=fam.name, backend=backend, device=opts.device, dtype=dtype_name(opts.dtype),
                    batch=B, seq_len=T, spec=spec.short())


def _sync(device: str) -> None:
    if device == "cuda":
        torch.cuda.synchronize()


def _plan(grid: BenchGrid, backends, device: str):
    """(family, backend, skip reason or "") for every row the grid makes on this device."""
    avail = {b.name: b.available(device) for b in backends}
    plan = []
    for name in grid.families:
        fam = FAMILIES[name]
        for b in backends:
            if not b.supports(fam)[0]:
                continue  # no row: e.g. the Triton kernel has no MHA
            ok, why = avail[b.name]
            plan.append((fam, b, "" if ok else why))
    return plan


def run_bench(grid: BenchGrid, options: RunOptions | None = None, reporter: Reporter | None = None) -> BenchResult:
    opts = options or RunOptions()
    rep = reporter or Reporter()
    if opts.device == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device 'cuda' requested but torch sees no CUDA device")
    threads_before = torch.get_num_threads()
    if opts.threads:
        torch.set_num_threads(opts.threads)
    try:
        return _run(grid, opts, rep)
    finally:
        torch.set_num_threads(threads_before)  # a library call must not change the caller's torch


def _run(grid: BenchGrid, opts: RunOptions, rep: Reporter) -> BenchResult:
    threads = torch.get_num_threads()
    grid = grid.for_device(opts.device)
    machine = describe_machine(opts.device, threads=threads)
    if opts.measure_machine:
        machine = measure(machine, opts.dtype)
    backends = step_backends(opts.device, opts.backends, formulation=opts.formulation, dtype=opts.dtype)
    plan = _plan(grid, backends, opts.device)
    avail = available_memory(opts.device)
    budget = int(opts.memory_fraction * avail) if avail else None
    rep.start(len(plan) * len(grid.shapes()))
    rows: list[BenchRow] = []
    t_start = time.monotonic()
    with torch._dynamo.config.patch(**DYNAMO_CONFIG):
        for scale_label, B, T in grid.shapes():
            if opts.budget_s is not None and time.monotonic() - t_start > opts.budget_s:
                shape_rows = _skipped_shape(preset(scale_label), B, T, plan, opts,
                                            f"time budget of {opts.budget_s:g} s spent (--budget-s)")
            else:
                shape_rows = _run_shape(preset(scale_label), B, T, plan, opts, grid.rounds, budget, machine, rep)
            rows += shape_rows
            rep.rows_finished(shape_rows)
            if opts.checkpoint:
                opts.checkpoint(rows)
    result = BenchResult(
        machine=machine, rows=rows,
        grid=dict(asdict(grid), device=opts.device, dtype=dtype_name(opts.dtype),
                  backends=[b.name for b in backends], formulation=opts.formulation, threads=threads,
                  memory_budget=budget),
    )
    check_targets(result)
    here = machine_roof(machine, dtype_name(opts.dtype))
    result.roofline = summary([H200_TENSOR, H200_SIMT] + ([here] if here else []),
                              [preset(s) for s in grid.scales], list(grid.seq_lens))
    return result


def _skipped_shape(scale, B, T, plan, opts: RunOptions, reason: str) -> list[BenchRow]:
    out = []
    for fam, b, why in plan:
        row = _row(scale.label, fam, b.name, opts, B, T, fam.spec(scale))
        row.status, row.reason = "skipped", why or reason
        out.append(row)
    return out


def _run_shape(scale, B, T, plan, opts: RunOptions, rounds: int, budget, machine, rep: Reporter) -> list[BenchRow]:
    specs = {fam.name: fam.spec(scale) for fam, _, _ in plan}
    rows = {(fam.name, b.name): _row(scale.label, fam, b.name, opts, B, T, specs[fam.name]) for fam, b, _ in plan}
    for (fam, b, why) in plan:
        if why:
            rows[fam.name, b.name].status, rows[fam.name, b.name].reason = "skipped", why
    live = [(fam, b) for fam, b, why in plan if not why]
    # Memory: each distinct spec's inputs once (all rows of a shape are timed together), plus
    # the row's own temporaries while it runs; rows that do not fit are skipped, not the shape.
    by_spec = {specs[f.name].short(): specs[f.name] for f, _ in live}
    base = sum(read_bytes(s, B, T, opts.dtype)["total"] for s in by_spec.values())
    fits = []
    for f, b in live:
        need = base + temporaries_bytes(f, specs[f.name], B, T, opts.dtype)
        extra = getattr(b, "extra_bytes", None)  # e.g. the paged copy of the cache
        need += extra(specs[f.name], B, T, opts.dtype) if extra else 0
        if budget is not None and need > budget:
            rows[f.name, b.name].status = "skipped"
            rows[f.name, b.name].reason = (f"needs ~{need / 2**30:.1f} GiB, budget {budget / 2**30:.1f} GiB "
                                           "(--memory-fraction)")
        else:
            fits.append((f, b))
    live = fits
    if not live:
        return list(rows.values())
    by_spec = {specs[f.name].short(): specs[f.name] for f, _ in live}

    try:
        inputs = {sid: make_inputs(s, B, T, dtype=opts.dtype, device=opts.device, seed=opts.seed)
                  for sid, s in by_spec.items()}
    except (MemoryError, RuntimeError) as e:  # out of memory drawing the inputs: this shape's rows only
        if opts.device == "cuda":
            torch.cuda.empty_cache()
        for f, b in live:
            rows[f.name, b.name].status = "error"
            rows[f.name, b.name].reason = f"inputs: {type(e).__name__}: {e}"[:300]
        return list(rows.values())
    samplers = {}
    for fam, b in live:
        row, spec = rows[fam.name, b.name], specs[fam.name]
        rep.row_started(f"{scale.label} B={B} T={T} {fam.name}/{b.name}: prepare")
        try:
            t0 = time.perf_counter()  # on a GPU prepare compiles and captures the CUDA graph
            prepared = b.prepare(fam, spec, inputs[spec.short()], opts.device)
            prepared.call()  # compile (first use) + run
            _sync(opts.device)
            row.compile_s = time.perf_counter() - t0
            prepared.call()
            _sync(opts.device)
        except Exception as e:  # noqa: BLE001 — one broken row must not lose the table
            row.status, row.reason = "error", f"{type(e).__name__}: {e}"
            continue
        row.note = prepared.note
        if hasattr(b, "launch_config"):
            try:
                row.launch = b.launch_config(inputs[spec.short()], spec)
            except Exception as e:  # noqa: BLE001 — informational; the timing stands
                row.note += f"; launch shape unknown ({type(e).__name__})"
        if opts.device == "cuda":
            samplers[fam.name, b.name] = gpu_sampler(prepared.call)
        else:
            samplers[fam.name, b.name] = cpu_sampler(prepared.call, threads=machine.threads,
                                                     min_sample_s=opts.min_sample_s)
    rep.row_started(f"{scale.label} B={B} T={T}: timing {len(samplers)} rows x {rounds} rounds")
    try:
        samples = interleave(samplers, rounds) if samplers else {}
    except Exception as e:  # noqa: BLE001 — e.g. out of memory while timing: this shape's rows only
        samples = {}
        for key in samplers:
            rows[key].status, rows[key].reason = "error", f"timing: {type(e).__name__}: {e}"[:300]
    _fill(rows, samples, specs, opts, B, T, machine, {b.name: getattr(b, "cache", None) for _, b, _ in plan})
    del inputs, samplers
    gc.collect()
    if opts.device == "cuda":
        torch.cuda.empty_cache()
    return list(rows.values())


def _fill(rows: dict, samples: dict, specs: dict, opts: RunOptions, B: int, T: int, machine,
          caches: dict | None = None) -> None:
    """Times, bytes, bandwidth and the ratios to MHA for every row that was sampled (caches:
    backend -> how its cache is stored, for an fp8 row's bytes; read_bytes)."""
    mha_spec = specs.get(BASELINE)
    mha_bytes = read_bytes(mha_spec, B, T, opts.dtype)["total"] if mha_spec else None
    for key, s in samples.items():
        row, spec = rows[key], specs[key[0]]
        nb = read_bytes(spec, B, T, opts.dtype, (caches or {}).get(key[1]))
        row.time_s, row.time_min_s, row.spread, row.samples_s = s.median, s.min, s.spread, list(s.values)
        row.bytes_payload, row.bytes_weights, row.bytes_total = nb["payload"], nb["weights"], nb["total"]
        row.bandwidth = nb["total"] / s.median
        if machine.copy_bandwidth:
            row.bandwidth_frac = row.bandwidth / machine.copy_bandwidth
        row.payload_ratio = payload_ratio(spec)
        row.bytes_ratio = nb["total"] / mha_bytes if mha_bytes else None
        # lrkv-mat rebuilds every K_h, V_h element from r latents: (1 + r) x MHA's MACs.
        row.arithmetic_ratio = (1.0 + spec.rank if row.family == "lrkv-mat"
                                else float(decode_arithmetic_ratio(spec, T)))
        if opts.device == "cpu" and machine.llc_bytes and nb["total"] < machine.llc_bytes:
            row.note = (row.note + "; " if row.note else "") + "fits in LLC (timed warm)"
    # The baseline: MHA on the same backend when there is one, else the fastest MHA row.
    mha = {k[1]: s for k, s in samples.items() if k[0] == BASELINE}
    if not mha:
        return
    fastest = min(mha, key=lambda b: mha[b].median)
    for key, s in samples.items():
        base = key[1] if key[1] in mha else fastest
        rows[key].vs_mha = round_ratios(s, mha[base])
        rows[key].mha_backend = base
