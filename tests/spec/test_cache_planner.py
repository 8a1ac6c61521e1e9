"""`lrkv cache` and lrkv.spec.planner: every number against an independent count.

The expected values are written from the element counts of DESIGN §3 (not from the
accounting functions the planner calls), so a planner that drifts from the formulas fails.
"""

from __future__ import annotations

import json
from fractions import Fraction

import pytest

from lrkv.cli import main
from lrkv.spec import PAPER_SCALES
from lrkv.spec.planner import (
    GIB, padded_elements, parse_count, peer_specs, per_device_bytes, plan, tokens_that_fit,
)

S25 = PAPER_SCALES["2.5B"]  # N 18, H 18, d_h 128, r 55, GQA 6, MLA 384


@pytest.mark.parametrize("text,want", [("32768", 32768), ("32K", 32768), ("32k", 32768), ("1M", 2**20), (" 8K ", 8192)])
def test_parse_count_accepts_k_and_m(text, want):
    assert parse_count("seq_len", text) == want


@pytest.mark.parametrize("text", ["32KB", "3.5K", "1G", "-4", "K", "", "32 000", "0x10"])
def test_parse_count_refuses_anything_else(text):
    with pytest.raises(ValueError, match="seq_len"):
        parse_count("seq_len", text)


def test_plan_matches_hand_counts_2p5b():
    N, B, T, b = 18, 64, 32768, 2
    p = plan(S25, n_layers=N, batch=B, seq_len=T, dtype="bf16", tp=2, budget_bytes=80 * GIB)
    rows = {r.family: r for r in p.rows}
    per_token = {"mha": 2 * 18 * 128, "gqa": 2 * 6 * 128, "mqa": 2 * 128, "mla": 384,
                 "mlra": 4 * 128 + 64, "lrkv": 2 * (128 + 18 * 55)}
    per_device = {"mha": 2 * 9 * 128, "gqa": 2 * 3 * 128, "mqa": 2 * 128, "mla": 384,  # MQA, MLA replicate
                  "mlra": 2 * 128 + 64, "lrkv": 2 * (128 + 9 * 55)}                       # LRKV: shared block on both
    for f, e in per_token.items():
        r = rows[f]
        assert r.bytes_per_token_layer == e * b
        assert r.fraction_of_mha == Fraction(e, 2 * 18 * 128)
        assert r.model_bytes == N * B * T * e * b
        assert r.per_device_bytes == N * B * T * per_device[f] * b
        assert r.tokens_fit == (80 * GIB) // (N * per_device[f] * b)
    assert rows["mha"].model_bytes == 324 * GIB  # 2·2·18·18·128 bytes/token × 2M tokens
    assert rows["lrkv"].fraction_of_mha == Fraction(1, 18) + Fraction(55, 128)  # Eq. 9
    assert rows["lrkv"].padded_bytes == N * B * T * 2 * (128 + 18 * 64) * b  # r 55 -> 64 at align 16
    assert rows["mha"].padded_bytes == rows["mha"].model_bytes  # 128 is already aligned
    assert p.rank_ceiling == 56  # floor(128(1/2 − 1/18))


def test_tokens_that_fit_is_the_largest_that_fits():
    s = peer_specs(S25)["lrkv"]
    budget = 10**9 + 7
    n = tokens_that_fit(s, 18, budget, "bf16", tp=3)
    assert per_device_bytes(s, 18, n, "bf16", 3) <= budget < per_device_bytes(s, 18, n + 1, "bf16", 3)


def test_padded_elements_rounds_each_innermost_width():
    specs = peer_specs(S25, rank=55)
    assert padded_elements(specs["lrkv"], 64) == 2 * 128 + 2 * 18 * 64
    assert padded_elements(specs["lrkv"], 1) == 2 * (128 + 18 * 55)
    assert padded_elements(specs["mla"], 256) == 512  # 384 -> 512
    assert padded_elements(specs["mlra"], 128) == 4 * 128 + 128  # k_rope 64 -> 128


def test_unshardable_layout_is_reported_not_hidden():
    p = plan(PAPER_SCALES["6.3B"], n_layers=4, batch=1, seq_len=8, tp=4)  # GQA has 2 KV heads < 4: replicated
    rows = {r.family: r for r in p.rows}
    assert rows["gqa"].per_device_bytes == 4 * 8 * 2 * 128 * 2
    p = plan(PAPER_SCALES["2.5B"], n_layers=1, batch=1, seq_len=8, tp=2)
    assert all(r.per_device_bytes is not None for r in p.rows)
    p = plan(PAPER_SCALES["1.2B"], n_layers=1, batch=1, seq_len=8, tp=3)  # 12 heads, GQA 4 KV heads on 3
    gqa = next(r for r in p.rows if r.family == "gqa")
    assert gqa.per_device_bytes is None and "n_kv_heads" in gqa.note


