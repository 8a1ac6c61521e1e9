"""MHA / GQA / MQA in float64 — the dense baselines LRKV is measured against (DESIGN §2, §10).

One module for the three families; they differ only in n_kv (MHA: n_kv = H, MQA: n_kv = 1).
Query head h reads KV head kv(h) = h // (H / n_kv), the grouping of GQA's public code
(`repeat_interleave` over the KV-head axis):

    q_h = x W_Q[h],   K_n = X W_K[n],   V_n = X W_V[n]                 (n = kv(h))
    QK-RMSNorm (per head, learned gain) then rotate-half RoPE on q and K   (DESIGN §5)
    a_h = softmax(scale · q_h K_n^T),  scale = 1/sqrt(d_h);   out_h = a_h V_n
    y   = Σ_h out_h W_O[h]

Cache (DESIGN §3): k, v [B, T_max, n_kv, d_h]; keys are cached normed and rotated, so decode
needs no positions. These are the two limits of LRKV the tests pin down: r = 0 is MQA
(K = X W_shared for every head) and r = d_h with B_h = I, U_h = W_h − W_S is MHA.

This module also holds the small helpers that mla.py and mlra.py share (input validation,
a cache base class, the prefill write) — kept here so those modules stay one concept each.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, fields

import torch

from ..spec import AttentionSpec, cache_components
from .contract import FLOAT_DTYPES
from .lrkv import append
from .masking import causal_attention, softmax_rows, valid_mask, zero_garbage
from .norms import rms_norm
from .rope import apply_rope, rope_freqs

DENSE_FAMILIES = ("mha", "gqa", "mqa")


# ----------------------------------------------------------------------------- shared helpers
def require_tensor(name: str, t: object) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    return t


def require_dims(name: str, t: torch.Tensor, layout: str) -> None:
    """`layout` is the DESIGN §3 shape string, e.g. '[B, T_max, n_kv, d_h]'."""
    n = layout.count(",") + 1
    if t.dim() != n:
        raise ValueError(f"{name} must be {layout}, got {t.dim()} dims {list(t.shape)}")


def require_shape(name: str, t: torch.Tensor, expected: tuple) -> None:
    if tuple(t.shape) != tuple(expected):
        raise ValueError(f"{name} must have shape {list(expected)}, got {list(t.shape)}")


def validate_common(
    q: torch.Tensor,
    *,
    cache: dict[str, torch.Tensor | None],
    weights: dict[str, torch.Tensor | None],
    lengths: torch.Tensor,
    scale: object,
    batch: int,
    t_max: int,
) -> None:
    """The checks every decode kernel shares once its shapes are known (DESIGN §4, §8).

    dtypes match q's float dtype; lengths are int32/int64 in [0, T_max]; scale > 0; q and the
    weights are finite; cache tensors are finite *inside* each sequence's length — slots past
    it are garbage (NaN in the tests) and must not be looked at.
    """
    require_tensor("lengths", lengths)
    require_shape("lengths", lengths, (batch,))
    if q.dtype not in FLOAT_DTYPES:
        raise TypeError(f"q has dtype {q.dtype}; supported: {[str(d) for d in FLOAT_DTYPES]}")
    for name, t in {**cache, **weights}.items():
        if t is not None and t.dtype != q.dtype:
            raise TypeError(f"{name} has dtype {t.dtype} but q has {q.dtype}: all float inputs must match")
    if lengths.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"lengths must be int32 or int64, got {lengths.dtype}")
    tensors = [q, lengths, *(t for t in {**cache, **weights}.values() if t is not None)]
    devices = {t.device for t in tensors}
    if len(devices) > 1:
        raise ValueError(f"all inputs must be on one device, got {sorted(map(str, devices))}")
    if batch and (lengths.min() < 0 or lengths.max() > t_max):
        raise ValueError(
            f"lengths must lie in [0, T_max={t_max}], got min {int(lengths.min())}, max {int(lengths.max())}"
        )
    if isinstance(scale, bool) or not isinstance(scale, (int, float)) or not (scale > 0):
        raise ValueError(f"scale must be a positive float, got {scale!r}")
    if not torch.isfinite(q).all():
        raise ValueError("q contains NaN or Inf")
    for name, t in weights.items():
        if t is not None and not torch.isfinite(t).all():
            raise ValueError(f"{name} contains NaN or Inf")
    valid = valid_mask(lengths, t_max)  # [B, T]
    for name, t in cache.items():
        if t is None:
            continue
        m = valid.reshape(batch, t_max, *([1] * (t.dim() - 2)))
        if not torch.isfinite(torch.where(m, t, 0)).all():
            raise ValueError(f"{name} contains NaN or Inf inside the valid length of some sequence")


def check_layer_input(weights, x: torch.Tensor, dims: int, name: str = "x") -> None:
    """x is [B, T, d] (dims=3, layer_forward/prefill) or [B, d] (dims=2, layer_step)."""
    require_tensor(name, x)
    d = weights.spec.d_model
    layout = "[B, T, d]" if dims == 3 else "[B, d]"
    if x.dim() != dims or x.shape[-1] != d:
        raise ValueError(f"{name} must be {layout} with d = {d}, got shape {list(x.shape)}")
    if x.dtype != weights.dtype:
        raise TypeError(f"{name} has dtype {x.dtype} but the weights have {weights.dtype}")


def check_lengths(lengths: torch.Tensor | None, batch: int, seq: int, device=None) -> torch.Tensor:
    """None means every sequence is full. Returns int32 lengths in [0, seq]."""
    if lengths is None:
        return torch.full((batch,), seq, dtype=torch.int32, device=device)
    require_tensor("lengths", lengths)
    require_shape("lengths", lengths, (batch,))
    if lengths.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"lengths must be int32 or int64, got {lengths.dtype}")
    if batch and (lengths.min() < 0 or lengths.max() > seq):
        raise ValueError(f"lengths must lie in [0, T={seq}], got {lengths.tolist()}")
    return lengths.to(torch.int32)


def cast_tensors(obj, dtype: torch.dtype):
    """A copy of a weights dataclass with every tensor field cast to dtype."""
    return dataclasses.replace(
        obj, **{f.name: getattr(obj, f.name).to(dtype) for f in fields(obj)
                if isinstance(getattr(obj, f.name), torch.Tensor)}
    )


def check_weight_shapes(obj, expected: dict[str, tuple | None]) -> None:
    """Every weight field has the shape its spec implies (None: the field must be None)."""
    for name, shape in expected.items():
        t = getattr(obj, name)
        if shape is None:
            if t is not None:
                raise ValueError(f"{name} must be None for spec {obj.spec.short()}")
            continue
        require_tensor(name, t)
        require_shape(name, t, shape)


def gain(rows: int, width: int, g: torch.Generator, *, tied: bool) -> torch.Tensor:
    """An RMSNorm gain 1 + 0.1·N(0,1). `tied` repeats it on both dims of each rotary plane so it
    commutes with RoPE — dense decode does not need that, but it makes the gains
    interchangeable with LRKV's, whose factored path folds the key gain into q (DESIGN §5)."""
    if tied:
        half = 1.0 + 0.1 * torch.randn(rows, width // 2, generator=g, dtype=torch.float64)
        return torch.cat((half, half), dim=-1)
    return 1.0 + 0.1 * torch.randn(rows, width, generator=g, dtype=torch.float64)


@dataclass
class LayerCache:
    """Base of the contiguous, variable-length caches of this package (DESIGN §3).

    Subclasses declare their payload tensors ([B, T_max, ...]) and `lengths` [B] int32.
    Slots at or past lengths[b] are garbage; allocation fills them with NaN.
    """

    @property
    def batch(self) -> int:
        return self.lengths.shape[0]

    @property
    def t_max(self) -> int:
        return next(iter(self.tensors().values())).shape[1]

    def tensors(self) -> dict[str, torch.Tensor]:
        """The cached payload by name — the names of `lrkv.spec.cache_components`."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "lengths"}
        return {k: v for k, v in out.items() if v is not None}

    def clone(self):
        return dataclasses.replace(
            self, **{f.name: getattr(self, f.name).clone() for f in fields(self)
                     if getattr(self, f.name) is not None}
        )

    def nbytes(self) -> int:
        return sum(t.numel() * t.element_size() for t in self.tensors().values())


def check_allocation(spec: AttentionSpec, batch: int, t_max: int) -> dict[str, int]:
    if batch < 1 or t_max < 1:
        raise ValueError(f"batch and t_max must be >= 1, got batch={batch}, t_max={t_max}")
    return cache_components(spec)


def fill_prefix(cache: LayerCache, entries: dict[str, torch.Tensor], lengths: torch.Tensor) -> LayerCache:
    """Write a prompt's tokens (entries [B, T, ...]) into slots [0, lengths[b]); the rest stay
    garbage. torch.where, so padding tokens (possibly NaN) never reach the cache."""
    B, T = entries["q"].shape[:2]
    valid = valid_mask(lengths, T)  # [B, T]
    for name, t in cache.tensors().items():
        e = entries[name]
        m = valid.reshape(B, T, *([1] * (e.dim() - 2)))
        t[:, :T] = torch.where(m, e.to(t.dtype), t[:, :T])
    cache.lengths = lengths.to(torch.int32).clone()
    return cache


def check_prefill(x: torch.Tensor, t_max: int | None) -> int:
    T = x.shape[1]
    t_max = T if t_max is None else t_max
    if t_max < T:
        raise ValueError(f"t_max ({t_max}) must be >= the prompt length ({T})")
    return t_max


def check_step(weights, x_t: torch.Tensor, cache: LayerCache, positions: torch.Tensor) -> None:
    """The checks every family's layer_step runs before touching its cache."""
    check_layer_input(weights, x_t, 2, "x_t")
    if x_t.shape[0] != cache.batch:
        raise ValueError(f"x_t must have shape [{cache.batch}, {weights.spec.d_model}], got {list(x_t.shape)}")
    if not torch.isfinite(x_t).all():
        raise ValueError("x_t contains NaN or Inf")
    check_positions(positions, cache.batch)


def prefill_with(forward, allocate, project, weights, x: torch.Tensor, lengths, t_max):
    """Prefill for any family: the training form over the prompt, and a cache holding the
    projections of its first lengths[b] tokens (the family passes its own three functions)."""
    check_layer_input(weights, x, 3)
    B, T, _ = x.shape
    lengths = check_lengths(lengths, B, T, x.device)
    t_max = check_prefill(x, t_max)
    y = forward(weights, x, lengths)
    cache = allocate(weights.spec, B, t_max, weights.dtype, device=x.device)
    entries = project(weights, x, torch.arange(T, device=x.device)[None, :].expand(B, T))
    return y, fill_prefix(cache, entries, lengths)


def check_positions(positions: torch.Tensor, batch: int) -> None:
    require_tensor("positions", positions)
    require_shape("positions", positions, (batch,))
    if positions.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"positions must be int32 or int64, got {positions.dtype}")


