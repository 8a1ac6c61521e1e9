"""Verified export: build -> verify on the length grid -> gate -> only then release.

`export_engine` builds the engine in a scratch directory, runs it through the harness on
the release grid of its exported range, gates the report, and only if the gate passes
moves the artifact into the output directory next to its report and manifest. A failed
verification leaves no artifact and no manifest — only `<name>.failed-report.json` for
diagnosis — and returns a non-zero code. `lrkv.compiled.check` re-verifies a released
artifact against its manifest, with the same grid and gate.

**The release grid** covers the range of T_max at both ends and inside it (t_min, t_min+1,
an odd midpoint, t_max−1, t_max). At each T there is a variable-length batch — the full
cache, a single token, an empty sequence (kernel level), an odd length in between — and
at t_max also a batch of one (the lower end of the batch range). Garbage past each length
is NaN. Layer engines also run one `layer-model` case: a whole sequence decoded step by
step from an empty cache through the engine — each step reads the cache the previous step
wrote — against the training-form model. That is what checks the engine's cache
*outputs*. (rope='latent' is the paper's claim that the suite shows false: it is expected
to differ.)

**The harness** is used as `lrkv verify` uses it (DESIGN §6, §7): inputs drawn in float64
from real projections and rounded to the engine dtype (`lrkv.verify.levels`), the float64
reference on the rounded values, the materialized path at the engine dtype as baseline,
the tolerance rule and the mpmath oracle on tiny float64 kernel cases (`runner.run`), the
policy `lrkv verify` uses (the packaged one, or the built-in defaults), `build_report` and
the gate's classes. For an engine with embedded weights the cases use the seed the weights
were initialised with, so the harness draws exactly the embedded weights.

**The gate** adds one condition of export's own: a release needs every record to pass (or
be an expected difference) and at least one pass — a grid that the engine skipped entirely
verifies nothing.
"""

from __future__ import annotations

import json
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

from ..reference.weights import LRKVWeights, init_lrkv_weights
from ..verify import gate as gate_mod
from ..verify.case import Case
from ..verify.metrics import parse_float
from ..verify.runner import backend_info, run
from ..verify.selection import GIVEN, Selection
from ..verify.tolerance import Policy, load_policy
from ..verify.tolerance_report import build_report, render_markdown
from .config import ExportConfig
from .engine import Engine, engine_class, say, step
from .engine_backends import EngineBackend
from .manifest import build_manifest, manifest_path, report_paths, write_json

DEFAULT_SEEDS = (0,)
MODEL_T = 12  # sequence length of the layer-model case: every step is one engine call
EMPTY_BASELINE = {"entries": {}}  # a fresh engine has no accepted history: nothing can regress


# ----------------------------------------------------------------------------- the release grid
def length_grid(config: ExportConfig) -> list[int]:
    """Cache lengths T_max to check: both ends of the range and points inside it."""
    lo, hi = config.t_min, config.t_max
    mid = (lo + hi) // 2 | 1  # odd, so no tile size divides it
    return sorted({t for t in (lo, lo + 1, mid, hi - 1, hi) if lo <= t <= hi})


