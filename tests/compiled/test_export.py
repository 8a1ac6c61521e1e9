"""Verified release (`lrkv export`), the manifest, and `lrkv export --check`; TensorRT where available.

An ONNX kernel engine is released once per module (`released`) and copied for every
tampering test: a flipped byte, an edited artifact beside an untouched copy, ranges
widened in the manifest, edited numbers, an edited report, missing external data. A
broken engine releases nothing; a grid the engine skipped entirely releases nothing either.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from lrkv.cli import main as lrkv_main
from lrkv.compiled.check import check_artifact
from lrkv.compiled.config import ExportConfig
from lrkv.compiled.engine import EngineUnavailable, engine_class
from lrkv.compiled.engine_backends import EngineBackend
from lrkv.compiled.export import batch_lengths, export_engine, gate, grid_cases, length_grid, verify_cases
from lrkv.compiled.manifest import manifest_path, sha256_file
from lrkv.reference.weights import init_lrkv_weights
from lrkv.spec import AttentionSpec
from lrkv.verify.backend_registry import get_backend
from lrkv.verify.case import Case
from lrkv.verify.tolerance_report import validate_report

from ._helpers import B_MAX, KERNEL_SPEC, SPEC, T_MAX, T_MIN, named_inputs, run_cases, skip_unless_available

pytestmark = pytest.mark.export


# ----------------------------------------------------------------------------- the release grid
def test_grid_covers_both_ends_of_the_range():
    config = ExportConfig(SPEC, level="kernel", t_min=T_MIN, t_max=T_MAX, b_max=B_MAX)
    grid = length_grid(config)
    assert grid[0] == T_MIN and grid[-1] == T_MAX and len(grid) >= 4
    assert any(t % 2 for t in grid[1:-1])  # an odd length inside
    at_max = batch_lengths(config, T_MAX)
    assert (T_MAX,) in at_max and any(0 in lens for lens in at_max)  # B = 1, an empty sequence
    layer = ExportConfig(SPEC, level="layer", t_max=16)
    assert {c.level for c in grid_cases(layer, (0,))} == {"layer", "layer-model"}


# ----------------------------------------------------------------------------- verified release + manifest
@pytest.fixture(scope="module")
def released():
    """An ONNX kernel engine released by `lrkv export` (path of the artifact)."""
    skip_unless_available("onnx")
    import tempfile

    out = Path(tempfile.mkdtemp(prefix="lrkv-release-"))
    rc = lrkv_main(["export", "--engine", "onnx", "--level", "kernel", "--spec", KERNEL_SPEC, "--t-min", "2",
                    "--t-max", "16", "--dtype", "float64", "--out", str(out), "--quiet"])
    assert rc == 0
    (artifact,) = out.glob("*.onnx")
    yield artifact
    shutil.rmtree(out, ignore_errors=True)


def _copy_release(artifact: Path, dest: Path) -> Path:
    dest.mkdir(parents=True, exist_ok=True)
    for f in artifact.parent.iterdir():
        if f.is_file():
            shutil.copy(f, dest / f.name)
    return dest / artifact.name


def test_manifest_records_what_was_verified(released):
    m = json.loads(manifest_path(released).read_text())
    assert m["schema"] == "lrkv.engine-manifest/1" and m["engine"] == "onnx" and m["opset"] == 18
    (entry,) = m["artifact"]["files"]
    assert entry["name"] == released.name and entry["sha256"] == sha256_file(released)
    assert m["dynamic_ranges"] == {"B": {"min": 1, "max": 16}, "T_max": {"min": 2, "max": 16}}
    assert m["config"]["spec"]["rope"] == "exact" and m["dtypes"]["engine"] == "float64"
    assert m["dtypes"]["inputs"]["lengths"] == "int32" and m["dtypes"]["outputs"]["lse"] == "float64"
    assert {"lrkv", "torch", "onnx", "onnxruntime", "onnxscript"} <= set(m["tools"])
    v = m["verification"]
    report = released.parent / v["report"]
    assert v["report_sha256"] == sha256_file(report)
    data = json.loads(report.read_text())
    validate_report(data)  # the harness's published report schema
    assert v["summary"] == data["summary"] and 0 < v["worst_ratio"] < 1
    assert v["summary"]["total"]["pass"] > 0 and v["summary"]["total"]["fail"] == 0 and v["gate"].startswith("PASS")
    assert {r["backend"] for r in data["records"]} == {"onnxruntime"}
    assert v["grid"]["T_max"][0] == 2 and v["grid"]["T_max"][-1] == 16
    assert (released.parent / (released.name + ".report.md")).exists()


def test_check_passes_on_untouched_artifact(released):
    assert lrkv_main(["export", "--check", str(released), "--quiet"]) == 0


def test_released_engine_rejects_lengths_outside_its_range(released):
    """The released range is T_max in [2, 16] (example T >= 2): T = 1 and T = 17 are refused."""
    config = ExportConfig.from_dict(json.loads(manifest_path(released).read_text())["config"])
    eng = engine_class("onnx").load(config, released)
    assert eng(**named_inputs(config, B=1, T=2))["out"].shape == (1, 2, 8)
    for T in (1, 17):
        with pytest.raises(ValueError, match=rf"T_max={T} is outside the exported range \[2, 16\]"):
            eng(**named_inputs(config, B=1, T=T))


def test_check_detects_a_flipped_byte(released, tmp_path, capsys):
    artifact = _copy_release(released, tmp_path)
    data = bytearray(artifact.read_bytes())
    data[len(data) // 2] ^= 0x01
    artifact.write_bytes(bytes(data))
    assert lrkv_main(["export", "--check", str(artifact), "--quiet"]) == 1
    assert "sha256" in capsys.readouterr().out


def test_check_detects_edited_numbers(released, tmp_path):
    # A prettier number in the manifest than the report (and the re-run) support.
    artifact = _copy_release(released, tmp_path / "manifest")
    mpath = manifest_path(artifact)
    m = json.loads(mpath.read_text())
    m["verification"]["worst_ratio"] /= 10
    mpath.write_text(json.dumps(m))
    ok, problems = check_artifact(artifact)
    assert not ok and any("summary" in p for p in problems)
    # Editing the report's numbers breaks its sha256.
    artifact = _copy_release(released, tmp_path / "report")
    rpath = artifact.parent / m["verification"]["report"]
    report = json.loads(rpath.read_text())
    report["records"][0]["metrics"]["max_abs"] = 0.0
    rpath.write_text(json.dumps(report))
    assert lrkv_main(["export", "--check", str(artifact), "--quiet"]) == 1
    # Editing the report AND re-hashing it into the manifest: the re-run's numbers disagree.
    m2 = json.loads(manifest_path(artifact).read_text())
    m2["verification"]["report_sha256"] = sha256_file(rpath)
    manifest_path(artifact).write_text(json.dumps(m2))
    ok, problems = check_artifact(artifact)
    assert not ok and any("max_abs" in p and "recorded" in p for p in problems), problems


def test_check_hashes_the_artifact_it_was_given(released, tmp_path, capsys):
    """A manifest naming an untouched copy must not vouch for an edited artifact beside it."""
    artifact = _copy_release(released, tmp_path)  # the untouched copy stays in place
    edited = tmp_path / ("edited-" + artifact.name)
    data = bytearray(artifact.read_bytes())
    data[len(data) // 2] ^= 0x01
    edited.write_bytes(bytes(data))
    shutil.copy(manifest_path(artifact), manifest_path(edited))  # still names (and hashes) the copy
    assert lrkv_main(["export", "--check", str(edited), "--quiet"]) == 1
    out = capsys.readouterr().out
    assert f"{edited.name}: sha256" in out and "not the file given" in out
    # Renamed in the manifest too: the bytes of the file given still decide.
    m = json.loads(manifest_path(edited).read_text())
    m["artifact"]["files"][0]["name"] = edited.name
    manifest_path(edited).write_text(json.dumps(m))
    ok, problems = check_artifact(edited)
    assert not ok and problems == [f"{edited.name}: sha256 {sha256_file(edited)[:16]}… != manifest "
                                   f"{m['artifact']['files'][0]['sha256'][:16]}…"]


def _edit_manifest(released: Path, dest: Path, edit) -> Path:
    artifact = _copy_release(released, dest)
    m = json.loads(manifest_path(artifact).read_text())
    edit(m)
    manifest_path(artifact).write_text(json.dumps(m))
    return artifact


@pytest.mark.parametrize("what", ["dynamic_ranges", "config_t_max", "config_b_max", "config_t_min"])
def test_check_refuses_ranges_the_report_did_not_verify(released, tmp_path, capsys, what):
    """The release verified T_max in [2, 16] and B <= 16: a manifest claiming more fails the check,
    before any engine is loaded or re-run."""
    def edit(m):
        if what == "dynamic_ranges":  # the record a user reads, alone
            m["dynamic_ranges"]["T_max"]["max"] = 10**6
        elif what == "config_t_max":  # what the engine enforces, with the ranges and grid to match
            m["config"]["t_max"] = m["dynamic_ranges"]["T_max"]["max"] = 10**6
            m["verification"]["grid"]["T_max"][-1] = 10**6
        elif what == "config_b_max":
            m["config"]["b_max"] = m["dynamic_ranges"]["B"]["max"] = 10**6
        else:
            m["config"]["t_min"] = m["dynamic_ranges"]["T_max"]["min"] = 1

    artifact = _edit_manifest(released, tmp_path, edit)
    ok, problems = check_artifact(artifact)
    assert not ok, problems
    text = "\n".join(problems)
    if what == "dynamic_ranges":
        assert "dynamic_ranges" in text and "1000000" in text
    else:
        assert "the report verified grid" in text, text
    assert lrkv_main(["export", "--check", str(artifact), "--quiet"]) == 1
    assert "CHECK FAIL" in capsys.readouterr().out


def test_check_of_a_malformed_manifest_is_exit_2(released, tmp_path, capsys):
    artifact = _edit_manifest(released, tmp_path, lambda m: m.pop("dynamic_ranges"))
    assert lrkv_main(["export", "--check", str(artifact), "--quiet"]) == 2
    assert "field dynamic_ranges is missing" in capsys.readouterr().out
    manifest_path(artifact).write_text("{not json")
    assert lrkv_main(["export", "--check", str(artifact), "--quiet"]) == 2
    assert "not valid JSON" in capsys.readouterr().out
    # A report that lost a field, re-hashed into the manifest: exit 2 naming the report and the field.
    artifact = _copy_release(released, tmp_path / "report")
    m = json.loads(manifest_path(artifact).read_text())
    rpath = artifact.parent / m["verification"]["report"]
    report = json.loads(rpath.read_text())
    del report["records"][0]["status"]
    rpath.write_text(json.dumps(report))
    m["verification"]["report_sha256"] = sha256_file(rpath)
    manifest_path(artifact).write_text(json.dumps(m))
    assert lrkv_main(["export", "--check", str(artifact), "--quiet"]) == 2
    out = capsys.readouterr().out
    assert rpath.name in out and "records.0" in out and "status" in out


def test_failed_verification_writes_no_artifact(tmp_path, monkeypatch):
    skip_unless_available("onnx")
    cls = engine_class("onnx")
    real = cls.run_flat

    def off_by_a_bit(self, flat):  # a broken engine: 1e-3 relative error on every output
        return [o * (1 + 1e-3) for o in real(self, flat)]

    monkeypatch.setattr(cls, "run_flat", off_by_a_bit)
    rc = lrkv_main(["export", "--engine", "onnx", "--level", "kernel", "--spec", KERNEL_SPEC, "--t-max", "8",
                    "--out", str(tmp_path), "--quiet"])
    assert rc == 1
    assert not list(tmp_path.glob("*.onnx")) and not list(tmp_path.glob("*.manifest.json"))
    (failed,) = tmp_path.glob("*.failed-report.json")
    assert json.loads(failed.read_text())["summary"]["total"]["fail"] > 0
    assert not [p for p in tmp_path.iterdir() if p.is_dir()]  # the scratch build is gone too


def test_embedded_weights_external_data_opset23(tmp_path):
    """Weights embedded in a side file, opset 23 (native RMSNormalization), aligned RoPE, float64."""
    skip_unless_available("onnx")
    spec = AttentionSpec.lrkv(2, 8, 4, rope="aligned", qk_norm=True, d_model=12)
    config = ExportConfig(spec, level="layer", dtype="float64", t_max=12, b_max=4, weights="embedded", opset=23,
                          external_data=True)
    result = export_engine("onnx", config, tmp_path, weights_seed=3)
    assert result.ok, result.verdict
    m = json.loads(result.manifest.read_text())
    names = [f["name"] for f in m["artifact"]["files"]]
    assert names == [result.artifact.name, result.artifact.name + ".data"]
    assert m["weights"]["mode"] == "embedded" and m["weights"]["seed"] == 3
    assert m["weights"]["storage"] == "external data file"
    assert "RMSNormalization" in m["engine_notes"]["op_types"] and "Attention" not in m["engine_notes"]["op_types"]
    assert "w_q" not in m["dtypes"]["inputs"]  # constants, not inputs
    assert check_artifact(result.artifact)[0]
    # The engine computes with ITS weights: handed other ones (seed 1), it refuses instead.
    eng = engine_class("onnx").load(config, result.artifact)
    w = init_lrkv_weights(spec, 3).to(torch.float64)
    (rec,) = run_cases(EngineBackend(eng, embedded=w), [Case("layer", spec, "float64", (3, 2), 8, seed=1)])
    assert rec["status"] == "error" and "embeds its weights" in rec["reason"]
    (tmp_path / names[1]).unlink()
    ok, problems = check_artifact(result.artifact)
    assert not ok and any("missing" in p for p in problems)


# ----------------------------------------------------------------------------- TensorRT
@pytest.mark.tensorrt
def test_tensorrt_roundtrip(tmp_path):
    ok, reason = engine_class("tensorrt").available()
    if not ok:
        pytest.skip(reason)
    for level in ("kernel", "layer"):
        result = export_engine("tensorrt", ExportConfig(SPEC, level=level, t_max=64, b_max=4), tmp_path / level)
        assert result.ok, result.verdict
        assert check_artifact(result.artifact)[0]


@pytest.mark.tensorrt
def test_tensorrt_float64_is_truncated_and_says_so(tmp_path):
    ok, reason = engine_class("tensorrt").available()
    if not ok:
        pytest.skip(reason)
    result = export_engine("tensorrt", ExportConfig(SPEC, level="kernel", dtype="float64", t_max=8), tmp_path)
    m = json.loads(result.manifest.read_text())
    assert m["dtypes"]["engine"] == "float32" and m["engine_notes"]["truncated"] == "float64 -> float32"
    assert get_backend("tensorrt").supports(Case("kernel", SPEC, "float64", (3,), 4))[0] is False


def test_release_gate_says_nothing_verified_when_every_case_skipped():
    """A grid the engine skipped entirely is exit 4 (DESIGN §7), not a release and not a FAIL."""
    backend = get_backend("tensorrt")
    if backend.available()[0]:
        pytest.skip("torch_tensorrt and CUDA are available: its cases would run, not skip")
    report = verify_cases(backend, [Case("kernel", SPEC, "float32", (3,), 4)], grid="test")
    assert report["summary"]["total"]["skip"] == 1
    code, verdict = gate(report)
    assert code == 4 and verdict.startswith("NOTHING VERIFIED")


@pytest.mark.tensorrt
def test_tensorrt_refuses_without_toolchain(tmp_path, capsys):
    ok, reason = engine_class("tensorrt").available()
    if ok:
        pytest.skip("torch_tensorrt and CUDA are available: the refusal path does not apply")
    assert reason  # the exact missing piece, e.g. "torch_tensorrt is not installed ..."
    with pytest.raises(EngineUnavailable, match="tensorrt engine unavailable"):
        export_engine("tensorrt", ExportConfig(SPEC, t_max=8), tmp_path)
    assert lrkv_main(["export", "--engine", "tensorrt", "--out", str(tmp_path), "--quiet"]) == 3
    assert reason in capsys.readouterr().out
    assert not list(tmp_path.iterdir())  # nothing written
    backend = get_backend("tensorrt")
    assert backend.available() == (False, reason)
    (rec,) = run_cases(backend, [Case("kernel", SPEC, "float32", (3,), 4)])
    assert rec["status"] == "skip" and reason in rec["reason"]  # never a fake pass


def test_check_of_an_artifact_that_is_not_the_manifests_engine_is_exit_2(released, tmp_path, capsys):
    """ONNX bytes renamed to .pt2 and the manifest edited to say aoti throughout (hashes and
    ranges still hold): the AOTInductor loader fails on them — exit 2 naming the field, not a
    traceback from inside the loader."""
    skip_unless_available("aoti")
    artifact = _copy_release(released, tmp_path)
    m = json.loads(manifest_path(artifact).read_text())
    pt2 = artifact.with_suffix(".pt2")
    artifact.rename(pt2)
    m["engine"], m["artifact"]["files"][0]["name"] = "aoti", pt2.name
    manifest_path(pt2).write_text(json.dumps(m))
    assert lrkv_main(["export", "--check", str(pt2), "--quiet"]) == 2
    out = capsys.readouterr().out
    assert f"field engine: {pt2.name} does not load with the 'aoti' engine's loader" in out, out


def test_export_hides_third_party_deprecations_but_not_its_own_warnings():
    """torch's pytree FutureWarning used to print on every `lrkv export`; lrkv's own isolation
    and engine warnings must still reach the user."""
    import warnings

    from lrkv.compiled.export_cli import _quiet_third_party

    def verb(args):
        warnings.warn("`isinstance(treespec, LeafSpec)` is deprecated", FutureWarning)
        warnings.warn("old API", DeprecationWarning)
        warnings.warn("lrkv isolation: runs in-process", RuntimeWarning)
        return 0

    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert _quiet_third_party(verb)(None) == 0
    assert [w.category for w in seen] == [RuntimeWarning]
