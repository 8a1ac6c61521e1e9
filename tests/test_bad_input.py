"""Bad input gets a clear error naming the field — never a silent coercion, never a traceback.

One test per bad input that the spec, the accounting and the `export`,
`bench` and `proofs` verbs own: a TypeError/ValueError whose message names the field, or
exit 2 from the command line with the option named. Nothing here builds an engine or times
a kernel: every refusal happens before any work starts.
"""

from __future__ import annotations

import math
from fractions import Fraction
from pathlib import Path

import pytest

from lrkv import spec as S
from lrkv.cli import main as lrkv_main
from lrkv.compiled.export_cli import parse_spec
from lrkv.compiled.config import ExportConfig
from lrkv.spec import AttentionSpec

SPEC = AttentionSpec.lrkv(4, 16, 2)


def _cli_exit(argv: list[str], capsys) -> tuple[int, str]:
    """(exit code, stdout + stderr) of `lrkv ARGV`, whether argparse exits or the verb returns."""
    try:
        code = lrkv_main(argv)
    except SystemExit as e:  # argparse refuses a bad option with exit 2
        code = e.code
    out = capsys.readouterr()
    return code, out.out + out.err


# ----------------------------------------------------------------------------- AttentionSpec
@pytest.mark.parametrize("value", ["no", "off", "false", 0, 1, None, 1.0])
def test_qk_norm_must_be_a_real_bool(value):
    """qk_norm="no" used to be read as on (a non-empty string is truthy)."""
    with pytest.raises(TypeError, match="qk_norm must be a bool"):
        AttentionSpec.lrkv(4, 16, 2, qk_norm=value)
    assert AttentionSpec.lrkv(4, 16, 2, qk_norm=False).qk_norm is False


@pytest.mark.parametrize("field", ["rope_theta", "norm_eps"])
@pytest.mark.parametrize("value", [math.inf, -math.inf, math.nan])
def test_non_finite_floats_are_refused(field, value):
    with pytest.raises(ValueError, match=f"{field} must be finite"):
        AttentionSpec.lrkv(4, 16, 2, **{field: value})


@pytest.mark.parametrize("field, value, error", [
    ("rope_theta", 0.0, ValueError), ("norm_eps", -1e-6, ValueError),
    ("rope_theta", "10000", TypeError), ("norm_eps", True, TypeError),
])
def test_float_fields_are_checked_for_kind_and_range(field, value, error):
    with pytest.raises(error, match=field):
        AttentionSpec.lrkv(4, 16, 2, **{field: value})


INT_FIELDS = ["n_heads", "head_dim", "d_model", "n_kv_heads", "rank", "latent_dim", "n_latent_heads",
              "n_branches", "rope_dim"]


@pytest.mark.parametrize("field", INT_FIELDS)
@pytest.mark.parametrize("value", [2.0, 1.5, "2", True])
def test_every_int_field_refuses_non_integers(field, value):
    """A float length is not truncated: 2.0 and 1.5 are refused like "2" and True."""
    base = dict(family="mha", n_heads=2, head_dim=8, n_kv_heads=2)
    with pytest.raises(TypeError, match=f"{field} must be an integer"):
        AttentionSpec(**{**base, field: value})


def test_int_fields_are_normalised_to_int():
    np = pytest.importorskip("numpy")
    spec = AttentionSpec.lrkv(np.int64(4), 16, np.int32(2), rope_theta=500000)
    assert type(spec.n_heads) is int and type(spec.rank) is int and spec.rope_theta == 500000.0
    assert spec == AttentionSpec.lrkv(4, 16, 2, rope_theta=500000.0)


def test_spec_from_dict_refuses_a_non_mapping():
    with pytest.raises(TypeError, match="spec must be a mapping"):
        AttentionSpec.from_dict([("n_heads", 4)])


