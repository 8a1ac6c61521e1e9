"""Small input builders shared by the tests (references to test against live in lrkv.reference)."""

from __future__ import annotations

import torch

from lrkv.reference import lrkv as L
from lrkv.reference.cache import allocate_cache
from lrkv.reference.paged import scatter_pages
from lrkv.reference.weights import init_lrkv_weights
from lrkv.spec import AttentionSpec, dtype_name
from lrkv.verify.case import Case
from lrkv.verify.levels.kernel import make_kernel_inputs


def random_factored_inputs(
    B=2, T=7, H=3, d_h=8, r=3, *, lengths=None, seed=0, key_scale=False, dtype=torch.float64,
):
    """Kernel-level inputs as a dict, NaN garbage past each length — drawn by the harness's own
    builder (a kernel Case: a cache from real projections, the last token's query)."""
    case = Case("kernel", AttentionSpec.lrkv(H, d_h, r, qk_norm=key_scale), dtype_name(dtype),
                tuple(lengths if lengths is not None else [T] * B), T, seed=seed)
    inp = make_kernel_inputs(case)
    out = {k: inp._get(k) for k in ("q", "shared_k", "shared_v", "latent_k", "latent_v", "basis_k", "basis_v",
                                     "lengths")}
    if key_scale:
        out["key_scale"] = inp.cache.key_scale
    return out


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


PAGED_CACHE = ("shared_k", "shared_v", "latent_k", "latent_v", "key_scale")


def paginate(inp: dict, page: int, *, seed: int = 0, share_prefix: int = 0) -> tuple[dict, torch.Tensor]:
    """Scatter a contiguous cache into shuffled pages; unused pages (and unused page-table
    entries, −1) hold NaN. share_prefix > 0: sequence 1 reads sequence 0's first pages.

    (The harness pages a Case, lrkv.verify.levels.paged.paginate; this one pages any dict and
    writes −1 into the table past each sequence's last page, which no paged path may read.)"""
    B, T = inp["shared_k"].shape[:2]
    max_pages = -(-T // page)
    n_pages = B * max_pages + 2  # two pages nobody owns
    g = torch.Generator().manual_seed(seed)
    table = torch.randperm(n_pages, generator=g)[: B * max_pages].reshape(B, max_pages).to(torch.int32)
    if share_prefix:
        table[1, :share_prefix] = table[0, :share_prefix]
    out = dict(inp)
    for name in PAGED_CACHE:
        t = inp.get(name)
        if t is None:
            continue
        pool = torch.full((n_pages, page, *t.shape[2:]), float("nan"), dtype=t.dtype)
        out[name] = scatter_pages(t, table, pool)
    needed = -(-inp["lengths"].long() // page)  # pages a sequence reads
    table = torch.where(torch.arange(max_pages)[None, :] < needed[:, None], table, -1).to(torch.int32)
    return out, table


def ragged_queries(inp: dict, n: list[int], seed: int = 5) -> tuple[torch.Tensor, torch.Tensor]:
    H, d_h = inp["q"].shape[1:]
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(sum(n), H, d_h, generator=g, dtype=torch.float64)
    cu = torch.tensor([0, *torch.tensor(n).cumsum(0).tolist()], dtype=torch.int32)
    return q, cu


__all__ = ["random_factored_inputs", "split_kw", "paginate", "ragged_queries", "prefill_then_steps", "init_lrkv_weights",
           "allocate_cache", "AttentionSpec", "L"]
