"""The kernels compile for sm_90 (H100/H200) with Triton's real compiler — no GPU needed — and
the committed compile reports, one per Triton, say what they compile to.

The interpreter accepts code the GPU compiler rejects (non-constexpr globals, loop-carried
type changes, dot shapes), so this catches compile errors on a CPU-only machine before a
GPU run; it also guards against register spills in the benchmark's main configuration.

The reports (`ci/logs/compile-check-sm90-triton<version>.json`, written by `ci/compile-report`;
docs/kernels.md, "The compile report"):
  * a report is of the current kernel source (the sha256 of lrkv/kernels/_kernels.py it
    records), else it fails with the command that regenerates it;
  * its default launches are exactly what `compile_check.default_launches` derives now under
    its Triton, and the 2026-12-04 sweep's launches are in it beside them;
  * the installed Triton compiles two of its default launches as its report says (an edited
    report fails);
  * every default launch meets the occupancy target on every Triton: no spill, at least
    TARGET_WARPS_PER_SM resident warps per SM — but the launches of KNOWN_MISSES, each with
    its reason and the most it may spill, which keep the warps; a miss that heals, or an
    excuse no launch needs, fails too.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict
from pathlib import Path

import pytest
import torch

from lrkv.kernels import compile_check, launch, occupancy, runtime
from lrkv.kernels.compile_check import Variant, compile_aux, compile_variant

# On a GPU machine every native test compiles the kernels for real; the compile tests are the
# CPU-only stand-in (and their ASTSource call follows the Triton version it was written on).
cpu_only = pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: the native tests compile the kernels")


def _no_spill_promise():
    """The no-spill assertions hold for the Triton the sm_90 launch table was chosen with;
    an older one spills at every wide shape (ci/logs/compile-check-sm90-triton3.6.0.json)."""
    from lrkv.kernels import launch, runtime

    if launch.triton_before_tier():
        pytest.skip(f"Triton {runtime.triton_version()} is older than {'.'.join(map(str, launch.TRITON_TIER))}, "
                    "where the launch table's no-spill shapes were compiled; it spills at every wide shape "
                    "(ci/logs/compile-check-sm90-triton3.6.0.json) and has its own measured entry")


def _compile(v, **kw):
    try:
        return compile_variant(v, **kw)
    except FileNotFoundError as e:  # a Triton wheel without its bundled ptxas
        pytest.skip(f"CUDA toolchain of the triton wheel not found: {e}")


@cpu_only
@pytest.mark.parametrize("variant,mutant", [
    (Variant(num_warps=8), None),  # bf16, H = 18 as 2 x 9, r = 55: the benchmark's main shape
    (Variant(dtype="float16", rope_exact=True, key_scale=True, paged=True, num_warps=8), "read_past_length"),
    (Variant(dtype="float64", d_h=32, r=8, group=4), None),  # the no-tl.dot float64 path
], ids=["bf16-main", "fp16-exact-paged-mutant", "fp64-fma"])
def test_split_kernel_compiles_for_sm90(variant, mutant):
    # a patched kernel (lrkv.mutants.kernel) must compile too: the GPU gate runs the mutants natively
    module = None
    if mutant is not None:
        from lrkv.mutants.kernel import patched_kernels

        module = patched_kernels(mutant, which="cuda")
    res = _compile(variant, module=module)
    assert res["entry"] == ("paged_split_kernel" if variant.paged else "decode_split_kernel")
    if variant == Variant(num_warps=8) and "stack" in res:
        _no_spill_promise()
        assert res["stack"] == 0, f"the main configuration spills registers: {res}"


# (H, r, paged, fp8 format, granularity): both paper scales with a 16-bit cache, contiguous and
# paged; fp8 caches with every granularity once at H = 18 (each format, both layouts) and once at H = 32
DEFAULT_LAUNCHES = [(H, r, paged, "", "") for H, r in ((18, 55), (32, 54)) for paged in (False, True)] + [
    (18, 55, False, "e4m3", "per_token_head"), (18, 55, True, "e5m2", "per_tensor"),
    (18, 55, False, "e5m2", "per_head"), (18, 55, True, "e4m3", "per_token"), (32, 54, False, "e4m3", "per_token_head"),
]


@cpu_only
@pytest.mark.parametrize("H,r,paged,fp8,granularity", DEFAULT_LAUNCHES,
                         ids=lambda x: {True: "paged16", False: "contiguous", "": "-"}.get(x, str(x)))
def test_gpu_default_launch_compiles_without_spills(H, r, paged, fp8, granularity, monkeypatch):
    # Exactly the launch shape a CUDA run picks at the paper scales (bf16, d_h = 128), over a
    # bf16 cache and over fp8 caches of each format and granularity: registers must not
    # spill there (a spill turns a bandwidth-bound loop into local-memory traffic).
    # pick_launch is asked as if on a 132-SM GPU, which this machine need not have.
    from lrkv.kernels import launch

    _no_spill_promise()
    monkeypatch.setattr(launch, "num_sms", lambda device: 132)
    monkeypatch.setattr(launch.runtime, "is_interpreted", lambda: False)
    cfg = launch.pick_launch(B=8, H=H, d_h=128, r=r, slots=32768, dtype=torch.bfloat16,
                             device=torch.device("cuda"), paged=paged, fp8=bool(fp8))
    assert cfg.private == "per_head" and cfg.dot == "lp"
    res = _compile(Variant.from_launch(cfg, r=r, d_h=128, paged=paged, page_size=16,  # vLLM's page size
                                       fp8=fp8, fp8_granularity=granularity or "per_token_head"))
    assert res["variant"]["private"] == "per_head" and res["variant"]["group"] == cfg.group_size
    if "stack" not in res:
        pytest.skip("cuobjdump not bundled with this triton: register usage unknown")
    assert res["stack"] == 0, f"the GPU default launch spills registers: {res}"


MAX_ENTRY_PARAMETERS = 40  # a kernel entry's parameters, at most (docs/kernels.md: thin entries)


def test_kernel_entries_stay_thin():
    K = runtime._load("interpreter" if runtime.interpreter_problem() is None else "cuda")
    sizes = {n: len(getattr(K, n).arg_names) for n in ("decode_split_kernel", "paged_split_kernel",
                                                       "extend_split_kernel", "decode_combine_kernel")}
    assert max(sizes.values()) <= MAX_ENTRY_PARAMETERS, sizes


@cpu_only
def test_combine_and_append_compile_for_sm90():
    try:
        res = compile_aux()
    except FileNotFoundError as e:
        pytest.skip(f"CUDA toolchain of the triton wheel not found: {e}")
    assert {r["kernel"] for r in res} == {"decode_combine_kernel", "append_kernel", "append_fp8_kernel"}


# ----------------------------------------------------------------------------- the reports
ROOT = Path(__file__).resolve().parents[2]
REPORTS = sorted((ROOT / "ci" / "logs").glob("compile-check-sm90-triton*.json"))
SUPPORTED = {"3.6.0", "3.9.0"}  # the H200 device's Triton (ci/gpu-results/2026-12-04/env.txt) and this project's


@pytest.fixture(params=REPORTS, ids=lambda p: p.name)
def report(request) -> dict:
    return json.loads(request.param.read_text())


def _defaults(report: dict) -> dict[str, dict]:
    """launch name -> its default entry (a sweep point's name on a default entry excluded)."""
    return {name: e for e in report["entries"] if e.get("default")
            for name in e["launches"] if not name.startswith("sweep ")}


def test_one_report_per_supported_triton_named_by_it():
    tritons = {json.loads(p.read_text())["triton"]: p.name for p in REPORTS}
    assert set(tritons) >= SUPPORTED, f"missing: {SUPPORTED - set(tritons)} (ci/compile-report <version>)"
    assert all(name == occupancy.report_path(t).name for t, name in tritons.items())
    assert (ROOT / launch.COMPILE_REPORT).is_file()


def test_the_report_is_of_the_current_kernel_source(report):
    assert report["kernels_sha256"] == occupancy.kernels_sha256(), (
        f"ci/logs/compile-check-sm90-triton{report['triton']}.json was compiled from another "
        f"lrkv/kernels/_kernels.py: regenerate it with `{report['command']}`")
    assert report["command"] == f"ci/compile-report {report['triton']}" and report["arch"] == 90


def test_its_default_launches_are_the_ones_the_code_derives(report, monkeypatch):
    # under the report's Triton: an older one looks up its own launch-table entries
    monkeypatch.setattr(runtime, "triton_version", lambda: report["triton"])
    derived = {name: (occupancy.kernel_name(extend), asdict(v)) for name, v, extend in compile_check.default_launches()}
    committed = {name: (e["kernel"], e["variant"]) for name, e in _defaults(report).items()}
    assert committed == derived, (
        f"the default launches changed since Triton {report['triton']}'s report was written — compiled otherwise: "
        f"{sorted(n for n in committed.keys() & derived.keys() if committed[n] != derived[n])}; in the report only: "
        f"{sorted(committed.keys() - derived.keys())}; new: {sorted(derived.keys() - committed.keys())}: "
        f"regenerate it with `{report['command']}`")
    # both scales x every cache x both RoPE modes x (decode, paged, extend at each new-token count)
    cc = compile_check
    assert len(derived) == len(cc.SCALES) * len(cc.CACHES) * 2 * (2 + len(cc.NEW_TOKENS)) == 80
    # every default entry is some derived launch; the evidence and sweep entries are not defaults
    assert all(any(n in derived for n in e["launches"]) == e["default"] for e in report["entries"]
               if e["kernel"].startswith("decode_split_kernel"))


def test_the_sweeps_launches_are_in_the_report(report):
    names = {n for e in report["entries"] for n in e.get("launches", ())}
    sweep = compile_check.sweep_launches(ROOT / launch.H200_SWEEP)
    assert len(sweep) == 16 and {n for n, _, _ in sweep} <= names
    for name, v, _ in sweep:
        entry = next(e for e in report["entries"] if name in e.get("launches", ()))
        assert entry["variant"] == asdict(v) and entry["default"] == any(
            not n.startswith("sweep ") for n in entry["launches"])


# Default launches that spill, kept at 16 warps per SM: (what their names contain, why, the
# most bytes of stack either Triton gives them). Measured in the committed reports; a launch
# past its bound, or one that stops spilling, fails the test below and changes this table.
KNOWN_MISSES = (
    (("rope=exact",), "exact RoPE's rotated query [BLOCK_T, d_h] is the left operand of a tl.dot per head and "
                      "tile, held whole by every warp (M = 16 rows): 16 warps spill 40–248 bytes, 8 warps hold "
                      "224–248 registers without a spill (8 warps per SM); docs/kernels.md", 256),
    (("extend", "fp8"), "a block of 16 extend tokens over an fp8 cache: the tiles' conversion to q's dtype and "
                        "the per-token scales beside the block's rows; 8–24 bytes", 32),
)


def _excuse(name: str):
    return next((m for m in KNOWN_MISSES if all(k in name for k in m[0])), None)


def test_every_default_launch_meets_the_occupancy_target(report):
    # The targets of docs/kernels.md on every supported Triton: no spill (stack 0) and at least
    # 16 resident warps per SM, every default launch but the known misses (which keep the warps
    # and stay under their bound).
    def line(name, e):
        return (f"  {name}: {e['reg']} registers, stack {e['stack']} B, shared {e['shared']} B, "
                f"{e['blocks_per_sm']} x {e['variant']['num_warps']} = {e['warps_per_sm']} warps/SM ({e['limit']})")

    defaults = _defaults(report)
    failing, excused = [], set()
    for name, e in defaults.items():
        miss = e["stack"] > occupancy.TARGET_STACK or e["warps_per_sm"] < occupancy.TARGET_WARPS_PER_SM
        excuse = _excuse(name)
        if excuse is not None and miss and e["warps_per_sm"] >= occupancy.TARGET_WARPS_PER_SM and e["stack"] <= excuse[2]:
            excused.add(excuse[0])
        elif miss:
            failing.append(line(name, e))
    assert not failing, (f"Triton {report['triton']}: {len(failing)} of {len(defaults)} default launches "
                         f"miss the occupancy target (stack == {occupancy.TARGET_STACK}, warps per SM >= "
                         f"{occupancy.TARGET_WARPS_PER_SM}) and no KNOWN_MISSES entry covers them:\n"
                         + "\n".join(failing))
    # an excuse no launch needs any more is stale: the table shrinks with the misses
    assert excused == {m[0] for m in KNOWN_MISSES}, f"KNOWN_MISSES entries no launch of Triton {report['triton']} " \
        f"needs: {[m[0] for m in KNOWN_MISSES if m[0] not in excused]}"


def test_occupancy_is_the_fewest_blocks_any_sm90_limit_allows():
    occ, O = occupancy.occupancy, occupancy.Occupancy
    assert occ(187, 8) == O(1, 8, "registers")  # 192 x 32 x 8 = 49152 of 65536 registers: one block
    assert occ(255, 4) == O(2, 8, "registers") and occ(235, 8) == O(1, 8, "registers")  # today's defaults
    assert occ(64, 4) == O(8, 32, "registers")  # 8192 registers a block
    assert occ(32, 1) == O(32, 32, "blocks")  # the block limit
    assert occ(16, 16) == O(4, 64, "warps")  # 64 warps
    assert occ(255, 16).blocks_per_sm == 0  # does not fit
    # the 2026-12-04 profile's launch (profile.log: block limit registers 1, shared memory 4,
    # warps 8): 255 registers x 8 warps, 53,248 bytes of dynamic shared memory
    assert occ(255, 8, 53248) == O(1, 8, "registers")
    assert occ(32, 8, 53248) == O(4, 32, "shared")  # with the registers out of the way: ncu's 4
    assert occ(32, 4, occupancy.BLOCK_MAX_SHARED + 1).blocks_per_sm == 0
    with pytest.raises(ValueError):
        occ(0, 4)


LIVE = ("decode 2.5B bf16 rope=none", "extend 6.3B fp8 e4m3 per_token rope=none new=4")


@pytest.mark.parametrize("name", LIVE)
def test_the_installed_triton_compiles_what_its_report_says(name):
    version = runtime.triton_version()
    path = occupancy.report_path(version)
    if not path.exists():
        pytest.skip(f"no committed report for Triton {version} (ci/compile-report writes one)")
    entry = _defaults(json.loads(path.read_text()))[name]
    v, extend = occupancy.Variant(**entry["variant"]), entry["kernel"].endswith("[extend]")
    try:
        got = compile_check.compile_variant(v, extend=extend)
    except FileNotFoundError as e:  # a Triton wheel without its bundled ptxas
        pytest.skip(f"Triton {version} cannot compile for sm_90 here: {e}")
    if "reg" not in got:
        pytest.skip(f"Triton {version} has no cuobjdump here: register usage unknown")
    keys = ("reg", "stack", "shared", "blocks_per_sm", "warps_per_sm")
    assert {k: got[k] for k in keys} == {k: entry[k] for k in keys}, f"{path.name}, {name}: compiled {got}"


def _compile_report_script():
    """ci/compile-report as a module (it has no .py suffix)."""
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("compile_report", str(ROOT / "ci" / "compile-report"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("compile_report", loader))
    loader.exec_module(module)
    return module


def _documented_lines() -> list[str]:
    from tests.test_helpers.doc_blocks import blocks

    (block,) = blocks(ROOT / "docs" / "kernels.md", "The compile report, one per Triton", "bash")
    return [line.split("#")[0].strip() for line in block.splitlines() if line.strip()]


def test_the_documented_compile_report_lines_run_as_written(monkeypatch, tmp_path):
    """Each line of docs/kernels.md's block through ci/compile-report's own main, every command
    it runs recorded instead of run (a report takes minutes; the committed ones are checked
    above): the installed Triton's report, and 3.6.0's, installed into the cache folder first
    when it is not there; the sweep line is the command its committed output records."""
    import shlex
    import subprocess

    script = _compile_report_script()
    installed = runtime.triton_version()
    lines = _documented_lines()
    assert [shlex.split(line)[1:] for line in lines] == [[], ["3.6.0"], ["--sweep", "ci/gpu-results/2026-12-04"]]
    monkeypatch.setenv("LRKV_TRITON_CACHE", str(tmp_path))  # an empty cache: 3.6.0 must be installed
    for line in lines[:2]:
        ran = []

        def record(cmd, **kw):
            ran.append((cmd, kw.get("env") or {}))
            side = str(tmp_path / "triton-3.6.0")
            child = "3.6.0" if side in (kw.get("env") or {}).get("PYTHONPATH", "") else installed
            return subprocess.CompletedProcess(cmd, 0, stdout=child + "\n")

        monkeypatch.setattr(script, "run", record)
        assert script.main(shlex.split(line)[1:]) == 0
        version = shlex.split(line)[1] if line != "ci/compile-report" else installed
        *setup, last = ran
        assert last[0][1:] == ["-m", "lrkv.kernels.compile_check", "--json",
                               f"ci/logs/compile-check-sm90-triton{version}.json"]
        path = last[1]["PYTHONPATH"].split(os.pathsep)
        if version == installed:
            assert path[0] == str(ROOT) and not any("pip" in c for c, _ in setup)
        else:  # the side folder first, after a pip install into it
            assert path[:2] == [str(tmp_path / "triton-3.6.0"), str(ROOT)]
            assert any(c[1:4] == ["-m", "pip", "install"] and c[-3:] == ["--target", str(tmp_path / "triton-3.6.0"),
                                                                          "triton==3.6.0"] for c, _ in setup), setup
    sweep = json.loads((ROOT / "ci/gpu-results/2026-12-04/sweep-compiled-triton3.6.0.json").read_text())
    assert sweep["command"] == lines[2]
