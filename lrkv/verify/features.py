"""The features of each case level, and which ones a case exercises (DESIGN §8).

A green verdict must say what it covers, not only that no case failed. Every level declares
its features here: what a kernel of that contract can get wrong independently (a page size
that is not a power of two, a page shared by two sequences, a 4K context with RoPE, a batch
of 64, …). A feature is *covered* by a backend when at least one of its passing records
exercises it (lrkv/verify/coverage.py); the gate blocks a backend that leaves a required
feature uncovered (UNCOVERED) or covers less than its baseline.

Two kinds:
  capability  a value of a dimension a backend may legitimately decline (RoPE mode, QK-norm,
              dtype, head dim, rank, head count, layout): `dim` names the dimension. A
              capability the backend declines is listed as "not supported by the backend",
              never hidden, and excuses the features that `need` it.
  feature     everything else (paging, lengths, batch sizes, adversarial inputs): a backend
              cannot decline these — a declined case is re-run at its twin (twins.py), which
              keeps them — so they are required wherever the grid exercises them.

`case_features(case)` is a pure function of the Case, so the gate recomputes coverage from
the records' cases and never trusts a coverage table it is given.
"""

from __future__ import annotations

from . import options
from .case import FP8_LEVELS, KERNEL_LEVELS, Case
from .options import Feature  # noqa: F401  (the record type every level's features are listed in)

PAPER_RANKS = frozenset({46, 51, 55, 54})  # Table 7: 128M, 1.2B, 2.5B, 6.3B
LONG_T = 4096  # a context at least this long is "long" (split-K and RoPE angles change regime)
BIG_BATCH, HUGE_BATCH = 16, 64  # kernels switch split counts on batch size (kernels/launch.py pick_launch)
WIDE_HEAD = 128  # head_dim above this: register tiling changes (Triton kernels often require <= 128)
# the capability dimensions a twin may change, in its order of preference (twins.py)
CAPABILITY_DIMS = ("layout", "rope", "qk_norm", "dtype", *options.fp8.DIMS, "head_dim", "rank", "n_heads", *options.paged.DIMS)


ALL_KERNEL = KERNEL_LEVELS
LAYERS = ("layer", "layer-model")
EVERY = (*KERNEL_LEVELS, "layer", "layer-model", "tp")
FP8 = FP8_LEVELS  # where a case can carry an fp8 cache


def _capabilities() -> list[Feature]:
    feats = []
    for mode, levels in (("none", (*ALL_KERNEL, *LAYERS)), ("exact", (*ALL_KERNEL, *LAYERS)),
                         ("aligned", (*ALL_KERNEL, *LAYERS)), ("latent", (*ALL_KERNEL, "layer"))):
        feats.append(Feature(f"rope={mode}", levels, lambda c, m=mode: c.spec.rope == m,
                             f"keys rotated as {mode!r} RoPE", dim="rope"))
    feats.append(Feature("qk_norm", EVERY, lambda c: c.spec.qk_norm, "QK-RMSNorm's per-key scale", dim="qk_norm"))
    for dt in ("float64", "float32", "bfloat16", "float16"):
        feats.append(Feature(f"dtype={dt}", EVERY, lambda c, d=dt: c.dtype == d, f"inputs at {dt}", dim="dtype"))
    shape = ALL_KERNEL  # the layer levels run the kernel's shapes through projections: not a new dimension
    feats += [
        Feature("head_dim<64", shape, lambda c: c.spec.head_dim < 64, "narrow heads (16, 32)", dim="head_dim"),
        Feature("head_dim=64", shape, lambda c: c.spec.head_dim == 64, "the common 64-wide head", dim="head_dim"),
        Feature("head_dim=128", shape, lambda c: c.spec.head_dim == 128, "the paper's d_h = 128", dim="head_dim"),
        Feature(f"head_dim>{WIDE_HEAD}", shape, lambda c: c.spec.head_dim > WIDE_HEAD,
                "heads wider than 128 (192, 256): another register tiling", dim="head_dim"),
        Feature("rank=0", shape, lambda c: c.spec.rank == 0, "no private residual (pure shared)", dim="rank"),
        Feature("rank=1", shape, lambda c: c.spec.rank == 1, "a rank-1 residual", dim="rank"),
        Feature("rank odd", shape, lambda c: c.spec.rank > 1 and c.spec.rank % 2 == 1,
                "an odd rank (no vector width divides it)", dim="rank"),
        Feature("rank paper", shape, lambda c: c.spec.rank in PAPER_RANKS, "the paper's ranks 46/51/55/54 (Table 7)",
                dim="rank"),
        Feature("rank=head_dim", shape, lambda c: c.spec.rank == c.spec.head_dim, "r = d_h (full-rank residual)",
                dim="rank"),
        Feature("heads=1", shape, lambda c: c.spec.n_heads == 1, "a single head", dim="n_heads"),
        Feature("heads odd", shape, lambda c: c.spec.n_heads > 1 and c.spec.n_heads % 2 == 1,
                "an odd head count", dim="n_heads"),
        Feature("heads>=16", shape, lambda c: c.spec.n_heads >= 16, "many heads (the paper's 18)", dim="n_heads"),
        Feature("layout=strided", ("kernel",), lambda c: c.layout == "strided",
                "non-contiguous caches (K/V packed, latents head-major)", dim="layout"),
    ]
    return feats + options.fp8.capabilities()


