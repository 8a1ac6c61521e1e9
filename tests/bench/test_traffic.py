"""Memory traffic of the Triton kernels (lrkv.bench.traffic) and the GPU time predicted from it
(lrkv.bench.prediction), on the CPU.

What is pinned down:
  * the count: masked-off lanes move nothing — a ragged batch's latents are loaded exactly once
    per valid token, garbage slots never — and the wrappers' buffers are told apart by use;
  * a traffic regression: every default launch (the GPU's, forced, and the interpreter's own)
    of decode, paged decode and extend loads at most its predicted bytes + 5 %, and at least
    every valid cache byte once;
  * the documented `lrkv bench --traffic` command runs as written (on a one-launch grid) and
    its committed log says every launch held its prediction.
The time predicted from these bytes is tests/bench/test_prediction.py's.
Runs in the interpreter at T = 64: ~15 s on two idle cores.
"""

from __future__ import annotations

import functools
import re
import shlex
from pathlib import Path

import pytest
import torch

from lrkv.bench.traffic import N_NEW, gpu_launch, group_overhead, measure, traffic_matrix_markdown

ROOT = Path(__file__).resolve().parents[2]
SLACK = 1.05  # a launch may load 5 % more than predicted (the small loads the model leaves out)

triton_interpreter = pytest.mark.skipif(
    __import__("importlib").util.find_spec("triton") is None
    or __import__("lrkv.kernels.runtime", fromlist=["x"]).interpreter_problem() is not None,
    reason="needs Triton's interpreter")


@functools.lru_cache(maxsize=None)
def _measure(variant: str, path: str, cache: str, launch_from: str = "gpu"):
    return measure("2.5B", variant, path, cache, B=2, T=64, launch_from=launch_from)


def _payload_cache(row) -> int:
    """Bytes of every valid token's cache, read once."""
    return sum(row.measured.get(p, {}).get("unique", 0) for p in ("shared_k", "shared_v", "latent_k", "latent_v"))


