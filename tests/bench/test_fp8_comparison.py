"""The fp8 comparison (lrkv.bench.fp8_comparison): each family's fp8 cache cost, at small shapes.

TINY has LRKV's cache (2·(16 + 4·4) = 64 elements per token) exactly matched by GQA n_kv = 2
and MLA d_c = 64, so every piece of the study runs in milliseconds.
"""

from __future__ import annotations

import json
import math
from itertools import product

import pytest
import torch

from lrkv.bench import fp8_comparison as fc
from lrkv.bench.fp8_comparison import quantization_cost
from lrkv.reference.cache import FactoredCache
from lrkv.reference.fp8 import E4M3, E5M2, FP8_FORMATS, GRANULARITIES, PARTS, PER_TENSOR, PER_TOKEN_HEAD
from lrkv.reference.fp8_cache import dequantize_cache, quantize_cache
from lrkv.spec import AttentionSpec, cache_elements
from lrkv.spec.accounting import fp8_scale_elements
from lrkv.spec.presets import PAPER_SCALES, PaperScale
from lrkv.verify.metrics import error_metrics

from ..test_helpers.inputs import random_factored_inputs

TINY = PaperScale("tiny", 4, 16, 64, None, 4, 2, 64, "test scale")
SPECS = fc.family_specs(TINY)


def weights_of(family: str, seed: int = 0):
    return fc.init_family_weights(SPECS[family], fc.weight_seed(seed, fc.FAMILIES.index(family)))


def setup(family: str, *, batch: int = 2, t_max: int = 12, seed: int = 0, outliers=fc.NO_OUTLIERS):
    """(spec, weights, q, cache, lengths) of one family on one small draw."""
    spec, weights = SPECS[family], weights_of(family, seed)
    x, lengths = fc.draw_activations(batch, t_max, TINY.d_model, seed=seed, outliers=outliers)
    return (spec, weights, *fc.project(spec, weights, x, lengths), lengths)


# ----------------------------------------------------------------------------- equal bytes
def test_gqa_n_kv_is_the_one_closest_to_lrkv_cache_and_mla_matches_it_exactly():
    for scale in (PAPER_SCALES["2.5B"], TINY):
        lrkv = scale.spec("lrkv")
        target = cache_elements(lrkv)
        gaps = {}
        for n in range(1, scale.n_heads + 1):  # every n_kv a GQA spec accepts
            try:
                gaps[n] = abs(cache_elements(AttentionSpec.gqa(scale.n_heads, scale.head_dim, n)) - target)
            except ValueError:
                continue
        specs = fc.family_specs(scale)
        assert gaps[specs["gqa"].n_kv_heads] == min(gaps.values())
        assert cache_elements(specs["mla"]) == target
    specs = fc.family_specs(PAPER_SCALES["2.5B"])
    assert cache_elements(specs["lrkv"]) == 2 * (128 + 18 * 55) == 2236  # Eq. 8
    assert specs["gqa"].n_kv_heads == 9 and cache_elements(specs["gqa"]) == 2304  # 6 would give 1536
    assert specs["mla"].latent_dim == 2236 and specs["mla"].rope_dim == 0  # the simplified MLA
    assert SPECS["gqa"].n_kv_heads == 2 and cache_elements(SPECS["gqa"]) == 64


# ----------------------------------------------------------------------------- the data
def test_draw_is_seeded_and_never_scales_the_query_token():
    x, lengths = fc.draw_activations(3, 16, 64, seed=5)
    x2, lengths2 = fc.draw_activations(3, 16, 64, seed=5)
    assert torch.equal(x, x2) and torch.equal(lengths, lengths2) and int(lengths[0]) == 16
    plain, _ = fc.draw_activations(3, 16, 64, seed=5, outliers=fc.Outliers(channels=0))
    base, _ = fc.draw_activations(3, 16, 64, seed=5, outliers=fc.NO_OUTLIERS)
    for b in range(3):
        scaled = {t for t in range(16) if not torch.equal(plain[b, t], base[b, t])}
        assert 0 in scaled and int(lengths[b]) - 1 not in scaled and len(scaled) == fc.OUTLIER_TOKENS


