"""Compile the kernels for a CUDA target WITHOUT a GPU (Triton's front end + ptxas only), and
the compile report: registers, spills, shared memory and occupancy of every default launch.

The interpreter checks the math but not that the kernels compile: Triton's code
generator rejects things the interpreter accepts (non-constexpr globals, mistyped
constexpr branches, unsupported dot shapes). This module runs the real compiler for
sm_90 (H100/H200) and reports per variant its registers, spill (stack) bytes, dynamic shared
memory and the blocks and warps an SM holds (`occupancy`), under the Triton it runs with —
ptxas's register allocation moves between releases (3.6 spills where 3.9 does not) — so a
CPU-only machine catches compile errors, spills and occupancy losses before anyone spends GPU
time. One report per Triton, `ci/logs/compile-check-sm90-triton<version>.json`, written by
`ci/compile-report` (docs/kernels.md, "The compile report"):

    python3 -m lrkv.kernels.compile_check --json out.json   # the report, under the running Triton
    python3 -m lrkv.kernels.compile_check --variant '{"block_t": 32, "num_warps": 4, "private": "wide"}'
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import asdict, replace
from pathlib import Path
from types import SimpleNamespace

from .occupancy import FP8_LOOKUP, Variant, kernel_name, kernels_sha256, occupancy
from .validate import next_pow2

_TL = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64"}


EVIDENCE_VARIANTS = (  # the shapes docs/kernels.md and the launch table's evidence cite, beside the defaults
    # the wide private tile at the paper scales (launch.LAUNCH_TABLE)
    Variant(block_t=16, num_warps=8, private="wide"),  # H=18 as 2 x 9, r=55
    Variant(group=8, r=54, block_t=16, num_warps=8, private="wide"),  # H=32 as 4 x 8, r=54
    Variant(block_t=32, num_warps=8, private="wide"),
    Variant(block_t=32, num_warps=16, private="wide"),
    Variant(paged=True, block_t=16, num_warps=8, private="wide"),  # page 16: one page per tile
    Variant(dtype="float16", key_scale=True, paged=True, block_t=16, num_warps=8, private="wide"),
    Variant(dtype="bfloat16", rope_exact=True, block_t=16, num_warps=8, private="wide"),
    Variant(dtype="bfloat16", rope_exact=True, block_t=32, num_warps=8),  # exact RoPE's GPU default
    Variant(dtype="bfloat16", rope_exact=True, block_t=64, num_warps=4),  # ... and the shape measured with it
    # the per-head private path (measured on an H200 with it: ci/gpu-results)
    Variant(),  # H=18 (2 x 9), r=55, bf16: the benchmark's main case
    Variant(num_warps=8),
    Variant(block_t=64, num_warps=4),  # the per-head GPU default
    Variant(group=16, r=54, num_warps=8),  # H=32, r=54
    Variant(dtype="float16", key_scale=True, paged=True),
    Variant(dtype="float32", rope_exact=True, num_warps=8),
    Variant(dtype="bfloat16", rope_exact=True, num_warps=8),
    Variant(dtype="float32", dot="tf32x3", num_warps=8),
    Variant(dtype="float64", block_t=16, d_h=32, r=8, group=4),
    # fp8 caches (DESIGN §4.1): every granularity, both private paths; the wide default's
    # group over an fp8 cache (launch.WIDE_MAX_COLUMNS_FP8: H=18 as 5 x 4), and the group of
    # a 16-bit cache (2 x 9), where it spills
    Variant(group=4, block_t=16, num_warps=8, private="wide", fp8="e4m3"),
    Variant(group=4, block_t=16, num_warps=8, private="wide", fp8="e5m2", fp8_granularity="per_tensor", paged=True),
    Variant(group=4, block_t=16, num_warps=8, private="wide", fp8="e4m3", fp8_granularity="per_head"),
    Variant(group=4, dtype="float16", key_scale=True, paged=True, block_t=16, num_warps=8, private="wide",
            fp8="e4m3", fp8_granularity="per_token"),
    Variant(block_t=16, num_warps=8, private="wide", fp8="e4m3"),
    Variant(block_t=16, num_warps=8, private="wide", fp8="e5m2", fp8_granularity="per_tensor", paged=True),
    Variant(block_t=64, num_warps=4, fp8="e4m3", fp8_granularity="per_head"),
    Variant(dtype="float16", key_scale=True, paged=True, fp8="e4m3", fp8_granularity="per_token"),
)

EXTEND_VARIANTS = (  # the split kernels compiled as extend (extend_split_kernel)
    Variant(block_t=16, num_warps=8, private="wide"),  # bf16, the decode benchmark's main shape
    Variant(block_t=16, num_warps=8, private="wide", paged=True),
    Variant(dtype="float16", rope_exact=True, key_scale=True, paged=True, num_warps=8),
    Variant(dtype="float64", d_h=32, r=8, group=4),
)

# The default launches: what pick_launch chooses for a 132-SM sm_90 GPU (an H200) at the
# paper scales, bf16, at a representative shape — B sequences of T slots (decode, paged at
# PAGE_SIZE) and each of them extended by NEW_TOKENS tokens (extend) — for every cache and
# RoPE mode below, under the Triton that runs (an older one takes its own table entries).
SCALES = ("2.5B", "6.3B")
B, T = 8, 32768
PAGE_SIZE = 16  # vLLM's page size, the bench's triton-paged row
NEW_TOKENS = (4, 16)  # extend: new tokens per sequence
CACHES = {"bf16": {}, **{f"fp8 e4m3 {g}": dict(fp8="e4m3", fp8_granularity=g)
                         for g in ("per_head", "per_tensor", "per_token", "per_token_head")}}
assert {**FP8_LOOKUP} in CACHES.values()  # pick_launch's fp8 lookups find a default's entry


def default_launches() -> list[tuple[str, Variant, bool]]:
    """(name, variant, extend) of every default launch (module comment above), in a fixed
    order; several names may share a variant. The one place the default set is derived: the
    report marks these `"default": true` and tests/kernels/test_compile_report.py holds the
    committed reports to it."""
    import torch

    from ..spec import preset
    from .launch import pick_launch

    out = []
    for scale in SCALES:
        spec = preset(scale).spec("lrkv")
        for call in ("decode", "paged", "extend"):
            for new in NEW_TOKENS if call == "extend" else (None,):
                for cache, fp8 in CACHES.items():
                    for rope in (False, True):
                        # programs_per_sm given: the variant does not depend on it, and the
                        # report being written is where pick_launch would look it up
                        cfg = pick_launch(B=B * (new or 1), H=spec.n_heads, d_h=spec.head_dim, r=spec.rank,
                                          slots=T, dtype=torch.bfloat16, device=torch.device("cpu"),
                                          rope_exact=rope, paged=call == "paged", extend=call == "extend",
                                          fp8=bool(fp8), sm90_sms=132, programs_per_sm=1,
                                          seqs=B if call == "extend" else None)
                        v = Variant.from_launch(cfg, r=spec.rank, d_h=spec.head_dim, rope_exact=rope,
                                                paged=call == "paged", page_size=PAGE_SIZE, **fp8)
                        name = (f"{call} {scale} {cache} rope={'exact' if rope else 'none'}"
                                + (f" new={new}" if new else ""))
                        out.append((name, v, call == "extend"))
    return out


def sweep_launches(path) -> list[tuple[str, Variant, bool]]:
    """(name, variant, False) of each point of a committed launch-shape sweep (`lrkv bench
    --sweep`'s JSON): the shapes a GPU measured, compiled by the current kernel."""
    from ..spec import preset

    doc = json.loads(Path(path).read_text())
    sw = doc["sweep"]
    spec = preset(sw["scale"]).spec("lrkv")
    return [(f"sweep {doc['created'][:10]}: " + " ".join(f"{k}={v}" for k, v in p["knobs"].items()),
             Variant.from_launch(SimpleNamespace(**p["launch"]), r=spec.rank, d_h=spec.head_dim, dtype=sw["dtype"]),
             False) for p in sw["points"]]


def _signature(fn, ptr_types: dict[str, str], const: dict[str, object]):
    sig = {}
    for name in fn.arg_names:
        if name in const:
            sig[name] = "constexpr"
        elif name in ptr_types:
            sig[name] = ptr_types[name]
        else:
            sig[name] = "i32"
    constexprs = {(fn.arg_names.index(k),): v for k, v in const.items()}
    return sig, constexprs


def _divisibility(fn, sig: dict[str, str], v: Variant) -> dict:
    """The divisibility-by-16 facts a real launch gives the compiler (Triton specialises every
    16-byte-aligned pointer and every integer argument divisible by 16 that is not listed in
    do_not_specialize): without them the loads are not vectorised and the registers counted
    here are not the GPU's. Pointers: torch's allocations are aligned. Integers: d_h, and the
    cache strides (T_max · d_h, T_max · H · r, T_max · H: T_max and a page of 16 are multiples
    of 16; another page size only where it is one). H and r are taken as not (18, 55)."""
    strides_aligned = not v.paged or v.page_size % 16 == 0
    ints = {"D": v.d_h % 16 == 0, "s_sb": strides_aligned, "s_lb": strides_aligned, "s_ksb": strides_aligned}
    return {(i,): [["tt.divisibility", 16]] for i, name in enumerate(fn.arg_names)
            if sig.get(name, "constexpr") != "constexpr" and (sig[name].startswith("*") or ints.get(name, False))}


def _resource_usage(cubin: bytes) -> dict[str, int]:
    import triton

    tool = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    if not os.path.exists(tool):
        return {}
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "k.cubin")
        with open(path, "wb") as f:
            f.write(cubin)
        res = subprocess.run([tool, "-res-usage", path], capture_output=True, text=True, timeout=60)
    out = {}
    for line in res.stdout.splitlines():
        if "REG:" in line:
            for item in line.split():
                if ":" in item:
                    k, v = item.split(":", 1)
                    if v.isdigit():
                        out[k.lower()] = int(v)
    return out


