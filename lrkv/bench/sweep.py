"""The launch-shape sweep of the Triton decode kernel: `lrkv bench --device cuda --sweep`.

At one shape (default: 2.5B — H=18, d_h=128, r=55 — B=8, T=32K, bf16), time the kernel
at every combination of the launch knobs

    block_t × num_warps × group_size × private × programs_per_sm

of `lrkv.kernels.decode.decode_attention`, each point a median of CUDA-graph replays with L2 flushed, like every other GPU row
(`lrkv.bench.timing.time_call`). A point whose launch fails (registers, shared memory) is
recorded with its error. A time budget stops starting new points; the rest are recorded
as skipped. The result goes to `BenchResult.sweep` (JSON) and a Markdown table.

On a CPU the sweep runs only in Triton's interpreter (TRITON_INTERPRET=1), at whatever
tiny shape the caller gives: the code path, with meaningless times.
"""

from __future__ import annotations

import itertools
import time

import torch

from ..kernels.validate import PRIVATE_CHOICES
from ..spec import dtype_name
from .families import FAMILIES, make_inputs, read_bytes
from .timing import time_call

KNOBS = ("block_t", "num_warps", "group_size", "private", "programs_per_sm")
# Run order, outermost first: programs_per_sm only changes the split count (a runtime
# argument), so its first value compiles every kernel variant and the later values reuse
# them — a time budget then cuts whole occupancy settings, not tile shapes.
RUN_ORDER = ("programs_per_sm", "group_size", "num_warps", "block_t", "private")
DEFAULT_VALUES: dict[str, tuple] = {
    "block_t": (16, 32, 64),  # the wide private tile compiles without spills at 16 (compile_check)
    "num_warps": (4, 8),
    "group_size": (6, 9, 18),  # 2.5B's H = 18: three, two or one head group(s)
    "private": ("wide", "per_head"),
    "programs_per_sm": (1, 2, 4),
}
DEFAULT_SHAPE = ("2.5B", 8, 32 * 1024)  # scale, B, T



def parse_knob(text: str) -> tuple[str, tuple]:
    """'block_t=32,64' -> ('block_t', (32, 64)); `private` takes names, the others integers >= 1."""
    name, sep, raw = text.partition("=")
    name = name.strip()
    if not sep or name not in KNOBS:
        raise ValueError(f"--sweep-knob: expected NAME=V1,V2 with NAME one of {', '.join(KNOBS)}; got {text!r}")
    parts = [p.strip() for p in raw.split(",") if p.strip()]
    if not parts:
        raise ValueError(f"--sweep-knob {name}: no values given")
    if name == "private":
        bad = [p for p in parts if p not in PRIVATE_CHOICES]
        if bad:
            raise ValueError(f"--sweep-knob private: values must be among {PRIVATE_CHOICES}, got {bad}")
        return name, tuple(parts)
    try:
        values = tuple(int(p) for p in parts)
    except ValueError:
        raise ValueError(f"--sweep-knob {name}: values must be integers, got {raw!r}") from None
    if any(v < 1 for v in values):
        raise ValueError(f"--sweep-knob {name}: values must be >= 1, got {values}")
    return name, values


def sweep_points(values: dict[str, tuple], n_heads: int) -> list[dict]:
    """Every combination of the knobs' values, in RUN_ORDER; group sizes above H are clamped
    to H (the same program), duplicates removed."""
    knobs = [k for k in RUN_ORDER if values.get(k)]
    axes = []
    for k in knobs:
        vals = values[k]
        if k == "group_size":
            vals = tuple(dict.fromkeys(min(int(v), n_heads) for v in vals))
        axes.append(vals)
    points = (dict(zip(knobs, combo)) for combo in itertools.product(*axes))
    return [{k: p[k] for k in KNOBS if k in p} for p in points]  # keys in table order


