"""`lrkv cache` — size a deployment: LRKV's KV cache beside MHA, GQA, MQA, MLA and MLRA.

    lrkv cache --preset 2.5B --seq-len 32K --batch 64
    lrkv cache --preset 6.3B --layers 32 --rank 54 --seq-len 8K --batch 16 --tp 4 --budget-gib 80
    lrkv cache --preset 2.5B --seq-len 32K --batch 64 --json     # one JSON object on stdout
    lrkv cache --preset 2.5B --seq-len 32K --batch 64 --dtype fp8 --scales per_token_head
    lrkv cache --heads 32 --head-dim 128 --rank 48 --layers 40 --kv-heads 8 --seq-len 32K --batch 16
    lrkv cache --heads 24 --head-dim 128 --rank 48 --layers 40 --seq-len 32K   # no --kv-heads: no GQA row

Per family: bytes per token per layer, its fraction of MHA (Eq. 9 for LRKV), the whole-model
cache (Eq. 8: N·B·T·b·elements), the bytes ONE device holds under --tp (LRKV replicates its
shared block, MLA its single latent; heads and MLRA's latent heads shard), the tokens that
fit one device's --budget-gib (LRKV's fp8 scales counted with --scales), and the physical
bytes when every cached tensor's innermost width is padded to --align. Also: the largest LRKV rank within --target of MHA's cache.
--scales (with --dtype fp8 or fp8_e5m2) adds the float32 scales of LRKV's fp8 cache at one
granularity — per_tensor, per_head, per_token, per_token_head (DESIGN §4, "FP8 caches") — and
the share of fp8's saving over bf16 that they take.
32K means 32,768 (K = 1024, M = 1024²); --seq-len and --batch are at most 2^31 - 1. Presets are
the paper's scales (Tables 5 and 7); --layers is required where Table 5 gives no layer count
(128M, 6.3B). Without --preset the model is custom: --heads, --head-dim, --rank and --layers are
required, --kv-heads is optional (GQA is a comparison row, shown only when it is given) and
--mla-latent defaults to 4·d_h; with --preset each of them replaces the preset's value
(lrkv.spec.cache_model).

A --rank past d_h is refused; a rank past the break-even rank d_h(1 − 1/H) (LRKV's cache no
smaller than MHA's), or a --target whose ceiling passes d_h (capped there) or the break-even
rank, is planned with a warning on stderr (and in the JSON's "warnings").

Exit status: 0 ok · 2 bad input (the message names the option) · 130 interrupted.
(1 a check failed, 3 a toolchain missing and 4 nothing verified do not arise: the planner
only computes.)
"""

from __future__ import annotations

import argparse
import json
import sys
from fractions import Fraction


def _count(text: str) -> int:
    from lrkv.checks import check_int

    from .planner import MAX_COUNT, parse_count
    try:
        value = parse_count("value", text)
    except (TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("value ")) from None
    if value > MAX_COUNT:  # an exact int of any size would plan; no deployment has 2^31 tokens a sequence
        raise argparse.ArgumentTypeError(f"must be at most {MAX_COUNT:,} (2^31 - 1: the decode contract's "
                                         f"lengths are int32), got {text.strip()!r}")
    try:
        return check_int("value", value, minimum=1)
    except (TypeError, ValueError) as e:
        raise argparse.ArgumentTypeError(str(e).removeprefix("value ")) from None


def _fraction(text: str) -> Fraction:
    try:
        v = Fraction(text.strip())
    except (ValueError, ZeroDivisionError):
        raise argparse.ArgumentTypeError(f"expected a fraction such as 0.5 or 1/2, got {text!r}") from None
    if not 0 < v <= 4:
        raise argparse.ArgumentTypeError(f"must be in (0, 4] (a fraction of MHA's cache), got {text!r}")
    return v


