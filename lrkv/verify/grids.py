"""Case grids for `lrkv verify` (DESIGN §8).

The default grid covers: ranks 0, 1, odd, the paper's 46/51/55/54 (Table 7) and r = d_h;
head counts 1, 2, 4, 5, 6, 12, 18, 32; lengths 0, 1, odd and > 4096; varlen batches;
RoPE none / exact / aligned / latent; QK-RMSNorm; float64 / float32 / bfloat16 / float16;
the adversarial inputs (NaN or finite garbage past lengths, queries ×100, keys that
nearly cancel, split counts that don't divide T); a non-default RoPE base (θ = 500000) at
every level; and non-contiguous caches (shared K/V packed in one tensor, latents stored
head-major and viewed as [B, T, H, r]).

Paged decode and extend (levels kernel-paged, kernel-extend): page sizes 1, 16 and 5/7
(not dividing T_max); shuffled physical pages and one in-order pool; pages shared by two
sequences (a common prefix); unused pages full of NaN (and once of large finite garbage);
n_b of 0, 1, 2–8 and a 66-token chunk in one ragged batch; lengths at tile (16, 32, 33) and
page boundaries; every RoPE mode the kernels see and QK-RMSNorm; pools handed over dense or
as views of a larger allocation (K/V interleaved per page, pages apart at a storage offset,
rows padded: `POOL_VIEWS`).

FP8 caches: both formats with every scale granularity at the kernel level (`_fp8_cases`), and
at the paged and extend levels as two dimensions of their all-pairs arrays (`FP8_DIMENSIONS`:
every format meets every granularity, and each meets every dtype, page size, shared pages and
garbage); each format and granularity at the layer level (a layer step appending an outlier token); outliers, NaN-pattern and
finite garbage; and three kernel-level cases with FA3-style fp8 compute (q and/or the softmax
weights rounded to e4m3, `Fp8.compute`).

Budget: the grid must run in under 3 minutes on 2 CPU cores for the default backends. The
costly part is inductor (float64/float32 only), which compiles once per (graph, dtype,
static shape) — T is dynamic. So the float32/float64 cases share nine kernel families (most
use BASE with B = 3), the layer levels reuse those decode graphs (H = 4, d_h = 32, r = 6,
B = 3) and add four projection graphs; the other shapes run at bfloat16/float16, where
`eager` (and any user backend) checks them without a compile.

Devices: a case has none. The harness draws inputs and runs the oracle on the CPU; a backend
that runs elsewhere moves the inputs there and its outputs back (triton; inductor, which is on
CUDA whenever torch sees a device). So on a CUDA machine `lrkv verify --backend inductor`
runs this same grid on the GPU, and there it also claims the bfloat16/float16 cases — compiles
outside the CPU budget above, not yet measured on a GPU.
"""

from __future__ import annotations

import functools

from ..spec import PAPER_SCALES, AttentionSpec
from ..reference.cache_layouts.pool_views import VIEWS
from .case import Case, Extend, Fp8, Paged
from .pairs import all_pairs

ALL = ("float64", "float32", "bfloat16", "float16")
PAPER_KERNEL_D_MODEL = 256  # kernel cases only need the cache entries; d only changes how they are drawn

BASE = AttentionSpec.lrkv(4, 32, 6)
EXACT = AttentionSpec.lrkv(4, 32, 6, rope="exact")
ALIGNED = AttentionSpec.lrkv(4, 32, 6, rope="aligned")
LATENT = AttentionSpec.lrkv(4, 32, 6, rope="latent")
QKN = AttentionSpec.lrkv(4, 32, 6, qk_norm=True)
QKN_EXACT = AttentionSpec.lrkv(4, 32, 6, rope="exact", qk_norm=True)
ALIGNED_QKN = AttentionSpec.lrkv(4, 32, 6, rope="aligned", qk_norm=True)
LONG_THETA = 500000.0  # a non-default RoPE base (Llama-3's): a backend that ignores rope_theta must fail
EXACT_THETA = AttentionSpec.lrkv(4, 32, 6, rope="exact", rope_theta=LONG_THETA)
ALIGNED_QKN_THETA = AttentionSpec.lrkv(4, 32, 6, rope="aligned", qk_norm=True, rope_theta=LONG_THETA)