def run_sweep(scale, batch: int, seq_len: int, *, device: str, dtype: torch.dtype, copy_bandwidth: float | None,
              values: dict[str, tuple] | None = None, budget_s: float | None = None, seed: int = 0,
              progress=None) -> dict:
    """Time the kernel at every point; returns the `sweep` section of a BenchResult."""
    from .backends import TritonSteps

    values = DEFAULT_VALUES if values is None else values
    spec = FAMILIES["lrkv"].spec(scale)
    inputs = make_inputs(spec, batch, seq_len, dtype=dtype, device=device, seed=seed)
    nbytes = read_bytes(spec, batch, seq_len, dtype)["total"]
    points = sweep_points(values, spec.n_heads)
    out = dict(scale=scale.label, spec=spec.short(), batch=batch, seq_len=seq_len, device=device,
               dtype=dtype_name(dtype), bytes_total=nbytes, copy_bandwidth=copy_bandwidth,
               knobs=list(KNOBS),
               values={k: list(v) for k, v in values.items()}, points=[])
    t0 = time.monotonic()
    for i, knobs in enumerate(points):
        point = dict(knobs=knobs, status="ok", reason="", time_s=None, bandwidth=None, bandwidth_frac=None,
                     launch=None)
        out["points"].append(point)
        if budget_s is not None and time.monotonic() - t0 > budget_s:
            point["status"], point["reason"] = "skipped", f"time budget of {budget_s:g} s spent"
            continue
        if progress:
            progress(f"sweep {i + 1}/{len(points)}: {knobs}")
        try:
            steps = TritonSteps(**knobs)
            point["launch"] = steps.launch_config(inputs, spec)
            prepared = steps.prepare(FAMILIES["lrkv"], spec, inputs, device)
            point["time_s"] = time_call(prepared.call, device)
        except Exception as e:  # noqa: BLE001 — a launch that does not fit is a result, not a crash
            point["status"], point["reason"] = "error", f"{type(e).__name__}: {e}"[:300]
            if device == "cuda":
                torch.cuda.synchronize()
            continue
        point["bandwidth"] = nbytes / point["time_s"]
        if copy_bandwidth:
            point["bandwidth_frac"] = point["bandwidth"] / copy_bandwidth
    out["seconds"] = round(time.monotonic() - t0, 1)
    ok = [p for p in out["points"] if p["status"] == "ok"]
    out["best"] = min(ok, key=lambda p: p["time_s"])["knobs"] if ok else None
    del inputs
    return out


def sweep_markdown(sweep: dict) -> str:
    """The sweep as a Markdown table, fastest first; failed and skipped points listed after."""
    if not sweep:
        return ""
    knobs = sweep["knobs"]
    head = (f"**Launch-shape sweep** ({sweep['spec']}, B={sweep['batch']}, T={sweep['seq_len']}, "
            f"{sweep['device']} {sweep['dtype']}; {sweep.get('seconds', '?')} s)")
    lines = [head, ""]
    lines += ["| " + " | ".join([*knobs, "splits", "ms", "GB/s", "%copy"]) + " |",
              "|" + "---:|" * (len(knobs) + 4)]
    ok = sorted((p for p in sweep["points"] if p["status"] == "ok"), key=lambda p: p["time_s"])
    for p in ok:
        frac = "" if p["bandwidth_frac"] is None else f"{100 * p['bandwidth_frac']:.0f}"
        splits = (p["launch"] or {}).get("num_splits", "")
        lines.append("| " + " | ".join([*(str(p["knobs"][k]) for k in knobs), str(splits),
                                        f"{p['time_s'] * 1e3:.3f}", f"{p['bandwidth'] / 1e9:.0f}", frac]) + " |")
    bad = [p for p in sweep["points"] if p["status"] != "ok"]
    if bad:
        lines += ["", f"{len(bad)} point(s) not timed:"]
        lines += [f"- {p['knobs']}: {p['status']}: {p['reason']}" for p in bad[:20]]
    return "\n".join(lines) + "\n"

