"""The launch shape of the split kernel: a table with its evidence, and the rules around it.

    pick_launch(B=, H=, d_h=, r=, slots=, dtype=, device=, ...) -> LaunchConfig

Every field can be overridden by the caller (`decode_attention(..., block_t=32)`); what is
left None is chosen here, in this order:

  1. `dot` — how tile products run, from the dtype (`default_dot`).
  2. `private` — how the rank-r stream is read: `PRIVATE_DEFAULT[(gpu, rope)]`, else "wide"
     wherever it applies (`wide_applies`). "wide": the group's latents as one
     [BLOCK_T, G·r] tile, every head's private logits and values in one tl.dot each against
     a block-diagonal operand; "per_head": one [BLOCK_T, r] tile and product per head.
  3. `group_size` — heads per program (`group_rule`): up to MAX_GROUP, on the wide path at
     most WIDE_MAX_COLUMNS // r (over an fp8 cache WIDE_MAX_COLUMNS_FP8 // r), balanced
     (H = 18 runs as 2 groups of 9, not 16 + 2; over an fp8 cache as 5 groups of 4). Each
     group re-reads the shared K/V stream, so fewer groups = fewer bytes; the group is padded
     to BLOCK_H >= 16 rows anyway (tl.dot's minimum M).
  4. `block_t`, `num_warps` — `LAUNCH_TABLE[(gpu, private, rope, paged)]` on a GPU with
     tl.dot products (under a Triton older than TRITON_TIER and over a 16-bit cache, its
     `gpu/triton<3.9` entry first: the compiler makes the tile); everywhere else (the
     interpreter, float64's broadcast-and-sum products on a GPU, an unlisted key) the size
     rule (`size_rule`), and in the interpreter its own tile rule (`interpreter_tile`) on top.
  5. `num_splits` — the occupancy rule (`occupancy_rule`): at most `programs_per_sm`
     (b, group, split) programs per SM, in whole waves, each split at least MIN_SPLIT_SLOTS
     slots, at most MAX_SPLITS, in whole tiles; a caller's count is used as is, even when it leaves splits
     empty (the tests use 17 splits over 37 slots).

The evidence named by the table is committed: `ci/logs/compile-check-sm90.json` (registers
and spills for sm_90, `python3 -m lrkv.kernels.compile_check`, no GPU needed) and
`ci/gpu-results/h200-summary.md` (the first H200 run of `ci/gpu-check`, its launch-shape sweep)
and `ci/gpu-results/2026-12-04/sweep.json` (the rewritten kernel's sweep, Triton 3.6).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import runtime
from .validate import BLOCK_T_CHOICES, MAX_SPLITS, next_pow2

MIN_SPLIT_SLOTS = 256  # a split shorter than this spends more on its partials than it saves
MAX_GROUP = 16  # heads per program by default (BLOCK_H >= 16 anyway: tl.dot needs M >= 16)
WIDE_MAX_COLUMNS = 512  # default cap on G·r for the wide private tile (registers; compile_check)
# ... over an fp8 cache: its tiles are converted to q's dtype in registers on the way to the
# tensor cores, and at 512 columns (16 slots, 8 warps) ptxas spills 48 B; at 256 none
# (compile_check). The price: H = 18, r = 55 runs as 5 groups of 4, each reading the shared
# stream, against 2 of 9 — at one byte per element, and the groups' re-reads can hit in L2.
WIDE_MAX_COLUMNS_FP8 = 256
WIDE_LIMIT_COLUMNS = 2048  # an explicit group_size may go this far; past it the tile cannot fit
PROGRAMS_PER_SM = 2  # default occupancy target of the split heuristic (the committed H200 runs)

COMPILE_REPORT = "ci/logs/compile-check-sm90.json"
H200_RUN = "ci/gpu-results/h200-summary.md"
H200_SWEEP = "ci/gpu-results/2026-12-04/sweep.json"  # the rewritten kernel's sweep, Triton 3.6

# Tile-product modes (the kernels' DOT constexpr, see _kernels.py):
#   ieee   fp32 (or fp64) tl.dot without TF32 — the interpreter; exact-ish, slow on a GPU
#   lp     16-bit tensor cores, the fp32 left operand split into hi + lo 16-bit halves
#   fma    broadcast-and-sum, no tl.dot — float64 on a GPU
#   tf32x3 three TF32 tensor-core products — float32 on a GPU, on request
DOT_MODES = {"ieee": 0, "lp": 1, "fma": 2, "tf32x3": 3}


def default_dot(dtype: torch.dtype, on_gpu: bool) -> str:
    """The tile-product mode for an input dtype. The interpreter has no bfloat16 matmul, so
    bfloat16 is cast to float32 there (DESIGN §8); float16 runs the GPU's split path."""
    if dtype == torch.float64:
        return "fma" if on_gpu else "ieee"
    if dtype == torch.float32:
        # "ieee" on the GPU too (FMA products, no tensor cores): float32 is the tight-check
        # dtype, and tf32x3's extra 2^-22 per product would blur it; bf16 is the fast path.
        return "ieee"
    if dtype == torch.float16:
        return "lp"
    return "lp" if on_gpu else "ieee"


