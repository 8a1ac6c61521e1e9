"""Hypothesis strategies for specs, cases, caches and inputs, and the test profiles.

Profiles (select with HYPOTHESIS_PROFILE; tests/conftest.py loads `ci` by default):
  ci   derandomized, bounded examples, no deadline — the same examples on every run
  dev  many more examples, random — for hunting

Every strategy ends in a `Case`, so a failing example is replayed by one command:
`lrkv verify --backend <name> --case '<case json>'` (see `repro_command`).
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from ..spec import ROPE_MODES, AttentionSpec
from .case import KERNEL_LEVELS, Case, Extend
from .options import extend, paged
from .options.fp8 import with_fp8  # noqa: F401  (the fp8 option's strategy, drawn from a case)
from .levels.kernel import make_kernel_inputs
from .levels.layer import make_layer_inputs
from .runner import repro_command

CI_MAX_EXAMPLES = 15  # per property and backend; the whole `-m equivalence` run must stay in minutes
DEV_MAX_EXAMPLES = 300
PROFILES = {
    "ci": dict(derandomize=True, max_examples=CI_MAX_EXAMPLES, deadline=None, print_blob=False, database=None,
               suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]),
    "dev": dict(max_examples=DEV_MAX_EXAMPLES, deadline=None, print_blob=True,
                suppress_health_check=[HealthCheck.too_slow]),
}
HEAD_DIMS = (2, 3, 4, 8, 16)  # small, odd included (odd only without RoPE)
# RoPE bases: the default and a short one (a kernel that ignores rope_theta and assumes
# 10000 fails on it; 500 turns the low-frequency planes too within a few dozen slots)
ROPE_THETAS = (10000.0, 500.0)
# The rule compares error statistics (max, mean) with those of a baseline path; on a 2-element
# output they are single samples and k = 2 does not bound their ratio. So every drawn case
# has at least this many outputs (B·H·d_h) and lse rows (B·H); B grows to get there.
MIN_OUTPUTS = 16
MIN_ROWS = 4
PAGED_LEVELS = ("kernel-paged", "kernel-extend")
WIDE_BATCH = 20  # paged / extend batches occasionally grow to this many sequences
RARE = (False,) * 7 + (True,)  # "occasionally": about one draw in eight

__all__ = ["ROPE_THETAS", "lrkv_specs", "cases", "paged_cases",
           "kernel_inputs", "layer_inputs", "caches", "paged_inputs",
           "extend_inputs", "register_profiles",
           "load_profile", "repro_command", "PROFILES"]


def register_profiles() -> None:
    for name, kw in PROFILES.items():
        settings.register_profile(name, **kw)


def load_profile(name: str | None = None) -> str:
    name = name or os.environ.get("HYPOTHESIS_PROFILE", "ci")
    settings.load_profile(name)
    return name


@st.composite
def lrkv_specs(draw, *, max_heads: int = 4, head_dims=HEAD_DIMS, ropes=ROPE_MODES, qk_norm=None,
               rope_thetas=ROPE_THETAS) -> AttentionSpec:
    """An LRKV layer: any rank 0..d_h the rope mode allows (latent/aligned need an even rank),
    with a RoPE base drawn from rope_thetas when RoPE is on."""
    H = draw(st.integers(1, max_heads))
    d_h = draw(st.sampled_from(head_dims))
    rope = draw(st.sampled_from(ropes))
    if d_h % 2:
        rope = "none"
    if rope in ("latent", "aligned"):
        r = 2 * draw(st.integers(0, d_h // 2))
    else:
        r = draw(st.integers(0, d_h))
    qkn = draw(st.booleans()) if qk_norm is None else qk_norm
    theta = draw(st.sampled_from(tuple(rope_thetas))) if rope != "none" else ROPE_THETAS[0]
    return AttentionSpec.lrkv(H, d_h, r, rope=rope, qk_norm=qkn, rope_theta=theta)


@st.composite
def cases(draw, *, level: str = "kernel", dtypes=("float64",), specs=None, batch: int | None = None,
          max_batch: int = 3, min_t: int = 1, max_t: int = 24, adversarial: bool = True,
          wide_batch: int = WIDE_BATCH) -> Case:
    """A Case. batch fixes B (compiled backends recompile per batch size); T_max is free
    (min_t = 2 keeps it dynamic for inductor: sizes 0 and 1 are always specialised).
    At the paged and extend levels (`paged_cases`) B is occasionally as large as wide_batch
    (0: never more than max_batch)."""
    spec = draw(specs if specs is not None else lrkv_specs())
    dtype = draw(st.sampled_from(tuple(dtypes)))
    if level in PAGED_LEVELS:
        return draw(paged_cases(level, spec, dtype, batch=batch, max_batch=max_batch, min_t=min_t, max_t=max_t,
                                adversarial=adversarial, wide_batch=wide_batch))
    B = batch if batch is not None else draw(st.integers(1, max_batch))
    if batch is None:
        B = max(B, _min_rows(spec))
    t_max = draw(st.integers(min_t, max_t))
    if level == "layer-model":
        lengths = (t_max,) * B
    else:
        lo = 0 if level in KERNEL_LEVELS else 1
        lengths = tuple(draw(st.lists(st.integers(lo, t_max), min_size=B, max_size=B)))
    kernel_adv = adversarial and level in KERNEL_LEVELS
    return Case(
        level=level, spec=spec, dtype=dtype, lengths=lengths, t_max=t_max,
        seed=draw(st.integers(0, 2**16)),
        nan_garbage=draw(st.sampled_from((True, True, False))) if adversarial else True,
        q_scale=draw(st.sampled_from((1.0, 1.0, 100.0))) if kernel_adv else 1.0,
        near_cancel=draw(st.booleans()) if kernel_adv and not spec.qk_norm else False,
        splits=draw(st.integers(0, 5)), tile=draw(st.integers(0, 9)),
    )


def _min_rows(spec: AttentionSpec) -> int:
    """Query rows (one per sequence at decode, one per new token at extend) for MIN_ROWS / MIN_OUTPUTS."""
    H, d_h = spec.n_heads, spec.head_dim
    return max(1, -(-MIN_ROWS // H), -(-MIN_OUTPUTS // (H * d_h)))


@st.composite
def paged_cases(draw, level: str, spec: AttentionSpec, dtype: str, *, batch: int | None = None,
                max_batch: int = 3, min_t: int = 1, max_t: int = 24, adversarial: bool = True,
                wide_batch: int = WIDE_BATCH) -> Case:
    """A kernel-paged or kernel-extend Case for `spec` at `dtype`, composed from the options'
    draws in an order that old hunt seeds replay.

    Pages (always at kernel-paged, half the time at kernel-extend, else a contiguous cache): a
    size from `options.paged.sizes`; half the time a prefix of whole pages shared by sequences 0
    and 1 (their lengths are then drawn >= one page); order, HND, pool and pool view from
    `options.paged.draw_option`. Lengths: varlen, each often at a boundary
    (`options.paged.lengths`). Batch: 1..max_batch, occasionally max_batch+1..wide_batch.
    Extend: n_b per sequence from `options.extend.new_tokens`; when the new tokens are fewer than
    MIN_ROWS / MIN_OUTPUTS need, whole-length chunks are appended as further sequences (except,
    occasionally, an idle batch: every n_b = 0). Garbage in unused slots and pages: NaN or large
    finite values.
    """
    is_extend = level == "kernel-extend"
    if batch is not None:
        B = batch
    else:
        wide = wide_batch > max_batch and draw(st.sampled_from(RARE))
        B = draw(st.integers(max_batch + 1, wide_batch) if wide else st.integers(1, max_batch))
        if not is_extend:
            B = max(B, _min_rows(spec))
    t_max = draw(st.integers(min_t, max_t))
    page = draw(paged.sizes(t_max)) if level == "kernel-paged" or draw(st.booleans()) else 0
    share = bool(page) and B >= 2 and page <= t_max and draw(st.booleans())
    lengths = [draw(paged.lengths(t_max, page, lo=page if share and b < 2 else 0)) for b in range(B)]
    n_new = [draw(extend.new_tokens(n)) for n in lengths] if is_extend else []
    if is_extend and batch is None and sum(n_new) < _min_rows(spec) and (sum(n_new) or not draw(st.sampled_from(RARE))):
        while sum(n_new) < _min_rows(spec):  # more rows for the rule's statistics: full chunks
            lengths.append(t_max)
            n_new.append(min(t_max, _min_rows(spec) - sum(n_new)))
    shared = paged.draw_prefix(draw, page, lengths) if share else 0
    seed = draw(st.integers(0, 2**16))
    return Case(
        level=level, spec=spec, dtype=dtype, lengths=tuple(lengths), t_max=t_max, seed=seed,
        nan_garbage=draw(st.sampled_from((True, True, False))) if adversarial else True,
        q_scale=draw(st.sampled_from((1.0, 1.0, 100.0))) if adversarial else 1.0,
        near_cancel=draw(st.booleans()) if adversarial and not spec.qk_norm else False,
        splits=0 if is_extend else draw(st.integers(0, 5)), tile=0 if is_extend else draw(st.integers(0, 9)),
        pages=paged.draw_option(draw, page, shared, seed), extend=Extend(tuple(n_new)),
    )


def kernel_inputs(**kw):
    """(case, KernelInputs at the case dtype)."""
    return cases(level="kernel", **kw).map(lambda c: (c, make_kernel_inputs(c)))


def layer_inputs(**kw):
    """(case, LayerInputs): weights, a partly filled NaN-garbage cache, the token to append."""
    return cases(level="layer", **kw).map(lambda c: (c, make_layer_inputs(c)))


def paged_inputs(**kw):
    """(case, PagedInputs): a kernel-paged case and its inputs at the case dtype."""
    from .levels.paged import make_paged_inputs

    return cases(level="kernel-paged", **kw).map(lambda c: (c, make_paged_inputs(c)))


def extend_inputs(**kw):
    """(case, ExtendInputs): a kernel-extend case (ragged n_b, contiguous or paged) and its inputs."""
    from .levels.extend import make_extend_inputs

    return cases(level="kernel-extend", **kw).map(lambda c: (c, make_extend_inputs(c)))


def caches(**kw):
    """Factored caches (lengths, garbage past them) at the case dtype."""
    return layer_inputs(**kw).map(lambda ci: ci[1].cache)
