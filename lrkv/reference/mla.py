"""MLA (multi-head latent attention) in float64 — naive and absorbed decode (DESIGN §10).

Two forms, chosen by spec.rope_dim:

* the LRKV paper's simplified MLA (rope_dim = 0): one latent c = x W_DKV of width d_c is all
  that is cached; every head reads it through its own up-projections
      K_h = C W_UK[h],   V_h = C W_UV[h]          W_UK[h], W_UV[h]: [d_c, d_h]
* DeepSeek-V3's MLA (rope_dim > 0; `inference/model.py`, attn_impl="absorb"):
      [c ‖ k_pe] = x W_KV_A,   c ← RMSNorm(c) · g   (kv_norm),   k_pe ← RoPE(k_pe)
  the cache holds the normed c (d_c) and the ROTATED single-head k_pe (d_rope): 512 + 64 = 576
  elements per token per layer at V3's sizes. The query is [q_nope ‖ q_pe] per head with q_pe
  rotated; the key of head h at slot j is [c_j W_UK[h] ‖ k_pe_j], shared k_pe for all heads.

Attention (both forms; the simplified one has no rope terms):
    logits_h = (q_nope,h · K_h^T + q_pe,h · K_pe^T) · scale,   scale = 1/sqrt(d_nope + d_rope)
    out_h    = softmax(logits_h) V_h,    y = Σ_h out_h W_O[h]

Naive decode materializes K_h and V_h from the cached latent. Absorbed decode uses
q_nope · (c W_UK[h]) = (q_nope W_UK[h]^T) · c  and  a (C W_UV[h]) = (a C) W_UV[h]:
    q_lat,h = q_nope,h W_UK[h]^T          (d_h → d_c, per head)
    o_h     = softmax((q_lat,h · C^T + q_pe,h · K_pe^T) · scale) C        (width d_c)
    out_h   = o_h W_UV[h]
so the kernel (`latent_decode_attention`, FlashMLA's shape) only ever reads the cache.

RoPE is rotate-half here (DESIGN §5); V3's code rotates interleaved pairs, which is the same
map after a fixed permutation of the d_rope channels of W_Q and W_KV_A.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..spec import AttentionSpec
from .dense import (
    LayerCache, cast_tensors, check_allocation, check_layer_input, check_lengths, check_step, check_weight_shapes, gain, prefill_with, require_dims, require_shape, require_tensor, validate_common,
)
from .lrkv import append
from .masking import causal_attention, softmax_rows, valid_mask, zero_garbage
from .norms import rms_norm
from .rope import apply_rope, rope_freqs


# ----------------------------------------------------------------------------- weights
@dataclass
class MLAWeights:
    spec: AttentionSpec
    w_q: torch.Tensor  # [d, H, d_h + d_rope]   [q_nope ‖ q_pe] per head
    w_kv_a: torch.Tensor  # [d, d_c + d_rope]      x → [c ‖ k_pe]  (W_DKV when d_rope = 0)
    w_uk: torch.Tensor  # [H, d_c, d_h]          K_h = C W_UK[h]
    w_uv: torch.Tensor  # [H, d_c, d_h]          V_h = C W_UV[h]
    w_o: torch.Tensor  # [H, d_h, d]
    kv_gain: torch.Tensor | None = None  # [d_c]  DeepSeek's kv_norm gain (rope_dim > 0 only)

    def __post_init__(self) -> None:
        s = self.spec
        if s.family != "mla":
            raise ValueError(f"MLAWeights needs an mla spec, got family {s.family!r}")
        d, H, d_h, d_c, d_r = s.d_model, s.n_heads, s.head_dim, s.latent_dim, s.rope_dim
        check_weight_shapes(self, dict(
            w_q=(d, H, d_h + d_r), w_kv_a=(d, d_c + d_r), w_uk=(H, d_c, d_h), w_uv=(H, d_c, d_h),
            w_o=(H, d_h, d), kv_gain=(d_c,) if d_r else None,
        ))

    def to(self, dtype: torch.dtype) -> MLAWeights:
        return cast_tensors(self, dtype)

    @property
    def dtype(self) -> torch.dtype:
        return self.w_q.dtype


def init_weights(spec: AttentionSpec, seed: int = 0, dtype: torch.dtype = torch.float64) -> MLAWeights:
    """Seeded Kaiming (std = 1/sqrt(fan_in)); kv_norm gain 1 + 0.1·N(0,1) so that it is exercised."""
    if spec.family != "mla":
        raise ValueError(f"mla.init_weights needs an mla spec, got family {spec.family!r}")
    g = torch.Generator().manual_seed(seed)
    d, H, d_h, d_c, d_r = spec.d_model, spec.n_heads, spec.head_dim, spec.latent_dim, spec.rope_dim

    def randn(*shape, std):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * std

    w_q = randn(d, H, d_h + d_r, std=d**-0.5)
    w_kv_a = randn(d, d_c + d_r, std=d**-0.5)
    w_uk, w_uv = randn(H, d_c, d_h, std=d_c**-0.5), randn(H, d_c, d_h, std=d_c**-0.5)
    w_o = randn(H, d_h, d, std=(H * d_h) ** -0.5)
    kv_gain = gain(1, d_c, g, tied=False)[0] if d_r else None
    return MLAWeights(spec, w_q, w_kv_a, w_uk, w_uv, w_o, kv_gain).to(dtype)


# ----------------------------------------------------------------------------- cache
@dataclass
class MLACache(LayerCache):
    latent: torch.Tensor  # [B, T_max, d_c]     c (kv_norm'd in the DeepSeek form)
    lengths: torch.Tensor  # [B] int32
    k_rope: torch.Tensor | None = None  # [B, T_max, d_rope]  rotated k_pe (rope_dim > 0 only)


def allocate_cache(
    spec: AttentionSpec, batch: int, t_max: int, dtype: torch.dtype = torch.float64,
    *, fill: float = float("nan"), device=None,
) -> MLACache:
    """An empty cache (lengths 0) with every slot filled with `fill` (NaN by default)."""
    if spec.family != "mla":
        raise ValueError(f"mla.allocate_cache needs an mla spec, got family {spec.family!r}")
    comp = check_allocation(spec, batch, t_max)
    full = lambda *s: torch.full(s, fill, dtype=dtype, device=device)  # noqa: E731
    return MLACache(
        latent=full(batch, t_max, spec.latent_dim),
        lengths=torch.zeros(batch, dtype=torch.int32, device=device),
        k_rope=full(batch, t_max, spec.rope_dim) if "k_rope" in comp else None,
    )


# ----------------------------------------------------------------------------- kernel level
def _validate_latent_kernel(q_latent, q_pe, latent, k_rope, lengths, *, scale) -> tuple[int, int, int, int, int]:
    """(B, T_max, H, d_c, d_rope) of the absorbed core; q_pe and k_rope are both None or both set."""
    for name, t in dict(q_latent=q_latent, latent=latent, lengths=lengths).items():
        require_tensor(name, t)
    require_dims("q_latent", q_latent, "[B, H, d_c]")
    require_dims("latent", latent, "[B, T_max, d_c]")
    B, H, d_c = q_latent.shape
    T = latent.shape[1]
    require_shape("latent", latent, (B, T, d_c))
    if (q_pe is None) != (k_rope is None):
        raise ValueError("q_pe and k_rope must both be given (DeepSeek form) or both be None (simplified)")
    d_r = 0
    if k_rope is not None:
        require_tensor("q_pe", q_pe)
        require_tensor("k_rope", k_rope)
        require_dims("k_rope", k_rope, "[B, T_max, d_rope]")
        d_r = k_rope.shape[2]
        require_shape("k_rope", k_rope, (B, T, d_r))
        require_shape("q_pe", q_pe, (B, H, d_r))
    validate_common(q_latent, cache=dict(latent=latent, k_rope=k_rope), weights=dict(q_pe=q_pe),
                    lengths=lengths, scale=scale, batch=B, t_max=T)
    return B, T, H, d_c, d_r


def latent_decode_attention(
    q_latent: torch.Tensor,  # [B, H, d_c]     q_nope W_UK^T, per head
    q_pe: torch.Tensor | None,  # [B, H, d_rope]  rotated
    latent: torch.Tensor,  # [B, T_max, d_c]
    k_rope: torch.Tensor | None,  # [B, T_max, d_rope]
    lengths: torch.Tensor,  # [B] int
    *,
    scale: float,
    check: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The absorbed core (FlashMLA's contract): attend over (k_pe, c), values = c itself.

    Returns o [B, H, d_c] (still in latent space) and lse [B, H]. Empty length → 0, −inf.
    """
    if check:
        _validate_latent_kernel(q_latent, q_pe, latent, k_rope, lengths, scale=scale)
    T = latent.shape[1]
    valid = valid_mask(lengths, T)  # [B, T]
    logits = torch.einsum("bhc,btc->bht", q_latent, latent)  # q_nope · (c W_UK)
    if k_rope is not None:
        logits = logits + torch.einsum("bhr,btr->bht", q_pe, k_rope)  # q_pe · k_pe, one k_pe for all heads
    a, lse = softmax_rows(logits * scale, valid[:, None, :])  # [B, H, T]
    c = zero_garbage(latent, valid)  # garbage slots zeroed before P·C
    return torch.einsum("bht,btc->bhc", a, c), lse


