"""How many programs of a compiled split kernel one sm_90 SM holds at once, and where that
number comes from when `launch.pick_launch` needs it (docs/kernels.md, "The compile report").

    occupancy(registers, num_warps, shared)  -> Occupancy(blocks_per_sm, warps_per_sm, limit)
    compiled_usage(variant, extend=, arch=)  -> ({reg, stack, shared, blocks_per_sm, ...}, where from)

A block (one Triton program) is resident on an SM only when its registers, warps and shared
memory all fit beside the others: the fewest blocks any of the four limits allows. The split
rule sizes the grid in whole waves of resident programs, so it needs this number for the
kernel that will actually run — not a constant.

`compiled_usage` reads it from the committed compile report of the running Triton
(`ci/logs/compile-check-sm<arch>-triton<version>.json`, written by `ci/compile-report`) when the
report was made from this kernel source (its sha256) and holds the variant; else it compiles
the variant now with `python3 -m lrkv.kernels.compile_check --variant`, in a child process —
the compiler needs `launch`, which needs this module, so the process boundary is what keeps
the import graph acyclic — once per variant and process (Triton's own cache makes a repeat
in a later process fast); else it says why not.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass
from pathlib import Path

# sm_90 (H100/H200) limits: CUDA C++ Programming Guide, "Technical Specifications per Compute
# Capability" (9.0), and the CUDA Occupancy Calculator's allocation rules for it.
SM_REGISTERS = 65536  # 32-bit registers per SM
REGISTER_ALLOCATION_UNIT = 256  # registers go to a warp in units of 256 (8 per thread)
SM_MAX_WARPS = 64  # resident warps per SM
SM_MAX_BLOCKS = 32  # resident blocks per SM
SM_SHARED = 228 * 1024  # shared memory per SM, bytes
BLOCK_MAX_SHARED = 227 * 1024  # the most one block may take (opt-in)
# the CUDA runtime's own shared memory per block (ci/gpu-results/2026-12-04/profile.log:
# "Driver Shared Memory Per Block 1.02 Kbyte/block")
BLOCK_RESERVED_SHARED = 1024

# What a default launch must reach on every Triton the project supports (docs/kernels.md;
# tests/kernels/test_compile_report.py): no spill — a spilled register is a local-memory round
# trip in the tile loop — and at least this many resident warps per SM: the 2026-12-04 H200
# profile ran one 8-warp block per SM (12.5 % occupancy) at 10 % of DRAM bandwidth, and a
# latency-bound loop needs more warps in flight than that (a quarter of the SM's 64 here).
TARGET_STACK = 0
TARGET_WARPS_PER_SM = 16

KERNEL_FILE = Path(__file__).with_name("_kernels.py")
REPORT_DIR = Path(__file__).resolve().parents[2] / "ci" / "logs"
# pick_launch knows only that a cache is fp8, not its format or scales: its lookups take the
# bench's fp8 row (e4m3, per-head scales: lrkv.bench.backends.FP8_GRANULARITY)
FP8_LOOKUP = dict(fp8="e4m3", fp8_granularity="per_head")
COMPILE_TIMEOUT_S = 300  # one variant compiles in 1-3 s; a cold Triton import on top, with margin


@dataclass(frozen=True)
class Variant:
    """One compiled specialisation of a split kernel (`compile_check.compile_variant`)."""

    dtype: str = "bfloat16"
    group: int = 9  # real heads per program
    d_h: int = 128
    r: int = 55
    block_t: int = 16
    num_warps: int = 4
    key_scale: bool = False
    rope_exact: bool = False
    paged: bool = False
    dot: str | None = None  # None: what a GPU run picks for the dtype (launch.default_dot)
    private: str = "per_head"  # 'wide': the group's latents as one [block_t, G·r] tile
    page_size: int = 16  # paged variants: tiles inside one page when it divides by block_t
    fp8: str = ""  # an fp8 cache: "e4m3" | "e5m2" (parts stored so, float32 scales); "": none
    fp8_granularity: str = "per_token_head"  # fp8 only: the scales' granularity (DESIGN §4.1)
    block_q: int = 1  # extend: query tokens per program (its rows are block_q x group)

    @classmethod
    def from_launch(cls, cfg, *, r: int, d_h: int, dtype: str = "bfloat16", **kw) -> "Variant":
        """The variant a `launch.LaunchConfig` compiles (its group, tile, warps, private path,
        token block)."""
        return cls(dtype=dtype, group=cfg.group_size, d_h=d_h, r=r, block_t=cfg.block_t,
                   num_warps=cfg.num_warps, dot=cfg.dot, private=cfg.private, block_q=getattr(cfg, "block_q", 1),
                   **kw)


@dataclass(frozen=True)
class Occupancy:
    blocks_per_sm: int  # resident blocks (programs) per SM; 0: one does not fit
    warps_per_sm: int  # blocks_per_sm x num_warps
    limit: str  # the resource that bounds it: registers | warps | shared | blocks


def occupancy(registers: int, num_warps: int, shared: int = 0) -> Occupancy:
    """Resident blocks per SM of a kernel of `registers` per thread, `num_warps` warps and
    `shared` bytes of dynamic shared memory per block, on sm_90 (the limits above)."""
    if registers < 1 or num_warps < 1 or shared < 0:
        raise ValueError(f"registers >= 1, num_warps >= 1, shared >= 0; got {registers}, {num_warps}, {shared}")
    per_warp = -(-registers * 32 // REGISTER_ALLOCATION_UNIT) * REGISTER_ALLOCATION_UNIT
    limits = dict(registers=SM_REGISTERS // (per_warp * num_warps), warps=SM_MAX_WARPS // num_warps,
                  shared=SM_SHARED // (shared + BLOCK_RESERVED_SHARED) if shared <= BLOCK_MAX_SHARED else 0,
                  blocks=SM_MAX_BLOCKS)
    limit = min(limits, key=limits.get)
    return Occupancy(limits[limit], limits[limit] * num_warps, limit)


def kernels_sha256() -> str:
    """The kernel source's sha256: a compile report is of this source or stale."""
    return hashlib.sha256(KERNEL_FILE.read_bytes()).hexdigest()


