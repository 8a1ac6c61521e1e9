"""Cache, parameter and decode-arithmetic accounting (paper Eqs. 8–10, Sec. 4 of the review).

All ratios are exact `Fraction`s so that the proofs can compare them with sympy and the
tests can compare them with measured tensors without tolerance.

Cache components are counted in elements per token per layer (DESIGN §3):
  mha/gqa/mqa   2·n_kv·d_h                       (keys + values)
  mla           d_c + d_rope                     (latent + decoupled rotary key)
  mlra          n_latent_heads·latent_dim + d_rope
  lrkv          2·(d_h + H·r)  (+ H for key_scale with QK-RMSNorm)      (Eq. 8)

Every public function checks its arguments once, at entry, with the helpers of
`lrkv.checks`: a float length (seq_len=1.5), a negative count or a zero head count is a
ValueError/TypeError naming the argument, never a number computed from it.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Sequence
from fractions import Fraction

from ..checks import check_bool, check_choice, check_int
from .attention import AttentionSpec
from .dtypes import dtype_bytes
from .fp8_scales import GRANULARITIES, PER_HEAD, PER_TENSOR, PER_TOKEN, PER_TOKEN_HEAD, SCALE_BYTES


def _check_spec(spec) -> AttentionSpec:
    if not isinstance(spec, AttentionSpec):
        raise TypeError(f"spec must be an AttentionSpec, got {type(spec).__name__}")
    return spec


def _check_heads(n_heads, head_dim) -> None:
    """H and d_h of the closed forms: both >= 1 (1/H and r/d_h divide by them)."""
    check_int("n_heads", n_heads, minimum=1)
    check_int("head_dim", head_dim, minimum=1)


def _check_budget(budget) -> Fraction:
    """A cache budget c as an exact fraction of MHA's cache: a Fraction, an int, a finite float
    (rounded to the nearest fraction with denominator <= 1e9) or a string such as '1/2'."""
    if isinstance(budget, bool):
        raise TypeError(f"budget must be a number or a fraction string, got bool {budget!r}")
    if isinstance(budget, float):
        if not math.isfinite(budget):
            raise ValueError(f"budget must be finite, got {budget}")
        c = Fraction(budget).limit_denominator(10**9)
    elif isinstance(budget, (numbers.Rational, str)):
        try:
            c = Fraction(budget)
        except (ValueError, ZeroDivisionError):
            raise ValueError(f"budget must be a fraction such as '1/2' or '0.5', got {budget!r}") from None
    else:
        raise TypeError(f"budget must be a Fraction, int, float or string, got {type(budget).__name__}")
    if c <= 0:
        raise ValueError(f"budget must be > 0, got {c}")
    return c


# ----------------------------------------------------------------------------- cache
def cache_components(spec: AttentionSpec, *, rank_align: int = 1) -> dict[str, int]:
    """Elements per token per layer, by cached tensor, for a single device.

    rank_align pads r up to a multiple (physical layout of an alignment-constrained kernel).
    """
    _check_spec(spec)
    check_int("rank_align", rank_align, minimum=1)
    H, d_h = spec.n_heads, spec.head_dim
    f = spec.family
    if f in ("mha", "gqa", "mqa"):
        return {"k": spec.n_kv_heads * d_h, "v": spec.n_kv_heads * d_h}
    if f == "mla":
        comp = {"latent": spec.latent_dim}
        if spec.rope_dim:
            comp["k_rope"] = spec.rope_dim
        return comp
    if f == "mlra":
        comp = {"latent": spec.n_latent_heads * spec.latent_dim}
        if spec.rope_dim:
            comp["k_rope"] = spec.rope_dim
        return comp
    r = _padded(spec.rank, rank_align)
    comp = {"shared_k": d_h, "shared_v": d_h, "latent_k": H * r, "latent_v": H * r}
    if spec.qk_norm:
        comp["key_scale"] = H
    return comp


def padded_rank(rank: int, align: int) -> int:
    """Smallest multiple of `align` that is >= rank (r = 55 padded to 64 at align 16/64)."""
    return _padded(check_int("rank", rank, minimum=0), check_int("align", align, minimum=1))


def _padded(rank: int, align: int) -> int:
    return -(-rank // align) * align


def cache_elements(spec: AttentionSpec, *, include_key_scale: bool = True, rank_align: int = 1) -> int:
    """Elements per token per layer. Eq. 8's payload excludes key_scale."""
    check_bool("include_key_scale", include_key_scale)
    comp = cache_components(spec, rank_align=rank_align)
    if not include_key_scale:
        comp.pop("key_scale", None)
    return sum(comp.values())


