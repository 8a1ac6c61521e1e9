"""Small input builders shared by the reference tests."""

from __future__ import annotations

import torch

from lrkv.reference import lrkv as L
from lrkv.reference.cache import allocate_cache
from lrkv.reference.weights import init_lrkv_weights
from lrkv.spec import AttentionSpec


def random_factored_inputs(
    B=2, T=7, H=3, d_h=8, r=3, *, lengths=None, seed=0, key_scale=False, dtype=torch.float64,
):
    """Kernel-level inputs with NaN garbage past each length."""
    g = torch.Generator().manual_seed(seed)
    rn = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    lengths = torch.tensor(lengths if lengths is not None else [T] * B, dtype=torch.int32)
    valid = torch.arange(T)[None, :] < lengths[:, None]
    def garbage(t):
        m = valid.reshape(B, T, *([1] * (t.dim() - 2)))
        return torch.where(m, t, float("nan")).to(dtype)
    inp = dict(
        q=rn(B, H, d_h).to(dtype),
        shared_k=garbage(rn(B, T, d_h)), shared_v=garbage(rn(B, T, d_h)),
        latent_k=garbage(rn(B, T, H, r)), latent_v=garbage(rn(B, T, H, r)),
        basis_k=rn(H, d_h, r).to(dtype), basis_v=rn(H, d_h, r).to(dtype), lengths=lengths,
    )
    if key_scale:
        inp["key_scale"] = garbage(rn(B, T, H).abs() + 0.5)
    return inp


def split_kw(inp):
    args = [inp[k] for k in ("q", "shared_k", "shared_v", "latent_k", "latent_v", "basis_k", "basis_v", "lengths")]
    return args, {"key_scale": inp.get("key_scale")}


def prefill_then_steps(weights, x, n_prefill, lengths=None):
    """Prefill n_prefill tokens, then layer_step the rest; returns per-step outputs [B, T - n, d]."""
    B, T, _ = x.shape
    _, cache = L.prefill(weights, x[:, :n_prefill], t_max=T)
    ys = []
    for t in range(n_prefill, T):
        y, cache = L.layer_step(weights, x[:, t], cache, cache.lengths.clone())
        ys.append(y)
    return torch.stack(ys, dim=1), cache


__all__ = ["random_factored_inputs", "split_kw", "prefill_then_steps", "init_lrkv_weights",
           "allocate_cache", "AttentionSpec", "L"]