def batch_lengths(config: ExportConfig, T: int) -> list[tuple[int, ...]]:
    """Per-sequence lengths (after the new token, as `Case.lengths`) to run at cache length T."""
    B = min(config.b_max, 4)
    inner = max(1, min(T, (T // 2) | 1))
    if config.level == "kernel":
        varlen = (T, 1, 0, inner)[:B]  # full, one token, empty, odd
    else:
        varlen = (T, 1, inner, max(1, T - 1))[:B]  # the layer level appends, so lengths >= 1
    out = [varlen]
    if T == config.t_max and B > 1:
        out.append((T,))  # B = 1: the lower end of the batch range
    return out


def grid_cases(config: ExportConfig, seeds: tuple[int, ...]) -> list[Case]:
    cases = [Case(config.level, config.spec, config.dtype, lengths, T, seed=seed)
             for seed in seeds for T in length_grid(config) for lengths in batch_lengths(config, T)]
    if config.level == "layer":
        T = max(config.t_min, min(config.t_max, MODEL_T))
        expect = "differ" if config.spec.rope == "latent" else "match"
        cases += [Case("layer-model", config.spec, config.dtype, (T,) * min(2, config.b_max), T, seed=seed,
                       expect=expect) for seed in seeds]
    return cases


def grid_name(config: ExportConfig, seeds: tuple[int, ...]) -> str:
    """The report's `grid`: level, dtype, both dynamic ranges and the seeds it was verified on.

    `lrkv export --check` compares it with the manifest's config, so a range widened in the
    manifest after release no longer matches the report that verified the engine."""
    return (f"export:{config.level}:{config.dtype}:T{config.t_min}-{config.t_max}:B1-{config.b_max}"
            f":seeds{','.join(map(str, seeds))}")


# ----------------------------------------------------------------------------- harness run, gate, report
def verify_cases(backend, cases: list[Case], *, grid: str, policy_path: str | Policy | None = None,
                 argv: list[str] | None = None) -> dict:
    """Run `cases` through `backend` with the harness and return the tolerance report.

    policy_path: a tolerance TOML or a Policy (a re-check uses the one recorded in the
    report); None means what `lrkv verify` uses (the packaged policy, with the project's
    lrkv.toml / [tool.lrkv.policy] override)."""
    policy = policy_path if isinstance(policy_path, Policy) else load_policy(policy_path)
    total = len(cases)
    done = [0]

    def on_step(what: str) -> None:
        done[0] += 1
        say(f"verified {done[0]}/{total}: {what}")

    records = run(cases, [(backend.name, backend)], policy, on_step=on_step)
    return build_report(records, policy, [backend_info(backend, backend.name)],
                        selection=Selection(grid=GIVEN, cases=tuple(cases)), grid=grid, argv=argv)


def worst_ratio(report: dict) -> float:
    """max|err| / bound over every judged output (out or y, and lse) of the gated records."""
    ratios = []
    for r in report["records"]:
        if r["status"] == "xfail":
            continue  # an expected difference is recorded, not gated
        for ev in (r.get("outputs") or {}).values():
            bound = parse_float(ev["bound"]["max_abs"])
            if bound > 0:
                ratios.append(parse_float(ev["metrics"]["max_abs"]) / bound)
    return max(ratios, default=0.0)


def gate(report: dict) -> tuple[int, str]:
    """(exit code, one-line verdict). 0 only if the harness gate passes AND every record passed;
    4 (DESIGN §7: nothing was verified) when no case passed and none failed — all skipped."""
    entries = gate_mod.classify(report, EMPTY_BASELINE)
    code = gate_mod.exit_code(entries)
    t = report["summary"]["total"]
    if t["skip"] or t["pass"] == 0:
        code = code or 1  # an engine release must not rest on skipped cases
    if t["pass"] == 0 and not t.get("fail") and not t.get("error"):
        code = 4
    counts = ", ".join(f"{v} {k}" for k, v in t.items() if v or k in ("pass", "fail"))
    verdict = "PASS" if code == 0 else "NOTHING VERIFIED" if code == 4 else "FAIL"
    return code, f"{verdict}: {counts} (worst max|err| / bound = {worst_ratio(report):.3g})"


def write_report(report: dict, json_path: Path, md_path: Path | None = None) -> None:
    # JSON-safe already: the harness writes non-finite floats as strings.
    json_path.write_text(json.dumps(report, indent=1, allow_nan=False) + "\n")
    if md_path is not None:
        md_path.write_text(render_markdown(report))


# ----------------------------------------------------------------------------- build -> verify -> release
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
    seeds = tuple(seeds)
    report = verify_cases(EngineBackend(eng, embedded=weights), grid_cases(config, seeds),
                          grid=grid_name(config, seeds), policy_path=policy_path)
    code, verdict = gate(report)
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
            write_report(report, failed)
            say(f"verification failed: no artifact written; report in {failed}")
            return ExportResult(False, verdict, report=failed, notes=notes, code=code)
        files = []
        for f in eng.files():  # the artifact moves out of scratch only now, after the gate
            dest = out_dir / f.name
            shutil.move(str(f), dest)
            files.append(dest)
    artifact = out_dir / name
    report_json, report_md = report_paths(artifact)
    write_report(report, report_json, report_md)
    manifest = build_manifest(kind, config, eng, files, report_json, report, verdict,
                              worst_ratio=worst_ratio(report), t_grid=length_grid(config), seeds=seeds,
                              weights=weights, weights_seed=weights_seed, notes=notes)
    write_json(manifest_path(artifact), manifest)
    say(f"wrote {artifact} (+ manifest, report)")
    return ExportResult(True, verdict, artifact, manifest_path(artifact), report_json, notes)
