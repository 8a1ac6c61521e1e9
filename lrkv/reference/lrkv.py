"""LRKV attention in float64 — the oracle every decode path is judged against.

Per head h (paper Eqs. 2–5):   K_h = S_K + R_h^K (B_h^K)^T,   V_h = S_V + R_h^V (B_h^V)^T
with S = X W_shared (cached once) and R_h = X U_h (cached, r wide).

Decode (Eqs. 6–7), one query row q_h per head:
    logits_h = q_h S_K^T + (q_h B_h^K) (R_h^K)^T          summed BEFORE one softmax
    a_h      = softmax(scale · logits_h),  scale = 1/sqrt(d_h)
    out_h    = a_h S_V + (a_h R_h^V) (B_h^V)^T

The functions are dtype-generic so the `eager` backend can run this same math at a lower
precision; the `reference` backend runs it in float64. At half precision the logits, the
softmax statistics and `lse` accumulate in float32 (`accumulation_dtype`), as every fused
kernel does (FlashAttention, FlashInfer, FlashMLA); the attention weights are rounded back
to the input dtype for the value contraction. `lse` is returned in the accumulation dtype
(DESIGN §4: float32 for half-precision inputs) because merging partial states needs it.

FP8 caches (DESIGN §4, "FP8 caches"): with `cache_scales`, the four cached parts are fp8 and
are first dequantized to q's dtype (`dequantize_cache`: stored × scale, exact in float64,
rounded once at a lower precision), then the same Eqs. 6–7 run. With float64 q that is the
oracle of an fp8 cache; with q at τ it is the careful dequantize-then-attend path at τ.
"""

from __future__ import annotations

import torch

from ..spec import AttentionSpec
from .cache import FactoredCache, allocate_cache
from .contract import check_append_entries, validate_cache_inputs
from .fp8 import PARTS, check_fp8_compute, round_query, rounded_weights
from .fp8_cache import CacheScales, quantize_append
from .masking import causal_attention, softmax_rows, valid_mask, zero_garbage
from .norms import joint_key_scale, rms_norm
from .rope import ExactRope, apply_rope, rope_freqs
from .weights import LRKVWeights

HALF = (torch.float16, torch.bfloat16)


def accumulation_dtype(dtype: torch.dtype) -> torch.dtype:
    """float32 for half-precision inputs, the input dtype otherwise (also the dtype of `lse`)."""
    return torch.float32 if dtype in HALF else dtype


def decode_rope(spec: AttentionSpec) -> ExactRope | None:
    """The kernel's `rope` argument: only `exact` changes decode math (DESIGN §5);
    `latent` and `aligned` rotate the latent once, at append."""
    return ExactRope(spec.rope_theta) if spec.rope == "exact" else None


def _check_lengths(lengths: torch.Tensor, batch: int, t: int) -> None:
    if not isinstance(lengths, torch.Tensor) or lengths.dtype not in (torch.int32, torch.int64):
        raise TypeError("lengths must be an int32/int64 tensor")
    if tuple(lengths.shape) != (batch,):
        raise ValueError(f"lengths must have shape [{batch}], got {list(lengths.shape)}")
    if batch and (lengths.min() < 0 or lengths.max() > t):
        raise ValueError(f"lengths must lie in [0, {t}], got {lengths.tolist()}")


def exact_freqs(rope: ExactRope | None, d_h: int) -> torch.Tensor | None:
    """The rotary frequencies a decode needs: those of exact RoPE, None without decode-time RoPE."""
    return None if rope is None else rope_freqs(d_h, rope.theta)


