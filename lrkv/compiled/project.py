"""The new token's projections, in the form the engines export.

Same math as `lrkv.reference.lrkv.project_token` (and verified against it), with two
deliberate differences:

* constants come in as tensors — `eps` (0-d, engine dtype) and the head RoPE frequencies
  (float64) — because torch.onnx rounds Python float scalars through float32;
* with `native_rms_norm=True` (ONNX opset >= 23) the query's QK-RMSNorm is
  `torch.nn.functional.rms_norm`, which torch.onnx lowers to the native `RMSNormalization`
  op. Its epsilon is a float32 *attribute* in ONNX, so a float64 engine then normalises
  with eps rounded to float32 (a relative change of ~1e-15 in the output) — the default
  opset-18 path keeps eps exact. The key side has no native equivalent: the factored
  decode needs the *joint* inverse RMS of s + z B^T (DESIGN §5), cached as key_scale.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..reference.norms import joint_key_scale, rms_norm
from ..reference.rope import apply_rope
from ..reference.weights import LRKVWeights


def project_token(
    weights: LRKVWeights, x: torch.Tensor, positions: torch.Tensor, *,
    eps: torch.Tensor,  # 0-d, x's dtype: spec.norm_eps
    head_freqs: torch.Tensor | None,  # [d_h/2] float64 when spec.rope != "none"
    native_rms_norm: bool = False,
) -> dict[str, torch.Tensor]:
    """x [B, d], positions [B] -> shared_k/v [B, d_h], latent_k/v [B, H, r], key_scale [B, H]
    (qk_norm), q [B, H, d_h] (rotated, normed, key gain folded in)."""
    spec = weights.spec
    s_k = x @ weights.w_shared_k  # [B, d_h]   x W_shared^K
    s_v = x @ weights.w_shared_v
    z_k = torch.einsum("bd,hdr->bhr", x, weights.u_k)  # [B, H, r]   x U_h^K
    z_v = torch.einsum("bd,hdr->bhr", x, weights.u_v)
    q = torch.einsum("bd,dhe->bhe", x, weights.w_q)  # [B, H, d_h]
    out = {"shared_v": s_v, "latent_v": z_v}
    if spec.qk_norm:
        # Joint scale of the FULL key from ||s||², s·(zB^T), z(B^TB)z^T, before RoPE as in the
        # reference (rotation preserves the norm). eps is a tensor: see the module docstring.
        out["key_scale"] = joint_key_scale(s_k, z_k, weights.basis_k, eps)
        if native_rms_norm:
            q = F.rms_norm(q, (spec.head_dim,), eps=spec.norm_eps) * weights.q_gain
        else:
            q = rms_norm(q, weights.q_gain, eps)
    if spec.rope != "none":
        q = apply_rope(q, positions[:, None], head_freqs)
        s_k = apply_rope(s_k, positions, head_freqs)  # shared keys are cached rotated
        if spec.rope in ("latent", "aligned"):
            z_k = apply_rope(z_k, positions[:, None], weights.latent_freqs)
    if spec.qk_norm:
        q = q * weights.k_gain  # the key gain commutes with RoPE (tied per plane): fold into q
    out.update(shared_k=s_k, latent_k=z_k, q=q)
    return out
