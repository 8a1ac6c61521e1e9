"""The launch table of `lrkv.kernels.launch` (tile and warps by GPU, private path, RoPE mode and
paged layout, each entry with its evidence) and the rules around it: the picks it makes are
the picks the kernels were measured and compile-checked with, and its evidence is committed."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import torch

from lrkv.kernels import compile_check, launch, occupancy, runtime
from lrkv.kernels.occupancy import Variant

ROOT = Path(__file__).resolve().parents[2]

# What pick_launch chooses for these calls (recorded when the per-head path became the default
# and extend got token blocks; a change of a pick is a change of this table, reviewed):
# mode | B,H,d_h,r,slots | dtype | rope | private | block_t | kind (extendN: N new tokens a
# sequence) -> private, dot, group, tile, warps, splits, token block. gpu: a 132-SM CUDA
# device (an H200).
PICKS = """
gpu    8,18,128,55,32768  bf16 none  -        -  decode | per_head lp   g9  t32  w16 s16 q1
gpu    8,18,128,55,32768  bf16 exact -        -  decode | per_head lp   g9  t16  w16 s16 q1
gpu    8,18,128,55,32768  fp16 none  -        -  decode | per_head lp   g9  t32  w16 s16 q1
gpu    8,18,128,55,32768  fp16 exact -        -  decode | per_head lp   g9  t16  w16 s16 q1
gpu    8,18,128,55,32768  fp32 none  -        -  decode | per_head ieee g9  t32  w16 s16 q1
gpu    8,18,128,55,32768  fp32 exact -        -  decode | per_head ieee g9  t16  w16 s16 q1
gpu    8,18,128,55,32768  fp64 none  -        -  decode | per_head fma  g9  t16  w8  s16 q1
gpu    8,18,128,55,32768  fp64 exact -        -  decode | per_head fma  g9  t16  w8  s16 q1
gpu    8,32,128,54,32768  bf16 none  -        -  decode | per_head lp   g16 t32  w16 s16 q1
gpu    8,32,128,54,32768  bf16 exact -        -  decode | per_head lp   g16 t16  w16 s16 q1
gpu    8,32,128,54,32768  fp16 none  -        -  decode | per_head lp   g16 t32  w16 s16 q1
gpu    8,32,128,54,32768  fp16 exact -        -  decode | per_head lp   g16 t16  w16 s16 q1
gpu    8,32,128,54,32768  fp32 none  -        -  decode | per_head ieee g16 t32  w16 s16 q1
gpu    8,32,128,54,32768  fp32 exact -        -  decode | per_head ieee g16 t16  w16 s16 q1
gpu    8,32,128,54,32768  fp64 none  -        -  decode | per_head fma  g16 t16  w8  s16 q1
gpu    8,32,128,54,32768  fp64 exact -        -  decode | per_head fma  g16 t16  w8  s16 q1
gpu    3,5,32,7,40        bf16 none  -        -  decode | per_head lp   g5  t32  w16 s1  q1
gpu    3,5,32,7,40        bf16 exact -        -  decode | per_head lp   g5  t16  w16 s1  q1
gpu    3,5,32,7,40        fp16 none  -        -  decode | per_head lp   g5  t32  w16 s1  q1
gpu    3,5,32,7,40        fp16 exact -        -  decode | per_head lp   g5  t16  w16 s1  q1
gpu    3,5,32,7,40        fp32 none  -        -  decode | per_head ieee g5  t32  w16 s1  q1
gpu    3,5,32,7,40        fp32 exact -        -  decode | per_head ieee g5  t16  w16 s1  q1
gpu    3,5,32,7,40        fp64 none  -        -  decode | per_head fma  g5  t16  w4  s1  q1
gpu    3,5,32,7,40        fp64 exact -        -  decode | per_head fma  g5  t16  w4  s1  q1
gpu    1,4,32,8,64        bf16 none  -        -  decode | per_head lp   g4  t32  w16 s1  q1
gpu    1,4,32,8,64        bf16 exact -        -  decode | per_head lp   g4  t16  w16 s1  q1
gpu    1,4,32,8,64        fp16 none  -        -  decode | per_head lp   g4  t32  w16 s1  q1
gpu    1,4,32,8,64        fp16 exact -        -  decode | per_head lp   g4  t16  w16 s1  q1
gpu    1,4,32,8,64        fp32 none  -        -  decode | per_head ieee g4  t32  w16 s1  q1
gpu    1,4,32,8,64        fp32 exact -        -  decode | per_head ieee g4  t16  w16 s1  q1
gpu    1,4,32,8,64        fp64 none  -        -  decode | per_head fma  g4  t16  w4  s1  q1
gpu    1,4,32,8,64        fp64 exact -        -  decode | per_head fma  g4  t16  w4  s1  q1
interp 8,18,128,55,32768  bf16 none  -        -  decode | per_head ieee g9  t128 w8  s1  q1
interp 8,18,128,55,32768  bf16 exact -        -  decode | per_head ieee g9  t128 w8  s1  q1
interp 8,18,128,55,32768  fp16 none  -        -  decode | per_head lp   g9  t128 w8  s1  q1
interp 8,18,128,55,32768  fp16 exact -        -  decode | per_head lp   g9  t128 w8  s1  q1
interp 8,18,128,55,32768  fp32 none  -        -  decode | per_head ieee g9  t128 w8  s1  q1
interp 8,18,128,55,32768  fp32 exact -        -  decode | per_head ieee g9  t128 w8  s1  q1
interp 8,18,128,55,32768  fp64 none  -        -  decode | per_head ieee g9  t128 w8  s1  q1
interp 8,18,128,55,32768  fp64 exact -        -  decode | per_head ieee g9  t128 w8  s1  q1
interp 8,32,128,54,32768  bf16 none  -        -  decode | per_head ieee g16 t128 w8  s1  q1
interp 8,32,128,54,32768  bf16 exact -        -  decode | per_head ieee g16 t128 w8  s1  q1
interp 8,32,128,54,32768  fp16 none  -        -  decode | per_head lp   g16 t128 w8  s1  q1
interp 8,32,128,54,32768  fp16 exact -        -  decode | per_head lp   g16 t128 w8  s1  q1
interp 8,32,128,54,32768  fp32 none  -        -  decode | per_head ieee g16 t128 w8  s1  q1
interp 8,32,128,54,32768  fp32 exact -        -  decode | per_head ieee g16 t128 w8  s1  q1
interp 8,32,128,54,32768  fp64 none  -        -  decode | per_head ieee g16 t128 w8  s1  q1
interp 8,32,128,54,32768  fp64 exact -        -  decode | per_head ieee g16 t128 w8  s1  q1
interp 3,5,32,7,40        bf16 none  -        -  decode | per_head ieee g5  t32  w4  s1  q1
interp 3,5,32,7,40        bf16 exact -        -  decode | per_head ieee g5  t32  w4  s1  q1
interp 3,5,32,7,40        fp16 none  -        -  decode | per_head lp   g5  t32  w4  s1  q1
interp 3,5,32,7,40        fp16 exact -        -  decode | per_head lp   g5  t32  w4  s1  q1
interp 3,5,32,7,40        fp32 none  -        -  decode | per_head ieee g5  t32  w4  s1  q1
interp 3,5,32,7,40        fp32 exact -        -  decode | per_head ieee g5  t32  w4  s1  q1
interp 3,5,32,7,40        fp64 none  -        -  decode | per_head ieee g5  t32  w4  s1  q1
interp 3,5,32,7,40        fp64 exact -        -  decode | per_head ieee g5  t32  w4  s1  q1
interp 1,4,32,8,64        bf16 none  -        -  decode | per_head ieee g4  t32  w4  s1  q1
interp 1,4,32,8,64        bf16 exact -        -  decode | per_head ieee g4  t32  w4  s1  q1
interp 1,4,32,8,64        fp16 none  -        -  decode | per_head lp   g4  t32  w4  s1  q1
interp 1,4,32,8,64        fp16 exact -        -  decode | per_head lp   g4  t32  w4  s1  q1
interp 1,4,32,8,64        fp32 none  -        -  decode | per_head ieee g4  t32  w4  s1  q1
interp 1,4,32,8,64        fp32 exact -        -  decode | per_head ieee g4  t32  w4  s1  q1
interp 1,4,32,8,64        fp64 none  -        -  decode | per_head ieee g4  t32  w4  s1  q1
interp 1,4,32,8,64        fp64 exact -        -  decode | per_head ieee g4  t32  w4  s1  q1
cpu    8,18,128,55,32768  bf16 none  -        -  decode | per_head ieee g9  t16  w8  s1  q1
cpu    8,18,128,55,32768  bf16 exact -        -  decode | per_head ieee g9  t16  w8  s1  q1
cpu    8,18,128,55,32768  fp16 none  -        -  decode | per_head lp   g9  t16  w8  s1  q1
cpu    8,18,128,55,32768  fp16 exact -        -  decode | per_head lp   g9  t16  w8  s1  q1
cpu    8,18,128,55,32768  fp32 none  -        -  decode | per_head ieee g9  t16  w8  s1  q1
cpu    8,18,128,55,32768  fp32 exact -        -  decode | per_head ieee g9  t16  w8  s1  q1
cpu    8,18,128,55,32768  fp64 none  -        -  decode | per_head ieee g9  t16  w8  s1  q1
cpu    8,18,128,55,32768  fp64 exact -        -  decode | per_head ieee g9  t16  w8  s1  q1
cpu    8,32,128,54,32768  bf16 none  -        -  decode | per_head ieee g16 t16  w8  s1  q1
cpu    8,32,128,54,32768  bf16 exact -        -  decode | per_head ieee g16 t16  w8  s1  q1
cpu    8,32,128,54,32768  fp16 none  -        -  decode | per_head lp   g16 t16  w8  s1  q1
cpu    8,32,128,54,32768  fp16 exact -        -  decode | per_head lp   g16 t16  w8  s1  q1
cpu    8,32,128,54,32768  fp32 none  -        -  decode | per_head ieee g16 t16  w8  s1  q1
cpu    8,32,128,54,32768  fp32 exact -        -  decode | per_head ieee g16 t16  w8  s1  q1
cpu    8,32,128,54,32768  fp64 none  -        -  decode | per_head ieee g16 t16  w8  s1  q1
cpu    8,32,128,54,32768  fp64 exact -        -  decode | per_head ieee g16 t16  w8  s1  q1
cpu    3,5,32,7,40        bf16 none  -        -  decode | per_head ieee g5  t32  w4  s1  q1
cpu    3,5,32,7,40        bf16 exact -        -  decode | per_head ieee g5  t32  w4  s1  q1
cpu    3,5,32,7,40        fp16 none  -        -  decode | per_head lp   g5  t32  w4  s1  q1
cpu    3,5,32,7,40        fp16 exact -        -  decode | per_head lp   g5  t32  w4  s1  q1
cpu    3,5,32,7,40        fp32 none  -        -  decode | per_head ieee g5  t32  w4  s1  q1
cpu    3,5,32,7,40        fp32 exact -        -  decode | per_head ieee g5  t32  w4  s1  q1
cpu    3,5,32,7,40        fp64 none  -        -  decode | per_head ieee g5  t32  w4  s1  q1
cpu    3,5,32,7,40        fp64 exact -        -  decode | per_head ieee g5  t32  w4  s1  q1
cpu    1,4,32,8,64        bf16 none  -        -  decode | per_head ieee g4  t32  w4  s1  q1
cpu    1,4,32,8,64        bf16 exact -        -  decode | per_head ieee g4  t32  w4  s1  q1
cpu    1,4,32,8,64        fp16 none  -        -  decode | per_head lp   g4  t32  w4  s1  q1
cpu    1,4,32,8,64        fp16 exact -        -  decode | per_head lp   g4  t32  w4  s1  q1
cpu    1,4,32,8,64        fp32 none  -        -  decode | per_head ieee g4  t32  w4  s1  q1
cpu    1,4,32,8,64        fp32 exact -        -  decode | per_head ieee g4  t32  w4  s1  q1
cpu    1,4,32,8,64        fp64 none  -        -  decode | per_head ieee g4  t32  w4  s1  q1
cpu    1,4,32,8,64        fp64 exact -        -  decode | per_head ieee g4  t32  w4  s1  q1
gpu    8,18,128,55,32768  bf16 none  per_head -  decode | per_head lp   g9  t32  w16 s16 q1
gpu    8,18,128,55,32768  bf16 none  per_head 16 decode | per_head lp   g9  t16  w16 s16 q1
gpu    8,18,128,55,32768  bf16 exact per_head 64 decode | per_head lp   g9  t64  w16 s16 q1
gpu    8,18,128,55,32768  bf16 exact wide     -  decode | wide     lp   g9  t16  w8  s16 q1
interp 3,5,32,7,40        fp64 none  -        -  extend | per_head ieee g5  t32  w4  s1  q1
interp 3,5,32,7,40        fp32 exact per_head 16 extend | per_head ieee g5  t16  w4  s1  q1
cpu    3,5,32,7,40        bf16 none  -        -  extend | per_head ieee g5  t32  w4  s1  q1
gpu    32,18,128,55,32768 bf16 none  -        -  extend4 | per_head lp   g1  t32  w16 s1  q4
gpu    32,18,128,55,32768 bf16 exact -        -  extend4 | per_head lp   g9  t16  w16 s4  q1
gpu    64,32,128,54,32768 bf16 none  -        -  extend16 | per_head lp   g1  t32  w16 s2  q16
gpu    64,32,128,54,32768 fp64 none  -        -  extend16 | per_head fma  g16 t16  w8  s2  q1
interp 12,5,32,7,40        fp32 none  -        -  extend4 | per_head ieee g1  t32  w4  s1  q4
interp 12,5,32,7,40        fp32 none  wide     -  extend4 | wide     ieee g1  t32  w4  s1  q4
"""

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32, "fp64": torch.float64}


def _pick(mode, shape, dtype, rope, private, block_t, kind, paged):
    B, H, d_h, r, slots = map(int, shape.split(","))
    per = int(kind[len("extend"):] or 1) if kind.startswith("extend") else 1  # extendN: N new tokens a sequence
    cfg = launch.pick_launch(B=B, H=H, d_h=d_h, r=r, slots=slots, dtype=DTYPES[dtype],
                             device=torch.device("cuda" if mode == "gpu" else "cpu"), rope_exact=rope == "exact",
                             private=None if private == "-" else private,
                             block_t=None if block_t == "-" else int(block_t), paged=paged,
                             extend=kind.startswith("extend"), seqs=B // per)
    return [cfg.private, cfg.dot, f"g{cfg.group_size}", f"t{cfg.block_t}", f"w{cfg.num_warps}", f"s{cfg.num_splits}",
            f"q{cfg.block_q}"]


def test_table_makes_the_recorded_picks(monkeypatch):
    monkeypatch.setattr(launch, "triton_before_tier", lambda: False)  # the picks of a current Triton
    # the split counts were recorded at two programs per SM, whatever a kernel compiles to today
    monkeypatch.setattr(launch, "compiled_programs_per_sm", lambda *a: (2, "recorded"))
    wrong = []
    for line in PICKS.strip().splitlines():
        call, want = line.split("|")
        mode = call.split()[0]
        monkeypatch.setattr(launch, "num_sms", lambda device: 132 if mode == "gpu" else 1)
        monkeypatch.setattr(launch.runtime, "is_interpreted", lambda: mode == "interp")
        for paged in (False, True):  # the paged layout has entries of its own, with the same picks
            got = _pick(*call.split(), paged)
            if got != want.split():
                wrong.append(f"{call.strip()} paged={paged}: {' '.join(got)} (recorded: {want.strip()})")
    assert not wrong, "\n".join(wrong)


@pytest.mark.parametrize("version,want", [("3.6.0", (32, 4)), ("3.8.1", (32, 4)), ("3.9.0", (16, 8)),
                                          ("3.10.0", (16, 8)), ("3.9.0+git1a2b", (16, 8))])
def test_an_older_triton_takes_its_measured_wide_tile(monkeypatch, version, want):
    # the H200 sweep under Triton 3.6 measured the wide path's 32 x 4 1.66x faster than the 16 x 8
    # the sm_90 compile report (Triton 3.9, no spill) chose; the older compiler gets its own entry
    # where private='wide' is asked for, over a 16-bit contiguous cache only (paged, exact RoPE and
    # fp8 were not measured there)
    monkeypatch.setattr(launch, "num_sms", lambda device: 132)
    monkeypatch.setattr(launch.runtime, "is_interpreted", lambda: False)
    monkeypatch.setattr(launch.runtime, "triton_version", lambda: version)
    pick = lambda **kw: launch.pick_launch(B=8, H=18, d_h=128, r=55, slots=32768, dtype=torch.bfloat16,  # noqa: E731
                                          device=torch.device("cuda"), private="wide", **kw)
    cfg = pick()
    assert (cfg.private, cfg.group_size, cfg.block_t, cfg.num_warps) == ("wide", 9, *want)
    for kw in (dict(paged=True), dict(fp8=True), dict(rope_exact=True)):
        assert (pick(**kw).block_t, pick(**kw).num_warps) != (32, 4), kw
    # off the GPU the tier changes nothing
    monkeypatch.setattr(launch.runtime, "is_interpreted", lambda: True)
    cpu = lambda: launch.pick_launch(B=8, H=18, d_h=128, r=55, slots=32768, dtype=torch.bfloat16,  # noqa: E731
                                     device=torch.device("cpu"))
    here = cpu()
    monkeypatch.setattr(launch.runtime, "triton_version", lambda: "3.9.0")
    assert cpu() == here


def test_every_entry_names_committed_evidence():
    for key, choice in [*launch.LAUNCH_TABLE.items(), (("size rule",), launch.size_rule(16, 128, 64, "lp"))]:
        files = [f for f in (launch.COMPILE_REPORT, launch.H200_RUN, launch.H200_SWEEP) if f in choice.evidence]
        assert files and all((ROOT / f).is_file() for f in files), (key, choice.evidence)
    for key, (_, evidence) in launch.PRIVATE_DEFAULT.items():
        assert launch.COMPILE_REPORT in evidence and (ROOT / launch.COMPILE_REPORT).is_file(), key


def test_the_wide_defaults_do_not_spill_in_the_compile_report():
    # the committed report compiles the table's wide entry at both paper scales (bf16, d_h = 128,
    # H = 18 as 2 x 9 at r = 55 and H = 32 as 4 x 8 at r = 54), contiguous and paged at page 16,
    # and over fp8 caches at their own default group (H = 18 as 5 x 4); the report's fp8
    # variants at the 16-bit group are there to show why that group is not the fp8 default
    report = json.loads((ROOT / launch.COMPILE_REPORT).read_text())["entries"]
    fp8_group = launch.group_rule(18, 55, "wide", fp8=True)
    for paged in (False, True):
        for fp8 in (False, True):
            entry = launch.LAUNCH_TABLE["sm_90", "wide", "none", paged]
            shapes = [r["variant"] for r in report if r["kernel"] == "decode_split_kernel"
                      and r["variant"]["private"] == "wide" and r["variant"]["dtype"] == "bfloat16"
                      and not r["variant"]["rope_exact"] and r["variant"]["paged"] == paged
                      and bool(r["variant"].get("fp8")) == fp8
                      and (not fp8 or r["variant"]["group"] == fp8_group)
                      and (r["variant"]["block_t"], r["variant"]["num_warps"]) == (entry.block_t, entry.num_warps)]
            assert shapes, f"the compile report has no wide bf16 variant at the table's shape ({paged=}, {fp8=})"
            for r in report:
                if r.get("variant") in shapes:
                    assert r.get("stack", 0) == 0, r


# ----------------------------------------------------------------------------- programs per SM
def _h200(**kw):
    """The launch an H200 picks at the benchmark's shape (2.5B, B = 8, T = 32K, bf16), from here."""
    return launch.pick_launch(B=8, H=18, d_h=128, r=55, slots=32768, dtype=torch.bfloat16,
                              device=torch.device("cpu"), sm90_sms=132, **kw)


