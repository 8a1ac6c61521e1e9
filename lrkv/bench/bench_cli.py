"""`lrkv bench`: decode cost of LRKV against its peers, measured side by side on this machine.

    lrkv bench                     default grid (both paper scales, B 1/4, T 1K/8K/16K): ~5-10 min on a CPU
    lrkv bench --quick             CI-sized: H=18/r=55, B=1, T 1K and 8K
    lrkv bench --full              B up to 16, T to 32K (GPU: to 128K)
    lrkv bench --roofline          print the roofline note for the H200 and this machine, and exit
    lrkv bench --device cuda       on a GPU: compiled LRKV and MHA, the Triton kernel (contiguous,
                                   paged at page 16, exact RoPE), SDPA MHA and SDPA GQA at LRKV's
                                   bytes, the copy bandwidth, and the H200 speed targets
    lrkv bench --device cuda --sweep   the Triton kernel's launch-shape sweep at one shape
                                   (default 2.5B, B=8, T=32K; --scales/--batch/--seq-lens pick it)
    lrkv bench --from-json FILE    re-render a saved result (table, Markdown, plot) without timing
    lrkv bench --traffic           bytes each Triton launch loads and stores, counted in the
                                   interpreter at the GPU's launch, against the predicted bytes
                                   and the contract's payload (lrkv.bench.traffic; no GPU needed)

Writes OUT/bench.json, OUT/bench.md and OUT/bench.png (the plot needs matplotlib).
"""

from __future__ import annotations

import argparse
from dataclasses import replace
from pathlib import Path

from ..checks import arg_float, arg_in_file, arg_int, arg_out_dir

# lrkv.bench.backends.BACKEND_NAMES, spelled out: the CLI parser is built without importing torch
BACKEND_NAMES = ("inductor", "eager", "triton", "triton-paged", "triton-rope", "triton-fp8", "sdpa")

DEFAULT_OUT = "reports/bench"
EXIT_CODES = """exit codes:
  0    every row timed (and, with --check-targets, every performance target met)
  1    a row errored (--sweep: no launch shape ran), or with --check-targets a performance
       target was missed
  2    bad input: an option or the --from-json file, named in the message
  3    --device cuda, but torch sees no CUDA device here; --sweep with neither a GPU nor
       TRITON_INTERPRET=1 (the Triton kernel cannot run)
  4    not used: a timing run has nothing to verify (rows that do not fit memory are
       reported as skipped rows in the table)
  130  interrupted (Ctrl-C); no report is written (the shapes finished so far are in
       OUT/bench.partial.json)
"""


def _ints(text: str) -> tuple[int, ...]:
    """'1,4' or '1K,8K' -> (1, 4) / (1024, 8192); every value a positive integer."""
    out = []
    for raw in text.split(","):
        part = raw.strip().upper()
        mult = 1024 if part.endswith("K") else 1
        try:
            value = int(part.removesuffix("K")) * mult
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected comma-separated integers such as 1,4 or 1K,8K; "
                                             f"got {raw.strip()!r}") from None
        if value < 1:
            raise argparse.ArgumentTypeError(f"values must be >= 1, got {value}")
        out.append(value)
    return tuple(out)


def _backend(text: str) -> str:
    """A built-in bench backend's name, or a user's 'package.module:attribute' (resolved later,
    before anything runs, as `lrkv verify --backend` resolves it)."""
    value = text.strip()
    if value in BACKEND_NAMES or (":" in value and value.split(":", 1)[0] and value.split(":", 1)[1]):
        return value
    raise argparse.ArgumentTypeError(f"unknown backend {text!r}; known: {', '.join(BACKEND_NAMES)}, or a "
                                     "user's backend as 'package.module:attribute'")


def _names(text: str) -> tuple[str, ...]:
    names = tuple(p.strip() for p in text.split(",") if p.strip())
    if not names:
        raise argparse.ArgumentTypeError(f"expected comma-separated names, got {text!r}")
    return names


