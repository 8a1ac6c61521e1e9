"""A predicted GPU time for a Triton launch: each bench row beside its measured time, the
committed H200 sweep, and today's default launches (docs/kernels.md, "A predicted H200 time").

The model — two tuned constants, the iteration's fixed latency and its cost per element a
thread holds; nothing else measured but the copy bandwidth:

  1. bytes: the traffic model of `lrkv.bench.traffic.predict` (loads + stores) for the shape and
     the launch;
  2. occupancy: the blocks per SM of the compiled kernel — registers, warps and shared memory
     (`lrkv.kernels.occupancy`: the running Triton's compile report, or a compile now) — so the
     grid runs in waves = ⌈programs / (SMs × blocks per SM)⌉, a partial last wave costing a
     whole one;
  3. Little's law per program: the split loop holds one tile's loads in flight per iteration
     (bytes in flight = BLOCK_T × the slot's shared K, V and the group's latents), and an
     iteration is a dependent chain — the load, the products, the softmax update — that takes
         iteration = TILE_LATENCY_S + ISSUE_S_PER_ELEMENT × the tile's elements per thread
     (BLOCK_T × (2·BLOCK_D + 2·the private columns) / (32 × warps)), so a program streams at
     most tile bytes / iteration; the programs running at once share at most the copy bandwidth:
         per program = min(tile bytes / iteration, copy bandwidth / running programs);
  4. time = waves × (bytes / programs) / per program.

So a launch goes faster with more resident programs (registers, shared memory), larger tiles
and whole waves, until the copy bandwidth binds. Warps enter through the blocks that fit
only: the H200 ran a 4-warp program beside another faster than one 8-warp program alone on
an SM (both 8 resident warps) — the iteration is a dependent chain each program walks by
itself. Spills are not in the bytes: the 4-warp launches spilled 3–5× the stack of the 8-warp
ones and ran faster, so the spilled registers stay in L1.

On the 2026-12-04 sweep (`SWEEP_COMPILED`, its launches compiled as they ran) this ranks the
16 launches with Kendall τ = 0.82, where the model it replaced (bandwidth × occupancy / 0.5 from
registers and warps) had 0.25; see docs/kernels.md for where it is wrong.

    python3 -m lrkv.bench.prediction    # today's default launches at B=8, T=32K, bf16, per committed report
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

from ..kernels.occupancy import REPORT_DIR, compiled_usage, kernels_sha256

H200_SMS = 132
ROOT = REPORT_DIR.parents[1]
SWEEP_COMPILED = ROOT / "ci" / "gpu-results" / "2026-12-04" / "sweep-compiled-triton3.6.0.json"
# The iteration time, calibrated on two points of the 2026-12-04 H200 sweep (sweep.json; wide,
# group 9, 2 programs per SM asked for, 272 programs, registers from sweep-compiled-triton3.6.0):
#   16 slots x 8 warps, 80 elements per thread: one block per SM (profile.log), 3 waves of 121
#     tiles in 2.128 ms -> 5.86 us per iteration;
#   32 slots x 4 warps, 320 elements per thread: two blocks per SM, 2 waves of 61 tiles in
#     1.278 ms -> 10.48 us.
# The two tuned constants; the other 14 points test them. The ranking hardly moves with them
# (τ 0.82 for any single iteration time from 4 to 12 us), the absolute times do.
_ITER_16x8, _ITER_32x4 = 2.1278e-3 / (3 * 121), 1.2784e-3 / (2 * 61)
ISSUE_S_PER_ELEMENT = (_ITER_32x4 - _ITER_16x8) / (320 - 80)  # 19 ns per element a thread holds
TILE_LATENCY_S = _ITER_16x8 - 80 * ISSUE_S_PER_ELEMENT  # 4.3 us: the chain's fixed part
H200_COPY_BANDWIDTH = 4.2396e12  # bytes/s: the 2026-12-04 run's device-to-device copy (sweep.json)
VARIANT_OF_BACKEND = {"triton": "contiguous", "triton-paged": "paged", "triton-rope": "rope", "triton-fp8": "fp8"}


def waves(programs: int, n_sms: int, blocks: int) -> int:
    """Whole waves: ⌈programs / (SMs × blocks per SM)⌉."""
    return -(-programs // (n_sms * blocks))


def tile_bytes(shape, cfg) -> int:
    """Bytes one program loads per tile: BLOCK_T slots of the shared K and V and of its
    group's latents (the cache; the bases and q are loaded once per program)."""
    return cfg.block_t * (2 * shape.d_h + 2 * cfg.group_size * shape.r) * shape.cache_bytes


