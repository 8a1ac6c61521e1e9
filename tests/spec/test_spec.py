"""AttentionSpec validation, presets and the cache / parameter / compute accounting."""

from fractions import Fraction

import pytest
import torch

from lrkv import spec as S
from lrkv.spec import AttentionSpec


# ----------------------------------------------------------------------------- validation
@pytest.mark.parametrize(
    "build, field",
    [
        (lambda: AttentionSpec.lrkv(4, 16, -1), "rank"),
        (lambda: AttentionSpec.lrkv(4, 15, 2, rope="exact"), "head_dim"),
        (lambda: AttentionSpec.lrkv(4, 16, 3, rope="aligned"), "rank"),
        (lambda: AttentionSpec.lrkv(4, 16, 18, rope="aligned"), "rank"),
        (lambda: AttentionSpec.lrkv(4, 16, 3, rope="latent"), "rank"),
        (lambda: AttentionSpec.lrkv(4, 16, 2, rope="sideways"), "rope"),
        (lambda: AttentionSpec("lrkv", 4, 16, rank=2, n_kv_heads=2), "n_kv_heads"),
        (lambda: AttentionSpec.gqa(6, 16, 4), "n_kv_heads"),
        (lambda: AttentionSpec("mqa", 4, 16, n_kv_heads=2), "n_kv_heads"),
        (lambda: AttentionSpec.mha(0, 16), "n_heads"),
        (lambda: AttentionSpec.mla(4, 16, 0), "latent_dim"),
        (lambda: AttentionSpec.mla(4, 16, 8, rope_dim=3), "rope_dim"),
        (lambda: AttentionSpec.mlra(4, 16, 8, n_latent_heads=4, n_branches=3), "n_branches"),
        (lambda: AttentionSpec("attn", 4, 16), "family"),
        (lambda: AttentionSpec.lrkv(4, 16, 2, rope_theta=-1.0), "rope_theta"),
        (lambda: AttentionSpec.mha(4, 16, rank=3), "rank"),
    ],
)
def test_invalid_specs_name_the_field(build, field):
    with pytest.raises((ValueError, TypeError), match=field):
        build()


def test_non_int_field_is_a_type_error():
    with pytest.raises(TypeError, match="rank"):
        AttentionSpec.lrkv(4, 16, 2.0)


def test_spec_is_frozen_and_round_trips():
    s = AttentionSpec.lrkv(18, 128, 55, rope="exact", qk_norm=True)
    with pytest.raises(Exception):
        s.rank = 3
    assert AttentionSpec.from_dict(s.to_dict()) == s
    assert s.d_model == 18 * 128 and s.scale == 128**-0.5
    with pytest.raises(ValueError, match="unknown"):
        AttentionSpec.from_dict({**s.to_dict(), "bogus": 1})


# ----------------------------------------------------------------------------- presets
def test_paper_presets_table7():
    ranks = {k: v.rank for k, v in S.PAPER_SCALES.items()}
    assert ranks == {"128M": 46, "512M": 51, "1.2B": 51, "2.5B": 55, "6.3B": 54}
    assert {k: v.gqa_kv_heads for k, v in S.PAPER_SCALES.items() if k != "512M"} == {
        "128M": 3, "1.2B": 4, "2.5B": 6, "6.3B": 2}
    assert {k: v.mla_latent for k, v in S.PAPER_SCALES.items() if k != "512M"} == {
        "128M": 128, "1.2B": 256, "2.5B": 384, "6.3B": 1024}
    assert S.preset("2.5B").n_layers == 18
    for p in S.PAPER_SCALES.values():
        assert p.d_model == p.n_heads * p.head_dim
        for fam in ("mha", "gqa", "mqa", "mla", "mlra", "lrkv"):
            if fam == "mlra" and p.n_heads % 1:
                continue
            assert p.spec(fam).family == fam
    with pytest.raises(ValueError, match="unknown paper scale"):
        S.preset("7B")


@pytest.mark.parametrize("label, percent", [("128M", "52.60"), ("1.2B", "48.18"), ("2.5B", "48.52"), ("6.3B", "45.31")])
def test_eq9_cache_fraction_of_presets(label, percent):
    spec = S.preset(label).spec("lrkv")
    assert f"{float(S.cache_ratio(spec)) * 100:.2f}" == percent
    assert S.cache_ratio(spec) == S.lrkv_cache_ratio(spec.n_heads, spec.head_dim, spec.rank)


