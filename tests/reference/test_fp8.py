"""The fp8 quantizer of lrkv.reference.fp8 against an independent bit-level reference.

The reference here knows nothing of exponents or ulps: it enumerates all 256 bit patterns of
a format, keeps the finite ones as float64 and picks, for each input, the nearest of them —
ties to the pattern with an even last bit (the mantissa's last bit: round half to even) —
after clamping to ±max finite (saturation)."""

from __future__ import annotations

import pytest
import torch

from lrkv.reference.fp8 import (
    E4M3, E5M2, FP8_FORMATS, PER_HEAD, PER_TENSOR, PER_TOKEN, PER_TOKEN_HEAD, dequantize, dynamic_scale,
    expand_scale, fp8_format, nan_filled, part_granularity, quantize, reduced_dims, scale_shape,
)

FMT_IDS = {E4M3: "e4m3fn", E5M2: "e5m2"}


def all_patterns(fmt) -> tuple[torch.Tensor, torch.Tensor]:
    """(bits uint8 [256], values float64 [256]) of every pattern of the format."""
    bits = torch.arange(256, dtype=torch.int32).to(torch.uint8)
    return bits, bits.view(fmt).to(torch.float64)


def reference_rne(x: torch.Tensor, fmt) -> torch.Tensor:
    """Saturating round-to-nearest-even by exhaustive search over the finite patterns.  # float64"""
    bits, vals = all_patterns(fmt)
    finite = torch.isfinite(vals)
    bits, vals = bits[finite].to(torch.int64), vals[finite]
    top = vals.max()
    x = x.to(torch.float64).clamp(-top, top)
    dist = (x[:, None] - vals[None, :]).abs()  # [n, finite patterns]
    best = dist.min(dim=1, keepdim=True).values
    tied = dist == best
    even = tied & (bits[None, :] % 2 == 0)
    pick = torch.where(even.any(dim=1), even.float().argmax(dim=1), tied.float().argmax(dim=1))
    out = vals[pick]
    return torch.where(out == 0, torch.copysign(torch.zeros_like(out), x), out)  # the sign of zero follows x


def probes(fmt) -> torch.Tensor:
    """Every finite value, every midpoint between neighbours (the ties), each nudged by ±1e-12
    relative and ±2^-30 relative (the float32 double-rounding trap), and outliers."""
    _, vals = all_patterns(fmt)
    v = torch.unique(vals[torch.isfinite(vals)])  # sorted, -max … max
    mid = (v[1:] + v[:-1]) / 2
    nudges = [mid * (1 + d) for d in (1e-12, -1e-12, 2.0**-30, -(2.0**-30))]
    top = v.max()
    outliers = torch.tensor([1000.0, -1000.0, 1e30, -1e30], dtype=torch.float64) * top
    return torch.cat([v, mid, *nudges, outliers, torch.tensor([top * (1 + 2.0**-20), 1e-300, -1e-300])])


@pytest.mark.parametrize("fmt", FP8_FORMATS, ids=FMT_IDS.get)
def test_quantize_is_saturating_rne_against_the_bit_level_reference(fmt):
    x = probes(fmt)
    got = quantize(x, fmt).to(torch.float64)
    want = reference_rne(x, fmt)
    assert torch.isfinite(got).all()
    bad = got != want
    assert not bad.any(), list(zip(x[bad].tolist()[:5], got[bad].tolist()[:5], want[bad].tolist()[:5]))
    assert torch.equal(torch.signbit(got), torch.signbit(want))


@pytest.mark.parametrize("fmt", FP8_FORMATS, ids=FMT_IDS.get)
def test_every_finite_pattern_round_trips_bit_for_bit(fmt):
    bits, vals = all_patterns(fmt)
    finite = torch.isfinite(vals)
    back = quantize(vals[finite], fmt).view(torch.uint8)
    assert torch.equal(back, bits[finite])


