"""Kernel benchmark: the fused split-K factored decode vs torch SDPA decode for MHA.

    python3 -m lrkv.kernels.bench --out DIR [--budget-s 180] [--no-sweep]
    python3 -m lrkv.kernels.bench --out DIR --smoke      # CPU: tiny sizes, interpreter

For each LRKV shape (H=18, d_h=128, r=55 and H=32, d_h=128, r=54), batch B in {1, 8, 16}
and cache length T in {4K, 16K, 32K, 128K} at bfloat16, every sequence full:

  * time of one decode step (median of triton.testing.do_bench, L2 flushed between runs),
    measured on a CUDA-graph replay so that Python and launch overhead do not count — the
    wrapper's own overhead is reported separately as `eager_ms`;
  * bytes: `bytes_unique` = what the step must read at least (shared K/V once, the H·r
    latents per token for K and V, q, B_h, the output); `bytes_model` = what this kernel
    reads (the shared stream once per head group);
  * achieved bandwidth = bytes_unique / time, and its fraction of the device's peak;
  * torch SDPA decode for MHA at the same H, d_h (q [B, H, 1, d_h] over K/V [B, H, T, d_h]):
    time, bytes (2·B·H·T·d_h elements) and bandwidth; `speedup` = sdpa_ms / lrkv_ms.

Then the cost of exact RoPE (the O(T·r·d_h) per-head contraction) at one size, and a
small sweep of launch shapes (block_t, num_warps, group_size) at one size.

Results go to DIR/kernel_bench.json (written after every measurement, so a timeout keeps
what was done) and DIR/kernel_bench.md. A time budget stops new measurements early.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from dataclasses import asdict, dataclass

import torch

from . import runtime

SHAPES = {  # name -> (H, d_h, r)
    "lrkv-H18-dh128-r55": (18, 128, 55),
    "lrkv-H32-dh128-r54": (32, 128, 54),
}
BATCHES = (1, 8, 16)
LENGTHS = (4096, 16384, 32768, 131072)
PEAK_BYTES_PER_S = {"H200": 4.8e12, "H100": 3.35e12, "A100": 2.0e12}  # HBM, from vendor sheets
SWEEP = dict(shape="lrkv-H18-dh128-r55", B=8, T=32768,
             block_t=(16, 32, 64), num_warps=(4, 8), group_size=(9, 18))


@dataclass
class Row:
    kind: str  # "lrkv" | "sweep" | "rope-exact"
    shape: str
    B: int
    T: int
    H: int
    d_h: int
    r: int
    dtype: str
    lrkv_ms: float | None = None
    lrkv_ms_p20: float | None = None
    lrkv_ms_p80: float | None = None
    eager_ms: float | None = None  # the Python wrapper call, launch overhead included
    bytes_unique: int = 0
    bytes_model: int = 0
    lrkv_gbps: float | None = None
    lrkv_peak_frac: float | None = None
    sdpa_ms: float | None = None
    sdpa_bytes: int = 0
    sdpa_gbps: float | None = None
    sdpa_backend: str = ""
    speedup: float | None = None  # sdpa_ms / lrkv_ms
    cache_ratio: float | None = None  # LRKV cache bytes per token / MHA cache bytes per token
    launch: dict | None = None
    baseline_ms: float | None = None  # rope-exact rows: the same size with rope none
    error: str = ""


def _peak(name: str) -> float | None:
    for key, v in PEAK_BYTES_PER_S.items():
        if key in name:
            return v
    return None


def _time_ms(fn, *, smoke: bool) -> tuple[float, float, float]:
    """(median, p20, p80) in ms of fn(), L2 flushed between calls (triton.testing.do_bench)."""
    if smoke:
        fn()
        t0 = time.perf_counter()
        fn()
        ms = (time.perf_counter() - t0) * 1e3
        return ms, ms, ms
    import triton.testing

    q = triton.testing.do_bench(fn, warmup=10, rep=60, quantiles=[0.5, 0.2, 0.8])
    return float(q[0]), float(q[1]), float(q[2])


def _graphed(fn, smoke: bool):
    """fn captured in a CUDA graph (replay excludes Python/launch overhead); fn itself on CPU."""
    if smoke:
        return fn
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()  # compile + warm up outside the capture
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def _inputs(B, T, H, d_h, r, dtype, device, seed=0):
    g = torch.Generator(device=device).manual_seed(seed)

    def rn(*shape, std=1.0):
        return torch.randn(*shape, generator=g, device=device, dtype=dtype) * std

    return dict(
        q=rn(B, H, d_h), shared_k=rn(B, T, d_h), shared_v=rn(B, T, d_h),
        latent_k=rn(B, T, H, r), latent_v=rn(B, T, H, r),
        basis_k=rn(H, d_h, r, std=r ** -0.5), basis_v=rn(H, d_h, r, std=r ** -0.5),
        lengths=torch.full((B,), T, dtype=torch.int32, device=device),
    )


def _lrkv_bytes(B, T, H, d_h, r, elt, n_groups) -> tuple[int, int]:
    per_token = (2 * d_h + 2 * H * r) * elt  # shared K, V once + per-head latents of K and V
    fixed = (B * H * d_h * 2 + 2 * H * d_h * r) * elt + B * 4  # q, out, B_h^K, B_h^V, lengths
    unique = B * T * per_token + fixed
    model = unique + B * T * 2 * d_h * elt * (n_groups - 1)  # shared stream re-read per group
    return unique, model


def _decode_fn(inp, scale, rope=None, **launch):
    from .decode import decode_attention

    return lambda: decode_attention(inp["q"], inp["shared_k"], inp["shared_v"], inp["latent_k"], inp["latent_v"],
                                    inp["basis_k"], inp["basis_v"], inp["lengths"], scale=scale, rope=rope,
                                    check=False, **launch)


def bench_lrkv(shape, B, T, *, dtype, device, smoke, kind="lrkv", rope=None, **launch) -> Row:
    from .decode import pick_launch

    H, d_h, r = SHAPES[shape] if not smoke else SMOKE_SHAPES[shape]
    elt = torch.empty((), dtype=dtype).element_size()
    row = Row(kind, shape, B, T, H, d_h, r, str(dtype).removeprefix("torch."))
    inp = _inputs(B, T, H, d_h, r, dtype, device)
    scale = d_h ** -0.5
    cfg = pick_launch(B=B, H=H, d_h=d_h, r=r, slots=T, dtype=dtype, device=torch.device(device), **launch)
    row.launch = {k: v for k, v in asdict(cfg).items()}
    fn = _decode_fn(inp, scale, rope=rope, **launch)
    row.lrkv_ms, row.lrkv_ms_p20, row.lrkv_ms_p80 = _time_ms(_graphed(fn, smoke), smoke=smoke)
    row.eager_ms = _time_ms(fn, smoke=smoke)[0]
    row.bytes_unique, row.bytes_model = _lrkv_bytes(B, T, H, d_h, r, elt, cfg.n_groups)
    row.lrkv_gbps = row.bytes_unique / (row.lrkv_ms * 1e-3) / 1e9
    peak = _peak(torch.cuda.get_device_name()) if device == "cuda" else None
    row.lrkv_peak_frac = row.bytes_unique / (row.lrkv_ms * 1e-3) / peak if peak else None
    row.cache_ratio = (2 * d_h + 2 * H * r) / (2 * H * d_h)
    del inp
    return row


def bench_sdpa(row: Row, *, dtype, device, smoke) -> None:
    import torch.nn.functional as F

    B, T, H, d_h = row.B, row.T, row.H, row.d_h
    elt = torch.empty((), dtype=dtype).element_size()
    g = torch.Generator(device=device).manual_seed(1)
    q = torch.randn(B, H, 1, d_h, generator=g, device=device, dtype=dtype)
    k = torch.randn(B, H, T, d_h, generator=g, device=device, dtype=dtype)
    v = torch.randn(B, H, T, d_h, generator=g, device=device, dtype=dtype)
    fn = lambda: F.scaled_dot_product_attention(q, k, v)  # noqa: E731
    row.sdpa_ms = _time_ms(_graphed(fn, smoke), smoke=smoke)[0]
    row.sdpa_bytes = (2 * B * H * T * d_h + 2 * B * H * d_h) * elt
    row.sdpa_gbps = row.sdpa_bytes / (row.sdpa_ms * 1e-3) / 1e9
    row.speedup = row.sdpa_ms / row.lrkv_ms if row.lrkv_ms else None
    row.sdpa_backend = _sdpa_backend_name(q, k, v) if not smoke else "cpu"
    del q, k, v


def _sdpa_backend_name(q, k, v) -> str:
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
    except ImportError:
        return "unknown"
    import torch.nn.functional as F

    for name in ("FLASH_ATTENTION", "CUDNN_ATTENTION", "EFFICIENT_ATTENTION"):
        be = getattr(SDPBackend, name, None)
        if be is None:
            continue
        try:
            with sdpa_kernel([be]):
                F.scaled_dot_product_attention(q, k, v)
            return name.lower()  # the first that runs is what the default dispatcher prefers
        except RuntimeError:
            continue
    return "math"


SMOKE_SHAPES = {"lrkv-H18-dh128-r55": (5, 32, 7), "lrkv-H32-dh128-r54": (6, 32, 6)}


def _env(device: str) -> dict:
    env = dict(python=platform.python_version(), torch=torch.__version__, triton=runtime.triton_version(),
               mode=runtime.mode()[0], device=torch.cuda.get_device_name() if device == "cuda" else "cpu",
               cuda=torch.version.cuda)
    env["peak_bytes_per_s"] = _peak(env["device"])
    return env


def _markdown(result: dict) -> str:
    rows = result["rows"]
    lines = [f"# LRKV fused decode vs SDPA (MHA) — {result['env']['device']}", "",
             f"torch {result['env']['torch']}, triton {result['env']['triton']}, mode {result['env']['mode']}; "
             "times are medians of CUDA-graph replays with L2 flushed; GB/s = bytes_unique / time.", "",
             "| shape | B | T | LRKV ms | LRKV GB/s | % peak | SDPA ms | SDPA GB/s | speedup | bytes LRKV/MHA |",
             "|---|---|---|---|---|---|---|---|---|---|"]
    f = lambda x, p=3: "—" if x is None else f"{x:.{p}g}"  # noqa: E731
    for r in rows:
        if r["kind"] != "lrkv":
            continue
        if r["error"]:
            lines.append(f"| {r['shape']} | {r['B']} | {r['T']} | error: {r['error'][:80]} |||||||")
            continue
        pk = "—" if r["lrkv_peak_frac"] is None else f"{100 * r['lrkv_peak_frac']:.0f}%"
        lines.append(f"| {r['shape']} | {r['B']} | {r['T']} | {f(r['lrkv_ms'])} | {f(r['lrkv_gbps'], 4)} | {pk} | "
                     f"{f(r['sdpa_ms'])} | {f(r['sdpa_gbps'], 4)} | {f(r['speedup'])} | {f(r['cache_ratio'])} |")
    sweep = [r for r in rows if r["kind"] == "sweep" and not r["error"]]
    if sweep:
        lines += ["", f"## Launch-shape sweep ({SWEEP['shape']}, B={SWEEP['B']}, T={SWEEP['T']})", "",
                  "| block_t | num_warps | group_size | ms | GB/s |", "|---|---|---|---|---|"]
        for r in sorted(sweep, key=lambda r: r["lrkv_ms"]):
            L = r["launch"]
            lines.append(f"| {L['block_t']} | {L['num_warps']} | {L['group_size']} | {f(r['lrkv_ms'])} | "
                         f"{f(r['lrkv_gbps'], 4)} |")
    rope = [r for r in rows if r["kind"] == "rope-exact" and not r["error"]]
    if rope:
        lines += ["", "## Exact RoPE (rotated private keys rebuilt per tile)", ""]
        for r in rope:
            lines.append(f"- {r['shape']} B={r['B']} T={r['T']}: {f(r['lrkv_ms'])} ms "
                         f"(rope none: {f(r['baseline_ms'])} ms)")
    errors = [r for r in rows if r["error"]]
    if errors:
        lines += ["", f"{len(errors)} measurement(s) failed; see kernel_bench.json."]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="LRKV fused decode benchmark (time, bandwidth, vs SDPA)")
    ap.add_argument("--out", default=os.environ.get("OUT", "./gpu-out"), help="output folder")
    ap.add_argument("--budget-s", type=float, default=240.0, help="stop starting new measurements after this")
    ap.add_argument("--batches", type=int, nargs="*", default=list(BATCHES))
    ap.add_argument("--lengths", type=int, nargs="*", default=list(LENGTHS))
    ap.add_argument("--shapes", nargs="*", default=list(SHAPES), choices=list(SHAPES))
    ap.add_argument("--no-sdpa", action="store_true")
    ap.add_argument("--no-sweep", action="store_true")
    ap.add_argument("--smoke", action="store_true", help="tiny sizes on CPU through the interpreter")
    args = ap.parse_args(argv)

    os.makedirs(args.out, exist_ok=True)
    json_path = os.path.join(args.out, "kernel_bench.json")
    t_start = time.monotonic()
    dtype = torch.bfloat16
    if args.smoke:
        device = "cpu"
        batches, lengths = [1], [64]
    else:
        if not torch.cuda.is_available():
            msg = "no CUDA device: the kernel benchmark needs a GPU (try --smoke for a CPU dry run)"
            print(msg)
            with open(json_path, "w") as f:
                json.dump({"skipped": msg}, f)
            return 0
        device = "cuda"
        batches, lengths = args.batches, args.lengths

    rows: list[Row] = []
    result = {"schema": "lrkv.kernel-bench/1", "env": {}, "rows": []}

    def save():
        result["rows"] = [asdict(r) for r in rows]
        result["seconds"] = round(time.monotonic() - t_start, 1)
        with open(json_path, "w") as f:
            json.dump(result, f, indent=1)
        with open(os.path.join(args.out, "kernel_bench.md"), "w") as f:
            f.write(_markdown(result))

    def out_of_time() -> bool:
        return time.monotonic() - t_start > args.budget_s

    def attempt(make_row, label: str, kind: str = "lrkv") -> Row | None:
        if out_of_time():
            print(f"[bench] budget of {args.budget_s:.0f}s used: skipping {label}", flush=True)
            return None
        t0 = time.monotonic()
        try:
            row = make_row()
        except Exception as e:  # noqa: BLE001 — OOM or a launch failure is recorded, not fatal
            row = Row(kind, label, 0, 0, 0, 0, 0, "bfloat16", error=f"{type(e).__name__}: {e}"[:500])
        if device == "cuda":
            torch.cuda.empty_cache()
        rows.append(row)
        save()
        print(f"[bench] {label}: {row.lrkv_ms} ms lrkv, {row.sdpa_ms} ms sdpa, "
              f"{row.lrkv_gbps and round(row.lrkv_gbps)} GB/s {row.error} ({time.monotonic() - t0:.1f}s)", flush=True)
        return row

    with runtime.interpreter() if args.smoke else _null():
        result["env"] = _env(device)
        for shape in args.shapes:
            for B in batches:
                for T in lengths:
                    def one(shape=shape, B=B, T=T):
                        row = bench_lrkv(shape, B, T, dtype=dtype, device=device, smoke=args.smoke)
                        if not args.no_sdpa:
                            bench_sdpa(row, dtype=dtype, device=device, smoke=args.smoke)
                        return row
                    attempt(one, f"{shape} B={B} T={T}")
        from ..reference.rope import ExactRope

        for shape in args.shapes[:1]:
            B, T = (8, 32768) if not args.smoke else (1, 64)
            base = next((r for r in rows if r.kind == "lrkv" and r.shape == shape and r.B == B and r.T == T
                         and r.lrkv_ms), None)

            def exact(shape=shape, B=B, T=T, base=base):
                row = bench_lrkv(shape, B, T, dtype=dtype, device=device, smoke=args.smoke, kind="rope-exact",
                                 rope=ExactRope())
                row.baseline_ms = base.lrkv_ms if base else None
                return row
            attempt(exact, f"exact RoPE {shape} B={B} T={T}", kind="rope-exact")
        if not args.no_sweep:
            s = SWEEP
            T = s["T"] if not args.smoke else 64
            for bt in s["block_t"]:
                for nw in s["num_warps"]:
                    for gs in s["group_size"]:
                        if args.smoke:
                            gs = min(gs, SMOKE_SHAPES[s["shape"]][0])
                        attempt(lambda bt=bt, nw=nw, gs=gs: bench_lrkv(
                            s["shape"], s["B"] if not args.smoke else 1, T, dtype=dtype, device=device,
                            smoke=args.smoke, kind="sweep", block_t=bt, num_warps=nw, group_size=gs),
                            f"sweep block_t={bt} num_warps={nw} group_size={gs}", kind="sweep")
    save()
    n_err = sum(1 for r in rows if r.error)
    print(f"[bench] {len(rows)} measurements, {n_err} failed, {result['seconds']}s -> {json_path}")
    return 1 if rows and n_err == len(rows) else 0


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    sys.exit(main())
