"""The `kernel-paged` level: the paged decode contract of DESIGN §4 (lrkv's own page
table, FlashAttention's block-table convention), same math as decode (Eqs. 6–7).

`paged_decode_attention(q, <cache pages>, basis_k, basis_v, lengths, page_table, *, scale,
key_scale, rope)` on the kernel case's contiguous cache scattered into pages of
`case.pages.size` slots: physical pages shuffled (`shuffle`), two spare pages nobody owns,
sequence 1 reading sequence 0's pages for their common prefix (shared_prefix); every slot no
sequence reads is garbage (NaN by default). Oracle paths: `lrkv.reference.paged`'s factored
and materialized decodes, which gather the pages back and run the contiguous math.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ...reference import paged as ref_paged
from ...reference.cache import FactoredCache
from ...reference.cache_layouts import DEFAULT as DEFAULT_LAYOUT
from ...reference.cache_layouts.pool_views import DENSE
from ...reference.fp8 import PARTS, is_fp8
from ...reference.rope import ExactRope
from ..bounds import kernel_conditioning
from ..case import Case
from . import Level
from .contract import OUT_LSE_AXES, call_out_lse, oracle_path, out_lse_outputs
from .inputs import FINITE_GARBAGE, ContractInputs, generator
from .fp8_inputs import dequantized, fp8_pool, per_token_scales, with_scales
from .kernel import draw_kernel_inputs, quantized

SPARE_PAGES = 2  # pages no sequence owns: garbage a wrong page index can land on
CACHE = ("shared_k", "shared_v", "latent_k", "latent_v", "key_scale")
HEADED = ("latent_k", "latent_v", "key_scale", "cache_scales.latent_k", "cache_scales.latent_v")  # [P, page, H, ...]


@dataclass
class PagedInputs(ContractInputs):
    """The arguments of the paged decode contract (DESIGN §4): the cache paged ([P, page, ...],
    per-token fp8 scales paged with it), its page table [B, max_pages] int32."""

    q: torch.Tensor  # [B, H, d_h]
    cache: FactoredCache
    basis_k: torch.Tensor  # [H, d_h, r]
    basis_v: torch.Tensor  # [H, d_h, r]
    scale: float
    rope: ExactRope | None = None
    cache_layout: str = DEFAULT_LAYOUT  # the layout the backend is handed (lrkv.reference.cache_layouts)
    pool_view: str = DENSE  # its parts as views of a larger allocation (cache_layouts.pool_views)
    ARGS = ("q", *PARTS, "basis_k", "basis_v", "lengths", "page_table")


def plausible_scales(scales: torch.Tensor, shape: tuple[int, ...], gen: torch.Generator) -> torch.Tensor:
    """Scales for slots nobody reads, within a factor 2 of the real ones: a kernel that reads
    them gets values of a plausible size, not an overflow that gives it away."""
    real = scales[torch.isfinite(scales) & (scales > 0)]
    typical = float(real.median()) if real.numel() else 1.0
    return (typical * (0.5 + 1.5 * torch.rand(shape, generator=gen, dtype=torch.float64))).to(scales.dtype)


def paginate(case: Case, cache: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Scatter contiguous cache tensors [B, T_max, ...] into pages [P, page_size, ...].

    Sequence b's logical page i is physical page page_table[b, i]: a random permutation
    (page_shuffle) of B·cdiv(T_max, page) + SPARE_PAGES pages, in sequence-major order
    otherwise, above `page_pool` unused pages (a large pool puts the used indices near its end).
    With shared_prefix, sequence 1's first pages ARE sequence 0's (equal content:
    the same tokens were drawn), and its own copies become unused. `page_hnd` lays the pools
    with a head axis (latents, key scales, per-token-head scales) out head-major. Pages nobody reads, and
    slots past each length, hold garbage (NaN, or large finite values — and, beside an fp8
    cache, per-token scales as NaN or as finite scales of a plausible size).
    """
    page = case.pages.size
    B, T = case.batch, case.t_max
    max_pages = -(-T // page)
    n_pages = B * max_pages + SPARE_PAGES
    order = (torch.randperm(n_pages, generator=generator(case, 40)) if case.pages.shuffle
             else torch.arange(n_pages))
    table = (order[: B * max_pages] + case.pages.pool).reshape(B, max_pages).to(torch.int32)
    n_pages += case.pages.pool
    if case.pages.shared_prefix:
        table[1, : case.pages.shared_prefix // page] = table[0, : case.pages.shared_prefix // page]
    pages = {}
    for i, (name, t) in enumerate(cache.items()):
        if t is None:
            continue
        tail = t.shape[2:]
        if is_fp8(t.dtype):
            pool = fp8_pool(case, (n_pages, page, *tail), t.dtype, 45 + i)
        elif case.nan_garbage:
            pool = torch.full((n_pages, page, *tail), float("nan"), dtype=t.dtype)
        elif name.startswith("cache_scales."):  # per-token scales of unused pages: finite and plausible
            pool = plausible_scales(t, (n_pages, page, *tail), generator(case, 41 + i))
        else:
            pool = FINITE_GARBAGE * torch.randn((n_pages, page, *tail), generator=generator(case, 41 + i),
                                                dtype=t.dtype)
        if case.pages.hnd and name in HEADED and pool.dim() > 2:  # [P, page, H, ...] stored as [P, H, page, ...]
            pool = pool.transpose(1, 2).contiguous().transpose(1, 2)
        pages[name] = ref_paged.scatter_pages(t, table, pool)
    return pages, table


def make_paged_inputs(case: Case, quantize: bool = True) -> PagedInputs:
    """quantize=False: an fp8 case's cache at τ, before quantization (its quantization cost's reference)."""
    if case.level != "kernel-paged":
        raise ValueError(f"make_paged_inputs needs a kernel-paged case, got level {case.level!r}")
    inp, _ = draw_kernel_inputs(case)
    if case.cache_fp8 and quantize:  # quantized as a contiguous cache, then paged with its per-token scales
        inp = quantized(case, inp.to(case.torch_dtype))
    return PagedInputs(q=inp.q, cache=paged_cache(case, inp.cache), basis_k=inp.basis_k, basis_v=inp.basis_v,
                       scale=inp.scale, rope=inp.rope, pool_view=case.pages.view).to(case.torch_dtype)


def paged_cache(case: Case, c: FactoredCache) -> FactoredCache:
    """The contiguous cache scattered into pages (`paginate`), its per-token fp8 scales with it."""
    pages, table = paginate(case, {n: getattr(c, n) for n in CACHE} | per_token_scales(c.scales))
    return replace(c, page_table=table, key_scale=pages.get("key_scale"),
                   scales=c.scales and with_scales(c.scales, pages), **{n: pages[n] for n in PARTS})


def _conditioning(inp: PagedInputs, case: Case):
    return kernel_conditioning(inp.q, dequantized(inp.cache).gather(), inp.basis_k, inp.basis_v,
                               scale=inp.scale)


LEVEL = Level(
    name="kernel-paged", needs="kernel-paged", make_inputs=make_paged_inputs,
    paths=lambda case: {"factored": oracle_path(ref_paged, "paged_decode_attention"),
                        "materialized": oracle_path(ref_paged, "materialized_paged_decode_attention")},
    consistency=lambda case: [("factored", "materialized")], call=call_out_lse("paged_decode_attention"),
    outputs=lambda case: out_lse_outputs(case.batch, case), conditioning=_conditioning,
    unquantized=lambda case: make_paged_inputs(case, quantize=False),
    position=OUT_LSE_AXES,
)
