"""The equivalence suite the pytest plugin runs against a backend (`--lrkv-backend mod:attr`).

Every test takes `lrkv_target`, a backend label that the plugin parametrizes from
`--lrkv-backend` (or from a test module's `LRKV_BACKENDS`, which is how this repository's
tests/verify/test_equivalence.py runs the same tests on its built-in backends):

  test_grid_case                the case grid (`--lrkv-grid`, default quick) under the rule
  test_kernel_matches_reference hypothesis: drawn kernel cases under the rule (DESIGN §6)
  test_layer_matches_reference  hypothesis: layer step, and incremental decode vs the model
  test_<property>               hypothesis: the checks of lrkv.testing.properties
  test_server_properties        same buffers, outputs written, inputs untouched, determinism,
                                batch invariance (lrkv.verify.server_properties), one case a level
  test_fp8_cache_matches_reference  hypothesis: drawn kernel cases with an fp8 cache, for a
                                backend that claims `cache_formats` (a skip, with why, otherwise)

The plugin adds this module's tests under `--lrkv-backend`, and the test file `lrkv init` writes
star-imports them (`__all__`, every `test_*` function here), so a new test reaches both.
A failure prints which case failed and where (its failing sequences, heads and positions, and
what they share), then the one-line replay, `lrkv verify --backend <label> --case '<json>'`;
the suite's and lrkv.testing.check's own frames are hidden from the traceback (`__tracebackhide__`).
Each case that met the rule is counted for the plugin's end-of-session summary: a
`--lrkv-backend` that verified none fails the session (lrkv.testing.plugin).
Hypothesis settings come from the `ci` (default) or `dev` profile of lrkv.verify.strategies,
selected by HYPOTHESIS_PROFILE, whatever the surrounding project's own profiles are.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import HealthCheck, assume, given, note, settings
from hypothesis import strategies as st

from ..spec import dtype_name
from ..verify.backend_registry import backend_names
from ..verify.case import Case
from ..verify.runner import repro_command
from ..verify.strategies import PROFILES, cases, lrkv_specs, with_fp8
from . import properties
from .check import NotVerified, check_case, check_server_properties
from .tally import record_declared, record_unavailable, record_verified
from .target import Target, resolve

pytestmark = pytest.mark.equivalence

# Built-ins that take any shape cheaply; every other *registered* backend compiles an engine
# per static shape, so it draws from one fixed family (T, lengths, seeds and flags vary).
FREE_SHAPES = ("reference", "materialized", "eager", "tiled")
COMPILED_EXAMPLES = 6  # inductor: each static family compiles once; examples vary T and data
EXTERNAL_EXAMPLES = 3  # other registered backends (exports, Triton): one family, a few draws
_TARGETS: dict[str, Target] = {}


def load(label: str) -> Target:
    """The backend for a label, once per session (compiled backends keep their engines)."""
    __tracebackhide__ = True
    if label not in _TARGETS:
        try:
            target = resolve(label)
        except (ValueError, TypeError, ImportError) as e:
            pytest.fail(f"--lrkv-backend {label}: cannot load ({e})", pytrace=False)
        _TARGETS[label] = target
    target = _TARGETS[label]
    record_declared(label, getattr(target.backend, "levels", ()))  # each declared level must verify a case
    ok, why = target.backend.available()
    if not ok:
        record_unavailable(label, why)  # the plugin fails a session that verified nothing, naming why
        pytest.skip(f"{label}: unavailable ({why})")
    return target


def _dtypes(target: Target) -> tuple[str, ...]:
    return tuple(dtype_name(t) for t in target.backend.dtypes)


def _needs(target: Target, level: str) -> None:
    if level not in target.backend.levels:
        pytest.skip(f"{target.label} has no {level} level")
    if not _dtypes(target):
        pytest.skip(f"{target.label} declares no dtypes")


def _ropes(level: str):
    # latent RoPE is the paper's claim, not the model: excluded where the model is the reference
    return ("none", "exact", "aligned") if level == "layer-model" else ("none", "exact", "aligned", "latent")


def family(target: Target, level: str, qk_norm=None):
    """(strategy, example cap) for a backend: free shapes for user backends and eager-style
    built-ins, one fixed family per compiled built-in."""
    from ..verify.grids import BASE, QKN_EXACT

    dtypes = _dtypes(target)
    label = target.label
    if label not in backend_names() or label in FREE_SHAPES:
        max_t = 12 if level == "layer-model" else 24  # layer-model costs one step per token
        specs = lrkv_specs(ropes=_ropes(level), qk_norm=qk_norm)
        return cases(level=level, dtypes=dtypes, specs=specs, max_t=max_t), None
    if label == "inductor":  # the default grid's compiled families: (spec, dtype) with B = 3, T >= 2
        pairs = [(s, d) for s, d in ((BASE, "float32"), (QKN_EXACT, "float64")) if qk_norm is None or not s.qk_norm]
        return st.sampled_from(pairs).flatmap(
            lambda sd: cases(level=level, dtypes=(sd[1],), specs=st.just(sd[0]), batch=3, min_t=2, max_t=40)
        ), COMPILED_EXAMPLES
    return cases(level=level, dtypes=dtypes[:1], specs=st.just(BASE), batch=3, min_t=2, max_t=40), EXTERNAL_EXAMPLES


def profile_settings(cap: int | None) -> settings:
    """The lrkv profile named by HYPOTHESIS_PROFILE (ci unless dev), examples capped."""
    kw = dict(PROFILES.get(os.environ.get("HYPOTHESIS_PROFILE", "ci"), PROFILES["ci"]))
    kw["max_examples"] = kw["max_examples"] if cap is None else min(cap, kw["max_examples"])
    kw["suppress_health_check"] = [*kw.get("suppress_health_check", ()), HealthCheck.filter_too_much]
    return settings(**kw)


def check(target: Target, strategy, cap: int | None, body) -> None:
    """Run body(case) as a hypothesis property; cases the backend does not support are rejected."""
    __tracebackhide__ = True

    @profile_settings(cap)
    @given(strategy)
    def prop(case: Case):
        __tracebackhide__ = True
        if hasattr(target.backend, "supports"):
            assume(target.backend.supports(case)[0])
        note(f"replay: {repro_command(target.label, case)}")
        body(case)
        record_verified(target.label, case)  # this example met the rule (a failing one raised)
    prop()


# ----------------------------------------------------------------------------- the grid
def test_grid_case(lrkv_target: str, lrkv_case: Case) -> None:
    """One case of the grid under the rule (DESIGN §6), as `lrkv verify` judges it."""
    __tracebackhide__ = True  # a failure shows check_case's message: the case, where, the replay
    target = load(lrkv_target)
    try:
        check_case(target, lrkv_case)
    except NotVerified as e:  # declined by supports(): a skip with its reason, never a pass
        pytest.skip(f"{target.label}: {e.reason}")
    record_verified(target.label, lrkv_case)


# ----------------------------------------------------------------------------- drawn cases
def test_kernel_matches_reference(lrkv_target: str) -> None:
    __tracebackhide__ = True
    target = load(lrkv_target)
    _needs(target, "kernel")
    strategy, cap = family(target, "kernel")
    check(target, strategy, cap, lambda case: check_case(target, case))


@pytest.mark.parametrize("level", ["layer", "layer-model"])
def test_layer_matches_reference(lrkv_target: str, level: str) -> None:
    """layer: one step vs the reference step; layer-model: incremental decode
    (append-then-decode) vs the training-form forward over the whole sequence."""
    __tracebackhide__ = True
    target = load(lrkv_target)
    _needs(target, "layer")
    strategy, cap = family(target, level)
    check(target, strategy, cap, lambda case: check_case(target, case))


def _property_test(name: str):
    fn, case_level, backend_level = properties.PROPERTIES[name]

    def test(lrkv_target: str) -> None:
        __tracebackhide__ = True
        target = load(lrkv_target)
        _needs(target, backend_level)
        strategy, cap = family(target, case_level)
        check(target, strategy, cap, lambda case: fn(target, case))
    test.__name__ = test.__qualname__ = f"test_{name}"
    test.__doc__ = fn.__doc__
    return test


test_factored_equals_materialized = _property_test("factored_equals_materialized")
test_split_tile_invariance = _property_test("split_tile_invariance")
test_permutation_equivariance = _property_test("permutation_equivariance")
test_garbage_invariance = _property_test("garbage_invariance")
test_append_then_decode_equals_prefill = _property_test("append_then_decode_equals_prefill")


def test_softmax_shift_invariance(lrkv_target: str) -> None:
    """Logits shifted by +40 (after scaling): lse moves by the offset, nothing else changes
    (drawn without QK-norm, where no common offset exists)."""
    __tracebackhide__ = True
    target = load(lrkv_target)
    _needs(target, "kernel")
    strategy, cap = family(target, "kernel", qk_norm=False)
    check(target, strategy, cap, lambda case: properties.softmax_shift_invariance(target, case))


def test_fp8_cache_matches_reference(lrkv_target: str) -> None:
    """Drawn kernel cases with the cache stored in fp8 (both formats, every granularity,
    outliers; DESIGN §4.1) under the rule: dequantize-then-attend at τ is the bar."""
    __tracebackhide__ = True
    from ..verify.protocol import fp8_claims

    target = load(lrkv_target)
    _needs(target, "kernel")
    formats, grans = fp8_claims(target.backend)
    if not formats:
        pytest.skip(f"{target.label} reads no fp8 cache (it names no fp8 cache formats)")
    strategy, cap = family(target, "kernel")
    dtypes = _dtypes(target)
    fp8 = strategy.map(with_fp8).filter(lambda c: c.fp8.format in formats and c.fp8.granularity in grans
                                        and c.dtype in dtypes)
    check(target, fp8, cap, lambda case: check_case(target, case))


def test_server_properties(lrkv_target: str) -> None:
    """How the backend behaves inside a server (DESIGN §7): every required server property holds."""
    __tracebackhide__ = True
    target = load(lrkv_target)
    try:
        check_server_properties(target)
    except NotVerified as e:
        pytest.skip(f"{target.label}: {e.reason}")
    record_verified(target.label)


# what `from lrkv.testing.suite import *` (lrkv init's test file) collects: every test above
__all__ = [name for name in list(globals()) if name.startswith("test_")]