def cache_bytes(spec: AttentionSpec, dtype="bfloat16", **kw) -> int:
    """Bytes per token per layer at one storage dtype for every component."""
    width = dtype_bytes(dtype)  # an unknown dtype is a TypeError naming it
    return cache_elements(spec, **kw) * width


def mha_cache_elements(spec: AttentionSpec) -> int:
    """The dense MHA payload at the same H and d_h: 2·H·d_h elements per token per layer."""
    _check_spec(spec)
    return 2 * spec.n_heads * spec.head_dim


def cache_ratio(spec: AttentionSpec, *, include_key_scale: bool = False, rank_align: int = 1) -> Fraction:
    """Cache fraction of dense MHA at the same H, d_h (Eq. 9 for lrkv: 1/H + r/d_h)."""
    return Fraction(
        cache_elements(spec, include_key_scale=include_key_scale, rank_align=rank_align),
        mha_cache_elements(spec),
    )


def lrkv_cache_ratio(n_heads: int, head_dim: int, rank: int) -> Fraction:
    """Eq. 9: M_LRKV / M_MHA = 1/H + r/d_h."""
    _check_heads(n_heads, head_dim)
    check_int("rank", rank, minimum=0)
    return Fraction(1, n_heads) + Fraction(rank, head_dim)


def break_even_rank(n_heads: int, head_dim: int) -> int:
    """Largest r whose LRKV cache is strictly smaller than MHA's: r < d_h(1 − 1/H)."""
    _check_heads(n_heads, head_dim)
    bound = Fraction(head_dim) * (1 - Fraction(1, n_heads))
    return math.ceil(bound) - 1


def rank_ceiling(n_heads: int, head_dim: int, budget: Fraction | float | str) -> int:
    """Largest r with 1/H + r/d_h <= c, i.e. floor(d_h(c − 1/H)). Raises below the 1/H floor."""
    _check_heads(n_heads, head_dim)
    c = _check_budget(budget)
    room = Fraction(head_dim) * (c - Fraction(1, n_heads))
    if room < 0:
        raise ValueError(
            f"budget {float(c):.4g} is below the shared-block floor 1/H = {1 / n_heads:.4g}: no rank fits"
        )
    return math.floor(room)


def key_scale_overhead(spec: AttentionSpec) -> Fraction:
    """key_scale elements relative to MHA's payload at equal precision: H/(2 H d_h) = 1/(2 d_h)."""
    _check_spec(spec)
    if spec.family != "lrkv" or not spec.qk_norm:
        return Fraction(0)
    return Fraction(spec.n_heads, mha_cache_elements(spec))


def model_cache_bytes(
    spec: AttentionSpec,
    n_layers: int,
    *,
    dtype="bfloat16",
    batch: int | None = None,
    seq_len: int | None = None,
    lengths: Sequence[int] | None = None,
    **kw,
) -> int:
    """Whole-model cache bytes: b·N·(Σ lengths)·elements (paper's 2bNBT(d_h + Hr) for lrkv)."""
    _check_spec(spec)
    check_int("n_layers", n_layers, minimum=1)
    if lengths is not None:
        if batch is not None or seq_len is not None:
            raise ValueError("give either lengths or (batch, seq_len), not both")
        if isinstance(lengths, (str, bytes)) or not isinstance(lengths, Sequence):
            raise TypeError(f"lengths must be a sequence of integers, got {type(lengths).__name__}")
        tokens = sum(check_int(f"lengths[{i}]", t, minimum=0) for i, t in enumerate(lengths))
    else:
        if batch is None or seq_len is None:
            raise ValueError("give lengths, or both batch and seq_len")
        tokens = check_int("batch", batch, minimum=0) * check_int("seq_len", seq_len, minimum=0)
    return n_layers * tokens * cache_bytes(spec, dtype, **kw)