# ----------------------------------------------------------------------------- weights
@dataclass
class DenseWeights:
    spec: AttentionSpec
    w_q: torch.Tensor  # [d, H, d_h]
    w_k: torch.Tensor  # [d, n_kv, d_h]
    w_v: torch.Tensor  # [d, n_kv, d_h]
    w_o: torch.Tensor  # [H, d_h, d]
    q_gain: torch.Tensor | None = None  # [H, d_h]     QK-RMSNorm gains (qk_norm only)
    k_gain: torch.Tensor | None = None  # [n_kv, d_h]  one per KV head: the key is normed once

    def __post_init__(self) -> None:
        s = self.spec
        if s.family not in DENSE_FAMILIES:
            raise ValueError(f"DenseWeights needs a family in {DENSE_FAMILIES}, got {s.family!r}")
        d, H, d_h, n_kv = s.d_model, s.n_heads, s.head_dim, s.n_kv_heads
        check_weight_shapes(self, dict(
            w_q=(d, H, d_h), w_k=(d, n_kv, d_h), w_v=(d, n_kv, d_h), w_o=(H, d_h, d),
            q_gain=(H, d_h) if s.qk_norm else None, k_gain=(n_kv, d_h) if s.qk_norm else None,
        ))

    def to(self, dtype: torch.dtype) -> DenseWeights:
        return cast_tensors(self, dtype)

    @property
    def dtype(self) -> torch.dtype:
        return self.w_q.dtype


