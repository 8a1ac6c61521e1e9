"""The engine manifest: what an artifact is, what built it, and the report that verified it.

`<artifact>.manifest.json` sits beside the artifact and its tolerance report
(`<artifact>.report.json` + `.report.md`). It ties them together by sha256, so editing any
of the three is detected by `lrkv export --check`:

    schema            "lrkv.engine-manifest/1"
    created           UTC time of the release
    engine            onnx | aoti | tensorrt
    artifact          {"files": [{"name", "sha256", "bytes"}]}   (ONNX external data included)
    config            ExportConfig.to_dict(): spec, level, dtype, T_max/B ranges, weights mode,
                      scale, opset, external_data
    dynamic_ranges    {"B": {"min", "max"}, "T_max": {"min", "max"}}
    dtypes            {"engine": ..., "inputs": {name: dtype}, "outputs": {name: dtype}}
    signature         inputs/outputs with symbolic shapes ("B", "T")
    opset             ONNX opset (null for other engines)
    weights           {"mode": "inputs"} or {"mode": "embedded", "init": ..., "sha256": ...}
    tools             versions of lrkv, torch and the engine's toolchain
    engine_notes      build facts (execution provider, op types, TensorRT precision flags,
                      "truncated": "float64 -> float32", ...)
    verification      {"report": name, "report_sha256", "summary", "worst_ratio", "gate", "grid"}
"""

from __future__ import annotations

import hashlib
import json
from datetime import datetime, timezone
from pathlib import Path

from lrkv import __version__

from ..checks import parse_json
from ..reference.weights import LRKVWeights
from .config import ENGINES, ExportConfig, dynamic_ranges, input_sigs, output_sigs

MANIFEST_SCHEMA = "lrkv.engine-manifest/1"
MAX_WEIGHTS_SEED = 2**63 - 1  # torch.Generator.manual_seed takes a signed 64-bit seed


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def manifest_path(artifact: Path) -> Path:
    return artifact.with_name(artifact.name + ".manifest.json")


def report_paths(artifact: Path) -> tuple[Path, Path]:
    return artifact.with_name(artifact.name + ".report.json"), artifact.with_name(artifact.name + ".report.md")


def file_entries(files: list[Path]) -> list[dict]:
    return [{"name": f.name, "sha256": sha256_file(f), "bytes": f.stat().st_size} for f in files]


def write_json(path: Path, data: dict) -> None:
    # Strict JSON: the harness already writes non-finite floats as the strings "inf"/"nan".
    path.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n")


def read_manifest(artifact: Path) -> dict:
    path = manifest_path(artifact)
    if not path.exists():
        raise FileNotFoundError(f"no manifest beside {artifact} (expected {path.name})")
    if not path.is_file():
        raise ValueError(f"{path.name}: the manifest beside {artifact.name} is not a file")
    try:
        data = parse_json(path.name, path.read_text())
    except json.JSONDecodeError as e:
        raise ValueError(f"{path.name}: not valid JSON ({e})") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ValueError(f"{path.name}: cannot read the manifest ({e})") from None
    schema = data.get("schema") if isinstance(data, dict) else None
    if schema != MANIFEST_SCHEMA:
        raise ValueError(f"{path.name}: schema {schema!r} is not {MANIFEST_SCHEMA!r}")
    for field, kind in REQUIRED_FIELDS.items():
        value = data
        for part in field.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        if not isinstance(value, kind):
            raise ValueError(f"{path.name}: field {field} is missing or not a {kind.__name__}")
    if not all(isinstance(f, dict) and isinstance(f.get("name"), str) and isinstance(f.get("sha256"), str)
               for f in data["artifact"]["files"]):
        raise ValueError(f"{path.name}: field artifact.files must list objects with a name and a sha256")
    _check_engine_and_weights(artifact, path, data)
    return data


def _check_engine_and_weights(artifact: Path, path: Path, data: dict) -> None:
    """The fields `--check` acts on agree with each other and with the artifact given: the
    engine that loads it, and the embedded weights it re-initialises (a hand-edited manifest is
    bad input, exit 2 — never a traceback from loading the wrong engine)."""
    from .engine import engine_class

    kind = data["engine"]
    if kind not in ENGINES:
        raise ValueError(f"{path.name}: field engine: {kind!r} is not one of {', '.join(ENGINES)}")
    suffix = engine_class(kind).suffix
    if artifact.suffix != suffix:
        raise ValueError(f"{path.name}: field engine: {kind!r} artifacts are {suffix} files, not {artifact.name}")
    config, weights = data["config"], data["weights"]
    level, mode = config.get("level"), config.get("weights", "inputs")
    if level == "layer" and mode == "embedded":
        seed = weights.get("seed")
        if isinstance(seed, bool) or not isinstance(seed, int) or not 0 <= seed <= MAX_WEIGHTS_SEED:
            raise ValueError(f"{path.name}: field weights.seed: embedded weights record their seed "
                             f"(an integer in [0, {MAX_WEIGHTS_SEED}]), got {seed!r}")
        if not isinstance(weights.get("sha256"), str):
            raise ValueError(f"{path.name}: field weights.sha256: embedded weights record their sha256")
    else:
        for field in ("seed", "sha256"):
            if field in weights:
                raise ValueError(f"{path.name}: field weights.{field}: a {level}-level artifact with weights "
                                 f"{mode!r} embeds no weights, so it records no weights {field}")


