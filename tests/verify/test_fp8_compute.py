"""FA3-style fp8 compute through the harness (DESIGN §4.1, "fp8 compute"): a case's
`fp8_compute` ("q", "p", "qp") lets a kernel round q and/or the softmax weights to e4m3 as
well; err_base is then that algorithm's error (lrkv.reference.fp8.round_query /
rounded_weights) against the exact oracle. The tests check the roundings themselves, that
the oracle never moves, that an FA3-style decode (lrkv.verify.tiled.Fp8ComputeBackend) passes
where its roundings are declared and fails where they are not, that a plain fp8 case reaches
it as its fp8_compute twin, and that the gate re-derives that twin."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from lrkv.reference import lrkv as L
from lrkv.reference.fp8 import E4M3, FP8_COMPUTE, dequantize, quantize, round_query, rounded_weights
from lrkv.reference.fp8_cache import quantize_cache
from lrkv.spec import AttentionSpec
from lrkv.verify import gate, runner
from lrkv.verify.backend_registry import get_backend
from lrkv.verify.case import Case
from lrkv.verify.grids import default_grid
from lrkv.verify.runner import backend_info, prepare, run
from lrkv.verify.selection import Selection
from lrkv.verify.tiled import Fp8ComputeBackend
from lrkv.verify.tolerance import load_policy
from lrkv.verify.tolerance_report import build_report

from ..test_helpers.inputs import random_factored_inputs

pytestmark = pytest.mark.equivalence

SPEC = AttentionSpec.lrkv(4, 16, 5)
PLAIN_FP8_KERNEL = [c for c in default_grid() if c.level == "kernel" and c.cache_fp8 and not c.fp8.compute]


def on_grid(x: torch.Tensor, fmt=E4M3) -> bool:
    """Whether float64 values x are fp8 values of `fmt` (quantizing at scale 1 moves none)."""
    return torch.equal(dequantize(quantize(x, fmt), torch.tensor(1.0)), x.double())


class AnyFp8Case(Fp8ComputeBackend):
    """The FA3-style decode run on every fp8 case, declared or not (a kernel whose author
    forgot to say it rounds)."""

    def supports(self, case):
        return True, ""


# The first fp8-compute hunt's false failures (seed 107, in fp8_compute_hunt_cases.json), before
# err_base added the roundings' own effect to τ's instead of letting the two cancel, and took
# the worst rounding phase: an exact backend on a "q" case (near cancellation, paged) and the
# FA3-style decode at tiles of 1–6.
HUNT_FALSE_FAILURES = [(r["backend"], json.dumps(r["case"]))
                       for r in json.loads((Path(__file__).parent / "fp8_compute_hunt_cases.json").read_text())]


def judged(case: Case, backend, policy=None) -> dict:
    policy = policy or load_policy()
    return runner.run_case(prepare(case, policy), backend, backend.name, policy.resolve(backend.name, case.dtype))


# ----------------------------------------------------------------------------- the case
@pytest.mark.parametrize("kw, needle", [
    (dict(fp8_compute="pq"), "fp8_compute must be one of"),
    (dict(fp8_compute=1), "fp8_compute must be one of"),
    (dict(fp8_compute="p", cache_format="", scale_granularity=""), "applies to an fp8 cache"),
    (dict(fp8_compute="q", level="layer", lengths=(9, 17, 4)), "applies to an fp8 cache at the levels"),
])
def test_fp8_compute_is_validated_naming_the_field(kw, needle):
    base = dict(level="kernel", spec=SPEC, dtype="bfloat16", lengths=(9, 17, 4), t_max=20,
                cache_format="float8_e4m3fn", scale_granularity="per_head")
    with pytest.raises(ValueError, match=needle):
        Case.flat(**{**base, **kw})


def test_fp8_compute_is_part_of_the_id_and_of_the_grid():
    case = Case.flat("kernel", SPEC, "bfloat16", (9, 17, 4), 20, cache_format="float8_e4m3fn",
                scale_granularity="per_head", fp8_compute="qp")
    assert case.id.endswith("+fp8compute.qp") and case.replace(fp8_compute="").id != case.id and case.fp8.compute == "qp"
    assert Case.from_dict(case.to_dict()) == case
    grid = {c.fp8.compute for c in default_grid() if c.fp8 and c.fp8.compute}
    assert grid == set(FP8_COMPUTE) - {""}  # each rounding once, at the kernel levels
    assert {c.level for c in default_grid() if c.fp8 and c.fp8.compute} == {"kernel", "kernel-paged", "kernel-extend"}


# ----------------------------------------------------------------------------- the roundings
def test_round_query_is_e4m3_with_one_scale_per_row_and_head():
    q = torch.randn(3, 4, 16, dtype=torch.float64) * torch.tensor([1e-3, 1.0, 30.0, 0.0])[None, :, None]
    r = round_query(q)  # float64: the dequantized values are exact
    amax = q.abs().amax(-1, keepdim=True)
    s = torch.where(amax > 0, amax / 448, 1.0).float().double()
    assert on_grid(r / s)  # every value is an e4m3 value times its (row, head)'s scale
    assert torch.equal(r.abs().amax(-1, keepdim=True)[:, :3], (448 * s)[:, :3])  # amax lands on 448
    assert torch.all(r[:, 3] == 0)  # an all-zero head stays zero
    rel = ((r - q).abs() / amax.clamp_min(1e-30))[:, :3]
    assert 0 < rel.max() <= 2.0**-4  # rounded, to e4m3's half-ulp at the top binade at most


def test_rounded_weights_round_p_not_the_normalised_weights():
    logits = torch.randn(2, 3, 11, dtype=torch.float64) * 4
    valid = torch.ones(2, 1, 11, dtype=torch.bool)
    valid[1, :, 6:] = False
    valid[0, :, :] = True
    a = rounded_weights(logits, valid)
    x = torch.where(valid, logits, float("-inf"))
    p = torch.exp(x - x.amax(-1, keepdim=True))
    l = p.sum(-1, keepdim=True)
    p8 = dequantize(quantize(p, E4M3), torch.tensor(1.0))
    assert torch.allclose(a * l, p8, rtol=1e-14, atol=0)  # a · l is p rounded to e4m3 (p ≤ 1, max → 1)
    assert not torch.equal(p8, p)
    assert torch.all(a[1, :, 6:] == 0)
    exact = torch.softmax(x, -1)
    assert 0 < (a - exact).abs().max() <= 2.0**-4 * exact.max()
    empty = rounded_weights(logits[:1], torch.zeros(1, 1, 11, dtype=torch.bool))
    assert torch.all(empty == 0)


def test_reference_decode_applies_only_the_roundings_asked_for():
    inp = random_factored_inputs(B=3, T=12, H=4, d_h=16, r=5, lengths=[12, 5, 0], seed=3)
    parts = {p: inp[p] for p in ("shared_k", "shared_v", "latent_k", "latent_v")}
    stored, scales = quantize_cache(parts, inp["lengths"], E4M3, "per_head")
    args = [inp["q"].float(), *stored.values(), inp["basis_k"].float(), inp["basis_v"].float(), inp["lengths"]]
    kw = dict(scale=0.25, cache_scales=scales)
    plain = L.decode_attention(*args, **kw)
    assert all(torch.equal(a, b) for a, b in zip(plain, L.decode_attention(*args, fp8_compute="", **kw)))
    p_only = L.decode_attention(*args, fp8_compute="p", **kw)
    assert torch.equal(p_only[1], plain[1])  # the normaliser and lse use the unrounded weights
    assert not torch.equal(p_only[0], plain[0])
    q_only = L.decode_attention(*args, fp8_compute="q", **kw)
    assert not torch.equal(q_only[1][:2], plain[1][:2])  # q meets the keys rounded: the logits move
    both = L.decode_attention(*args, fp8_compute="qp", **kw)
    paged_qp = L.materialized_decode_attention(*args, fp8_compute="qp", **kw)
    assert torch.allclose(both[0], paged_qp[0], atol=1e-5) and torch.allclose(both[1], paged_qp[1], atol=1e-5)
    with pytest.raises(ValueError, match="fp8_compute must be one of"):
        L.decode_attention(*args, fp8_compute="k", **kw)


# ----------------------------------------------------------------------------- the rule
@pytest.mark.parametrize("case", PLAIN_FP8_KERNEL[:4], ids=lambda c: c.cache_fp8)
def test_err_base_carries_the_roundings_and_the_oracle_stays_exact(case):
    pol = load_policy()
    plain, rounded = prepare(case, pol), prepare(case.replace(fp8_compute="qp"), pol)
    assert all(torch.equal(plain.ref[k], rounded.ref[k]) for k in plain.ref)  # one oracle
    assert rounded.base["out"].max_abs > 3 * plain.base["out"].max_abs
    assert rounded.base["lse"].max_abs > 3 * plain.base["lse"].max_abs
    assert prepare(case.replace(fp8_compute="p"), pol).base["lse"].max_abs == plain.base["lse"].max_abs


@pytest.mark.parametrize("case", PLAIN_FP8_KERNEL, ids=lambda c: c.cache_fp8)
def test_an_fa3_style_decode_passes_where_declared_and_fails_where_not(case):
    backend = AnyFp8Case()
    declared = judged(case.replace(fp8_compute="qp"), backend)
    assert declared["status"] == "pass", declared["reason"]
    undeclared = judged(case, backend)  # the same kernel on the exact case: its roundings are not excused
    assert undeclared["status"] == "fail", undeclared["reason"]


def test_a_plain_fp8_case_runs_as_its_fp8_compute_twin_and_the_gate_re_derives_it():
    pol = load_policy()
    cases = PLAIN_FP8_KERNEL[:3]
    backends = [("tiled-fp8-compute", Fp8ComputeBackend())]
    recs = run(cases, backends, pol, isolation="inprocess")  # the twins carry the declined cases' properties
    skips = [r for r in recs if r["status"] == "skip"]
    twins = [r for r in recs if r.get("twin")]
    assert len(skips) == len(twins) == 3
    assert all(r["id"].endswith("~fp8_compute=qp") and r["status"] == "pass" for r in twins), twins
    assert all(r["case"]["fp8_compute"] == "qp" for r in twins)
    rep = build_report(recs, pol, [backend_info(b, n) for n, b in backends],
                       selection=Selection("case", cases=tuple(cases)))
    empty = {"entries": {}, "policy": None}
    live = {"tiled-fp8-compute": (Fp8ComputeBackend(), "")}
    assert gate.exit_code(gate.classify(rep, empty, live=live), rep) == 0
    edited = copy.deepcopy(rep)  # the twin's roundings loosened to excuse more: "qp" is the most
    for r in edited["records"]:
        if r.get("twin"):
            r["case"]["fp8_compute"] = "p"
    entries = gate.classify(edited, empty, live=live)
    assert gate.exit_code(entries, edited) == 1
    assert any(e.klass == "ERROR" for e in entries)


def test_the_hunt_draws_each_rounding_at_the_kernel_levels_only():
    from lrkv.verify.hunt import draw_cases

    kernel = draw_cases("kernel-paged", ("bfloat16", "float32"), 30, seed=2, rounding=True)
    assert all(c.cache_fp8 for c in kernel)
    assert {c.fp8.compute for c in kernel} == {"p", "q", "qp"}
    layer = draw_cases("layer", ("bfloat16",), 10, seed=2, rounding=True)
    assert all(c.cache_fp8 and not c.fp8.compute for c in layer)
    assert not any(c.fp8.compute for c in draw_cases("kernel", ("bfloat16",), 20, seed=2, fp8=True))


@pytest.mark.parametrize("backend, case_json", HUNT_FALSE_FAILURES, ids=lambda x: x if len(x) < 40 else "")
def test_the_hunt_s_false_failures_pass(backend, case_json):
    b = get_backend(backend)
    rec = judged(Case.from_json(case_json), AnyFp8Case() if backend == "tiled-fp8-compute" else b)
    assert rec["status"] == "pass", rec["reason"]
