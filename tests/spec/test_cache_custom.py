"""`lrkv cache` on a custom model (--heads --head-dim --rank --layers --kv-heads), a preset
with fields replaced, the bounds on counts, and docs/spec.md's commands run as written.

Expected numbers are counted by hand from DESIGN §3's cache layouts, not from the accounting.
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import pytest

from lrkv.cli import main
from lrkv.spec.cache_model import cache_model
from lrkv.spec.planner import MAX_COUNT, plan

CUSTOM = ["--heads", "32", "--head-dim", "128", "--rank", "48", "--layers", "40", "--kv-heads", "8"]


def _run(argv, capsys):
    try:
        rc = main(["cache", *argv])
    except SystemExit as e:  # argparse refuses before the verb runs
        rc = e.code
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_a_custom_model_is_sized_from_its_flags(capsys):
    rc, out, _ = _run([*CUSTOM, "--seq-len", "32K", "--batch", "16", "--json"], capsys)
    assert rc == 0
    data = json.loads(out)
    rows = {r["family"]: r for r in data["rows"]}
    assert data["preset"] == "custom" and data["n_layers"] == 40
    assert rows["lrkv"]["spec"] == "lrkv-H32-dh128-r48-rope_none"
    assert rows["lrkv"]["bytes_per_token_layer"] == 2 * (2 * 128 + 2 * 32 * 48)  # shared K, V + H latents each
    assert rows["gqa"]["bytes_per_token_layer"] == 2 * (2 * 8 * 128)
    assert rows["mla"]["spec"].startswith("mla-H32-dh128-dc512")  # d_c defaults to 4·d_h
    assert rows["mha"]["model_bytes"] == 40 * 16 * 32768 * 2 * 32 * 128 * 2  # N·B·T·(2·H·d_h)·b = 320 GiB


def test_kv_heads_is_optional_and_gqa_is_shown_only_when_given(capsys):
    """GQA is a comparison row: a custom LRKV model sizes without --kv-heads, with no GQA row."""
    rc, out, err = _run([*CUSTOM[:-2], "--seq-len", "32K", "--batch", "16", "--json"], capsys)
    assert rc == 0, err
    rows = {r["family"]: r for r in json.loads(out)["rows"]}
    assert sorted(rows) == ["lrkv", "mha", "mla", "mlra", "mqa"]
    assert rows["lrkv"]["bytes_per_token_layer"] == 2 * (2 * 128 + 2 * 32 * 48)
    rc, out, _ = _run([*CUSTOM[:-2], "--seq-len", "32K"], capsys)
    assert rc == 0 and "gqa: not shown (give --kv-heads" in out and "gqa-H32" not in out
    rc, out, _ = _run([*CUSTOM, "--seq-len", "32K"], capsys)
    assert rc == 0 and "gqa-H32-dh128-kv8" in out and "gqa: not shown" not in out


def test_a_preset_with_flags_replaced_keeps_its_other_fields():
    s = cache_model("2.5B", heads=16, kv_heads=4)
    assert (s.label, s.n_heads, s.head_dim, s.rank, s.n_layers, s.gqa_kv_heads, s.mla_latent) == \
        ("2.5B+custom", 16, 128, 55, 18, 4, 384)
    assert cache_model("2.5B", rank=40).label == "2.5B"  # rank and layers never changed the label
    assert cache_model("2.5B", heads=18).label == "2.5B"  # the preset's own value is no change


@pytest.mark.parametrize("argv,needle", [
    (CUSTOM[:4] + ["--seq-len", "8K"], "missing: --rank, --layers"),
    (["--heads", "0", *CUSTOM[2:], "--seq-len", "8K"], "--heads: must be >= 1"),
    (["--head-dim", "-3", "--heads", "32", *CUSTOM[4:], "--seq-len", "8K"], "--head-dim"),
    ([*CUSTOM[:-1], "2.5", "--seq-len", "8K"], "--kv-heads"),
    ([*CUSTOM[:-1], "6", "--seq-len", "8K"], "--kv-heads: 6 KV heads must divide the 32 query heads"),
    ([*CUSTOM[:4], "--rank", "129", *CUSTOM[6:], "--seq-len", "8K"], "--rank: rank (129) must be <= d_h (128)"),
    (["--preset", "2.5B", "--heads", "16", "--seq-len", "8K"], "6 KV heads (the 2.5B preset's) must divide"),
    (["--preset", "2.5B", "--head-dim", "32", "--seq-len", "8K"], "rank (55) (the 2.5B preset's) must be <= d_h (32)"),
    (["--preset", "2.5B", "--mla-latent", "0", "--seq-len", "8K"], "--mla-latent"),
    (["--preset", "2.5B", "--layers", str(MAX_COUNT + 1), "--seq-len", "8K"], "--layers"),
    # a prober's inputs: a 31-digit length, and a huge one with a suffix, used to plan and exit 0
    (["--preset", "2.5B", "--seq-len", str(10**30)], "--seq-len: must be at most 2,147,483,647"),
    (["--preset", "2.5B", "--seq-len", "9" * 25 + "M"], "--seq-len: must be at most 2,147,483,647"),
    (["--preset", "2.5B", "--seq-len", "2097152M"], "--seq-len: must be at most"),  # 2^41: the suffix counts
    (["--preset", "2.5B", "--seq-len", "8K", "--batch", str(2**31)], "--batch: must be at most"),
])
def test_bad_input_exits_2_naming_the_flag(argv, needle, capsys):
    rc, out, err = _run(argv, capsys)
    assert rc == 2 and needle in err and out == "", err


def test_the_bounds_themselves_are_accepted(capsys):
    rc, out, _ = _run(["--preset", "2.5B", "--seq-len", str(MAX_COUNT), "--batch", "1", "--json"], capsys)
    assert rc == 0 and json.loads(out)["seq_len"] == MAX_COUNT
    with pytest.raises(ValueError, match="seq_len must be <= 2147483647"):
        plan(cache_model("2.5B"), n_layers=18, batch=1, seq_len=MAX_COUNT + 1)


def _doc_commands() -> list[str]:
    doc = (Path(__file__).resolve().parents[2] / "docs" / "spec.md").read_text()
    return [ln for block in re.findall(r"```sh\n(.*?)```", doc, flags=re.S) for ln in block.splitlines()
            if ln.startswith("lrkv cache ")]


@pytest.mark.parametrize("line", _doc_commands())
def test_every_lrkv_cache_command_in_docs_spec_runs_as_written(line, capsys):
    rc, out, err = _run(shlex.split(line, comments=True)[2:], capsys)  # after "lrkv cache"
    assert rc == 0 and out, err


def test_the_docs_show_a_custom_model():
    assert any("--heads" in ln and "--preset" not in ln for ln in _doc_commands())