# ----------------------------------------------------------------------------- cache accounting
def test_elements_per_family():
    assert S.cache_elements(AttentionSpec.mha(18, 128)) == 4608
    assert S.cache_elements(AttentionSpec.gqa(18, 128, 6)) == 1536
    assert S.cache_elements(AttentionSpec.mqa(18, 128)) == 256
    assert S.cache_elements(AttentionSpec.lrkv(18, 128, 55)) == 2236
    assert S.cache_elements(AttentionSpec.mla(128, 128, 512, rope_dim=64)) == 576  # DeepSeek-V3
    assert S.cache_elements(AttentionSpec.mlra(128, 128, **S.MLRA4)) == 576
    qkn = AttentionSpec.lrkv(18, 128, 55, qk_norm=True)
    assert S.cache_elements(qkn) == 2236 + 18
    assert S.cache_elements(qkn, include_key_scale=False) == 2236
    assert S.key_scale_overhead(qkn) == Fraction(1, 2 * 128)


def test_whole_model_bytes_review_example():
    # The review's 2.5B example: 18 layers, bf16, 2048 tokens: MHA 324 MiB, rank 55 157.21875 MiB.
    p = S.preset("2.5B")
    mha = S.model_cache_bytes(p.spec("mha"), p.n_layers, batch=1, seq_len=2048)
    lr = S.model_cache_bytes(p.spec("lrkv"), p.n_layers, batch=1, seq_len=2048)
    assert mha == 339_738_624 and mha / 2**20 == 324
    assert lr / 2**20 == 157.21875
    assert S.model_cache_bytes(p.spec("lrkv"), p.n_layers, lengths=[2048, 0]) == lr
    with pytest.raises(ValueError):
        S.model_cache_bytes(p.spec("lrkv"), p.n_layers, batch=1)


def test_rank_thresholds():
    assert S.break_even_rank(18, 128) == 120  # r < 128·17/18 = 120.89
    assert S.lrkv_cache_ratio(18, 128, 121) >= 1 > S.lrkv_cache_ratio(18, 128, 120)
    assert S.lrkv_cache_ratio(6, 128, 128) == 1 + Fraction(1, 6)  # r = d_h costs 1 + 1/H
    assert S.rank_ceiling(18, 128, Fraction(1, 2)) == 56
    assert S.rank_ceiling(18, 128, Fraction(1, 3)) == 35  # the GQA-6 payload
    with pytest.raises(ValueError, match="floor"):
        S.rank_ceiling(18, 128, Fraction(1, 20))


def test_padding_and_tp():
    spec = AttentionSpec.lrkv(18, 128, 55)
    assert S.padded_rank(55, 64) == 64 and S.padded_rank(55, 1) == 55
    assert f"{float(S.cache_ratio(spec, rank_align=64)) * 100:.2f}" == "55.56"
    s32 = AttentionSpec.lrkv(32, 128, 54)
    assert f"{float(S.cache_ratio(s32)) * 100:.1f}" == "45.3"
    assert S.tp_cache_ratio(s32, 4) == Fraction(4, 32) + Fraction(54, 128)
    assert f"{float(S.tp_cache_ratio(s32, 4)) * 100:.1f}" == "54.7"
    assert S.per_device_cache_elements(AttentionSpec.mlra(128, 128, **S.MLRA4), 4) == 192
    assert S.per_device_cache_elements(AttentionSpec.mla(128, 128, 512, rope_dim=64), 4) == 576
    assert S.per_device_cache_elements(AttentionSpec.gqa(32, 128, 2), 4) == 256  # replicated
    with pytest.raises(ValueError, match="tp"):
        S.per_device_cache_elements(s32, 3)


def test_parameters_and_arithmetic():
    spec = S.preset("2.5B").spec("lrkv")
    assert S.kv_param_ratio(spec) == S.lrkv_param_ratio(18, 128, 55, 2304)
    assert f"{float(S.kv_param_ratio(spec)) * 100:.1f}" == "50.9"
    assert S.decode_arithmetic_ratio(spec, 4096) == 1 + Fraction(55, 128) + Fraction(55, 4096)
    assert S.decode_arithmetic_ratio(AttentionSpec.mha(18, 128), 100) == 1
    assert S.decode_bytes(spec, 1000, "bf16", batch=2) == 2 * 1000 * 2236 * 2


def test_dtypes():
    assert S.dtype_bytes("bf16") == 2 and S.dtype_bytes(torch.float64) == 8
    assert S.dtype_name("fp16") == "float16"
    with pytest.raises(TypeError, match="unknown dtype"):
        S.dtype_bytes("int3")
