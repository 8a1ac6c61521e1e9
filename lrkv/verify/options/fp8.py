"""An fp8 cache (DESIGN §4 "FP8 caches"; the kernel levels and layer) and the kernels' FA3-style
fp8 compute: format, scale granularity, outliers, and the roundings of q / the softmax weights."""

from __future__ import annotations

from dataclasses import dataclass, replace

from . import Feature
from ...checks import check_bool, check_choice

KERNEL_LEVELS = ("kernel", "kernel-paged", "kernel-extend")  # the kernel contracts of DESIGN §4
LEVELS = (*KERNEL_LEVELS, "layer")  # an fp8 cache: the kernels read it, the layer step also writes it
CACHE_FORMATS = ("float8_e4m3fn", "float8_e5m2")  # "" = the cache at τ
COMPUTE_DTYPES = ("float32", "bfloat16", "float16")  # q's dtype over an fp8 cache (the contract)
DIMS = ("cache", "fp8_compute")  # its twin dimensions (lrkv.verify.twins, features.CAPABILITY_DIMS)
NONE = "none"  # a twin dimension's value for a cache at τ / no rounding
COMPUTE_KEY = "fp8_compute"  # its JSON key, and the reference functions' keyword (lrkv.reference.lrkv)
KEYS = {"cache_format": "format", "scale_granularity": "granularity", "outliers": "outliers", COMPUTE_KEY: "compute"}


@dataclass(frozen=True)
class Fp8:
    format: str = ""  # the cache stored as this fp8 format (CACHE_FORMATS), q at τ; "" = at τ
    granularity: str = ""  # with format: per_tensor, per_head, per_token or per_token_head
    outliers: bool = False  # kernel levels: cached tokens and channels ×16; layer: the appended token ×4
    compute: str = ""  # kernel levels, fp8 cache: "q" / "p" / "qp" rounded to e4m3 too (FA3-style; err_base's)

    def check(self, case) -> None:
        from ...reference.fp8 import check_fp8_compute
        from ...spec.fp8_scales import GRANULARITIES

        check_bool("outliers", self.outliers)
        if self.format:
            check_choice("cache_format", self.format, CACHE_FORMATS)
            check_choice("scale_granularity", self.granularity, GRANULARITIES)
            if case.dtype not in COMPUTE_DTYPES:
                raise ValueError(f"an fp8 cache is read at a compute dtype {COMPUTE_DTYPES}, got dtype "
                                 f"{case.dtype!r} (q and out have it; the cache is {self.format})")
        elif self.granularity:
            raise ValueError("scale_granularity applies to an fp8 cache only: give cache_format too")
        if case.level not in LEVELS and (self.format or self.outliers):
            raise ValueError(f"cache_format and outliers apply to the levels {', '.join(LEVELS)} only")
        check_fp8_compute(self.compute)
        if self.compute and (not self.format or case.level not in KERNEL_LEVELS):
            raise ValueError(f"fp8_compute applies to an fp8 cache at the levels {', '.join(KERNEL_LEVELS)} only")

    @property
    def reference_kw(self) -> dict:
        """The roundings as the oracle's keyword: the reference functions' err_base path."""
        return {COMPUTE_KEY: self.compute}

    @property
    def label(self) -> str:
        """'<format>/<granularity>' of an fp8 cache, '' for a cache at τ."""
        return f"{self.format}/{self.granularity}" if self.format else ""

    def flags(self) -> str:
        return "".join((f"+{self.format.removeprefix('float8_')}.{self.granularity}" if self.format else "",
                        "+outliers" if self.outliers else "", f"+fp8compute.{self.compute}" if self.compute else ""))

    def shapes(self) -> dict:
        return {"cache": self.label} if self.format else {}