def _paper_kernel_spec(label: str) -> AttentionSpec:
    s = PAPER_SCALES[label]
    return AttentionSpec.lrkv(s.n_heads, s.head_dim, s.rank, d_model=PAPER_KERNEL_D_MODEL)


def _cases(level: str, spec: AttentionSpec, dtypes, lengths, t_max: int, **kw) -> list[Case]:
    return [Case(level, spec, dt, tuple(lengths), t_max, **kw) for dt in dtypes]


def _kernel_cases() -> list[Case]:
    k = lambda *a, **kw: _cases("kernel", *a, **kw)  # noqa: E731
    half = ("bfloat16", "float16")
    return [
        # ranks: 0 (pure shared), 1, odd with odd heads, r = d_h; H = 1 with T_max = 1
        *k(AttentionSpec.lrkv(4, 32, 0), ("float64", *half), (5, 17, 1), 24),
        *k(AttentionSpec.lrkv(4, 32, 1), half, (0, 9, 24), 24),  # an empty sequence: out 0, lse −inf
        *k(AttentionSpec.lrkv(5, 32, 7), ("float32", *half), (13, 1, 31), 33),
        *k(AttentionSpec.lrkv(2, 16, 16), half, (16, 3), 16),
        *k(AttentionSpec.lrkv(1, 64, 8), half, (1,), 1),
        # the paper's ranks (Table 7): 128M r=46, 1.2B r=51, 2.5B r=55, 6.3B r=54, d_h = 128
        *k(_paper_kernel_spec("128M"), half, (37, 100), 128),
        *k(_paper_kernel_spec("1.2B"), ("bfloat16",), (65, 7, 128), 128),
        *k(_paper_kernel_spec("2.5B"), ("float64",), (33, 64), 64),
        *k(_paper_kernel_spec("6.3B"), ("float16",), (17, 40), 48),
        # BASE family: varlen, long T, adversarial inputs
        *k(BASE, ALL, (10, 33, 2), 40),
        *k(BASE, ("float32", *half), (4099, 2048, 4097), 4099),  # T > 4096
        *k(BASE, half, (0, 1, 2, 3, 17, 31, 64, 63), 64, seed=1),  # B = 8, lengths 0..3
        *k(BASE, ALL, (7, 40, 19), 40, q_scale=100.0),
        *k(BASE, ("float64", "float32", "bfloat16"), (25, 40, 3), 40, near_cancel=True),
        *k(BASE, ("float32", "bfloat16"), (11, 4, 39), 40, nan_garbage=False),
        *k(BASE, ("float64", "float32"), (40, 29, 13), 41, splits=3, tile=7),
        *k(BASE, ("float64",), (4, 1, 3), 4),  # tiny: float64 backends also meet the mpmath oracle
        # positions and normalisation (the kernel sees rope only in 'exact' mode)
        *k(EXACT, ("float32", "bfloat16"), (10, 33, 2), 40),
        *k(ALIGNED, ("float32", "bfloat16"), (10, 33, 2), 40),
        *k(LATENT, ("float64", "float16"), (10, 33, 2), 40),
        *k(QKN, ("float32", "bfloat16"), (10, 33, 2), 40),
        *k(QKN_EXACT, ("float64", "float16"), (10, 33, 2), 40),
        *k(QKN_EXACT, ("float64",), (4, 1, 3), 4),
        # a non-default RoPE base; non-contiguous caches (K/V packed, latents head-major)
        *k(EXACT_THETA, ("float32", "bfloat16"), (10, 33, 2), 40),
        *k(BASE, ("float64", "float32", "bfloat16"), (10, 33, 2), 40, layout="strided"),
        *k(QKN_EXACT, ("float32", "float16"), (10, 33, 2), 40, layout="strided"),
        # long contexts with every RoPE mode and QK-norm: angles past 4K and key scales over many tiles
        *k(EXACT, ("float32",), (4099, 130, 4097), 4099),
        *k(QKN_EXACT, ("float32",), (4097, 4099, 101), 4099),
        *k(ALIGNED_QKN, ("bfloat16",), (4099, 7, 4098), 4099),
        *k(LATENT, ("float16",), (4099, 4096, 33), 4099),
        # batches that change a kernel's split count (pick_launch): 16 and 64 sequences
        *k(BASE, ("float32",), tuple((7 * i + 3) % 49 for i in range(16)), 48, seed=2),
        *k(EXACT, ("bfloat16",), tuple((11 * i + 5) % 25 for i in range(64)), 24, seed=3),
        # heads wider than 128 (another register tiling)
        *k(AttentionSpec.lrkv(2, 256, 16, d_model=PAPER_KERNEL_D_MODEL), ("bfloat16",), (37, 100, 1), 100),
        *k(AttentionSpec.lrkv(3, 192, 24, rope="exact", d_model=PAPER_KERNEL_D_MODEL), ("float16",), (9, 64), 64),
    ]


