"""`lrkv export`: build a verified engine, or re-check one.

    lrkv export --engine onnx|aoti|tensorrt [--spec ...|--preset ...] [--level layer|kernel]
                [--dtype float32|float64] [--t-min N] [--t-max N] [--b-max N] [--opset 18]
                [--weights inputs|embedded] [--weights-seed N] [--external-data] --out DIR
    lrkv export --check ARTIFACT [--engine onnx|aoti|tensorrt] [--policy FILE]
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from ..checks import arg_in_file, arg_int, arg_out_dir, parse_json
from ..spec import AttentionSpec, preset
from . import engine
from .config import DEFAULT_OPSET, ENGINES, LEVELS, MAX_LENGTH, WEIGHT_MODES, ExportConfig

EXIT_CODES = """exit codes:
  0    released (artifact + manifest + report written) / --check passed
  1    verification or --check failed (nothing released; the reason is printed)
  2    bad input: an option, a --spec field or a file, named in the message
  3    the engine's toolchain is missing here (the message says what)
  4    nothing was verified: every case of the release grid was skipped (nothing released)
  130  interrupted (Ctrl-C); nothing released
"""

DEFAULT_SPEC = dict(n_heads=4, head_dim=32, rank=8)  # small enough to verify in seconds on a laptop
_ALIASES = {"H": "n_heads", "d_h": "head_dim", "r": "rank", "d": "d_model", "theta": "rope_theta"}
MAX_SEED = 2**63 - 1  # torch.Generator.manual_seed takes a signed 64-bit seed

# The kind of each spec field, so a value written as text is parsed strictly: "1.5" is not an
# int, "inf" reaches the spec (which refuses it as not finite), and a bool is one of these
# words — never "anything but true means false".
_FIELD_KINDS = {f.name: f.type for f in dataclasses.fields(AttentionSpec)}
_BOOL_WORDS = {"true": True, "1": True, "on": True, "yes": True,
               "false": False, "0": False, "off": False, "no": False}


def _parse_field(name: str, text: str):
    kind = _FIELD_KINDS.get(name, "str")
    word = text.strip()
    if kind == "bool":
        try:
            return _BOOL_WORDS[word.lower()]
        except KeyError:
            raise ValueError(f"--spec {name}: expected one of {', '.join(_BOOL_WORDS)}; got {text!r}") from None
    if kind.startswith("int"):
        if word.lower() in ("none", "null") and "None" in kind:
            return None
        try:
            return int(word)
        except ValueError:
            raise ValueError(f"--spec {name}: expected an integer, got {text!r}") from None
    if kind == "float":
        try:
            return float(word)
        except ValueError:
            raise ValueError(f"--spec {name}: expected a number, got {text!r}") from None
    return word


def parse_spec(text: str | None, preset_label: str | None) -> AttentionSpec:
    """--spec as JSON (or @file.json) or as 'H=4,d_h=32,r=8,rope=exact,qk_norm=on'; --preset a paper scale.

    Text values are converted by the field's kind (`_parse_field`); JSON values keep their
    JSON types and the spec checks them (qk_norm must be a JSON true/false)."""
    if text and preset_label:
        raise ValueError("give --spec or --preset, not both")
    if preset_label:
        return preset(preset_label).spec("lrkv")
    if not text:
        return AttentionSpec.lrkv(**DEFAULT_SPEC)
    if text.startswith("@"):
        try:
            text = Path(text[1:]).read_text()
        except OSError as e:
            raise ValueError(f"--spec {text}: cannot read the file ({e.strerror})") from None
    if text.lstrip().startswith("{"):
        try:
            data = parse_json("--spec", text)
        except json.JSONDecodeError as e:
            raise ValueError(f"--spec: not valid JSON ({e})") from None
        if not isinstance(data, dict):
            raise ValueError("--spec: the JSON must be an object of AttentionSpec fields")
        data = {_ALIASES.get(k, k): v for k, v in data.items()}
    else:
        data = {}
        for item in filter(None, (p.strip() for p in text.split(","))):
            k, sep, v = item.partition("=")
            if not sep:
                raise ValueError(f"--spec item {item!r} is not key=value")
            name = _ALIASES.get(k.strip(), k.strip())
            if name in data:
                raise ValueError(f"--spec {name}: given twice")
            data[name] = _parse_field(name, v)
    data.setdefault("family", "lrkv")
    try:
        return AttentionSpec.from_dict(data)
    except (TypeError, ValueError) as e:
        raise type(e)(f"--spec {e}") from None


def _seeds(text: str) -> tuple[int, ...]:
    """argparse type of --seeds: comma-separated integers in [0, 2**63 - 1]."""
    one = arg_int(minimum=0, maximum=MAX_SEED)
    seeds = tuple(one(part) for part in text.split(",") if part.strip())
    if not seeds:
        raise argparse.ArgumentTypeError(f"expected comma-separated integers, got {text!r}")
    return seeds


def register(subparsers) -> None:
    p = subparsers.add_parser("export", help="export a verified ONNX / AOTInductor / TensorRT engine",
                              description=__doc__, epilog=EXIT_CODES,
                              formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--engine", choices=ENGINES,
                   help="engine to build (with --check: the engine the artifact's manifest must record)")
    p.add_argument("--check", metavar="ARTIFACT", type=arg_in_file(),
                   help="re-verify an exported artifact against its manifest")
    p.add_argument("--spec", help="LRKV spec: JSON, @file.json, or 'H=4,d_h=32,r=8,rope=exact,qk_norm=on' "
                                  "(bools: true/false, 1/0, on/off, yes/no)")
    p.add_argument("--preset", help="a paper scale (128M, 512M, 1.2B, 2.5B, 6.3B)")
    p.add_argument("--level", choices=LEVELS, default="layer", help="layer_step (default) or decode_attention")
    p.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    p.add_argument("--t-min", type=arg_int(minimum=1, maximum=MAX_LENGTH), default=1,
                   help="smallest cache length T_max accepted (default 1)")
    p.add_argument("--t-max", type=arg_int(minimum=2, maximum=MAX_LENGTH), default=256,
                   help="largest cache length T_max accepted (default 256)")
    p.add_argument("--b-max", type=arg_int(minimum=1, maximum=MAX_LENGTH), default=16,
                   help="largest batch accepted (default 16)")
    p.add_argument("--opset", type=arg_int(minimum=18), default=DEFAULT_OPSET,
                   help="ONNX opset (default 18, decomposed; 23 uses native RMSNormalization for the q norm)")
    p.add_argument("--weights", choices=WEIGHT_MODES, default="inputs",
                   help="layer level: weights as engine inputs (default) or embedded as constants")
    p.add_argument("--weights-seed", type=arg_int(minimum=0, maximum=MAX_SEED), default=0, help="seed of init_lrkv_weights for --weights embedded")
    p.add_argument("--external-data", action="store_true",
                   help="ONNX with embedded weights: store them in <artifact>.data beside the model")
    p.add_argument("--seeds", type=_seeds, default=(0,), help="comma-separated verification seeds (default 0)")
    p.add_argument("--policy", type=arg_in_file(),
                   help="a whole tolerance policy TOML (default: as lrkv verify — the packaged policy, "
                        "with the project's lrkv.toml / [tool.lrkv.policy] override)")
    p.add_argument("--out", type=arg_out_dir(), help="output directory for artifact, manifest and report")
    p.add_argument("--quiet", action="store_true", help="no progress lines")
    p.set_defaults(func=_quiet_third_party(run))


def _quiet_third_party(fn):
    """The verb without torch's / onnx's deprecation notices (FutureWarning, DeprecationWarning),
    which a user of the exporter cannot act on; lrkv's own warnings (RuntimeWarning, UserWarning)
    still print. `-W` / PYTHONWARNINGS given on purpose win (they are checked first)."""
    import functools
    import warnings

    @functools.wraps(fn)
    def wrapped(args):
        with warnings.catch_warnings():
            if not sys.warnoptions:
                for category in (FutureWarning, DeprecationWarning):
                    warnings.simplefilter("ignore", category)
            return fn(args)
    return wrapped


def run(args: argparse.Namespace) -> int:
    from .check import check_artifact  # heavy imports only when the verb runs
    from .export import export_engine

    engine.QUIET = bool(args.quiet)
    try:
        if args.check:
            given = [opt for opt, value in (("--spec", args.spec), ("--preset", args.preset), ("--out", args.out))
                     if value is not None]
            if given:  # the manifest says what the artifact is; an option that would be ignored is refused
                print(f"lrkv export: {given[0]} does not apply to --check (the manifest records the artifact's "
                      "config); --engine is checked against the manifest")
                return 2
            ok, problems = check_artifact(args.check, args.policy, engine=args.engine)
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
        result = export_engine(args.engine, config, args.out, seeds=args.seeds, weights_seed=args.weights_seed,
                               policy_path=args.policy)
    except engine.EngineUnavailable as e:
        print(f"lrkv export: {e}")
        return 3
    except (ValueError, TypeError, OSError) as e:  # OSError: a file named by a manifest that cannot be read
        print(f"lrkv export: {e}")
        return 2
    except KeyboardInterrupt:
        print("lrkv export: interrupted; nothing released")
        return 130
    print(result.verdict)
    if result.ok:
        print(f"artifact: {result.artifact}\nmanifest: {result.manifest}\nreport:   {result.report}")
        return 0
    if result.code == 4:
        print(f"nothing verified: every case was skipped; no artifact written (report: {result.report})")
        return 4
    print(f"verification FAILED: no artifact written (report: {result.report})")
    return 1