@dataclass(frozen=True)
class LaunchConfig:
    """How one decode call is laid out on the device."""

    num_splits: int  # KV splits per (batch row, head group); stage 2 merges them
    split_size: int  # slots per split (the last split may be short or empty)
    group_size: int  # real heads per program
    n_groups: int  # cdiv(H, group_size)
    block_h: int  # group padded to a power of two >= 16 (tl.dot's minimum M)
    block_t: int  # slots per tile
    block_d: int  # d_h padded to a power of two >= 16
    block_r: int  # r padded to a power of two >= 16 (masked: ranks need not be powers of two)
    num_warps: int
    dot: str  # how tile products run: 'ieee' | 'lp' | 'fma' | 'tf32x3' (see DOT_MODES)
    acc_fp64: bool  # accumulate in float64 (float64 inputs), else float32
    private: str = "per_head"  # 'wide' | 'per_head': how the rank-r stream is read (module doc)
    block_gr: int = 16  # the wide tile's columns: group_size · r padded to a power of two >= 16
    programs_per_sm: int = PROGRAMS_PER_SM  # the occupancy rule's target


# ----------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class TileChoice:
    """One entry of the launch table: the tile and warp count, and why."""

    block_t: int
    num_warps: int
    evidence: str  # the committed file and what it shows
    warps_for_tiles: tuple[int, ...] = BLOCK_T_CHOICES  # tiles num_warps holds for; a caller's other tile: size_rule


_WIDE = TileChoice(16, 8, f"{COMPILE_REPORT}: wide, 16 slots x 8 warps is the largest shape without a spill at "
                          "both paper scales (235 registers at H=18/r=55 and at H=32/r=54, bf16); 32 slots "
                          "spill 40 bytes at 8 warps, 280 at 16. Speed not yet measured (the GPU sweep decides)")
_WIDE_PAGED = TileChoice(16, 8, f"{COMPILE_REPORT}: wide, paged at page 16 (one page per tile), 16 x 8: no "
                                "spill at bf16 (229 registers), none at float16 with key_scale (245)")
_WIDE_ROPE = TileChoice(16, 8, f"{COMPILE_REPORT}: wide with exact RoPE, 16 x 8 spills 56 bytes; taken only "
                               "when private='wide' is asked for (PRIVATE_DEFAULT)")
_PER_HEAD = TileChoice(64, 4, f"{H200_RUN}: launch-shape sweep at H=18, d_h=128, r=55, B=8, T=32K, bf16: 64 "
                              "slots x 4 warps 1.24 ms, 16 x 8 5.60 ms (4.5x); paged per-head not measured",
                       warps_for_tiles=(64, 128))
_PER_HEAD_ROPE = TileChoice(32, 8, f"{COMPILE_REPORT}: per-head exact RoPE, 32 x 8 spills 40 bytes where the "
                                   "64 x 4 shape the H200 run measured it with (6.54 ms, 5.2x rope none) spills "
                                   "2144; 16-slot tiles re-read B_h^K twice as often. Speed not yet measured")

_WIDE_TRITON_36 = TileChoice(32, 4, f"{H200_SWEEP}: wide at H=18, d_h=128, r=55, B=8, T=32K, bf16, Triton 3.6: "
                                    "32 slots x 4 warps, group 9, 1.278 ms against 2.128 ms at 16 x 8 (1.66x), "
                                    "the best of 16 points; both spill under Triton 3.6 (1576 and 328 bytes)")

# (gpu, private, rope, paged) -> TileChoice. "sm_90": H100/H200, the only GPU with evidence;
# every CUDA device looks up these entries until another architecture has its own.
# "sm_90/triton<3.9": the compiler makes the tile — Triton 3.6 (torch 2.11's) spills where
# 3.9 does not, and was measured; its entries come first there, the "sm_90" ones otherwise.
LAUNCH_TABLE: dict[tuple[str, str, str, bool], TileChoice] = {
    ("sm_90", "wide", "none", False): _WIDE,
    ("sm_90", "wide", "none", True): _WIDE_PAGED,
    ("sm_90", "wide", "exact", False): _WIDE_ROPE,
    ("sm_90", "wide", "exact", True): _WIDE_ROPE,
    ("sm_90", "per_head", "none", False): _PER_HEAD,
    ("sm_90", "per_head", "none", True): _PER_HEAD,
    ("sm_90", "per_head", "exact", False): _PER_HEAD_ROPE,
    ("sm_90", "per_head", "exact", True): _PER_HEAD_ROPE,
    ("sm_90/triton<3.9", "wide", "none", False): _WIDE_TRITON_36,
}
TRITON_TIER = (3, 9)  # Triton releases before this one look up the "sm_90/triton<3.9" entries first


