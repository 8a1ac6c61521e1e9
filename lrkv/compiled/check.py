"""`lrkv export --check`: re-verify a released artifact against its manifest.

Five things must hold, in this order (the engine is loaded only once the bytes and the
ranges are known to be the verified ones):

1. the artifact given — the file that will be loaded — has the sha256 the manifest records
   for the artifact, and every other file it names (ONNX external data, the report) has its
   own sha256;
2. the ranges the manifest claims are the ones the recorded report verified: its
   `dynamic_ranges` are its config's, and the config's release grid (T_max at both ends of
   the range and inside it, the batches, level, dtype, spec, seeds) is exactly the set of
   cases in the report — a T_max or B range widened after release fails here;
3. the manifest's verification summary is the report's, and the report's summary is its
   own records' — an edited number in either is caught here;
4. embedded weights re-initialised from the recorded seed have the recorded sha256;
5. a fresh run of the recorded grid, under the policy recorded in the report, passes the
   gate and agrees with the recorded numbers: bit for bit on the same machine and
   toolchain (the engines are deterministic), within a factor of 2 elsewhere.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..checks import parse_json
from ..verify.metrics import parse_float
from ..verify.tolerance import Policy
from ..verify.tolerance_report import summarize, validate_report
from .config import ExportConfig, dynamic_ranges
from .engine import EngineUnavailable, engine_class, say, step
from .export import embedded_weights, grid_cases, grid_name, length_grid, verify_engine, worst_ratio
from .manifest import check_hashes, manifest_path, read_manifest, weights_sha256


def _same_machine(old: dict, new: dict) -> bool:
    """Whether two reports come from the same environment and toolchain (then runs are bit-exact)."""
    keys = ("python", "torch", "device", "platform", "cpu_count")
    return all(old["environment"].get(k) == new["environment"].get(k) for k in keys)


def _numbers_agree(old: dict, new: dict, exact: bool) -> str:
    """'' when a re-run record agrees with the recorded one; else why not.

    Same status, and each max|err| equal (same machine and tools: the engines are
    deterministic) or within a factor of 2 (elsewhere a CPU may round differently). A
    recorded number edited to look better than the engine is fails either way.
    """
    if old["status"] != new["status"]:
        return f"status {new['status']} != recorded {old['status']}"
    for path in (("metrics", "max_abs"), ("lse", "metrics", "max_abs")):
        a, b = old, new
        for k in path:
            a, b = (a or {}).get(k), (b or {}).get(k)
        if a is None and b is None:
            continue
        if a is None or b is None:
            return f"{'.'.join(path)} present in only one of the runs"
        a, b = parse_float(a), parse_float(b)
        agree = a == b if exact else abs(a - b) <= max(a, b) / 2
        if not agree:
            return f"{'.'.join(path)} {b:.6g} vs recorded {a:.6g}"
    return ""


def _read_report(path: Path) -> dict:
    """The recorded tolerance report, checked against the harness's published schema."""
    import jsonschema

    try:
        report = parse_json(path.name, path.read_text())
        validate_report(report)
    except json.JSONDecodeError as e:
        raise ValueError(f"{path.name}: not valid JSON ({e})") from None
    except jsonschema.ValidationError as e:
        where = ".".join(map(str, e.absolute_path)) or "(top level)"
        raise ValueError(f"{path.name}: field {where}: {e.message}") from None
    return report


