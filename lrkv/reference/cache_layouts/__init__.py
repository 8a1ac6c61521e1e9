"""Server cache layouts (DESIGN §4, "Layouts"): a paged cache handed to a backend in the
layout its serving engine keeps, not ours. A backend declares `cache_layout`; the harness
draws the paged case as always (a `FactoredCache` with a page table) and each adapter here
converts FROM that object — never back through a kernel. Each module also reads its layout
back into the cache object (plain torch), which is how the adapters are tested.

    vllm_blocks     vLLM's block pools: block 0 the null block (NaN), block_table, seq_lens,
                    and the slot_mapping an append writes through
    flashinfer_csr  FlashInfer's CSR pages: kv_indptr, kv_indices, kv_last_page_len
    fused_rows      one row per token [shared_k | shared_v | latent_k (H·r) | latent_v (H·r)]

`pages` is the contract of DESIGN §4 itself: the cache object's own paged form. Every layout
keeps the pages' stride order (NHD, or head-major HND latents: `Paged.hnd`) except fused
rows, whose row is one token's whole entry. An fp8 cache's per-token scales stay in the same
page slot as the token (as the parts, pooled alike); static scales are handed over as they are.
"""

from __future__ import annotations

from types import ModuleType

from . import flashinfer_csr, fused_rows, vllm_blocks

DEFAULT = "pages"
ADAPTERS: dict[str, ModuleType] = {m.NAME: m for m in (vllm_blocks, flashinfer_csr, fused_rows)}
CACHE_LAYOUTS = (DEFAULT, *ADAPTERS)


def check_layout(name) -> str:
    """The layout's name, or a ValueError naming the known ones."""
    if not isinstance(name, str) or name not in CACHE_LAYOUTS:
        raise ValueError(f"cache_layout must be one of {', '.join(CACHE_LAYOUTS)}; got {name!r}")
    return name