def report_path(triton_version: str, arch: int = 90) -> Path:
    return REPORT_DIR / f"compile-check-sm{arch}-triton{triton_version}.json"


def kernel_name(extend: bool) -> str:
    """A report entry's `kernel`: the split kernel as decode (contiguous or paged) or extend."""
    return "decode_split_kernel[extend]" if extend else "decode_split_kernel"


def same_variant(a: dict, b: dict) -> bool:
    """Two variants compile alike: equal fields, except the page size of an unpaged one and
    the scales' granularity of a 16-bit cache (neither reaches the kernel)."""
    skip = (set() if a.get("paged") else {"page_size"}) | (set() if a.get("fp8") else {"fp8_granularity"})
    return all(a.get(k) == b.get(k) for k in a.keys() | b.keys() if k not in skip)


def report_entry(report: dict, variant: Variant, extend: bool = False) -> dict | None:
    want = asdict(variant)
    return next((e for e in report["entries"] if e.get("kernel") == kernel_name(extend)
                 and same_variant(want, e["variant"])), None)


_USAGE: dict = {}


def compiled_usage(variant: Variant, *, extend: bool = False, arch: int = 90) -> tuple[dict | None, str]:
    """(the compiled split kernel's reg, stack, shared, blocks_per_sm, warps_per_sm, where
    from) for `variant` (its `dot` resolved) under the running Triton: the committed report,
    else a compile now, else (None, why) — module doc."""
    try:
        import triton

        version = triton.__version__
    except Exception as e:  # noqa: BLE001 - no (working) Triton: nothing to compile with
        return None, f"no triton ({type(e).__name__})"
    key = (version, arch, extend, variant)
    if key in _USAGE:
        return _USAGE[key]
    path, why = report_path(version, arch), ""
    if path.exists():
        report = json.loads(path.read_text())
        if report.get("kernels_sha256") != kernels_sha256():
            why = f"{path.name} is of another kernel source; "
        elif (entry := report_entry(report, variant, extend)) is not None:
            _USAGE[key] = entry, path.name
            return _USAGE[key]
        else:
            why = f"{path.name} lacks the variant; "
    cmd = [sys.executable, "-m", "lrkv.kernels.compile_check", "--variant", json.dumps(asdict(variant)),
           "--arch", str(arch), *(["--extend"] if extend else [])]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}  # this process's lrkv, Triton
    try:
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S, env=env)
        usage = json.loads(res.stdout.strip().splitlines()[-1]) if res.returncode == 0 else None
    except (OSError, subprocess.TimeoutExpired, ValueError, IndexError) as e:
        res, usage = None, None
        why += f"{type(e).__name__}: {e}"
    if usage is not None and "blocks_per_sm" in usage:
        _USAGE[key] = usage, f"{why}compiled now (Triton {version}, sm_{arch})"
    else:
        tail = (res.stderr.strip().splitlines() or ["no output"])[-1] if res is not None else ""
        _USAGE[key] = None, f"{why}the compile gave no register count: {tail}"[:300]
    return _USAGE[key]
