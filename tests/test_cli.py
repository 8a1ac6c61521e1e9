"""The `lrkv` command: lazy verbs, `python -m lrkv`, global -q/-v, help texts, broken verbs."""

from __future__ import annotations

import subprocess
import sys

import pytest

from lrkv import cli


def test_version_imports_no_torch():
    code = ("import sys\nfrom lrkv.cli import main\ntry:\n    main(['--version'])\nexcept SystemExit:\n    pass\n"
            "assert 'torch' not in sys.modules, sorted(m for m in sys.modules if m.startswith('torch'))[:3]")
    subprocess.run([sys.executable, "-c", code], check=True)


def test_python_dash_m_lrkv():
    r = subprocess.run([sys.executable, "-m", "lrkv", "--version"], capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.startswith("lrkv ")


def test_help_lists_verbs_and_exit_codes_without_internal_notes(capsys):
    with pytest.raises(SystemExit) as e:
        cli.main(["--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0
    for verb in cli.available_verbs():
        assert f"    {verb} " in out
    for code in ("0 ", "1 ", "2 ", "3 ", "4 ", "130"):
        assert f"\n  {code}" in out
    assert "not built" not in out and "register(" not in out and "module" not in out.lower()


@pytest.mark.parametrize("verb", list(cli.available_verbs()))
def test_each_verb_help_shows_its_own_usage(verb, capsys):
    with pytest.raises(SystemExit) as e:
        cli.main([verb, "--help"])
    out = capsys.readouterr().out
    assert e.value.code == 0 and out.startswith(f"usage: lrkv {verb}")
    others = [v for v in cli.available_verbs() if v != verb]
    assert not any(f"usage: lrkv {v}" in out for v in others)


def test_a_verb_module_that_fails_to_import_is_named(monkeypatch, capsys):
    monkeypatch.setitem(cli.VERBS, "bench", ("lrkv_no_such_module_for_test", "x"))
    monkeypatch.setattr(cli, "_present", lambda module: True)
    assert cli.main(["bench"]) == 2
    err = capsys.readouterr().err
    assert "lrkv bench: cannot load lrkv_no_such_module_for_test" in err


def test_an_absent_verb_module_is_left_out(monkeypatch, capsys):
    monkeypatch.setitem(cli.VERBS, "cache", ("lrkv.spec.no_such_cli", "x"))
    assert "cache" not in cli.available_verbs()
    with pytest.raises(SystemExit) as e:
        cli.main(["cache"])
    assert e.value.code == 2


def test_no_verb_prints_help_and_exits_2(capsys):
    assert cli.main([]) == 2
    assert "usage: lrkv" in capsys.readouterr().err


def test_quiet_turns_progress_off(monkeypatch):
    seen = {}
    monkeypatch.setattr("lrkv.verify.verify_cli.cmd_verify", lambda args: seen.update(vars(args)) or 0)
    assert cli.main(["-q", "verify", "--grid", "quick"]) == 0
    assert seen["no_progress"] is True and seen["verbosity"] == -1
    assert cli.main(["-vv", "verify"]) == 0 and seen["verbosity"] == 2 and seen["no_progress"] is False


def test_quiet_and_verbose_also_follow_the_verb(monkeypatch, capsys):
    """A printed replay command (`lrkv verify --backend … --case '…'`) takes -v at its end."""
    seen = {}
    monkeypatch.setattr("lrkv.verify.verify_cli.cmd_verify", lambda args: seen.update(vars(args)) or 0)
    assert cli.main(["verify", "--backend", "tiled", "--case", "{}", "-v"]) == 0 and seen["verbosity"] == 1
    assert cli.main(["verify", "-q"]) == 0 and seen["verbosity"] == -1 and seen["no_progress"] is True
    with pytest.raises(SystemExit) as e:
        cli.main(["verify", "-q", "-v"])  # one or the other, as before the verb
    assert e.value.code == 2 and "not allowed with" in capsys.readouterr().err