def _fresh_report() -> dict:
    path = occupancy.report_path(runtime.triton_version())
    if not path.exists():
        pytest.skip(f"no committed report for Triton {runtime.triton_version()} (ci/compile-report writes one)")
    report = json.loads(path.read_text())
    if report["kernels_sha256"] != occupancy.kernels_sha256():
        pytest.skip(f"{path.name} is stale (tests/kernels/test_compile.py fails it)")
    return report


def test_the_compiled_kernel_comes_from_the_committed_report_of_the_running_triton():
    report = _fresh_report()
    entry = next(e for e in report["entries"] if "decode 2.5B bf16 rope=none" in e.get("launches", ()))
    assert occupancy.compiled_usage(Variant(**entry["variant"])) == (entry, occupancy.report_path(report["triton"]).name)


def test_the_split_rule_takes_the_blocks_per_sm_of_the_compiled_kernel():
    report = _fresh_report()
    cfg = _h200()
    entry = occupancy.report_entry(report, Variant.from_launch(cfg, r=55, d_h=128))
    assert cfg.programs_per_sm == entry["blocks_per_sm"] >= 1, cfg
    assert cfg.programs_per_sm_from == f"blocks per SM of the compiled kernel ({occupancy.report_path(report['triton']).name})"
    assert (cfg.num_splits, cfg.split_size) == launch.occupancy_rule(8, cfg.n_groups, 32768, cfg.block_t,
                                                                     entry["blocks_per_sm"], 132)
    # the grid is whole waves of the programs the SMs hold
    assert 8 * cfg.n_groups * cfg.num_splits <= 132 * entry["blocks_per_sm"]


