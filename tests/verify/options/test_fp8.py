import pytest

from lrkv.verify.case import Case, Fp8
from lrkv.verify.grids import BASE
from lrkv.verify.options import fp8


def fp8_case(level="kernel", dtype="bfloat16", lengths=(9, 8), **kw):
    return Case.flat(level, BASE, dtype, lengths, 12, **kw)


@pytest.mark.parametrize("kw, match", [
    (dict(cache_format="fp8", scale_granularity="per_head"), "cache_format must be one of"),
    (dict(cache_format="float8_e5m2", scale_granularity="per_row"), "scale_granularity must be one of"),
    (dict(scale_granularity="per_head"), "scale_granularity applies to an fp8 cache only"),
    (dict(cache_format="float8_e5m2", scale_granularity="per_head", dtype="float64"), "compute dtype"),
    (dict(level="tp", lengths=(12, 12), cache_format="float8_e5m2", scale_granularity="per_head"),
     "cache_format and outliers apply"),
    (dict(cache_format="float8_e5m2", scale_granularity="per_head", fp8_compute="pq"), "fp8_compute must be one of"),
    (dict(fp8_compute="q"), "fp8_compute applies to an fp8 cache"),
    (dict(level="layer", cache_format="float8_e5m2", scale_granularity="per_head", fp8_compute="q"),
     "fp8_compute applies to an fp8 cache at the levels"),
])
def test_a_bad_fp8_option_is_refused_naming_the_field(kw, match):
    kw.setdefault("dtype", "bfloat16")
    with pytest.raises(ValueError, match=match):
        fp8_case(**kw)


def test_the_fp8_option_owns_its_flags_shapes_and_twins():
    case = fp8_case(cache_format="float8_e4m3fn", scale_granularity="per_token", outliers=True, fp8_compute="qp")
    assert case.fp8 == Fp8("float8_e4m3fn", "per_token", True, "qp") and case.cache_fp8 == "float8_e4m3fn/per_token"
    assert case.id.endswith("+e4m3fn.per_token+outliers+fp8compute.qp")
    assert fp8.twin_value(case, "cache") == "float8_e4m3fn/per_token" and fp8.twin_value(case, "fp8_compute") == "qp"
    plain = fp8.twin_apply(case.fp8, {"cache": fp8.NONE})
    assert plain == Fp8(outliers=True)  # no fp8 cache: no roundings either; the outliers stay
    assert set(fp8.twin_candidates(case, "fp8_compute")) == {"q", "p", fp8.NONE}
    only = fp8_case(outliers=True)  # outliers alone (a kernel case at τ): the option, without a cache
    assert only.fp8 == Fp8(outliers=True) and not only.cache_fp8 and "cache" not in only.fp8.shapes()