def split_kernel_name(v: Variant, extend: bool = False) -> str:
    """The stage-1 entry a variant launches: extend, paged or contiguous decode."""
    return "extend_split_kernel" if extend else "paged_split_kernel" if v.paged else "decode_split_kernel"


def compile_variant(v: Variant, arch: int = 90, *, extend: bool = False, module=None) -> dict:
    """Compile the split kernel for `v` — decode, paged decode, or with `extend` the ragged
    causal extend — and return its usage stats. `module`: a kernel module for mode 'cuda'
    other than the shipped one (`lrkv.kernels.runtime.load_patched`)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    import torch

    from . import runtime
    from .decode import fp8_code
    from .launch import DOT_MODES, default_dot

    K = module or runtime._load("cuda")
    dot = v.dot or default_dot(getattr(torch, v.dtype), on_gpu=True)
    el = _TL[v.dtype]
    acc = "fp64" if v.dtype == "float64" else "fp32"
    kernel = getattr(K, split_kernel_name(v, extend))

    ptrs = {n: f"*{el}" for n in ("Q", "SK", "SV", "LK", "LV", "BK")}
    if v.fp8:
        ptrs.update({n: {"e4m3": "*fp8e4nv", "e5m2": "*fp8e5"}[v.fp8] for n in ("SK", "SV", "LK", "LV")})
        ptrs.update({n: "*fp32" for n in ("CS_SK", "CS_SV", "CS_LK", "CS_LV")})
    if v.key_scale:
        ptrs["KS"] = f"*{el}"
    if v.rope_exact:
        ptrs["ROPE"] = f"*{acc}"
    if v.paged:
        ptrs["PT"] = "*i32"
    ptrs.update(LENGTHS="*i32", SCALE=f"*{acc}", WS=f"*{acc}", CU="*i32")
    const = dict(GROUP=v.group, BLOCK_H=next_pow2(v.group * v.block_q, 16), BLOCK_T=v.block_t,
                 BLOCK_D=next_pow2(v.d_h, 16), BLOCK_R=next_pow2(v.r, 16), DOT=DOT_MODES[dot],
                 WIDE=v.private == "wide", BLOCK_GR=next_pow2(v.group * v.r, 16) if v.private == "wide" else 16,
                 FP8=fp8_code(v.fp8_granularity if v.fp8 else ""))
    const.update({n: None for n in ("KS", "ROPE", "PT", "CS_SK", "CS_SV", "CS_LK", "CS_LV")
                  if n in kernel.arg_names and n not in ptrs})
    if "TILE_IN_PAGE" in kernel.arg_names:
        const["TILE_IN_PAGE"] = v.paged and v.page_size % v.block_t == 0
    if extend:
        const.update(BLOCK_B=16, BLOCK_Q=v.block_q)
    sig, constexprs = _signature(kernel, ptrs, const)
    t0 = time.perf_counter()
    with warnings.catch_warnings():  # triton 3.9's one-time notice about TRITON_DEFAULT_FP_FUSION
        warnings.filterwarnings("ignore", message=".*TRITON_DEFAULT_FP_FUSION.*")
        k = triton.compile(ASTSource(kernel, sig, constexprs, _divisibility(kernel, sig, v)),
                           target=GPUTarget("cuda", arch, 32), options=dict(num_warps=v.num_warps))
    return dict(kernel=kernel_name(extend), entry=split_kernel_name(v, extend),
                variant={**asdict(v), "dot": dot}, seconds=round(time.perf_counter() - t0, 2),
                triton=triton.__version__, **_usage(k, v.num_warps))


def _usage(k, num_warps: int) -> dict:
    """A compiled kernel's registers and stack (cuobjdump; on a GPU without it, the driver's
    count), dynamic shared memory (its metadata: cuobjdump's SHARED is not the launch's) and
    the occupancy they allow."""
    usage = _resource_usage(k.asm["cubin"])
    usage.pop("shared", None)
    if "reg" not in usage:
        try:
            k._init_handles()  # loads the cubin: needs the GPU it was compiled for
            usage.update(reg=k.n_regs, stack=k.n_spills)
        except Exception:  # noqa: BLE001 - no GPU, no cuobjdump: the compile still passed
            return {**usage, "shared": k.metadata.shared}
    occ = occupancy(usage["reg"], num_warps, k.metadata.shared)
    return {**usage, "shared": k.metadata.shared, **asdict(occ)}


def compile_aux(arch: int = 90) -> list[dict]:
    """The combine and the two append kernels, once each."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from . import runtime
    from .decode import fp8_code

    K = runtime._load("cuda")
    out = []
    ptrs = {n: "*fp32" for n in ("WS", "OUT", "LSE")}
    ptrs["BV"] = "*bf16"
    sig, cx = _signature(K.decode_combine_kernel, ptrs, dict(BLOCK_S=64, BLOCK_D=128, BLOCK_R=64))
    k = triton.compile(ASTSource(K.decode_combine_kernel, sig, cx), target=GPUTarget("cuda", arch, 32),
                       options=dict(num_warps=4))
    out.append(dict(kernel="decode_combine_kernel", triton=triton.__version__, **_usage(k, 4)))
    ptrs = {n: "*i16" for n in ("E_SK", "E_SV", "E_LK", "E_LV", "E_KS", "SK", "SV", "LK", "LV", "KS")}
    ptrs.update(POS="*i32", PT="*i32")
    sig, cx = _signature(K.append_kernel, ptrs, dict(BLOCK_D=128, BLOCK_HR=1024))
    k = triton.compile(ASTSource(K.append_kernel, sig, cx), target=GPUTarget("cuda", arch, 32),
                       options=dict(num_warps=4))
    out.append(dict(kernel="append_kernel", triton=triton.__version__, **_usage(k, 4)))
    ptrs = {n: "*bf16" for n in ("E_SK", "E_SV", "E_LK", "E_LV")}
    ptrs.update({n: "*u8" for n in ("SK", "SV", "LK", "LV")})
    ptrs.update({n: "*fp32" for n in ("C_SK", "C_SV", "C_LK", "C_LV")})
    ptrs.update(E_KS="*i16", KS="*i16", POS="*i32", PT="*i32")
    sig, cx = _signature(K.append_fp8_kernel, ptrs, dict(FP8=fp8_code("per_token_head"), MANT=3, MIN_EXP=-6,
                                                         MAX_FINITE=448.0, BLOCK_D=128, BLOCK_HR=32, BLOCK_HH=32,
                                                         BLOCK_R=64))
    k = triton.compile(ASTSource(K.append_fp8_kernel, sig, cx), target=GPUTarget("cuda", arch, 32),
                       options=dict(num_warps=4))
    out.append(dict(kernel="append_fp8_kernel", triton=triton.__version__, **_usage(k, 4)))
    return out