def test_a_variant_the_report_lacks_is_compiled_now(monkeypatch):
    _fresh_report()
    monkeypatch.setattr(occupancy, "_USAGE", {})
    cfg = _h200(group_size=6)  # 3 groups of 6: no default, no sweep point
    v = Variant.from_launch(cfg, r=55, d_h=128)
    try:
        here = compile_check.compile_variant(v)  # in this process, against the child's count
    except FileNotFoundError as e:
        pytest.skip(f"Triton cannot compile for sm_90 here: {e}")
    assert cfg.programs_per_sm == here["blocks_per_sm"], (cfg.programs_per_sm_from, here)
    assert "lacks the variant; compiled now (Triton " in cfg.programs_per_sm_from
    # a report of another kernel source is not read: the default launch is compiled now too
    # (the child's answer stands in for a compile here: one real one above is enough)
    monkeypatch.setattr(occupancy, "_USAGE", {})
    monkeypatch.setattr(occupancy, "kernels_sha256", lambda: "0" * 64)
    monkeypatch.setattr(occupancy.subprocess, "run", lambda cmd, **kw: subprocess.CompletedProcess(
        cmd, 0, stdout=json.dumps(dict(reg=96, stack=0, shared=0, blocks_per_sm=5)) + "\n", stderr=""))
    stale = _h200()
    assert "is of another kernel source; compiled now" in stale.programs_per_sm_from
    assert stale.programs_per_sm == 5