def validate_decode_inputs(q, latent, k_rope, w_uk, w_uv, lengths, *, scale) -> tuple[int, int, int, int, int, int]:
    """Check the MLA decode contract; return (B, T_max, H, d_h, d_c, d_rope)."""
    for name, t in dict(q=q, latent=latent, w_uk=w_uk, w_uv=w_uv, lengths=lengths).items():
        require_tensor(name, t)
    require_dims("q", q, "[B, H, d_h + d_rope]")
    require_dims("latent", latent, "[B, T_max, d_c]")
    require_dims("w_uk", w_uk, "[H, d_c, d_h]")
    B, H = q.shape[:2]
    T, d_c = latent.shape[1], latent.shape[2]
    d_h = w_uk.shape[2]
    require_shape("latent", latent, (B, T, d_c))
    require_shape("w_uk", w_uk, (H, d_c, d_h))
    require_shape("w_uv", w_uv, (H, d_c, d_h))
    d_r = 0
    if k_rope is not None:
        require_tensor("k_rope", k_rope)
        require_dims("k_rope", k_rope, "[B, T_max, d_rope]")
        d_r = k_rope.shape[2]
        require_shape("k_rope", k_rope, (B, T, d_r))
    require_shape("q", q, (B, H, d_h + d_r))
    validate_common(q, cache=dict(latent=latent, k_rope=k_rope), weights=dict(w_uk=w_uk, w_uv=w_uv),
                    lengths=lengths, scale=scale, batch=B, t_max=T)
    return B, T, H, d_h, d_c, d_r


