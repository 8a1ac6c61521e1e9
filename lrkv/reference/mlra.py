"""MLRA (multi-head low-rank attention, arXiv 2603.02188) in float64 — naive and absorbed decode.

After the public code (SongtaoLiu0823/MLRA `model/mlra_4.py`, `mlra_2.py`, `mlra_4_gen.py`;
DESIGN §10). With L latent heads of width d_c, n_b branches and g = L / n_b head groups:

    [c ‖ k_pe] = x W_KV_A,   c = [c_0 ‖ … ‖ c_{L−1}]
    ĉ_l   = RMSNorm_l(c_l) · g_l · sqrt(d / d_c)       one norm (and gain) per latent head
    k_pe  ← RoPE(k_pe)                                  one d_rope-wide key shared by all branches
    q     = [q_nope ‖ q_pe] per head, q_pe rotated      shared by all branches

Branch b splits the H heads into g equal groups; group j (heads j·H/g … (j+1)·H/g − 1) reads
latent head l(b, h) = b·g + j. MLRA-4 (L = 4, n_b = 4): every head reads latent b in branch b;
MLRA-2 (L = 4, n_b = 2): branch A reads latents 0, 1, branch B latents 2, 3. Per branch and head

    K_{b,h} = [Ĉ_{l(b,h)} W_UK[b,h] ‖ K_pe],   V_{b,h} = Ĉ_{l(b,h)} W_UV[b,h]
    O_{b,h} = softmax(q_h K_{b,h}^T · scale) V_{b,h},   scale = 1/sqrt(d_h + d_rope)
    O_h     = (Σ_b O_{b,h}) / sqrt(n_b),   y = Σ_h O_h W_O[h]

The cache is ĉ (L·d_c) and the rotated k_pe (d_rope): 4·128 + 64 = 576 per token per layer at
the public sizes, and at 4-way TP one latent head plus the replicated k_pe (192) per device.

Absorbed decode, per branch: qv_b = q_nope W_UK[b]^T (d_h → d_c per head), attend over
(k_pe, ĉ_{l(b,·)}) with ĉ as the values, then y_b = z_b W_UV[b] — the cache is read as is.

Simplifications against the public code (none changes the attention algebra verified here):
the query is one dense projection (the code's q_a → RMSNorm → q_b low-rank path is a
reparametrisation of W_Q), RoPE is this suite's rotate-half (the code's convention too), and the
absorbed scale is the training form's 1/sqrt(d_h + d_rope) (flash_attn's qv default
1/sqrt(d_rope + d_c) coincides with it only when d_c = d_h, as in the public configs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch

from ..spec import AttentionSpec
from .dense import (
    LayerCache, cast_tensors, check_allocation, check_layer_input, check_lengths, check_weight_shapes, gain,
    prefill_with, require_dims, require_shape, require_tensor, validate_common,
)
from .masking import causal_attention, softmax_rows, valid_mask, zero_garbage
from .mla import latent_layer_step
from .norms import rms_norm
from .rope import apply_rope, rope_freqs


def latent_of_head(n_latent_heads: int, n_branches: int, n_heads: int, device=None) -> torch.Tensor:
    """l(b, h) = b·g + h // (H/g), g = L / n_b: the latent head query head h reads in branch b.  # [n_b, H]"""
    g = n_latent_heads // n_branches
    per_group = n_heads // g
    b = torch.arange(n_branches, device=device)[:, None]
    h = torch.arange(n_heads, device=device)[None, :]
    return b * g + h // per_group