def _dtype(text: str) -> str:
    from lrkv.spec.dtypes import as_dtype
    try:
        as_dtype(text)
    except TypeError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def register(subparsers) -> None:
    from lrkv.checks import arg_float, arg_int
    from lrkv.spec.fp8_scales import GRANULARITIES
    from lrkv.spec.presets import PAPER_SCALES

    p = subparsers.add_parser("cache", help="size a deployment: KV cache of LRKV and its peers side by side",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    from lrkv.spec.planner import MAX_COUNT

    dim = arg_int(minimum=1, maximum=MAX_COUNT)
    p.add_argument("--preset", choices=sorted(PAPER_SCALES),
                   help="the paper's scale (Table 7); without it, a custom model: --heads, --head-dim, --rank, "
                        "--layers (and --kv-heads for a GQA row). With it, each of those flags replaces the "
                        "preset's value")
    p.add_argument("--heads", type=dim, help="query heads H")
    p.add_argument("--head-dim", type=dim, help="head width d_h")
    p.add_argument("--kv-heads", type=dim, help="GQA's KV heads n_kv; must divide --heads (custom model: "
                                                 "optional, the GQA row is shown only when given)")
    p.add_argument("--mla-latent", type=dim, help="MLA's latent width d_c (custom model default: 4 x d_h)")
    p.add_argument("--rank", type=arg_int(minimum=0, maximum=MAX_COUNT),
                   help="LRKV rank r, at most d_h (default: Table 7's for the preset); past the break-even "
                        "rank d_h(1 - 1/H) a warning says its cache is no smaller than MHA's")
    p.add_argument("--layers", type=dim, help="layer count N (default: Table 5's, where it has one)")
    p.add_argument("--seq-len", type=_count, required=True, help="cached tokens per sequence, e.g. 32K")
    p.add_argument("--batch", type=_count, default=1, help="concurrent sequences (default 1)")
    p.add_argument("--dtype", type=_dtype, default="bf16",
                   help="cache storage dtype: bf16, fp16, fp32, fp8 (e4m3fn), fp8_e5m2 (default bf16)")
    p.add_argument("--tp", type=arg_int(minimum=1, maximum=MAX_COUNT), default=1, help="tensor-parallel devices (default 1)")
    p.add_argument("--budget-gib", type=arg_float(minimum=0, exclusive_minimum=True),
                   help="cache memory of ONE device in GiB: report the tokens that fit")
    p.add_argument("--target", type=_fraction, default=Fraction(1, 2),
                   help="target fraction of MHA's cache for the rank ceiling (default 1/2)")
    p.add_argument("--align", type=arg_int(minimum=1, maximum=MAX_COUNT), default=16,
                   help="pad each cached tensor's innermost width to a multiple of this (default 16)")
    p.add_argument("--scales", choices=GRANULARITIES,
                   help="fp8 only: count LRKV's float32 cache scales at this granularity and their share of "
                        "the fp8 saving over bf16")
    p.add_argument("--json", action="store_true", help="print the plan as JSON (schema lrkv.cache-plan/1)")
    p.set_defaults(func=run_cli)


def _gib(n: int | None) -> str:
    return "—" if n is None else f"{n / 2**30:,.2f}"


def run_cli(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from lrkv.spec.dtypes import FP8_DTYPES, as_dtype
    from lrkv.spec.planner import GIB, plan
    from lrkv.spec.cache_model import cache_model

    err = Console(stderr=True)
    try:
        scale = cache_model(args.preset, heads=args.heads, head_dim=args.head_dim, rank=args.rank,
                            layers=args.layers, kv_heads=args.kv_heads, mla_latent=args.mla_latent)
    except ValueError as e:
        err.print(str(e), style="red", markup=False, highlight=False, soft_wrap=True)
        return 2
    n_layers = scale.n_layers
    if n_layers is None:
        err.print(f"[red]--layers is required: Table 5 gives no layer count for {scale.label}[/]")
        return 2
    if scale.n_heads % args.tp:
        err.print(f"[red]--tp {args.tp} must divide the {scale.n_heads} query heads of {scale.label}[/]")
        return 2
    budget = None if args.budget_gib is None else int(Fraction(args.budget_gib) * GIB)
    if args.scales is not None and as_dtype(args.dtype) not in FP8_DTYPES:
        err.print(f"[red]--scales needs an fp8 --dtype (fp8, fp8_e5m2), got --dtype {args.dtype}[/]")
        return 2
    try:
        result = plan(scale, n_layers=n_layers, batch=args.batch, seq_len=args.seq_len, dtype=args.dtype,
                      tp=args.tp, rank=None, budget_bytes=budget, target_fraction=args.target,
                      align=args.align, scales=args.scales)
    except (TypeError, ValueError) as e:
        err.print(f"[red]{e}[/]")
        return 2
    for w in result.warnings:  # valid, but the plan saves nothing: said on stderr, in JSON mode too
        err.print(f"warning: {w}", style="yellow", markup=False, highlight=False, soft_wrap=True)
    if args.json:
        sys.stdout.write(json.dumps(result.to_dict(), indent=1) + "\n")
        return 0
    out = Console(width=None if sys.stdout.isatty() else 160)
    title = (f"{scale.label}: N={n_layers}, H={scale.n_heads}, d_h={scale.head_dim} · B={args.batch} × "
             f"T={args.seq_len:,} · {result.dtype} · TP={args.tp} · padding to {args.align}")
    t = Table(title=title)
    for col, just in (("family", "left"), ("spec", "left"), ("B/token/layer", "right"), ("of MHA", "right"),
                      ("model GiB", "right"), ("GiB/device", "right"), ("tokens/device", "right"),
                      ("padded GiB", "right")):
        t.add_column(col, justify=just)
    for r in result.rows:
        t.add_row(r.family, r.spec, f"{r.bytes_per_token_layer:,}", f"{float(r.fraction_of_mha):.2%}",
                  _gib(r.model_bytes), _gib(r.per_device_bytes),
                  "—" if r.tokens_fit is None else f"{r.tokens_fit:,}", _gib(r.padded_bytes))
    out.print(t)
    for r in result.rows:
        if r.note:
            out.print(f"{r.family}: {r.note}")
    if scale.gqa_kv_heads is None:
        out.print("gqa: not shown (give --kv-heads to compare with GQA)")
    if budget is not None:
        out.print(f"budget: {args.budget_gib:g} GiB of cache per device")
    if result.scales is not None:
        sp = result.scales
        out.print(f"lrkv fp8 scales ({sp.granularity}, float32): {sp.bytes_per_token_layer:,} B/token/layer + "
                  f"{sp.bytes_per_layer:,} B/layer = {_gib(sp.model_bytes)} GiB for the model, "
                  f"{float(sp.share_of_saving):.2%} of LRKV's fp8 saving over bf16 "
                  f"({sp.saving_per_token_layer:,} B/token/layer, {_gib(sp.saving_model_bytes)} GiB)")
    c = float(result.target_fraction)
    out.print(f"LRKV rank ceiling for ≤ {c:.2%} of MHA: "
              + (f"r ≤ {result.rank_ceiling} (= d_h: every rank fits)" if result.rank_ceiling_capped
                 else f"r ≤ {result.rank_ceiling} (floor(d_h(c − 1/H)), Eq. 9)" if result.rank_ceiling is not None
                 else f"none (below the shared-block floor 1/H = {1 / scale.n_heads:.2%})"))
    return 0