def register(subparsers) -> None:
    p = subparsers.add_parser("bench", help="time one decode step of LRKV and its peers side by side",
                              description=__doc__, epilog=EXIT_CODES,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    size = p.add_mutually_exclusive_group()
    size.add_argument("--quick", action="store_true", help="CI-sized grid")
    size.add_argument("--full", action="store_true", help="the full grid (long)")
    p.add_argument("--scales", type=_names, help="paper scales, e.g. 2.5B,6.3B (overrides the grid)")
    p.add_argument("--batch", type=_ints, help="batch sizes, e.g. 1,4,16")
    p.add_argument("--seq-lens", type=_ints, help="cache lengths, e.g. 1K,8K,32K")
    p.add_argument("--families", type=_names,
                   help="lrkv,lrkv-mat,mha,gqa,gqa-eq,gqa-eq8,mqa,mla,mlra (mha is always needed)")
    p.add_argument("--rounds", type=arg_int(minimum=1), help="interleaved timing rounds per shape (>= 1)")
    p.add_argument("--device", choices=("auto", "cpu", "cuda"), default="auto", help="default: cuda if present")
    p.add_argument("--backend", action="append", type=_backend, metavar="NAME|module:attr",
                   help=f"repeatable: {', '.join(BACKEND_NAMES)}, or a user's decode backend as "
                        "package.module:attribute (times its lrkv rows: decode, and its paged decode and extend "
                        "entries in its cache_layout, or a 'not timed' row; named alone, the defaults stay); "
                        "default: inductor on CPU; on CUDA all but eager")
    p.add_argument("--backend-path", action="append", default=[], metavar="DIR",
                   help="directory to import --backend modules from (the working directory is tried too)")
    p.add_argument("--dtype", help="default: float32 on CPU, bfloat16 on CUDA")
    p.add_argument("--threads", type=arg_int(minimum=1), help="torch intra-op threads (default: torch's choice)")
    p.add_argument("--formulation", choices=("bench", "reference"), default="bench",
                   help="bench: time-major steps (lrkv.bench.steps); reference: the references' einsums compiled")
    p.add_argument("--memory-fraction", type=arg_float(minimum=0.0, maximum=1.0, exclusive_minimum=True),
                   default=0.5, help="of available memory one shape may use, in (0, 1] (default 0.5)")
    p.add_argument("--out", type=arg_out_dir(), default=DEFAULT_OUT, help=f"output directory (default: {DEFAULT_OUT})")
    p.add_argument("--no-plot", action="store_true", help="skip the matplotlib plot")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.add_argument("--roofline", action="store_true", help="print the roofline note (measures this machine) and exit")
    p.add_argument("--from-json", metavar="FILE", type=arg_in_file(), help="render a saved bench.json instead of running")
    p.add_argument("--check-targets", action="store_true", help="exit 1 when a performance target is missed")
    p.add_argument("--budget-s", type=arg_float(minimum=0.0), metavar="S",
                   help="start no new shape (sweep: no new point) after S seconds; the rest become skipped rows")
    p.add_argument("--traffic", action="store_true",
                   help="count the Triton kernels' memory traffic in the interpreter (decode, paged, extend; "
                        "wide, per-head, exact RoPE; bf16 and fp8 caches) against its prediction; "
                        "--scales/--seq-lens/--batch pick the shapes (default 2.5B,6.3B; 256,1024; 2)")
    p.add_argument("--traffic-launch", choices=("gpu", "interpreter"), default="gpu",
                   help="with --traffic: the launch the GPU picks (the launch table's sm_90 row, forced; default) "
                        "or the interpreter's own")
    p.add_argument("--traffic-new-tokens", type=_ints, metavar="N,N",
                   help="with --traffic: extend's new tokens per sequence, one extend launch each (default 4)")
    p.add_argument("--traffic-paths", type=_names, metavar="P,P",
                   help="with --traffic: the private paths counted, of per_head, wide, rope (default: all)")
    p.add_argument("--json", action="store_true", help="with --traffic: print the rows as JSON instead of the table")
    p.add_argument("--sweep", action="store_true",
                   help="time the Triton kernel's launch shapes at one shape instead of the grid")
    p.add_argument("--sweep-knob", action="append", metavar="NAME=V1,V2",
                   help="with --sweep: the values of one knob (block_t, num_warps, group_size, private, "
                        "programs_per_sm); repeatable; the others keep their defaults")
    p.set_defaults(func=cmd_bench)


def _device(args) -> str:
    import torch

    if args.device == "auto":
        return "cuda" if torch.cuda.is_available() else "cpu"
    return args.device


def build_grid(args):
    from .grid import GRIDS

    grid = GRIDS["quick" if args.quick else "full" if args.full else "default"]
    changes = {k: v for k, v in dict(scales=args.scales, batches=args.batch, seq_lens=args.seq_lens,
                                     families=args.families, rounds=args.rounds).items() if v is not None}
    if changes.get("families") and "mha" not in changes["families"]:
        changes["families"] = ("mha", *changes["families"])  # the baseline every ratio needs
    # what the user names holds on every device: drop the grid's GPU replacements for it
    for name, gpu in (("batches", "gpu_batches"), ("seq_lens", "gpu_seq_lens"), ("families", "gpu_families")):
        if name in changes:
            changes[gpu] = ()
    return replace(grid, name=grid.name + ("+custom" if changes else ""), **changes) if changes else grid


def cmd_bench(args) -> int:
    try:
        return _bench(args)
    except KeyboardInterrupt:
        print("lrkv bench: interrupted")
        return 130


def _bench(args) -> int:
    from rich.console import Console

    console = Console()
    if not console.is_terminal:  # a pipe or CI log reports 80 columns; the table needs ~100
        console = Console(width=max(console.width, 120))
    if args.sweep_knob and not args.sweep:
        console.print("[red]--sweep-knob: only with --sweep[/red]")
        return 2
    if args.roofline:
        return _roofline(args, console)
    if args.json and not args.traffic:
        console.print("[red]--json: only with --traffic[/red]")
        return 2
    if args.traffic:
        return _traffic(args, Console(width=max(console.width, 140)) if not console.is_terminal else console)
    if args.sweep and not args.from_json:
        result = _sweep(args, console)
        if isinstance(result, int):
            return result
        return _emit(result, args, console)
    if args.from_json:
        from .result import BenchResult

        try:
            result = BenchResult.read_json(args.from_json)
        except (ValueError, KeyError, TypeError, AttributeError) as e:  # not JSON or an object, another schema, a missing field
            what = f"missing field {e}" if isinstance(e, KeyError) else str(e)
            console.print(f"[red]--from-json {args.from_json}: {what}[/red]", highlight=False)
            return 2
    else:
        result = _run(args, console)
        if isinstance(result, int):
            return result
    return _emit(result, args, console)


def _run(args, console):
    import torch

    from ..spec import PAPER_SCALES, as_dtype
    from ..verify.backend_registry import add_backend_path
    from .backends import step_backends
    from .runner import RunOptions, run_bench

    device = _device(args)
    if device == "cuda" and not torch.cuda.is_available():
        console.print("[red]--device cuda: torch sees no CUDA device[/red]")
        return 3
    try:
        grid = build_grid(args)
        unknown = [s for s in grid.scales if s not in PAPER_SCALES]
        if unknown:
            raise ValueError(f"--scales: unknown {unknown}; known: {', '.join(PAPER_SCALES)}")
        dtype = as_dtype(args.dtype or ("bfloat16" if device == "cuda" else "float32"))
    except (ValueError, TypeError) as e:
        console.print(f"[red]{e}[/red]")
        return 2
    try:  # a user's backend is imported and checked here, before the machine is measured
        for d in args.backend_path:
            add_backend_path(d)
        backends = step_backends(device, args.backend, formulation=args.formulation, dtype=dtype)
    except (ValueError, TypeError) as e:
        console.print(f"--backend: {e}", style="red", markup=False, highlight=False, emoji=False)
        return 2
    opts = RunOptions(device=device, dtype=dtype, backends=backends, threads=args.threads,
                      formulation=args.formulation, memory_fraction=args.memory_fraction, budget_s=args.budget_s,
                      checkpoint=_checkpoint(Path(args.out) / PARTIAL))
    _warn_if_busy(console, device, args.threads)
    console.print(f"lrkv bench: grid {grid.name} on {device} ({dtype}), {len(grid.for_device(device).shapes())} "
                  f"shapes x {len(grid.families)} families, {grid.rounds} rounds; measuring the machine first")
    if args.no_progress:
        return run_bench(grid, opts)
    with _RichReporter(console) as rep:
        return run_bench(grid, opts, rep)


def _sweep(args, console):
    """The launch-shape sweep (lrkv.bench.sweep) as a result with no grid rows."""
    import torch

    from ..kernels import runtime
    from ..spec import PAPER_SCALES, as_dtype, dtype_name
    from .machine import describe_machine, measure
    from .result import BenchResult
    from .sweep import DEFAULT_SHAPE, DEFAULT_VALUES, parse_knob, run_sweep

    device = _device(args)
    try:
        scale_label = (args.scales or (DEFAULT_SHAPE[0],))[0]
        if scale_label not in PAPER_SCALES:
            raise ValueError(f"--scales: unknown {scale_label!r}; known: {', '.join(PAPER_SCALES)}")
        dtype = as_dtype(args.dtype or ("bfloat16" if device == "cuda" else "float32"))
        values = dict(DEFAULT_VALUES, **dict(parse_knob(k) for k in args.sweep_knob or ()))
    except (ValueError, TypeError) as e:
        console.print(f"[red]{e}[/red]", highlight=False)
        return 2
    if device == "cuda" and not torch.cuda.is_available():
        console.print("[red]--device cuda: torch sees no CUDA device[/red]")
        return 3
    if device == "cpu" and runtime.mode()[0] != "interpreter":
        console.print("[red]--sweep times the Triton kernel: it needs a CUDA device (or, for a dry run of the "
                      "code path on a CPU, TRITON_INTERPRET=1)[/red]")
        return 3
    B = (args.batch or (DEFAULT_SHAPE[1],))[0]
    T = (args.seq_lens or (DEFAULT_SHAPE[2],))[0]
    machine = measure(describe_machine(device, threads=args.threads), dtype)
    console.print(f"lrkv bench --sweep: {scale_label} B={B} T={T} on {device} ({dtype_name(dtype)}); "
                  f"copy bandwidth {machine.copy_bandwidth / 1e9:.0f} GB/s")
    sweep = run_sweep(PAPER_SCALES[scale_label], B, T, device=device, dtype=dtype,
                      copy_bandwidth=machine.copy_bandwidth, values=values, budget_s=args.budget_s,
                      progress=None if args.no_progress else (lambda msg: console.print(msg, highlight=False)))
    return BenchResult(machine=machine, rows=[], sweep=sweep,
                       grid=dict(name="sweep", device=device, dtype=dtype_name(dtype), backends=["triton"]))


def _traffic(args, console) -> int:
    """`--traffic`: the interpreter's byte count of every launch beside its prediction
    (lrkv.bench.traffic); writes OUT/traffic.json and OUT/traffic.md. Exit 1 when a launch
    loads more than its prediction + 5 %."""
    import json
    import sys

    from ..kernels import runtime
    from ..spec import PAPER_SCALES
    from .traffic import N_NEW, PATHS, measure_grid, traffic_markdown, traffic_matrix_markdown, traffic_table

    unknown = [s for s in args.scales or () if s not in PAPER_SCALES]
    if unknown:
        console.print(f"[red]--scales: unknown {unknown}; known: {', '.join(PAPER_SCALES)}[/red]")
        return 2
    if runtime.interpreter_problem() is not None or runtime.triton_version() is None:
        console.print(f"[red]--traffic counts in Triton's interpreter: {runtime.interpreter_problem() or 'no triton'}"
                      "[/red]", highlight=False)
        return 3
    scales = args.scales or ("2.5B", "6.3B")
    seq_lens = args.seq_lens or (256, 1024)
    B = (args.batch or (2,))[0]

    def progress(row):
        if not args.no_progress and not args.json:
            console.print(f"  {row.scale} T={row.seq_len} {row.call}/{row.path}/{row.cache}: "
                          f"{row.loads / row.payload:.3f}x payload ({row.seconds:.1f} s)", highlight=False)

    new_tokens = args.traffic_new_tokens or (N_NEW,)
    if too_many := [n for n in new_tokens if n > min(seq_lens) // 2]:
        console.print(f"[red]--traffic-new-tokens {too_many}: at most half the shortest --seq-lens "
                      f"({min(seq_lens) // 2})[/red]", highlight=False)
        return 2
    paths = args.traffic_paths or PATHS
    if unknown := [p for p in paths if p not in PATHS]:
        console.print(f"[red]--traffic-paths: unknown {unknown}; known: {', '.join(PATHS)}[/red]", highlight=False)
        return 2
    rows = measure_grid(scales, seq_lens, B=B, launch_from=args.traffic_launch, progress=progress,
                        new_tokens=new_tokens, paths=paths)
    doc = {"schema": "lrkv.traffic/1", "batch": B, "launch": args.traffic_launch, "rows": [r.to_dict() for r in rows]}
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "traffic.json").write_text(json.dumps(doc, indent=1) + "\n")
    (out / "traffic.md").write_text(traffic_matrix_markdown(rows) + "\n\n" + traffic_markdown(rows) + "\n")
    over = [r for r in rows if r.loads > 1.05 * r.predicted["loads"]]
    if args.json:
        sys.stdout.write(json.dumps(doc, indent=1) + "\n")
    else:
        console.print(traffic_table(rows))
        console.print(f"B={B}, lengths T and 3/4 T; launch: {args.traffic_launch}; ratios of the payload (cache "
                      "bytes of the valid tokens + the bases + q, out, lse); meas/pred: measured / predicted loads",
                      highlight=False)
        console.print(f"{len(rows) - len(over)}/{len(rows)} launches load at most their prediction + 5 %; "
                      f"JSON: {out / 'traffic.json'}", highlight=False)
    return 1 if over else 0


PARTIAL = "bench.partial.json"  # the rows so far, rewritten after every shape; removed once bench.json is written


def _checkpoint(path: Path):
    """Write the rows so far after each shape, so a run killed by a timeout keeps what it measured."""
    import json

    def write(rows) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"schema": "lrkv.bench-partial/1", "rows": [r.to_dict() for r in rows]}, indent=1))
        tmp.replace(path)

    return write