# What `lrkv export --check` reads from a manifest, and the JSON type each must have.
REQUIRED_FIELDS = {
    "engine": str, "config": dict, "dynamic_ranges": dict, "weights": dict, "tools": dict,
    "artifact.files": list, "verification.report": str, "verification.report_sha256": str,
    "verification.summary": dict, "verification.grid.T_max": list, "verification.grid.seeds": list,
}


def check_hashes(artifact: Path, manifest: dict) -> list[str]:
    """Problems with the files the manifest names (empty list: all hashes match).

    The first entry is the artifact itself, and it is checked against the file at
    `artifact` — the one that will be loaded — never against a file of that entry's name:
    a manifest pointing at an untouched copy must not vouch for an edited artifact. The
    other entries (ONNX external data) are looked up beside it, by name, as the engine
    loads them."""
    problems = []
    entries = manifest["artifact"]["files"]
    if not entries:
        return ["manifest names no artifact file"]
    first, *others = entries
    if first["name"] != artifact.name:
        problems.append(f"{artifact.name}: the manifest's artifact is {first['name']!r}, not the file given")
    if (digest := sha256_file(artifact)) != first["sha256"]:
        problems.append(f"{artifact.name}: sha256 {digest[:16]}… != manifest {first['sha256'][:16]}…")
    for entry in others:
        f = artifact.parent / entry["name"]
        if not f.is_file():
            problems.append(f"{entry['name']}: missing")
        elif (digest := sha256_file(f)) != entry["sha256"]:
            problems.append(f"{entry['name']}: sha256 {digest[:16]}… != manifest {entry['sha256'][:16]}…")
    report = artifact.parent / manifest["verification"]["report"]
    if not report.is_file():
        problems.append(f"{report.name}: missing")
    elif sha256_file(report) != manifest["verification"]["report_sha256"]:
        problems.append(f"{report.name}: sha256 differs from the manifest's report_sha256")
    return problems


def weights_sha256(w: LRKVWeights) -> str:
    """sha256 over the named weight tensors' bytes (what an embedded-weights engine carries)."""
    h = hashlib.sha256()
    for name in ("w_q", "w_shared_k", "w_shared_v", "u_k", "u_v", "basis_k", "basis_v", "w_o", "q_gain", "k_gain",
                 "latent_freqs"):
        t = getattr(w, name)
        if t is not None:
            h.update(name.encode() + t.contiguous().numpy().tobytes())
    return h.hexdigest()


def build_manifest(kind: str, config: ExportConfig, eng, files: list[Path], report_file: Path, report: dict,
                   verdict: str, *, worst_ratio: float, t_grid: list[int], seeds, weights: LRKVWeights | None,
                   weights_seed: int, notes: dict) -> dict:
    """The manifest of a verified engine `eng` whose artifact `files` and report now sit in place.

    verdict, worst_ratio and t_grid (the T_max of the release grid) are the gate's and the
    grid's (`lrkv.compiled.export`)."""
    edt = str(config.torch_dtype).removeprefix("torch.")
    dt = lambda s: edt if s.dtype == "float" else s.dtype  # noqa: E731
    weights_entry = {"mode": config.weights if config.level == "layer" else "inputs (kernel level: basis_k/v)"}
    if weights is not None:
        weights_entry.update(init=f"init_lrkv_weights(spec, seed={weights_seed}).to({edt})",
                             seed=weights_seed, sha256=weights_sha256(weights),
                             storage=("external data file" if config.external_data else "inside the artifact")
                             if kind == "onnx" else "inside the artifact")
    return {
        "schema": MANIFEST_SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "engine": kind,
        "artifact": {"files": file_entries(files)},
        "config": config.to_dict(),
        "dynamic_ranges": dynamic_ranges(config),
        "dtypes": {"engine": edt, "inputs": {s.name: dt(s) for s in input_sigs(config)},
                   "outputs": {s.name: dt(s) for s in output_sigs(config)}},
        "signature": {side: [{"name": s.name, "shape": list(s.shape), "dtype": dt(s)} for s in sigs(config)]
                      for side, sigs in (("inputs", input_sigs), ("outputs", output_sigs))},
        "opset": config.opset if kind == "onnx" else None,
        "weights": weights_entry,
        "tools": {"lrkv": __version__, **eng.tool_versions()},
        "engine_notes": {**eng.notes, **notes},
        "verification": {"report": report_file.name, "report_sha256": sha256_file(report_file),
                         "summary": report["summary"], "worst_ratio": worst_ratio, "gate": verdict,
                         "grid": {"T_max": list(t_grid), "seeds": list(seeds)}},
    }
