"""Property-based equivalence of every available decode backend against the float64 oracle.

Every property draws a `Case` (lrkv.verify.strategies) and judges with the harness's own
tolerance rule (DESIGN §6), so a failing example prints the one-line command that replays
it: `lrkv verify --backend <name> --case '<json>'`.

Backends: the built-ins (reference, materialized, eager, inductor, tiled) and the example
user backend. Other registered backends (triton, onnxruntime, aoti, tensorrt) build engines
that cost tens of seconds each and have their own suites (tests/test_triton_*.py,
tests/test_export.py); add them here with LRKV_EQUIVALENCE_BACKENDS=all (or a comma list
of names / module:attr paths). Compiled backends draw from one fixed static family (T,
lengths, seeds and adversarial flags vary) so that a compile is paid once per family.
"""

from __future__ import annotations

import os

import pytest
import torch
from hypothesis import assume, given, note, settings
from hypothesis import strategies as st

from lrkv.reference.lrkv import decode_attention, materialized_decode_attention, prefill
from lrkv.spec import as_dtype, dtype_name
from lrkv.verify.backend import backend_names, get_backend
from lrkv.verify.bounds import U64, kernel_conditioning
from lrkv.verify.cases import Case, KernelInputs, make_kernel_inputs, make_model_inputs
from lrkv.verify.grid import BASE, QKN_EXACT
from lrkv.verify.metrics import error_metrics
from lrkv.verify.runner import (Prepared, decode_sequence, judge_outputs, kernel_reference, prepare,
                                repro_command, run_case)
from lrkv.verify.strategies import cases, lrkv_specs
from lrkv.verify.tiled import TiledDecoder
from lrkv.verify.tolerance import fa3_atol, judge, load_policy, make_bound

pytestmark = pytest.mark.equivalence

POLICY = load_policy()
F64_C = POLICY.resolve("reference", "float64").float64_c
EXAMPLE = "examples.my_backend:backend"
FAST = ("reference", "materialized", "eager", "tiled", EXAMPLE)  # any shape, many examples
COMPILED_EXAMPLES = 6  # inductor: each static family compiles once, examples only vary T and data
EXTERNAL_EXAMPLES = 3  # other registered backends (exports, Triton): one family, a few draws
BUILTIN = (*FAST, "inductor")


def _selected() -> tuple[str, ...]:
    extra = os.environ.get("LRKV_EQUIVALENCE_BACKENDS", "").strip()
    if not extra:
        return BUILTIN
    more = backend_names() if extra == "all" else [x.strip() for x in extra.split(",") if x.strip()]
    return tuple(dict.fromkeys((*BUILTIN, *more)))


ALL = _selected()
SHIFT = 40.0  # common logit offset (after scaling) for the shift-invariance property


def load(label: str):
    try:
        b = get_backend(label)
    except (ValueError, TypeError, ImportError) as e:
        pytest.skip(f"{label}: cannot load ({e})")
    ok, why = b.available()
    if not ok:
        pytest.skip(f"{label}: unavailable ({why})")
    return b


def dtypes_of(b, allowed=("float64", "float32", "bfloat16", "float16")) -> tuple[str, ...]:
    return tuple(d for d in (dtype_name(t) for t in b.dtypes) if d in allowed)


def family(label: str, level: str, dtypes: tuple[str, ...]):
    """The case strategy for a backend: free shapes for eager-style backends, fixed families otherwise."""
    if label in FAST:
        max_t = 12 if level == "layer-model" else 24  # layer-model costs one step per token
        return cases(level=level, dtypes=dtypes, specs=lrkv_specs(ropes=_ropes(level)), max_t=max_t), None
    if label == "inductor":  # the default grid's compiled families: (spec, dtype) with B = 3, T >= 2
        pairs = st.sampled_from(((BASE, "float32"), (QKN_EXACT, "float64")))
        return pairs.flatmap(lambda sd: cases(level=level, dtypes=(sd[1],), specs=st.just(sd[0]), batch=3,
                                              min_t=2, max_t=40)), COMPILED_EXAMPLES
    return cases(level=level, dtypes=dtypes[:1], specs=st.just(BASE), batch=3, min_t=2, max_t=40), EXTERNAL_EXAMPLES