# ----------------------------------------------------------------------------- fp8 scales
def fp8_scale_elements(spec: AttentionSpec, granularity: str) -> tuple[int, int]:
    """The float32 scales of an fp8 LRKV cache, one layer (DESIGN §4, "FP8 caches"), as
    (fixed per layer, per cached token): shared K, shared V, latent K, latent V each have
    their own — a shared part's granularity drops the head axis.

        per_tensor       (4, 0)              one scalar per part
        per_head         (2 + 2·H, 0)        shared: scalars; latents: [H]
        per_token        (0, 4)              one per token per part
        per_token_head   (0, 2 + 2·H)        shared: per token; latents: per token and head
    """
    _check_spec(spec)
    check_choice("granularity", granularity, GRANULARITIES)
    if spec.family != "lrkv":
        raise ValueError(f"fp8 cache scales are counted for lrkv specs, got family {spec.family!r}")
    H = spec.n_heads
    if granularity == PER_TENSOR:
        return 4, 0
    if granularity == PER_HEAD:
        return 2 + 2 * H, 0
    if granularity == PER_TOKEN:
        return 0, 4
    return 0, 2 + 2 * H


def fp8_scale_bytes(spec: AttentionSpec, granularity: str, *, n_layers: int = 1, tokens: int = 0) -> int:
    """Bytes of an fp8 LRKV cache's scales over `n_layers` layers holding `tokens` cached
    tokens (B·T summed over sequences): N · 4 · (fixed + tokens · per token)."""
    check_int("n_layers", n_layers, minimum=1)
    check_int("tokens", tokens, minimum=0)
    fixed, per_token = fp8_scale_elements(spec, granularity)
    return n_layers * SCALE_BYTES * (fixed + tokens * per_token)