def _kernel_features() -> list[Feature]:
    long = lambda c: c.t_max >= LONG_T and max(c.lengths) >= LONG_T  # noqa: E731
    feats = [
        Feature("length=0", ALL_KERNEL, lambda c: 0 in c.lengths, "an empty sequence: out 0, lse −inf"),
        Feature("length=1", ALL_KERNEL, lambda c: 1 in c.lengths, "a single cached token"),
        Feature("length=t_max", ALL_KERNEL, lambda c: c.t_max in c.lengths, "a sequence filling its allocation"),
        Feature("varlen", ALL_KERNEL, lambda c: len(set(c.lengths)) > 1, "sequences of different lengths"),
        Feature("batch=1", ALL_KERNEL, lambda c: c.batch == 1, "a batch of one"),
        Feature(f"batch>={BIG_BATCH}", ALL_KERNEL, lambda c: c.batch >= BIG_BATCH,
                "a batch large enough to change the split count"),
        Feature(f"batch>={HUGE_BATCH}", ("kernel",), lambda c: c.batch >= HUGE_BATCH,
                "a batch filling the SMs without split-K"),
        Feature("long", ALL_KERNEL[:2], long, f"a context of at least {LONG_T} tokens"),
        Feature("garbage=nan", ALL_KERNEL, lambda c: c.nan_garbage, "NaN in every unused slot or page"),
        Feature("garbage=finite", ALL_KERNEL, lambda c: not c.nan_garbage, "large finite values in unused slots"),
        Feature("q×100", ALL_KERNEL[:2], lambda c: c.q_scale >= 100.0, "queries ×100 (logits far apart)"),
        Feature("near_cancel", ALL_KERNEL[:2], lambda c: c.near_cancel, "shared and private keys nearly cancelling"),
        Feature("outliers", FP8, lambda c: bool(c.fp8 and c.fp8.outliers),
                "outlier tokens and channels (what fp8 scales meet)"),
        Feature("splits not dividing T", ALL_KERNEL[:2], lambda c: c.splits > 0 and c.t_max % c.splits != 0,
                "a split-K count that does not divide the cache"),
        # a non-default RoPE base reaches a kernel only through exact RoPE (aligned/latent are
        # the cache's values); a layer applies every mode itself
        Feature("exact rope_theta≠10000", ALL_KERNEL, lambda c: c.spec.rope == "exact" and c.spec.rope_theta != 10000.0,
                "a non-default RoPE base (a kernel that ignores it fails)", needs=("rope=exact",)),
        Feature("rope_theta≠10000", LAYERS, lambda c: c.spec.rope != "none" and c.spec.rope_theta != 10000.0,
                "a non-default RoPE base (a layer that ignores it fails)",
                needs=("rope=exact", "rope=aligned", "rope=latent")),
    ]
    for mode, levels in (("exact", ALL_KERNEL[:2]), ("aligned", ("kernel",)), ("latent", ("kernel",))):
        # aligned and latent RoPE reach a kernel only through the cache's values (the decode
        # contract's rope is 'exact' or None), so the paged level needs only exact RoPE long
        feats.append(Feature(f"long+rope={mode}", levels, lambda c, m=mode: long(c) and c.spec.rope == m,
                             f"{mode!r} RoPE past {LONG_T} tokens (large angles)", needs=(f"rope={mode}",)))
    feats.append(Feature("long+qk_norm", ALL_KERNEL[:2], lambda c: long(c) and c.spec.qk_norm,
                         f"QK-norm past {LONG_T} tokens", needs=("qk_norm",)))
    return feats


def _layer_features() -> list[Feature]:
    return [
        Feature("first token", ("layer",), lambda c: 1 in c.lengths, "a token appended to an empty cache"),
        Feature("varlen steps", ("layer",), lambda c: len(set(c.lengths)) > 1, "sequences at different positions"),
        Feature("uneven head split", ("tp",), lambda c: c.spec.n_heads % c.tp != 0, "heads not divisible by ranks"),
    ]


FEATURES: tuple[Feature, ...] = (*_capabilities(), *_kernel_features(), *options.paged.features(),
                                 *options.extend.features(),
                                 *_layer_features())
BY_NAME: dict[str, Feature] = {f.name: f for f in FEATURES}
assert len(BY_NAME) == len(FEATURES), "feature names must be unique"


def level_features(level: str) -> tuple[Feature, ...]:
    """The features a level declares, in catalogue order."""
    return tuple(f for f in FEATURES if level in f.levels)


def case_features(case: Case) -> frozenset[str]:
    """The names of the features this case exercises at its level."""
    return frozenset(f.name for f in level_features(case.level) if f.test(case))


def check_feature_names(names, where: str) -> list[str]:
    """`names` as a list of known feature names (ValueError naming the unknown ones)."""
    if isinstance(names, (str, bytes)) or not isinstance(names, (list, tuple)):
        raise ValueError(f"{where} must be a list of feature names, got {type(names).__name__}")
    bad = [n for n in names if not isinstance(n, str) or n not in BY_NAME]
    if bad:
        raise ValueError(f"{where}: unknown features {bad[:5]}; known: lrkv/verify/features.py (e.g. "
                         f"{', '.join(list(BY_NAME)[:4])}, …)")
    return list(names)