@triton_interpreter
def test_masked_lanes_count_zero_and_each_valid_latent_is_read_once():
    row = _measure("decode", "wide", "bf16")
    H, r = 18, 55
    valid = 64 + (64 - 64 // 4 - 3)  # lengths T and 3/4 T - 3; the slots past them hold NaN garbage
    for part in ("latent_k", "latent_v"):  # bf16: 2 bytes
        assert row.measured[part] == dict(loads=valid * H * r * 2, stores=0, unique=valid * H * r * 2)
    groups = row.launch["n_groups"]
    assert row.measured["shared_k"]["loads"] == groups * valid * 128 * 2  # once per head group
    assert row.measured["shared_k"]["unique"] == valid * 128 * 2
    # the wrappers' own buffers: partials written by the split kernel and read by the combine,
    # out and lse written only; nothing outside the launches' arguments
    assert row.measured["scratch"]["loads"] == row.measured["scratch"]["stores"] > 0
    assert row.measured["output"]["stores"] == 2 * H * (128 + 1) * 4 and row.measured["output"]["loads"] == 0
    assert "outside every argument" not in row.measured
    assert [k for k, _ in row.programs] == ["decode_split_kernel", "decode_combine_kernel"]
    md = traffic_matrix_markdown([row])
    assert f"| 2.5B | 64 | decode | {row.loads / row.payload:.3f} ({row.loads / row.predicted['loads']:.3f}) |" in md


@pytest.mark.parametrize("argv,needle", [(["--json"], "--json: only with --traffic"),
                                         (["--traffic", "--scales", "9B"], "--scales: unknown")])
def test_cli_bad_traffic_options_exit_2(argv, needle, tmp_path, capsys):
    from lrkv.cli import main

    assert main(["bench", *argv, "--out", str(tmp_path)]) == 2
    assert needle in capsys.readouterr().out and not list(tmp_path.iterdir())


CASES = [  # (call, path, cache, launch): every call, path and cache; the GPU's launch and the interpreter's
    ("decode", "wide", "bf16", "gpu"), ("decode", "per_head", "fp8", "gpu"), ("decode", "rope", "bf16", "gpu"),
    ("paged", "wide", "fp8", "gpu"), ("paged", "rope", "fp8", "gpu"), ("extend", "wide", "bf16", "gpu"),
    ("decode", "wide", "fp8", "interpreter"), ("extend", "per_head", "bf16", "interpreter"),
]


@triton_interpreter
@pytest.mark.parametrize("variant,path,cache,launch_from", CASES)
def test_a_default_launch_loads_at_most_its_predicted_bytes(variant, path, cache, launch_from):
    row = _measure(variant, path, cache, launch_from)
    pred = row.predicted["loads"]
    assert row.loads <= SLACK * pred, (
        f"{variant}/{path}/{cache} ({launch_from} launch {row.launch}): loads {row.loads} B > predicted {pred} B "
        f"+ 5 % ({row.loads / pred:.3f}x); by buffer: { {k: v['loads'] for k, v in row.measured.items()} }")
    assert row.loads >= _payload_cache(row) > 0  # every valid cache byte at least once
    assert row.measured["total"]["stores"] <= SLACK * row.predicted["stores"]


def test_the_gpu_launch_is_the_launch_tables_sm90_row():
    cfg = gpu_launch(rows=8, H=18, d_h=128, r=55, slots=32768, dtype=torch.bfloat16)
    assert (cfg.private, cfg.group_size, cfg.n_groups, cfg.block_t, cfg.num_warps) == ("per_head", 9, 2, 32, 16)
    # as many programs as the SMs hold of the compiled kernel, over 8 rows x 2 groups, in whole waves
    assert cfg.programs_per_sm_from.startswith("blocks per SM of the compiled kernel")
    assert cfg.num_splits == 132 * cfg.programs_per_sm // 16
    rope = gpu_launch(rows=8, H=18, d_h=128, r=55, slots=32768, dtype=torch.bfloat16, rope_exact=True)
    assert (rope.private, rope.block_t, rope.num_warps) == ("per_head", 16, 16)
    fp8 = gpu_launch(rows=8, H=18, d_h=128, r=55, slots=32768, dtype=torch.bfloat16, fp8=True)
    assert (fp8.group_size, fp8.n_groups, fp8.block_t) == (9, 2, 16)  # the fp8 entry's tile
    ext = gpu_launch(rows=2 * N_NEW, H=18, d_h=128, r=55, slots=1024, dtype=torch.bfloat16, extend=True, seqs=2)
    # the GPU's tile, not the interpreter's larger one; a sequence's 4 new tokens in one block, a head each
    assert (ext.block_t, ext.block_q, ext.group_size) == (32, N_NEW, 1)


def test_the_shared_stream_reread_by_each_group():
    assert group_overhead(18, 128, 55, 9) == pytest.approx(256 / 2236)  # +11.4 % of the cache bytes
    assert group_overhead(18, 128, 55, 18) == 0
    assert group_overhead(32, 128, 54, 8) == pytest.approx(3 * 256 / (256 + 64 * 54))


def _docs_commands() -> list[tuple[list[str], str]]:
    """The `lrkv bench --traffic` lines of docs/kernels.md's Memory traffic section: (argv, the
    log's name pattern it tees into, `<sha>` as *)."""
    from tests.test_helpers.doc_blocks import blocks

    lines = [ln for b in blocks(ROOT / "docs" / "kernels.md", "Memory traffic", "bash") for ln in b.splitlines()
             if ln.startswith("lrkv bench --traffic")]
    assert lines, "no `lrkv bench --traffic` line in docs/kernels.md's Memory traffic section"
    out = []
    for line in lines:
        cmd, tee = line.split("|")
        log = re.search(r"ci/logs/(\S+)\$\(git rev-parse --short HEAD\)\.log", tee)
        assert log, f"the documented line tees into ci/logs/<name>-$(git rev-parse --short HEAD).log: {line}"
        out.append((shlex.split(cmd, comments=True)[1:], log.group(1) + "*.log"))
    return out


def test_the_documented_commands_parse_and_their_logs_are_committed():
    from lrkv.cli import build_parser

    for argv, pattern in _docs_commands():
        args = build_parser("bench").parse_args(argv)
        assert args.traffic and args.traffic_launch == "gpu"
        logs = sorted((ROOT / "ci" / "logs").glob(pattern))
        assert logs, f"ci/logs/{pattern}: run the documented command {argv}"
        for log in logs:
            text = log.read_text()
            assert shlex.split(text.splitlines()[0].removeprefix("$ lrkv "), comments=True) == argv, log.name
            assert re.search(r"(\d+)/\1 launches load at most their prediction \+ 5 %", text), text[-400:]


@triton_interpreter
def test_the_documented_command_runs_verbatim_on_a_smaller_grid(tmp_path, monkeypatch, capsys):
    """Each documented argv as written, its grid cut to one launch (the documented grids take
    ~10-40 min each on two cores: their runs are the committed logs)."""
    import json

    from lrkv.bench import traffic
    from lrkv.cli import main

    full = traffic.measure_grid
    monkeypatch.setattr(traffic, "measure_grid", lambda scales, seq_lens, paths, **kw: full(
        scales[:1], (64,), variants=("decode",), paths=("wide",), caches=("bf16",), **kw))
    monkeypatch.chdir(tmp_path)  # --out is relative: write under tmp
    for argv, _ in _docs_commands():
        assert main(argv) == 0
        assert "1/1 launches load at most their prediction + 5 %" in capsys.readouterr().out
        out = tmp_path / argv[argv.index("--out") + 1] / "traffic.json"
        doc = json.loads(out.read_text())
        scale = argv[argv.index("--scales") + 1].split(",")[0]
        assert doc["launch"] == "gpu" and [(r["scale"], r["variant"]) for r in doc["rows"]] == [(scale, "decode")]
