"""What every level's input drawing shares (DESIGN §6): seeded streams, garbage past each
length, the projected sequence a cache is drawn from, and the contract bundles' base class.

Inputs are drawn in float64 from the case's seed, then rounded to τ by the level. Each
purpose draws from its own stream (`generator(case, stream)`), so adding a draw never
shifts another: a case id always stands for the same numbers.
"""

from __future__ import annotations

from dataclasses import fields, replace

import torch

from ...reference.cache import FactoredCache
from ...reference.cache_layouts import ADAPTERS, DEFAULT as DEFAULT_LAYOUT, fused_rows
from ...reference.cache_layouts.pool_views import DENSE, rehome
from ...reference.fp8 import PARTS
from ...reference.fp8 import is_fp8
from ...reference.lrkv import project_token
from ...reference.weights import LRKVWeights, init_lrkv_weights
from ..case import Case

FINITE_GARBAGE = 1.0e4  # scale of finite garbage (nan_garbage=False): reading it shows up as a huge error


class ContractInputs:
    """What every contract's argument bundle (decode, paged decode, extend; DESIGN §4) does:
    a dataclass with a `cache: FactoredCache` field whose ARGS name its positional arguments
    (its own fields or the cache's) and whose PAGE_TABLE_KW says whether the page table
    travels as a keyword (extend).

    A paged bundle with a `cache_layout` field other than 'pages' hands its cache to the
    backend in that server layout (`lrkv.reference.cache_layouts`; LAYOUT_ARGS names the
    adapter's signature), and one with a `pool_view` other than 'dense' its parts as views of
    a larger allocation (`pool_views`): converted once per bundle, so the server properties'
    buffers are the layout's tensors themselves, and re-converted by `replace` (a new bundle).
    The bundle's own cache stays dense: the oracle reads that."""

    ARGS: tuple[str, ...] = ()
    PAGE_TABLE_KW = False
    LAYOUT_ARGS = "DECODE"  # the adapter's positional names: DECODE, or EXTEND (+ EXTEND_KEYWORDS)

    def _get(self, name: str):
        return getattr(self, name) if name in self.__dataclass_fields__ else getattr(self.cache, name)

    def arranged(self) -> dict | None:
        """The cache's arguments in the bundle's server layout and pool view, by contract name
        (None: the contract's own, dense)."""
        layout, view = getattr(self, "cache_layout", DEFAULT_LAYOUT), getattr(self, "pool_view", DENSE)
        if layout == DEFAULT_LAYOUT and view == DENSE:
            return None
        if "_arranged" not in self.__dict__:
            if not self.cache.paged:
                raise ValueError(f"cache_layout {layout!r} and pool_view {view!r} hand over a paged cache; "
                                 "this case's cache is contiguous")
            laid = ({p: getattr(self.cache, p) for p in PARTS} if layout == DEFAULT_LAYOUT
                    else ADAPTERS[layout].arrange(self.cache, getattr(self, "cu_seqlens_q", None)))
            self.__dict__["_arranged"] = rehome(laid, view, fused_row=layout == fused_rows.NAME)
        return self.__dict__["_arranged"]

    def _layout_names(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        if self.cache_layout == DEFAULT_LAYOUT:
            return self.ARGS, ()
        adapter = ADAPTERS[self.cache_layout]
        return getattr(adapter, self.LAYOUT_ARGS), (adapter.EXTEND_KEYWORDS if self.LAYOUT_ARGS == "EXTEND" else ())

    def args(self) -> tuple:
        laid = self.arranged()
        if laid is None:
            return tuple(self._get(n) for n in self.ARGS)
        return tuple(laid[n] if n in laid else self._get(n) for n in self._layout_names()[0])

    def kwargs(self) -> dict:
        laid = self.arranged()
        if laid is None or self.cache_layout == DEFAULT_LAYOUT:
            return {"scale": self.scale, "rope": self.rope,
                    **self.cache.contract_kwargs(page_table=self.PAGE_TABLE_KW)}
        extra = {n: laid[n] for n in ("cache_scales", *self._layout_names()[1]) if n in laid}
        return {"scale": self.scale, "rope": self.rope, "key_scale": laid["key_scale"], **extra}

    def in_layout(self, layout: str):
        """The bundle as a backend of `layout` is handed it (this one for the contract's own)."""
        if layout == getattr(self, "cache_layout", DEFAULT_LAYOUT):
            return self
        return replace(self, cache_layout=layout)

    def call(self, fn, **extra):
        """fn(*contract args, **contract kwargs, **extra)."""
        return fn(*self.args(), **self.kwargs(), **extra)

    def map(self, f):
        """Apply f to every float tensor at compute precision (lengths, page tables, cu_seqlens,
        an fp8 cache's parts and its float32 scales untouched: they are stored, not computed)."""
        def mapped(obj, names):
            return {n: f(v) for n in names if isinstance(v := getattr(obj, n), torch.Tensor)
                    and v.is_floating_point() and not is_fp8(v.dtype)}
        return replace(self, cache=replace(self.cache, **mapped(self.cache, self.cache.tensors())),
                       **mapped(self, [fl.name for fl in fields(self)]))

    def to(self, dtype: torch.dtype):
        return self.map(lambda t: t.to(dtype))

    def clone(self):
        """A copy with the SAME strides (a strided layout must reach the backend as drawn)."""
        c = self.cache
        cache = replace(c, scales=c.scales and c.scales.clone(),
                        **{f.name: clone_strided(v) for f in fields(c) if isinstance(v := getattr(c, f.name), torch.Tensor)})
        return replace(self, cache=cache, **{f.name: clone_strided(v) for f in fields(self)
                                             if isinstance(v := getattr(self, f.name), torch.Tensor)})

    def named_tensors(self) -> dict[str, torch.Tensor]:
        """Every tensor the backend is handed, by its contract name — an fp8 cache's scales as
        'cache_scales.<part>' (what the server properties snapshot and overwrite)."""
        laid = self.arranged()
        if laid is not None and self.cache_layout != DEFAULT_LAYOUT:
            names, keywords = self._layout_names()
            out = {n: v for n in (*names, *keywords, "key_scale")
                   if isinstance(v := laid[n] if n in laid else self._get(n), torch.Tensor)}
            scales = laid.get("cache_scales")
        else:
            laid = laid or {}
            out = {n: v for n in (*self.ARGS, "key_scale", "page_table")
                   if isinstance(v := laid[n] if n in laid else self._get(n), torch.Tensor)}
            scales = self.cache.scales
        if scales is not None:
            out.update({f"cache_scales.{p}": t for p, t in scales.tensors().items()})
        return out

    def dequantize_to(self, dtype: torch.dtype):
        """The bundle with an fp8 cache dequantized to dtype (stored × scale, rounded once) and
        no scales: what a dequantize-then-attend path at dtype reads. Unchanged without fp8."""
        return replace(self, cache=self.cache.dequantize(dtype))


def clone_strided(t: torch.Tensor) -> torch.Tensor:
    """A copy of t with t's exact strides, also for non-dense views (torch.clone would densify)."""
    out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    return out.copy_(t)


def cast_cache(cache: FactoredCache, dtype: torch.dtype) -> FactoredCache:
    """A copy of the cache with every float tensor at dtype (lengths, an fp8 cache's parts
    and its float32 scales untouched: stored, not computed)."""
    c = cache.clone()
    for name, t in c.tensors().items():
        if not is_fp8(t.dtype):
            setattr(c, name, t.to(dtype))
    return c


def generator(case: Case, stream: int) -> torch.Generator:
    """Independent streams per purpose, so that e.g. the garbage draw never shifts the data."""
    return torch.Generator().manual_seed(case.seed * 1_000_003 + stream)


def fill_garbage(t: torch.Tensor, valid: torch.Tensor, case: Case, stream: int) -> torch.Tensor:
    """Slots past lengths[b] hold NaN (or large finite noise), never data."""
    m = valid.reshape(*valid.shape, *([1] * (t.dim() - 2)))
    if case.nan_garbage:
        junk = torch.full_like(t, float("nan"))
    else:
        junk = FINITE_GARBAGE * torch.randn(t.shape, generator=generator(case, stream), dtype=t.dtype)
    return torch.where(m, t, junk)


FP8_PART_GAINS = {"w_shared_v": 4.0, "u_k": 0.25, "u_v": 2.0}  # an fp8 case's projections: every part its own range


def fp8_head_gains(n_heads: int) -> torch.Tensor:
    """[H] 1/4, 1, 4, 1/4, …: heads with latent ranges 16× apart (a per-head scale matters)."""
    return torch.exp2(2.0 * (torch.arange(n_heads, dtype=torch.float64) % 3 - 1))


def fp8_ranges(weights: LRKVWeights) -> LRKVWeights:
    """An fp8 case's weights: shared V ×4, latent K ×1/4, latent V ×2 and each head's latents
    ×4^((h mod 3) − 1), so the four cached parts and the heads have ranges 2–16× apart — a
    kernel that applies the K scale to V, a shared scale to a latent, or head 0's scale to every
    head is off by a factor, never by a rounding (the cache, the appended token and the query
    all come from these weights, so they stay one model)."""
    heads = fp8_head_gains(weights.u_k.shape[0])[:, None, None]  # [H, 1, 1] onto U_h [H, d, r]
    return replace(weights, w_shared_v=weights.w_shared_v * FP8_PART_GAINS["w_shared_v"],
                   u_k=weights.u_k * FP8_PART_GAINS["u_k"] * heads, u_v=weights.u_v * FP8_PART_GAINS["u_v"] * heads)


def projected_sequence(case: Case) -> tuple[LRKVWeights, torch.Tensor, dict[str, torch.Tensor]]:
    """float64 weights, activations x [B, T_max, d] and every slot's cache entries (an fp8
    case's weights with their parts' ranges apart: `fp8_ranges`)."""
    spec, B, T = case.spec, case.batch, case.t_max
    weights = init_lrkv_weights(spec, seed=case.seed)
    if case.cache_fp8:
        weights = fp8_ranges(weights)
    x = torch.randn(B, T, spec.d_model, generator=generator(case, 1), dtype=torch.float64)
    if case.pages and case.pages.shared_prefix:  # a common prompt: the same tokens give the same cache entries
        x[1, :case.pages.shared_prefix] = x[0, :case.pages.shared_prefix]
    entries = project_token(weights, x, torch.arange(T)[None, :].expand(B, T))
    return weights, x, entries
