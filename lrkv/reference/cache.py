"""The factored LRKV cache (DESIGN §3): one object for every form a decode reads.

shared_k/v hold x W_shared once for all heads; latent_k/v hold the r-wide x U_h per head —
the four parts of paper Eqs. 6–7's logits q_h S_K^T + (q_h B_h^K) R_h^{K T} and output
a_h S_V + (a_h R_h^V) B_h^{V T}. Slots at or past lengths[b] are garbage; allocation fills
them with NaN so that any path that reads past the length is caught.

Contiguous, the parts are [B, T_max, ...]. Paged (`page_table` set: lrkv's own page table,
FlashAttention's block-table convention), they are pages [P, page, ...] and slot j of
sequence b lives in page page_table[b, j // page] at row j % page; pages may come in any
order and may be shared by several sequences (a common prefix). `paginate` scatters a contiguous cache into
permuted pages, `gather` reads it back.

An fp8 cache (DESIGN §4, "FP8 caches") stores the four parts as one fp8 format, filled with
that format's NaN bit pattern, and carries their float32 scales in `scales`
(`lrkv.reference.fp8_cache.CacheScales`; per-token scales paged like the parts); key_scale
stays in the compute dtype. `dequantize` gives the cache at a compute dtype.

The kernel contracts (DESIGN §4) take the tensors, not this object; `parts` and
`contract_kwargs` unpack it at that boundary (the contract validators check its shapes).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace

import torch

from ..spec import AttentionSpec, cache_components
from .fp8 import DYNAMIC_GRANULARITIES, PARTS, PER_TENSOR, SCALE_DTYPE, fp8_format, is_fp8, nan_filled, scale_shape
from .fp8_cache import CacheScales, dequantize_cache

_BOOKKEEPING = ("lengths", "scales", "page_table")  # not payload tensors a decode reads slot by slot


@dataclass
class FactoredCache:
    shared_k: torch.Tensor  # [B, T_max, d_h]    paged: [P, page, d_h]
    shared_v: torch.Tensor  # [B, T_max, d_h]    paged: [P, page, d_h]
    latent_k: torch.Tensor  # [B, T_max, H, r]   paged: [P, page, H, r]
    latent_v: torch.Tensor  # [B, T_max, H, r]   paged: [P, page, H, r]
    lengths: torch.Tensor  # [B] int32
    key_scale: torch.Tensor | None = None  # [B, T_max, H]  paged: [P, page, H]  (QK-RMSNorm only)
    scales: CacheScales | None = None  # fp8 caches only: a float32 scale per part (per-token ones paged)
    page_table: torch.Tensor | None = None  # [B, max_pages] int32; entries past a sequence's pages may be -1

    @property
    def parts(self) -> tuple[torch.Tensor, ...]:
        """The four parts in the contract's order (shared K, shared V, latent K, latent V)."""
        return tuple(getattr(self, p) for p in PARTS)

    @property
    def paged(self) -> bool:
        return self.page_table is not None

    @property
    def page_size(self) -> int:
        return self.shared_k.shape[1]

    @property
    def num_pages(self) -> int:
        return self.shared_k.shape[0]

    @property
    def batch(self) -> int:
        return self.page_table.shape[0] if self.paged else self.shared_k.shape[0]

    @property
    def t_max(self) -> int:
        """Slots one sequence can address (paged: max_pages · page_size)."""
        return self.page_table.shape[1] * self.page_size if self.paged else self.shared_k.shape[1]

    def tensors(self) -> dict[str, torch.Tensor]:
        """The cached payload tensors by name (lengths, scales, page table excluded: bookkeeping)."""
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _BOOKKEEPING}
        return {k: v for k, v in out.items() if v is not None}

    def clone(self) -> FactoredCache:
        return FactoredCache(**{f.name: (None if getattr(self, f.name) is None else getattr(self, f.name).clone())
                                for f in fields(self)})

    def to(self, device) -> FactoredCache:
        """Every tensor (scales and page table included) on `device`, a view with its strides."""
        return FactoredCache(**{f.name: None if (v := getattr(self, f.name)) is None else moved(v, device)
                                for f in fields(self)})

    def nbytes(self) -> int:
        """Payload bytes, an fp8 cache's scales included."""
        scales = 0 if self.scales is None else self.scales.nbytes()
        return sum(t.numel() * t.element_size() for t in self.tensors().values()) + scales

    # ------------------------------------------------------------------ the contract boundary
    def contract_kwargs(self, *, page_table: bool = False) -> dict:
        """key_scale, cache_scales (only for an fp8 cache: a backend without fp8 support keeps
        its signature) and, with `page_table=True` (extend's keyword), the page table."""
        kw = {"key_scale": self.key_scale}
        if page_table:
            kw["page_table"] = self.page_table
        return kw if self.scales is None else {**kw, "cache_scales": self.scales}

    # ------------------------------------------------------------------ operations
    def dequantize(self, dtype: torch.dtype) -> FactoredCache:
        """An fp8 cache's parts as `dtype` (stored × scale: exact for float64, rounded once
        otherwise), scales dropped; any other cache unchanged. Contiguous or paged alike."""
        if self.scales is None:
            return self
        parts = dequantize_cache(self.scales, dtype, *self.parts)
        return replace(self, scales=None, **dict(zip(PARTS, parts)))

    def gather(self) -> FactoredCache:
        """A paged cache as the contiguous [B, max_pages · page, ...] it stands for (slots past
        each length NaN: `gather_pages`); a contiguous one unchanged. Dequantize an fp8 cache first."""
        if not self.paged:
            return self
        if self.scales is not None:
            raise ValueError("gather reads a cache at compute precision: dequantize the fp8 cache first")
        out = {n: gather_pages(self.page_table, self.lengths, t) for n, t in self.tensors().items()}
        return replace(self, page_table=None, **out)

    def paginate(self, page_size: int, *, generator: torch.Generator | None = None, extra_pages: int = 3,
                 fill: float = float("nan")) -> FactoredCache:
        """This contiguous cache copied into randomly permuted pages of `page_size` slots.

        Each sequence gets cdiv(T_max, page_size) pages, so the paged cache can hold as much as
        the contiguous one; `extra_pages` pages belong to nobody. Slots past each length keep
        the contiguous cache's content (garbage), and slots no sequence owns are `fill` (like
        FlashAttention's kvcache tests: a kernel that reads an unused slot or follows the wrong
        page shows up as NaN or as a wrong answer). An fp8 cache's per-token scales are paged too.
        """
        if page_size < 1:
            raise ValueError(f"page_size must be >= 1, got {page_size}")
        if self.paged:
            raise ValueError("the cache is paged already")
        B, T = self.batch, self.t_max
        max_pages = -(-T // page_size)
        n_pages = B * max_pages + extra_pages
        device = self.shared_k.device
        perm = torch.randperm(n_pages, generator=generator)[: B * max_pages].to(device)
        table = perm.reshape(B, max_pages).to(torch.int32)
        out = {}
        for name, t in self.tensors().items():
            pool = torch.full((n_pages, page_size, *t.shape[2:]), fill, dtype=t.dtype, device=device)
            out[name] = scatter_pages(t, table, pool)
        scales = None if self.scales is None else scatter_scales(self.scales, table, n_pages, page_size)
        return replace(self, page_table=table, lengths=self.lengths.clone(), scales=scales, **out)

    def sequence(self, b: int, n: int, lengths: torch.Tensor) -> FactoredCache:
        """Sequence b's slots as a contiguous cache of n rows (views of the same tensors) with
        the given lengths [n]: extend's n queries of one sequence, each a decode over its prefix."""
        if self.paged or self.scales is not None:
            raise ValueError("sequence slices a contiguous cache at compute precision: gather/dequantize first")
        view = lambda t: None if t is None else t[b].expand(n, *t.shape[1:])  # noqa: E731
        return replace(self, lengths=lengths, **{name: view(t) for name, t in self.tensors().items()})


def page_counts(cache: FactoredCache) -> torch.Tensor:
    """[B] int64: the pages each sequence of a paged cache owns, cdiv(lengths, page_size)."""
    return (cache.lengths.long() + cache.page_size - 1) // cache.page_size


def moved(t: torch.Tensor, device) -> torch.Tensor:
    """t on `device` with its strides and storage offset: its whole storage moved, so a pool
    that is a view of a larger allocation stays one (Tensor.to makes a non-dense view dense,
    and a kernel on the device would never meet the server's strides)."""
    if t.device == torch.device(device):
        return t
    n = t.untyped_storage().nbytes() // t.element_size()
    return t.as_strided((n,), (1,), 0).to(device).as_strided(t.shape, t.stride(), t.storage_offset())


def empty_in_order(like: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
    """An uninitialized tensor of `shape` whose dimensions lie in memory in `like`'s order (a
    head-major pool stays head-major)."""
    order = sorted(range(like.dim()), key=lambda d: (-like.stride(d), d))  # outermost first
    dense = torch.empty([shape[d] for d in order], dtype=like.dtype, device=like.device)
    return dense.permute([order.index(d) for d in range(like.dim())])


def gather_pages(page_table: torch.Tensor, lengths: torch.Tensor, pages: torch.Tensor | None) -> torch.Tensor | None:
    """One paged tensor [P, page, ...] as the contiguous [B, max_pages · page, ...] it stands for.

    Slots at or past lengths[b] are NaN: they are garbage by contract (their page-table
    entries may be anything, e.g. −1), and NaN makes a path that reads them visible.
    """
    if pages is None:
        return None
    B, max_pages = page_table.shape
    P, page = pages.shape[:2]
    slot = torch.arange(max_pages * page, device=page_table.device)  # logical slot j
    page_of_slot = page_table[:, slot // page].long()  # [B, T]  page_table[b, j // page]
    valid = slot[None, :] < lengths[:, None]  # [B, T]
    gathered = pages[page_of_slot.clamp(0, max(P - 1, 0)), (slot % page)[None, :]]  # [B, T, ...]
    mask = valid.reshape(B, -1, *([1] * (pages.dim() - 2)))
    return torch.where(mask, gathered, torch.full_like(gathered, float("nan")))


def scatter_pages(t: torch.Tensor, page_table: torch.Tensor, pool: torch.Tensor) -> torch.Tensor:
    """The inverse of `gather_pages`: write a contiguous cache tensor t [B, T, ...] into the
    pages pool [P, page, ...] the page table [B, max_pages] names, and return the pool.

    Each sequence's slots are padded to whole pages with pool[0, 0] (the pool holds garbage
    before the write, so the padding is garbage too). Sequence 0 writes last: a page that
    two sequences share (a common prefix, whose tokens are the same) holds sequence 0's copy.
    """
    B, max_pages = page_table.shape
    page, tail = pool.shape[1], t.shape[2:]
    pad = pool[:1, :1].expand(B, max_pages * page - t.shape[1], *tail)
    blocks = torch.cat([t, pad], dim=1).reshape(B, max_pages, page, *tail)
    for b in reversed(range(B)):
        pool[page_table[b].long()] = blocks[b]
    return pool


def scatter_scales(cache_scales: CacheScales, page_table: torch.Tensor, num_pages: int, page: int) -> CacheScales:
    """A contiguous fp8 cache's scales for its paged copy (the same page table): per-token
    scales [B, T, ...] become pages [num_pages, page, ...] (NaN where no slot is written, like
    the garbage they stand beside); static scales are the same for every page."""
    out = {}
    for part, s in cache_scales.tensors().items():
        if cache_scales.granularity_of(part) in DYNAMIC_GRANULARITIES:
            pool = torch.full((num_pages, page, *s.shape[2:]), float("nan"), dtype=s.dtype, device=s.device)
            s = scatter_pages(s, page_table, pool)
        out[part] = s
    return CacheScales(cache_scales.format, cache_scales.granularity, **out)


def allocate_cache(
    spec: AttentionSpec, batch: int, t_max: int, dtype: torch.dtype = torch.float64,
    *, fill: float = float("nan"), device=None, fp8: torch.dtype | None = None, granularity: str = PER_TENSOR,
    static_scale: float = 1.0,
) -> FactoredCache:
    """An empty cache (lengths 0) with every slot filled with `fill` (NaN by default).

    With `fp8` (float8_e4m3fn or float8_e5m2) the four parts are stored in that format,
    filled with its NaN bit pattern (`fill` must stay NaN), and `scales` holds their float32
    scales of `granularity`: static ones (per_tensor, per_head) set to `static_scale` until
    calibrated, dynamic ones (per_token, per_token_head) NaN until append writes them.
    `dtype` is then the compute dtype, which key_scale keeps."""
    if spec.family != "lrkv":
        raise ValueError(f"allocate_cache needs an lrkv spec, got {spec.family!r}")
    if batch < 1 or t_max < 1:
        raise ValueError(f"batch and t_max must be >= 1, got batch={batch}, t_max={t_max}")
    if is_fp8(dtype):
        raise TypeError(f"dtype is the compute dtype (key_scale's); pass fp8={dtype} for an fp8 cache")
    H, d_h, r = spec.n_heads, spec.head_dim, spec.rank
    full = lambda *s: torch.full(s, fill, dtype=dtype, device=device)  # noqa: E731
    comp = cache_components(spec)
    shapes = {"shared_k": (batch, t_max, d_h), "shared_v": (batch, t_max, d_h),
              "latent_k": (batch, t_max, H, r), "latent_v": (batch, t_max, H, r)}
    scales = None
    if fp8 is None:
        parts = {p: full(*s) for p, s in shapes.items()}
    else:
        fp8_format(fp8)  # a TypeError naming anything but the two formats
        if not math.isnan(fill):
            raise ValueError(f"an fp8 cache's garbage is the format's NaN bit pattern; fill must stay NaN, got {fill}")
        if not (math.isfinite(static_scale) and static_scale > 0):
            raise ValueError(f"static_scale must be finite and > 0, got {static_scale}")
        parts = {p: nan_filled(s, fp8, device) for p, s in shapes.items()}
        init = float("nan") if granularity in DYNAMIC_GRANULARITIES else static_scale
        scales = CacheScales(fp8, granularity, **{
            p: torch.full(scale_shape(granularity, p, rows=batch, slots=t_max, heads=H), init, dtype=SCALE_DTYPE,
                          device=device) for p in PARTS})
    return FactoredCache(
        **parts, lengths=torch.zeros(batch, dtype=torch.int32, device=device),
        key_scale=full(batch, t_max, H) if "key_scale" in comp else None, scales=scales,
    )