# ----------------------------------------------------------------------------- accounting
def test_model_cache_bytes_refuses_a_float_length():
    with pytest.raises(TypeError, match="seq_len must be an integer"):
        S.model_cache_bytes(SPEC, 2, batch=1, seq_len=1.5)
    with pytest.raises(TypeError, match=r"lengths\[1\] must be an integer"):
        S.model_cache_bytes(SPEC, 2, lengths=[3, 2.0])
    with pytest.raises(TypeError, match="lengths must be a sequence"):
        S.model_cache_bytes(SPEC, 2, lengths="12")


def test_decode_bytes_refuses_a_negative_length():
    with pytest.raises(ValueError, match="seq_len must be >= 1, got -5"):
        S.decode_bytes(SPEC, -5)
    with pytest.raises(ValueError, match="batch must be >= 1"):
        S.decode_bytes(SPEC, 8, batch=0)


@pytest.mark.parametrize("call", [
    lambda: S.rank_ceiling(0, 128, Fraction(1, 2)),
    lambda: S.break_even_rank(0, 128),
    lambda: S.lrkv_cache_ratio(0, 128, 8),
    lambda: S.lrkv_param_ratio(0, 128, 8, 1024),
])
def test_zero_heads_is_a_value_error_not_a_division(call):
    with pytest.raises(ValueError, match="n_heads must be >= 1, got 0"):
        call()


@pytest.mark.parametrize("budget, error, words", [
    (math.inf, ValueError, "budget must be finite"), (math.nan, ValueError, "budget must be finite"),
    ("half", ValueError, "budget must be a fraction"), ("1/0", ValueError, "budget must be a fraction"),
    (True, TypeError, "budget must be a number"), (None, TypeError, "budget must be a Fraction"),
    (0, ValueError, "budget must be > 0"), (-0.5, ValueError, "budget must be > 0"),
])
def test_rank_ceiling_checks_its_budget(budget, error, words):
    with pytest.raises(error, match=words):
        S.rank_ceiling(18, 128, budget)


# Every public accounting function, each given one bad argument: the error names it.
ACCOUNTING_CALLS = [
    (lambda: S.cache_components(SPEC, rank_align=0), ValueError, "rank_align"),
    (lambda: S.cache_components("lrkv"), TypeError, "spec must be an AttentionSpec"),
    (lambda: S.padded_rank(55, 0), ValueError, "align"),
    (lambda: S.padded_rank(55.0, 16), TypeError, "rank"),
    (lambda: S.cache_elements(SPEC, include_key_scale="no"), TypeError, "include_key_scale"),
    (lambda: S.cache_bytes(SPEC, "int3"), TypeError, "dtype"),
    (lambda: S.mha_cache_elements(None), TypeError, "spec"),
    (lambda: S.cache_ratio(SPEC, rank_align=1.5), TypeError, "rank_align"),
    (lambda: S.lrkv_cache_ratio(4, 0, 2), ValueError, "head_dim"),
    (lambda: S.lrkv_cache_ratio(4, 16, -1), ValueError, "rank"),
    (lambda: S.break_even_rank(4, 16.0), TypeError, "head_dim"),
    (lambda: S.key_scale_overhead({}), TypeError, "spec"),
    (lambda: S.model_cache_bytes(SPEC, 0, batch=1, seq_len=8), ValueError, "n_layers"),
    (lambda: S.model_cache_bytes(SPEC, 2, batch=-1, seq_len=8), ValueError, "batch"),
    (lambda: S.model_cache_bytes(SPEC, 2, lengths=[4, -1]), ValueError, r"lengths\[1\]"),
    (lambda: S.per_device_cache_elements(SPEC, 0), ValueError, "tp"),
    (lambda: S.per_device_cache_elements(SPEC, 2, include_key_scale=1), TypeError, "include_key_scale"),
    (lambda: S.tp_cache_ratio(SPEC, 2.0), TypeError, "tp"),
    (lambda: S.kv_param_count("spec"), TypeError, "spec"),
    (lambda: S.kv_param_ratio(1), TypeError, "spec"),
    (lambda: S.lrkv_param_ratio(4, 16, 2, 0), ValueError, "d_model"),
    (lambda: S.decode_macs(SPEC, 0), ValueError, "seq_len"),
    (lambda: S.decode_arithmetic_ratio(SPEC, 8.5), TypeError, "seq_len"),
]


