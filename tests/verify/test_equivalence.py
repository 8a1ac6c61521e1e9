"""Equivalence of every built-in decode backend against the float64 oracle — through the same
pytest plugin and suite a user runs on their own backend (`pytest --lrkv-backend mod:attr`).

The suite's tests (lrkv.testing.suite: the quick case grid, drawn cases under the rule, and
the properties of lrkv.testing.properties) are imported here and the plugin parametrizes
them over LRKV_BACKENDS. A failing example prints the one-line replay,
`lrkv verify --backend <name> --case '<json>'`.

Backends: the built-ins (reference, materialized, eager, inductor, tiled) and the example
user backend. Other registered backends (triton, onnxruntime, aoti, tensorrt) build engines
that cost tens of seconds each and have their own suites (tests/kernels/,
tests/compiled/); add them here with LRKV_EQUIVALENCE_BACKENDS=all (or a comma list
of names / module:attr paths), or run `pytest --lrkv-backend triton -m equivalence`.
"""

from __future__ import annotations

import os

import pytest
from hypothesis import given, note, settings

from lrkv.reference.lrkv import decode_attention, materialized_decode_attention
from lrkv.testing.properties import oracle_bounds, softmax_shift_invariance
from lrkv.testing.suite import check, family, load
from lrkv.testing.suite import (test_append_then_decode_equals_prefill, test_factored_equals_materialized,  # noqa: F401
                                test_fp8_cache_matches_reference, test_garbage_invariance, test_grid_case,
                                test_kernel_matches_reference,
                                test_layer_matches_reference, test_permutation_equivariance,
                                test_split_tile_invariance)
from lrkv.testing import check_case
from lrkv.verify.backend_registry import backend_names
from lrkv.verify.case import Case
from lrkv.verify.levels.kernel import make_kernel_inputs
from lrkv.verify.grids import BASE
from lrkv.verify.metrics import error_metrics
from lrkv.verify.runner import repro_command
from lrkv.verify.strategies import cases, lrkv_specs
from lrkv.verify.tolerance import load_policy

pytestmark = pytest.mark.equivalence

EXAMPLE = "examples.my_backend:backend"
BUILTIN = ("reference", "materialized", "eager", "tiled", EXAMPLE, "inductor")
F64_C = load_policy().resolve("reference", "float64").float64_c


def _selected() -> tuple[str, ...]:
    extra = os.environ.get("LRKV_EQUIVALENCE_BACKENDS", "").strip()
    if not extra:
        return BUILTIN
    more = backend_names() if extra == "all" else [x.strip() for x in extra.split(",") if x.strip()]
    return tuple(dict.fromkeys((*BUILTIN, *more)))


LRKV_BACKENDS = _selected()  # the plugin parametrizes the suite's tests over these
LRKV_GRID = "quick"  # `lrkv verify` (.ci/run) runs the default grid on the same backends


# ----------------------------------------------------------------------------- the oracle itself
@settings(max_examples=2 * settings.default.max_examples)
@given(cases(level="kernel", dtypes=("float64",), specs=lrkv_specs(rope_thetas=(10000.0, 500.0))))
def test_oracle_factored_equals_materialized(case):
    """Eqs. 6–7 (factored) == explicit K_h, V_h at float64, out and lse values, within the
    float64 rounding bound of lrkv.verify.bounds."""
    note(f"replay: {repro_command('materialized', case)}")
    inp = make_kernel_inputs(case)
    fact = dict(zip(("out", "lse"), inp.call(decode_attention)))
    mat = dict(zip(("out", "lse"), inp.call(materialized_decode_attention)))
    bounds = oracle_bounds(case, inp, F64_C)
    for name in fact:
        m = error_metrics(mat[name], fact[name])
        assert m.nonfinite_match and m.max_abs <= bounds[name], (name, m, bounds[name])


@pytest.mark.parametrize("label", LRKV_BACKENDS)
def test_softmax_shift_invariance(label):
    """Logits shifted by +40 (after scaling): lse moves by the offset, nothing else changes, and
    the backend meets the rule (no exp overflow)."""
    target = load(label)
    strategy, cap = family(target, "kernel", qk_norm=False)
    check(target, strategy, cap, lambda case: softmax_shift_invariance(target, case))


def test_inductor_compiles_once_for_all_lengths():
    """The cache length is dynamic: new lengths and T_max reuse the compiled graph."""
    from torch._dynamo.utils import counters

    b = load("inductor")  # the suite's instance: its compiles are shared with the suite's tests
    check_case(b, Case("kernel", BASE, "float32", (3, 2, 1), 3))  # compiled here or earlier
    before = counters["stats"]["unique_graphs"]
    for t in (5, 17, 33):
        check_case(b, Case("kernel", BASE, "float32", (t, 2, t - 1), t, seed=t))
    assert counters["stats"]["unique_graphs"] == before
