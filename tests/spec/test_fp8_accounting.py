"""The scale bytes of an fp8 LRKV cache (DESIGN §4, "FP8 caches") against hand counts, in the
accounting, the planner and `lrkv cache --scales`; and against an allocated cache's tensors.

The expected numbers are written out from the scale shapes (4 float32 bytes each), not
taken from the functions under test."""

from __future__ import annotations

import json
from fractions import Fraction

import pytest
import torch

from lrkv.cli import main
from lrkv.reference.cache import allocate_cache
from lrkv.spec import PAPER_SCALES, AttentionSpec, fp8_scale_bytes, fp8_scale_elements
from lrkv.spec.fp8_scales import GRANULARITIES
from lrkv.spec.planner import GIB, plan, plan_scales, tokens_that_fit

S25 = PAPER_SCALES["2.5B"]  # N 18, H 18, d_h 128, r 55
LRKV25 = S25.spec("lrkv")
N, B, T = 18, 64, 32768

# bytes per layer (fixed) and per token per layer, at H = 18: shared parts then latent parts
HAND = {
    "per_tensor": (4 * 4, 0),  # a scalar per part
    "per_head": (2 * 4 + 2 * 4 * 18, 0),  # shared scalars; latents [H]
    "per_token": (0, 4 * 4),  # 4 bytes per token per part
    "per_token_head": (0, 2 * 4 + 2 * 4 * 18),  # shared per token; latents 4·H per token
}


@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_scale_bytes_match_hand_counts(granularity):
    fixed, per_token = HAND[granularity]
    assert tuple(4 * e for e in fp8_scale_elements(LRKV25, granularity)) == (fixed, per_token)
    assert fp8_scale_bytes(LRKV25, granularity, n_layers=N, tokens=B * T) == N * (fixed + B * T * per_token)


@pytest.mark.parametrize("granularity", GRANULARITIES)
def test_scale_bytes_match_an_allocated_cache(granularity):
    spec = AttentionSpec.lrkv(3, 8, 5)
    c = allocate_cache(spec, 2, 7, torch.float32, fp8=torch.float8_e5m2, granularity=granularity)
    assert c.scales.nbytes() == fp8_scale_bytes(spec, granularity, n_layers=1, tokens=2 * 7)


def test_the_share_of_the_fp8_saving_at_the_paper_shape():
    """LRKV at 2.5B stores 2·(128 + 18·55) = 2236 elements per token per layer: fp8 saves
    2236 bytes over bf16; per-token-head scales take 152 of them (6.8%), per-token 16 (0.7%)."""
    sp = plan_scales(LRKV25, "per_token_head", n_layers=N, tokens=B * T, dtype="fp8")
    assert sp.saving_per_token_layer == 2236 and sp.bytes_per_token_layer == 152 and sp.bytes_per_layer == 0
    assert sp.share_of_saving == Fraction(152, 2236)
    assert sp.model_bytes == N * B * T * 152 and sp.saving_model_bytes == N * B * T * 2236
    tok = plan_scales(LRKV25, "per_token", n_layers=N, tokens=B * T, dtype="fp8_e5m2")
    assert tok.share_of_saving == Fraction(16, 2236)
    static = plan_scales(LRKV25, "per_head", n_layers=N, tokens=B * T, dtype="fp8")
    assert static.model_bytes == N * (8 + 144) and static.share_of_saving == Fraction(N * 152, N * B * T * 2236)


def test_plan_without_scales_is_unchanged_and_refuses_scales_without_fp8():
    p = plan(S25, n_layers=N, batch=B, seq_len=T, dtype="fp8")
    assert p.scales is None and "scales" not in p.to_dict()
    with pytest.raises(ValueError, match=r"scales \(per_token\) apply to an fp8 cache: dtype must be one of"):
        plan(S25, n_layers=N, batch=B, seq_len=T, dtype="bf16", scales="per_token")
    with pytest.raises(ValueError, match="granularity must be one of"):
        plan(S25, n_layers=N, batch=B, seq_len=T, dtype="fp8", scales="per_block")
    with pytest.raises(ValueError, match="lrkv specs"):
        fp8_scale_elements(S25.spec("mha"), "per_tensor")


