"""`lrkv export`: build a verified engine, or re-check one.

    lrkv export --engine onnx|aoti|tensorrt [--spec ...|--preset ...] [--level layer|kernel]
                [--dtype float32|float64] [--t-min N] [--t-max N] [--b-max N] [--opset 18]
                [--weights inputs|embedded] [--weights-seed N] [--external-data] --out DIR
    lrkv export --check ARTIFACT

Exit codes: 0 released / check passed, 1 verification or check failed (nothing released),
2 bad arguments, 3 the engine's toolchain is missing here (the message says what).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from ..spec import AttentionSpec, preset
from . import progress
from .config import DEFAULT_OPSET, ENGINES, LEVELS, WEIGHT_MODES, ExportConfig
from .engine import EngineUnavailable

DEFAULT_SPEC = dict(n_heads=4, head_dim=32, rank=8)  # small enough to verify in seconds on a laptop
_ALIASES = {"H": "n_heads", "d_h": "head_dim", "r": "rank", "d": "d_model", "theta": "rope_theta"}


def parse_spec(text: str | None, preset_label: str | None) -> AttentionSpec:
    """--spec as JSON (or @file.json) or as 'H=4,d_h=32,r=8,rope=exact,qk_norm=1'; --preset a paper scale."""
    if text and preset_label:
        raise ValueError("give --spec or --preset, not both")
    if preset_label:
        return preset(preset_label).spec("lrkv")
    if not text:
        return AttentionSpec.lrkv(**DEFAULT_SPEC)
    if text.startswith("@"):
        text = Path(text[1:]).read_text()
    if text.lstrip().startswith("{"):
        data = json.loads(text)
    else:
        data = {}
        for item in filter(None, (p.strip() for p in text.split(","))):
            k, sep, v = item.partition("=")
            if not sep:
                raise ValueError(f"--spec item {item!r} is not key=value")
            data[_ALIASES.get(k.strip(), k.strip())] = v.strip()
    data.setdefault("family", "lrkv")
    for k in ("n_heads", "head_dim", "rank", "d_model"):
        if k in data and isinstance(data[k], str):
            data[k] = int(data[k])
    for k in ("rope_theta", "norm_eps"):
        if k in data and isinstance(data[k], str):
            data[k] = float(data[k])
    if isinstance(data.get("qk_norm"), str):
        data["qk_norm"] = data["qk_norm"].lower() in ("1", "true", "yes")
    return AttentionSpec.from_dict(data)


def register(subparsers) -> None:
    p = subparsers.add_parser("export", help="export a verified ONNX / AOTInductor / TensorRT engine",
                              description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine", choices=ENGINES, help="engine to build")
    p.add_argument("--check", metavar="ARTIFACT", help="re-verify an exported artifact against its manifest")
    p.add_argument("--spec", help="LRKV spec: JSON, @file.json, or 'H=4,d_h=32,r=8,rope=exact,qk_norm=1'")
    p.add_argument("--preset", help="a paper scale (128M, 512M, 1.2B, 2.5B, 6.3B)")
    p.add_argument("--level", choices=LEVELS, default="layer", help="layer_step (default) or decode_attention")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--t-min", type=int, default=1, help="smallest cache length T_max accepted (default 1)")
    p.add_argument("--t-max", type=int, default=256, help="largest cache length T_max accepted (default 256)")
    p.add_argument("--b-max", type=int, default=16, help="largest batch accepted (default 16)")
    p.add_argument("--opset", type=int, default=DEFAULT_OPSET,
                   help="ONNX opset (default 18, decomposed; 23 uses native RMSNormalization for the q norm)")
    p.add_argument("--weights", choices=WEIGHT_MODES, default="inputs",
                   help="layer level: weights as engine inputs (default) or embedded as constants")
    p.add_argument("--weights-seed", type=int, default=0, help="seed of init_lrkv_weights for --weights embedded")
    p.add_argument("--external-data", action="store_true",
                   help="ONNX with embedded weights: store them in <artifact>.data beside the model")
    p.add_argument("--seeds", default="0", help="comma-separated verification seeds (default 0)")
    p.add_argument("--policy", help="tolerance policy TOML (default: ci/tolerance.toml if present, as lrkv verify)")
    p.add_argument("--out", help="output directory for artifact, manifest and report")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from .check import check_artifact  # heavy imports only when the verb runs
    from .export import export_engine

    progress.QUIET = bool(args.quiet)
    try:
        if args.check:
            ok, problems = check_artifact(args.check, args.policy)
            for line in problems:
                print(f"CHECK FAIL: {line}")
            print(f"{'OK' if ok else 'FAILED'}: {args.check}")
            return 0 if ok else 1
        if not args.engine or not args.out:
            print("lrkv export: --engine and --out are required (or --check ARTIFACT)")
            return 2
        config = ExportConfig(parse_spec(args.spec, args.preset), level=args.level, dtype=args.dtype,
                              t_min=args.t_min, t_max=args.t_max, b_max=args.b_max, weights=args.weights,
                              opset=args.opset, external_data=args.external_data)
        seeds = tuple(int(s) for s in args.seeds.split(",") if s.strip())
        result = export_engine(args.engine, config, args.out, seeds=seeds, weights_seed=args.weights_seed,
                               policy_path=args.policy)
    except EngineUnavailable as e:
        print(f"lrkv export: {e}")
        return 3
    except (ValueError, TypeError, FileNotFoundError) as e:
        print(f"lrkv export: {e}")
        return 2
    print(result.verdict)
    if result.ok:
        print(f"artifact: {result.artifact}\nmanifest: {result.manifest}\nreport:   {result.report}")
        return 0
    print(f"verification FAILED: no artifact written (report: {result.report})")
    return 1