def range_problems(manifest: dict, report: dict) -> tuple[ExportConfig | None, list[str]]:
    """(config, problems): whether the manifest's config and ranges are what `report` verified."""
    try:
        config = ExportConfig.from_dict(manifest["config"])
    except (TypeError, ValueError) as e:
        return None, [f"manifest config is not a valid export config: {e}"]
    problems = []
    if manifest["dynamic_ranges"] != dynamic_ranges(config):
        problems.append(f"manifest dynamic_ranges {manifest['dynamic_ranges']} are not its config's "
                        f"{dynamic_ranges(config)}")
    grid = manifest["verification"]["grid"]
    seeds = grid["seeds"]
    if not isinstance(seeds, list) or not seeds or not all(isinstance(x, int) and x >= 0 for x in seeds):
        return config, problems + [f"manifest verification.grid.seeds {seeds!r} is not a list of seeds"]
    if grid["T_max"] != length_grid(config):
        problems.append(f"manifest verification.grid.T_max {grid['T_max']} is not the release grid of its "
                        f"T_max range [{config.t_min}, {config.t_max}]: {length_grid(config)}")
    if report.get("grid") != grid_name(config, tuple(seeds)):
        problems.append(f"the report verified grid {report.get('grid')!r}; the manifest's config and seeds "
                        f"claim {grid_name(config, tuple(seeds))!r}")
    verified = {r.get("id") for r in report["records"]}
    try:
        claimed = {c.id for c in grid_cases(config, tuple(seeds))}
    except (TypeError, ValueError) as e:
        return config, problems + [f"the manifest's release grid cannot be built: {e}"]
    if unverified := sorted(claimed - verified):
        problems.append(f"{len(unverified)} case(s) of the manifest's release grid are not in the report, "
                        f"e.g. {unverified[0]}")
    if extra := sorted(verified - claimed):
        problems.append(f"{len(extra)} case(s) of the report are not in the manifest's release grid, e.g. {extra[0]}")
    return config, problems


def check_artifact(artifact: str | Path, policy_path: str | None = None,
                   engine: str | None = None) -> tuple[bool, list[str]]:
    """(ok, problems). The re-run uses the policy recorded in the report unless `policy_path`
    says otherwise: the numbers are re-checked against the rule they were verified under.
    `engine`, when given (`--engine` with `--check`), is the kind the manifest must record.

    A manifest that is not JSON, has another schema, lacks a field or contradicts itself (an
    engine that is not the artifact's, a weights seed on an artifact without embedded
    weights), or a file that does not load as the engine it names, is a ValueError naming the
    file and the field (bad input); everything else that does not hold is a problem (check
    failed)."""
    artifact = Path(artifact)
    manifest = read_manifest(artifact)
    if engine is not None and engine != manifest["engine"]:
        raise ValueError(f"--engine {engine}: {manifest_path(artifact).name} records a {manifest['engine']!r} "
                         f"engine (field engine)")
    problems = check_hashes(artifact, manifest)
    if problems:
        return False, problems  # never load a file whose bytes are not the verified ones
    report = _read_report(artifact.parent / manifest["verification"]["report"])
    config, problems = range_problems(manifest, report)
    if problems:
        return False, problems  # never re-run (or trust) a range the report did not verify
    v = manifest["verification"]
    if v["summary"] != report["summary"] or v.get("worst_ratio") != worst_ratio(report):
        problems.append("manifest's verification summary differs from the report's")
    if summarize(report["records"]) != report["summary"]:
        problems.append("report's summary does not match its own records")
    kind = manifest["engine"]
    try:
        eng = engine_class(kind).load(config, artifact)
    except EngineUnavailable:
        raise
    except Exception as e:  # noqa: BLE001 — e.g. ONNX bytes handed to the AOTInductor loader
        raise ValueError(f"{manifest_path(artifact).name}: field engine: {artifact.name} does not load with "
                         f"the {kind!r} engine's loader ({type(e).__name__}: {str(e)[:200]})") from None
    weights = None
    if manifest["weights"].get("seed") is not None:
        weights = embedded_weights(config, manifest["weights"]["seed"])
        if weights_sha256(weights) != manifest["weights"]["sha256"]:
            problems.append("re-initialised embedded weights do not match the manifest's weights sha256")
    with step("re-running the verification grid"):
        fresh, code, verdict = verify_engine(eng, config, weights, manifest["verification"]["grid"]["seeds"],
                                              policy_path or Policy.from_dict(report["policy"]))
    say(verdict)
    if code != 0:
        problems.append(f"re-verification failed the gate: {verdict}")
    old = {r["key"]: r for r in report["records"]}
    from lrkv import __version__

    exact = _same_machine(report, fresh) and manifest["tools"] == {"lrkv": __version__, **eng.tool_versions()}
    for r in fresh["records"]:
        if r["key"] not in old:
            problems.append(f"{r['key']}: not in the recorded report")
        elif why := _numbers_agree(old[r["key"]], r, exact):
            problems.append(f"{r['key']}: {why}")
    if len(fresh["records"]) != len(old):
        problems.append(f"re-run has {len(fresh['records'])} records, the report {len(old)}")
    return not problems, problems
