"""The backend protocol (DESIGN §4): what the harness calls, and the checks of a backend object.

A backend is an object with a name, the levels it implements (the kernel contracts, the
layer step, the model, `tp`), the dtypes it supports, and `available() -> (bool, reason)`.
Kernel level is the decode contract of `lrkv.reference.contract`; layer level is
`layer_step(weights, x_t, cache, positions) -> (y, cache)`. `BaseBackend` is a convenience
base (its kernel entry points pack the tensors into a `FactoredCache` for `attend`);
`normalize_backend` checks any object against the protocol before the harness uses it.
Where backends come from (names, `package.module:attribute`) is `backend_registry`.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import torch

from ..reference.cache import FactoredCache
from ..reference.cache_layouts import DEFAULT as DEFAULT_LAYOUT, check_layout
from ..reference.cache_layouts.pool_views import DENSE, VIEWS
from ..spec.fp8_scales import GRANULARITIES
from .case import CACHE_FORMATS

# Levels a backend may declare: the kernel contracts of DESIGN §4 (decode, paged decode,
# extend), the layer step, and the model; `tp` is a tensor-parallel per-rank step.
LEVELS = ("kernel", "kernel-paged", "kernel-extend", "layer", "model", "tp")
ROLES = ("verified", "baseline")


@runtime_checkable
class Backend(Protocol):
    name: str
    levels: frozenset[str]
    dtypes: tuple[torch.dtype, ...]

    def available(self) -> tuple[bool, str]: ...


class BaseBackend:
    """Convenience base: subclasses set name/levels/dtypes and implement what they support."""

    name: str = "unnamed"
    # 'baseline': one of the oracle's own paths (reference, materialized, eager): it passes by
    # construction and is reported as a baseline row, never as an independently verified backend
    role: str = "verified"
    levels: frozenset[str] = frozenset({"kernel"})
    dtypes: tuple[torch.dtype, ...] = (torch.float32,)
    description: str = ""
    # fp8 caches it reads (DESIGN §4 "FP8 caches"): the kernel entry points then take
    # cache_scales=; none by default, so a backend never receives an argument it does not know
    cache_formats: tuple[str, ...] = ()
    scale_granularities: tuple[str, ...] = GRANULARITIES
    # the server layout its paged entry points take (lrkv.reference.cache_layouts): 'pages' (the
    # contract's own), 'vllm-blocks', 'flashinfer-csr' or 'fused-rows'
    cache_layout: str = DEFAULT_LAYOUT
    # the pool views its paged entry points take (lrkv.reference.cache_layouts.pool_views): every
    # one by default, as a server hands them; a kernel that needs dense pools declares ("dense",)
    # and its cases with views run at their dense twins (shown in the coverage table)
    pool_views: tuple[str, ...] = VIEWS

    def available(self) -> tuple[bool, str]:
        return True, ""

    def supports(self, case: Any) -> tuple[bool, str]:
        """Whether this backend runs a case (the harness skips with the reason otherwise)."""
        return True, ""

    def configure(self, case: Any) -> None:
        """Called by the harness before each case; read hints such as `case.splits`, `case.tile`."""

    def attend(self, q, cache: FactoredCache, basis_k, basis_v, *, scale, rope=None, cu_seqlens_q=None):
        """Eqs. 6–7 over a FactoredCache — contiguous, paged (cache.page_table) or fp8 (cache.scales)
        — for one query per sequence or, with cu_seqlens_q [B+1], extend's ragged queries. A
        subclass implements this; the three contract methods below unpack into it."""
        raise TypeError(f"backend {self.name!r} does not implement the kernel level")

    # The kernel contracts of DESIGN §4, tensors in (a user's kernel takes them as they are):
    # each packs its cache tensors into one FactoredCache and calls `attend`.
    def decode_attention(self, q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, *,
                         scale, key_scale=None, rope=None, cache_scales=None):
        cache = FactoredCache(shared_k, shared_v, latent_k, latent_v, lengths, key_scale, cache_scales)
        return self.attend(q, cache, basis_k, basis_v, scale=scale, rope=rope)

    def paged_decode_attention(self, q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
                               page_table, *, scale, key_scale=None, rope=None, cache_scales=None):
        cache = FactoredCache(shared_k, shared_v, latent_k, latent_v, lengths, key_scale, cache_scales, page_table)
        return self.attend(q, cache, basis_k, basis_v, scale=scale, rope=rope)

    def extend_attention(self, q, cu_seqlens_q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v,
                         lengths, *, scale, key_scale=None, rope=None, page_table=None, cache_scales=None):
        cache = FactoredCache(shared_k, shared_v, latent_k, latent_v, lengths, key_scale, cache_scales, page_table)
        return self.attend(q, cache, basis_k, basis_v, scale=scale, rope=rope, cu_seqlens_q=cu_seqlens_q)

    def layer_step(self, weights, x_t, cache, positions):
        raise TypeError(f"backend {self.name!r} does not implement the layer level")

    def __repr__(self) -> str:
        return f"<backend {self.name} levels={sorted(self.levels)}>"

def cache_layout(backend: Any) -> str:
    """The server layout a backend's paged entry points take ('pages': the contract's own)."""
    return getattr(backend, "cache_layout", DEFAULT_LAYOUT)


def pool_views(backend: Any) -> tuple[str, ...]:
    """The pool views a backend's paged entry points take (every one unless it says otherwise)."""
    return tuple(getattr(backend, "pool_views", VIEWS))