@pytest.mark.parametrize("call, error, field", ACCOUNTING_CALLS, ids=lambda x: x if isinstance(x, str) else "")
def test_every_accounting_function_validates_at_entry(call, error, field):
    with pytest.raises(error, match=field):
        call()


def test_valid_accounting_results_are_unchanged():
    """The checks change no correct answer (the values of tests/test_spec.py and the proofs)."""
    assert S.rank_ceiling(18, 128, Fraction(1, 2)) == S.rank_ceiling(18, 128, "1/2") == S.rank_ceiling(18, 128, 0.5) == 56
    assert S.break_even_rank(18, 128) == 120
    assert S.model_cache_bytes(S.AttentionSpec.mha(18, 128), 18, dtype="bfloat16", batch=1, seq_len=2048) == 339_738_624
    assert S.model_cache_bytes(SPEC, 3, lengths=(5, 0, 11)) == 3 * 16 * S.cache_bytes(SPEC)
    assert S.decode_bytes(SPEC, 8, batch=2) == 16 * S.cache_bytes(SPEC)


# ----------------------------------------------------------------------------- lrkv export --spec / config
@pytest.mark.parametrize("word, value", [("on", True), ("ON", True), ("yes", True), ("1", True), ("true", True),
                                         ("off", False), ("no", False), ("0", False), ("False", False)])
def test_export_spec_bools_are_parsed_by_word(word, value):
    """`--spec qk_norm=on` used to give qk_norm off (only 1/true/yes counted)."""
    assert parse_spec(f"H=2,d_h=8,r=3,qk_norm={word}", None).qk_norm is value


@pytest.mark.parametrize("text, field", [
    ("H=2,d_h=8,r=3,qk_norm=maybe", "qk_norm"), ("H=2,d_h=8,r=3,qk_norm=", "qk_norm"),
    ("H=2,d_h=8,r=1.5", "rank"), ("H=two,d_h=8,r=3", "n_heads"), ("H=2,d_h=8,r=3,theta=inf", "rope_theta"),
    ("H=2,d_h=8,r=3,norm_eps=abc", "norm_eps"), ("H=2,d_h=8,r=3,r=4", "rank"),
    ('{"n_heads": 2, "head_dim": 8, "rank": 3, "qk_norm": "on"}', "qk_norm"),
])
def test_export_spec_refuses_what_it_cannot_parse(text, field):
    with pytest.raises((TypeError, ValueError), match=f"--spec {field}"):
        parse_spec(text, None)


def test_export_cli_refuses_a_bad_spec_field(capsys):
    code, out = _cli_exit(["export", "--engine", "onnx", "--out", "unused-out", "--spec", "H=2,d_h=8,r=3,qk_norm=maybe"],
                          capsys)
    assert code == 2 and "qk_norm" in out


@pytest.mark.parametrize("change, field", [
    (dict(t_max=1e6), "t_max"), (dict(t_max=16.0), "t_max"), (dict(b_max=0), "b_max"),
    (dict(t_max=2**40), "t_max"), (dict(scale=math.inf), "scale"), (dict(opset=17), "opset"),
    (dict(external_data="no"), "external_data"), (dict(level="model"), "level"), (dict(weights="disk"), "weights"),
    (dict(t_min=9, t_max=8), "t_min"),
])
def test_export_config_names_the_bad_field(change, field):
    with pytest.raises((TypeError, ValueError), match=field):
        ExportConfig(SPEC, **change)


@pytest.mark.parametrize("option, value", [
    ("--t-max", "1e6"), ("--t-max", "1"), ("--b-max", "0"), ("--seeds", "0,x"), ("--seeds", "-1"),
    ("--weights-seed", str(2**70)), ("--opset", "9"),
])
def test_export_cli_options_are_validated(option, value, capsys):
    code, out = _cli_exit(["export", "--engine", "onnx", "--out", "unused-out", option, value], capsys)
    assert code == 2 and f"argument {option}" in out