def test_without_a_compiled_count_the_rule_keeps_its_constant_and_says_why(monkeypatch, tmp_path):
    def no_compiler(*a, **kw):
        raise OSError("no interpreter")

    monkeypatch.setattr(occupancy, "_USAGE", {})
    monkeypatch.setattr(occupancy, "REPORT_DIR", tmp_path)  # no report either
    monkeypatch.setattr(occupancy.subprocess, "run", no_compiler)
    cfg = _h200()
    assert cfg.programs_per_sm == launch.PROGRAMS_PER_SM
    assert cfg.programs_per_sm_from.startswith("PROGRAMS_PER_SM: OSError: no interpreter"), cfg.programs_per_sm_from
    # a CUDA device without a driver (the tests' simulated GPU) has no architecture to compile for
    monkeypatch.setattr(launch, "num_sms", lambda device: 132)
    monkeypatch.setattr(launch.runtime, "is_interpreted", lambda: False)
    gpu = launch.pick_launch(B=8, H=18, d_h=128, r=55, slots=32768, dtype=torch.bfloat16, device=torch.device("cuda"))
    if not torch.cuda.is_available():
        assert gpu.programs_per_sm_from.startswith("PROGRAMS_PER_SM: no architecture for cuda")


def test_the_count_is_looked_up_only_where_it_changes_the_splits(monkeypatch):
    def no_lookup(*a):
        raise AssertionError("looked up")

    monkeypatch.setattr(launch, "compiled_programs_per_sm", no_lookup)
    cfg = launch.pick_launch(B=8, H=18, d_h=128, r=55, slots=2048, dtype=torch.bfloat16, device=torch.device("cpu"),
                             sm90_sms=132)
    assert cfg.num_splits == 2048 // launch.MIN_SPLIT_SLOTS  # the length caps it at 1 and at 8 programs per SM
    assert cfg.programs_per_sm_from == "any: the length caps the splits at every occupancy"
    given = _h200(programs_per_sm=3)
    assert (given.programs_per_sm, given.programs_per_sm_from) == (3, "the caller")
    monkeypatch.setattr(launch.runtime, "is_interpreted", lambda: True)
    cpu = launch.pick_launch(B=8, H=18, d_h=128, r=55, slots=32768, dtype=torch.bfloat16, device=torch.device("cpu"))
    assert cpu.programs_per_sm_from.startswith("PROGRAMS_PER_SM: no GPU")
    with pytest.raises(AssertionError, match="looked up"):
        _h200()