def iteration_time(cfg) -> float:
    """Seconds of one split-loop iteration (module doc): the fixed latency, plus the issue
    time of the elements of the padded tile — shared K and V, the private K and V columns
    (the wide tile's G·r, per head G × r, padded) — each thread holds."""
    columns = cfg.block_gr if cfg.private == "wide" else cfg.group_size * cfg.block_r
    per_thread = cfg.block_t * (2 * cfg.block_d + 2 * columns) / (32 * cfg.num_warps)
    return TILE_LATENCY_S + ISSUE_S_PER_ELEMENT * per_thread


def predict_time(bytes_moved: int, copy_bandwidth: float, programs: int, blocks_per_sm: int, tile: int,
                 iteration_s: float, n_sms: int = H200_SMS) -> dict:
    """Seconds for a launch moving `bytes_moved` in `programs` programs, `blocks_per_sm` of
    which an SM holds, each loading `tile` bytes per loop iteration of `iteration_s` (module
    doc), with the terms it is made of."""
    if bytes_moved < 0 or copy_bandwidth <= 0 or programs < 1 or tile < 1 or iteration_s <= 0 or n_sms < 1:
        raise ValueError("bytes >= 0, copy bandwidth and iteration time > 0, programs, tile bytes and SMs >= 1")
    if blocks_per_sm < 1:
        raise ValueError("the kernel does not fit one SM (0 blocks per SM)")
    running = min(programs, n_sms * blocks_per_sm)
    per_program = min(tile / iteration_s, copy_bandwidth / running)
    w = waves(programs, n_sms, blocks_per_sm)
    seconds = w * (bytes_moved / programs) / per_program
    return dict(seconds=seconds, bytes=bytes_moved, programs=programs, blocks_per_sm=blocks_per_sm, waves=w,
                tile_bytes=tile, iteration_s=iteration_s, per_program=per_program,
                bound="copy" if per_program * running >= copy_bandwidth else "iteration", n_sms=n_sms)


def kendall_tau(x, y) -> float:
    """Kendall's τ-b of two equally long sequences (ties counted as scipy.stats.kendalltau
    does): +1 when they rank alike, −1 reversed."""
    conc = disc = only_x = only_y = 0
    for i in range(len(x)):
        for j in range(i + 1, len(x)):
            dx, dy = (x[i] > x[j]) - (x[i] < x[j]), (y[i] > y[j]) - (y[i] < y[j])
            if dx and dy:
                conc, disc = conc + (dx == dy), disc + (dx != dy)
            else:
                only_x, only_y = only_x + bool(dx), only_y + bool(dy)
    return (conc - disc) / math.sqrt((conc + disc + only_x) * (conc + disc + only_y))


# ----------------------------------------------------------------------------- a launch
def launch_shape(scale: str, B: int, T: int, *, cache_bytes: int = 2, rope_exact=False, paged=False,
                 fp8_granularity: str = ""):
    """The traffic model's Shape of B full sequences of T slots at a paper scale."""
    from ..spec import preset
    from .traffic import Shape

    spec = preset(scale).spec("lrkv")
    return Shape(spec.n_heads, spec.head_dim, spec.rank, (T,) * B, (T,) * B, cache_bytes=cache_bytes,
                 rope_exact=rope_exact, paged=paged, fp8_granularity=fp8_granularity)


