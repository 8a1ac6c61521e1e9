"""One LRKV decode at a paper scale, for Nsight Compute (`ci/gpu-check` step 8).

    ncu --kernel-name regex:decode_ --launch-skip 2 --launch-count 2 ... python3 ci/gpu-profile.py [2.5B|6.3B] [B] [T]

Two warm-up launches (compile, autotune-free), then the profiled one: split kernel + combine.
Prints the bytes LRKV's cache counts (lrkv.bench.families.read_bytes) so the log holds the
number to set beside ncu's dram__bytes_read.sum.
"""
from __future__ import annotations

import sys

import torch

from lrkv.bench.families import make_inputs, read_bytes
from lrkv.kernels.decode import decode_attention
from lrkv.spec import AttentionSpec

SCALES = {"2.5B": (18, 55), "6.3B": (32, 54)}  # (H, r) at d_h 128, the paper's Table 1


def main(argv: list[str]) -> int:
    scale = argv[0] if argv else "2.5B"
    B = int(argv[1]) if len(argv) > 1 else 8
    T = int(argv[2]) if len(argv) > 2 else 32768
    H, r = SCALES[scale]
    spec = AttentionSpec.lrkv(H, 128, r)
    inp = make_inputs(spec, B, T, dtype=torch.bfloat16, device="cuda" if torch.cuda.is_available() else "cpu", seed=0)  # CPU: a smoke run under TRITON_INTERPRET=1
    args = [inp[n] for n in ("q", "shared_k", "shared_v", "latent_k", "latent_v", "basis_k", "basis_v", "lengths")]
    for _ in range(3):  # 2 warm-ups, then the profiled launch
        decode_attention(*args, scale=128**-0.5, check=False)
    if torch.cuda.is_available():
        torch.cuda.synchronize()
    counted = read_bytes(spec, B, T, torch.bfloat16)
    print(f"profile {scale} H={H} r={r} B={B} T={T}: bytes counted {counted}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