def _warn_if_busy(console, device: str, threads: int | None) -> None:
    """Other work on the CPU makes OpenMP kernels wait at every barrier: say so up front."""
    import os

    import torch

    try:
        load = os.getloadavg()[0]
    except (AttributeError, OSError):
        return
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if device == "cpu" and load > 0.5 * cores and (threads or torch.get_num_threads()) > 1:
        console.print(f"[yellow]note: load average {load:.1f} on {cores} cores — other work is running; "
                      f"multi-threaded CPU timings will be noisy (try --threads 1, more --rounds)[/yellow]")


def _emit(result, args, console) -> int:
    from .plot import plot_result
    from .prediction import add_predictions
    from .render import footnotes, headline, markdown_table, rich_tables, targets_markdown
    from .roofline import render
    from .sweep import sweep_markdown

    add_predictions(result)  # GPU Triton rows, fresh or read back: the traffic model's time beside the measured
    for table in rich_tables(result):
        console.print(table)
    for line in footnotes(result):
        console.print(line, highlight=False)
    for line in headline(result):
        console.print(line, highlight=False)
    out = Path(args.out)
    if not args.from_json:
        console.print(f"JSON: {result.write_json(out / 'bench.json')}")
        (out / PARTIAL).unlink(missing_ok=True)
    md = out / "bench.md"
    md.parent.mkdir(parents=True, exist_ok=True)
    parts = [markdown_table(result), "\n".join(headline(result)), targets_markdown(result),
             sweep_markdown(result.sweep)]
    if result.roofline:
        parts.append("```\n" + render(result.roofline) + "\n```")
    md.write_text("\n\n".join(p for p in parts if p) + "\n")
    if result.sweep:
        console.print(sweep_markdown(result.sweep), highlight=False, markup=False)
    console.print(f"Markdown: {md}")
    if not args.no_plot and result.rows:
        _, message = plot_result(result, out / "bench.png")
        console.print(message)
    errors = any(r.status == "error" for r in result.rows) or (
        bool(result.sweep) and not any(p["status"] == "ok" for p in result.sweep["points"]))
    missed = args.check_targets and any(r.target == "MISS" for r in result.rows)
    return 1 if errors or missed else 0