def test_cli_shows_the_scales_and_their_share(capsys):
    argv = ["cache", "--preset", "2.5B", "--seq-len", "32K", "--batch", "64", "--dtype", "fp8"]
    assert main(argv) == 0
    plain = capsys.readouterr().out
    assert "fp8 scales" not in plain
    assert main([*argv, "--scales", "per_token_head"]) == 0
    text = capsys.readouterr().out
    assert "lrkv fp8 scales (per_token_head, float32): 152 B/token/layer + 0 B/layer" in text
    assert "6.80% of LRKV's fp8 saving over bf16 (2,236 B/token/layer" in text
    assert text.replace(text[text.index("lrkv fp8 scales"):text.index("LRKV rank ceiling")], "") == plain
    assert main([*argv, "--scales", "per_tensor", "--json"]) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["scales"]["bytes_per_layer"] == 16 and out["scales"]["model_bytes"] == 18 * 16
    assert out["rows"][-1]["model_bytes"] == N * B * T * 2236  # the rows are fp8's, scales apart
    assert out["rows"][0]["model_bytes"] == 324 * GIB // 2


@pytest.mark.parametrize("argv, needle", [
    (["--scales", "per_token"], "--scales needs an fp8 --dtype"),
    (["--dtype", "fp8", "--scales", "per_block"], "--scales"),
])
def test_cli_refuses_bad_scales(argv, needle, capsys):
    try:
        rc = main(["cache", "--preset", "2.5B", "--seq-len", "8K", *argv])
    except SystemExit as e:
        rc = e.code
    assert rc == 2 and needle in capsys.readouterr().err



def test_tokens_that_fit_count_the_scales(capsys):
    """H 24, d_h 128, r 48, N 40 at fp8: 2·(128 + 24·48) = 2560 payload bytes per token per layer
    and per_token_head scales 4·(2 + 2·24) = 200 more: 60 GiB / (40 · 2760) = 583,555 tokens, not
    the payload-only 60 GiB / (40 · 2560) = 629,145 (the scales' own 3.91 GiB left out)."""
    argv = ["cache", "--heads", "24", "--head-dim", "128", "--rank", "48", "--layers", "40", "--seq-len", "32K",
            "--batch", "16", "--dtype", "fp8", "--budget-gib", "60"]
    assert main([*argv, "--scales", "per_token_head", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    lrkv = {r["family"]: r for r in data["rows"]}["lrkv"]
    assert lrkv["tokens_fit"] == 60 * GIB // (40 * 2760) == 583_555
    assert "counts its fp8 scales (per_token_head)" in lrkv["note"]
    assert data["scales"]["model_bytes"] == 40 * 16 * 32768 * 200  # 3.91 GiB
    assert main([*argv, "--json"]) == 0  # without --scales the payload alone
    assert {r["family"]: r for r in json.loads(capsys.readouterr().out)["rows"]}["lrkv"]["tokens_fit"] == 629_145
    assert main([*argv, "--scales", "per_token_head"]) == 0
    assert "583,555" in capsys.readouterr().out


@pytest.mark.parametrize("granularity, tp, fixed, per_token", [
    # per device, hand counted (bytes): shared scales replicated, latents' head axis split H/P
    ("per_tensor", 2, 4 * 4, 0), ("per_head", 2, 2 * 4 + 2 * 4 * 9, 0),
    ("per_token", 2, 0, 4 * 4), ("per_token_head", 3, 0, 2 * 4 + 2 * 4 * 6),
])
def test_tokens_that_fit_count_each_devices_scales(granularity, tp, fixed, per_token):
    budget, payload = 10**9 + 7, 2 * (128 + 18 // tp * 55)  # fp8: one byte per element, this device's heads
    fit = tokens_that_fit(LRKV25, N, budget, "fp8", tp, granularity)
    assert fit == (budget - N * fixed) // (N * (payload + per_token))
    assert tokens_that_fit(LRKV25, N, budget, "fp8", tp) == budget // (N * payload)