def with_fp8(case, compute: bool = False):
    """A drawn kernel or layer case with its cache in fp8 (lrkv.verify.strategies): format,
    granularity and outliers from the case's own seed (reproducible), τ float32 where it was
    float64 (fp8's compute dtypes: q stays at τ). compute: at the kernel levels also FA3-style
    roundings ("p", "q" or "qp", from the seed)."""
    from ...reference.fp8 import FP8_COMPUTE
    from ...spec.fp8_scales import GRANULARITIES

    n = case.seed
    rounding = FP8_COMPUTE[1 + n // 8 % 3] if compute and case.level in KERNEL_LEVELS else ""
    return case.replace(fp8=Fp8(CACHE_FORMATS[n % 2], GRANULARITIES[n // 2 % 4], n % 3 == 0, rounding),
                        dtype=case.dtype if case.dtype in COMPUTE_DTYPES else "float32")


def twin_candidates(case, dim: str) -> list[str]:
    """A twin dimension's values, nearest first: for the cache the same format at another
    granularity, the other format, then no fp8; for the compute, fewest roundings first (none
    only for a case that has some)."""
    from ...reference.fp8 import FP8_COMPUTE
    from ...spec.fp8_scales import GRANULARITIES

    me = case.fp8 or Fp8()
    if not me.format or (dim != "cache" and case.level not in KERNEL_LEVELS):
        return []
    if dim == "cache":
        return [*(f"{me.format}/{g}" for g in GRANULARITIES if g != me.granularity),
                *(f"{f}/{me.granularity}" for f in CACHE_FORMATS if f != me.format), NONE]
    return [v or NONE for v in FP8_COMPUTE if v != me.compute and (v or me.compute)]


def twin_value(case, dim: str) -> str:
    me = case.fp8 or Fp8()
    return (me.label if dim == "cache" else me.compute) or NONE


def twin_apply(me: Fp8 | None, changes: dict) -> Fp8:
    """The option with a twin's cache and compute changes (no fp8 cache: no roundings either)."""
    me = me or Fp8()
    if "cache" in changes:
        fmt, _, gran = ("" if changes["cache"] == NONE else changes["cache"]).partition("/")
        me = replace(me, format=fmt, granularity=gran, compute=me.compute if fmt else "")
    if "fp8_compute" in changes:
        me = replace(me, compute="" if changes["fp8_compute"] == NONE else changes["fp8_compute"])
    return me


def capabilities() -> list:
    """The fp8 capability features (lrkv.verify.features): a kernel may read no fp8 cache, or some."""
    from ...spec.fp8_scales import GRANULARITIES

    def fp8(c) -> Fp8:
        return c.fp8 or Fp8()

    feats = [Feature(f"cache={fmt}", LEVELS, lambda c, f=fmt: fp8(c).format == f,
                     f"the cache stored as {fmt}, dequantized on load", dim="cache") for fmt in CACHE_FORMATS]
    feats += [Feature(f"scales={g}", LEVELS, lambda c, g=g: fp8(c).granularity == g,
                      f"fp8 scales {g} (read from the right axis, for the right part)", dim="cache")
              for g in GRANULARITIES]
    # each format with each granularity, at every kernel level (not the layer's 4 cases)
    feats += [Feature(f"cache={fmt}.{g}", KERNEL_LEVELS, lambda c, f=fmt, g=g: fp8(c).label == f"{f}/{g}",
                      f"the cache as {fmt} with {g} scales", dim="cache")
              for fmt in CACHE_FORMATS for g in GRANULARITIES]
    # an FA3-style kernel rounds q and/or the weights to e4m3 too: a capability, since a kernel
    # that rounds declines the exact cases (and is run at their compute twin)
    feats.append(Feature("fp8 compute", KERNEL_LEVELS, lambda c: bool(fp8(c).compute),
                         "q and/or the softmax weights rounded to e4m3 (err_base carries the rounding)",
                         dim="fp8_compute", needs=tuple(f"cache={fmt}" for fmt in CACHE_FORMATS)))
    return feats