def _roofline(args, console) -> int:
    import torch

    from ..spec import PAPER_SCALES, as_dtype
    from .machine import describe_machine, measure
    from .roofline import H200_SIMT, H200_TENSOR, machine_roof, render, summary

    device = _device(args)
    if device == "cuda" and not torch.cuda.is_available():
        console.print("[red]--device cuda: torch sees no CUDA device[/red]")
        return 3
    try:
        dtype = as_dtype(args.dtype or ("bfloat16" if device == "cuda" else "float32"))
        unknown = [s for s in args.scales or () if s not in PAPER_SCALES]
        if unknown:
            raise ValueError(f"--scales: unknown {unknown}; known: {', '.join(PAPER_SCALES)}")
    except (ValueError, TypeError) as e:
        console.print(f"[red]{e}[/red]")
        return 2
    if args.threads:
        torch.set_num_threads(args.threads)
    console.print("measuring this machine (copy bandwidth, GEMM peak) ...")
    machine = measure(describe_machine(device), dtype)
    roofs = [H200_TENSOR, H200_SIMT, machine_roof(machine, str(dtype).removeprefix("torch."))]
    scales = [PAPER_SCALES[s] for s in (args.scales or ("2.5B", "6.3B"))]
    console.print(render(summary(roofs, scales, list(args.seq_lens or (8192, 131072)))), highlight=False)
    return 0


class _RichReporter:
    """A rich progress bar over rows, with one summary line per finished shape."""

    def __init__(self, console):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = console
        self.progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=console, transient=True)
        self.task = None

    def __enter__(self):
        self.progress.__enter__()
        return self

    def __exit__(self, *exc):
        return self.progress.__exit__(*exc)

    def start(self, total_rows: int) -> None:
        self.task = self.progress.add_task("starting", total=total_rows)

    def row_started(self, description: str) -> None:
        self.progress.update(self.task, description=description)

    def rows_finished(self, rows) -> None:
        self.progress.advance(self.task, len(rows))
        ok = [r for r in rows if r.status == "ok" and r.vs_mha is not None]
        if rows:
            r0 = rows[0]
            cells = ", ".join(f"{r.family}{'' if r.backend == 'inductor' else '/' + r.backend} {r.vs_mha:.2f}"
                              for r in ok if r.family != "mha")
            self.progress.console.print(f"{r0.scale} B={r0.batch} T={r0.seq_len}: x MHA  {cells}", highlight=False)
