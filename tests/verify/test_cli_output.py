"""What `lrkv verify` / `lrkv gate` print: summary table, unwrapped replays, no rich markup,
GitHub annotations, `gate --json`, and a missing baseline's hint."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from lrkv import cli
from lrkv.spec import AttentionSpec
from lrkv.verify.case import Case

CASE = Case("kernel", AttentionSpec.lrkv(3, 8, 3), "float32", (5, 9, 0), 9).to_json()
GOOD, BAD = "examples.my_backend:backend", "tests.testing.test_api:SCALED"


class Markup:
    """A backend whose error message looks like rich markup."""

    name, levels = "markup", frozenset({"kernel"})
    dtypes = (torch.float32,)

    def available(self):
        return True, ""

    def decode_attention(self, *a, **kw):
        raise ValueError("[red]boom[/red] [bold]x")


MARKUP = Markup()


def _verify(tmp_path, *backends, extra=()):
    argv = ["verify", "--case", CASE, "--out", str(tmp_path / "r"), "--no-progress", *extra]
    for b in backends:
        argv += ["--backend", b]
    return cli.main(argv)


def test_summary_table_and_unwrapped_replays(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    assert _verify(tmp_path, GOOD, BAD) == 1
    err = capsys.readouterr().err
    header = next(line for line in err.splitlines() if "backend" in line and "verdict" in line)
    assert all(w in header for w in ("pass", "fail", "error", "skip"))
    assert any("scaled-out" in line and "FAILED" in line for line in err.splitlines())
    replays = [line for line in err.splitlines() if line.startswith("  replay: ")]
    assert len(replays) == 1 and len(replays[0]) > 200  # one line, however long
    assert replays[0].endswith("'") and json.loads(replays[0].split("--case ", 1)[1].strip("'"))


def test_quiet_drops_the_table_and_verbose_lists_every_record(tmp_path, capsys):
    assert cli.main(["-q", "verify", "--case", CASE, "--out", str(tmp_path / "r"), "--backend", GOOD]) == 0
    err = capsys.readouterr().err
    assert "verdict" not in err and "PASS my-splitk" not in err
    assert cli.main(["-v", "verify", "--case", CASE, "--out", str(tmp_path / "r"), "--backend", GOOD]) == 0
    err = capsys.readouterr().err
    assert "verdict" in err and "PASS my-splitk kernel:" in err


def test_markup_is_printed_as_written(tmp_path, capsys):
    assert _verify(tmp_path, "tests.verify.test_cli_output:MARKUP") == 1
    assert "[red]boom[/red] [bold]x" in capsys.readouterr().err


def test_github_annotations_per_failing_case(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    assert _verify(tmp_path, GOOD, BAD) == 1
    out = capsys.readouterr().out.splitlines()
    ann = [line for line in out if line.startswith("::error ")]
    assert len(ann) == 1 and "title=lrkv FAIL scaled-out kernel%3A" in ann[0] and "%0Areplay: lrkv verify" in ann[0]
    monkeypatch.delenv("GITHUB_ACTIONS")
    assert _verify(tmp_path, GOOD, BAD) == 1
    assert "::error" not in capsys.readouterr().out


def test_gate_json_and_the_first_baseline(tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("GITHUB_ACTIONS", raising=False)
    assert _verify(tmp_path, GOOD) == 0
    report, base = str(tmp_path / "r" / "report.json"), str(tmp_path / "base.json")
    capsys.readouterr()
    assert cli.main(["gate", report, "--baseline", base]) == 2
    err = capsys.readouterr().err
    assert "no such baseline" in err and f"--baseline {base} --update-baseline" in err
    assert cli.main(["gate", report, "--baseline", base, "--update-baseline"]) == 0
    capsys.readouterr()
    assert cli.main(["gate", report, "--baseline", base, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["exit_code"] == 0 and data["counts"]["PASS"] == 1 and data["entries"][0]["klass"] == "PASS"
    assert _verify(tmp_path, BAD.replace("SCALED", "SCALED"), extra=()) == 1  # a regression in a new report
    monkeypatch.setenv("GITHUB_ACTIONS", "true")
    rc = cli.main(["gate", report, "--baseline", base, "--json"])
    out = capsys.readouterr().out
    data = json.loads(out[:out.index("\n::error")] if "\n::error" in out else out)
    assert rc == data["exit_code"] == 1
    assert "::error title=lrkv gate " in out


@pytest.mark.parametrize("verb", ["verify", "gate"])
def test_help_has_its_own_text_and_exit_codes(verb, capsys):
    with pytest.raises(SystemExit):
        cli.main([verb, "--help"])
    out = capsys.readouterr().out
    assert out.startswith(f"usage: lrkv {verb}") and "exit codes:" in out and "130" in out
    other = "gate" if verb == "verify" else "verify"
    assert f"lrkv {other} [" not in out


def test_many_failures_are_grouped_and_counted(tmp_path, capsys):
    """A kernel failing many cases prints each group (backend, level, output) with its worst
    cases in full and counts the rest — not two lines per failure; -v prints them all."""
    from lrkv.verify.verify_cli import FAILURES_SHOWN

    args = ["verify", "--backend", "lrkv.mutants.decode:WrongHeadBasis", "--grid", "default", "--level",
            "kernel", "--dtype", "float64", "--no-progress", "--out", str(tmp_path / "r")]
    assert cli.main(args) == 1
    err = capsys.readouterr().err
    report = json.loads((tmp_path / "r" / "report.json").read_text())
    failing = [r for r in report["records"] if r["status"] == "fail"]
    assert len(failing) > FAILURES_SHOWN
    replays = [line for line in err.splitlines() if line.startswith("  replay: ")]
    groups = [line for line in err.splitlines() if line.split(" failing in ")[0].isdigit()]
    assert groups and len(replays) <= FAILURES_SHOWN * len(groups) < len(failing)
    assert sum(int(g.split()[0]) for g in groups) == len(failing)  # every failure counted
    assert "more in this group" in err
    assert cli.main(["-v", *args]) == 1
    assert sum(line.startswith("  replay: ") for line in capsys.readouterr().err.splitlines()) == len(failing)


def test_no_progress_still_prints_plain_progress_lines(tmp_path, capsys, monkeypatch):
    # a CI log (or a GPU's first minutes of compiles) is never silent: with the bar off, a plain
    # line per interval on stderr — here every step, the interval set to zero
    from lrkv.verify import verify_cli

    monkeypatch.setattr(verify_cli, "PLAIN_PROGRESS_S", 0.0)
    assert _verify(tmp_path, GOOD) == 0
    lines = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("lrkv verify: ") and " steps, " in ln]
    assert lines and lines[-1].startswith("lrkv verify: ") and "/" in lines[-1].split()[2]
    done, total = map(int, lines[-1].split()[2].split("/"))
    assert done == total >= 1


class ScaledAndWritesCache:
    """Wrong values (out × 1.01) and a write into its cache: one failing case, plus a failing
    server property on it that the gate lists as an entry of its own."""

    name, levels, dtypes = "scaled-writes", frozenset({"kernel"}), (torch.float32,)

    def available(self):
        return True, ""

    def decode_attention(self, q, shared_k, *args, **kw):
        from lrkv.reference.lrkv import decode_attention

        out, lse = decode_attention(q, shared_k, *args, **kw)
        shared_k.neg_()
        return out * 1.01, lse


SCALED_WRITES = ScaledAndWritesCache()


def test_verify_and_gate_count_the_same_failures(tmp_path, capsys):
    """verify's line and the gate's counts agree: a failed server property on a failing case
    is counted apart in both, never silently counted twice in one of them."""
    assert _verify(tmp_path, "tests.verify.test_cli_output:SCALED_WRITES") == 1
    out = capsys.readouterr().err
    # inputs_untouched fails; same_buffers, not judged on a failing case, no longer
    # repeats the wrong values as a buffer-reuse bug
    assert "1 cases, 1 records" in out and ": 1 fail; 1 required server properties failed" in out
    report = tmp_path / "r" / "report.json"
    baseline = Path(__file__).resolve().parents[2] / "ci" / "baseline.json"
    assert cli.main(["gate", str(report), "--baseline", str(baseline), "--subset"]) == 1
    out = "".join(capsys.readouterr())
    assert "FAIL 2" in out and "(FAIL: 1 cases, 1 server properties)" in out


def test_a_report_made_before_any_commit_says_so_in_the_gate_and_report_md(tmp_path, capsys):
    """Quick start 2 used to stop at "the report was made from commit None" (gate) beside
    commit `unknown` (report.md): both now say there was no commit, and the gate what to do."""
    from lrkv.verify.tolerance_report import render_markdown

    assert _verify(tmp_path, GOOD) == 0
    path = tmp_path / "r" / "report.json"
    report = json.loads(path.read_text())
    report["git"] = {"commit": None, "dirty": None}
    assert "commit `none (no git commit)`" in render_markdown(report)
    path.write_text(json.dumps(report))
    capsys.readouterr()
    assert cli.main(["gate", str(path), "--baseline", str(Path(__file__).resolve().parents[2] / "ci" / "baseline.json"),
                     "--subset", "--require-commit"]) == 1
    out = "".join(capsys.readouterr())
    assert "made from commit none (no git commit)" in out and "commit your changes, then re-run `lrkv verify`" in out