def to_latent(x: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """x_h B_h for each head: x [B, H, d_h], basis [H, d_h, r].  # [B, H, r]

    One small product per (sequence, head): an einsum folds the batch into one GEMM's rows,
    and CPU BLAS picks its kernel by the row count, so a sequence's bits would depend on the
    batch size — which a batch-invariant decode (and its harness check) must not."""
    return (x[:, :, None, :] @ basis)[:, :, 0]


def from_latent(z: torch.Tensor, basis: torch.Tensor) -> torch.Tensor:
    """z_h B_h^T for each head (Eq. 7's B_h^V applied once), batch-invariant as `to_latent`:
    z [B, H, r], basis [H, d_h, r].  # [B, H, d_h]"""
    return (z[:, :, None, :] @ basis.transpose(-1, -2))[:, :, 0]


def private_keys_exact(latent_k: torch.Tensor, basis_k: torch.Tensor, freqs: torch.Tensor, start: int = 0) -> torch.Tensor:
    """rope(z_j B_h^T, j) for the slots j = start, start + 1, … of latent_k [B, t, H, r] — the
    position-dependent contraction of `exact` RoPE (DESIGN §5); freqs [d_h/2] are the rotary
    frequencies (`rope_freqs(d_h, theta)`; an engine passes them as a buffer).  # [B, t, H, d_h]"""
    t = latent_k.shape[1]
    k_priv = (latent_k.transpose(1, 2) @ basis_k.transpose(-1, -2)).transpose(1, 2)  # per (b, h): see to_latent
    pos = torch.arange(start, start + t, device=latent_k.device)[None, :, None]  # [1, t, 1]
    return apply_rope(k_priv, pos, freqs)


def factored_logits(
    q: torch.Tensor,  # [B, H, d_h]
    shared_k: torch.Tensor,  # [B, t, d_h]   slots start … start + t − 1
    latent_k: torch.Tensor,  # [B, t, H, r]
    basis_k: torch.Tensor,  # [H, d_h, r]
    *,
    key_scale: torch.Tensor | None = None,  # [B, t, H]
    freqs: torch.Tensor | None = None,  # [d_h/2] rotary frequencies of exact RoPE; None: no decode-time RoPE
    start: int = 0,
) -> torch.Tensor:
    """Eq. 6, unscaled: q_h S_K^T + (q_h B_h^K) R_h^{K T} — shared and private terms summed BEFORE
    the one softmax — times each key's joint inverse RMS under QK-RMSNorm.  # [B, H, t]

    With exact RoPE (`freqs` given) the private key is rebuilt and rotated at its slot
    (`private_keys_exact`); `start` is the first slot's position, so a tiled decode can call
    this tile by tile. No Python branch depends on data: the exported engines trace it too.
    """
    shared = torch.einsum("bhd,btd->bht", q, shared_k)
    if freqs is None:
        q_lat = to_latent(q, basis_k)  # [B, H, r]
        private = torch.einsum("bhr,bthr->bht", q_lat, latent_k)
    else:
        private = torch.einsum("bhd,bthd->bht", q, private_keys_exact(latent_k, basis_k, freqs, start))
    logits = shared + private  # one softmax over the SUM
    if key_scale is not None:
        logits = logits * key_scale.permute(0, 2, 1)  # joint inverse RMS of each full key
    return logits


def decode_attention(
    q: torch.Tensor,  # [B, H, d_h]  rotated/normed, k-gain folded in
    shared_k: torch.Tensor,  # [B, T_max, d_h]
    shared_v: torch.Tensor,  # [B, T_max, d_h]
    latent_k: torch.Tensor,  # [B, T_max, H, r]
    latent_v: torch.Tensor,  # [B, T_max, H, r]
    basis_k: torch.Tensor,  # [H, d_h, r]
    basis_v: torch.Tensor,  # [H, d_h, r]
    lengths: torch.Tensor,  # [B] int
    *,
    scale: float,
    key_scale: torch.Tensor | None = None,  # [B, T_max, H]
    rope: ExactRope | None = None,
    check: bool = True,
    cache_scales: CacheScales | None = None,  # an fp8 cache's scales ([] / [H] / [B, T_max] / [B, T_max, H])
    fp8_compute: str = "",  # "q" / "p" / "qp": round q / the softmax weights to e4m3 (FA3-style, fp8.py)
    fp8_phase: int = 0,  # which rounding phase of the weights (fp8.rounded_weights)
    materialized: bool = False,  # rebuild K_h and V_h explicitly (the `materialized` path)
) -> tuple[torch.Tensor, torch.Tensor]:
    """Factored decode, paper Eqs. 6–7. Returns out [B, H, d_h] and lse [B, H] (`attend` on
    the tensors packed into a FactoredCache).

    An fp8 cache (cache_scales given) is dequantized to q's dtype first: float64 q gives the
    fp8 cache's exact oracle, a half-precision q the dequantize-then-attend path at τ.
    fp8_compute adds an FA3-style kernel's roundings (`fp8.round_query`, `fp8.rounded_weights`)."""
    check_fp8_compute(fp8_compute)
    cache = FactoredCache(shared_k, shared_v, latent_k, latent_v, lengths, key_scale, cache_scales)
    return attend(q, cache, basis_k, basis_v, scale=scale, rope=rope, check=check, materialized=materialized,
                  fp8_compute=fp8_compute, fp8_phase=fp8_phase)


def materialized_decode_attention(*args, _decode=decode_attention, **kwargs) -> tuple[torch.Tensor, torch.Tensor]:
    """The same contract computed by rebuilding K_h and V_h explicitly (the `materialized` path);
    an fp8 cache is dequantized to q's dtype first, and fp8_compute rounds, as in `decode_attention`.
    (`_decode` is bound here: a test that plants a bug in the module's decode_attention leaves
    this path independent, so the harness sees its oracle paths disagree.)"""
    return _decode(*args, **kwargs, materialized=True)


def query_positions(cu_seqlens_q: torch.Tensor, lengths: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """For every query token: its sequence b and its position p = lengths[b] − n_b + i.  # [N], [N]"""
    cu = cu_seqlens_q.long()
    n = cu[1:] - cu[:-1]  # [B]  n_b
    seq = torch.repeat_interleave(torch.arange(n.shape[0], device=cu.device), n)  # [N]
    i = torch.arange(seq.shape[0], device=cu.device) - cu[seq]  # index within the chunk
    return seq, lengths.long()[seq] - n[seq] + i


def attend(
    q: torch.Tensor,  # [B, H, d_h]; extend: [N, H, d_h]
    cache: FactoredCache,  # contiguous or paged, fp8 or not
    basis_k: torch.Tensor,  # [H, d_h, r]
    basis_v: torch.Tensor,  # [H, d_h, r]
    *,
    scale: float,
    rope: ExactRope | None = None,
    cu_seqlens_q: torch.Tensor | None = None,  # [B+1] int32: extend's ragged queries
    check: bool = False,
    materialized: bool = False,
    fp8_compute: str = "",
    fp8_phase: int = 0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The one cache-taking path of every reference contract (DESIGN §4): decode, paged decode,
    extend. The cache is dequantized to q's dtype (an fp8 cache) and gathered (a paged one),
    so every form is judged by exactly the contiguous math of Eqs. 6–7. With cu_seqlens_q,
    query i of sequence b is the token at position p = lengths[b] − n_b + i and attends slots
    0 … p: a decode over that sequence's first p + 1 slots. check: validate the contract first."""
    check_fp8_compute(fp8_compute)
    if check:
        validate_cache_inputs(q, cache, basis_k, basis_v, scale=scale, rope=rope, cu_seqlens_q=cu_seqlens_q)
    cache = cache.dequantize(q.dtype).gather()
    decode = _materialized_decode if materialized else _factored_decode
    kw = dict(scale=scale, rope=rope, fp8_compute=fp8_compute, fp8_phase=fp8_phase)
    if cu_seqlens_q is None:
        return decode(q, cache, basis_k, basis_v, **kw)
    N, H, d_h = q.shape
    _, pos = query_positions(cu_seqlens_q, cache.lengths)
    out, lse = q.new_zeros(N, H, d_h), None
    cu = cu_seqlens_q.long().tolist()
    for b in range(len(cu) - 1):
        lo, hi = cu[b], cu[b + 1]
        if hi == lo:
            continue  # n_b = 0: nothing to attend for
        # the same cache n_b times; query at position p sees slots 0 … p
        o, l_ = decode(q[lo:hi], cache.sequence(b, hi - lo, pos[lo:hi] + 1), basis_k, basis_v, **kw)
        if lse is None:
            lse = l_.new_empty(N, H)
        out[lo:hi], lse[lo:hi] = o, l_
    if lse is None:  # no query at all (every n_b = 0)
        lse = torch.empty(N, H, dtype=accumulation_dtype(q.dtype), device=q.device)
    return out, lse


def _factored_decode(q, cache: FactoredCache, basis_k, basis_v, *, scale, rope, fp8_compute, fp8_phase):
    """Eqs. 6–7 on a contiguous cache at q's dtype."""
    valid = valid_mask(cache.lengths, cache.t_max)  # [B, T]
    latent_k = zero_garbage(cache.latent_k, valid)
    acc = accumulation_dtype(q.dtype)
    q_ = round_query(q, acc) if "q" in fp8_compute else q.to(acc)
    shared_k, latent_k, basis_k_ = cache.shared_k.to(acc), latent_k.to(acc), basis_k.to(acc)
    logits = factored_logits(q_, shared_k, latent_k, basis_k_, freqs=exact_freqs(rope, q.shape[-1]),  # Eq. 6
                             key_scale=None if cache.key_scale is None else cache.key_scale.to(acc))
    a, lse = softmax_rows(logits * scale, valid[:, None, :])  # [B, H, T]
    if "p" in fp8_compute:
        a = rounded_weights(logits * scale, valid[:, None, :], fp8_phase)
    a = a.to(q.dtype)  # the value contraction runs at the input dtype, as a kernel's P·V does
    # Eq. 7: a_h S_V + (a_h R_h^V) B_h^{V T}; garbage slots zeroed before the contraction
    sv, lv = zero_garbage(cache.shared_v, valid), zero_garbage(cache.latent_v, valid)
    out_shared = torch.einsum("bht,btd->bhd", a, sv)
    out_private = from_latent(torch.einsum("bht,bthr->bhr", a, lv), basis_v)
    return out_shared + out_private, lse


def _materialized_decode(q, cache: FactoredCache, basis_k, basis_v, *, scale, rope, fp8_compute, fp8_phase):
    """The same math with K_h and V_h rebuilt explicitly, on a contiguous cache at q's dtype."""
    valid = valid_mask(cache.lengths, cache.t_max)
    latent_k = zero_garbage(cache.latent_k, valid)
    acc = accumulation_dtype(q.dtype)
    if rope is None:
        k_priv = torch.einsum("bthr,hdr->bthd", latent_k, basis_k)
    else:
        k_priv = private_keys_exact(latent_k, basis_k, exact_freqs(rope, q.shape[-1]))
    k = cache.shared_k[:, :, None, :] + k_priv  # [B, T, H, d_h]  K_h, materialized at the input dtype
    latent_v = zero_garbage(cache.latent_v, valid)  # the rebuild is a contraction too
    v = cache.shared_v[:, :, None, :] + torch.einsum("bthr,hdr->bthd", latent_v, basis_v)  # V_h
    if cache.key_scale is not None:
        k = k * cache.key_scale[..., None]
    q_ = round_query(q, acc) if "q" in fp8_compute else q.to(acc)
    logits = torch.einsum("bhd,bthd->bht", q_, k.to(acc)) * scale  # scores accumulate in acc
    a, lse = softmax_rows(logits, valid[:, None, :])
    if "p" in fp8_compute:
        a = rounded_weights(logits, valid[:, None, :], fp8_phase)
    a = a.to(q.dtype)
    v = zero_garbage(v, valid)
    return torch.einsum("bht,bthd->bhd", a, v), lse


# ----------------------------------------------------------------------------- layer level
def project_token(weights: LRKVWeights, x: torch.Tensor, positions: torch.Tensor) -> dict[str, torch.Tensor]:
    """Everything one token contributes: cache entries and its decode query.

    x [..., d], positions [...]. Returns shared_k/v [..., d_h], latent_k/v [..., H, r],
    key_scale [..., H] (qk_norm), q [..., H, d_h] (rotated, normed, key gain folded in).
    """
    spec = weights.spec
    s_k = x @ weights.w_shared_k  # [..., d_h]  x W_shared^K
    s_v = x @ weights.w_shared_v
    z_k = torch.einsum("...d,hdr->...hr", x, weights.u_k)  # [..., H, r]  x U_h^K
    z_v = torch.einsum("...d,hdr->...hr", x, weights.u_v)
    q = torch.einsum("...d,dhe->...he", x, weights.w_q)  # [..., H, d_h]
    out = {"shared_v": s_v, "latent_v": z_v}
    if spec.qk_norm:
        # Joint scale of the FULL key s + z B^T, from ||s||², s·(zB^T) and z(B^TB)z^T.
        out["key_scale"] = joint_key_scale(s_k, z_k, weights.basis_k, spec.norm_eps)
        q = rms_norm(q, weights.q_gain, spec.norm_eps)
    if spec.rope != "none":
        head_freqs = rope_freqs(spec.head_dim, spec.rope_theta)
        q = apply_rope(q, positions[..., None], head_freqs)
        s_k = apply_rope(s_k, positions, head_freqs)  # shared keys are cached rotated
        if spec.rope in ("latent", "aligned"):
            # latent: the paper's claim (own r-dim frequencies); aligned: exact, since
            # B_h^T R_j = E_j B_h^T for a plane-aligned basis.
            z_k = apply_rope(z_k, positions[..., None], weights.latent_freqs)
    if spec.qk_norm:
        # k = g ⊙ k̂; the gain commutes with RoPE (tied per plane), so it folds into q.
        q = q * weights.k_gain
    out.update(shared_k=s_k, latent_k=z_k, q=q)
    return out


def append(cache: FactoredCache, entries: dict[str, torch.Tensor], positions: torch.Tensor) -> FactoredCache:
    """Write one token per sequence at slot positions[b]; lengths become positions + 1. Any
    family's cache; the entries must have the cache's dtype and be finite (never rounded here).

    An fp8 LRKV cache (`cache.scales` set) is the exception: its four parts' entries come at
    compute precision and are quantized here (`quantize_append`: saturating RNE with the
    static scales, or with per-token / per-token-head amax scales written into cache.scales);
    key_scale is written as given, in its own dtype."""
    B = cache.batch
    if positions.shape != (B,):
        raise ValueError(f"positions must have shape [{B}], got {list(positions.shape)}")
    positions = positions.to(cache.lengths.device)
    if not torch.equal(positions.to(cache.lengths.dtype), cache.lengths):
        raise ValueError(
            f"positions must equal the cache lengths (the next free slot): got {positions.tolist()}, "
            f"lengths {cache.lengths.tolist()}"
        )
    if int(positions.max()) >= cache.t_max:
        raise ValueError(f"cache is full: position {int(positions.max())} >= T_max {cache.t_max}")
    scales = getattr(cache, "scales", None)  # only an LRKV FactoredCache can be fp8
    check_append_entries(entries, cache.tensors(), B=B, quantized=PARTS if scales is not None else ())
    rows = torch.arange(B, device=positions.device)
    pos = positions.long()
    if scales is not None:
        entries = quantize_append(scales, entries, rows, pos)
    for name, t in cache.tensors().items():
        t[rows, pos] = entries[name]
    cache.lengths = (cache.lengths + 1).to(cache.lengths.dtype)
    return cache


def layer_step(
    weights: LRKVWeights, x_t: torch.Tensor, cache: FactoredCache, positions: torch.Tensor,
    *, decode=decode_attention,
) -> tuple[torch.Tensor, FactoredCache]:
    """One decode step: project, append, attend (Eqs. 6–7), output projection.  y: [B, d]"""
    spec = weights.spec
    if x_t.dim() != 2 or x_t.shape != (cache.batch, spec.d_model):
        raise ValueError(f"x_t must have shape [{cache.batch}, {spec.d_model}], got {list(x_t.shape)}")
    if x_t.dtype != weights.dtype:
        raise TypeError(f"x_t has dtype {x_t.dtype} but the weights are {weights.dtype}")
    if positions.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"positions must be int32 or int64, got {positions.dtype}")
    if not torch.isfinite(x_t).all():
        raise ValueError("x_t contains NaN or Inf")
    entries = project_token(weights, x_t, positions)
    append(cache, entries, positions)
    out, _ = decode(entries["q"], *cache.parts, weights.basis_k, weights.basis_v, cache.lengths,
                    scale=spec.head_dim**-0.5, rope=decode_rope(spec), **cache.contract_kwargs())
    return torch.einsum("bhd,hde->be", out, weights.w_o), cache


def layer_forward(weights: LRKVWeights, x: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Training form: materialize K_h = x W_h^K, V_h, full RoPE on the head key, causal softmax.

    x [B, T, d]; padding positions (t >= lengths[b]) are masked as keys.  # y: [B, T, d]
    This is the model; every decode mode is judged by whether it reproduces it.
    """
    spec = weights.spec
    B, T, _ = x.shape
    lengths = torch.full((B,), T, dtype=torch.int32, device=x.device) if lengths is None else lengths
    _check_lengths(lengths, B, T)
    q = torch.einsum("btd,dhe->bthe", x, weights.w_q)  # [B, T, H, d_h]
    k = torch.einsum("btd,hde->bthe", x, weights.head_k())  # x (W_S + U_h B_h^T)
    v = torch.einsum("btd,hde->bthe", x, weights.head_v())
    if spec.qk_norm:
        q = rms_norm(q, weights.q_gain, spec.norm_eps)
        k = rms_norm(k, weights.k_gain, spec.norm_eps)
    if spec.rope != "none":
        freqs = rope_freqs(spec.head_dim, spec.rope_theta)
        pos = torch.arange(T, device=x.device)[None, :, None]
        q, k = apply_rope(q, pos, freqs), apply_rope(k, pos, freqs)
    out = causal_attention(q, k, v, valid_mask(lengths, T), spec.head_dim**-0.5)  # [B, T, H, d_h]
    return torch.einsum("bthe,hed->btd", out, weights.w_o)


def prefill(
    weights: LRKVWeights, x: torch.Tensor, lengths: torch.Tensor | None = None, t_max: int | None = None,
) -> tuple[torch.Tensor, FactoredCache]:
    """Run the training form over a prompt and fill a factored cache with its tokens."""
    B, T, _ = x.shape
    lengths = torch.full((B,), T, dtype=torch.int32, device=x.device) if lengths is None else lengths
    _check_lengths(lengths, B, T)
    lengths = lengths.to(torch.int32)
    t_max = T if t_max is None else t_max
    if t_max < T:
        raise ValueError(f"t_max ({t_max}) must be >= the prompt length ({T})")
    y = layer_forward(weights, x, lengths)
    cache = allocate_cache(weights.spec, B, t_max, weights.dtype, device=x.device)
    entries = project_token(weights, x, torch.arange(T, device=x.device)[None, :].expand(B, T))
    valid = valid_mask(lengths, T)
    for name, t in cache.tensors().items():
        e = entries[name]
        m = valid.reshape(B, T, *([1] * (e.dim() - 2)))
        t[:, :T] = torch.where(m, e.to(t.dtype), t[:, :T])
    cache.lengths = lengths.clone()
    return y, cache
