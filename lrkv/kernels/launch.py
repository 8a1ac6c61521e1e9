"""The launch shape of the split kernel: a table with its evidence, and the rules around it.

    pick_launch(B=, H=, d_h=, r=, slots=, dtype=, device=, ...) -> LaunchConfig

Every field can be overridden by the caller (`decode_attention(..., block_t=32)`); what is
left None is chosen here, in this order:

  1. `dot` — how tile products run, from the dtype (`default_dot`).
  2. `private` — how the rank-r stream is read: `PRIVATE_DEFAULT[(gpu, rope)]` ("per_head"
     on the GPU and, so that its tests run the GPU's path, in the interpreter; "wide" only
     when asked for, where `wide_applies`). "per_head": one [BLOCK_T, r] tile and product per
     head; "wide": the group's latents as one [BLOCK_T, G·r] tile, every head's private
     logits and values in one tl.dot each against a block-diagonal operand.
  3. `block_q` (extend only) — query tokens of one sequence per program (`token_block_rule`):
     every token of a block shares each loaded cache tile, so extend's loads grow with the
     cache, not with tokens × cache.
  4. `group_size` — heads per program (`group_rule`): up to MAX_GROUP, on the wide path at
     most WIDE_MAX_COLUMNS // r (over an fp8 cache WIDE_MAX_COLUMNS_FP8 // r), with a token
     block at most EXTEND_ROWS // block_q, balanced (H = 18 runs as 2 groups of 9, not 16 + 2).
     Each group re-reads the shared K/V stream, so fewer groups = fewer bytes; a program's
     (token, head) rows are padded to BLOCK_H >= 16 anyway (tl.dot's minimum M).
  5. `block_t`, `num_warps` — `LAUNCH_TABLE[(gpu, private, rope, paged)]` on a GPU with
     tl.dot products (under a Triton older than TRITON_TIER and over a 16-bit cache, its
     `gpu/triton<3.9` entry first: the compiler makes the tile); everywhere else (the
     interpreter, float64's broadcast-and-sum products on a GPU, an unlisted key) the size
     rule (`size_rule`), and in the interpreter its own tile rule (`interpreter_tile`) on top.
  6. `num_splits` — the occupancy rule (`occupancy_rule`): at most `programs_per_sm`
     (row, group, split) programs per SM, in whole waves, each split at least MIN_SPLIT_SLOTS
     slots, at most MAX_SPLITS, in whole tiles; a caller's count is used as is, even when it
     leaves splits empty (the tests use 17 splits over 37 slots). `programs_per_sm`, unless
     given, is the blocks per SM of the kernel this launch compiles (`compiled_programs_per_sm`),
     on a GPU or in its sm90_sms view; where nothing compiles, PROGRAMS_PER_SM, with the reason
     in `LaunchConfig.programs_per_sm_from`.

The evidence named by the table is committed: `ci/logs/compile-check-sm90-triton3.9.0.json`
(registers, spills and occupancy for sm_90 under Triton 3.9, `ci/compile-report`, no GPU
needed; `...-triton3.6.0.json` beside it for the older compiler) and
`ci/gpu-results/h200-summary.md` (the first H200 run of `ci/gpu-check`, its launch-shape sweep)
and `ci/gpu-results/2026-12-04/sweep.json` (the rewritten kernel's sweep, Triton 3.6).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import runtime
from .occupancy import FP8_LOOKUP, SM_MAX_WARPS, Variant, compiled_usage
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
PROGRAMS_PER_SM = 2  # the split rule's programs per SM where no compiled kernel says (the first H200 runs)
# Extend: query tokens of one sequence per program, at most. A block of tokens runs one head
# per program — its rows are the block's tokens, as in FlashAttention's forward — because with
# several heads the per-head selects and products of its rows spill at 16 warps (4 heads x 4
# tokens: 32–112 bytes), and 32 rows spill too; 16 tokens of one head do not, but over an fp8
# cache (8–24 bytes; compile_check, both Tritons).
EXTEND_ROWS = 16

COMPILE_REPORT = "ci/logs/compile-check-sm90-triton3.9.0.json"  # the compiler the "sm_90" entries were chosen with
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
    programs_per_sm_from: str = "the caller"  # where programs_per_sm came from (pick_launch)
    block_q: int = 1  # extend: query tokens of one sequence per program, sharing each cache tile


# ----------------------------------------------------------------------------- the table
@dataclass(frozen=True)
class TileChoice:
    """One entry of the launch table: the tile and warp count, and why."""

    block_t: int
    num_warps: int
    evidence: str  # the committed file and what it shows
    warps_for_tiles: tuple[int, ...] = BLOCK_T_CHOICES  # tiles num_warps holds for; a caller's other tile: size_rule


# The targets every default launch is held to (tests/kernels/test_compile.py, both Tritons):
# no spill, and at least 16 resident warps per SM — loads in flight to cover the memory latency.
# The 2026-12-04 H200 profile of the old default (wide, 16 x 8) found 255 registers, spills and
# one 8-warp block per SM: 13–22 % of the copy bandwidth.
_PER_HEAD = TileChoice(32, 16, f"{COMPILE_REPORT}: per-head, 32 slots x 16 warps: 103–128 registers, no spill "
                               "on Triton 3.6 and 3.9 for decode and paged at both paper scales (one 16-warp block "
                               "per SM: 16 warps); lrkv.bench.prediction puts it at 0.78 ms against 1.34 ms for "
                               "16 slots (2.5B, B = 8, T = 32K: twice the bytes per loop iteration). 8 warps hold "
                               "150–220 (one block); 64 slots spill; wide spills at 16 warps (Triton 3.6 caps it "
                               "at 64 registers)", warps_for_tiles=(16, 32))
_PER_HEAD_FP8 = TileChoice(16, 16, f"{COMPILE_REPORT}: per-head over an fp8 cache, 16 slots x 16 warps: no spill "
                                   "on Triton 3.6 and 3.9 for decode and paged, every granularity; 32 slots spill "
                                   "8–48 bytes (the tiles' conversion to q's dtype and the per-token scales)",
                           warps_for_tiles=(16, 32))
_PER_HEAD_ROPE = TileChoice(16, 16, f"{COMPILE_REPORT}: per-head exact RoPE, 16 x 16 spills 40–88 bytes (the "
                                    "rotated query's [16, d_h] tile is the dot's left operand, held by every "
                                    "warp), 8 warps hold 224–248 registers without a spill: one block of 8 warps. "
                                    "16 warps per SM with a small spill over 8 without one; not measured")
_WIDE = TileChoice(16, 8, f"{COMPILE_REPORT}: wide, 16 slots x 8 warps: ~200 registers without a spill at both "
                          "paper scales under Triton 3.9 (8 warps per SM); 16 warps spill. Taken only when "
                          "private='wide' is asked for (PRIVATE_DEFAULT)")
_WIDE_ROPE = TileChoice(16, 8, f"{COMPILE_REPORT}: wide with exact RoPE, 16 x 8 spills; taken only "
                               "when private='wide' is asked for (PRIVATE_DEFAULT)")

_WIDE_TRITON_36 = TileChoice(32, 4, f"{H200_SWEEP}: wide at H=18, d_h=128, r=55, B=8, T=32K, bf16, Triton 3.6: "
                                    "32 slots x 4 warps, group 9, 1.278 ms against 2.128 ms at 16 x 8 (1.66x), "
                                    "the best of 16 points; both spill under Triton 3.6 (1576 and 328 bytes)")

# (gpu, private, rope, paged) -> TileChoice. "sm_90": H100/H200, the only GPU with evidence;
# every CUDA device looks up these entries until another architecture has its own.
# "sm_90/triton<3.9": the compiler makes the tile — Triton 3.6 (torch 2.11's) spills where
# 3.9 does not, and was measured; its entries come first there, the "sm_90" ones otherwise.
# "sm_90/fp8": over an fp8 cache, first.
LAUNCH_TABLE: dict[tuple[str, str, str, bool], TileChoice] = {
    ("sm_90", "per_head", "none", False): _PER_HEAD,
    ("sm_90", "per_head", "none", True): _PER_HEAD,
    ("sm_90/fp8", "per_head", "none", False): _PER_HEAD_FP8,
    ("sm_90/fp8", "per_head", "none", True): _PER_HEAD_FP8,
    ("sm_90", "per_head", "exact", False): _PER_HEAD_ROPE,
    ("sm_90", "per_head", "exact", True): _PER_HEAD_ROPE,
    ("sm_90", "wide", "none", False): _WIDE,
    ("sm_90", "wide", "none", True): _WIDE,
    ("sm_90", "wide", "exact", False): _WIDE_ROPE,
    ("sm_90", "wide", "exact", True): _WIDE_ROPE,
    ("sm_90/triton<3.9", "wide", "none", False): _WIDE_TRITON_36,
}
TRITON_TIER = (3, 9)  # Triton releases before this one look up the "sm_90/triton<3.9" entries first


def triton_before_tier() -> bool:
    v = runtime.triton_version()
    try:
        return v is not None and tuple(int(x) for x in v.split(".")[:2]) < TRITON_TIER
    except ValueError:  # a dev build's version string: treat it as current
        return False

# (gpu, rope) -> (private path, evidence); elsewhere (the interpreter) the same, so the
# interpreter's tests run the path the GPU runs.
_PER_HEAD_WHY = (f"{COMPILE_REPORT}: the per-head path fits 16 warps per SM without a spill at both paper scales "
                 "and on both Tritons; the wide tile's block-diagonal query and accumulator ([16, G·r] each) "
                 "do not (~200 registers at 8 warps, spills at 16)")
_ROPE_WHY = ("exact RoPE's private logits are per head and slot on either path (a rotated query per head, "
             f"projected through B_h^K every tile); {COMPILE_REPORT}: the wide path spills with it")
PRIVATE_DEFAULT: dict[tuple[str | None, str], tuple[str, str]] = {
    ("sm_90", "none"): ("per_head", _PER_HEAD_WHY),
    ("sm_90", "exact"): ("per_head", _ROPE_WHY),
    (None, "none"): ("per_head", _PER_HEAD_WHY),
    (None, "exact"): ("per_head", _ROPE_WHY),
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


def group_rule(H: int, r: int, private: str, fp8: bool = False, block_q: int = 1) -> int:
    """Heads per program: up to MAX_GROUP (on the wide path G·r <= WIDE_MAX_COLUMNS, or
    WIDE_MAX_COLUMNS_FP8 over an fp8 cache; one with a block of extend tokens, EXTEND_ROWS),
    balanced."""
    cap = MAX_GROUP if block_q == 1 else 1
    if private == "wide":
        cap = max(1, min(cap, (WIDE_MAX_COLUMNS_FP8 if fp8 else WIDE_MAX_COLUMNS) // max(r, 1)))
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


def token_block_rule(tokens: int, seqs: int, rope_exact: bool, dot: str) -> int:
    """Extend's query tokens per program: a sequence's new tokens (⌈tokens / seqs⌉, the
    batch's mean), at most EXTEND_ROWS; one where a block cannot run — exact RoPE (its query
    is rotated per head and slot) and dot='fma' (float64 on a GPU: a block's products would be
    broadcast-and-sum tiles of [rows, d_h, r]). Every token of a block shares each cache tile;
    a block runs one head per program (`group_rule`), so each head re-reads the shared stream."""
    if rope_exact or dot == "fma":
        return 1
    return max(1, min(-(-tokens // max(seqs, 1)), EXTEND_ROWS))


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
    extend: bool = False, fp8: bool = False, sm90_sms: int | None = None, block_q: int | None = None,
    seqs: int | None = None,
) -> LaunchConfig:
    """The launch shape for a call; every argument left None is chosen as the module doc
    says. For extend, B is the number of query tokens and `seqs` the sequences they belong
    to (default B: one token each); fp8: the cache is fp8 (the wide group's column cap,
    WIDE_MAX_COLUMNS_FP8). sm90_sms: choose as an sm_90 GPU with that many SMs would,
    wherever this runs (the traffic model's GPU launch)."""
    interpreted = runtime.is_interpreted() if sm90_sms is None else False
    on_gpu = sm90_sms is not None or (device.type == "cuda" and not interpreted)
    gpu = "sm_90" if on_gpu else None
    rope = "exact" if rope_exact else "none"
    dot = default_dot(dtype, on_gpu) if dot is None else dot
    if private is None:
        default = PRIVATE_DEFAULT[(gpu, rope)][0]
        private = "wide" if default == "wide" and wide_applies(r, dot)[0] else "per_head"
    if not extend:
        block_q = 1
    elif block_q is None:
        block_q = token_block_rule(B, seqs or B, rope_exact, dot)
    group_size = group_rule(H, r, private, fp8, block_q) if group_size is None else group_size
    n_groups = -(-H // group_size)
    block_h, block_d, block_r = next_pow2(group_size, 16), next_pow2(d_h, 16), next_pow2(r, 16)
    block_gr = next_pow2(group_size * r, 16) if private == "wide" else 16

    rule = size_rule(block_h, block_d, block_r, dot)
    key = (private, rope, paged)
    choice = rule if dot == "fma" else (
        # the older-Triton entries were measured over 16-bit caches only
        (gpu is not None and not fp8 and triton_before_tier() and LAUNCH_TABLE.get((f"{gpu}/triton<3.9", *key)))
        or (gpu is not None and fp8 and LAUNCH_TABLE.get((f"{gpu}/fp8", *key)))
        or LAUNCH_TABLE.get((gpu, *key), rule))
    if block_t is None:
        block_t = choice.block_t
        if interpreted and not on_gpu:
            block_t = interpreter_tile(block_t, slots, extend)
    if num_warps is None:
        num_warps = choice.num_warps if block_t in choice.warps_for_tiles else rule.num_warps

    source = "the caller"
    if num_splits is None:
        n_sms = sm90_sms or num_sms(device)
        rows = -(-B // block_q)  # the grid's rows: token blocks (balanced), batch rows for decode
        if programs_per_sm is None and not on_gpu:
            programs_per_sm, source = PROGRAMS_PER_SM, "PROGRAMS_PER_SM: no GPU (programs run one after another)"
        elif programs_per_sm is None and len({occupancy_rule(rows, n_groups, slots, block_t, p, n_sms)
                                              for p in (1, SM_MAX_WARPS // num_warps)}) == 1:
            programs_per_sm, source = 1, "any: the length caps the splits at every occupancy"
        elif programs_per_sm is None:
            variant = Variant(str(dtype).removeprefix("torch."), group_size, d_h, r, block_t, num_warps,
                              rope_exact=rope_exact, paged=paged, dot=dot, private=private,
                              block_q=block_q, **(FP8_LOOKUP if fp8 else {}))
            programs_per_sm, source = compiled_programs_per_sm(variant, extend, None if sm90_sms else device)
        num_splits, split_size = occupancy_rule(rows, n_groups, slots, block_t, programs_per_sm, n_sms)
    else:
        split_size = max(1, -(-slots // num_splits))
    return LaunchConfig(num_splits, split_size, group_size, n_groups, next_pow2(group_size * block_q, 16), block_t,
                        block_d, block_r, num_warps, dot, dtype == torch.float64, private, block_gr,
                        PROGRAMS_PER_SM if programs_per_sm is None else programs_per_sm, source, block_q)


def compiled_programs_per_sm(variant: Variant, extend: bool, device: torch.device | None) -> tuple[int, str]:
    """(programs per SM, where from) for the split rule: the blocks per SM of `variant`'s
    kernel compiled for `device`'s architecture (None: sm_90, the sm90_sms view) by the
    running Triton (`occupancy.compiled_usage`: its committed report, else a compile now);
    PROGRAMS_PER_SM, with the reason, where neither gives a count."""
    try:
        arch = 90 if device is None else int("".join(map(str, torch.cuda.get_device_capability(device))))
    except Exception as e:  # noqa: BLE001 - a CUDA device named without a driver (tests ask so)
        return PROGRAMS_PER_SM, f"PROGRAMS_PER_SM: no architecture for {device} ({type(e).__name__})"
    usage, where = compiled_usage(variant, extend=extend, arch=arch)
    if usage is None or usage.get("blocks_per_sm", 0) < 1:
        return PROGRAMS_PER_SM, f"PROGRAMS_PER_SM: {where}"
    return usage["blocks_per_sm"], f"blocks per SM of the compiled kernel ({where})"


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
                num_warps=cfg.num_warps, private=cfg.private, programs_per_sm=cfg.programs_per_sm,
                block_q=cfg.block_q if cfg.block_q > 1 else None)  # extend's only: decode refuses one > 1


def tile_in_page(page_size: int, block_t: int, split_size: int | None = None) -> bool:
    """Whether every tile of a paged launch lies inside one page: page_size and every tile
    start (split starts are multiples of split_size, tiles step by block_t) are multiples of
    block_t. The kernel then reads the page table once per tile (TILE_IN_PAGE)."""
    return page_size % block_t == 0 and (split_size is None or split_size % block_t == 0)