def init_weights(spec: AttentionSpec, seed: int = 0, dtype: torch.dtype = torch.float64) -> DenseWeights:
    """Seeded Kaiming (linear gain, std = 1/sqrt(fan_in)) projections; gains 1 + 0.1·N(0,1)."""
    if spec.family not in DENSE_FAMILIES:
        raise ValueError(f"dense.init_weights needs a family in {DENSE_FAMILIES}, got {spec.family!r}")
    g = torch.Generator().manual_seed(seed)
    d, H, d_h, n_kv = spec.d_model, spec.n_heads, spec.head_dim, spec.n_kv_heads

    def randn(*shape, std):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * std

    w_q, w_k, w_v = randn(d, H, d_h, std=d**-0.5), randn(d, n_kv, d_h, std=d**-0.5), randn(d, n_kv, d_h, std=d**-0.5)
    w_o = randn(H, d_h, d, std=(H * d_h) ** -0.5)
    q_gain = k_gain = None
    if spec.qk_norm:
        tied = spec.rope != "none"
        q_gain, k_gain = gain(H, d_h, g, tied=tied), gain(n_kv, d_h, g, tied=tied)
    return DenseWeights(spec, w_q, w_k, w_v, w_o, q_gain, k_gain).to(dtype)


# ----------------------------------------------------------------------------- cache
@dataclass
class DenseCache(LayerCache):
    k: torch.Tensor  # [B, T_max, n_kv, d_h]  normed and rotated keys
    v: torch.Tensor  # [B, T_max, n_kv, d_h]
    lengths: torch.Tensor  # [B] int32