# ----------------------------------------------------------------------------- quantize
def test_the_part_quantizer_is_quantize_cache_on_lrkv_parts():
    spec, weights, q, cache, lengths = setup("lrkv", outliers=fc.Outliers())
    valid = torch.arange(cache["shared_k"].shape[1])[None, :] < lengths[:, None]
    for fmt, g in product(FP8_FORMATS, GRANULARITIES):
        stored, scales = quantize_cache(cache, lengths, fmt, g)
        read, ours = fc.quantize_family_cache("lrkv", cache, lengths, fmt, g)
        wanted = dequantize_cache(scales, torch.float64, *(stored[p] for p in PARTS))
        for p, want in zip(PARTS, wanted, strict=True):
            assert torch.equal(read[p][valid], want[valid]), (fmt, g, p)
            theirs = scales.of(p)
            pick = (lambda s: s[valid]) if theirs.dim() >= 2 else (lambda s: s)
            assert torch.equal(pick(ours[p]), pick(theirs)), (fmt, g, p)
        # the study's LRKV fp8 decode is quantization_cost's fp8 path
        ref = fc.decode(spec, weights, q, cache, lengths)
        m = error_metrics(fc.fp8_decode(spec, weights, q, cache, lengths, fmt, g), ref)
        c = quantization_cost(q, FactoredCache(*(cache[p] for p in PARTS), lengths), weights.basis_k,
                              weights.basis_v, scale=spec.scale, fmt=fmt, granularity=g)
        assert (m.max_abs, m.mean_abs, m.sqnr_db) == (c.max_abs, c.mean_abs, c.sqnr_db)