def _layer_cases() -> list[Case]:
    paper = PAPER_SCALES["128M"]
    paper_exact = AttentionSpec.lrkv(paper.n_heads, paper.head_dim, paper.rank, d_model=paper.d_model, rope="exact")
    return [
        *_cases("layer", BASE, ("float32", "bfloat16", "float16"), (1, 6, 11), 12),
        *_cases("layer", QKN_EXACT, ("float64", "bfloat16"), (3, 8, 5), 10),
        *_cases("layer", LATENT, ("float64",), (2, 9, 4), 12),
        *_cases("layer", ALIGNED_QKN, ("float32",), (5, 12, 1), 12),
        *_cases("layer", ALIGNED_QKN_THETA, ("float32", "bfloat16"), (5, 12, 1), 12),
        *_cases("layer", paper_exact, ("bfloat16",), (9, 20), 24),  # the 128M layer, d = 768
    ]


def _model_cases() -> list[Case]:
    m = lambda spec, dtypes, **kw: _cases("layer-model", spec, dtypes, (8, 8, 8), 8, **kw)  # noqa: E731
    return [
        *m(BASE, ("float32", "bfloat16", "float16")),
        *m(QKN_EXACT, ("float64", "bfloat16")),
        *m(ALIGNED_QKN, ("float32",)),
        *m(EXACT_THETA, ("float64", "bfloat16")),
        # the paper's latent RoPE (Sec. 3) is not the model: recorded as an expected difference
        *m(LATENT, ("float64",), expect="differ"),
    ]


# ----------------------------------------------------------------------------- pairwise
# Paged decode and extend cases come from an all-pairs covering array (pairs.py) over the
# levels' features, under the contract's constraints (a Case that cannot exist is never
# drawn): every pair of values — page size 7 with rope='none', a shared prefix with float16,
# NaN pages with an in-order pool — meets in at least one case, so a kernel that declines one
# value still faces every other. The hand-picked cases after each array keep their reason.
PAGED_MODES = {"none": {}, "exact": {"rope": "exact"}, "aligned": {"rope": "aligned"}, "latent": {"rope": "latent"},
               "qkn": {"qk_norm": True}, "qkn-exact": {"rope": "exact", "qk_norm": True},
               "aligned-qkn": {"rope": "aligned", "qk_norm": True},
               "exact-theta": {"rope": "exact", "rope_theta": LONG_THETA}}
# (H, d_h, r): the BASE shape; odd heads, odd rank, d_h 128; one head, rank 1, d_h 16; d_h 256;
# the paper's 2.5B head count and rank (H = 18, r = 55) at d_h = 64 (the Triton interpreter
# runs one program per head and query: this keeps the grid within its CPU budget)
PAGED_SHAPES = ((4, 32, 6), (5, 128, 7), (1, 16, 1), (2, 256, 16), (18, 64, 55))
FP8_FORMATS = ("float8_e4m3fn", "float8_e5m2")
FP8_SCALES = ("per_tensor", "per_head", "per_token", "per_token_head")
# the cache as two dimensions of the array — its format (at τ: "none") and its scales' granularity —
# so that every format meets every granularity, dtype (e4m3 with float32 queries), page size
# (per-token scales on pages > 1) and garbage (NaN and finite scales in unused pages); a cache at
# τ has no scales and takes the first granularity only (`_fp8_of`)
FP8_DIMENSIONS = {"cache": ("none", *FP8_FORMATS), "scales": FP8_SCALES}
PAGE_SIZES = (1, 5, 7, 16)  # one slot; primes not dividing T_max (no shift-and-mask); a whole tile
PAGE_ORDERS = ("NHD", "HND")  # the latents' stride order in the pages (vLLM's get_kv_cache_stride_order)
POOL_VIEWS = VIEWS  # the parts dense, or views of a larger allocation as servers keep them (pool_views.py)
BIG_POOL = 4096  # unused pages below the used ones: page indices near the end of a pool of thousands
PAGED_T = 48


