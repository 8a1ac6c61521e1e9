"""The fp8 comparison: what storing the KV cache in fp8 costs LRKV, MHA, GQA and MLA in output error.

One layer, one decode step, at a paper scale (`lrkv.spec.presets`, 2.5B by default: H = 18,
d_h = 128, d = 2304, LRKV rank r = 55). Every family reads the SAME activations x [B, T, d]
(seeded Gaussian with planted outlier channels and outlier tokens) through its OWN seeded,
random-init projections, so the families' outputs differ and only each family's own cost is
compared, never their outputs. The four families:

    lrkv   W_h = W_shared + U_h B_h^T (Eqs. 2–5); caches shared_k, shared_v [B, T, d_h] and
           latent_k, latent_v [B, T, H, r]: 2·(d_h + H·r) elements per token (Eq. 8)
    mha    k, v [B, T, H, d_h]: 2·H·d_h elements per token
    gqa    k, v [B, T, n_kv, d_h], n_kv the divisor of H whose cache is closest to LRKV's
    mla    the paper's simplified MLA (no decoupled RoPE): latent [B, T, d_c], d_c chosen so
           that its cache equals LRKV's element for element

For each family, fp8 format (float8_e4m3fn, float8_e5m2) and scale granularity (per_tensor,
per_head, per_token, per_token_head) the cache is quantized as `lrkv.reference.fp8` does it —
dequantized = stored × float32 scale; static scales (per_tensor, per_head) calibrated from
the amax of the valid slots, dynamic ones (per_token, per_token_head) from each token's amax —
and the decode on the dequantized cache is compared with the float64 decode on the
unquantized cache (dequantize-then-attend, all in float64: the format's cost, no kernel's).
A part without a head axis (LRKV's shared parts, MLA's latent) drops the head axis from the
granularity (`part_granularity`): per_head → per_tensor, per_token_head → per_token.

LRKV's cost is `quantization_cost` below (decode: Eqs. 6–7); the
others use the same `error_metrics`. max_abs and mean_abs are reported relative to the RMS of
the family's float64 output; SQNR = 10·log10(Σref² / Σ(fp8 − ref)²) in dB. Each draw (seeds
seed, seed + 1, …) draws new activations and new weights; the table gives the worst max_abs,
the mean mean_abs and the mean SQNR over the draws, and the SQNR's range, so that a
difference smaller than that range is read as the draw's, not the layout's.

    python3 -m lrkv.bench.fp8_comparison --batch 4 --t-max 256 --markdown table.md
    python3 -m lrkv.bench.fp8_comparison --no-outliers --draws 5 --json fp8.json

Exit 0 on success, 2 on a usage error (argparse).
"""

from __future__ import annotations

import argparse
import os
import json
import math
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace

import torch

from ..checks import arg_int, arg_out_file
from ..reference import dense, mla
from ..reference import lrkv as lrkv_ref
from ..reference.cache import FactoredCache
from ..reference.fp8 import (
    DYNAMIC_GRANULARITIES, FP8_FORMATS, GRANULARITIES, PARTS, PER_HEAD, PER_TOKEN_HEAD, dequantize, dynamic_scale,
    nan_filled, part_granularity, quantize,
)
from ..reference.fp8_cache import quantize_cache
from ..reference.masking import valid_mask
from ..reference.rope import ExactRope
from ..reference.weights import init_lrkv_weights
from ..spec import AttentionSpec, cache_elements
from ..spec.accounting import fp8_scale_elements
from ..spec.presets import PAPER_SCALES, PaperScale
from ..verify.metrics import ErrorMetrics, error_metrics, json_float

def quantization_cost(
    q: torch.Tensor,  # [B, H, d_h]
    cache: FactoredCache,  # contiguous, unquantized (any float dtype), garbage past lengths
    basis_k: torch.Tensor,  # [H, d_h, r]
    basis_v: torch.Tensor,  # [H, d_h, r]
    *,
    scale: float,
    fmt: torch.dtype,
    granularity: str,
    rope: ExactRope | None = None,
    dtype: torch.dtype = torch.float64,
) -> ErrorMetrics:
    """Error of the fp8 path (the cache quantized by `quantize_cache`, attended at `dtype`)
    against the float64 oracle (Eqs. 6–7) on the unquantized cache."""
    f64 = lambda t: None if t is None else t.to(torch.float64)  # noqa: E731
    tau = lambda t: None if t is None else t.to(dtype)  # noqa: E731
    exact = replace(cache, **{n: f64(t) for n, t in cache.tensors().items()})
    ref, _ = lrkv_ref.attend(f64(q), exact, f64(basis_k), f64(basis_v), scale=scale, rope=rope, check=True)
    stored, scales = quantize_cache(dict(zip(PARTS, cache.parts)), cache.lengths, fmt, granularity)
    low = FactoredCache(*(stored[p] for p in PARTS), cache.lengths, tau(cache.key_scale), scales)
    out, _ = lrkv_ref.attend(tau(q), low, tau(basis_k), tau(basis_v), scale=scale, rope=rope, check=True)
    return error_metrics(out, ref)  # max_abs, mean_abs and sqnr_db are the cost