def naive_decode_attention(
    q: torch.Tensor,  # [B, H, d_h + d_rope]  [q_nope ‖ q_pe], q_pe rotated
    latent: torch.Tensor,  # [B, T_max, d_c]
    k_rope: torch.Tensor | None,  # [B, T_max, d_rope]  rotated (None in the simplified form)
    w_uk: torch.Tensor,  # [H, d_c, d_h]
    w_uv: torch.Tensor,  # [H, d_c, d_h]
    lengths: torch.Tensor,  # [B] int
    *,
    scale: float,
    check: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Materialize K_h = [C W_UK[h] ‖ K_pe] and V_h = C W_UV[h], then attend. out [B, H, d_h], lse [B, H]."""
    if check:
        validate_decode_inputs(q, latent, k_rope, w_uk, w_uv, lengths, scale=scale)
    T, d_h = latent.shape[1], w_uk.shape[2]
    valid = valid_mask(lengths, T)
    k_nope = torch.einsum("btc,hcd->bthd", latent, w_uk)  # [B, T, H, d_h]
    v = torch.einsum("btc,hcd->bthd", latent, w_uv)  # [B, T, H, d_h]
    logits = torch.einsum("bhd,bthd->bht", q[..., :d_h], k_nope)
    if k_rope is not None:
        logits = logits + torch.einsum("bhr,btr->bht", q[..., d_h:], k_rope)
    a, lse = softmax_rows(logits * scale, valid[:, None, :])
    v = zero_garbage(v, valid)
    return torch.einsum("bht,bthd->bhd", a, v), lse


def absorbed_decode_attention(
    q: torch.Tensor,  # [B, H, d_h + d_rope]
    latent: torch.Tensor,  # [B, T_max, d_c]
    k_rope: torch.Tensor | None,  # [B, T_max, d_rope]
    w_uk: torch.Tensor,  # [H, d_c, d_h]
    w_uv: torch.Tensor,  # [H, d_c, d_h]
    lengths: torch.Tensor,  # [B] int
    *,
    scale: float,
    check: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Weight absorption: q_lat = q_nope W_UK^T; o = P C; out = o W_UV. Same contract as naive."""
    if check:
        validate_decode_inputs(q, latent, k_rope, w_uk, w_uv, lengths, scale=scale)
    d_h = w_uk.shape[2]
    q_latent = torch.einsum("bhd,hcd->bhc", q[..., :d_h], w_uk)  # [B, H, d_c]
    q_pe = q[..., d_h:] if k_rope is not None else None
    o, lse = latent_decode_attention(q_latent, q_pe, latent, k_rope, lengths, scale=scale, check=False)
    return torch.einsum("bhc,hcd->bhd", o, w_uv), lse  # o W_UV per head


decode_attention = absorbed_decode_attention  # the default kernel-level path


# ----------------------------------------------------------------------------- layer level
def project_token(weights: MLAWeights, x: torch.Tensor, positions: torch.Tensor) -> dict[str, torch.Tensor]:
    """Cache entries and decode query of tokens x [..., d] at positions [...].

    Returns latent [..., d_c] (kv_norm'd in the DeepSeek form), k_rope [..., d_rope] (rotated;
    DeepSeek form only) and q [..., H, d_h + d_rope] with q_pe rotated.
    """
    spec = weights.spec
    d_h, d_c, d_r = spec.head_dim, spec.latent_dim, spec.rope_dim
    q = torch.einsum("...d,dhe->...he", x, weights.w_q)  # [..., H, d_h + d_rope]
    ckv = x @ weights.w_kv_a  # [..., d_c + d_rope]
    out = {}
    if d_r == 0:
        out["latent"] = ckv  # the paper's simplified MLA: c = x W_DKV, no norm, no rope
    else:
        c, k_pe = ckv.split([d_c, d_r], dim=-1)
        out["latent"] = rms_norm(c, weights.kv_gain, spec.norm_eps)  # kv_norm; k_pe is not normed
        freqs = rope_freqs(d_r, spec.rope_theta)
        out["k_rope"] = apply_rope(k_pe, positions, freqs)  # cached rotated: decode is position-free
        q = torch.cat((q[..., :d_h], apply_rope(q[..., d_h:], positions[..., None], freqs)), dim=-1)
    out["q"] = q
    return out


def layer_forward(weights: MLAWeights, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Training form: K_h = [C W_UK[h] ‖ K_pe], V_h = C W_UV[h], causal softmax.  # y: [B, T, d]

    x [B, T, d]; padding positions (t >= lengths[b]) are masked as keys (values zeroed).
    """
    check_layer_input(weights, x, 3)
    spec = weights.spec
    B, T, _ = x.shape
    lengths = check_lengths(lengths, B, T, x.device)
    p = project_token(weights, x, torch.arange(T, device=x.device)[None, :].expand(B, T))
    k = torch.einsum("btc,hcd->bthd", p["latent"], weights.w_uk)  # [B, T, H, d_h]
    v = torch.einsum("btc,hcd->bthd", p["latent"], weights.w_uv)
    if spec.rope_dim:
        k_pe = p["k_rope"][:, :, None, :].expand(B, T, spec.n_heads, spec.rope_dim)  # broadcast to heads
        k = torch.cat((k, k_pe), dim=-1)  # [B, T, H, d_h + d_rope]
    out = causal_attention(p["q"], k, v, valid_mask(lengths, T), spec.scale)  # [B, T, H, d_h]
    return torch.einsum("bthe,hed->btd", out, weights.w_o)


def prefill(
    weights: MLAWeights, x: torch.Tensor, lengths: torch.Tensor | None = None, t_max: int | None = None,
) -> tuple[torch.Tensor, MLACache]:
    """Run the training form over a prompt and fill a latent cache with its first lengths[b] tokens."""
    return prefill_with(layer_forward, allocate_cache, project_token, weights, x, lengths, t_max)


def layer_step(
    weights: MLAWeights, x_t: torch.Tensor, cache: MLACache, positions: torch.Tensor,
    *, absorbed: bool = True,
) -> tuple[torch.Tensor, MLACache]:
    """One decode step: project, append, attend (absorbed by default, naive with absorbed=False),
    output projection.  y: [B, d]"""
    return latent_layer_step(project_token, absorbed_decode_attention if absorbed else naive_decode_attention,
                             weights, x_t, cache, positions)


def latent_layer_step(project, decode, weights, x_t: torch.Tensor, cache, positions: torch.Tensor):
    """The decode step of a latent cache (MLA, MLRA): project, append, attend over the
    latent (and k_rope), output projection.  y: [B, d]"""
    check_step(weights, x_t, cache, positions)
    entries = project(weights, x_t, positions)
    append(cache, entries, positions)
    out, _ = decode(entries["q"], cache.latent, cache.k_rope, weights.w_uk, weights.w_uv, cache.lengths,
                    scale=weights.spec.scale)
    return torch.einsum("bhd,hde->be", out, weights.w_o), cache
