"""The false-failure hunt (`python3 -m lrkv.verify.hunt`): it reaches every kernel level —
paged decode and ragged extend included — with the features those levels need drawn, runs
every correct backend that declares a level through `runner.run`, and sees a planted bug."""

from __future__ import annotations

import json

import pytest

from lrkv.mutants.paged import EXTEND_MUTANTS, PAGED_MUTANTS
from lrkv.verify import hunt as hunt_mod
from lrkv.verify.case import DTYPES, KERNEL_LEVELS
from lrkv.verify.hunt import CORRECT, LEVELS, draw_cases, hunt, main


def test_default_hunt_reaches_every_kernel_level():
    assert set(KERNEL_LEVELS) <= set(LEVELS)
    result = hunt(CORRECT, LEVELS, 2, seed=5)
    assert result["levels"] == list(LEVELS)
    # every correct backend that declares a level is hunted there
    # the example decode backend has a paged decode too (gather-then-decode, as `lrkv init` writes it)
    assert set(result["by_level"]["kernel-paged"]) == {"reference", "materialized", "eager", "my-paged", "my-splitk",
                                                        "my-vllm", "my-flashinfer"}
    assert set(result["by_level"]["kernel-extend"]) == {"reference", "materialized", "eager", "my-extend"}
    assert not result["false_failures"]


def _features(level: str) -> dict:
    drawn = draw_cases(level, DTYPES, 300, seed=0)
    assert len(drawn) == 300 and all(c.level == level for c in drawn)
    paged = [c for c in drawn if c.pages and c.pages.size]
    lengths = [(n, c) for c in drawn for n in c.lengths]
    return {
        "drawn": drawn, "paged": paged,
        "pages": {c.pages.size for c in paged},
        "not_dividing": any(c.t_max % c.pages.size for c in paged),
        "shuffle": {c.pages.shuffle for c in paged},
        "shared": [c for c in paged if c.pages.shared_prefix],
        "garbage": {c.nan_garbage for c in drawn},
        "lengths": {"0" if n == 0 else "1" if n == 1 else "t_max" if n == c.t_max else
                    "page" if c.pages and c.pages.size and n % c.pages.size == 0 else "other" for n, c in lengths},
        "varlen": any(len(set(c.lengths)) > 1 for c in drawn),
        "batches": {c.batch for c in drawn},
        "ropes": {(c.spec.rope, c.spec.qk_norm) for c in drawn},
        "dtypes": {c.dtype for c in drawn},
    }


@pytest.mark.parametrize("level", ["kernel-paged", "kernel-extend"])
def test_strategies_draw_every_paged_and_extend_feature(level):
    f = _features(level)
    assert 1 in f["pages"] and any(p >= 16 and p & (p - 1) == 0 for p in f["pages"])
    assert f["pages"] & {3, 5, 7} and len({p for p in f["pages"] if p & (p - 1)}) >= 3 and f["not_dividing"]
    assert f["shuffle"] == {True, False} and f["garbage"] == {True, False}
    assert {c.pages.hnd for c in f["paged"]} == {True, False} and {c.pages.pool for c in f["paged"]} == {0, 1500}
    assert f["shared"] and all(c.pages.shared_prefix % c.pages.size == 0 and c.pages.shared_prefix <= min(c.lengths[:2])
                               for c in f["shared"])
    assert {"0", "1", "t_max", "page", "other"} <= f["lengths"] and f["varlen"]
    assert 1 in f["batches"] and max(f["batches"]) >= 15
    assert {(r, q) for r in ("none", "exact", "aligned", "latent") for q in (False, True)} <= f["ropes"]
    assert all(c.spec.rank % 2 == 0 for c in f["drawn"] if c.spec.rope in ("aligned", "latent"))
    assert f["dtypes"] == set(DTYPES)
    if level == "kernel-extend":
        extend = f["drawn"]
        n_new = {n for c in extend for n in c.extend.n_new}
        assert {0, 1} <= n_new and n_new & set(range(2, 9)) and max(n_new) > 8
        assert any({0, 1} <= set(c.extend.n_new) and any(2 <= n for n in c.extend.n_new) for c in extend)  # one ragged batch
        assert len(f["paged"]) < len(extend) and f["paged"]  # contiguous and paged caches
        assert all(c.splits == c.tile == 0 for c in extend)
    else:
        assert {c.splits for c in f["drawn"]} > {0}


def test_draws_replay_from_the_seed():
    assert draw_cases("kernel-extend", ("float32",), 15, seed=61) == draw_cases("kernel-extend", ("float32",), 15,
                                                                                 seed=61)