def triton_before_tier() -> bool:
    v = runtime.triton_version()
    try:
        return v is not None and tuple(int(x) for x in v.split(".")[:2]) < TRITON_TIER
    except ValueError:  # a dev build's version string: treat it as current
        return False

# (gpu, rope) -> (private path, evidence); elsewhere "wide" wherever it applies, so the
# interpreter tests run the path the GPU runs.
PRIVATE_DEFAULT: dict[tuple[str, str], tuple[str, str]] = {
    ("sm_90", "none"): ("wide", f"{COMPILE_REPORT}: the wide tile compiles without a spill at the table's "
                                "shape; its speed against per_head is for the GPU sweep to measure"),
    ("sm_90", "exact"): ("per_head", "exact RoPE's private logits are per head and slot on either path (a "
                                     "rotated query per head, projected through B_h^K every tile), so the "
                                     f"per-head path takes its own tile: {COMPILE_REPORT} spills 40 bytes "
                                     "per-head at 32 x 8 against 56 wide at 16 x 8"),
}


def size_rule(block_h: int, block_d: int, block_r: int, dot: str) -> TileChoice:
    """Everywhere the table does not reach: 32-slot tiles when the padded [BLOCK_H, r] blocks
    are small, else 16; 8 warps when d_h · r_pad >= 4096, else 4."""
    return TileChoice(32 if block_h * block_r <= 512 and dot != "fma" else 16,
                      8 if block_d * block_r >= 4096 else 4,
                      f"{COMPILE_REPORT}: at d_h=128, r=55 (BLOCK_R 64) 8 warps hold 173 registers, 4 warps 228; "
                      "before the tile loop was shared 4 warps spilled 32 bytes where 8 did not")


