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
from ...reference.lrkv import project_token
from ...reference.weights import LRKVWeights, init_lrkv_weights
from ..case import Case

FINITE_GARBAGE = 1.0e4  # scale of finite garbage (nan_garbage=False): reading it shows up as a huge error


class ContractInputs:
    """What every contract's argument bundle (decode, paged decode, extend; DESIGN §4) does
    with its fields: call a backend entry point, map the float tensors, copy. A subclass is
    a dataclass that defines args() and kwargs()."""

    def call(self, fn, **extra):
        """fn(*contract args, **contract kwargs, **extra)."""
        return fn(*self.args(), **self.kwargs(), **extra)

    def map(self, f):
        """Apply f to every float tensor (lengths, page tables, cu_seqlens untouched)."""
        return replace(self, **{fl.name: f(v) for fl in fields(self)
                                if isinstance(v := getattr(self, fl.name), torch.Tensor) and v.is_floating_point()})

    def to(self, dtype: torch.dtype):
        return self.map(lambda t: t.to(dtype))

    def clone(self):
        """A copy with the SAME strides (a strided layout must reach the backend as drawn)."""
        return replace(self, **{fl.name: clone_strided(v) for fl in fields(self)
                                if isinstance(v := getattr(self, fl.name), torch.Tensor)})


def clone_strided(t: torch.Tensor) -> torch.Tensor:
    """A copy of t with t's exact strides, also for non-dense views (torch.clone would densify)."""
    out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    return out.copy_(t)


def cast_cache(cache: FactoredCache, dtype: torch.dtype) -> FactoredCache:
    """A copy of the cache with every float tensor at dtype (lengths untouched)."""
    c = cache.clone()
    for name, t in c.tensors().items():
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


def projected_sequence(case: Case) -> tuple[LRKVWeights, torch.Tensor, dict[str, torch.Tensor]]:
    """float64 weights, activations x [B, T_max, d] and every slot's cache entries."""
    spec, B, T = case.spec, case.batch, case.t_max
    weights = init_lrkv_weights(spec, seed=case.seed)
    x = torch.randn(B, T, spec.d_model, generator=generator(case, 1), dtype=torch.float64)
    if case.shared_prefix:  # a common prompt: the same tokens give the same cache entries
        x[1, :case.shared_prefix] = x[0, :case.shared_prefix]
    entries = project_token(weights, x, torch.arange(T)[None, :].expand(B, T))
    return weights, x, entries