@pytest.mark.parametrize("level", ["kernel-paged", "kernel-extend"])
def test_seeded_hunt_at_a_new_level_judges_its_records(level, tmp_path, capsys):
    out = tmp_path / "hunt.json"
    assert main(["--level", level, "--examples", "12", "--seed", "63", "--out", str(out)]) == 0
    result = json.loads(out.read_text())
    assert result["levels"] == [level] and result["stats"]["cases"] == 12
    per = result["by_level"][level]
    assert sum(c.get("pass", 0) for c in per.values()) == result["stats"]["records"] >= 12
    cov = result["coverage"][level]
    assert len(cov["page_size"]) >= 4 and cov["pages"]["shared prefix"] >= 1
    if level == "kernel-extend":
        assert set(cov["n_new"]) >= {"0", "1", "2-8"}
    printed = capsys.readouterr().out
    assert "0 false failures" in printed and f"  {level} (12 drawn): reference " in printed


@pytest.mark.parametrize("mutant", [*PAGED_MUTANTS, *EXTEND_MUTANTS], ids=lambda m: m.name)
def test_hunt_reports_a_planted_paged_or_extend_bug(mutant):
    level = "kernel-paged" if mutant in PAGED_MUTANTS else "kernel-extend"
    label = f"lrkv.mutants.paged:{mutant.__name__}"
    # the last-position RoPE bug needs exact RoPE and a chunk of >= 2 tokens: more draws
    result = hunt([label], [level], 40 if mutant.name == "mutant-rope-last-position" else 12, seed=61)
    failures = result["false_failures"]
    assert failures and all(f["backend"] == mutant.name and f["level"] == level and f["status"] == "fail"
                            and f["repro"].startswith(f"lrkv verify --backend {label} --case ") for f in failures)


def test_hunt_of_a_broken_backend_exits_1_and_prints_replays(capsys):
    label = "lrkv.mutants.paged:PageOffByOne"
    assert main(["--backend", label, "--level", "kernel-paged", "--examples", "4", "--seed", "61"]) == 1
    out = capsys.readouterr().out
    assert "FAIL mutant-page-off-by-one kernel-paged:" in out and f"lrkv verify --backend {label} --case" in out


def test_triton_backend_is_huntable_at_the_new_levels():
    pytest.importorskip("triton")
    from lrkv.kernels import runtime

    with runtime.interpreter():
        result = hunt(["triton"], ["kernel-paged", "kernel-extend"], 3, seed=7, strict=True)
    assert result["levels"] == ["kernel-paged", "kernel-extend"]
    assert all(result["by_level"][lv]["triton"].get("pass") == 3 for lv in result["levels"])
    assert not result["false_failures"]


def test_twin_records_are_judged_and_counted():
    """runner.run adds, for a backend that declines a case (here: the example paged kernel at
    float64, a dtype it does not claim), a record of the nearest variant it supports: the hunt
    judges and counts those too."""
    result = hunt(["reference", "examples.my_paged_backend:backend"], ["kernel-paged"], 8, seed=3)
    assert result["stats"]["twins"] > 0
    assert result["by_level"]["kernel-paged"]["my-paged"].get("twins", 0) == result["stats"]["twins"]
    assert not result["false_failures"]


def test_unavailable_backend_or_undeclared_level_is_a_usage_error(capsys, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert main(["--backend", "tiled", "--level", "kernel-extend", "--examples", "1"]) == 2
    assert "no hunted backend declares level 'kernel-extend'" in capsys.readouterr().err
    from lrkv.kernels import runtime

    if runtime.mode()[0] == "fallback":
        assert main(["--backend", "triton", "--level", "kernel-paged", "--examples", "1"]) == 2
        assert "unavailable" in capsys.readouterr().err


def test_a_sharded_hunt_merges_into_the_report_of_the_whole_hunt_which_the_gate_reads(tmp_path, capsys):
    import json

    from lrkv.cli import main as lrkv
    from lrkv.verify import gate

    args = ["--backend", "tiled", "--level", "kernel", "--examples", "3", "--seed", "3"]
    assert main([*args, "--report", str(tmp_path / "all")]) == 0
    for i in (1, 2):
        assert main([*args, "--report", str(tmp_path / f"s{i}"), "--shard", f"{i}/2"]) == 0
    assert lrkv(["merge", str(tmp_path / "s1"), str(tmp_path / "s2"), "--out", str(tmp_path / "m")]) == 0
    whole, merged = (json.loads((tmp_path / d / "report.json").read_text()) for d in ("all", "m"))
    assert all(json.loads((tmp_path / f"s{i}" / "report.json").read_text())["records"] for i in (1, 2))
    drop = ("created", "seconds", "command", "merged", "records")
    assert {k: v for k, v in merged.items() if k not in drop} == {k: v for k, v in whole.items() if k not in drop}
    assert [{**r, "seconds": 0} for r in merged["records"]] == [{**r, "seconds": 0} for r in whole["records"]]
    entries = gate.classify(merged, {"entries": {}, "policy": None})
    assert gate.exit_code(entries, merged) == 0 and len(merged["records"]) == 3
    with pytest.raises(SystemExit) as e:
        main([*args, "--shard", "1/2"])  # a shard is only worth its report
    assert e.value.code == 2 and "--shard I/N needs --report DIR" in capsys.readouterr().err
