"""Which shapes a benchmark run covers: named grids and the memory check that skips rows.

             CPU                                          GPU (bf16)
  quick    2.5B (H=18, r=55), B 1, T 1K/8K              B 1/8, T 1K/16K              (~1 min)
  default  2.5B and 6.3B (H=32, r=54), B 1/4,           B 1/8, T 1K/4K/16K/32K       (~5-10 min)
           T 1K/8K/16K
  full     both scales, B 1/4/16, T 1K...32K            B 1/4/8/16, T 1K...128K      (long)

On a GPU every grid adds `gqa-eq` (SDPA GQA at LRKV's cache bytes, a target's peer).
Every grid reaches the shapes the performance targets are stated at (CPU: T ≥ 8K; GPU:
T ≥ 16K, B ≥ 8). Rows whose inputs and temporaries do not fit the memory budget are
reported as skipped rows, never silently dropped.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from .families import FAMILIES

# table order: lrkv, lrkv-mat, mha, gqa, gqa-eq, mqa, mla, mlra; gqa-eq8 (the fp8 row's 16-bit
# peer) only when asked for (--families), beside the triton-fp8 backend
ALL_FAMILIES = tuple(f for f in FAMILIES if f != "gqa-eq8")
# gqa-eq is the GPU targets' fair peer (SDPA GQA at LRKV's bytes); the CPU grids leave it out.
CPU_FAMILIES = tuple(f for f in ALL_FAMILIES if f != "gqa-eq")


@dataclass(frozen=True)
class BenchGrid:
    name: str
    scales: tuple[str, ...]  # PAPER_SCALES labels
    batches: tuple[int, ...]  # B
    seq_lens: tuple[int, ...]  # T (every sequence full: lengths = T)
    families: tuple[str, ...] = CPU_FAMILIES
    rounds: int = 5  # interleaved timing rounds per shape (the median is over these)
    gpu_batches: tuple[int, ...] = ()  # replace `batches` on a GPU (empty: keep them)
    gpu_seq_lens: tuple[int, ...] = ()  # replace `seq_lens` on a GPU (empty: keep them)
    gpu_families: tuple[str, ...] = ()  # replace `families` on a GPU (empty: keep them)

    def __post_init__(self) -> None:
        for name, values in (("batches", self.batches), ("seq_lens", self.seq_lens)):
            if not values or any(int(v) < 1 for v in values):
                raise ValueError(f"{name} must be positive integers, got {values}")
        unknown = [f for f in (*self.families, *self.gpu_families) if f not in FAMILIES]
        if unknown:
            raise ValueError(f"unknown families {unknown}; known: {', '.join(FAMILIES)}")
        if "mha" not in self.families or (self.gpu_families and "mha" not in self.gpu_families):
            raise ValueError("the grid must include mha: every ratio is taken against it")
        if self.rounds < 1:
            raise ValueError(f"rounds must be >= 1, got {self.rounds}")

    def for_device(self, device: str) -> BenchGrid:
        """The grid as it runs on a device (GPU batches and lengths on a GPU)."""
        if device != "cuda" or not (self.gpu_batches or self.gpu_seq_lens or self.gpu_families):
            return self
        return replace(self, batches=self.gpu_batches or self.batches, seq_lens=self.gpu_seq_lens or self.seq_lens,
                       families=self.gpu_families or self.families, gpu_batches=(), gpu_seq_lens=(),
                       gpu_families=())

    def shapes(self) -> list[tuple[str, int, int]]:
        """(scale, B, T) in run order: small first, so a user sees rows early — every scale at a
        (B, T) before the next, so a time budget (`--budget-s`) cuts the largest shapes, not a scale."""
        return [(s, b, t) for b in sorted(self.batches) for t in sorted(self.seq_lens) for s in self.scales]


K = 1024
GRIDS: dict[str, BenchGrid] = {
    "quick": BenchGrid("quick", ("2.5B",), (1,), (1 * K, 8 * K), rounds=3,
                       gpu_batches=(1, 8), gpu_seq_lens=(1 * K, 16 * K), gpu_families=ALL_FAMILIES),
    "default": BenchGrid("default", ("2.5B", "6.3B"), (1, 4), (1 * K, 8 * K, 16 * K), rounds=5,
                         gpu_batches=(1, 8), gpu_seq_lens=(1 * K, 4 * K, 16 * K, 32 * K),
                         gpu_families=ALL_FAMILIES),
    "full": BenchGrid("full", ("2.5B", "6.3B"), (1, 4, 16), (1 * K, 2 * K, 4 * K, 8 * K, 16 * K, 32 * K),
                      rounds=7, gpu_batches=(1, 4, 8, 16),
                      gpu_seq_lens=(1 * K, 2 * K, 4 * K, 8 * K, 16 * K, 32 * K, 64 * K, 128 * K),
                      gpu_families=ALL_FAMILIES),
}
