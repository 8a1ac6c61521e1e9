"""Verified export: build -> verify on the length grid -> gate -> only then release.

`export_engine` builds the engine in a scratch directory, runs it through the tolerance
rule on a grid of cache lengths inside the exported range, gates the report, and only if
the gate passes moves the artifact into the output directory next to its report and
manifest. A failed verification leaves no artifact and no manifest — only
`<name>.failed-report.json` for diagnosis — and returns a non-zero code.

`lrkv.compiled.check` re-verifies a released artifact against its manifest.
"""

from __future__ import annotations

import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..reference.weights import LRKVWeights, init_lrkv_weights
from ..verify.tolerance import Policy
from . import harness
from .engine_backends import EngineBackend
from .config import ExportConfig
from .engine import Engine, engine_class
from .manifest import build_manifest, manifest_path, report_paths, write_json
from .progress import say, step
from .verification import length_grid, verify

DEFAULT_SEEDS = (0,)


@dataclass
class ExportResult:
    ok: bool
    verdict: str  # the gate's one-line verdict
    artifact: Path | None = None  # None when verification failed
    manifest: Path | None = None
    report: Path | None = None
    notes: dict = field(default_factory=dict)
    code: int = 0  # the gate's exit code: 0 released, 1 failed, 4 nothing verified (all skipped)


def artifact_name(kind: str, config: ExportConfig) -> str:
    return f"lrkv-{config.level}-{config.dtype}-{config.spec.short()}{engine_class(kind).suffix}"


def embedded_weights(config: ExportConfig, seed: int) -> LRKVWeights | None:
    """The weights an embedded-weights engine carries: the paper's init at `seed`, rounded."""
    if config.level != "layer" or config.weights != "embedded":
        return None
    return init_lrkv_weights(config.spec, seed).to(config.torch_dtype)


def verify_engine(eng: Engine, config: ExportConfig, weights: LRKVWeights | None, seeds,
                  policy_path: str | Policy | None) -> tuple[dict, int, str]:
    """Run the release grid through the engine and gate it: (report, exit code, verdict)."""
    backend = EngineBackend(eng, embedded=weights)
    report = verify(backend, config, seeds=tuple(seeds), policy_path=policy_path)
    code, verdict = harness.gate(report)
    return report, code, verdict


def export_engine(kind: str, config: ExportConfig, out_dir: str | Path, *, seeds=DEFAULT_SEEDS,
                  weights_seed: int = 0, policy_path: str | None = None) -> ExportResult:
    """Build, verify, gate, and (only on PASS) write artifact + report + manifest into out_dir."""
    cls = engine_class(kind)
    cls.require()
    notes = {}
    if kind == "tensorrt" and config.dtype == "float64":
        from .tensorrt_engine import NO_FLOAT64

        say(f"{NO_FLOAT64}: building, verifying and releasing a float32 engine instead")
        config = config.replace(dtype="float32")
        notes = {"requested_dtype": "float64", "truncated": "float64 -> float32"}
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    name = artifact_name(kind, config)
    weights = embedded_weights(config, weights_seed)
    if weights is not None:
        seeds = (weights_seed,)  # the harness draws init_lrkv_weights(spec, seed): the embedded ones
    with tempfile.TemporaryDirectory(prefix="lrkv-export-", dir=out_dir) as tmp:
        eng = cls.build(config, Path(tmp) / name, weights=weights)
        with step(f"verifying on T_max in {length_grid(config)}"):
            report, code, verdict = verify_engine(eng, config, weights, seeds, policy_path)
        say(verdict)
        if code != 0:
            failed = out_dir / (name + ".failed-report.json")
            harness.write_report(report, failed)
            say(f"verification failed: no artifact written; report in {failed}")
            return ExportResult(False, verdict, report=failed, notes=notes, code=code)
        files = []
        for f in eng.files():  # the artifact moves out of scratch only now, after the gate
            dest = out_dir / f.name
            shutil.move(str(f), dest)
            files.append(dest)
    artifact = out_dir / name
    report_json, report_md = report_paths(artifact)
    harness.write_report(report, report_json, report_md)
    manifest = build_manifest(kind, config, eng, files, report_json, report, verdict, seeds=seeds,
                              weights=weights, weights_seed=weights_seed, notes=notes)
    write_json(manifest_path(artifact), manifest)
    say(f"wrote {artifact} (+ manifest, report)")
    return ExportResult(True, verdict, artifact, manifest_path(artifact), report_json, notes)


__all__ = ["ExportResult", "artifact_name", "embedded_weights", "export_engine", "verify_engine"]
