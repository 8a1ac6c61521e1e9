"""Kernel launches for the GPU tools of `ci/gpu-check` (Nsight Compute, compute-sanitizer).

    python3 ci/gpu-launch.py profile [2.5B|6.3B] [B] [T]   one decode at a paper scale: 2 warm-ups,
                                                            then the launch ncu profiles
    python3 ci/gpu-launch.py variants                       one small launch of every kernel variant
                                                            (compute-sanitizer memcheck's target)

`profile` prints the bytes LRKV's cache counts (lrkv.bench.families.read_bytes), to set beside
ncu's dram__bytes_read.sum. `variants` draws the harness's inputs (garbage past every length,
shuffled pages, a page table entry of -1 past a length) so an out-of-bounds access has
somewhere to land; it prints one line per variant. On a CPU both run under TRITON_INTERPRET=1
(a smoke test of this script, not a measurement).
"""
from __future__ import annotations

import sys

import torch

from lrkv.bench.families import make_inputs, read_bytes
from lrkv.kernels.decode import decode_attention, paged_decode_attention
from lrkv.kernels.extend import extend_attention
from lrkv.kernels.testing import kernel_case, kernel_inputs
from lrkv.spec import AttentionSpec

SCALES = {"2.5B": (18, 55), "6.3B": (32, 54)}  # (H, r) at d_h 128, the paper's Table 1
_SMALL = dict(H=18, d_h=128, r=55, dtype=torch.bfloat16, seed=70)
VARIANTS = {  # name: (wrapper, harness case knobs)
    "contiguous": (decode_attention, dict(lengths=[700, 300, 1], key_scale=True)),
    "strided": (decode_attention, dict(lengths=[700, 300], layout="strided")),
    "paged": (paged_decode_attention, dict(level="kernel-paged", page_size=16, lengths=[700, 300])),
    "rope": (decode_attention, dict(lengths=[700, 300], rope="exact")),
    "fp8-per-head": (decode_attention, dict(lengths=[700, 300], cache_format="float8_e4m3fn",
                                            scale_granularity="per_head")),
    "fp8-paged-per-token": (paged_decode_attention, dict(level="kernel-paged", page_size=16, lengths=[700, 300],
                                                         cache_format="float8_e4m3fn",
                                                         scale_granularity="per_token")),
    "fp8-e5m2-per-token-head": (decode_attention, dict(lengths=[700, 300], cache_format="float8_e5m2",
                                                       scale_granularity="per_token_head")),
    "extend-paged": (extend_attention, dict(level="kernel-extend", n_new=(3, 1), page_size=16,
                                            lengths=[700, 300])),
}


def profile(argv: list[str]) -> None:
    scale = argv[0] if argv else "2.5B"
    B = int(argv[1]) if len(argv) > 1 else 8
    T = int(argv[2]) if len(argv) > 2 else 32768
    H, r = SCALES[scale]
    spec = AttentionSpec.lrkv(H, 128, r)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    inp = make_inputs(spec, B, T, dtype=torch.bfloat16, device=device, seed=0)
    args = [inp[n] for n in ("q", "shared_k", "shared_v", "latent_k", "latent_v", "basis_k", "basis_v", "lengths")]
    for _ in range(3):  # 2 warm-ups, then the profiled launch
        decode_attention(*args, scale=128**-0.5, check=False)
    if device == "cuda":
        torch.cuda.synchronize()
    print(f"profile {scale} H={H} r={r} B={B} T={T}: bytes counted {read_bytes(spec, B, T, torch.bfloat16)}")


def variants(names: list[str]) -> None:
    for name in names or VARIANTS:
        fn, knobs = VARIANTS[name]
        out, lse = kernel_inputs(kernel_case(**{**_SMALL, **knobs})).call(fn)
        if torch.cuda.is_available():
            torch.cuda.synchronize()
        print(f"{name}: out {tuple(out.shape)} finite {bool(torch.isfinite(out).all())}", flush=True)


def main(argv: list[str]) -> int:
    if not argv or argv[0] not in ("profile", "variants"):
        print(__doc__, file=sys.stderr)
        return 2
    (profile if argv[0] == "profile" else variants)(argv[1:])
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
