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
from .case import KERNEL_LEVELS, Case
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

__all__ = ["ROPE_THETAS", "lrkv_specs", "cases", "kernel_inputs", "layer_inputs", "caches", "paged_inputs",
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
          max_batch: int = 3, min_t: int = 1, max_t: int = 24, adversarial: bool = True) -> Case:
    """A Case. batch fixes B (compiled backends recompile per batch size); T_max is free
    (min_t = 2 keeps it dynamic for inductor: sizes 0 and 1 are always specialised)."""
    spec = draw(specs if specs is not None else lrkv_specs())
    dtype = draw(st.sampled_from(tuple(dtypes)))
    B = batch if batch is not None else draw(st.integers(1, max_batch))
    if batch is None:
        H, d_h = spec.n_heads, spec.head_dim
        B = max(B, -(-MIN_ROWS // H), -(-MIN_OUTPUTS // (H * d_h)))
    t_max = draw(st.integers(min_t, max_t))
    if level == "layer-model":
        lengths = (t_max,) * B
    else:
        lo = 0 if level in KERNEL_LEVELS else 1
        lengths = tuple(draw(st.lists(st.integers(lo, t_max), min_size=B, max_size=B)))
    kernel_adv = adversarial and level in KERNEL_LEVELS
    extend = level == "kernel-extend"
    return Case(
        level=level, spec=spec, dtype=dtype, lengths=lengths, t_max=t_max,
        seed=draw(st.integers(0, 2**16)),
        nan_garbage=draw(st.sampled_from((True, True, False))) if adversarial else True,
        q_scale=draw(st.sampled_from((1.0, 1.0, 100.0))) if kernel_adv else 1.0,
        near_cancel=draw(st.booleans()) if kernel_adv and not spec.qk_norm else False,
        splits=0 if extend else draw(st.integers(0, 5)), tile=0 if extend else draw(st.integers(0, 9)),
        **(draw(_pages(level, lengths, t_max)) if level in ("kernel-paged", "kernel-extend") else {}),
    )


@st.composite
def _pages(draw, level: str, lengths: tuple[int, ...], t_max: int) -> dict:
    """The paged / extend fields: a page size (1, small, one not dividing T_max, or all of it),
    shuffled or in-order pages, a shared prefix of whole pages, and n_b of 0, 1, a few, or all."""
    out = {}
    if level == "kernel-paged" or draw(st.booleans()):  # extend: contiguous or paged
        page = draw(st.sampled_from((1, 2, 3, 5, 16, t_max)))
        out.update(page_size=page, page_shuffle=draw(st.sampled_from((True, True, False))))
        shareable = min(lengths[:2]) // page if len(lengths) >= 2 else 0
        if shareable and draw(st.booleans()):
            out["shared_prefix"] = page * draw(st.integers(1, shareable))
    if level == "kernel-extend":
        out["n_new"] = tuple(draw(st.sampled_from(sorted({0, min(1, n), min(3, n), n}))) for n in lengths)
    return out


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