FAMILIES: tuple[str, ...] = ("lrkv", "mha", "gqa", "mla")
DEFAULT_SCALE = "2.5B"

# The planted outliers (x is N(0, 1) elsewhere): a few feature channels far larger than the
# rest in every token, and a few whole tokens scaled up — token 0 (where an attention sink
# sits) and random others. Random-init projections mix a channel outlier of x into every
# cached channel, and a token outlier scales its key (so its logits) and its value.
OUTLIER_CHANNELS = 6  # channels of x scaled in every token
OUTLIER_CHANNEL_SCALE = 20.0
OUTLIER_TOKENS = 4  # tokens per sequence scaled (token 0, then random valid non-query slots)
OUTLIER_TOKEN_SCALE = 4.0

# A part whose per-token entry has no head axis ([.., width]) takes the scale rules of
# LRKV's shared parts, one with a head axis ([.., heads, width]) those of its latents:
# `lrkv.reference.fp8` states its rules by LRKV part, and these are the two layouts.
HEADLESS, HEADED = "shared_k", "latent_k"
LAYOUTS: dict[str, dict[str, str]] = {
    "lrkv": {"shared_k": HEADLESS, "shared_v": HEADLESS, "latent_k": HEADED, "latent_v": HEADED},
    "mha": {"k": HEADED, "v": HEADED},
    "gqa": {"k": HEADED, "v": HEADED},
    "mla": {"latent": HEADLESS},
}


# ----------------------------------------------------------------------------- layouts at equal bytes
def equal_bytes_gqa_heads(lrkv: AttentionSpec) -> int:
    """n_kv of the GQA layer whose cache elements per token (`cache_elements`: 2·n_kv·d_h) are
    closest to LRKV's (2·(d_h + H·r), Eq. 8); n_kv must divide H. A tie goes to fewer bytes."""
    target = cache_elements(lrkv)
    H, d_h, d = lrkv.n_heads, lrkv.head_dim, lrkv.d_model
    divisors = [n for n in range(1, H + 1) if H % n == 0]
    return min(divisors, key=lambda n: (abs(cache_elements(AttentionSpec.gqa(H, d_h, n, d_model=d)) - target), n))


def equal_bytes_mla_latent(lrkv: AttentionSpec) -> int:
    """d_c of the simplified MLA (rope_dim = 0) whose cache equals LRKV's: it caches only the
    latent, d_c elements per token (`cache_components`), so d_c = 2·(d_h + H·r)."""
    d_c = cache_elements(lrkv)
    spec = AttentionSpec.mla(lrkv.n_heads, lrkv.head_dim, d_c, d_model=lrkv.d_model)
    assert cache_elements(spec) == cache_elements(lrkv)
    return d_c


def family_specs(scale: PaperScale) -> dict[str, AttentionSpec]:
    """The four layers at one paper scale, no RoPE (the simplified MLA has none; decode here
    needs no positions), GQA and MLA at LRKV's cache size."""
    lrkv = scale.spec("lrkv")
    return {
        "lrkv": lrkv,
        "mha": scale.spec("mha"),
        "gqa": scale.spec("gqa", n_kv_heads=equal_bytes_gqa_heads(lrkv)),
        "mla": scale.spec("mla", latent_dim=equal_bytes_mla_latent(lrkv)),
    }


def init_family_weights(spec: AttentionSpec, seed: int):
    """Seeded float64 random-init projections of one family (the references' initialisations)."""
    if spec.family == "lrkv":
        return init_lrkv_weights(spec, seed)
    if spec.family == "mla":
        return mla.init_weights(spec, seed)
    return dense.init_weights(spec, seed)


