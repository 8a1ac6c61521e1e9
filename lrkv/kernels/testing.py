"""Test support for the kernels, kept apart from them (after flashinfer's test_helpers): where
to run, the harness's inputs, and the harness's verdict — one rule for a kernel unit test and
the gate.

    with kernel_context():                       GPU natively when there is one, else the interpreter
        case = kernel_case(H=5, d_h=32, r=7, lengths=[40, 17, 0], dtype="float32")
        inp = kernel_inputs(case)                the harness's draw (a lrkv.verify Case), on the device
        out, lse = inp.call(decode_attention, num_splits=3)
        assert_passes(case, out=out, lse=lse)    the gate's rule under the packaged policy

Inputs are the harness's: drawn in float64 from real projections, rounded to the case dtype,
garbage (NaN by default) past every length; the float64 oracle runs on the rounded values
(DESIGN §6). `assert_passes` prepares the case exactly as `lrkv verify` does
(`lrkv.verify.runner.prepare_inputs`: oracle paths cross-checked, err_base, atol) and judges
the outputs with `judge_outputs` — the same `judge_record` the gate re-runs.
"""

from __future__ import annotations

import contextlib
import functools
from dataclasses import fields, replace

import torch

from ..spec import AttentionSpec
from ..verify.case import Case
from ..verify.levels.kernel import make_kernel_inputs
from ..verify.levels.extend import make_extend_inputs
from ..verify.levels.paged import make_paged_inputs
from ..verify.runner import judge_outputs, prepare_inputs
from ..verify.tolerance import load_policy
from . import runtime

BACKEND = "triton"  # the policy's backend tables that judge the kernels (TritonBackend.name)


def kernel_device() -> torch.device:
    return torch.device("cuda") if runtime.mode()[0] == "cuda" else torch.device("cpu")


@contextlib.contextmanager
def kernel_context():
    """Run the block with the kernels live: natively on CUDA, else in Triton's interpreter
    (restored afterwards, so tests that expect the fallback are unaffected)."""
    if torch.cuda.is_available() and runtime.mode()[0] == "cuda":
        yield
        return
    with runtime.interpreter():
        assert runtime.mode()[0] == "interpreter"  # never the fallback: that is the reference itself
        yield


# ----------------------------------------------------------------------------- inputs
def kernel_case(*, H: int, d_h: int, r: int, lengths, t_max: int | None = None, dtype: str = "float64",
                seed: int = 0, key_scale: bool = False, rope: str = "none", level: str = "kernel",
                **knobs) -> Case:
    """A harness Case for a kernel contract in the suite's names (DESIGN §3): key_scale is
    the spec's QK-RMSNorm, t_max defaults to the longest length; `knobs` are Case fields
    (q_scale, near_cancel, nan_garbage, layout, page_size, page_shuffle, shared_prefix, n_new)."""
    lengths = tuple(lengths)
    spec = AttentionSpec.lrkv(H, d_h, r, qk_norm=key_scale, rope=rope)
    return Case.flat(level, spec, dtype, lengths, t_max if t_max is not None else max(lengths), seed=seed, **knobs)


_MAKE = {"kernel": make_kernel_inputs, "kernel-paged": make_paged_inputs, "kernel-extend": make_extend_inputs}


def on_device(inp, device: torch.device | None = None):
    """The input bundle with every tensor on `device` (the kernel device by default)."""
    device = kernel_device() if device is None else device
    return replace(inp, cache=inp.cache.to(device), **{f.name: getattr(inp, f.name).to(device) for f in fields(inp)
                                                        if isinstance(getattr(inp, f.name), torch.Tensor)})


def kernel_inputs(case: Case):
    """The harness's inputs of the case's level, at τ, on the kernel device."""
    return on_device(_MAKE[case.level](case))


# ----------------------------------------------------------------------------- the rule
@functools.lru_cache(maxsize=1)
def policy():
    """The packaged policy (plus a project override in the working directory, as `lrkv verify` reads it)."""
    return load_policy()


@functools.lru_cache(maxsize=64)
def _prepared(case: Case):
    return prepare_inputs(case, _MAKE[case.level](case), policy())


def reference(case: Case) -> dict[str, torch.Tensor]:
    """The float64 oracle's outputs on the case's draw (on the CPU)."""
    return _prepared(case).ref


def verdicts(case: Case, inputs=None, **outputs: torch.Tensor) -> dict[str, tuple]:
    """Per output: (metrics, bound, ok, reason) by the harness's rule. `inputs`: the bundle the
    kernel ran on when a test changed the harness's draw (the oracle then runs on it)."""
    prep = _prepared(case) if inputs is None else prepare_inputs(case, on_device(inputs, torch.device("cpu")),
                                                                   policy())
    if prep.inconsistent:
        raise AssertionError(f"{case.id}: the oracle paths disagree: {prep.inconsistent}")
    outs = {name: t.cpu() for name, t in outputs.items()}
    return judge_outputs(prep, outs, policy().resolve(BACKEND, case.dtype))


def passes(case: Case, inputs=None, **outputs: torch.Tensor) -> bool:
    return all(ok for _, _, ok, _ in verdicts(case, inputs, **outputs).values())


def assert_passes(case: Case, inputs=None, **outputs: torch.Tensor) -> None:
    """Every output passes the harness's rule (the gate's verdict) on this case."""
    bad = [why for _, _, ok, why in verdicts(case, inputs, **outputs).values() if not ok]
    assert not bad, f"{case.id}: " + "; ".join(bad)


def check(fn, case: Case, inputs=None, **launch) -> tuple[torch.Tensor, torch.Tensor]:
    """Run a kernel wrapper (`decode_attention`, `paged_decode_attention`, `extend_attention`)
    on the case's inputs (or `inputs`), hold out and lse to the harness's rule, return them."""
    inp = kernel_inputs(case) if inputs is None else inputs
    out, lse = inp.call(fn, **launch)
    assert_passes(case, inputs, out=out, lse=lse)
    return out, lse
