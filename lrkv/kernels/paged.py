"""The paged factored cache (DESIGN §3): fixed-size pages shared by all sequences, and a
page table [B, max_pages] int32 mapping each sequence's logical pages to physical ones.

Like FlashAttention's kvcache tests, `paginate` scatters a contiguous cache into a random
permutation of pages and leaves every slot no sequence owns as NaN, so a kernel that reads
an unused slot or follows the wrong page shows up as NaN or as a wrong answer. (The harness
pages a Case's draw with `lrkv.verify.levels.paged.paginate`, which also knows the Case's
garbage, page order and shared-prefix knobs; this one pages a FactoredCache that has no Case
— the bench's paged rows and the paged-append tests. Both write the pages with
`lrkv.reference.paged.scatter_pages`; `gather_pages` reads them back.)
"""

from __future__ import annotations

from dataclasses import dataclass, fields

import torch

from ..reference.cache import FactoredCache
from ..reference.fp8_cache import CacheScales
from ..reference.paged import scatter_pages, scatter_scales


@dataclass
class PagedCache:
    shared_k: torch.Tensor  # [P, page, d_h]
    shared_v: torch.Tensor  # [P, page, d_h]
    latent_k: torch.Tensor  # [P, page, H, r]
    latent_v: torch.Tensor  # [P, page, H, r]
    page_table: torch.Tensor  # [B, max_pages] int32; entries past a sequence's pages may be -1
    lengths: torch.Tensor  # [B] int32
    key_scale: torch.Tensor | None = None  # [P, page, H] (QK-RMSNorm only)
    scales: CacheScales | None = None  # fp8 caches only (DESIGN §4.1): per-token scales paged [P, page(, H)]

    @property
    def page_size(self) -> int:
        return self.shared_k.shape[1]

    @property
    def num_pages(self) -> int:
        return self.shared_k.shape[0]

    @property
    def batch(self) -> int:
        return self.page_table.shape[0]

    @property
    def capacity(self) -> int:
        """Slots one sequence can address: max_pages · page_size."""
        return self.page_table.shape[1] * self.page_size

    def tensors(self) -> dict[str, torch.Tensor]:
        """Payload tensors by name (page_table and lengths are bookkeeping)."""
        skip = ("page_table", "lengths", "scales")
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}
        return {k: v for k, v in out.items() if v is not None}

    def clone(self) -> PagedCache:
        return PagedCache(**{f.name: (None if getattr(self, f.name) is None else getattr(self, f.name).clone())
                             for f in fields(self)})


def paginate(
    cache: FactoredCache, page_size: int, *, generator: torch.Generator | None = None,
    extra_pages: int = 3, fill: float = float("nan"),
) -> PagedCache:
    """Copy a contiguous cache into randomly permuted pages of `page_size` slots.

    Each sequence gets cdiv(T_max, page_size) pages, so the paged cache can hold as much as
    the contiguous one; `extra_pages` pages belong to nobody. Slots past each length keep the
    contiguous cache's content (garbage), and slots no sequence owns are `fill`.
    """
    if page_size < 1:
        raise ValueError(f"page_size must be >= 1, got {page_size}")
    B, T = cache.batch, cache.t_max
    max_pages = -(-T // page_size)
    n_pages = B * max_pages + extra_pages
    device = cache.shared_k.device
    perm = torch.randperm(n_pages, generator=generator)[: B * max_pages].to(device)
    page_table = perm.reshape(B, max_pages).to(torch.int32)
    out = {}
    for name, t in cache.tensors().items():
        pool = torch.full((n_pages, page_size, *t.shape[2:]), fill, dtype=t.dtype, device=device)
        out[name] = scatter_pages(t, page_table, pool)
    scales = None if cache.scales is None else scatter_scales(cache.scales, page_table, n_pages, page_size)
    return PagedCache(page_table=page_table, lengths=cache.lengths.clone(), scales=scales, **out)