def _ropes(level: str):
    # latent RoPE is the paper's claim, not the model: excluded where the model is the reference
    return ("none", "exact", "aligned") if level == "layer-model" else ("none", "exact", "aligned", "latent")


def check(label: str, strategy, cap: int | None, body) -> None:
    """Run body(case) as a hypothesis property, with the profile's example count capped."""
    n = settings.default.max_examples if cap is None else min(cap, settings.default.max_examples)

    @settings(max_examples=n)
    @given(strategy)
    def prop(case):
        note(f"replay: {repro_command(label, case)}")
        body(case)
    prop()


def assert_pass(label: str, backend, case: Case) -> dict:
    rec = run_case(prepare(case), backend, label, POLICY.resolve(backend.name, case.dtype))
    assert rec["status"] == "pass", f"{rec['status']}: {rec['reason']}\n  replay: {rec['repro']}"
    return rec


def _runs(backend, inputs: KernelInputs):
    return inputs.clone().call(backend.decode_attention)


# ----------------------------------------------------------------------------- the oracle itself
@settings(max_examples=2 * settings.default.max_examples)
@given(cases(level="kernel", dtypes=("float64",)))
def test_factored_equals_materialized(case):
    """Eqs. 6–7 (factored) == explicit K_h, V_h, at float64, within the float64 rounding bound."""
    note(f"replay: {repro_command('materialized', case)}")
    inp = make_kernel_inputs(case)
    out_f, lse_f = inp.call(decode_attention)
    out_m, lse_m = inp.call(materialized_decode_attention)
    bound = kernel_conditioning(*inp.args(), **inp.kwargs()).bound(F64_C)
    m = error_metrics(out_m, out_f)
    assert m.nonfinite_match and m.max_abs <= bound, (m, bound)
    assert error_metrics(lse_m, lse_f).nonfinite_match


# ----------------------------------------------------------------------------- every backend vs the reference
@pytest.mark.parametrize("label", ALL)
def test_kernel_matches_reference(label):
    b = load(label)
    if "kernel" not in b.levels:
        pytest.skip(f"{label} has no kernel level")
    strategy, cap = family(label, "kernel", dtypes_of(b))
    check(label, strategy, cap, lambda case: assert_pass(label, b, case))


@pytest.mark.parametrize("label", ALL)
@pytest.mark.parametrize("level", ["layer", "layer-model"])
def test_layer_matches_reference(label, level):
    """layer: one step vs the reference step; layer-model: incremental decode (append-then-decode)
    vs the training-form forward over the whole sequence."""
    b = load(label)
    if "layer" not in b.levels:
        pytest.skip(f"{label} has no layer level")
    strategy, cap = family(label, level, dtypes_of(b))
    check(label, strategy, cap, lambda case: assert_pass(label, b, case))


# ----------------------------------------------------------------------------- schedule invariance
@settings(max_examples=2 * settings.default.max_examples)
@given(cases(level="kernel", dtypes=("float64",)), st.integers(1, 12), st.integers(1, 7))
def test_split_and_tile_invariance(case, tile, splits):
    """The tiled online-softmax decode gives the same answer for any tile size and split count
    (including counts that don't divide T): vs the reference and vs the one-tile schedule."""
    note(f"replay: {repro_command('tiled', case.replace(tile=tile, splits=splits))}")
    inp = make_kernel_inputs(case)
    bound = kernel_conditioning(*inp.args(), **inp.kwargs()).bound(F64_C)
    ref, _ = inp.call(decode_attention)
    out, _ = inp.call(TiledDecoder(tile=tile, splits=splits))
    whole, _ = inp.call(TiledDecoder(tile=max(1, case.t_max), splits=1))
    for a, b in ((out, ref), (out, whole)):
        m = error_metrics(a, b)
        assert m.nonfinite_match and m.max_abs <= bound, (m, bound)


