"""A user's LRKV decode backend, verified by the lrkv harness. Run from the repository root:

    lrkv verify --backend examples.my_backend:backend
    lrkv verify --backend examples.my_backend:backend --grid quick --out reports/mine
    lrkv gate reports/mine/report.json --baseline ci/baseline.json --subset

(From another directory add `--backend-path /path/to/dir-containing-examples`.)

The kernel is "flash-decoding" written in plain PyTorch: the cache is cut into splits of a
fixed size; each split computes its own max, exp-sum and partial output (keeping the
private value term in latent space, r wide), and the splits are merged through their
log-sum-exp. Its paged decode gathers each sequence's pages in its page table's order. It depends on nothing from lrkv (so it repeats the reference's Eqs. 6–7 on
purpose, as a user's kernel would), and its code is the starter `lrkv init` writes
(lrkv/testing/templates/backend.py.tmpl; tests/testing/test_init.py keeps the two equal).
A backend is any object with

    name: str                  levels: {"kernel", "kernel-paged"} (any of the contract's levels)
    dtypes: tuple of torch dtypes it accepts
    available() -> (bool, reason)
    decode_attention(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
                     *, scale, key_scale=None, rope=None) -> (out [B, H, d_h], lse [B, H])
    optionally: supports(case) -> (bool, reason), configure(case) (tile/split hints),
    cache_formats (fp8 caches it reads; their scales then arrive as cache_scales=)
"""

from __future__ import annotations

import dataclasses

import torch

SPLIT = 16  # tokens per split (flash-decoding's split-K): a fixed size, not a fixed count, so a
# sequence's splits do not depend on how long the batch's cache is (batch invariance)