def test_export_check_of_a_missing_file_is_exit_2(tmp_path, capsys):
    code, out = _cli_exit(["export", "--check", str(tmp_path / "nothing.onnx")], capsys)
    assert code == 2 and "argument --check" in out and "does not exist" in out


# ----------------------------------------------------------------------------- --out under a file
@pytest.fixture
def a_file(tmp_path):
    f = tmp_path / "a-file"
    f.write_text("not a directory\n")
    return f


@pytest.mark.parametrize("argv, option", [
    (["export", "--engine", "onnx", "--out", "{f}/sub"], "--out"),
    (["export", "--engine", "onnx", "--out", "{f}"], "--out"),
    (["bench", "--quick", "--out", "{f}/sub"], "--out"),
    (["proofs", "--json", "{f}/proofs.json"], "--json"),
    (["proofs", "--markdown", "{f}/proofs.md"], "--markdown"),
])
def test_out_under_a_file_is_exit_2(argv, option, a_file, capsys):
    code, out = _cli_exit([a.format(f=a_file) for a in argv], capsys)
    assert code == 2 and f"argument {option}" in out and str(a_file) in out
    assert a_file.read_text() == "not a directory\n"  # nothing written over it


# ----------------------------------------------------------------------------- lrkv bench
def test_bench_rounds_zero_is_refused_not_replaced_by_the_default(capsys):
    """--rounds 0 used to run the grid's 5 rounds (0 is falsy)."""
    code, out = _cli_exit(["bench", "--rounds", "0"], capsys)
    assert code == 2 and "argument --rounds" in out and ">= 1" in out


def test_bench_rounds_override_is_honoured():
    import argparse

    from lrkv.bench.bench_cli import build_grid

    ns = argparse.Namespace(quick=True, full=False, scales=None, batch=None, seq_lens=None, families=None, rounds=1)
    assert build_grid(ns).rounds == 1


@pytest.mark.parametrize("argv, option", [
    (["--threads", "-3"], "--threads"), (["--threads", "0"], "--threads"), (["--batch", "1,x"], "--batch"),
    (["--seq-lens", "0"], "--seq-lens"), (["--memory-fraction", "0"], "--memory-fraction"),
    (["--memory-fraction", "inf"], "--memory-fraction"), (["--families", ","], "--families"),
])
def test_bench_options_are_validated(argv, option, capsys):
    code, out = _cli_exit(["bench", *argv], capsys)
    assert code == 2 and f"argument {option}" in out


def test_bench_from_json_missing_file(tmp_path, capsys):
    code, out = _cli_exit(["bench", "--from-json", str(tmp_path / "bench.json"), "--out", str(tmp_path)], capsys)
    assert code == 2 and "argument --from-json" in out and "does not exist" in out


@pytest.mark.parametrize("content", ["not json", "[1, 2]", '{"schema": "other"}', '{"schema": "lrkv.bench/1"}'])
def test_bench_from_json_malformed_file(content, tmp_path, capsys):
    path = tmp_path / "bench.json"
    path.write_text(content)
    code, out = _cli_exit(["bench", "--from-json", str(path), "--out", str(tmp_path / "out"), "--no-plot"], capsys)
    assert code == 2 and "--from-json" in out and "bench.json" in out


def test_bench_device_cuda_without_cuda_is_exit_3(capsys):
    import torch

    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present: the missing-device path does not apply")
    code, out = _cli_exit(["bench", "--device", "cuda", "--quick", "--no-progress"], capsys)
    assert code == 3 and "no CUDA device" in out


# ----------------------------------------------------------------------------- exit codes in --help
@pytest.mark.parametrize("verb", ["export", "bench", "proofs"])
def test_help_documents_every_exit_code(verb, capsys):
    code, out = _cli_exit([verb, "--help"], capsys)
    assert code == 0 and "exit codes:" in out
    for c in ("0", "1", "2", "3", "4", "130"):
        assert f"\n  {c} " in out, f"{verb} --help does not document exit {c}"


