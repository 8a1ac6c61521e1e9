"""The float64 rounding bound and the optional mpmath oracle check (DESIGN §6).

For float64 backends err_base can be exactly 0, so the rule needs an a-priori bound. The
standard dot-product bound |fl(x·y) − x·y| <= γ_n Σ|x_i y_i| (γ_n ≈ n·u) applied to
Eqs. 6–7 gives, per output element,

    |Δlogit| <~ u·n·L,   L = scale·max ||q_h||·||k_j||       (Cauchy–Schwarz)
    |Δout|   <~ u·n·(1 + 2L)·V,   V = max ||v_j||             (the softmax is 1-Lipschitz in ∞-norm
                                                                up to the factor 2)
with n the longest reduction (T_max + d_h + r). ||k_j|| <= ||s_j|| + ||z_j||·||B_h||_F; key_scale
multiplies it. At layer level the output projection adds H·d_h + d to n and multiplies by
max_e Σ|W_o[:, :, e]|. `bound = c · u · n · (1 + 2L) · V · gain`, c from the policy.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

import torch

from ..reference.cache import FactoredCache

U64 = 2.0 ** -53  # unit roundoff of float64
ORACLE_MODULE = "lrkv.reference.mpmath_oracle"
ORACLE_MAX_ELEMENTS = 2048  # B·T_max·H·(d_h + r) up to which the mpmath oracle is cheap (~0.1 s)


@dataclass
class Conditioning:
    """What the float64 bound needs, accumulated over one or more decode calls."""

    n: int = 0  # longest reduction length
    logit: float = 0.0  # L
    value: float = 0.0  # V
    gain: float = 1.0  # output-projection gain (layer levels)

    def merge(self, other: Conditioning) -> None:
        self.n, self.logit = max(self.n, other.n), max(self.logit, other.logit)
        self.value = max(self.value, other.value)

    def bound(self, c: float) -> float:
        return c * U64 * self.n * (1.0 + 2.0 * self.logit) * self.value * self.gain


def _row_norm_bound(shared, latent, basis, valid):
    """max over valid (b, j, h) of ||s_j|| + ||z_jh||·||B_h||_F."""
    s = torch.where(valid, shared.double().norm(dim=-1), 0.0)  # [B, T]
    z = torch.where(valid[..., None], latent.double().norm(dim=-1), 0.0)  # [B, T, H]
    return s[..., None] + z * basis.double().flatten(1).norm(dim=-1)  # [B, T, H]


def kernel_conditioning(q, cache: FactoredCache, basis_k, basis_v, *, scale) -> Conditioning:
    """The conditioning of a decode (Eqs. 6–7) over a contiguous cache; an fp8 cache is read as
    the oracle reads it, dequantized exactly (float64)."""
    c = cache.dequantize(torch.float64)
    B, T, d_h = c.shared_k.shape
    r = c.latent_k.shape[-1]
    valid = torch.arange(T)[None, :] < c.lengths[:, None].cpu()  # [B, T]
    if not valid.any():
        return Conditioning(n=T + d_h + r)
    kn = _row_norm_bound(c.shared_k, c.latent_k, basis_k, valid)
    if c.key_scale is not None:
        kn = kn * torch.where(valid[..., None], c.key_scale.double().abs(), 0.0)
    qn = q.double().norm(dim=-1)  # [B, H]
    logit = float(scale * (qn * kn.amax(dim=1)).max())
    value = float(_row_norm_bound(c.shared_v, c.latent_v, basis_v, valid).max())
    return Conditioning(n=T + d_h + r, logit=logit, value=value)


class ConditioningProbe:
    """A decode wrapper that records the conditioning of every call it forwards."""

    def __init__(self, decode):
        self.decode, self.cond = decode, Conditioning()

    def __call__(self, q, *args, scale, key_scale=None, cache_scales=None, **kwargs):
        *parts, basis_k, basis_v, lengths = args  # the decode contract's positional tensors
        cache = FactoredCache(*parts, lengths, key_scale, cache_scales)
        self.cond.merge(kernel_conditioning(q, cache, basis_k, basis_v, scale=scale))
        fp8 = {} if cache_scales is None else {"cache_scales": cache_scales}
        return self.decode(q, *args, scale=scale, key_scale=key_scale, **fp8, **kwargs)


def through_output_projection(cond: Conditioning, weights) -> Conditioning:
    """The conditioning of a layer's y: the attention's, carried through W_o (the reduction
    grows by H·d_h + d and the bound by W_o's ∞-norm gain max_e Σ|W_o[:, :, e]|)."""
    w_o = weights.w_o.double()  # [H, d_h, d]
    cond.n += w_o.shape[0] * w_o.shape[1] + weights.spec.d_model
    cond.gain = float(w_o.abs().sum(dim=(0, 1)).max())
    return cond


# ----------------------------------------------------------------------------- mpmath oracle
def _oracle_module():
    try:
        return importlib.import_module(ORACLE_MODULE)
    except ModuleNotFoundError as e:
        if e.name and ORACLE_MODULE.startswith(e.name):
            return None
        raise


def oracle_decode():
    """The mpmath oracle's decode ((q, cache, basis_k, basis_v) -> float64 (out, lse)), or None if absent."""
    mod = _oracle_module()
    fn = None if mod is None else getattr(mod, "decode_attention_mp", None)
    if fn is None:
        return None
    to_tensor = getattr(mod, "to_tensor", lambda v: torch.as_tensor(v, dtype=torch.float64))

    def decode(*args, **kwargs):
        out, lse = fn(*args, **kwargs)
        return to_tensor(out), to_tensor(lse)
    return decode


def oracle_reference(inputs) -> torch.Tensor | None:
    """The oracle's float64 output for tiny float64 kernel inputs; None when not applicable."""
    B, T, H, r = inputs.cache.latent_k.shape
    if inputs.q.dtype != torch.float64 or B * T * H * (inputs.q.shape[-1] + r) > ORACLE_MAX_ELEMENTS:
        return None
    fn = oracle_decode()
    return None if fn is None else fn(inputs.q, inputs.cache, inputs.basis_k, inputs.basis_v,
                                      scale=inputs.scale, rope=inputs.rope)[0]