def predict_launch(shape, cfg, blocks_per_sm: int, copy_bandwidth: float, n_sms: int = H200_SMS) -> dict:
    """predict_time for a launch (`cfg`: a LaunchConfig or its dict's namespace) over `shape`."""
    from .traffic import predict

    return predict_time(predict(shape, cfg)["moved"], copy_bandwidth, shape.rows * cfg.n_groups * cfg.num_splits,
                        blocks_per_sm, tile_bytes(shape, cfg), iteration_time(cfg), n_sms)


def predict_sweep(path: Path = SWEEP_COMPILED) -> list[tuple[float, float]]:
    """(predicted, measured) seconds of each point of a compiled sweep (`ci/compile-report
    --sweep`): its launches at their compiled occupancy, its run's copy bandwidth."""
    doc = json.loads(Path(path).read_text())
    shape = launch_shape(doc["scale"], doc["batch"], doc["seq_len"])
    return [(predict_launch(shape, SimpleNamespace(**p["launch"]), p["blocks_per_sm"], doc["copy_bandwidth"],
                            doc["n_sms"])["seconds"], p["time_s"]) for p in doc["points"]]


# ----------------------------------------------------------------------------- a bench row
def row_shape(row):
    """The traffic model's Shape of a bench row: B full sequences of T slots."""
    from .traffic import FP8_GRANULARITY

    variant = VARIANT_OF_BACKEND[row.backend]
    return launch_shape(row.scale, row.batch, row.seq_len, cache_bytes=1 if variant == "fp8" else 2,
                        rope_exact=variant == "rope", paged=variant == "paged",
                        fp8_granularity=FP8_GRANULARITY if variant == "fp8" else "")


def row_variant(row):
    """The compile_check Variant of a bench row's launch."""
    from ..kernels.occupancy import Variant
    from ..spec import preset

    spec = preset(row.scale).spec("lrkv")
    variant = VARIANT_OF_BACKEND[row.backend]
    kw = dict(rope_exact=variant == "rope", paged=variant == "paged")
    if variant == "fp8":
        from .backends import FP8_GRANULARITY

        kw.update(fp8="e4m3", fp8_granularity=FP8_GRANULARITY)
    return Variant.from_launch(SimpleNamespace(**row.launch), r=spec.rank, d_h=spec.head_dim, dtype=row.dtype, **kw)


def predict_row(row, copy_bandwidth: float, *, n_sms: int = H200_SMS, usage=None) -> dict:
    """The prediction of one Triton row (predict_time's terms, plus the compiled kernel's
    registers and their source); {'why': ...} when there is none. usage: Variant ->
    (compiled usage dict or None, source); default `lrkv.kernels.occupancy.compiled_usage`."""
    usage = usage or compiled_usage
    if row.backend not in VARIANT_OF_BACKEND or not row.launch:
        return {"why": "not a Triton row with a launch shape"}
    if not copy_bandwidth:
        return {"why": "no copy bandwidth measured"}
    compiled, source = usage(row_variant(row))
    if compiled is None or not compiled.get("blocks_per_sm"):
        return {"why": source if compiled is None else f"{source}: no block fits an SM"}
    cfg = SimpleNamespace(**row.launch)
    return dict(predict_launch(row_shape(row), cfg, compiled["blocks_per_sm"], copy_bandwidth, n_sms),
                registers=compiled["reg"], num_warps=cfg.num_warps, registers_from=source)


def add_predictions(result, *, n_sms: int | None = None) -> None:
    """Fill `predicted_s` and `prediction` of every timed GPU Triton row that has none."""
    names = {f.name for f in fields(result.rows[0])} if result.rows else set()
    if "predicted_s" not in names:
        return
    if n_sms is None:
        n_sms = H200_SMS
        try:
            import torch

            if torch.cuda.is_available():
                n_sms = torch.cuda.get_device_properties(0).multi_processor_count
        except Exception:  # noqa: BLE001
            pass
    for row in result.rows:
        if row.device != "cuda" or row.status != "ok" or row.predicted_s is not None or not row.launch:
            continue
        if row.backend not in VARIANT_OF_BACKEND:
            continue
        row.prediction = predict_row(row, result.machine.copy_bandwidth or 0.0, n_sms=n_sms)
        row.predicted_s = row.prediction.get("seconds")