# ----------------------------------------------------------------------------- symmetries
def _permute(inp: KernelInputs, batch: torch.Tensor | None, heads: torch.Tensor | None) -> KernelInputs:
    p = inp.clone()
    if batch is not None:
        for name in ("q", "shared_k", "shared_v", "latent_k", "latent_v", "key_scale", "lengths"):
            t = getattr(p, name)
            if t is not None:
                setattr(p, name, t[batch])
    if heads is not None:
        p.q = p.q[:, heads]
        p.latent_k, p.latent_v = p.latent_k[:, :, heads], p.latent_v[:, :, heads]
        p.basis_k, p.basis_v = p.basis_k[heads], p.basis_v[heads]
        if p.key_scale is not None:
            p.key_scale = p.key_scale[:, :, heads]
    return p


def _close(a: torch.Tensor, b: torch.Tensor, ref: torch.Tensor, dtype: str, slack: float) -> None:
    """a and b agree to within the backend's own error level plus atol(τ)."""
    m = error_metrics(a, b)
    assert m.nonfinite_match, m
    assert m.max_abs <= 2 * slack + fa3_atol(ref, dtype), (m, slack)


@pytest.mark.parametrize("label", ALL)
def test_batch_and_head_permutation_equivariance(label):
    b = load(label)
    if "kernel" not in b.levels:
        pytest.skip(f"{label} has no kernel level")
    strategy, cap = family(label, "kernel", dtypes_of(b))

    def body(case):
        inp = make_kernel_inputs(case)
        ref, _ = inp.to(torch.float64).call(decode_attention)
        out, _ = _runs(b, inp)
        slack = error_metrics(out, ref).max_abs
        g = torch.Generator().manual_seed(case.seed)
        bperm = torch.randperm(case.batch, generator=g)
        hperm = torch.randperm(case.spec.n_heads, generator=g)
        out_b, _ = _runs(b, _permute(inp, bperm, None))
        _close(out_b, out[bperm], ref, case.dtype, slack)
        out_h, _ = _runs(b, _permute(inp, None, hperm))
        _close(out_h, out[:, hperm], ref, case.dtype, slack)
    check(label, strategy, cap, body)


@pytest.mark.parametrize("label", ALL)
def test_garbage_past_lengths_is_never_read(label):
    """NaN garbage and huge finite garbage past lengths give the same output."""
    b = load(label)
    if "kernel" not in b.levels:
        pytest.skip(f"{label} has no kernel level")
    strategy, cap = family(label, "kernel", dtypes_of(b))

    def body(case):
        nan_case, finite_case = case.replace(nan_garbage=True), case.replace(nan_garbage=False)
        ref, _ = make_kernel_inputs(nan_case).to(torch.float64).call(decode_attention)
        out_nan, _ = _runs(b, make_kernel_inputs(nan_case))
        out_fin, _ = _runs(b, make_kernel_inputs(finite_case))
        assert error_metrics(out_nan, ref).nonfinite_match, "NaN garbage leaked into the output"
        _close(out_nan, out_fin, ref, case.dtype, 0.0)
    check(label, strategy, cap, body)


def _shifted(inp: KernelInputs, dtype: torch.dtype) -> tuple[KernelInputs, torch.Tensor]:
    """Add w_b to every shared key of sequence b: each head's logits move by the constant
    q_h·w_b (SHIFT/scale for head 0). Returns the shifted inputs at τ and the per-head shift."""
    x = inp.to(torch.float64)
    q0 = x.q[:, 0]  # [B, d_h]
    w = SHIFT * q0 / (x.scale * q0.pow(2).sum(-1, keepdim=True).clamp_min(1e-30))  # [B, d_h]
    x.shared_k = x.shared_k + w[:, None, :]
    return x.to(dtype), torch.einsum("bhd,bd->bh", x.q, w) * x.scale


