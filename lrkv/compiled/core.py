"""Export-friendly LRKV decode math: pure tensor ops, no Python branches on data.

Everything here is traced by `torch.export` into one graph, so it obeys three rules:

* no data-dependent Python (`if lengths.max() > T`, `.item()`, `.tolist()`): those checks
  live in `lrkv.compiled.signature`, which runs *before* the engine;
* masks are built with tensor ops (`arange(T) < lengths`), never by slicing to a length;
* garbage past `lengths[b]` (NaN in the tests) is removed with `torch.where`, never by
  multiplying with a 0/1 mask — `NaN · 0` is NaN;
* non-trivial constants (the softmax scale, norm eps, RoPE frequencies) arrive as tensors
  (module buffers), never as Python floats: torch.onnx stores Python scalars through
  float32 (1/sqrt(8) becomes 0.35355338 in a float64 graph), which a float64 engine must not
  inherit. 0, 1 and −inf are exact in float32 and stay literals.

The math is paper Eqs. 6–7 (see `lrkv.reference.lrkv`), written with an explicit max
subtraction instead of `logsumexp`: exporters lower logsumexp of an all −inf row to
`max + log(sum(exp(x − max)))` with `max = −inf`, which is NaN; an empty sequence must give
out 0 and lse −inf (DESIGN §4), so the max is clamped to 0 for empty rows first.
"""

from __future__ import annotations

import torch

from ..reference.rope import apply_rope

NEG_INF = float("-inf")


def valid_mask(lengths: torch.Tensor, t_max: int) -> torch.Tensor:
    """slot j of sequence b is valid iff j < lengths[b].  # [B, T]"""
    return torch.arange(t_max, device=lengths.device)[None, :] < lengths[:, None]


def rotated_private_keys(latent_k: torch.Tensor, basis_k: torch.Tensor, freqs: torch.Tensor) -> torch.Tensor:
    """rope(z_j B_h^T, j) for every slot j (rope='exact', DESIGN §5); freqs [d_h/2] float64.  # [B, T, H, d_h]"""
    T = latent_k.shape[1]
    k_priv = torch.einsum("bthr,hdr->bthd", latent_k, basis_k)
    pos = torch.arange(T, device=latent_k.device)[None, :, None]  # [1, T, 1]
    return apply_rope(k_priv, pos, freqs)


def factored_decode(
    q: torch.Tensor,  # [B, H, d_h]
    shared_k: torch.Tensor,  # [B, T, d_h]
    shared_v: torch.Tensor,  # [B, T, d_h]
    latent_k: torch.Tensor,  # [B, T, H, r]
    latent_v: torch.Tensor,  # [B, T, H, r]
    basis_k: torch.Tensor,  # [H, d_h, r]
    basis_v: torch.Tensor,  # [H, d_h, r]
    lengths: torch.Tensor,  # [B] int
    key_scale: torch.Tensor | None,  # [B, T, H] or None
    *,
    scale: torch.Tensor,  # 0-d, q's dtype: 1/sqrt(d_h)
    rope_freqs: torch.Tensor | None,  # [d_h/2] float64 for rope='exact'; None: no decode-time RoPE
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel-level contract without validation. Returns out [B, H, d_h], lse [B, H]."""
    T = shared_k.shape[1]
    valid = valid_mask(lengths, T)  # [B, T]
    # Eq. 6: q_h S_K^T + (q_h B_h^K) R_h^{K T}, summed before ONE softmax.
    logits = torch.einsum("bhd,btd->bht", q, shared_k)
    if rope_freqs is None:
        q_lat = torch.einsum("bhd,hdr->bhr", q, basis_k)  # [B, H, r]
        logits = logits + torch.einsum("bhr,bthr->bht", q_lat, latent_k)
    else:
        logits = logits + torch.einsum("bhd,bthd->bht", q, rotated_private_keys(latent_k, basis_k, rope_freqs))
    if key_scale is not None:
        logits = logits * key_scale.permute(0, 2, 1)  # joint inverse RMS of each full key
    logits = torch.where(valid[:, None, :], logits * scale, NEG_INF)  # [B, H, T]
    m = logits.amax(dim=-1, keepdim=True)  # [B, H, 1]; −inf for an empty sequence
    m = torch.where(m > NEG_INF, m, 0.0)
    p = torch.exp(logits - m)  # exactly 0 at masked slots
    s = p.sum(dim=-1, keepdim=True)  # [B, H, 1]; 0 for an empty sequence
    lse = (m + torch.log(s)).squeeze(-1)  # log 0 = −inf: the contract's empty-row lse
    a = p / torch.where(s > 0, s, 1.0)
    # Eq. 7: a_h S_V + (a_h R_h^V) B_h^{V T}; garbage zeroed by where before contracting.
    sv = torch.where(valid[..., None], shared_v, 0.0)
    lv = torch.where(valid[..., None, None], latent_v, 0.0)
    out = torch.einsum("bht,btd->bhd", a, sv)
    out = out + torch.einsum("bhr,hdr->bhd", torch.einsum("bht,bthr->bhr", a, lv), basis_v)
    return out, lse


def functional_append(cache: torch.Tensor, entry: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """A copy of cache [B, T, ...] with entry [B, ...] written at slot positions[b].

    A one-hot `where` rather than `index_put`: it lowers to plain Equal/Where in every
    exporter (ONNX, TensorRT's parser, inductor) and cannot write out of bounds — a
    position outside [0, T) writes nothing (the Python wrapper rejects it before that).
    The decode reads the whole cache anyway, so the O(T) select costs no extra pass.
    """
    B, T = cache.shape[:2]
    hit = torch.arange(T, device=cache.device)[None, :] == positions[:, None].to(torch.int64)  # [B, T]
    hit = hit.reshape(B, T, *([1] * (cache.dim() - 2)))
    return torch.where(hit, entry[:, None].to(cache.dtype), cache)
