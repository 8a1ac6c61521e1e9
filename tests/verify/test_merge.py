"""`lrkv merge` and the gate over shards (lrkv/verify/merge.py): the merged report is the serial
one (a shard made by `--jobs 2` too), and a missing, duplicated, foreign or edited shard is
refused by the merge and the gate."""

from __future__ import annotations

import copy
import json

import pytest

from lrkv.cli import main
from lrkv.verify import gate
from lrkv.verify.merge import merge

# six cases of the quick grid at every level but tp (passes, skips, a server-property share)
SMALL = ["--grid", "quick", "--filter", "theta500000", "--backend", "tiled", "--backend", "eager", "--no-progress",
         "-q"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The serial report (in this process: cheap), its two shards as written — the second made by
    two job processes (jobs.py) — and their merge."""
    d = tmp_path_factory.mktemp("shards")
    for name, extra in (("serial", ["--in-process"]), ("s1", ["--shard", "1/2", "--in-process"]),
                        ("s2", ["--shard", "2/2", "--jobs", "2"])):
        assert main(["verify", *SMALL, *extra, "--out", str(d / name)]) == 0
    assert main(["merge", str(d / "s1"), str(d / "s2" / "report.json"), "--out", str(d / "merged")]) == 0
    load = lambda name: json.loads((d / name / "report.json").read_text())  # noqa: E731
    return d, load("serial"), load("s1"), load("s2"), load("merged")


def _strip(report: dict) -> tuple[list[dict], dict]:
    recs = [{k: v for k, v in r.items() if k != "seconds"} for r in report["records"]]
    rest = {k: v for k, v in report.items() if k not in ("records", "created", "seconds", "command", "merged")}
    return recs, rest


def _gate(report: dict) -> list[gate.GateEntry]:
    return gate.classify(report, {"entries": {}, "policy": None})


def _errors(entries) -> list[str]:
    return [e.detail for e in entries if e.klass == "ERROR"]


def test_the_merged_report_is_the_serial_one_and_gates_green_with_replay(runs, capsys):
    d, serial, s1, s2, merged = runs
    assert {len(s1["shard"]["cases"]), len(s2["shard"]["cases"])} <= {2, 3, 4}  # both shards hold cases
    assert _strip(merged) == _strip(serial)  # records in selection order, summary, coverage, properties
    assert [s["index"] for s in merged["merged"]["shards"]] == [1, 2]
    assert (d / "merged" / "report.md").read_text().startswith("## LRKV tolerance report — ✅")
    assert "merged from 2 shards" in (d / "merged" / "report.md").read_text()
    assert (d / "s1" / "report.md").read_text().startswith("## LRKV tolerance report — ⚠️ SHARD 1/2")
    base = str(d / "base.json")
    assert main(["gate", str(d / "serial" / "report.json"), "--baseline", base, "--update-baseline"]) == 0
    assert main(["gate", str(d / "merged" / "report.json"), "--baseline", base, "--replay", "3"]) == 0
    assert "replay: 3 records re-run" in capsys.readouterr().out  # records of both shards, drawn at gate time


def test_jobs_write_the_serial_records_record_for_record(runs):
    _, serial, _, jobs, _ = runs  # shard 2/2 ran its cases in two job processes
    assert len(jobs["shard"]["cases"]) >= 2  # so --jobs 2 ran two jobs (usable_jobs: at most one per case)
    mine = set(jobs["shard"]["cases"])
    same = [r for r in serial["records"] if r["id"] in mine]
    assert [{k: v for k, v in r.items() if k != "seconds"} for r in jobs["records"]] == \
        [{k: v for k, v in r.items() if k != "seconds"} for r in same]  # order, verdicts, evidence, properties
    assert len(serial["records"]) == 12 and any("properties" in r for r in serial["records"])
    assert {r["status"] for r in serial["records"]} == {"pass", "skip"}


def test_a_shard_alone_is_never_green(runs):
    _, _, s1, _, _ = runs
    entries = _gate(s1)
    assert gate.exit_code(entries, s1) == 1
    assert any("shard 1/2" in e and "incomplete on its own" in e for e in _errors(entries))


# ------------------------------------------------------------------ the merge says no, naming the file
def _edit(report: dict, how) -> dict:
    report = copy.deepcopy(report)
    how(report)
    return report


def _set_commit(r):
    r["git"]["commit"] = "0" * 40


def _set_policy(r):
    r["policy"]["sha256"] = "f" * 64


def _set_fingerprint(r):
    r["shard"]["fingerprint"] = "e" * 64


def _edit_record(r):
    r["records"][0]["reason"] = "edited"


def _interrupt(r):
    r["complete"] = False


@pytest.mark.parametrize("which, words", [
    (lambda s1, s2: [s1], "shard 2/2 missing"),
    (lambda s1, s2: [s1, s1, s2], "shard 1/2 duplicated"),
    (lambda s1, s2: [s1, _edit(s2, _set_fingerprint)], "is foreign: another selection"),
    (lambda s1, s2: [s1, _edit(s2, _set_commit)], "is foreign: another commit"),
    (lambda s1, s2: [s1, _edit(s2, _set_policy)], "is foreign: judged under policy"),
    (lambda s1, s2: [s1, _edit(s2, _edit_record)], "shard 2/2 was edited"),
    (lambda s1, s2: [s1, _edit(s2, _interrupt)], "shard 2/2 is incomplete"),
], ids=["missing", "duplicated", "foreign-grid", "foreign-commit", "foreign-policy", "edited", "incomplete"])
def test_the_merge_refuses_a_broken_set_of_shards(runs, which, words):
    _, _, s1, s2, _ = runs
    given = which(s1, s2)
    with pytest.raises(ValueError, match=words):
        merge([(f"shard{i}.json", r) for i, r in enumerate(given)])


def test_the_merge_cli_refuses_with_exit_2_and_writes_nothing(runs, capsys):
    d = runs[0]
    assert main(["merge", str(d / "s2"), "--out", str(d / "half")]) == 2
    assert "shard 1/2 missing" in capsys.readouterr().err and not (d / "half" / "report.json").exists()
    assert main(["merge", str(d / "no-such-shard"), "--out", str(d / "half")]) == 2
    assert "no-such-shard: no such file" in capsys.readouterr().err
    assert main(["merge", str(d / "merged"), str(d / "s1"), "--out", str(d / "half")]) == 2
    assert "already a merged report" in capsys.readouterr().err and not (d / "half" / "report.json").exists()


# ------------------------------------------------------------------ the gate says no, naming the shard
def _drop_shard_2(r):
    cases = set(r["merged"]["shards"][1]["cases"])
    r["merged"]["shards"].pop(1)
    r["records"] = [x for x in r["records"] if x["id"] not in cases]


def _duplicate_shard_1(r):
    cases = set(r["merged"]["shards"][0]["cases"])
    r["merged"]["shards"].append(copy.deepcopy(r["merged"]["shards"][0]))
    r["records"] += copy.deepcopy([x for x in r["records"] if x["id"] in cases])


def _foreign_grid(r):
    r["merged"]["shards"][1]["fingerprint"] = "e" * 64


def _foreign_commit(r):
    r["merged"]["shards"][1]["git"] = dict(r["merged"]["shards"][1]["git"], commit="0" * 40)


def _foreign_policy(r):
    r["merged"]["shards"][1]["policy_sha256"] = "f" * 64


def _edited(r):
    cases = set(r["merged"]["shards"][1]["cases"])
    rec = next(x for x in r["records"] if x["id"] in cases)
    rec["seconds"] = rec["seconds"] + 1.0  # nothing the re-judging reads: only the shard's sha256 sees it


@pytest.mark.parametrize("how, words", [
    (_drop_shard_2, "shard 2/2 missing"),
    (_duplicate_shard_1, "shard 1/2 duplicated"),
    (_foreign_grid, "shard 2/2 is foreign: made for selection fingerprint"),
    (_foreign_commit, "shard 2/2 is foreign: made from commit"),
    (_foreign_policy, "shard 2/2 is foreign: judged under policy"),
    (_edited, "shard 2/2 was edited"),
], ids=["missing", "duplicated", "foreign-grid", "foreign-commit", "foreign-policy", "edited"])
def test_the_gate_refuses_a_merged_report_with_a_broken_shard(runs, how, words):
    merged = runs[4]
    assert gate.exit_code(_gate(merged), merged) == 0
    broken = _edit(merged, how)
    entries = _gate(broken)
    assert gate.exit_code(entries, broken) == 1
    assert any(words in e for e in _errors(entries)), _errors(entries)