def test_ties_go_to_even():
    # e4m3fn near 1: the grid is 1, 1.125, 1.25; e5m2: 1, 1.25, 1.5
    x = torch.tensor([1.0625, 1.1875, -1.0625, 1.0625 + 1e-12], dtype=torch.float64)
    assert quantize(x, E4M3).to(torch.float64).tolist() == [1.0, 1.25, -1.0, 1.125]
    x = torch.tensor([1.125, 1.375], dtype=torch.float64)
    assert quantize(x, E5M2).to(torch.float64).tolist() == [1.0, 1.5]


def test_float64_input_is_rounded_once_not_through_float32():
    """torch's float64 → fp8 cast rounds via float32: 1.0625 + 1e-12 (just above the tie
    between 1 and 1.125) becomes 1.0 there; one rounding gives 1.125."""
    x = torch.tensor([1.0625 + 1e-12], dtype=torch.float64)
    assert float(quantize(x, E4M3)) == 1.125


@pytest.mark.parametrize("fmt, top", [(E4M3, 448.0), (E5M2, 57344.0)], ids=["e4m3fn", "e5m2"])
def test_outliers_saturate_at_max_finite(fmt, top):
    assert fp8_format(fmt).max_finite == top == torch.finfo(fmt).max
    x = torch.tensor([1.0, -1.0, 0.5], dtype=torch.float32) * top * 1000
    got = quantize(x, fmt).to(torch.float32)
    assert got.tolist() == [top, -top, top]
    if fmt == E5M2:  # a plain cast overflows e5m2 to inf; e4m3fn has no inf (NaN or saturation, by version)
        assert torch.isinf(x.to(fmt).to(torch.float32)).all()
    assert not torch.isfinite(torch.tensor([float("nan")]).to(fmt).to(torch.float32)).any()


@pytest.mark.parametrize("fmt", FP8_FORMATS, ids=FMT_IDS.get)
def test_nan_fill_is_the_nan_bit_pattern(fmt):
    t = nan_filled((2, 3), fmt)
    assert t.dtype == fmt and (t.view(torch.uint8) == 0x7F).all() and t.to(torch.float32).isnan().all()


@pytest.mark.parametrize("fmt", FP8_FORMATS, ids=FMT_IDS.get)
def test_dequantize_is_exact_in_float64(fmt):
    """Every finite pattern times awkward float32 scales: float64 holds the product exactly
    (checked against exact rational arithmetic)."""
    from fractions import Fraction

    _, vals = all_patterns(fmt)
    stored = vals[torch.isfinite(vals)].to(fmt)
    for s in (0.1, 3.0e-7, 12345.678, 2.0**-120):
        scale = torch.tensor(s, dtype=torch.float32)
        got = dequantize(stored, scale)
        assert got.dtype == torch.float64
        exact = [Fraction(float(v)) * Fraction(float(scale)) for v in stored.to(torch.float64)]
        assert [Fraction(float(g)) for g in got] == exact


def test_dequantize_rounds_once_to_a_lower_dtype():
    stored = torch.tensor([1.5, -3.0], dtype=torch.float64).to(E4M3)
    scale = torch.tensor(0.1, dtype=torch.float32)
    assert torch.equal(dequantize(stored, scale, dtype=torch.bfloat16), dequantize(stored, scale).to(torch.bfloat16))


def test_granularity_shapes_and_the_head_drop_rule():
    assert part_granularity(PER_HEAD, "shared_k") == PER_TENSOR
    assert part_granularity(PER_TOKEN_HEAD, "shared_v") == PER_TOKEN
    assert part_granularity(PER_TOKEN_HEAD, "latent_k") == PER_TOKEN_HEAD
    kw = dict(rows=2, slots=5, heads=3)
    assert scale_shape(PER_TENSOR, "latent_k", **kw) == ()
    assert scale_shape(PER_HEAD, "latent_k", **kw) == (3,) and scale_shape(PER_HEAD, "shared_k", **kw) == ()
    assert scale_shape(PER_TOKEN, "latent_v", **kw) == (2, 5) and scale_shape(PER_TOKEN, "shared_v", **kw) == (2, 5)
    assert scale_shape(PER_TOKEN_HEAD, "latent_v", **kw) == (2, 5, 3)
    assert scale_shape(PER_TOKEN_HEAD, "shared_k", **kw) == (2, 5)
    with pytest.raises(ValueError, match="granularity must be one of"):
        scale_shape("per_channel", "latent_k", **kw)


