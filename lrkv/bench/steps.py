"""The decode steps the benchmark compiles: LRKV factored (Eqs. 6–7) and materialized, MHA/GQA/MQA,
MLA and MLRA absorbed — each in the form that suits its cache layout.

Every cache in this suite is laid out time-major (`[B, T_max, ...]`, DESIGN §3). A decode
step has two contractions over the time axis T:

  scores   logits[b, t, h] = Σ_x cache[b, t, h, x] · query[b, h, x]   (reduce the INNER dim)
  values   out[b, h, x]    = Σ_t a[b, t, h] · cache[b, t, h, x]       (reduce the OUTER dim)

When a cache row serves ONE or few heads (MHA, GQA with G < GEMM_MIN_HEADS, LRKV's private
latents), writing these as einsums makes per-head batched GEMVs over a strided view:
torch.compile (inductor, CPU) then walks the cache one head at a time with a stride of
H·x elements — about one 4 KiB page per step — and runs at a fraction of the copy
bandwidth (1.7-4x slower, docs/bench.md). So those rows stream time-major:
  * scores as a broadcast multiply + `sum(-1)` — one pass over the rows — transposed to
    [B, H, T] for the softmax (`lrkv.reference.masking.softmax_rows`, time innermost);
  * values with `sum_over_time` over a time-major copy of the weights (`time_major`): T is
    viewed as chunks and the innermost chunk is reduced first, so each chunk of rows stays
    in L1 while every head reads its slice.
When a row serves MANY heads (MQA, MLA's latent, each MLRA branch, LRKV's shared block) the
contraction is a real GEMM with the heads as its M dimension and stays an einsum — which
is exactly how the float64 references are written, so MQA, MLA and MLRA compile the
reference kernels themselves (validation off). Variants with a time-major softmax or all
MLRA branches in one einsum measured up to 2x slower (docs/bench.md).

The math is the references' — the same sums in another order, masked with the same
`lrkv.reference.masking` functions; tests/bench/test_bench.py checks every step against
the float64 oracle of its family.
"""

from __future__ import annotations

import torch

from ..reference import dense, mla, mlra
from ..reference.masking import softmax_rows, valid_mask, zero_garbage

# Heads per cache row from which the GEMM form beats streaming (measured on the dev CPU:
# GQA at G = 3 streams 3-4x faster than its per-group GEMMs, MQA at G = 18 runs ~25% faster
# as one GEMM). Between 3 and 18 it is a guess; 8 is where a GEMM's M fills half a vector.
GEMM_MIN_HEADS = 8

# Time is reduced in two levels: INNER rows at a time (8 rows of an [H=18, r=55] float32
# latent are 31 KiB: L1-sized, so every head's slice is read from L1), then OUTER of those
# partials, then the rest. Each level writes 1/chunk of its input, so two levels leave a
# 1/128-sized partial instead of the 1/8 one level would (measured: 1/8 costs ~10% of the
# value pass; larger single chunks spill L1 and run slower, see docs/bench.md).
INNER_CHUNK = 8
OUTER_CHUNK = 16


# ----------------------------------------------------------------------------- time-major pieces
def time_chunks(t_max: int) -> tuple[int, ...]:
    """The chunk lengths sum_over_time uses for a cache of t_max slots (innermost first).

    Under torch.compile with a dynamic T this becomes a divisibility guard, so a cache whose
    T_max is a multiple of 128 (every benchmark shape) compiles once.
    """
    if t_max % (INNER_CHUNK * OUTER_CHUNK) == 0:
        return (INNER_CHUNK, OUTER_CHUNK)
    if t_max % INNER_CHUNK == 0:
        return (INNER_CHUNK,)
    return ()


def time_major(a: torch.Tensor) -> torch.Tensor:
    """Softmax weights [B, H, T] -> a contiguous [B, T, H] copy for a streamed value pass.

    The copy is 1/x of the cache rows it multiplies (x = r or d_h); reading a strided
    inside the value pass instead measured slower.
    """
    return a.transpose(1, 2).contiguous()