def _rotate(x: torch.Tensor, positions: torch.Tensor, theta: float) -> torch.Tensor:
    """Rotate-half RoPE of x [..., T, H, d_h] by slot index (the contract's rope='exact')."""
    d_h = x.shape[-1]
    freqs = theta ** (-2.0 * torch.arange(d_h // 2, dtype=torch.float64) / d_h)
    ang = positions.to(torch.float64)[:, None, None] * freqs  # [T, 1, d_h/2]
    cos, sin = torch.cat((ang.cos(), ang.cos()), -1).to(x.dtype), torch.cat((ang.sin(), ang.sin()), -1).to(x.dtype)
    rotated = torch.cat((-x[..., d_h // 2:], x[..., : d_h // 2]), dim=-1)
    return x * cos + rotated * sin


def _dequantize(stored: torch.Tensor, scale: torch.Tensor, per_head: bool) -> torch.Tensor:
    """An fp8 cache part as float32: stored × scale. A per-head scale [H] is right-aligned onto
    [..., H, r]; any other scale ([], [B, T] or [B, T, H]) left-aligned onto the leading axes."""
    s = scale.to(torch.float32)
    s = s[:, None] if per_head else s.reshape(*s.shape, *([1] * (stored.dim() - s.dim())))
    return stored.to(torch.float32) * s


def _gather(pages: torch.Tensor | None, page_table: torch.Tensor) -> torch.Tensor | None:
    """A paged tensor [P, page, ...] as each sequence's contiguous cache [B, max_pages * page, ...]."""
    if pages is None or pages.dim() < 2:  # absent, or a per-tensor / per-head fp8 scale: not paged
        return pages
    # entries past a sequence's last page may be anything (e.g. -1): clamped, then masked by lengths
    index = page_table.clamp(0, pages.shape[0] - 1).long()  # [B, max_pages]
    return pages[index].flatten(1, 2)


def _split_k(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, scale, key_scale, rope):
    """Eqs. 6–7 over splits of SPLIT slots, merged through their log-sum-exp (float32 inputs)."""
    T = shared_k.shape[1]
    parts = []  # per split: (lse [B, H], shared part [B, H, d_h], latent part [B, H, r])
    for a in range(0, T, SPLIT):
        b = min(a + SPLIT, T)
        valid = (torch.arange(a, b)[None, :] < lengths[:, None])[:, None, :]  # [B, 1, t]
        if rope is None:  # Eq. 6 factored: q S_K^T + (q B_h) R_h^T
            private = torch.einsum("bhr,bthr->bht", torch.einsum("bhd,hdr->bhr", q, basis_k), latent_k[:, a:b])
        else:  # exact RoPE: rotate the rebuilt private keys of this split
            keys = _rotate(torch.einsum("bthr,hdr->bthd", latent_k[:, a:b], basis_k), torch.arange(a, b),
                           rope.theta)
            private = torch.einsum("bhd,bthd->bht", q, keys)
        logits = torch.einsum("bhd,btd->bht", q, shared_k[:, a:b]) + private
        if key_scale is not None:
            logits = logits * key_scale[:, a:b].to(q.dtype).permute(0, 2, 1)
        logits = torch.where(valid, logits * scale, float("-inf"))
        lse = torch.logsumexp(logits, dim=-1)  # [B, H]; −inf for an empty split
        p = torch.where(valid, torch.exp(logits - lse[..., None]), 0.0)
        sv = torch.where(valid[:, 0, :, None], shared_v[:, a:b], 0.0)
        lv = torch.where(valid[:, 0, :, None, None], latent_v[:, a:b], 0.0)
        parts.append((lse, torch.einsum("bht,btd->bhd", p, sv), torch.einsum("bht,bthr->bhr", p, lv)))
    lses = torch.stack([p[0] for p in parts])  # [S, B, H]
    lse = torch.logsumexp(lses, dim=0)
    w = torch.where(lses > float("-inf"), torch.exp(lses - lse), 0.0)  # split weights
    shared = torch.einsum("sbh,sbhd->bhd", w, torch.stack([p[1] for p in parts]))
    latent = torch.einsum("sbh,sbhr->bhr", w, torch.stack([p[2] for p in parts]))
    out = shared + torch.einsum("bhr,hdr->bhd", latent, basis_v)  # Eq. 7, B_h^V applied once
    return out, lse


class SplitKDecode:
    name = "my-splitk"
    levels = frozenset({"kernel", "kernel-paged"})
    dtypes = (torch.float32, torch.bfloat16, torch.float16)
    deterministic = True  # the same inputs give the same bits (no atomics): required, once declared
    batch_invariant = True  # fixed split size, one sequence at a time: its result does not depend on its batch
    scratch_inputs = ()  # names of inputs the kernel may overwrite (none)
    cache_formats = ("float8_e4m3fn", "float8_e5m2")  # fp8 caches it reads: then called with cache_scales=

    def available(self) -> tuple[bool, str]:
        return True, ""

    def decode_attention(self, q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, *,
                         scale, key_scale=None, rope=None, cache_scales=None):
        B = q.shape[0]
        out_dtype, f = q.dtype, torch.float32  # accumulate in float32, like a real kernel
        if cache_scales is not None:  # an fp8 cache: each part has its own scale, dequantized on load
            per_head = cache_scales.granularity == "per_head"
            shared_k, shared_v = (_dequantize(t, s, False) for t, s in ((shared_k, cache_scales.shared_k),
                                                                         (shared_v, cache_scales.shared_v)))
            latent_k, latent_v = (_dequantize(t, s, per_head) for t, s in ((latent_k, cache_scales.latent_k),
                                                                            (latent_v, cache_scales.latent_v)))
        q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v = (
            t.to(f) for t in (q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v))
        # one sequence at a time: the same ops on the same shapes whatever else the batch holds
        # (a batched matmul may block, and so round, by batch size; batch_invariant below)
        results = [_split_k(q[i:i + 1], shared_k[i:i + 1], shared_v[i:i + 1], latent_k[i:i + 1],
                            latent_v[i:i + 1], basis_k, basis_v, lengths[i:i + 1], scale,
                            None if key_scale is None else key_scale[i:i + 1], rope) for i in range(B)]
        out, lse = (torch.cat(t) for t in zip(*results))
        return out.to(out_dtype), lse

    def paged_decode_attention(self, q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
                               page_table, *, scale, key_scale=None, rope=None, cache_scales=None):
        return self.gathered_decode(q, (shared_k, shared_v, latent_k, latent_v), basis_k, basis_v, lengths,
                                    page_table, scale=scale, key_scale=key_scale, rope=rope,
                                    cache_scales=cache_scales)

    def gathered_decode(self, q, pages, basis_k, basis_v, lengths, page_table, *, scale, key_scale, rope,
                        cache_scales):
        # gather-then-decode: a real paged kernel reads the pages in place instead
        parts = [_gather(t, page_table) for t in pages]
        if cache_scales is not None:  # per-token scales live in the page slots too
            cache_scales = dataclasses.replace(cache_scales, **{
                name: _gather(getattr(cache_scales, name), page_table)
                for name in ("shared_k", "shared_v", "latent_k", "latent_v")})
        return self.decode_attention(q, *parts, basis_k, basis_v, lengths, scale=scale,
                                     key_scale=_gather(key_scale, page_table), rope=rope, cache_scales=cache_scales)


backend = SplitKDecode()