# ----------------------------------------------------------------------------- today's defaults
DEFAULTS_B, DEFAULTS_T = 8, 32768


def predict_defaults(report_path: Path, copy_bandwidth: float = H200_COPY_BANDWIDTH) -> list[dict]:
    """The predicted H200 time of the default decode launch (bf16, no RoPE) at B=8, T=32K for
    both paper scales, as the report's Triton picks and compiles it: its variant and blocks
    per SM from the report, the split count `pick_launch` makes from those."""
    import torch

    from ..kernels.compile_check import SCALES
    from ..kernels.launch import pick_launch
    from ..spec import preset

    report = json.loads(Path(report_path).read_text())
    out = []
    for scale in SCALES:
        name = f"decode {scale} bf16 rope=none"
        entry = next(e for e in report["entries"] if e.get("default") and name in e["launches"])
        v, spec = SimpleNamespace(**entry["variant"]), preset(scale).spec("lrkv")
        cfg = pick_launch(B=DEFAULTS_B, H=spec.n_heads, d_h=spec.head_dim, r=spec.rank, slots=DEFAULTS_T,
                          dtype=torch.bfloat16, device=torch.device("cpu"), group_size=v.group, block_t=v.block_t,
                          num_warps=v.num_warps, private=v.private, programs_per_sm=entry["blocks_per_sm"],
                          sm90_sms=H200_SMS)
        shape = launch_shape(scale, DEFAULTS_B, DEFAULTS_T)
        p = predict_launch(shape, cfg, entry["blocks_per_sm"], copy_bandwidth)
        out.append(dict(p, scale=scale, triton=report["triton"], launch=name, group=cfg.group_size,
                        n_groups=cfg.n_groups, block_t=cfg.block_t, num_warps=cfg.num_warps,
                        num_splits=cfg.num_splits, reg=entry["reg"], stack=entry["stack"], shared=entry["shared"],
                        warps_per_sm=entry["warps_per_sm"], fresh=report["kernels_sha256"] == kernels_sha256(),
                        command=report["command"]))
    return out


def defaults_markdown(rows: list[dict]) -> str:
    lines = ["| scale | Triton | launch (G x groups, tile x warps, splits) | reg | stack | shared | blocks/SM "
             "| waves | predicted ms | GB/s | bound |", "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---|"]
    for r in rows:
        lines.append(f"| {r['scale']} | {r['triton']} | {r['group']} x {r['n_groups']}, {r['block_t']} x "
                     f"{r['num_warps']}, {r['num_splits']} | {r['reg']} | {r['stack']} | {r['shared']} | "
                     f"{r['blocks_per_sm']} | {r['waves']} | {r['seconds'] * 1e3:.3f} | "
                     f"{r['bytes'] / r['seconds'] / 1e9:,.0f} | {r['bound']} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="The predicted H200 time of today's default decode launches "
                                             f"(bf16, B={DEFAULTS_B}, T={DEFAULTS_T}), per committed compile report")
    ap.add_argument("--reports", nargs="*", type=Path, help="compile reports (default: every committed one)")
    args = ap.parse_args(argv)
    reports = args.reports or sorted(REPORT_DIR.glob("compile-check-sm90-triton*.json"))
    rows = [r for path in reports for r in predict_defaults(path)]
    stale = sorted({r["command"] for r in rows if not r["fresh"]})
    if stale:
        print("stale compile report(s), of another kernel source; regenerate first:\n  " + "\n  ".join(stale))
        return 1
    print(f"Predicted H200 time (lrkv.bench.prediction: copy {H200_COPY_BANDWIDTH / 1e9:,.0f} GB/s, an iteration "
          f"{TILE_LATENCY_S * 1e6:.2f} us + {ISSUE_S_PER_ELEMENT * 1e9:.1f} ns per element a thread holds), "
          f"kernels sha256 {kernels_sha256()[:12]}:\n")
    print(defaults_markdown(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