def _check_names(label: str, attr: str, value, known) -> None:
    """A claim that is a tuple of names, each one of `known` (TypeError / ValueError naming it)."""
    if isinstance(value, str) or not isinstance(value, (tuple, list, frozenset, set)):
        raise TypeError(f"backend {label!r}: {attr} must be a tuple of names, got {value!r}")
    unknown = sorted(str(v) for v in value if v not in known)
    if unknown:
        raise ValueError(f"backend {label!r}: {attr}: unknown {unknown}; known: {', '.join(known)}")


def _check_pool_views(obj: Any, label: str) -> None:
    value = getattr(obj, "pool_views", VIEWS)
    _check_names(label, "pool_views", value, VIEWS)
    if DENSE not in value:
        raise ValueError(f"backend {label!r}: pool_views must include {DENSE!r} (a view's twin is its dense case)")


def fp8_claims(backend: Any) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(cache_formats, scale_granularities) a backend claims for fp8 caches (validated by
    normalize_backend; none for a backend that does not name any)."""
    formats = tuple(getattr(backend, "cache_formats", ()) or ())
    return formats, (tuple(getattr(backend, "scale_granularities", GRANULARITIES)) if formats else ())


def _check_fp8_claims(obj: Any, label: str) -> None:
    formats = getattr(obj, "cache_formats", ())
    grans = getattr(obj, "scale_granularities", GRANULARITIES)
    for attr, value, known in (("cache_formats", formats, CACHE_FORMATS), ("scale_granularities", grans, GRANULARITIES)):
        _check_names(label, attr, value, known)
    if formats and not grans:
        raise ValueError(f"backend {label!r}: scale_granularities is empty but cache_formats names fp8 formats")


def normalize_backend(obj: Any, label: str) -> Any:
    """Check the protocol's attributes; dtype names become torch dtypes, levels a frozenset."""
    from ..spec import as_dtype

    name = getattr(obj, "name")
    if not isinstance(name, str) or not name.strip():
        raise TypeError(f"backend {label!r}: name must be a non-empty string, got {name!r}")
    levels = obj.levels
    if isinstance(levels, str) or not hasattr(levels, "__iter__"):
        raise TypeError(f"backend {label!r}: levels must be a set of level names, got {levels!r}")
    levels = frozenset(levels)
    if not levels:
        raise ValueError(f"backend {label!r}: levels is empty — declare what it implements: {', '.join(LEVELS)}")
    unknown = sorted(str(x) for x in levels - set(LEVELS))
    if unknown:
        raise ValueError(f"backend {label!r}: unknown levels {unknown}; known: {', '.join(LEVELS)}")
    dtypes = obj.dtypes
    if isinstance(dtypes, (str, torch.dtype)) or not hasattr(dtypes, "__iter__"):
        raise TypeError(f"backend {label!r}: dtypes must be a tuple of dtypes, got {dtypes!r}")
    try:
        dtypes = tuple(as_dtype(d) for d in dtypes)
    except (TypeError, ValueError, KeyError) as e:
        raise TypeError(f"backend {label!r}: dtypes: {e}") from None
    if not dtypes:
        raise ValueError(f"backend {label!r}: dtypes is empty")
    _check_fp8_claims(obj, label)
    _check_pool_views(obj, label)
    try:
        check_layout(getattr(obj, "cache_layout", DEFAULT_LAYOUT))
    except ValueError as e:
        raise ValueError(f"backend {label!r}: {e}") from None
    for attr in ("deterministic", "batch_invariant", "compile_safe"):  # "yes" would silently be "not declared"
        value = getattr(obj, attr, False)
        if not isinstance(value, bool):
            raise TypeError(f"backend {label!r}: {attr} must be True or False, got {value!r}")
    role = getattr(obj, "role", "verified")
    if role not in ROLES:
        raise ValueError(f"backend {label!r}: role must be one of {ROLES}, got {role!r}")
    for attr, value in (("levels", levels), ("dtypes", dtypes)):
        if getattr(obj, attr) != value:
            try:
                setattr(obj, attr, value)
            except (AttributeError, TypeError):
                raise TypeError(f"backend {label!r}: {attr} must be given as {value!r}") from None
    return obj


def instantiate(obj: Any, label: str) -> Any:
    if isinstance(obj, type) or (callable(obj) and not hasattr(obj, "available")):
        try:
            obj = obj()
        except KeyboardInterrupt:
            raise
        except BaseException as e:  # noqa: BLE001
            raise ValueError(f"backend {label!r}: its factory raised {type(e).__name__}: {e}") from None
    for attr in ("name", "levels", "dtypes", "available"):
        if not hasattr(obj, attr):
            raise TypeError(f"backend {label!r} lacks {attr!r}; see the backend protocol (DESIGN §4)")
    return normalize_backend(obj, label)


def check_available(backend: Any, label: str) -> tuple[bool, str]:
    """backend.available(), which must return (bool, str); anything else names the backend."""
    try:
        res = backend.available()
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # noqa: BLE001
        raise ValueError(f"backend {label!r}: available() raised {type(e).__name__}: {e}") from None
    if not (isinstance(res, tuple) and len(res) == 2 and isinstance(res[0], bool) and isinstance(res[1], str)):
        raise TypeError(f"backend {label!r}: available() must return (bool, str), got {res!r}")
    return res
