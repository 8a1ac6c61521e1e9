"""Time-major pieces shared by the benchmark's decode formulations.

Every cache in this suite is laid out time-major (`[B, T_max, ...]`, DESIGN §3). A decode
step has two contractions over the time axis T:

  scores   logits[b, t, h] = Σ_x cache[b, t, h, x] · query[b, h, x]   (reduce the INNER dim)
  values   out[b, h, x]    = Σ_t a[b, t, h] · cache[b, t, h, x]       (reduce the OUTER dim)

When a cache row serves ONE head (MHA, LRKV's private latents), writing these as einsums
makes per-head batched GEMVs over a strided view: torch.compile (inductor, CPU) then walks
the cache one head at a time with a stride of H·x elements — about one 4 KiB page per
step — and runs at a fraction of the copy bandwidth (1.7-4x slower, docs/bench.md). So:
  * scores stream as a broadcast multiply + `sum(-1)` — one pass over the rows — and are
    transposed to [B, H, T] for the softmax (`softmax_rows`, time innermost);
  * values stream with `sum_over_time` over a time-major copy of the weights
    (`time_major`): T is viewed as chunks and the innermost chunk is reduced first, so each
    chunk of rows stays in L1 while every head reads its slice.
When a row serves MANY heads (MQA, MLA's latent, LRKV's shared block) the contraction is a
real GEMM with the heads as its M dimension and stays an einsum (see the step modules).
The math is unchanged — the same sums in another order; tests/test_bench.py checks every
formulation against the float64 oracle.
"""

from __future__ import annotations

import torch

NEG_INF = float("-inf")

# Time is reduced in two levels: INNER rows at a time (8 rows of an [H=18, r=55] float32
# latent are 31 KiB: L1-sized, so every head's slice is read from L1), then OUTER of those
# partials, then the rest. Each level writes 1/chunk of its input, so two levels leave a
# 1/128-sized partial instead of the 1/8 one level would (measured: 1/8 costs ~10% of the
# value pass; larger single chunks spill L1 and run slower, see docs/bench.md).
INNER_CHUNK = 8
OUTER_CHUNK = 16


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


def valid_mask(lengths: torch.Tensor, t_max: int) -> torch.Tensor:
    """Slots below each sequence's length.  # [B, T_max] bool"""
    return torch.arange(t_max, device=lengths.device)[None, :] < lengths[:, None]


def zero_garbage(cache: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Slots past the length hold garbage (NaN in the tests); 0·NaN = NaN, so the value
    contraction must see zeros there. `where` fuses into the reduction under inductor."""
    return torch.where(valid.reshape(*valid.shape, *([1] * (cache.dim() - 2))), cache, 0.0)


def softmax_rows(logits: torch.Tensor, valid: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Masked softmax over the LAST dim of logits [B, ..., T]; returns (a [B, ..., T], lse [B, ...]).

    Time innermost, as in the reference: the softmax's passes then vectorize along T (the
    whole step measured as fast or up to ~10% faster than reducing over dim 1 of [B, T, H]).
    An empty sequence gives a = 0 and lse = −inf, as the decode contract (DESIGN §4) says.
    """
    m = valid.reshape(valid.shape[0], *([1] * (logits.dim() - 2)), valid.shape[1])  # [B, 1.., T]
    logits = torch.where(m, logits, NEG_INF)
    lse = torch.logsumexp(logits, dim=-1)
    a = torch.where(m, torch.exp(logits - lse.unsqueeze(-1)), 0.0)
    return a, lse


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