@pytest.mark.parametrize("label", ALL)
def test_softmax_shift_invariance(label):
    """A large common logit offset per head (here +40 after scaling) changes nothing but lse:
    the reference is exactly shift-invariant, and every backend stays within the rule on the
    shifted inputs (a kernel without max-subtraction overflows exp here)."""
    b = load(label)
    if "kernel" not in b.levels:
        pytest.skip(f"{label} has no kernel level")
    strategy, cap = family(label, "kernel", dtypes_of(b))

    def body(case):
        assume(not case.spec.qk_norm)  # key_scale multiplies each slot's logit: no offset is common
        tau = as_dtype(case.dtype)
        inp = make_kernel_inputs(case)
        shifted, shift = _shifted(inp, tau)
        x64, s64 = inp.to(torch.float64), _shifted(inp, torch.float64)[0]
        out0, lse0 = x64.call(decode_attention)
        out1, lse1 = s64.call(decode_attention)
        bound = kernel_conditioning(*s64.args(), **s64.kwargs()).bound(F64_C)
        assert error_metrics(out1, out0).max_abs <= bound
        finite = torch.isfinite(lse0)
        assert torch.allclose(lse1[finite], (lse0 + shift)[finite], rtol=1e-9, atol=1e-9)
        ref, base, cond = kernel_reference(shifted)
        atol = {name: fa3_atol(t, tau) for name, t in ref.items()}
        prep = Prepared(case, shifted, ref, base, atol, cond)
        out, lse = _runs(b, shifted)
        for name, (_, _, ok, why) in judge_outputs(prep, {"out": out, "lse": lse},
                                                   POLICY.resolve(b.name, case.dtype)).items():
            assert ok, why
    check(label, strategy, cap, body)


# ----------------------------------------------------------------------------- append-then-decode == prefill
@pytest.mark.parametrize("label", ALL)
def test_append_then_decode_equals_prefill(label):
    """Appending T tokens one layer_step at a time leaves the same cache as `prefill` of the
    whole prompt (valid slots), at the rule's tolerance."""
    b = load(label)
    if "layer" not in b.levels:
        pytest.skip(f"{label} has no layer level")
    strategy, cap = family(label, "layer-model", dtypes_of(b))

    def body(case):
        tau = as_dtype(case.dtype)
        inp = make_model_inputs(case)
        caches = []

        def step(w, x_t, cache, positions):
            y, cache = b.layer_step(w, x_t, cache, positions)
            caches[:] = [cache]
            return y, cache
        decode_sequence(step, inp.weights, inp.x.clone(), case)
        _, ref = prefill(inp.to(torch.float64).weights, inp.to(torch.float64).x)
        _, base = prefill(inp.weights, inp.x)
        tol = POLICY.resolve(b.name, case.dtype)
        for name, t in caches[0].tensors().items():
            r = getattr(ref, name)
            # float64: projections reduce over d (and d_h·r for key_scale's Gram form)
            n = case.spec.d_model + case.spec.head_dim * max(case.spec.rank, 1)
            mag = r.abs().max().item() if r.numel() else 0.0
            f64 = tol.float64_c * U64 * n * (1 + mag) if case.dtype == "float64" else None
            bound = make_bound(error_metrics(getattr(base, name), r), fa3_atol(r, tau), tol, f64)
            ok, why = judge(error_metrics(t, r), bound, name)
            assert ok, why
        assert torch.equal(caches[0].lengths.long(), torch.full((case.batch,), case.t_max))
    check(label, strategy, cap, body)


def test_inductor_compiles_once_for_all_lengths():
    """The cache length is dynamic: new lengths and T_max reuse the compiled graph."""
    from torch._dynamo.utils import counters

    b = load("inductor")
    assert_pass("inductor", b, Case("kernel", BASE, "float32", (3, 2, 1), 3))  # compiled here or earlier
    before = counters["stats"]["unique_graphs"]
    for t in (5, 17, 33):
        assert_pass("inductor", b, Case("kernel", BASE, "float32", (t, 2, t - 1), t, seed=t))
    assert counters["stats"]["unique_graphs"] == before
