"""Deployment sizing from the cache formulas (paper Eqs. 8–9; the `lrkv cache` verb).

Everything here is built on lrkv.spec.accounting: per-token elements (`cache_elements`,
`per_device_cache_elements`) times layers, tokens and bytes per scalar. What this module
adds is the arithmetic a serving engineer does next:

  whole-model bytes     N · B · T · b · elements                      (Eq. 8 for lrkv)
  per-device bytes      N · B · T · b · per-device elements under P-way TP
  tokens that fit       floor((budget − N·4·fixed scales) / (N · (b · per-device elements + 4 · per-token
                        scales)))  (B·T summed over sequences; the scales of an fp8 LRKV cache when
                        asked for, per device: `per_device_fp8_scale_elements`)
  padded bytes          every cached tensor's innermost width rounded up to `align`
  rank ceiling          floor(d_h (c − 1/H)) for a target fraction c of MHA (Eq. 9 solved for r)
  fp8 scales            N · 4 · (fixed + tokens · per token) bytes of float32 scales of an fp8
                        LRKV cache (`fp8_scale_elements`), beside the bytes fp8 saves over bf16

The proofs cross-check these functions against the closed forms (`planner_formulas`).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction

from lrkv.checks import check_choice, check_int

from .accounting import (
    break_even_rank, cache_elements, fp8_scale_bytes, fp8_scale_elements, mha_cache_elements, padded_rank,
    per_device_cache_elements, per_device_fp8_scale_elements, rank_ceiling,
)
from .attention import AttentionSpec
from .dtypes import FP8_DTYPES, as_dtype, dtype_bytes, dtype_name
from .fp8_scales import GRANULARITIES, SCALE_BYTES
from .presets import MLRA4, PaperScale

GIB = 2**30
# Upper bound of every count `lrkv cache` takes (tokens a sequence, batch, model sizes):
# 2^31 - 1, what the decode contract's int32 lengths can hold.
MAX_COUNT = 2**31 - 1
# The peers shown beside LRKV, in the order of the table.
PEERS: tuple[str, ...] = ("mha", "gqa", "mqa", "mla", "mlra", "lrkv")
_COUNT = re.compile(r"^\s*(\d+)\s*([kKmM]?)\s*$")
_SUFFIX = {"": 1, "k": 1024, "m": 1024**2}  # 32K = 32,768 tokens, as context lengths are quoted


def parse_count(name: str, text: str) -> int:
    """'32768', '32K' (= 32,768) or '1M' (= 1,048,576) -> int; anything else is a ValueError naming `name`."""
    if not isinstance(text, str):
        raise TypeError(f"{name} must be a string such as '32K', got {type(text).__name__}")
    m = _COUNT.match(text)
    if not m:
        raise ValueError(f"{name} must be an integer with an optional K or M suffix (e.g. 32K), got {text!r}")
    return int(m.group(1)) * _SUFFIX[m.group(2).lower()]


def peer_specs(scale: PaperScale, rank: int | None = None) -> dict[str, AttentionSpec]:
    """LRKV and its peers at one paper scale: Table 7's GQA KV heads (no GQA without them: a custom
    model given no --kv-heads) and MLA latent, MLRA-4's public-code layout (4 latent heads of 128 +
    a 64-wide k_rope), LRKV at `rank` (Table 7's if None)."""
    peers = ("mha", "gqa", "mqa", "mla") if scale.gqa_kv_heads is not None else ("mha", "mqa", "mla")
    specs = {f: scale.spec(f) for f in peers}
    specs["mlra"] = scale.spec("mlra", **MLRA4)
    specs["lrkv"] = scale.spec("lrkv", rank=scale.rank if rank is None else rank)
    return specs


def model_bytes(spec: AttentionSpec, n_layers: int, tokens: int, dtype="bfloat16") -> int:
    """Whole-model cache bytes for `tokens` cached tokens (B·T summed over sequences), one device."""
    return n_layers * tokens * cache_elements(spec, include_key_scale=True) * dtype_bytes(dtype)


def per_device_bytes(spec: AttentionSpec, n_layers: int, tokens: int, dtype="bfloat16", tp: int = 1) -> int:
    """Cache bytes held by ONE of `tp` tensor-parallel devices (replicated parts counted in full)."""
    per_token = per_device_cache_elements(spec, tp, include_key_scale=True)
    return n_layers * tokens * per_token * dtype_bytes(dtype)


def tokens_that_fit(spec: AttentionSpec, n_layers: int, budget_bytes: int, dtype="bfloat16", tp: int = 1,
                    scales: str | None = None) -> int:
    """The most cached tokens (summed over the batch) whose per-device cache fits `budget_bytes`;
    with `scales` (an fp8 LRKV cache's granularity) its float32 scales count too: the fixed ones
    come off the budget, the per-token ones join each token's bytes."""
    fixed, scale_per_token = (0, 0) if scales is None else per_device_fp8_scale_elements(spec, scales, tp)
    per_token = n_layers * (per_device_cache_elements(spec, tp, include_key_scale=True) * dtype_bytes(dtype)
                            + SCALE_BYTES * scale_per_token)
    return max(0, budget_bytes - n_layers * SCALE_BYTES * fixed) // per_token


def padded_elements(spec: AttentionSpec, align: int) -> int:
    """Elements per token per layer once each cached tensor's innermost width is a multiple of
    `align` (the physical layout of a kernel that loads whole vectors: r = 55 is stored as 64)."""
    check_int("align", align, minimum=1)
    pad = lambda w: padded_rank(w, align)  # noqa: E731
    f, d_h = spec.family, spec.head_dim
    if f in ("mha", "gqa", "mqa"):
        return 2 * spec.n_kv_heads * pad(d_h)  # [B, T, n_kv, d_h] for k and v
    if f == "mla":
        return pad(spec.latent_dim) + (pad(spec.rope_dim) if spec.rope_dim else 0)
    if f == "mlra":
        return spec.n_latent_heads * pad(spec.latent_dim) + (pad(spec.rope_dim) if spec.rope_dim else 0)
    n = 2 * pad(d_h) + 2 * spec.n_heads * pad(spec.rank)  # shared [B, T, d_h], latents [B, T, H, r]
    if spec.qk_norm:
        n += pad(spec.n_heads)  # key_scale [B, T, H]
    return n


@dataclass(frozen=True)
class PlanRow:
    """One family's line of the side-by-side table."""

    family: str
    spec: str  # AttentionSpec.short()
    bytes_per_token_layer: int  # one device, all heads
    fraction_of_mha: Fraction  # Eq. 9 for lrkv
    model_bytes: int  # whole model, all devices' worth on one
    per_device_bytes: int | None  # under TP; None when the layout cannot shard at this tp
    tokens_fit: int | None  # per device, in the budget; None without a budget or when not shardable
    padded_bytes: int  # whole model, innermost widths aligned
    note: str = ""

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["fraction_of_mha"] = float(self.fraction_of_mha)
        return d


@dataclass(frozen=True)
class ScalePlan:
    """The float32 scales of LRKV's fp8 cache, and how much of fp8's saving over bf16 they take."""

    granularity: str
    bytes_per_layer: int  # fixed scales (per_tensor, per_head), one layer
    bytes_per_token_layer: int  # per-token scales (per_token, per_token_head)
    model_bytes: int  # whole model: N · (fixed + tokens · per token)
    saving_per_token_layer: int  # LRKV payload elements × (bf16 bytes − fp8 bytes)
    saving_model_bytes: int  # N · tokens · saving_per_token_layer
    share_of_saving: Fraction  # model_bytes / saving_model_bytes

    def to_dict(self) -> dict:
        d = dict(self.__dict__)
        d["share_of_saving"] = float(self.share_of_saving)
        return d


def plan_scales(spec: AttentionSpec, granularity: str, *, n_layers: int, tokens: int, dtype) -> ScalePlan:
    """Size the scales of an fp8 LRKV cache (`dtype` one of the fp8 formats) against the bytes
    the fp8 payload saves over bf16 (key_scale, kept at compute precision, is no part of it)."""
    if as_dtype(dtype) not in FP8_DTYPES:
        raise ValueError(f"scales ({granularity}) apply to an fp8 cache: dtype must be one of "
                         f"{[dtype_name(d) for d in FP8_DTYPES]}, got {dtype_name(dtype)}")
    check_choice("granularity", granularity, GRANULARITIES)
    fixed, per_token = fp8_scale_elements(spec, granularity)
    saving = cache_elements(spec, include_key_scale=False) * (dtype_bytes("bfloat16") - dtype_bytes(dtype))
    model = fp8_scale_bytes(spec, granularity, n_layers=n_layers, tokens=tokens)
    saved = n_layers * tokens * saving
    return ScalePlan(granularity=granularity, bytes_per_layer=SCALE_BYTES * fixed,
                     bytes_per_token_layer=SCALE_BYTES * per_token, model_bytes=model,
                     saving_per_token_layer=saving, saving_model_bytes=saved, share_of_saving=Fraction(model, saved))


@dataclass(frozen=True)
class Plan:
    preset: str
    n_layers: int
    batch: int
    seq_len: int
    dtype: str
    tp: int
    budget_bytes: int | None
    target_fraction: Fraction
    rank_ceiling: int | None  # largest LRKV rank within target_fraction of MHA (at most d_h); None below 1/H
    align: int
    rows: tuple[PlanRow, ...]
    warnings: tuple[str, ...] = ()  # a plan that is valid but saves nothing (the CLI prints each)
    rank_ceiling_capped: bool = False  # the formula's ceiling passed d_h; rank_ceiling is d_h
    scales: ScalePlan | None = None  # fp8 only, when asked for: LRKV's scale bytes

    def to_dict(self) -> dict:
        extra = {} if self.scales is None else {"scales": self.scales.to_dict()}  # absent unless asked for
        return {
            "schema": "lrkv.cache-plan/1", "preset": self.preset, "n_layers": self.n_layers,
            "batch": self.batch, "seq_len": self.seq_len, "tokens": self.batch * self.seq_len,
            "dtype": self.dtype, "tp": self.tp, "budget_bytes": self.budget_bytes,
            "target_fraction": float(self.target_fraction), "rank_ceiling": self.rank_ceiling,
            "align": self.align, "rows": [r.to_dict() for r in self.rows], "warnings": list(self.warnings),
            "rank_ceiling_capped": self.rank_ceiling_capped, **extra,
        }


def plan(scale: PaperScale, *, n_layers: int, batch: int, seq_len: int, dtype="bfloat16", tp: int = 1,
         rank: int | None = None, budget_bytes: int | None = None, target_fraction: Fraction = Fraction(1, 2),
         align: int = 16, families: tuple[str, ...] = PEERS, scales: str | None = None) -> Plan:
    """Size one deployment for LRKV and its peers side by side; `scales` (an fp8 `dtype` only)
    adds LRKV's fp8 scale bytes at that granularity (`plan_scales`) and counts them in LRKV's tokens
    that fit the budget. A scale without GQA KV heads has no GQA row."""
    check_int("n_layers", n_layers, minimum=1)
    check_int("batch", batch, minimum=1, maximum=MAX_COUNT)
    check_int("seq_len", seq_len, minimum=1, maximum=MAX_COUNT)
    check_int("tp", tp, minimum=1)
    check_int("align", align, minimum=1)
    if budget_bytes is not None:
        check_int("budget_bytes", budget_bytes, minimum=1)
    if rank is not None:
        check_int("rank", rank, minimum=0)
        if rank > scale.head_dim:
            raise ValueError(f"rank ({rank}) must be <= d_h ({scale.head_dim}) of {scale.label}: U_h B_h^T of a "
                             f"{scale.head_dim}-wide head has rank at most d_h")
    for f in families:
        check_choice("family", f, PEERS)
    if scale.n_heads % tp:
        raise ValueError(f"tp ({tp}) must divide the {scale.n_heads} query heads of {scale.label}")
    tokens = batch * seq_len
    b = dtype_bytes(dtype)
    specs = peer_specs(scale, rank)
    scale_plan = None if scales is None else plan_scales(specs["lrkv"], scales, n_layers=n_layers, tokens=tokens,
                                                         dtype=dtype)
    rows = []
    for f in (f for f in families if f in specs):
        s = specs[f]
        try:
            dev = per_device_bytes(s, n_layers, tokens, dtype, tp)
            own = scales if f == "lrkv" else None  # the scales are LRKV's fp8 cache's
            fit = tokens_that_fit(s, n_layers, budget_bytes, dtype, tp, own) if budget_bytes is not None else None
            note = f"tokens/device counts its fp8 scales ({scales})" if own and budget_bytes is not None else ""
        except ValueError as e:  # e.g. GQA's 6 KV heads on 4 devices: this layout does not shard evenly
            dev, fit, note = None, None, str(e)
        rows.append(PlanRow(
            family=f, spec=s.short(), bytes_per_token_layer=cache_elements(s, include_key_scale=True) * b,
            fraction_of_mha=Fraction(cache_elements(s, include_key_scale=True), mha_cache_elements(s)),
            model_bytes=model_bytes(s, n_layers, tokens, dtype), per_device_bytes=dev, tokens_fit=fit,
            padded_bytes=n_layers * tokens * padded_elements(s, align) * b, note=note,
        ))
    try:
        ceiling = rank_ceiling(scale.n_heads, scale.head_dim, target_fraction)
    except ValueError:
        ceiling = None
    formula = ceiling
    ceiling, warnings = _saves_nothing(scale, rows, ceiling, Fraction(target_fraction))
    return Plan(preset=scale.label, n_layers=n_layers, batch=batch, seq_len=seq_len, dtype=dtype_name(dtype),
                tp=tp, budget_bytes=budget_bytes, target_fraction=Fraction(target_fraction),
                rank_ceiling=ceiling, align=align, rows=tuple(rows), warnings=tuple(warnings),
                rank_ceiling_capped=formula != ceiling, scales=scale_plan)


def _saves_nothing(scale: PaperScale, rows: list[PlanRow], ceiling: int | None,
                   target: Fraction) -> tuple[int | None, list[str]]:
    """(the rank ceiling capped at d_h, warnings): an LRKV rank past the break-even rank
    d_h(1 − 1/H), where its cache is no smaller than MHA's, and a target whose ceiling would
    pass d_h or the break-even rank."""
    H, d_h = scale.n_heads, scale.head_dim
    even = break_even_rank(H, d_h)
    warnings = []
    for r in rows:
        if r.family == "lrkv" and r.fraction_of_mha >= 1:
            warnings.append(f"lrkv {r.spec}: rank past the break-even rank {even} of {scale.label} "
                            f"(r < d_h(1 - 1/H) = {float(d_h * (1 - Fraction(1, H))):.4g}): its cache is "
                            f"{float(r.fraction_of_mha):.2%} of MHA's, no smaller")
    if ceiling is not None and ceiling > d_h:
        warnings.append(f"--target {float(target):g}: the rank ceiling floor(d_h(c - 1/H)) = {ceiling} exceeds "
                        f"d_h = {d_h}; every rank fits, so the ceiling shown is d_h")
        ceiling = d_h
    if ceiling is not None and ceiling > even:
        warnings.append(f"--target {float(target):g} is at or above MHA's cache: ranks above the break-even rank "
                        f"{even} (up to the ceiling {ceiling}) give an LRKV cache no smaller than MHA's")
    return ceiling, warnings