def build_report(arch: int = 90) -> dict:
    """The compile report under the running Triton: every default launch (`"default": true`),
    the points of the committed H200 sweep (launch.H200_SWEEP) and the variants the docs cite
    (`false`), and the auxiliary kernels; each (kernel, variant) compiled once, with the names
    of the launches that compile to it."""
    import torch
    import triton

    from .launch import H200_SWEEP, default_dot
    from .occupancy import REPORT_DIR

    launches = [*((n, v, e, True) for n, v, e in default_launches()),
                *((n, v, e, False) for n, v, e in sweep_launches(REPORT_DIR.parents[1] / H200_SWEEP)),
                *(("", v, False, False) for v in EVIDENCE_VARIANTS), *(("", v, True, False) for v in EXTEND_VARIANTS)]
    todo: dict = {}  # (extend, variant with its dot resolved) -> (launch names, default)
    for name, v, extend, default in launches:
        key = extend, v if v.dot else replace(v, dot=default_dot(getattr(torch, v.dtype), on_gpu=True))
        names, was_default = todo.get(key, ([], False))
        todo[key] = [*names, *([name] if name and name not in names else [])], was_default or default
    entries = []
    for (extend, v), (names, default) in todo.items():
        entries.append({**compile_variant(v, arch, extend=extend), "default": default, "launches": names})
        print(json.dumps(entries[-1]), flush=True)
    return dict(triton=triton.__version__, arch=arch, kernels_sha256=kernels_sha256(),
                command=f"ci/compile-report {triton.__version__}", entries=entries + compile_aux(arch))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", type=int, default=90, help="compute capability x10 (90 = H100/H200)")
    ap.add_argument("--json", help="write the report here")
    ap.add_argument("--variant", help="compile this one Variant (JSON of its fields) and print its usage as JSON")
    ap.add_argument("--extend", action="store_true", help="with --variant: the extend split kernel")
    args = ap.parse_args(argv)
    if args.variant:
        print(json.dumps(compile_variant(Variant(**json.loads(args.variant)), args.arch, extend=args.extend)))
        return 0
    report = build_report(args.arch)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)
            f.write("\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