def allocate_cache(
    spec: AttentionSpec, batch: int, t_max: int, dtype: torch.dtype = torch.float64,
    *, fill: float = float("nan"), device=None,
) -> DenseCache:
    """An empty cache (lengths 0) with every slot filled with `fill` (NaN by default)."""
    if spec.family not in DENSE_FAMILIES:
        raise ValueError(f"dense.allocate_cache needs a family in {DENSE_FAMILIES}, got {spec.family!r}")
    check_allocation(spec, batch, t_max)
    shape = (batch, t_max, spec.n_kv_heads, spec.head_dim)
    return DenseCache(
        k=torch.full(shape, fill, dtype=dtype, device=device),
        v=torch.full(shape, fill, dtype=dtype, device=device),
        lengths=torch.zeros(batch, dtype=torch.int32, device=device),
    )


# ----------------------------------------------------------------------------- kernel level
def validate_decode_inputs(q, k, v, lengths, *, scale) -> tuple[int, int, int, int, int]:
    """Check the dense decode contract; return (B, T_max, H, n_kv, d_h)."""
    for name, t in dict(q=q, k=k, v=v, lengths=lengths).items():
        require_tensor(name, t)
    require_dims("q", q, "[B, H, d_h]")
    require_dims("k", k, "[B, T_max, n_kv, d_h]")
    B, H, d_h = q.shape
    T, n_kv = k.shape[1], k.shape[2]
    require_shape("k", k, (B, T, n_kv, d_h))
    require_shape("v", v, (B, T, n_kv, d_h))
    if n_kv < 1 or H % n_kv:
        raise ValueError(f"n_kv (k.shape[2] = {n_kv}) must divide H (q.shape[1] = {H})")
    validate_common(q, cache=dict(k=k, v=v), weights={}, lengths=lengths, scale=scale, batch=B, t_max=T)
    return B, T, H, n_kv, d_h