@pytest.mark.parametrize("kw,field", [
    (dict(n_layers=0), "n_layers"), (dict(batch=1.5), "batch"), (dict(seq_len=-1), "seq_len"),
    (dict(tp=4), "tp"), (dict(align=0), "align"), (dict(budget_bytes=0), "budget_bytes"),
    (dict(families=("mha", "xyz")), "family"), (dict(rank=-1), "rank"), (dict(rank=5.0), "rank"),
    (dict(dtype="int3"), "dtype"),
])
def test_plan_refuses_bad_input_naming_the_field(kw, field):
    args = dict(n_layers=18, batch=1, seq_len=8) | kw
    with pytest.raises((TypeError, ValueError), match=field):
        plan(S25, **args)


def test_cli_json_and_table(capsys):
    assert main(["cache", "--preset", "2.5B", "--seq-len", "32K", "--batch", "64", "--tp", "2",
                 "--budget-gib", "80", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["schema"] == "lrkv.cache-plan/1" and out["tokens"] == 64 * 32768 and out["rank_ceiling"] == 56
    assert [r["family"] for r in out["rows"]] == ["mha", "gqa", "mqa", "mla", "mlra", "lrkv"]
    assert out["rows"][0]["model_bytes"] == 324 * GIB
    assert main(["cache", "--preset", "2.5B", "--seq-len", "2K", "--rank", "64", "--target", "1/3"]) == 0
    text = capsys.readouterr().out
    assert "lrkv-H18-dh128-r64" in text and "r ≤ 35" in text


@pytest.mark.parametrize("argv,needle", [
    (["--preset", "2.5B", "--seq-len", "32Q"], "--seq-len"),
    (["--preset", "2.5B", "--seq-len", "0"], "--seq-len"),
    (["--preset", "2.5B", "--seq-len", "8K", "--batch", "2.5"], "--batch"),
    (["--preset", "2.5B", "--seq-len", "8K", "--dtype", "int3"], "--dtype"),
    (["--preset", "2.5B", "--seq-len", "8K", "--tp", "4"], "--tp"),
    (["--preset", "2.5B", "--seq-len", "8K", "--budget-gib", "-1"], "--budget-gib"),
    (["--preset", "2.5B", "--seq-len", "8K", "--target", "abc"], "--target"),
    (["--preset", "6.3B", "--seq-len", "8K"], "--layers"),
    (["--preset", "9B", "--seq-len", "8K"], "--preset"),
])
def test_cli_bad_input_exits_2_naming_the_option(argv, needle, capsys):
    try:
        rc = main(["cache", *argv])
    except SystemExit as e:  # argparse refuses before the verb runs
        rc = e.code
    assert rc == 2
    assert needle in capsys.readouterr().err


def test_a_rank_past_d_h_is_refused(capsys):
    """--rank 500 at d_h = 128 used to plan a cache 396% of MHA's without a word."""
    with pytest.raises(ValueError, match=r"rank \(500\) must be <= d_h \(128\) of 2.5B"):
        plan(S25, n_layers=18, batch=1, seq_len=8, rank=500)
    assert main(["cache", "--preset", "2.5B", "--seq-len", "8K", "--rank", "129"]) == 2
    assert "rank (129) must be <= d_h (128)" in capsys.readouterr().err
    assert plan(S25, n_layers=18, batch=1, seq_len=8, rank=128).warnings  # d_h itself: allowed, and warned


@pytest.mark.parametrize("json_out", [False, True])
def test_a_rank_past_break_even_is_planned_with_a_visible_warning(json_out, capsys):
    p = plan(S25, n_layers=18, batch=1, seq_len=8, rank=121)  # break-even rank of 2.5B: 120 (d_h(1 − 1/H) = 120.9)
    assert len(p.warnings) == 1 and "past the break-even rank 120" in p.warnings[0] and "no smaller" in p.warnings[0]
    assert not plan(S25, n_layers=18, batch=1, seq_len=8, rank=120).warnings
    json_flag = ["--json"] if json_out else []
    assert main(["cache", "--preset", "2.5B", "--seq-len", "8K", "--rank", "121", *json_flag]) == 0
    out = capsys.readouterr()
    assert "warning: lrkv lrkv-H18-dh128-r121" in out.err and "break-even rank 120" in out.err
    if json_out:
        assert json.loads(out.out)["warnings"] == list(p.warnings)


def test_a_target_whose_ceiling_passes_d_h_is_capped_and_warned(capsys):
    """--target 4 printed r ≤ 504 for a 128-wide head."""
    p = plan(S25, n_layers=18, batch=1, seq_len=8, target_fraction=Fraction(4))
    assert p.rank_ceiling == 128 and p.rank_ceiling_capped
    assert any("exceeds d_h = 128" in w for w in p.warnings)
    assert any("break-even rank 120" in w for w in p.warnings)
    assert main(["cache", "--preset", "2.5B", "--seq-len", "8K", "--target", "4"]) == 0
    out = capsys.readouterr()
    assert "r ≤ 128 (= d_h: every rank fits)" in out.out and "exceeds d_h = 128" in out.err
    half = plan(S25, n_layers=18, batch=1, seq_len=8)
    assert half.rank_ceiling == 56 and not half.rank_ceiling_capped and not half.warnings