def _paged_spec(row: dict) -> AttentionSpec:
    return _spec_of(row["shape"], row["mode"])


@functools.cache
def _spec_of(shape: tuple[int, int, int], mode: str) -> AttentionSpec:
    """Cached: the all-pairs search builds a row's case ~10^5 times while it looks for valid rows."""
    H, d_h, r = shape
    return AttentionSpec.lrkv(H, d_h, r, d_model=max(H * d_h // 2, 16), **PAGED_MODES[mode])


@functools.cache
def _pairwise_rows(params: tuple[tuple[str, tuple], ...], make) -> tuple[Case, ...]:
    """The all-pairs array's cases (computed once per process)."""
    def valid(row: dict) -> bool:
        try:
            make(row)
        except ValueError:
            return False
        return True

    return tuple(make(row) for row in all_pairs(dict(params), valid))


def _pairwise(params: dict[str, tuple], make) -> list[Case]:
    """One case per row of an all-pairs array over params; make(row) -> Case (ValueError: not a case)."""
    return list(_pairwise_rows(tuple(params.items()), make))


def _paged_lengths(kind: str, page: int) -> tuple[int, ...]:
    if kind == "boundary":  # ends exactly on pages, an empty sequence, one token
        return (min(2 * page, PAGED_T), min(3 * page + 1, PAGED_T - 1), 1, 0)
    if kind == "full":  # a sequence filling T_max
        return (PAGED_T, 31, 17)
    if kind == "single":
        return (29,)
    return tuple((7 * i + 3) % (PAGED_T + 1) for i in range(16))  # 16 sequences (split count changes)


def _paged_case(row: dict) -> Case:
    page, lengths = row["page"], _paged_lengths(row["lengths"], row["page"])
    prefix = 0
    if row["prefix"]:  # sequences 0 and 1 share whole pages: as many as both lengths allow, at least one
        prefix = (min(lengths[:2]) // page) * page
        if prefix < page:
            raise ValueError("no whole page to share")
        prefix = min(prefix, 2 * page) if page > 1 else min(prefix, 9)
    adv = row["adversarial"]
    return Case("kernel-paged", _paged_spec(row), row["dtype"], lengths, PAGED_T,
                pages=Paged(page, row["shuffle"], prefix, hnd=row["order"] == "HND", view=row["view"]),
                nan_garbage=row["garbage"] == "nan",
                q_scale=100.0 if adv == "q100" else 1.0, near_cancel=adv == "cancel",
                splits=5 if adv == "splits5" else 0, seed=sum(map(ord, row["mode"])) % 7, **_fp8_of(row))


def _fp8_of(row: dict) -> dict:
    """The row's cache: at τ ("none"), or an fp8 format with a scale granularity (with outliers
    at per_tensor and per_token)."""
    fmt, granularity = row["cache"], row["scales"]
    if fmt == "none":
        if granularity != FP8_SCALES[0]:  # one row per τ-cache pair, not four alike
            raise ValueError("a cache at τ has no scales")
        return {}
    # outlier tokens and channels beside the two granularities a calibration reads them with
    return {"fp8": Fp8(fmt, granularity, outliers=granularity in ("per_tensor", "per_token"))}


# the paged array's dimensions (tests/verify/test_pairs.py checks which pairs it leaves out)
PAGED_PARAMS = {"mode": tuple(PAGED_MODES), "shape": PAGED_SHAPES, "dtype": ALL, "page": PAGE_SIZES,
                "lengths": ("boundary", "full", "batch16", "single"), "prefix": (True, False),
                "shuffle": (True, False), "garbage": ("nan", "finite"),
                "adversarial": ("none", "q100", "cancel", "splits5"), "order": PAGE_ORDERS, "view": POOL_VIEWS,
                **FP8_DIMENSIONS}


def _paged_cases() -> list[Case]:
    cases = _pairwise(PAGED_PARAMS, _paged_case)
    return cases + [
        # a long paged context with exact RoPE and QK-norm (every page table entry of a 4K sequence)
        Case("kernel-paged", QKN_EXACT, "float32", (4099, 130, 4097), 4099, pages=Paged(16, shared_prefix=128)),
        # rank 0 (pure shared) and r = d_h, which the array's shapes leave out
        Case("kernel-paged", AttentionSpec.lrkv(4, 32, 0), "bfloat16", (16, 33, 1, 0), 40,
             pages=Paged(16, shared_prefix=16)),
        Case("kernel-paged", AttentionSpec.lrkv(2, 16, 16, rope="exact"), "float32", (9, 40, 23), 40, pages=Paged(5)),
        # a pool of thousands of pages, the used ones at its end, head-major, with an empty sequence
        Case("kernel-paged", QKN, "float32", (9, 20, 1, 0), 24, pages=Paged(4, hnd=True, pool=BIG_POOL), seed=4),
        # a page size that divides nothing, sequences 0 and 1 sharing two pages (the original hand-picked case)
        *_cases("kernel-paged", EXACT, ("float64", "bfloat16"), (37, 21, 14), 40, pages=Paged(7, shared_prefix=14)),
    ]


EXTEND_LENGTHS = {  # valid lengths (the new tokens included) per kind and page size
    "ragged": (33, 16, 1, 12, 0), "batch16": tuple(1 + (3 * i) % 11 for i in range(16)), "single": (26,)}
EXTEND_NEW = {  # new tokens per sequence before clipping to its length
    "mixed": (12, 1, 1, 5, 0), "decode": (1,) * 16, "prefill": (99,) * 16, "spec": (3, 7, 2, 8, 4) * 4}


def _extend_case(row: dict) -> Case:
    page, lengths = row["page"], EXTEND_LENGTHS[row["lengths"]]
    n_new = tuple(min(n, L) for n, L in zip(EXTEND_NEW[row["n_new"]], lengths))  # prefill: n_b = length
    prefix = 0
    if row["prefix"]:
        if page == 0 or len(lengths) < 2:
            raise ValueError("a shared prefix needs pages and two sequences")
        prefix = (min(n - k for n, k in zip(lengths[:2], n_new[:2])) // page) * page  # shared: cached, not new
        if prefix < page:
            raise ValueError("no whole cached page to share")
    if page == 0 and not row["shuffle"]:
        raise ValueError("a contiguous cache has no page order")
    return Case("kernel-extend", _paged_spec(row), row["dtype"], lengths, 40, extend=Extend(n_new),
                pages=Paged(page, row["shuffle"] or page == 0, prefix, hnd=row["order"] == "HND", view=row["view"]),
                nan_garbage=row["garbage"] == "nan", seed=sum(map(ord, row["mode"])) % 5, **_fp8_of(row))


def _extend_cases() -> list[Case]:
    cases = _pairwise({"mode": tuple(PAGED_MODES), "shape": PAGED_SHAPES, "dtype": ALL, "page": (0, 1, 5, 16),
                       "n_new": ("mixed", "decode", "prefill", "spec"), "lengths": tuple(EXTEND_LENGTHS),
                       "prefix": (True, False), "shuffle": (True, False), "garbage": ("nan", "finite"),
                       "order": PAGE_ORDERS, "view": POOL_VIEWS, **FP8_DIMENSIONS}, _extend_case)
    e = lambda *a, **kw: _cases("kernel-extend", *a, **kw)  # noqa: E731
    return cases + [
        # one ragged batch with a 66-token chunked-prefill chunk; without the per-tile RoPE of
        # 'exact' (the Triton interpreter runs one program per query token)
        *e(ALIGNED_QKN, ("bfloat16",), (70, 9, 5, 12), 72, extend=Extend((66, 1, 5, 0))),
        # rank 0 (pure shared) and r = d_h, which the array's shapes leave out
        *e(AttentionSpec.lrkv(4, 32, 0), ("float16",), (17, 40, 1), 41, extend=Extend((3, 7, 1)), pages=Paged(5)),
        *e(AttentionSpec.lrkv(2, 16, 16, qk_norm=True), ("float32",), (9, 12), 12, extend=Extend((4, 8))),
        # one slot per page at the end of a pool of thousands
        *e(BASE, ("bfloat16",), (13, 6, 1), 16, extend=Extend((5, 6, 1)), pages=Paged(1, pool=BIG_POOL)),
        # exact RoPE with a 20-token chunk in float64
        *e(QKN_EXACT, ("float64",), (24, 9, 5, 12), 24, extend=Extend((20, 1, 5, 0))),
    ]


def _fp8_cases() -> list[Case]:
    """FP8 caches at the kernel level and the layer step (DESIGN §4 "FP8 caches"): at the kernel
    level every format with every granularity, the layer each format and each granularity once
    (the paged and extend levels draw theirs in their all-pairs arrays: FP8_DIMENSIONS).
    The parts and heads have different ranges (levels/fp8_inputs.py: a swapped or dropped
    scale shows), half the cases carry outlier tokens and channels, unused slots hold the
    format's NaN pattern (once saturated finite junk), paged caches share pages. BASE's
    shape with B = 3 (inductor and the example backends, which read no fp8, run their
    twins at the cache's dtype: no new compile)."""
    kernel = [Case("kernel", spec, dt, lengths, 40, nan_garbage=i != 5, seed=i,
                   fp8=Fp8(FP8_FORMATS[i % 2], FP8_SCALES[i // 2 % 4], outliers=i % 2 == 1))
              for i, (spec, dt, lengths) in enumerate((
                  (BASE, "bfloat16", (10, 33, 2)), (BASE, "float16", (0, 40, 17)),
                  (EXACT, "bfloat16", (10, 33, 2)), (BASE, "float32", (25, 1, 40)),
                  (QKN, "float16", (10, 33, 2)), (BASE, "bfloat16", (11, 4, 39)),
                  (QKN_EXACT, "bfloat16", (10, 33, 2)), (BASE, "float16", (40, 29, 13))))]
    # the layer step also quantizes the token it appends (outliers: beyond the static scales)
    layer = [Case("layer", spec, dt, (1, 6, 11), 12, seed=i, fp8=Fp8(FP8_FORMATS[i % 2], FP8_SCALES[i], i % 2 == 0))
             for i, (spec, dt) in enumerate(((BASE, "bfloat16"), (EXACT, "float16"), (QKN, "bfloat16"),
                                             (BASE, "float32")))]
    # FA3-style fp8 compute (err_base's path also rounds q and/or the weights to e4m3; the
    # oracle stays exact): q and the weights, the weights only (paged), q only (extend)
    compute = [
        Case("kernel", BASE, "bfloat16", (10, 33, 2), 40, seed=8, fp8=Fp8(FP8_FORMATS[0], "per_head", True, "qp")),
        Case("kernel-paged", QKN, "float16", (37, 21, 14), 40, pages=Paged(7, shared_prefix=14), seed=9,
             fp8=Fp8(FP8_FORMATS[1], "per_token", compute="p")),
        Case("kernel-extend", EXACT, "bfloat16", (33, 16, 1, 12), 40, extend=Extend((12, 1, 1, 5)),
             pages=Paged(5, shared_prefix=5), seed=10, fp8=Fp8(FP8_FORMATS[0], "per_token_head", compute="q")),
    ]
    return kernel + layer + compute


def default_grid() -> list[Case]:
    """Every case `lrkv verify` runs by default (the fp8 cases last: the earlier cases keep
    their positions, so their server-property shares do not move)."""
    return _kernel_cases() + _layer_cases() + _model_cases() + _paged_cases() + _extend_cases() + _fp8_cases()


QUICK_FIXED_COST = 1.0  # a case's cost beyond its cache (drawing, the oracle, a call): many tiny cases are not free
QUICK_CACHE_UNIT = 1 << 16  # cached elements (slots x heads x (d_h + r)) costing as much as one case's fixed cost


def quick_cost(case: Case) -> float:
    """A case's relative run time, for choosing the quick grid: a fixed cost per case plus its
    cache's size (allocated slots × heads × (d_h + r)), so small T and few heads are cheap."""
    s = case.spec
    return QUICK_FIXED_COST + case.batch * case.t_max * s.n_heads * (s.head_dim + s.rank) / QUICK_CACHE_UNIT


def covered_pairs(case: Case) -> frozenset[tuple[str, str]]:
    """(level, feature) pairs the case exercises: a feature is covered per level (coverage.py)."""
    from .features import case_features  # features imports the options only; grids is imported earlier

    # an expected difference (latent RoPE vs the model) is no feature, but a backend must reproduce it too
    differ = {"expect=differ"} if case.expect == "differ" else set()
    return frozenset((case.level, f) for f in case_features(case) | differ)


def cover(cases: list[Case], cost=quick_cost) -> list[Case]:
    """A small subset of `cases` that exercises every (level, feature) pair they exercise:
    the greedy weighted set cover (most new pairs per unit of cost first; ties to the earlier
    case, so the choice is deterministic), then every chosen case that the others make
    redundant dropped, the costliest first. The subset keeps the order of `cases`."""
    feats = [covered_pairs(c) for c in cases]
    left = set().union(*feats)
    chosen: list[int] = []
    while left:
        best = max(range(len(cases)), key=lambda i: (len(feats[i] & left) / cost(cases[i]), -i))
        chosen.append(best)
        left -= feats[best]
    for i in sorted(chosen, key=lambda i: (-cost(cases[i]), -i)):  # greedy picks early ones the later ones cover
        others = set().union(*(feats[j] for j in chosen if j != i))
        if feats[i] <= others:
            chosen.remove(i)
    return [cases[i] for i in sorted(chosen)]


@functools.cache
def _quick_cases() -> tuple[Case, ...]:
    """The quick grid, computed once per process (the default grid and a cover of it: under a second)."""
    return tuple(cover(default_grid()))


def quick_grid() -> list[Case]:
    """The smoke grid (`lrkv init`'s pytest file, the plugin's default): a small subset of the
    default grid that exercises every feature the default grid does at every level — page
    sizes, head-major and token-major pools, empty sequences (vLLM's null block), full and
    partial last pages, pools of thousands of pages, every fp8 format × granularity, long
    contexts with each RoPE mode — chosen by `cover` (deterministic: the same cases at every
    call). tests/verify/test_quick_grid.py holds its coverage equal to the default grid's,
    per level and per backend. 61 of the default grid's 220 cases; `lrkv init`'s test file on
    its starter (kernel, kernel-paged) took 9 s on 2 cores, up to 108 s when other jobs shared
    them (docs/testing.md)."""
    return list(_quick_cases())


def mutant_grid() -> list[Case]:
    """Small cases that every deliberately broken backend must fail on at least one of
    (tiles smaller than T, NaN garbage, distinct heads, r < d_h, one long float16 case, a
    non-default RoPE base and a non-contiguous cache; shuffled pages and ragged chunks with
    exact RoPE for the paged and extend mutants)."""
    s = AttentionSpec.lrkv(3, 16, 5)
    s_exact = AttentionSpec.lrkv(3, 16, 5, rope="exact")
    return [
        Case("kernel", s, "float64", (9, 40, 23), 48, tile=8, splits=2),
        Case("kernel", s, "float32", (9, 40, 23), 48, tile=8, splits=2, seed=1),
        Case("kernel", AttentionSpec.lrkv(3, 16, 5, rope="exact"), "float64", (5, 1, 8), 10, tile=4),
        Case("kernel", AttentionSpec.lrkv(2, 16, 4), "float16", (4099, 3001), 4099),
        Case("kernel", AttentionSpec.lrkv(3, 16, 4, rope="exact", rope_theta=LONG_THETA), "float64", (9, 30), 32),
        Case("kernel", s, "float32", (9, 40, 23), 48, layout="strided", seed=2),
        Case("kernel-paged", s, "float64", (9, 40, 23), 48, pages=Paged(8)),
        Case("kernel-paged", s_exact, "float32", (16, 33, 7), 40, pages=Paged(16), seed=1),
        Case("kernel-extend", s_exact, "float64", (12, 40, 23), 48, extend=Extend((6, 3, 1))),
        Case("kernel-extend", s, "float32", (9, 20, 16), 24, extend=Extend((2, 8, 0)), pages=Paged(4), seed=1),
    ]


def tp_grid(tp: int) -> list[Case]:
    """Tiny `tp` cases for P ranks: an even head split, an uneven one (2P + 1 heads),
    RoPE + QK-RMSNorm (key_scale sharded with the heads), and the low precisions."""
    even, uneven = AttentionSpec.lrkv(2 * tp, 16, 4), AttentionSpec.lrkv(2 * tp + 1, 16, 3)
    qkn = AttentionSpec.lrkv(2 * tp, 16, 4, rope="exact", qk_norm=True)
    return [
        Case("tp", even, "float64", (5, 5), 5, tp=tp),
        Case("tp", uneven, "float64", (4, 4), 4, seed=1, tp=tp),
        Case("tp", qkn, "float64", (4, 4, 4), 4, seed=2, tp=tp),
        Case("tp", even, "float32", (5, 5), 5, tp=tp),
        Case("tp", uneven, "bfloat16", (4, 4), 4, seed=1, tp=tp),
    ]