def per_device_fp8_scale_elements(spec: AttentionSpec, granularity: str, tp: int) -> tuple[int, int]:
    """`fp8_scale_elements` held by ONE of `tp` tensor-parallel devices, as (fixed per layer,
    per cached token): the shared parts' scales are replicated with the shared block, a
    latent's head axis is sharded with its heads (H/P), a headless latent scale is kept whole."""
    check_int("tp", tp, minimum=1)
    fixed, per_token = fp8_scale_elements(spec, granularity)
    if spec.n_heads % tp:
        raise ValueError(f"tp ({tp}) must divide n_heads ({spec.n_heads})")
    local = 2 + 2 * (spec.n_heads // tp)  # the headed form: shared K, V scalars + latent K, V by head
    if granularity == PER_HEAD:
        return local, 0
    if granularity == PER_TOKEN_HEAD:
        return 0, local
    return fixed, per_token


# ----------------------------------------------------------------------------- tensor parallel
def per_device_cache_elements(spec: AttentionSpec, tp: int, *, include_key_scale: bool = False) -> int:
    """Elements per token per layer held by ONE of `tp` tensor-parallel devices.

    Query heads split evenly. mha/gqa/mqa shard KV heads (replicated when n_kv < P);
    lrkv replicates the shared block on every device and shards the latents by head;
    mla cannot shard its single latent; mlra shards by latent head and replicates k_rope.
    """
    _check_spec(spec)
    check_int("tp", tp, minimum=1)
    check_bool("include_key_scale", include_key_scale)
    H = spec.n_heads
    if H % tp:
        raise ValueError(f"tp ({tp}) must divide n_heads ({H})")
    f = spec.family
    if f in ("mha", "gqa", "mqa"):
        kv_local = max(1, spec.n_kv_heads // tp) if spec.n_kv_heads >= tp else 1
        if spec.n_kv_heads >= tp and spec.n_kv_heads % tp:
            raise ValueError(f"tp ({tp}) must divide n_kv_heads ({spec.n_kv_heads})")
        return 2 * kv_local * spec.head_dim
    if f == "mla":
        return spec.latent_dim + spec.rope_dim
    if f == "mlra":
        L = spec.n_latent_heads
        if L >= tp and L % tp:
            raise ValueError(f"tp ({tp}) must divide n_latent_heads ({L})")
        local = max(1, L // tp)
        return local * spec.latent_dim + spec.rope_dim
    local_heads = H // tp
    n = 2 * (spec.head_dim + local_heads * spec.rank)
    if include_key_scale and spec.qk_norm:
        n += local_heads
    return n


def tp_cache_ratio(spec: AttentionSpec, tp: int) -> Fraction:
    """Aggregate payload over all devices / dense MHA payload (lrkv: P/H + r/d_h)."""
    return Fraction(tp * per_device_cache_elements(spec, tp), mha_cache_elements(spec))


# ----------------------------------------------------------------------------- parameters
def kv_param_count(spec: AttentionSpec) -> int:
    """Weights that produce keys and values (the quantity of Eq. 10)."""
    _check_spec(spec)
    d, H, d_h = spec.d_model, spec.n_heads, spec.head_dim
    f = spec.family
    if f in ("mha", "gqa", "mqa"):
        return 2 * d * spec.n_kv_heads * d_h
    if f == "mla":
        # down-projection to [c ‖ k_rope], up-projections W_UK, W_UV to every head
        return d * (spec.latent_dim + spec.rope_dim) + 2 * spec.latent_dim * H * d_h
    if f == "mlra":
        L, c = spec.n_latent_heads, spec.latent_dim
        heads_per_latent = H // (L // spec.n_branches)  # each latent serves one head group
        return d * (L * c + spec.rope_dim) + L * c * heads_per_latent * 2 * d_h
    return 2 * d * d_h + 2 * H * spec.rank * (d + d_h)


def kv_param_ratio(spec: AttentionSpec) -> Fraction:
    """Eq. 10 for lrkv: 1/H + (r/d_h)(1 + d_h/d), relative to MHA's 2·d·H·d_h."""
    return Fraction(kv_param_count(spec), 2 * spec.d_model * spec.n_heads * spec.head_dim)


def lrkv_param_ratio(n_heads: int, head_dim: int, rank: int, d_model: int) -> Fraction:
    """Closed form of Eq. 10: 1/H + (r/d_h)(1 + d_h/d)."""
    _check_heads(n_heads, head_dim)
    check_int("rank", rank, minimum=0)
    check_int("d_model", d_model, minimum=1)
    return Fraction(1, n_heads) + Fraction(rank, head_dim) * (1 + Fraction(head_dim, d_model))


# ----------------------------------------------------------------------------- arithmetic
def decode_macs(spec: AttentionSpec, seq_len: int) -> int:
    """Multiply-accumulates of one decode step's history contractions, one layer, one sequence.

    MHA per head: 2·T·d_h (scores + values). LRKV adds 2·T·r + 2·r·d_h (private scans and
    the two basis transforms). Absorbed MLA: 2·T·d_c + T·d_rope + 2·d_c·d_h per head.
    """
    _check_spec(spec)
    check_int("seq_len", seq_len, minimum=1)
    T, H, d_h = seq_len, spec.n_heads, spec.head_dim
    f = spec.family
    if f in ("mha", "gqa", "mqa"):
        return H * 2 * T * d_h
    if f == "mla":
        c = spec.latent_dim
        return H * (2 * T * c + T * spec.rope_dim + 2 * c * d_h)
    if f == "mlra":
        c = spec.latent_dim
        return H * spec.n_branches * (2 * T * c + T * spec.rope_dim + 2 * c * d_h)
    r = spec.rank
    return H * (2 * T * d_h + 2 * T * r + 2 * r * d_h)


def decode_arithmetic_ratio(spec: AttentionSpec, seq_len: int) -> Fraction:
    """Decode MACs relative to MHA at the same H, d_h (lrkv: 1 + r/d_h + r/T)."""
    _check_spec(spec)
    check_int("seq_len", seq_len, minimum=1)
    mha = 2 * seq_len * spec.head_dim * spec.n_heads
    return Fraction(decode_macs(spec, seq_len), mha)


def decode_bytes(spec: AttentionSpec, seq_len: int, dtype="bfloat16", *, batch: int = 1) -> int:
    """Bytes one decode step must read from the cache (one layer): the payload of T tokens.

    T >= 1: the step's own token is already in the cache (DESIGN §4), as in `decode_macs`.
    """
    _check_spec(spec)
    check_int("seq_len", seq_len, minimum=1)
    check_int("batch", batch, minimum=1)
    return batch * seq_len * cache_bytes(spec, dtype)