# ----------------------------------------------------------------------------- weights
@dataclass
class MLRAWeights:
    spec: AttentionSpec
    w_q: torch.Tensor  # [d, H, d_h + d_rope]      [q_nope ‖ q_pe], shared by all branches
    w_kv_a: torch.Tensor  # [d, L·d_c + d_rope]       x → [c_0 ‖ … ‖ c_{L−1} ‖ k_pe]
    kv_gain: torch.Tensor  # [L, d_c]                  one RMSNorm gain per latent head
    w_uk: torch.Tensor  # [n_b, H, d_c, d_h]        K_nope of head h in branch b = ĉ_{l(b,h)} W_UK[b,h]
    w_uv: torch.Tensor  # [n_b, H, d_c, d_h]        V of head h in branch b      = ĉ_{l(b,h)} W_UV[b,h]
    w_o: torch.Tensor  # [H, d_h, d]

    def __post_init__(self) -> None:
        s = self.spec
        if s.family != "mlra":
            raise ValueError(f"MLRAWeights needs an mlra spec, got family {s.family!r}")
        d, H, d_h, d_c, d_r = s.d_model, s.n_heads, s.head_dim, s.latent_dim, s.rope_dim
        L, nb = s.n_latent_heads, s.n_branches
        check_weight_shapes(self, dict(
            w_q=(d, H, d_h + d_r), w_kv_a=(d, L * d_c + d_r), kv_gain=(L, d_c),
            w_uk=(nb, H, d_c, d_h), w_uv=(nb, H, d_c, d_h), w_o=(H, d_h, d),
        ))

    def to(self, dtype: torch.dtype) -> MLRAWeights:
        return cast_tensors(self, dtype)

    @property
    def dtype(self) -> torch.dtype:
        return self.w_q.dtype

    def kv_b_proj(self) -> torch.Tensor:
        """The public code's layout: [L, d_c, (H/g)·2·d_h], per head [k_nope ‖ v] of the H/g heads
        that read latent head l = b·g + j (heads j·H/g …).  Used to check the branch mapping."""
        s = self.spec
        L, nb, H, d_c, d_h = s.n_latent_heads, s.n_branches, s.n_heads, s.latent_dim, s.head_dim
        g = L // nb
        kv = torch.stack((self.w_uk, self.w_uv), dim=-2)  # [n_b, H, d_c, 2, d_h]
        kv = kv.reshape(nb, g, H // g, d_c, 2, d_h)  # head h = j·(H/g) + i
        kv = kv.permute(0, 1, 3, 2, 4, 5)  # [n_b, g, d_c, H/g, 2, d_h]; latent l = b·g + j
        return kv.reshape(L, d_c, (H // g) * 2 * d_h)


def init_weights(spec: AttentionSpec, seed: int = 0, dtype: torch.dtype = torch.float64) -> MLRAWeights:
    """Seeded Kaiming-like init; the up-projections are scaled for ĉ's RMS of sqrt(d/d_c) so keys
    and values are O(1). (The public code's N(0, 0.02) with a zero W_O would make y ≡ 0.)"""
    if spec.family != "mlra":
        raise ValueError(f"mlra.init_weights needs an mlra spec, got family {spec.family!r}")
    g = torch.Generator().manual_seed(seed)
    d, H, d_h, d_c, d_r = spec.d_model, spec.n_heads, spec.head_dim, spec.latent_dim, spec.rope_dim
    L, nb = spec.n_latent_heads, spec.n_branches

    def randn(*shape, std):
        return torch.randn(*shape, generator=g, dtype=torch.float64) * std

    w_q = randn(d, H, d_h + d_r, std=d**-0.5)
    w_kv_a = randn(d, L * d_c + d_r, std=d**-0.5)
    kv_gain = gain(L, d_c, g, tied=False)
    w_uk, w_uv = randn(nb, H, d_c, d_h, std=d**-0.5), randn(nb, H, d_c, d_h, std=d**-0.5)
    w_o = randn(H, d_h, d, std=(H * d_h) ** -0.5)
    return MLRAWeights(spec, w_q, w_kv_a, kv_gain, w_uk, w_uv, w_o).to(dtype)


# ----------------------------------------------------------------------------- cache
@dataclass
class MLRACache(LayerCache):
    latent: torch.Tensor  # [B, T_max, L, d_c]   ĉ: normed, gained and scaled latent heads
    lengths: torch.Tensor  # [B] int32
    k_rope: torch.Tensor | None = None  # [B, T_max, d_rope]  rotated k_pe (rope_dim > 0 only)


def allocate_cache(
    spec: AttentionSpec, batch: int, t_max: int, dtype: torch.dtype = torch.float64,
    *, fill: float = float("nan"), device=None,
) -> MLRACache:
    """An empty cache (lengths 0) with every slot filled with `fill` (NaN by default)."""
    if spec.family != "mlra":
        raise ValueError(f"mlra.allocate_cache needs an mlra spec, got family {spec.family!r}")
    comp = check_allocation(spec, batch, t_max)
    full = lambda *s: torch.full(s, fill, dtype=dtype, device=device)  # noqa: E731
    return MLRACache(
        latent=full(batch, t_max, spec.n_latent_heads, spec.latent_dim),
        lengths=torch.zeros(batch, dtype=torch.int32, device=device),
        k_rope=full(batch, t_max, spec.rope_dim) if "k_rope" in comp else None,
    )


# ----------------------------------------------------------------------------- kernel level
def branch_decode_attention(
    q_latent: torch.Tensor,  # [B, H, d_c]     qv_b = q_nope W_UK[b]^T
    q_pe: torch.Tensor | None,  # [B, H, d_rope]  rotated
    latent: torch.Tensor,  # [B, T_max, g, d_c]  this branch's latent heads, group j reads [:, :, j]
    k_rope: torch.Tensor | None,  # [B, T_max, d_rope]
    lengths: torch.Tensor,  # [B] int
    *,
    scale: float,
    check: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """One branch's absorbed core: heads in g groups, group j attends over (k_pe, ĉ_j) with ĉ_j as
    the values (g = 1: MLA's latent kernel). Returns z [B, H, d_c] and lse [B, H]."""
    if check:
        for name, t in dict(q_latent=q_latent, latent=latent, lengths=lengths).items():
            require_tensor(name, t)
        require_dims("q_latent", q_latent, "[B, H, d_c]")
        require_dims("latent", latent, "[B, T_max, g, d_c]")
        B, H, d_c = q_latent.shape
        T, g = latent.shape[1], latent.shape[2]
        require_shape("latent", latent, (B, T, g, d_c))
        if g < 1 or H % g:
            raise ValueError(f"the group count g (latent.shape[2] = {g}) must divide H ({H})")
        if (q_pe is None) != (k_rope is None):
            raise ValueError("q_pe and k_rope must both be given or both be None")
        if k_rope is not None:
            require_tensor("q_pe", q_pe)
            require_tensor("k_rope", k_rope)
            require_dims("k_rope", k_rope, "[B, T_max, d_rope]")
            require_shape("k_rope", k_rope, (B, T, k_rope.shape[2]))
            require_shape("q_pe", q_pe, (B, H, k_rope.shape[2]))
        validate_common(q_latent, cache=dict(latent=latent, k_rope=k_rope), weights=dict(q_pe=q_pe),
                        lengths=lengths, scale=scale, batch=B, t_max=T)
    B, H, d_c = q_latent.shape
    T, g = latent.shape[1], latent.shape[2]
    valid = valid_mask(lengths, T)  # [B, T]
    qg = q_latent.reshape(B, g, H // g, d_c)  # head h = j·(H/g) + i reads latent j
    logits = torch.einsum("bjic,btjc->bjit", qg, latent).reshape(B, H, T)
    if k_rope is not None:
        logits = logits + torch.einsum("bhr,btr->bht", q_pe, k_rope)  # k_pe shared by every branch
    a, lse = softmax_rows(logits * scale, valid[:, None, :])  # [B, H, T]
    c = zero_garbage(latent, valid)  # garbage slots zeroed before P·Ĉ
    z = torch.einsum("bjit,btjc->bjic", a.reshape(B, g, H // g, T), c)
    return z.reshape(B, H, d_c), lse


def validate_decode_inputs(q, latent, k_rope, w_uk, w_uv, lengths, *, scale) -> tuple[int, ...]:
    """Check the MLRA decode contract; return (B, T_max, H, d_h, L, d_c, n_b, d_rope)."""
    for name, t in dict(q=q, latent=latent, w_uk=w_uk, w_uv=w_uv, lengths=lengths).items():
        require_tensor(name, t)
    require_dims("q", q, "[B, H, d_h + d_rope]")
    require_dims("latent", latent, "[B, T_max, L, d_c]")
    require_dims("w_uk", w_uk, "[n_b, H, d_c, d_h]")
    B, H = q.shape[:2]
    T, L, d_c = latent.shape[1:]
    nb, d_h = w_uk.shape[0], w_uk.shape[3]
    require_shape("latent", latent, (B, T, L, d_c))
    require_shape("w_uk", w_uk, (nb, H, d_c, d_h))
    require_shape("w_uv", w_uv, (nb, H, d_c, d_h))
    if nb < 1 or L % nb:
        raise ValueError(f"n_b (w_uk.shape[0] = {nb}) must divide L (latent.shape[2] = {L})")
    if H % (L // nb):
        raise ValueError(f"H ({H}) must be divisible by the group count L/n_b = {L // nb}")
    d_r = 0
    if k_rope is not None:
        require_tensor("k_rope", k_rope)
        require_dims("k_rope", k_rope, "[B, T_max, d_rope]")
        d_r = k_rope.shape[2]
        require_shape("k_rope", k_rope, (B, T, d_r))
    require_shape("q", q, (B, H, d_h + d_r))
    validate_common(q, cache=dict(latent=latent, k_rope=k_rope), weights=dict(w_uk=w_uk, w_uv=w_uv),
                    lengths=lengths, scale=scale, batch=B, t_max=T)
    return B, T, H, d_h, L, d_c, nb, d_r


def naive_decode_attention(
    q: torch.Tensor,  # [B, H, d_h + d_rope]  [q_nope ‖ q_pe], q_pe rotated
    latent: torch.Tensor,  # [B, T_max, L, d_c]
    k_rope: torch.Tensor | None,  # [B, T_max, d_rope]  rotated
    w_uk: torch.Tensor,  # [n_b, H, d_c, d_h]
    w_uv: torch.Tensor,  # [n_b, H, d_c, d_h]
    lengths: torch.Tensor,  # [B] int
    *,
    scale: float,
    check: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Materialize K_{b,h}, V_{b,h} for every branch, softmax per branch, O = Σ_b O_b / sqrt(n_b).

    Returns out [B, H, d_h] and lse [B, n_b, H] (one softmax per branch).
    """
    if check:
        validate_decode_inputs(q, latent, k_rope, w_uk, w_uv, lengths, scale=scale)
    T, L = latent.shape[1], latent.shape[2]
    nb, H, d_h = w_uk.shape[0], w_uk.shape[1], w_uk.shape[3]
    valid = valid_mask(lengths, T)
    idx = latent_of_head(L, nb, H, device=latent.device)  # [n_b, H]
    c = latent[:, :, idx]  # [B, T, n_b, H, d_c]  the latent head each (branch, head) reads
    k = torch.einsum("btnhc,nhcd->bnthd", c, w_uk)  # [B, n_b, T, H, d_h]
    v = torch.einsum("btnhc,nhcd->bnthd", c, w_uv)
    logits = torch.einsum("bhd,bnthd->bnht", q[..., :d_h], k)
    if k_rope is not None:
        logits = logits + torch.einsum("bhr,btr->bht", q[..., d_h:], k_rope)[:, None]  # same k_pe per branch
    a, lse = softmax_rows(logits * scale, valid[:, None, None, :])  # [B, n_b, H, T]: a softmax per branch
    v = torch.where(valid[:, None, :, None, None], v, 0.0)
    out = torch.einsum("bnht,bnthd->bhd", a, v) / math.sqrt(nb)  # Σ_b O_b / sqrt(n_b)
    return out, lse


def absorbed_decode_attention(
    q: torch.Tensor,  # [B, H, d_h + d_rope]
    latent: torch.Tensor,  # [B, T_max, L, d_c]
    k_rope: torch.Tensor | None,  # [B, T_max, d_rope]
    w_uk: torch.Tensor,  # [n_b, H, d_c, d_h]
    w_uv: torch.Tensor,  # [n_b, H, d_c, d_h]
    lengths: torch.Tensor,  # [B] int
    *,
    scale: float,
    check: bool = True,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Per branch: qv_b = q_nope W_UK[b]^T, z_b = branch attention over (k_pe, ĉ), y_b = z_b W_UV[b];
    out = Σ_b y_b / sqrt(n_b). Same contract as the naive path."""
    if check:
        validate_decode_inputs(q, latent, k_rope, w_uk, w_uv, lengths, scale=scale)
    L = latent.shape[2]
    nb, d_h = w_uk.shape[0], w_uk.shape[3]
    g = L // nb
    q_nope = q[..., :d_h]
    q_pe = q[..., d_h:] if k_rope is not None else None
    out, lses = 0.0, []
    for b in range(nb):
        q_latent = torch.einsum("bhd,hcd->bhc", q_nope, w_uk[b])  # [B, H, d_c]
        z, lse = branch_decode_attention(q_latent, q_pe, latent[:, :, b * g:(b + 1) * g], k_rope, lengths,
                                         scale=scale, check=False)
        out = out + torch.einsum("bhc,hcd->bhd", z, w_uv[b])  # y_b = z_b W_UV[b]
        lses.append(lse)
    return out / math.sqrt(nb), torch.stack(lses, dim=1)


decode_attention = absorbed_decode_attention  # the default kernel-level path


# ----------------------------------------------------------------------------- layer level
def project_token(weights: MLRAWeights, x: torch.Tensor, positions: torch.Tensor) -> dict[str, torch.Tensor]:
    """Cache entries and decode query of tokens x [..., d] at positions [...].

    Returns latent [..., L, d_c] (ĉ), k_rope [..., d_rope] (rotated; rope_dim > 0 only) and
    q [..., H, d_h + d_rope] with q_pe rotated. L and H are what `weights` holds, so a
    tensor-parallel rank's shard of the latent and query heads projects with this too.
    """
    spec = weights.spec
    d_h, d_c, d_r, L = spec.head_dim, spec.latent_dim, spec.rope_dim, weights.kv_gain.shape[0]
    q = torch.einsum("...d,dhe->...he", x, weights.w_q)  # [..., H, d_h + d_rope]
    c, k_pe = (x @ weights.w_kv_a).split([L * d_c, d_r], dim=-1)
    c = c.unflatten(-1, (L, d_c))  # [..., L, d_c]
    # Each latent head has its own RMSNorm; the sqrt(d/d_c) scale is part of what is cached.
    out = {"latent": rms_norm(c, weights.kv_gain, spec.norm_eps) * math.sqrt(spec.d_model / d_c)}
    if d_r:
        freqs = rope_freqs(d_r, spec.rope_theta)
        out["k_rope"] = apply_rope(k_pe, positions, freqs)
        q = torch.cat((q[..., :d_h], apply_rope(q[..., d_h:], positions[..., None], freqs)), dim=-1)
    out["q"] = q
    return out


def layer_forward(weights: MLRAWeights, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Training form: materialize every branch's K_{b,h}, V_{b,h}; a causal softmax per branch;
    O = Σ_b O_b / sqrt(n_b).  x [B, T, d], padding keys masked.  # y: [B, T, d]"""
    check_layer_input(weights, x, 3)
    spec = weights.spec
    B, T, _ = x.shape
    H, nb, d_r = spec.n_heads, spec.n_branches, spec.rope_dim
    lengths = check_lengths(lengths, B, T, x.device)
    p = project_token(weights, x, torch.arange(T, device=x.device)[None, :].expand(B, T))
    valid = valid_mask(lengths, T)
    idx = latent_of_head(spec.n_latent_heads, nb, H, device=x.device)  # [n_b, H]
    out = 0.0
    for b in range(nb):
        c = p["latent"][:, :, idx[b]]  # [B, T, H, d_c]
        k = torch.einsum("bthc,hcd->bthd", c, weights.w_uk[b])  # [B, T, H, d_h]
        v = torch.einsum("bthc,hcd->bthd", c, weights.w_uv[b])
        if d_r:
            k = torch.cat((k, p["k_rope"][:, :, None, :].expand(B, T, H, d_r)), dim=-1)
        out = out + causal_attention(p["q"], k, v, valid, spec.scale)  # [B, T, H, d_h]: a softmax per branch
    out = out / math.sqrt(nb)
    return torch.einsum("bthe,hed->btd", out, weights.w_o)


def prefill(
    weights: MLRAWeights, x: torch.Tensor, lengths: torch.Tensor | None = None, t_max: int | None = None,
) -> tuple[torch.Tensor, MLRACache]:
    """Run the training form over a prompt and fill the cache with its first lengths[b] tokens."""
    return prefill_with(layer_forward, allocate_cache, project_token, weights, x, lengths, t_max)


def layer_step(
    weights: MLRAWeights, x_t: torch.Tensor, cache: MLRACache, positions: torch.Tensor,
    *, absorbed: bool = True,
) -> tuple[torch.Tensor, MLRACache]:
    """One decode step: project, append, attend (absorbed by default, naive with absorbed=False),
    output projection.  y: [B, d]"""
    return latent_layer_step(project_token, absorbed_decode_attention if absorbed else naive_decode_attention,
                             weights, x_t, cache, positions)
