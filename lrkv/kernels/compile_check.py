"""Compile the kernels for a CUDA target WITHOUT a GPU (Triton's front end + ptxas only).

The interpreter checks the math but not that the kernels compile: Triton's code
generator rejects things the interpreter accepts (non-constexpr globals, mistyped
constexpr branches, unsupported dot shapes). This module runs the real compiler for
sm_90 (H100/H200) and reports registers and spill bytes per variant (and the Triton version:
ptxas's register allocation moves between releases), so a CPU-only machine catches compile
errors and register blow-ups before anyone spends GPU time.

    python3 -m lrkv.kernels.compile_check            # the default variant set
    python3 -m lrkv.kernels.compile_check --json out.json
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
from dataclasses import asdict, dataclass

from .validate import next_pow2

_TL = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64"}


@dataclass(frozen=True)
class Variant:
    """One compiled specialisation of the decode split kernel."""

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
    block_q: int = 1  # extend: query tokens per program (the rows are block_q x group)

    @classmethod
    def from_launch(cls, cfg, *, r: int, d_h: int, dtype: str = "bfloat16", **kw) -> "Variant":
        """The variant a `launch.LaunchConfig` compiles (its group, tile, warps, private path)."""
        return cls(dtype=dtype, group=cfg.group_size, d_h=d_h, r=r, block_t=cfg.block_t,
                   num_warps=cfg.num_warps, dot=cfg.dot, private=cfg.private, block_q=getattr(cfg, "block_q", 1), **kw)


DEFAULT_VARIANTS = (
    # the GPU defaults at the paper scales: the wide private tile (launch.LAUNCH_TABLE)
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
    ptrs.update(LENGTHS="*i32", SCALE=f"*{acc}", WS=f"*{acc}", CU="*i32", BLK="*i32")
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
    usage = _resource_usage(k.asm["cubin"])
    return dict(kernel="decode_split_kernel[extend]" if extend else "decode_split_kernel",
                entry=split_kernel_name(v, extend),
                variant={**asdict(v), "dot": dot}, seconds=round(time.perf_counter() - t0, 2),
                triton=triton.__version__, **usage)


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
    out.append(dict(kernel="decode_combine_kernel", triton=triton.__version__, **_resource_usage(k.asm["cubin"])))
    ptrs = {n: "*i16" for n in ("E_SK", "E_SV", "E_LK", "E_LV", "E_KS", "SK", "SV", "LK", "LV", "KS")}
    ptrs.update(POS="*i32", PT="*i32")
    sig, cx = _signature(K.append_kernel, ptrs, dict(BLOCK_D=128, BLOCK_HR=1024))
    k = triton.compile(ASTSource(K.append_kernel, sig, cx), target=GPUTarget("cuda", arch, 32),
                       options=dict(num_warps=4))
    out.append(dict(kernel="append_kernel", triton=triton.__version__, **_resource_usage(k.asm["cubin"])))
    ptrs = {n: "*bf16" for n in ("E_SK", "E_SV", "E_LK", "E_LV")}
    ptrs.update({n: "*u8" for n in ("SK", "SV", "LK", "LV")})
    ptrs.update({n: "*fp32" for n in ("C_SK", "C_SV", "C_LK", "C_LV")})
    ptrs.update(E_KS="*i16", KS="*i16", POS="*i32", PT="*i32")
    sig, cx = _signature(K.append_fp8_kernel, ptrs, dict(FP8=fp8_code("per_token_head"), MANT=3, MIN_EXP=-6,
                                                         MAX_FINITE=448.0, BLOCK_D=128, BLOCK_HR=32, BLOCK_HH=32,
                                                         BLOCK_R=64))
    k = triton.compile(ASTSource(K.append_fp8_kernel, sig, cx), target=GPUTarget("cuda", arch, 32),
                       options=dict(num_warps=4))
    out.append(dict(kernel="append_fp8_kernel", triton=triton.__version__, **_resource_usage(k.asm["cubin"])))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--arch", type=int, default=90, help="compute capability x10 (90 = H100/H200)")
    ap.add_argument("--json", help="write the results here")
    args = ap.parse_args(argv)
    results = []
    for v in DEFAULT_VARIANTS:
        r = compile_variant(v, args.arch)
        results.append(r)
        print(json.dumps(r))
    for r in [*compile_aux(args.arch), *(compile_variant(v, args.arch, extend=True) for v in EXTEND_VARIANTS)]:
        results.append(r)
        print(json.dumps(r))
    if args.json:
        with open(args.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