# ----------------------------------------------------------------------------- the data
@dataclass(frozen=True)
class Outliers:
    channels: int = OUTLIER_CHANNELS
    channel_scale: float = OUTLIER_CHANNEL_SCALE
    tokens: int = OUTLIER_TOKENS
    token_scale: float = OUTLIER_TOKEN_SCALE


NO_OUTLIERS = Outliers(0, 1.0, 0, 1.0)


def draw_lengths(batch: int, t_max: int, g: torch.Generator) -> torch.Tensor:
    """Sequence lengths in [max(1, t_max // 2), t_max], the first one full.  # [B] int32"""
    low = max(1, t_max // 2)
    lengths = torch.randint(low, t_max + 1, (batch,), generator=g)
    lengths[0] = t_max
    return lengths.to(torch.int32)


def draw_activations(batch: int, t_max: int, d_model: int, *, seed: int, outliers: Outliers = Outliers(),
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """The layer input every family reads: x ~ N(0, 1) in float64, then `outliers.channels`
    channels (the same in every token) scaled by channel_scale, and `outliers.tokens` tokens
    of each sequence scaled by token_scale — token 0 (an attention sink) and random valid
    slots before the query's. Returns x [B, T, d] and lengths [B] (int32)."""
    g = torch.Generator().manual_seed(seed)
    lengths = draw_lengths(batch, t_max, g)
    x = torch.randn(batch, t_max, d_model, generator=g, dtype=torch.float64)  # [B, T, d]
    channels = torch.randperm(d_model, generator=g)[: outliers.channels]
    x[..., channels] *= outliers.channel_scale
    for b in range(batch):
        slots = outlier_slots(int(lengths[b]), outliers.tokens, g)
        x[b, slots] *= outliers.token_scale
    return x, lengths


def outlier_slots(length: int, n: int, g: torch.Generator) -> torch.Tensor:
    """n slots of a sequence of `length`: 0 first, then random ones in [1, length − 1) — never
    the query's slot length − 1, so the decode query itself is an ordinary token."""
    if n <= 0 or length < 2:
        return torch.zeros(0, dtype=torch.long)
    rest = 1 + torch.randperm(max(length - 2, 0), generator=g)[: n - 1]
    return torch.cat((torch.zeros(1, dtype=torch.long), rest))


# ----------------------------------------------------------------------------- project
def project(spec: AttentionSpec, weights, x: torch.Tensor, lengths: torch.Tensor,
            ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """A family's decode query and cache for x [B, T, d]: the cache holds every token's
    projection with the slots at or past lengths[b] set to NaN (garbage no path may read);
    the query is the token at slot lengths[b] − 1, already in the cache (DESIGN §4).

    Returns q [B, H, d_h] and the cache by part name (`LAYOUTS[family]`), e.g. lrkv's
    shared_k [B, T, d_h] and latent_k [B, T, H, r], gqa's k [B, T, n_kv, d_h], mla's latent
    [B, T, d_c]."""
    module = {"lrkv": lrkv_ref, "mha": dense, "gqa": dense, "mla": mla}[spec.family]
    B, T, _ = x.shape
    entries = module.project_token(weights, x, torch.arange(T)[None, :].expand(B, T))
    q_all = entries.pop("q")  # [B, T, H, d_h]
    q = q_all[torch.arange(B), lengths.long() - 1]  # [B, H, d_h]
    valid = valid_mask(lengths, T)  # [B, T]
    cache = {}
    for name in LAYOUTS[spec.family]:
        t = entries[name]
        m = valid.reshape(B, T, *([1] * (t.dim() - 2)))
        cache[name] = torch.where(m, t, float("nan"))
    return q, cache


# ----------------------------------------------------------------------------- quantize
def quantize_part(x: torch.Tensor, lengths: torch.Tensor, fmt: torch.dtype, granularity: str, *, layout: str,
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """One cached part [B, T, width] or [B, T, heads, width] stored in fp8 and read back, as
    `lrkv.reference.fp8_cache.quantize_cache` does each LRKV part: garbage kept out of every
    amax; the scale (float32) from `dynamic_scale` — the valid slots' amax for a static
    granularity (calibration), each token's (or token-head's) for a dynamic one; saturating
    RNE by `quantize`; float(stored) × scale by `dequantize`, exact in float64.

    layout: HEADLESS or HEADED (the LRKV part whose axes the part has). Returns the
    dequantized part (float64, garbage NaN) and its scale ([], [heads], [B, T], [B, T, heads])."""
    B, T = x.shape[:2]
    valid = valid_mask(lengths, T)
    m = valid.reshape(B, T, *([1] * (x.dim() - 2)))
    x0 = torch.where(m, x, torch.zeros_like(x))  # garbage must not enter any amax
    g = part_granularity(granularity, layout)
    scale = dynamic_scale(x0, fmt, granularity, part=layout)
    stored = quantize(x0, fmt, scale, g)
    stored = torch.where(m, stored, nan_filled(stored.shape, fmt))
    return dequantize(stored, scale, g), scale


def quantize_family_cache(family: str, cache: dict[str, torch.Tensor], lengths: torch.Tensor, fmt: torch.dtype,
                          granularity: str) -> tuple[dict[str, torch.Tensor], dict[str, torch.Tensor]]:
    """Every part of a family's cache through `quantize_part`, each part its own scale.
    Returns (dequantized parts, scales), both by part name."""
    read, scales = {}, {}
    for name, layout in LAYOUTS[family].items():
        read[name], scales[name] = quantize_part(cache[name], lengths, fmt, granularity, layout=layout)
    return read, scales


def scale_floats(family: str, spec: AttentionSpec, granularity: str) -> tuple[int, int]:
    """float32 scales of one layer's fp8 cache as (fixed, per cached token): LRKV's from
    `fp8_scale_elements`; the others' from their parts' scale shapes (a headed part's per_head
    scale is [heads], its per_token_head one [B, T, heads]; a headless part drops heads)."""
    if family == "lrkv":
        return fp8_scale_elements(spec, granularity)
    heads = spec.n_kv_heads if family in ("mha", "gqa") else 1
    fixed = per_token = 0
    for layout in LAYOUTS[family].values():
        g = part_granularity(granularity, layout)
        n = heads if g in (PER_HEAD, PER_TOKEN_HEAD) else 1
        if g in DYNAMIC_GRANULARITIES:
            per_token += n
        else:
            fixed += n
    return fixed, per_token


# ----------------------------------------------------------------------------- decode
def decode(spec: AttentionSpec, weights, q: torch.Tensor, cache: dict[str, torch.Tensor],
           lengths: torch.Tensor) -> torch.Tensor:
    """One decode step of the family on a float64 cache.  # out [B, H, d_h]

    lrkv: the factored decode, Eqs. 6–7 (`lrkv.reference.lrkv.decode_attention`); mha/gqa:
    `dense.decode_attention`; mla: the absorbed decode (`mla.absorbed_decode_attention`, the
    form a latent kernel reads the cache in)."""
    if spec.family == "lrkv":
        out, _ = lrkv_ref.decode_attention(q, *(cache[p] for p in PARTS), weights.basis_k, weights.basis_v, lengths,
                                           scale=spec.scale)
    elif spec.family == "mla":
        out, _ = mla.absorbed_decode_attention(q, cache["latent"], None, weights.w_uk, weights.w_uv, lengths,
                                               scale=spec.scale)
    else:
        out, _ = dense.decode_attention(q, cache["k"], cache["v"], lengths, scale=spec.scale)
    return out


def fp8_decode(spec: AttentionSpec, weights, q: torch.Tensor, cache: dict[str, torch.Tensor], lengths: torch.Tensor,
               fmt: torch.dtype, granularity: str) -> torch.Tensor:
    """The decode on the fp8 cache, dequantize-then-attend in float64.  # out [B, H, d_h]

    LRKV: `quantize_cache` then the factored decode with `cache_scales` (Eqs. 6–7 on the
    dequantized parts); the others: `quantize_family_cache` then `decode`."""
    if spec.family == "lrkv":
        stored, scales = quantize_cache(cache, lengths, fmt, granularity)
        out, _ = lrkv_ref.decode_attention(q, *(stored[p] for p in PARTS), weights.basis_k, weights.basis_v, lengths,
                                           scale=spec.scale, cache_scales=scales)
        return out
    read, _ = quantize_family_cache(spec.family, cache, lengths, fmt, granularity)
    return decode(spec, weights, q, read, lengths)


# ----------------------------------------------------------------------------- measure
def family_cost(spec: AttentionSpec, weights, q: torch.Tensor, cache: dict[str, torch.Tensor],
                lengths: torch.Tensor, fmt: torch.dtype, granularity: str) -> ErrorMetrics:
    """The fp8 decode against the float64 decode on the unquantized cache (absolute errors).

    LRKV: `quantization_cost` itself; the others: `fp8_decode` against `decode` by the same
    `error_metrics`."""
    if spec.family == "lrkv":
        return quantization_cost(q, FactoredCache(*(cache[p] for p in PARTS), lengths), weights.basis_k,
                                 weights.basis_v, scale=spec.scale, fmt=fmt, granularity=granularity)
    ref = decode(spec, weights, q, cache, lengths)
    return error_metrics(fp8_decode(spec, weights, q, cache, lengths, fmt, granularity), ref)


def rms(t: torch.Tensor) -> float:
    """sqrt(mean(t²)) over every element (the output scale the errors are reported against)."""
    return float(t.to(torch.float64).pow(2).mean().sqrt())


@dataclass(frozen=True)
class Cell:
    """One family × format × granularity on one draw, errors relative to the output's RMS."""
    max_abs_rel: float  # max |fp8 − ref| / RMS(ref)
    mean_abs_rel: float  # mean |fp8 − ref| / RMS(ref)
    sqnr_db: float  # 10·log10(Σref² / Σ(fp8 − ref)²)


def measure(spec: AttentionSpec, weights, q, cache, lengths, fmt: torch.dtype, granularity: str,
            out_rms: float) -> Cell:
    c = family_cost(spec, weights, q, cache, lengths, fmt, granularity)
    return Cell(c.max_abs / out_rms, c.mean_abs / out_rms, c.sqnr_db)


@dataclass(frozen=True)
class Row:
    """One line of the table: a cell aggregated over the draws."""
    family: str
    layout: str  # e.g. "gqa n_kv=9"
    format: str  # "float8_e4m3fn" / "float8_e5m2"
    granularity: str  # as asked of the family
    effective: str  # what each part's scale covers, e.g. "shared per_tensor, latents per_head"
    payload_bytes: int  # fp8 cache bytes per token per layer (= cache elements)
    fixed_scales: int  # float32 scales per layer, independent of length
    token_scales: int  # float32 scales per cached token
    max_abs_rel: float  # max over draws of max |fp8 − ref| / RMS(ref)
    mean_abs_rel: float  # mean over draws of mean |fp8 − ref| / RMS(ref)
    sqnr_db: float  # mean over draws
    sqnr_min_db: float
    sqnr_max_db: float
    draws: tuple[Cell, ...]

    def to_dict(self) -> dict:
        d = {k: (json_float(v) if isinstance(v, float) else v) for k, v in asdict(self).items() if k != "draws"}
        d["draws"] = [{k: json_float(v) for k, v in asdict(c).items()} for c in self.draws]
        return d


def layout_name(spec: AttentionSpec) -> str:
    return {"lrkv": f"lrkv r={spec.rank}", "mha": f"mha n_kv={spec.n_kv_heads}",
            "gqa": f"gqa n_kv={spec.n_kv_heads}", "mla": f"mla d_c={spec.latent_dim}"}[spec.family]


def effective_granularity(family: str, granularity: str) -> str:
    """What the granularity means for the family's parts (a headless part drops the head axis)."""
    if family == "lrkv":
        return f"shared {part_granularity(granularity, HEADLESS)}, latents {part_granularity(granularity, HEADED)}"
    return part_granularity(granularity, next(iter(LAYOUTS[family].values())))


def aggregate(family: str, spec: AttentionSpec, fmt: torch.dtype, granularity: str, cells: list[Cell]) -> Row:
    fixed, per_token = scale_floats(family, spec, granularity)
    sqnr = [c.sqnr_db for c in cells]
    return Row(family, layout_name(spec), str(fmt).removeprefix("torch."), granularity,
               effective_granularity(family, granularity), cache_elements(spec), fixed, per_token,
               max(c.max_abs_rel for c in cells), sum(c.mean_abs_rel for c in cells) / len(cells),
               sum(sqnr) / len(sqnr), min(sqnr), max(sqnr), tuple(cells))


# ----------------------------------------------------------------------------- the study
def weight_seed(seed: int, family_index: int) -> int:
    """The projection seed of one family on one draw (distinct from every activation seed)."""
    return 1_000_003 * (family_index + 1) + seed


def run_draw(specs: dict[str, AttentionSpec], *, batch: int, t_max: int, seed: int, outliers: Outliers,
             formats, granularities, progress: Callable[[str], None] | None = None
             ) -> tuple[dict[tuple[str, str, str], Cell], dict[str, float], list[int]]:
    """One draw: the activations, then each family's weights, cache, float64 output and cells.
    Returns the cells by (family, format, granularity), each family's output RMS, the lengths."""
    x, lengths = draw_activations(batch, t_max, next(iter(specs.values())).d_model, seed=seed, outliers=outliers)
    cells, out_rms = {}, {}
    for k, (family, spec) in enumerate(specs.items()):
        weights = init_family_weights(spec, weight_seed(seed, k))
        q, cache = project(spec, weights, x, lengths)
        out_rms[family] = rms(decode(spec, weights, q, cache, lengths))
        for fmt in formats:
            for g in granularities:
                cells[family, str(fmt), g] = measure(spec, weights, q, cache, lengths, fmt, g, out_rms[family])
            if progress:
                progress(f"seed {seed} {layout_name(spec)} {str(fmt).removeprefix('torch.')}: " + ", ".join(
                    f"{g} {cells[family, str(fmt), g].sqnr_db:.1f} dB" for g in granularities))
    return cells, out_rms, lengths.tolist()


def run_study(scale: PaperScale, *, batch: int, t_max: int, seed: int, draws: int = 1,
              outliers: Outliers = Outliers(), formats: tuple[torch.dtype, ...] = FP8_FORMATS,
              granularities: tuple[str, ...] = GRANULARITIES,
              progress: Callable[[str], None] | None = None) -> dict:
    """Every family × format × granularity on `draws` independent draws (seeds seed, seed + 1,
    …: new activations and new weights each). Returns {"meta": …, "rows": [Row]}."""
    t0 = time.perf_counter()
    specs = family_specs(scale)
    tick = None if progress is None else (lambda line: progress(f"[{time.perf_counter() - t0:6.1f}s] {line}"))
    per_draw = [run_draw(specs, batch=batch, t_max=t_max, seed=seed + i, outliers=outliers, formats=formats,
                         granularities=granularities, progress=tick) for i in range(draws)]
    rows = [aggregate(family, spec, fmt, g, [cells[family, str(fmt), g] for cells, _, _ in per_draw])
            for family, spec in specs.items() for fmt in formats for g in granularities]
    meta = {
        "scale": scale.label, "n_heads": scale.n_heads, "head_dim": scale.head_dim, "d_model": scale.d_model,
        "rank": specs["lrkv"].rank, "gqa_kv_heads": specs["gqa"].n_kv_heads, "mla_latent": specs["mla"].latent_dim,
        "cache_elements": {f: cache_elements(s) for f, s in specs.items()},
        "batch": batch, "t_max": t_max, "seed": seed, "draws": draws, "outliers": asdict(outliers),
        "lengths": [lengths for _, _, lengths in per_draw],
        "output_rms": [out_rms for _, out_rms, _ in per_draw],
        "seconds": round(time.perf_counter() - t0, 1),
    }
    return {"meta": meta, "rows": rows}


# ----------------------------------------------------------------------------- report
def fmt_float(v: float, digits: int = 3) -> str:
    return f"{v:.{digits}g}" if math.isfinite(v) else str(v)


def fmt_db(v: float) -> str:
    return f"{v:.1f}" if math.isfinite(v) else str(v)


def describe(meta: dict) -> str:
    o = meta["outliers"]
    planted = (f"{o['channels']} channels ×{o['channel_scale']:g}, {o['tokens']} tokens per sequence "
               f"×{o['token_scale']:g}" if o["channels"] or o["tokens"] else "none")
    return (f"Paper scale {meta['scale']}: H = {meta['n_heads']}, d_h = {meta['head_dim']}, d = {meta['d_model']}; "
            f"LRKV r = {meta['rank']}; GQA n_kv = {meta['gqa_kv_heads']} and MLA d_c = {meta['mla_latent']} at "
            f"LRKV's cache size. One layer, one decode step, batch {meta['batch']}, T_max {meta['t_max']}, "
            f"{meta['draws']} draw(s) from seed {meta['seed']}; planted outliers: {planted}. Errors of the fp8 "
            "decode against the float64 decode on the unquantized cache; max_abs and mean_abs relative to the "
            "RMS of the family's float64 output (max_abs: worst draw; mean_abs and SQNR: mean over draws; "
            "SQNR range: min–max over draws).")


def markdown(result: dict) -> str:
    """The full table (one row per family × format × granularity), then SQNR by granularity."""
    rows = result["rows"]
    out = [describe(result["meta"]), "",
           ("| family | format | granularity | scales cover | fp8 B/token | scales (fixed + per token) "
            "| max_abs / RMS | mean_abs / RMS | SQNR dB | SQNR range |"),
           "|---|---|---|---|---:|---|---:|---:|---:|---|"]
    for r in rows:
        out.append(f"| {r.layout} | {r.format} | {r.granularity} | {r.effective} | {r.payload_bytes} "
                   f"| {r.fixed_scales} + {r.token_scales}/token | {fmt_float(r.max_abs_rel)} "
                   f"| {fmt_float(r.mean_abs_rel)} | {fmt_db(r.sqnr_db)} "
                   f"| {fmt_db(r.sqnr_min_db)} – {fmt_db(r.sqnr_max_db)} |")
    grans = list(dict.fromkeys(r.granularity for r in rows))
    out += ["", "SQNR dB (mean over draws) by granularity:", "",
            "| family | format | " + " | ".join(grans) + " |", "|---|---|" + "---:|" * len(grans)]
    by = {(r.layout, r.format, r.granularity): r for r in rows}
    for layout, fmt in dict.fromkeys((r.layout, r.format) for r in rows):
        out.append(f"| {layout} | {fmt} | " + " | ".join(fmt_db(by[layout, fmt, g].sqnr_db) for g in grans) + " |")
    return "\n".join(out) + "\n"


def to_json(result: dict) -> dict:
    return {"meta": result["meta"], "rows": [r.to_dict() for r in result["rows"]]}


# ----------------------------------------------------------------------------- CLI
def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="python3 -m lrkv.bench.fp8_comparison", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--scale", choices=sorted(PAPER_SCALES), default=DEFAULT_SCALE,
                   help=f"paper scale of the layer (default {DEFAULT_SCALE})")
    p.add_argument("--batch", type=arg_int(minimum=1), default=4, help="sequences per draw (default 4)")
    p.add_argument("--t-max", type=arg_int(minimum=2), default=256, help="cache slots per sequence (default 256)")
    p.add_argument("--seed", type=arg_int(minimum=0), default=0, help="seed of the first draw (default 0)")
    p.add_argument("--draws", type=arg_int(minimum=1), default=3,
                   help="independent draws (activations and weights), seeds seed, seed + 1, … (default 3)")
    p.add_argument("--outliers", action=argparse.BooleanOptionalAction, default=True,
                   help="plant outlier channels and tokens in x (default on)")
    p.add_argument("--markdown", type=arg_out_file(), help="write the tables as Markdown")
    p.add_argument("--json", type=arg_out_file(), help="write the rows (every draw) and parameters as JSON")
    return p


def activation_bytes(scale: PaperScale, batch: int, t_max: int) -> int:
    """The float64 activations of one draw, [B, T, d] — a floor on what a draw allocates."""
    return batch * t_max * next(iter(family_specs(scale).values())).d_model * 8


def memory_bytes() -> int:
    """This machine's physical memory (0 where the platform does not say)."""
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 0


def main(argv: list[str] | None = None) -> int:
    p = parser()
    args = p.parse_args(argv)
    need, have = activation_bytes(PAPER_SCALES[args.scale], args.batch, args.t_max), memory_bytes()
    if have and need > have // 4:  # checked before any allocation: a traceback after minutes is no answer
        p.error(f"--batch {args.batch} × --t-max {args.t_max} needs at least {need / 2**30:.3g} GiB for one "
                f"draw's activations alone; this machine has {have / 2**30:.3g} GiB (the limit is a quarter of it)")
    result = run_study(PAPER_SCALES[args.scale], batch=args.batch, t_max=args.t_max, seed=args.seed,
                       draws=args.draws, outliers=Outliers() if args.outliers else NO_OUTLIERS,
                       progress=lambda line: print(line, file=sys.stderr, flush=True))
    table = markdown(result)
    print(table, end="", flush=True)
    print(f"{len(result['rows'])} rows, {args.draws} draw(s) in {result['meta']['seconds']}s", file=sys.stderr)
    for path, text in ((args.markdown, table), (args.json, json.dumps(to_json(result), indent=1) + "\n")):
        if path:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
