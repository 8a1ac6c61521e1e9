"""Names of the FP8 cache scale granularities (DESIGN §4, "FP8 caches"), kept at the bottom
layer so that the accounting (here) and the reference math (`lrkv.reference.fp8`) share them.

    per_tensor       one float32 scale per cached part          static
    per_head         latents: one per head [H]; shared: per tensor   static
    per_token        one per token [rows, T] for every part     dynamic (written at append)
    per_token_head   latents: [rows, T, H]; shared: per token   dynamic (FlashMLA style)

Shared K/V have no head axis, so a granularity that names heads drops it for them.
"""

from __future__ import annotations

PER_TENSOR = "per_tensor"
PER_HEAD = "per_head"
PER_TOKEN = "per_token"
PER_TOKEN_HEAD = "per_token_head"
GRANULARITIES: tuple[str, ...] = (PER_TENSOR, PER_HEAD, PER_TOKEN, PER_TOKEN_HEAD)
STATIC_GRANULARITIES: tuple[str, ...] = (PER_TENSOR, PER_HEAD)  # calibrated, given with the cache
DYNAMIC_GRANULARITIES: tuple[str, ...] = (PER_TOKEN, PER_TOKEN_HEAD)  # amax-based, written at append
SCALE_BYTES = 4  # every scale is float32