def test_scale_counts_match_the_written_scales_and_lrkv_accounting():
    for family in fc.FAMILIES:
        spec, _, _, cache, lengths = setup(family)
        B, T = lengths.shape[0], cache[next(iter(cache))].shape[1]
        for g in GRANULARITIES:
            _, scales = fc.quantize_family_cache(family, cache, lengths, E4M3, g)
            fixed = sum(s.numel() for s in scales.values() if s.dim() < 2)
            per_token = sum(s.numel() // (B * T) for s in scales.values() if s.dim() >= 2)
            assert fc.scale_floats(family, spec, g) == (fixed, per_token), (family, g)
            if family == "lrkv":
                assert (fixed, per_token) == fp8_scale_elements(spec, g)


# ----------------------------------------------------------------------------- the cost
def on_grid(shape, k_token: torch.Tensor, g: torch.Generator) -> torch.Tensor:
    """Entries that e4m3 stores exactly under every granularity: e4m3 values (binades 2^-3 …
    2^7, all 3 mantissa bits) with a ±448 in every row of the last axis, times 2^k per token
    (k_token [B, T] in {-1, 0, 1}): each amax is 448 · 2^k, so each scale is a power of two
    and a power-of-two rescale of at most 2^-2 keeps every value a normal e4m3 value."""
    e = torch.randint(-3, 8, shape, generator=g).to(torch.float64)
    m = torch.randint(0, 8, shape, generator=g).to(torch.float64)
    sign = torch.randint(0, 2, shape, generator=g).to(torch.float64) * 2 - 1
    v = sign * (1 + m / 8) * torch.exp2(e)
    v[..., 0] = 448.0 * sign[..., 0]
    return v * torch.exp2(k_token.to(torch.float64)).reshape(*k_token.shape, *([1] * (len(shape) - 2)))


def grid_cache(family: str, lengths: torch.Tensor, t_max: int, seed: int = 3) -> dict[str, torch.Tensor]:
    spec, B = SPECS[family], lengths.shape[0]
    g = torch.Generator().manual_seed(seed)
    k = torch.randint(-1, 2, (B, t_max), generator=g)
    widths = {"shared_k": (spec.head_dim,), "shared_v": (spec.head_dim,),
              "latent_k": (spec.n_heads, spec.rank), "latent_v": (spec.n_heads, spec.rank),
              "k": (spec.n_kv_heads, spec.head_dim), "v": (spec.n_kv_heads, spec.head_dim),
              "latent": (spec.latent_dim,)}
    valid = torch.arange(t_max)[None, :] < lengths[:, None]
    cache = {}
    for name in fc.LAYOUTS[family]:
        t = on_grid((B, t_max, *widths[name]), k, g) / 64  # an exact power-of-two rescale
        cache[name] = torch.where(valid.reshape(B, t_max, *([1] * (t.dim() - 2))), t, float("nan"))
    return cache


@pytest.mark.parametrize("family", fc.FAMILIES)
def test_cost_is_zero_on_a_cache_already_on_the_e4m3_grid_and_not_for_e5m2(family):
    spec, weights, q, _, _ = setup(family)  # q [2, H, d_h]
    lengths = torch.tensor([12, 7], dtype=torch.int32)  # NaN garbage past 7 in the second sequence
    cache = grid_cache(family, lengths, 12)
    for g in GRANULARITIES:
        exact = fc.family_cost(spec, weights, q, cache, lengths, E4M3, g)
        assert exact.max_abs == 0 and exact.mean_abs == 0 and exact.sqnr_db == math.inf, (family, g)
        lossy = fc.family_cost(spec, weights, q, cache, lengths, E5M2, g)  # 2 mantissa bits, not 3
        assert lossy.max_abs > 0 and math.isfinite(lossy.sqnr_db), (family, g)


@pytest.mark.parametrize("family", fc.FAMILIES)
def test_e5m2_costs_more_than_e4m3_at_per_token(family):
    spec, weights, q, cache, lengths = setup(family, batch=4, t_max=32)
    e4 = fc.family_cost(spec, weights, q, cache, lengths, E4M3, "per_token")
    e5 = fc.family_cost(spec, weights, q, cache, lengths, E5M2, "per_token")
    assert 0 < e4.mean_abs < e5.mean_abs and e4.max_abs < e5.max_abs
    assert e5.sqnr_db < e4.sqnr_db - 2  # one mantissa bit fewer: ~6 dB in expectation


@pytest.mark.parametrize("family", fc.FAMILIES)
def test_an_outlier_token_costs_per_tensor_the_other_tokens_but_not_per_token(family):
    """An outlier token 2^16 times the others in sequence 1: a per_tensor (or per_head) scale
    calibrated over the batch then puts sequence 0's ordinary entries below e4m3's smallest
    normal (2^-6 of the scale), where the grid is coarse; per-token scales never see it.
    Sequence 0's output is judged, so the outlier's own attention does not enter."""
    spec, weights = SPECS[family], weights_of(family)
    x, lengths = fc.draw_activations(2, 32, TINY.d_model, seed=0, outliers=fc.NO_OUTLIERS)
    x_out = x.clone()
    x_out[1, 0] *= 2.0**16
    q, cache = fc.project(spec, weights, x, lengths)
    q_out, cache_out = fc.project(spec, weights, x_out, lengths)
    ref = fc.decode(spec, weights, q, cache, lengths)[0]
    sqnr = {}
    for g in GRANULARITIES:
        plain = fc.fp8_decode(spec, weights, q, cache, lengths, E4M3, g)[0]
        hit = fc.fp8_decode(spec, weights, q_out, cache_out, lengths, E4M3, g)[0]
        if g in ("per_token", "per_token_head"):
            assert torch.equal(plain, hit), g  # sequence 0's scales are its own tokens'
        sqnr[g] = error_metrics(plain, ref).sqnr_db, error_metrics(hit, ref).sqnr_db
    assert sqnr["per_tensor"][1] < sqnr["per_tensor"][0] - 3
    assert sqnr["per_tensor"][1] < sqnr["per_token"][1] - 3


# ----------------------------------------------------------------------------- the report
def table_rows(text: str) -> list[list[str]]:
    """The cells of the first Markdown table's body."""
    lines = text.split("\n\n")[1].splitlines()[2:]
    return [[c.strip() for c in line.strip("|").split("|")] for line in lines]


def test_markdown_has_one_row_per_family_format_and_granularity():
    result = fc.run_study(TINY, batch=2, t_max=6, seed=1, draws=2)
    text = fc.markdown(result)
    rows = table_rows(text)
    fmts = [str(f).removeprefix("torch.") for f in FP8_FORMATS]
    keys = [(r[0].split()[0], r[1], r[2]) for r in rows]
    assert sorted(keys) == sorted(product(fc.FAMILIES, fmts, GRANULARITIES))
    mla_rows = {r[2]: r[3] for r in rows if r[0].startswith("mla")}
    assert mla_rows["per_head"] == "per_tensor" and mla_rows["per_token_head"] == "per_token"
    for r in result["rows"]:
        assert len(r.draws) == 2 and r.sqnr_min_db <= r.sqnr_db <= r.sqnr_max_db
        assert r.max_abs_rel == max(c.max_abs_rel for c in r.draws) > 0
    pivot = text.split("\n\n")[3].splitlines()[2:]
    assert len(pivot) == len(fc.FAMILIES) * len(FP8_FORMATS)


def test_cli_writes_the_table_and_json(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(fc.PAPER_SCALES, "tiny", TINY)
    md, js = tmp_path / "t.md", tmp_path / "t.json"
    rc = fc.main(["--scale", "tiny", "--batch", "1", "--t-max", "4", "--draws", "1", "--no-outliers",
                  "--markdown", str(md), "--json", str(js)])
    out, err = capsys.readouterr()
    assert rc == 0 and md.read_text(encoding="utf-8") == out
    assert len(err.strip().splitlines()) == len(fc.FAMILIES) * len(FP8_FORMATS) + 1  # a line per family/format
    data = json.loads(js.read_text(encoding="utf-8"))
    assert data["meta"]["outliers"]["tokens"] == 0 and len(data["rows"]) == 32


@pytest.mark.parametrize("argv", [
    ["--batch", "0"], ["--batch", "two"], ["--t-max", "1"], ["--seed", "-1"], ["--draws", "0"],
    ["--scale", "3B"], ["--unknown"], ["--outliers=yes"],
])
def test_cli_bad_input_exits_2(argv, capsys):
    with pytest.raises(SystemExit) as e:
        fc.main(argv)
    assert e.value.code == 2
    assert "error:" in capsys.readouterr().err


# quantization_cost: the fp8 path against the float64 oracle on the unquantized cache
QC_SCALE = 8**-0.5


def _qc(inp: dict, **kw):
    """quantization_cost on a kernel-input dict's cache."""
    cache = FactoredCache(*(inp[p] for p in PARTS), inp["lengths"])
    return quantization_cost(inp["q"], cache, inp["basis_k"], inp["basis_v"], scale=QC_SCALE, **kw)


def test_quantization_cost_is_positive_finite_and_larger_for_e5m2():
    inp = random_factored_inputs(B=3, T=16, H=3, d_h=8, r=3, lengths=[16, 11, 7], seed=4)
    costs = {}
    for fmt in (E4M3, E5M2):
        for g in (PER_TENSOR, PER_TOKEN_HEAD):
            c = _qc(inp, fmt=fmt, granularity=g)
            assert 0 < c.mean_abs <= c.max_abs and math.isfinite(c.max_abs) and math.isfinite(c.sqnr_db)
            assert c.sqnr_db > 0
            costs[fmt, g] = c
    for g in (PER_TENSOR, PER_TOKEN_HEAD):  # fewer mantissa bits: larger error, lower SQNR
        e4, e5 = costs[E4M3, g], costs[E5M2, g]
        assert e5.max_abs > e4.max_abs and e5.mean_abs > e4.mean_abs and e5.sqnr_db < e4.sqnr_db
