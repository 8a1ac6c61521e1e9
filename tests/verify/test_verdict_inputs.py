"""Inputs that used to slip past the verdict: each is refused naming what is wrong (exit 2 on
the command line), or handled so that the verdict can still say no — a backend no worker can
be sent, a forged property verdict, a policy or declaration that would require nothing, a
dirty checkout, a report without its coverage, a report file without end."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from lrkv.cli import main
from lrkv.spec import AttentionSpec
from lrkv.verify.case import Case
from lrkv.verify.protocol import normalize_backend
from lrkv.verify.runner import run
from lrkv.verify.tiled import TiledBackend
from lrkv.verify.tolerance import load_policy

F32 = Case("kernel", AttentionSpec.lrkv(3, 16, 5), "float32", (9, 40, 23), 48, seed=3)

PLANTED = '''
import os
import threading
from lrkv.verify.tiled import TiledBackend


class Locked(TiledBackend):  # holds a lock: it cannot be pickled to the worker
    name = "locked"

    def __init__(self):
        super().__init__()
        self.lock = threading.Lock()


class LockedExit(Locked):
    name = "locked-exit"

    def decode_attention(self, *args, **kw):
        os._exit(0)
'''


def cli(argv) -> int:
    try:
        return main([str(a) for a in argv])
    except SystemExit as e:
        return int(e.code)


@pytest.fixture()
def planted(tmp_path, monkeypatch):
    (tmp_path / "locked_mods.py").write_text(PLANTED)
    monkeypatch.syspath_prepend(str(tmp_path))


def verify(tmp_path, *argv) -> tuple[int, dict | None]:
    out = tmp_path / "out"
    code = cli(["verify", "--case", F32.to_json(), "--out", out, "--no-progress", *argv])
    path = out / "report.json"
    return code, json.loads(path.read_text()) if path.exists() else None


# ----------------------------------------------------------------------------- isolation
def test_an_unpicklable_backend_runs_in_a_forked_worker(tmp_path, planted, capsys):
    """In-process, os._exit(0) ended `lrkv verify` with exit 0 and no report."""
    code, rep = verify(tmp_path, "--backend", "locked_mods:LockedExit", "--backend", "locked_mods:Locked")
    assert code == 1 and rep is not None and rep["complete"] is True
    by = {r["backend"]: r for r in rep["records"]}
    assert by["locked-exit"]["status"] == "error" and "exited with code 0" in by["locked-exit"]["reason"]
    assert by["locked"]["status"] == "pass" and by["locked"]["properties"]["inputs_untouched"]["status"] == "pass"
    err = capsys.readouterr()
    assert "runs in a forked worker process (it cannot be pickled" in err.out + err.err


def test_an_unpicklable_backend_is_refused_where_no_fork_is_safe(tmp_path, planted, monkeypatch, capsys):
    import lrkv.verify.isolation as iso

    monkeypatch.setattr(iso, "fork_refusal", lambda: "this process holds a CUDA context")
    code, rep = verify(tmp_path, "--backend", "locked_mods:LockedExit")
    assert code == 2 and rep is None
    err = capsys.readouterr()
    assert "backend 'locked_mods:LockedExit' cannot be isolated" in err.out + err.err
    assert "--in-process" in err.out + err.err


def test_a_forged_inputs_untouched_verdict_fails_replay(tmp_path):
    """The verdict edited to pass re-judges (no evidence to contradict it); replay re-runs it."""
    from lrkv.verify.tolerance_report import property_table

    code, rep = verify(tmp_path, "--backend", "lrkv.mutants.server:RotatesCache")
    assert code == 1
    for r in rep["records"]:
        (r.get("properties") or {}).get("inputs_untouched", {}).update(status="pass", reason="")
    rep["properties"] = property_table(rep["records"])
    forged, base = tmp_path / "forged.json", tmp_path / "b.json"
    forged.write_text(json.dumps(rep))
    assert cli(["gate", forged, "--baseline", base, "--update-baseline"]) == 0
    assert cli(["gate", forged, "--baseline", base]) == 0  # the evidence alone cannot tell
    assert cli(["gate", forged, "--baseline", base, "--replay", "100"]) == 1


# ----------------------------------------------------------------------------- declarations and policy
@pytest.mark.parametrize("attr, value", [("deterministic", "yes"), ("batch_invariant", 1), ("compile_safe", None)])
def test_a_declaration_that_is_not_a_bool_is_refused(attr, value):
    b = TiledBackend()
    setattr(b, attr, value)
    with pytest.raises(TypeError, match=f"backend 'x': {attr} must be True or False, got {value!r}"):
        normalize_backend(b, "x")


def test_a_misspelt_backend_in_the_policy_properties_is_exit_2(tmp_path, capsys):
    pol = tmp_path / "p.toml"
    pol.write_text('[properties.backend.tirton-batch-invariant]\nrequire = ["deterministic"]\n')
    assert verify(tmp_path, "--backend", "tiled", "--policy", pol)[0] == 2
    err = capsys.readouterr()
    assert "properties.backend.tirton-batch-invariant: no backend is named" in err.out + err.err
    pol.write_text('[properties.backend.tiled]\nrequire = ["deterministic"]\n')
    load_policy(pol).check_property_backends({"tiled"})  # a real name stands


@pytest.mark.parametrize("answer", [(1, ""), "yes", None, True, (True,), (False, 3)])
def test_supports_must_return_a_bool_and_a_reason(answer):
    class Odd(TiledBackend):
        name = "odd"

        def supports(self, case):
            return answer

    (rec,) = [r for r in run([F32], [("odd", Odd())], load_policy(), isolation="inprocess", properties=False)]
    assert rec["status"] == "error"
    assert "supports() must return (bool, str), got" in rec["reason"]


# ----------------------------------------------------------------------------- the gate's files
def test_require_commit_refuses_a_dirty_checkout(tmp_path, monkeypatch):
    import lrkv.verify.tolerance_report as tr
    from lrkv.verify.gate_cli import commit_entries

    monkeypatch.setattr(tr, "git_info", lambda: {"commit": "a" * 40, "dirty": True})
    (e,) = commit_entries({"git": {"commit": "a" * 40, "dirty": False}})
    assert e.klass == "ERROR" and "uncommitted changes now" in e.detail
    assert "commit your changes, then re-run `lrkv verify` and this gate" in e.detail
    monkeypatch.setattr(tr, "git_info", lambda: {"commit": "a" * 40, "dirty": False})
    assert commit_entries({"git": {"commit": "a" * 40, "dirty": False}}) == []


def test_a_report_without_its_coverage_or_without_end_is_exit_2(tmp_path, monkeypatch, capsys):
    import lrkv.verify.tolerance_report as tr

    code, rep = verify(tmp_path, "--backend", "tiled", "--no-twins")
    assert code == 0
    del rep["coverage"]
    p = tmp_path / "r.json"
    p.write_text(json.dumps(rep))
    assert cli(["gate", p, "--baseline", tmp_path / "b.json", "--update-baseline"]) == 2
    assert "'coverage' is a required property" in capsys.readouterr().err
    monkeypatch.setattr(tr, "MAX_JSON_BYTES", 1 << 20)
    if Path("/dev/zero").exists():
        assert cli(["gate", "/dev/zero", "--baseline", tmp_path / "b.json"]) == 2
        assert "/dev/zero: larger than 1 MiB" in capsys.readouterr().err


def test_the_fp8_comparison_refuses_a_size_it_cannot_allocate(capsys):
    from lrkv.bench.fp8_comparison import main as fp8_main

    with pytest.raises(SystemExit) as e:
        fp8_main(["--batch", "100000", "--t-max", "100000"])
    assert e.value.code == 2 and "--batch 100000 × --t-max 100000 needs at least" in capsys.readouterr().err