def decode_attention(
    q: torch.Tensor,  # [B, H, d_h]  normed and rotated
    k: torch.Tensor,  # [B, T_max, n_kv, d_h]
    v: torch.Tensor,  # [B, T_max, n_kv, d_h]
    lengths: torch.Tensor,  # [B] int
    *,
    scale: float,
    check: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One query row per head against its KV head. Returns out [B, H, d_h] and lse [B, H].

    Empty length → out 0, lse −inf. The head axis is reshaped [n_kv, H/n_kv] (no copy of K/V)
    so this path differs in operation order from layer_forward's repeat_interleave.
    """
    if check:
        validate_decode_inputs(q, k, v, lengths, scale=scale)
    B, H, d_h = q.shape
    T, n_kv = k.shape[1], k.shape[2]
    G = H // n_kv
    valid = valid_mask(lengths, T)  # [B, T]
    qg = q.reshape(B, n_kv, G, d_h)  # head h = n·G + g reads KV head n
    logits = torch.einsum("bngd,btnd->bngt", qg, k).reshape(B, H, T)
    a, lse = softmax_rows(logits * scale, valid[:, None, :])  # [B, H, T]
    vz = zero_garbage(v, valid)  # NaN garbage must not meet a zero weight
    out = torch.einsum("bngt,btnd->bngd", a.reshape(B, n_kv, G, T), vz)
    return out.reshape(B, H, d_h), lse


# ----------------------------------------------------------------------------- layer level
def project_token(weights: DenseWeights, x: torch.Tensor, positions: torch.Tensor) -> dict[str, torch.Tensor]:
    """Cache entries and the decode query of tokens x [..., d] at positions [...].

    Returns q [..., H, d_h], k and v [..., n_kv, d_h]; q and k normed (qk_norm) then rotated.
    """
    spec = weights.spec
    q = torch.einsum("...d,dhe->...he", x, weights.w_q)  # [..., H, d_h]
    k = torch.einsum("...d,dne->...ne", x, weights.w_k)  # [..., n_kv, d_h]
    v = torch.einsum("...d,dne->...ne", x, weights.w_v)
    if spec.qk_norm:
        # Post-projection, per head, before RoPE (the order of lrkv.layer_forward).
        q = rms_norm(q, weights.q_gain, spec.norm_eps)
        k = rms_norm(k, weights.k_gain, spec.norm_eps)
    if spec.rope == "exact":
        freqs = rope_freqs(spec.head_dim, spec.rope_theta)
        q = apply_rope(q, positions[..., None], freqs)
        k = apply_rope(k, positions[..., None], freqs)
    return {"q": q, "k": k, "v": v}


def layer_forward(weights: DenseWeights, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Training form: K/V expanded to every query head, causal softmax.  # y: [B, T, d]

    x [B, T, d]; padding positions (t >= lengths[b]) are masked as keys and their values
    zeroed with torch.where, so garbage (even NaN) in padding tokens cannot leak.
    """
    check_layer_input(weights, x, 3)
    spec = weights.spec
    B, T, _ = x.shape
    lengths = check_lengths(lengths, B, T, x.device)
    pos = torch.arange(T, device=x.device)[None, :].expand(B, T)
    p = project_token(weights, x, pos)
    q = p["q"]  # [B, T, H, d_h]
    k = p["k"].repeat_interleave(spec.group_size, dim=2)  # [B, T, H, d_h]  head h ← KV head h // G
    v = p["v"].repeat_interleave(spec.group_size, dim=2)
    out = causal_attention(q, k, v, valid_mask(lengths, T), spec.scale)  # [B, T, H, d_h]
    return torch.einsum("bthe,hed->btd", out, weights.w_o)


def prefill(
    weights: DenseWeights, x: torch.Tensor, lengths: torch.Tensor | None = None, t_max: int | None = None,
) -> tuple[torch.Tensor, DenseCache]:
    """Run the training form over a prompt and fill a cache with its first lengths[b] tokens."""
    return prefill_with(layer_forward, allocate_cache, project_token, weights, x, lengths, t_max)


def layer_step(
    weights: DenseWeights, x_t: torch.Tensor, cache: DenseCache, positions: torch.Tensor,
    *, decode=decode_attention,
) -> tuple[torch.Tensor, DenseCache]:
    """One decode step: project, append at slot positions[b], attend, output projection.  y: [B, d]"""
    check_step(weights, x_t, cache, positions)
    entries = project_token(weights, x_t, positions)
    append(cache, entries, positions)
    out, _ = decode(entries["q"], cache.k, cache.v, cache.lengths, scale=weights.spec.scale)
    return torch.einsum("bhd,hde->be", out, weights.w_o), cache