def test_broadcast_rule():
    assert expand_scale(torch.ones(3), PER_HEAD, 4).shape == (3, 1)  # [H] right-aligned onto [.., H, r]
    assert expand_scale(torch.ones(2, 5), PER_TOKEN, 4).shape == (2, 5, 1, 1)
    assert expand_scale(torch.ones(2, 5), PER_TOKEN, 3).shape == (2, 5, 1)
    assert expand_scale(torch.ones(2, 5, 3), PER_TOKEN_HEAD, 4).shape == (2, 5, 3, 1)
    assert expand_scale(torch.ones(()), PER_TENSOR, 4).shape == ()
    # per-head scaling really scales head h by scale[h]
    stored = torch.ones(2, 5, 3, 4, dtype=torch.float64).to(E4M3)
    got = dequantize(stored, torch.tensor([1.0, 2.0, 4.0]), PER_HEAD)
    assert torch.equal(got[0, 0, :, 0], torch.tensor([1.0, 2.0, 4.0], dtype=torch.float64))


@pytest.mark.parametrize("fmt", FP8_FORMATS, ids=FMT_IDS.get)
@pytest.mark.parametrize("granularity, part, shape", [
    (PER_TOKEN, "shared_k", (2, 5)), (PER_TOKEN, "latent_k", (2, 5)), (PER_TOKEN_HEAD, "latent_v", (2, 5, 3)),
    (PER_TOKEN_HEAD, "shared_v", (2, 5)), (PER_HEAD, "latent_k", (3,)), (PER_TENSOR, "latent_k", ()),
])
def test_dynamic_scales_map_each_groups_amax_to_max_finite(fmt, granularity, part, shape):
    g = torch.Generator().manual_seed(0)
    full = (2, 5, 8) if part.startswith("shared") else (2, 5, 3, 4)
    spread = torch.logspace(-3, 3, full[1], dtype=torch.float64)  # tokens 1e-3 … 1e3: one scale could not fit all
    x = torch.randn(full, generator=g, dtype=torch.float64) * spread.reshape(1, -1, *[1] * (len(full) - 2))
    s = dynamic_scale(x, fmt, granularity, part=part)
    assert s.shape == shape and s.dtype == torch.float32
    g_part = part_granularity(granularity, part)
    stored = quantize(x, fmt, s, g_part).to(torch.float64)
    top = fp8_format(fmt).max_finite
    dims = reduced_dims(granularity, part, x.dim())
    amax = stored.abs().amax(dim=dims)
    assert torch.equal(amax, torch.full_like(amax, top))  # each group's amax lands on max finite exactly
    # and the amax element is not clipped: it dequantizes back within float32's rounding of the scale
    back = dequantize(stored.to(fmt), s, g_part)
    assert torch.allclose(back.abs().amax(dim=dims), x.abs().amax(dim=dims), rtol=2.0**-23, atol=0)


def test_dynamic_scale_of_zeros_is_one():
    x = torch.zeros(2, 3, 4, 5)
    s = dynamic_scale(x, E4M3, PER_TOKEN_HEAD, part="latent_k")
    assert torch.equal(s, torch.ones(2, 3, 4))
    assert (quantize(x, E4M3, s, PER_TOKEN_HEAD).to(torch.float32) == 0).all()


@pytest.mark.parametrize("bad", [torch.ones(3, dtype=torch.int32), torch.ones(3, dtype=E4M3)])
def test_quantize_refuses_non_float_input(bad):
    with pytest.raises(TypeError, match="quantize takes a float tensor"):
        quantize(bad, E4M3)


def test_unknown_format_is_a_type_error():
    with pytest.raises(TypeError, match="fp8 format must be one of"):
        quantize(torch.ones(2), torch.bfloat16)
