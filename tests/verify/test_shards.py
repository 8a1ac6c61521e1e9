"""The split of a selection into shards (lrkv/verify/shards.py): deterministic, complete, balanced by cost."""

from __future__ import annotations

import pytest

from lrkv.cli import main
from lrkv.verify.selection import Selection
from lrkv.verify.shards import Shard, costs, estimated_cost, fingerprint, partition, shard_cases


@pytest.fixture(scope="module")
def quick():
    return Selection(grid="quick").resolve()


@pytest.mark.parametrize("n", [1, 2, 3, 7, 100])
def test_the_shards_hold_every_case_once_in_selection_order(quick, n):
    parts = [shard_cases(quick, Shard(i, n)) for i in range(1, n + 1)]
    ids = [c.id for p in parts for c in p]
    assert sorted(ids) == sorted(c.id for c in quick) and len(set(ids)) == len(quick)
    order = {c.id: i for i, c in enumerate(quick)}
    assert all([order[c.id] for c in p] == sorted(order[c.id] for c in p) for p in parts)
    assert parts == [shard_cases(list(quick), Shard(i, n)) for i in range(1, n + 1)]  # the same on every machine


def test_shards_are_balanced_by_cost_not_by_count():
    # one case as costly as the other nine together: it is a shard of its own
    parts = partition([9.0] + [1.0] * 9, 2)
    assert parts == [[0], list(range(1, 10))]
    loads = [sum(w for i, w in enumerate([5, 4, 3, 3, 3]) if i in p) for p in partition([5, 4, 3, 3, 3], 2)]
    assert sorted(loads) == [8, 10]  # LPT: within 4/3 of the best split (9, 9)


def test_measured_costs_win_over_the_estimate(quick):
    w = costs(quick, {quick[0].id: 0.5})
    assert w[0] == 0.5  # the others' estimates are put in seconds by the cases measured
    assert w[1] == pytest.approx(estimated_cost(quick[1]) * 0.5 / estimated_cost(quick[0]))
    slow = quick[-1]
    assert shard_cases(quick, Shard(1, 2), {c.id: 1.0 for c in quick} | {slow.id: 1e6}) == [slow]


def test_the_fingerprint_changes_with_the_cases_and_the_selection(quick):
    sel = Selection(grid="quick")
    assert fingerprint(sel, quick) == fingerprint(Selection(grid="quick"), list(quick))
    assert fingerprint(sel, quick[:-1]) != fingerprint(sel, quick)
    assert fingerprint(Selection(grid="quick", twins=False), quick) != fingerprint(sel, quick)


@pytest.mark.parametrize("text, words", [("0/2", "index must be 1..2"), ("3/2", "index must be 1..2"),
                                         ("2", "expected i/n"), ("1/0", "count 0"), ("a/b", "expected i/n")])
def test_a_bad_shard_is_refused_naming_it(text, words):
    with pytest.raises(ValueError, match=words):
        Shard.parse(text)


def test_the_cli_refuses_a_bad_shard_and_costs_without_one(tmp_path, capsys):
    out = str(tmp_path / "out")
    with pytest.raises(SystemExit) as e:
        main(["verify", "--grid", "quick", "--shard", "3/2", "--out", out])
    assert e.value.code == 2 and "--shard" in capsys.readouterr().err
    costs_file = tmp_path / "r.json"
    costs_file.write_text("{}")
    assert main(["verify", "--grid", "quick", "--costs", str(costs_file), "--out", out]) == 2
    assert "--costs balances shards: it needs --shard" in capsys.readouterr().err
    assert not (tmp_path / "out" / "report.json").exists()


def test_a_shard_without_cases_writes_a_report_saying_so(tmp_path):
    """More shards than cases (a fleet of 7 on 6 cases): the empty part is no failure, and its
    report is what `lrkv merge` needs to see that every shard ran."""
    import json

    out = tmp_path / "out"
    argv = ["verify", "--grid", "quick", "--filter", "theta500000", "--backend", "tiled", "--in-process",
            "--no-progress", "--shard", "7/7", "--out", str(out)]
    assert main(argv) == 0
    rep = json.loads((out / "report.json").read_text())
    assert rep["records"] == [] and rep["shard"]["cases"] == [] and rep["shard"]["count"] == 7


def test_a_shard_that_verifies_nothing_for_a_backend_exits_0_the_same_run_unsharded_exits_4(tmp_path, capsys):
    """A matrix job whose part holds only paged cases must not fail a kernel-level backend for
    verifying nothing there: the merged report is judged (the gate's exit 4). Without --shard
    the same emptiness is still exit 4."""
    base = ["verify", "--grid", "quick", "--level", "kernel-paged", "--filter", "theta500000", "--backend", "tiled",
            "--in-process", "--no-progress"]
    assert main([*base, "--shard", "1/1", "--out", str(tmp_path / "s")]) == 0
    assert "this shard alone verifies nothing" in capsys.readouterr().err
    assert main([*base, "--out", str(tmp_path / "u")]) == 4