def interpreter_tile(block_t: int, slots: int, extend: bool) -> int:
    """The interpreter pays per operation, not per element: few big tiles. Decode keeps
    several per sequence (up to 8, so short cases still exercise the online rescale); extend
    runs one program per query token, so two at most (still one rescale between them)."""
    if extend:
        return min(128, next_pow2(-(-slots // 2), 32))
    return min(128, max(block_t, next_pow2(-(-slots // 8))))


def group_rule(H: int, r: int, private: str, fp8: bool = False) -> int:
    """Heads per program: up to MAX_GROUP (on the wide path G·r <= WIDE_MAX_COLUMNS, or
    WIDE_MAX_COLUMNS_FP8 over an fp8 cache), balanced."""
    cap = MAX_GROUP
    if private == "wide":
        cap = max(1, min(MAX_GROUP, (WIDE_MAX_COLUMNS_FP8 if fp8 else WIDE_MAX_COLUMNS) // max(r, 1)))
    n_groups = -(-H // cap)
    return -(-H // n_groups)  # balanced: 18 heads -> 2 x 9, not 16 + 2


def occupancy_rule(rows: int, n_groups: int, slots: int, block_t: int, programs_per_sm: int,
                   n_sms: int) -> tuple[int, int]:
    """(num_splits, split_size): at most programs_per_sm programs per SM over the (row, group)
    pairs — rounded down, so the grid is whole waves, never a full wave and a few programs
    more (the 2026-12-04 H200 profile: 272 programs on 132 one-program SMs, 2.06 waves) —
    splits of at least MIN_SPLIT_SLOTS slots, at most MAX_SPLITS, in whole tiles."""
    want = max(1, programs_per_sm * n_sms // max(1, rows * n_groups))
    by_length = max(1, -(-slots // MIN_SPLIT_SLOTS))
    num_splits = max(1, min(want, by_length, MAX_SPLITS))
    split_size = -(-max(slots, 1) // num_splits)
    split_size = -(-split_size // block_t) * block_t  # whole tiles per split
    return max(1, -(-max(slots, 1) // split_size)), split_size


def wide_applies(r: int, dot: str) -> tuple[bool, str]:
    """Whether the wide private tile can run: (ok, why not)."""
    if r < 1:
        return False, f"r = {r}: there is no private stream to read"
    if dot == "fma":
        return False, "the wide private tile needs tl.dot; dot='fma' (float64 on a GPU) has none"
    if next_pow2(r, 16) > WIDE_LIMIT_COLUMNS:
        return False, f"r = {r} does not fit one wide tile (at most {WIDE_LIMIT_COLUMNS} columns)"
    return True, ""


def num_sms(device: torch.device) -> int:
    if device.type == "cuda":
        return torch.cuda.get_device_properties(device).multi_processor_count
    return 1  # the interpreter runs programs one after another: splitting only adds work


def pick_launch(
    *, B: int, H: int, d_h: int, r: int, slots: int, dtype: torch.dtype, device: torch.device,
    num_splits: int | None = None, group_size: int | None = None, block_t: int | None = None,
    num_warps: int | None = None, dot: str | None = None, private: str | None = None,
    programs_per_sm: int | None = None, rope_exact: bool = False, paged: bool = False,
    extend: bool = False, fp8: bool = False, sm90_sms: int | None = None,
) -> LaunchConfig:
    """The launch shape for a call; every argument left None is chosen as the module doc
    says. For extend, B is the number of query tokens (the rows of the grid); fp8: the cache
    is fp8 (the wide group's column cap, WIDE_MAX_COLUMNS_FP8). sm90_sms: choose as an sm_90
    GPU with that many SMs would, wherever this runs (the traffic model's GPU launch)."""
    interpreted = runtime.is_interpreted() if sm90_sms is None else False
    on_gpu = sm90_sms is not None or (device.type == "cuda" and not interpreted)
    gpu = "sm_90" if on_gpu else None
    rope = "exact" if rope_exact else "none"
    dot = default_dot(dtype, on_gpu) if dot is None else dot
    if private is None:
        default = PRIVATE_DEFAULT.get((gpu, rope), ("wide", ""))[0]
        private = "wide" if default == "wide" and wide_applies(r, dot)[0] else "per_head"
    group_size = group_rule(H, r, private, fp8) if group_size is None else group_size
    n_groups = -(-H // group_size)
    block_h, block_d, block_r = next_pow2(group_size, 16), next_pow2(d_h, 16), next_pow2(r, 16)
    block_gr = next_pow2(group_size * r, 16) if private == "wide" else 16

    rule = size_rule(block_h, block_d, block_r, dot)
    key = (private, rope, paged)
    choice = rule if dot == "fma" else (
        # the older-Triton entries were measured over 16-bit caches only
        (gpu is not None and not fp8 and triton_before_tier() and LAUNCH_TABLE.get((f"{gpu}/triton<3.9", *key)))
        or LAUNCH_TABLE.get((gpu, *key), rule))
    if block_t is None:
        block_t = choice.block_t
        if interpreted and not on_gpu:
            block_t = interpreter_tile(block_t, slots, extend)
    if num_warps is None:
        num_warps = choice.num_warps if block_t in choice.warps_for_tiles else rule.num_warps

    programs_per_sm = PROGRAMS_PER_SM if programs_per_sm is None else programs_per_sm
    if num_splits is None:
        num_splits, split_size = occupancy_rule(B, n_groups, slots, block_t, programs_per_sm,
                                                sm90_sms or num_sms(device))
    else:
        split_size = max(1, -(-slots // num_splits))
    return LaunchConfig(num_splits, split_size, group_size, n_groups, block_h, block_t, block_d, block_r,
                        num_warps, dot, dtype == torch.float64, private, block_gr, programs_per_sm)


H200_SMS = 132  # the GPU the launch table's sm_90 row is for (an H100 SXM has 132 SMs too)


def gpu_launch(*, rows: int, H: int, d_h: int, r: int, slots: int, dtype: torch.dtype, n_sms: int = H200_SMS,
               **choices) -> LaunchConfig:
    """`pick_launch` as it runs on an n_sms-SM sm_90 GPU (the table's GPU row), from anywhere:
    rows are the grid's (extend: the query tokens); `choices` are pick_launch's (rope_exact,
    paged, extend, fp8, and any launch option a caller fixes, which the GPU keeps too)."""
    return pick_launch(B=rows, H=H, d_h=d_h, r=r, slots=slots, dtype=dtype, device=torch.device("cpu"),
                       sm90_sms=n_sms, **choices)


def launch_overrides(cfg: LaunchConfig) -> dict:
    """A LaunchConfig as the public wrappers' keyword overrides. Not `dot`: a GPU's product
    mode (16-bit tensor cores) may not run where the kernels do (the interpreter has no
    bfloat16 matmul), and it moves no address; that stays the runtime's."""
    return dict(num_splits=cfg.num_splits, group_size=cfg.group_size, block_t=cfg.block_t,
                num_warps=cfg.num_warps, private=cfg.private, programs_per_sm=cfg.programs_per_sm)


def tile_in_page(page_size: int, block_t: int, split_size: int | None = None) -> bool:
    """Whether every tile of a paged launch lies inside one page: page_size and every tile
    start (split starts are multiples of split_size, tiles step by block_t) are multiples of
    block_t. The kernel then reads the page table once per tile (TILE_IN_PAGE)."""
    return page_size % block_t == 0 and (split_size is None or split_size % block_t == 0)