# ----------------------------------------------------------------------------- Ctrl-C
def _interrupt(*_a, **_k):
    raise KeyboardInterrupt


@pytest.mark.parametrize("argv, target", [
    (["export", "--engine", "onnx", "--out", "{tmp}/engines", "--quiet"], "lrkv.compiled.export.export_engine"),
    (["bench", "--quick", "--out", "{tmp}/bench", "--no-progress"], "lrkv.bench.bench_cli._run"),
    (["proofs", "--only", "break_even_rank"], "lrkv.proofs.registry.run"),
])
def test_ctrl_c_is_exit_130_without_a_traceback(argv, target, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(target, _interrupt)
    code, out = _cli_exit([a.format(tmp=tmp_path) for a in argv], capsys)
    assert code == 130 and "interrupted" in out and "Traceback" not in out


# ----------------------------------------------------------------------------- deeply nested files
DEEP = 100_000  # levels: Python's JSON and TOML parsers raise RecursionError about 1000 levels down
DEEP_JSON = '{"n_heads": ' + "[" * DEEP + "]" * DEEP + "}"
DEEP_TOML = "a = " + "[" * DEEP + "]" * DEEP + "\n"


@pytest.fixture(scope="module")
def good_report(tmp_path_factory):
    """A real tolerance report (one tiny kernel case on the tiled backend)."""
    from lrkv.testing import check_backend
    from lrkv.verify.case import Case

    case = Case("kernel", AttentionSpec.lrkv(2, 8, 2), "float32", (3, 1), 3)
    jpath, _ = check_backend("tiled", grid=[case]).write(tmp_path_factory.mktemp("report"))
    return jpath


def _deep_manifest(tmp_path) -> Path:
    artifact = tmp_path / "lrkv.onnx"
    artifact.write_bytes(b"not an engine")
    (tmp_path / "lrkv.onnx.manifest.json").write_text(DEEP_JSON)
    return artifact


@pytest.mark.parametrize("what", ["report", "baseline", "case", "policy", "lrkv.toml", "pyproject.toml",
                                  "spec", "spec-file", "manifest", "bench"])
def test_a_deeply_nested_file_is_exit_2_naming_it(what, tmp_path, good_report, monkeypatch, capsys):
    """[[[[…]]]] 100000 deep used to end every verb in a RecursionError traceback."""
    deep = tmp_path / ("deep.toml" if what == "policy" else "deep.json")
    deep.write_text(DEEP_TOML if what in ("policy", "lrkv.toml", "pyproject.toml") else DEEP_JSON)
    out = str(tmp_path / "out")
    verify = ["verify", "--backend", "tiled", "--grid", "quick", "--out", out, "--no-progress"]
    argv, named = {
        "report": (["gate", str(deep), "--baseline", str(tmp_path / "b.json")], "deep.json"),
        "baseline": (["gate", str(good_report), "--baseline", str(deep)], "deep.json"),
        "case": (["verify", "--backend", "tiled", "--case", DEEP_JSON, "--out", out, "--no-progress"], "--case"),
        "policy": ([*verify, "--policy", str(deep)], "deep.toml"),
        "lrkv.toml": (verify, "lrkv.toml"),
        "pyproject.toml": (verify, "pyproject.toml"),
        "spec": (["export", "--engine", "onnx", "--out", out, "--spec", DEEP_JSON], "--spec"),
        "spec-file": (["export", "--engine", "onnx", "--out", out, "--spec", f"@{deep}"], "--spec"),
        "manifest": (["export", "--check", str(_deep_manifest(tmp_path))], "lrkv.onnx.manifest.json"),
        "bench": (["bench", "--from-json", str(deep), "--out", out, "--no-plot"], "deep.json"),
    }[what]
    if what in ("lrkv.toml", "pyproject.toml"):
        (tmp_path / what).write_text(DEEP_TOML)
        monkeypatch.chdir(tmp_path)
    code, text = _cli_exit(argv, capsys)
    assert code == 2, text[-2000:]
    assert "nested too deeply" in text and named in text and "Traceback" not in text
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").rglob("*.json"))  # nothing written


def test_nesting_just_under_the_parser_limit_is_refused_too():
    """900 levels parse, then a recursive walk (schema validation, json.dumps) could still overflow."""
    from lrkv.checks import MAX_NESTING, parse_json, parse_toml

    with pytest.raises(ValueError, match="x.json: nested too deeply"):
        parse_json("x.json", "[" * 900 + "]" * 900)
    assert parse_json("x.json", "[" * MAX_NESTING + "]" * MAX_NESTING)
    with pytest.raises(ValueError, match="x.toml: nested too deeply"):
        parse_toml("x.toml", "a = " + "[" * 500 + "]" * 500)
    with pytest.raises(ValueError, match="x.toml: not valid TOML"):
        parse_toml("x.toml", "a = [")


# ----------------------------------------------------------------------------- the project's policy files
@pytest.mark.parametrize("file, text, words", [
    ("pyproject.toml", "tool = 3\n", "pyproject.toml: field tool must be a table, got int 3"),
    ("pyproject.toml", "[tool]\nlrkv = 3\n", "pyproject.toml: field tool.lrkv must be a table, got int 3"),
    ("pyproject.toml", "[tool.lrkv]\npolicy = 3\n", "pyproject.toml [tool.lrkv.policy]: the policy must be a table"),
    ("pyproject.toml", '[tool.lrkv.policy]\ndefaults = "x"\n', "defaults must be a table"),
    ("lrkv.toml", "policy = 3\n", "lrkv.toml: the policy must be a table"),
    ("lrkv.toml", "[policy.defaults]\ncase_timeout = 1e300\n", "defaults.case_timeout must be <= 86400"),
])
def test_a_malformed_project_policy_is_exit_2_naming_file_and_field(file, text, words, tmp_path, monkeypatch,
                                                                     capsys):
    """`tool = 3` in pyproject.toml used to be an AttributeError on every `lrkv verify`."""
    (tmp_path / file).write_text(text)
    monkeypatch.chdir(tmp_path)
    code, out = _cli_exit(["verify", "--backend", "tiled", "--grid", "quick", "--out", "out", "--no-progress"],
                          capsys)
    assert code == 2 and words in out and "Traceback" not in out, out
    assert not (tmp_path / "out" / "report.json").exists()


@pytest.mark.parametrize("value", ["1e300", "86401.0"])
def test_a_case_timeout_past_one_day_is_refused_at_load(value, tmp_path):
    """case_timeout = 1e300 was accepted, then every case was an ERROR (OverflowError in the timer)."""
    from lrkv.verify.tolerance import load_policy

    p = tmp_path / "p.toml"
    p.write_text(f"[backend.tiled]\ncase_timeout = {value}\n")
    with pytest.raises(ValueError, match=r"backend.tiled.case_timeout must be <= 86400"):
        load_policy(p)
    p.write_text("[backend.tiled]\ncase_timeout = 86400.0\n")
    assert load_policy(p).resolve("tiled", "float32").case_timeout == 86400.0


# ----------------------------------------------------------------------------- export --check: hand-edited manifests
def _fake_release(tmp_path, report_text: str = "{}", **change) -> Path:
    """An artifact, its report and a manifest whose hashes match (no engine is built: each edit
    below must be refused before one would load)."""
    import json

    from lrkv.compiled.manifest import MANIFEST_SCHEMA, manifest_path, sha256_file

    artifact = tmp_path / "lrkv-kernel.onnx"
    artifact.write_bytes(b"onnx bytes")
    report = tmp_path / "lrkv-kernel.onnx.report.json"
    report.write_text(report_text)
    config = ExportConfig(SPEC, level="kernel", t_max=8)
    m = {"schema": MANIFEST_SCHEMA, "engine": "onnx", "config": config.to_dict(),
         "dynamic_ranges": {"B": {"min": 1, "max": 16}, "T_max": {"min": 1, "max": 8}},
         "weights": {"mode": "inputs (kernel level: basis_k/v)"}, "tools": {"lrkv": "0"},
         "artifact": {"files": [{"name": artifact.name, "sha256": sha256_file(artifact), "bytes": 10}]},
         "verification": {"report": report.name, "report_sha256": sha256_file(report), "summary": {},
                          "grid": {"T_max": [1, 8], "seeds": [0]}}}
    for key, value in change.items():
        *parents, last = key.split("__")
        d = m
        for p in parents:
            d = d[p]
        d[last] = value
    manifest_path(artifact).write_text(json.dumps(m))
    return artifact


@pytest.mark.parametrize("change, words", [
    (dict(engine="aoti"), "field engine: 'aoti' artifacts are .pt2 files, not lrkv-kernel.onnx"),
    (dict(engine="tensorrt"), "field engine: 'tensorrt' artifacts are .ep files"),
    (dict(engine="bogus"), "field engine: 'bogus' is not one of onnx, aoti, tensorrt"),
    (dict(weights__seed=3), "field weights.seed: a kernel-level artifact with weights 'inputs' embeds no weights"),
    (dict(weights__sha256="ab"), "field weights.sha256"),
])
def test_export_check_of_a_hand_edited_manifest_is_exit_2(change, words, tmp_path, capsys):
    """`weights.seed` on a kernel artifact used to be an AttributeError after the engine loaded;
    another `engine` handed the ONNX bytes to another loader."""
    artifact = _fake_release(tmp_path, **change)
    code, out = _cli_exit(["export", "--check", str(artifact), "--quiet"], capsys)
    assert code == 2 and "lrkv-kernel.onnx.manifest.json" in out and words in out, out
    assert "Traceback" not in out


def test_export_check_of_embedded_weights_without_a_seed_is_exit_2(tmp_path, capsys):
    layer = ExportConfig(SPEC, level="layer", t_max=8, weights="embedded").to_dict()
    for seed in (None, -1, True, 2**64):
        weights = {"mode": "embedded", "sha256": "ab", **({} if seed is None else {"seed": seed})}
        artifact = _fake_release(tmp_path, config=layer, weights=weights)
        code, out = _cli_exit(["export", "--check", str(artifact), "--quiet"], capsys)
        assert code == 2 and "field weights.seed: embedded weights record their seed" in out, (seed, out)


def test_export_check_with_a_manifest_that_is_a_directory_is_exit_2(tmp_path, capsys):
    from lrkv.compiled.manifest import manifest_path

    artifact = tmp_path / "lrkv-kernel.onnx"
    artifact.write_bytes(b"onnx bytes")
    manifest_path(artifact).mkdir()
    code, out = _cli_exit(["export", "--check", str(artifact), "--quiet"], capsys)
    assert code == 2 and "lrkv-kernel.onnx.manifest.json: the manifest beside lrkv-kernel.onnx is not a file" in out


def test_export_check_of_a_deeply_nested_report_is_exit_2(tmp_path, capsys):
    artifact = _fake_release(tmp_path, report_text=DEEP_JSON)
    code, out = _cli_exit(["export", "--check", str(artifact), "--quiet"], capsys)
    assert code == 2 and "lrkv-kernel.onnx.report.json: nested too deeply" in out, out


@pytest.mark.parametrize("extra, words", [
    (["--engine", "aoti"], "--engine aoti: lrkv-kernel.onnx.manifest.json records a 'onnx' engine"),
    (["--out", "{tmp}/o"], "--out does not apply to --check"),
    (["--spec", "H=2,d_h=8,r=2"], "--spec does not apply to --check"),
])
def test_export_check_does_not_ignore_other_options(extra, words, tmp_path, capsys):
    """--engine was silently ignored by --check: it is now the engine the manifest must record."""
    artifact = _fake_release(tmp_path)
    code, out = _cli_exit(["export", "--check", str(artifact), "--quiet", *[a.format(tmp=tmp_path) for a in extra]],
                          capsys)
    assert code == 2 and words in out, out
    assert not (tmp_path / "o").exists()