def sum_over_time(x: torch.Tensor) -> torch.Tensor:
    """Σ_t x[:, t] for x [B, T, ...] -> [B, ...], in L1-sized chunks of time (see module doc)."""
    B, T = x.shape[:2]
    chunks = time_chunks(T)  # innermost first
    n = 1
    for c in chunks:
        n *= c
    k = len(chunks)
    # [B, T/n, c_outer, ..., c_inner, ...]: the innermost chunk sits next to the payload dims.
    y = x.reshape(B, T // n, *reversed(chunks), *x.shape[2:])
    for i in range(k):
        y = y.sum(1 + k - i)  # innermost chunk first
    return y.sum(1)


# ----------------------------------------------------------------------------- LRKV
def factored_step(
    q: torch.Tensor,  # [B, H, d_h]
    shared_k: torch.Tensor,  # [B, T, d_h]
    shared_v: torch.Tensor,  # [B, T, d_h]
    latent_k: torch.Tensor,  # [B, T, H, r]
    latent_v: torch.Tensor,  # [B, T, H, r]
    basis_k: torch.Tensor,  # [H, d_h, r]
    basis_v: torch.Tensor,  # [H, d_h, r]
    lengths: torch.Tensor,  # [B] int
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eqs. 6–7 reading each latent once (no RoPE, no key_scale: the linear core). Returns
    out [B, H, d_h], lse [B, H].

        logits_h = q_h S_K^T + (q_h B_h^K) R_h^{K T}     (Eq. 6, one softmax of the sum)
        out_h    = a_h S_V + (a_h R_h^V) B_h^{V T}       (Eq. 7)

    The shared block serves all H heads, so its two contractions are GEMMs with the heads as
    M (`[H, d_h] x [d_h, T]` and `[H, T] x [T, d_h]`) — MQA's arithmetic, the "1" of LRKV's
    1 + r/d_h + r/T; each head reads its own latent rows, so the private contractions stream.
    """
    # Second copy of reference.lrkv.decode_attention: time-major on purpose (the form inductor streams fast).
    valid = valid_mask(lengths, shared_k.shape[1])  # [B, T]
    # Eq. 6. q_h B_h^K first (r·d_h per head, independent of T), so the T-long scan is r wide.
    q_lat = torch.einsum("bhd,hdr->bhr", q, basis_k)  # [B, H, r]
    shared_logits = torch.einsum("bhd,btd->bht", q, shared_k)  # [B, H, T]  GEMM, heads as M
    private_logits = (latent_k * q_lat[:, None]).sum(-1)  # [B, T, H]  one pass over R^K
    logits = shared_logits + private_logits.transpose(1, 2)  # summed BEFORE one softmax
    a, lse = softmax_rows(logits * scale, valid[:, None, :])  # [B, H, T], [B, H]
    # Eq. 7. Zeroing the garbage of S_V before the GEMM costs one copy of it (inductor cannot
    # fuse a prologue into the extern GEMM); streaming this product instead measured 2x slower.
    sv = zero_garbage(shared_v, valid)  # [B, T, d_h]
    out_shared = torch.einsum("bht,btd->bhd", a, sv)  # a_h S_V
    z = sum_over_time(time_major(a)[..., None] * zero_garbage(latent_v, valid))  # [B, H, r]  a_h R_h^V
    out_private = torch.einsum("bhr,hdr->bhd", z, basis_v)  # (a_h R_h^V) B_h^{V T}
    return out_shared + out_private, lse


def materialized_step(
    q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same contract by rebuilding K_h = S_K + R_h^K B_h^{K T} and V_h per slot, then
    attending like MHA: what a model without the factored kernel pays (2·T·H·r·d_h extra
    multiply-adds and two MHA-sized temporaries). out [B, H, d_h], lse [B, H]."""
    # Second copy of reference.lrkv.materialized_decode_attention: time-major on purpose, like dense_step.
    valid = valid_mask(lengths, shared_k.shape[1])
    k = shared_k[:, :, None, :] + torch.einsum("bthr,hdr->bthd", latent_k, basis_k)  # [B, T, H, d_h]
    v = shared_v[:, :, None, :] + torch.einsum("bthr,hdr->bthd", latent_v, basis_v)  # [B, T, H, d_h]
    a, lse = softmax_rows((k * q[:, None]).sum(-1).transpose(1, 2) * scale, valid[:, None, :])  # [B, H, T]
    return sum_over_time(time_major(a)[..., None] * zero_garbage(v, valid)), lse


# ----------------------------------------------------------------------------- peers
def dense_step(
    q: torch.Tensor,  # [B, H, d_h]
    k: torch.Tensor,  # [B, T, n_kv, d_h]
    v: torch.Tensor,  # [B, T, n_kv, d_h]
    lengths: torch.Tensor,  # [B] int
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """MHA (n_kv = H), GQA, MQA (n_kv = 1): head h = n·G + g reads KV head n. out [B, H, d_h], lse [B, H]."""
    B, H, d_h = q.shape
    T, n_kv = k.shape[1], k.shape[2]
    G = H // n_kv
    if G >= GEMM_MIN_HEADS:
        return dense.decode_attention(q, k, v, lengths, scale=scale, check=False)
    # Second copy of reference.dense.decode_attention: time-major on purpose, for rows few heads read.
    valid = valid_mask(lengths, T)
    logits = (k[:, :, :, None, :] * q.reshape(B, 1, n_kv, G, d_h)).sum(-1)  # [B, T, n_kv, G]
    a, lse = softmax_rows(logits.reshape(B, T, H).transpose(1, 2) * scale, valid[:, None, :])  # [B, H, T]
    at = time_major(a).reshape(B, T, n_kv, G, 1)
    out = sum_over_time(at * zero_garbage(v, valid)[:, :, :, None, :])  # [B, n_kv, G, d_h]
    return out.reshape(B, H, d_h), lse


def mla_step(q, latent, k_rope, w_uk, w_uv, lengths, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Absorbed MLA (GEMM form): the reference kernel, validation off. out [B, H, d_h], lse [B, H]."""
    return mla.absorbed_decode_attention(q, latent, k_rope, w_uk, w_uv, lengths, scale=scale, check=False)


def mlra_step(q, latent, k_rope, w_uk, w_uv, lengths, scale: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Absorbed MLRA, one GEMM pair per branch: the reference kernel, validation off.
    out [B, H, d_h], lse [B, n_b, H]."""
    return mlra.absorbed_decode_attention(q, latent, k_rope, w_uk, w_uv, lengths, scale=scale, check=False)
