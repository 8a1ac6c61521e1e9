"""Twins: a case a backend declines is re-run at the nearest variant it supports (DESIGN §8).

A kernel that declines exact RoPE must still face the page size 7, the shared prefix and
the NaN pages that the grid's exact-RoPE paged case carries. So when a backend declines a
case — `supports()` false, or the case's dtype not in its `dtypes` — the runner derives the
case's *twin*: the nearest variant that changes only capability dimensions
(features.CAPABILITY_DIMS: layout, RoPE mode, QK-norm, dtype, fp8 cache, fp8 compute, head
dim, rank, head count, an extend cache's paging — a server-layout backend takes pages only —
and the pools' view — dense for a backend that needs dense pools),
in that order of preference and fewest changes first, keeping every other field (page size,
shared pages, shuffled and NaN pages, lengths, n_new, splits, q scale, near cancellation,
garbage, seed). The twin is an ordinary case for the gate; its record id is

    <declined case id>~<changes>        e.g.  kernel-paged:…:s0+page7+prefix14~rope=none

and its record carries `twin = {"of": <declined id>, "changes": <changes>, "case": <the
declined case>}`, so the gate re-derives the twin from the declined case itself
(`apply_changes`) instead of trusting it.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

from .case import Case
from .features import CAPABILITY_DIMS
from .options import fp8, paged
MAX_TRIES = 400  # supports() calls per declined case; the search stops (no twin) beyond
HEAD_DIMS = (64, 128, 32, 16, 256)  # candidate head dims, nearest (in log2) first
DTYPE_PREFERENCE = {  # nearest dtype first: same width, then wider
    "bfloat16": ("float16", "float32", "float64"),
    "float16": ("bfloat16", "float32", "float64"),
    "float32": ("float64", "bfloat16", "float16"),
    "float64": ("float32", "bfloat16", "float16"),
}


def _by_distance(current: int, candidates, log: bool = False) -> list[int]:
    key = (lambda v: (abs(math.log2(v) - math.log2(current)) if v > 0 and current > 0 else 99, v)) if log \
        else (lambda v: (abs(v - current), v))
    return sorted({v for v in candidates if v != current}, key=key)


def candidates(case: Case, dim: str) -> list:
    """The values a twin may give one capability dimension, nearest first."""
    s = case.spec
    if dim == "layout":
        return ["contiguous"] if case.layout != "contiguous" else []
    if dim == "rope":
        return [m for m in ("none", "exact", "aligned") if m != s.rope]
    if dim == "qk_norm":
        return [False] if s.qk_norm else []
    if dim == "dtype":
        return list(DTYPE_PREFERENCE[case.dtype])
    if dim in fp8.DIMS:
        return fp8.twin_candidates(case, dim)
    if dim == "head_dim":
        return _by_distance(s.head_dim, HEAD_DIMS, log=True)
    if dim == "rank":
        near = (s.rank - 1, s.rank + 1, 16, 32, 8, 64, 4, 2, 1, 0)
        return [r for r in _by_distance(s.rank, near) if r >= 0]
    if dim == "n_heads":
        return [h for h in _by_distance(s.n_heads, (s.n_heads - 1, s.n_heads + 1, 4, 8, 16, 2, 1, 32)) if h >= 1]
    if dim in paged.DIMS:
        return paged.twin_candidates(case, dim)
    raise ValueError(f"unknown capability dimension {dim!r}")


def _value(case: Case, dim: str):
    if dim in ("layout", "dtype"):
        return getattr(case, dim)
    if dim in fp8.DIMS:
        return fp8.twin_value(case, dim)
    if dim in paged.DIMS:
        return paged.twin_value(case, dim)
    return getattr(case.spec, dim)


def _fmt(value) -> str:
    return {True: "on", False: "off"}.get(value, str(value)) if isinstance(value, bool) else str(value)


def changes_text(changes: dict) -> str:
    """'rope=none,qk_norm=off': the changed dimensions in CAPABILITY_DIMS order."""
    return ",".join(f"{d}={_fmt(changes[d])}" for d in CAPABILITY_DIMS if d in changes)


def parse_changes(text: str) -> dict:
    """The inverse of changes_text (ValueError on anything else)."""
    out = {}
    for part in str(text).split(","):
        dim, sep, raw = part.partition("=")
        if not sep or dim not in CAPABILITY_DIMS or dim in out:
            raise ValueError(f"twin changes {text!r}: {part!r} is not <dimension>=<value> of {CAPABILITY_DIMS}")
        if dim == "qk_norm":
            if raw not in ("on", "off"):
                raise ValueError(f"twin changes {text!r}: qk_norm must be on or off")
            out[dim] = raw == "on"
        elif dim in ("head_dim", "rank", "n_heads", "paging"):
            if not raw.isdigit():
                raise ValueError(f"twin changes {text!r}: {dim} must be an integer")
            out[dim] = int(raw)
        else:
            out[dim] = raw
    if not out:
        raise ValueError("twin changes: empty")
    return out


def apply_changes(case: Case, changes: dict) -> Case:
    """The case with its capability dimensions changed (ValueError if that case is invalid)."""
    s = case.spec
    spec_changes = {d: v for d, v in changes.items() if d in ("rope", "qk_norm", "head_dim", "rank", "n_heads")}
    if spec_changes:
        if s.d_model == s.n_heads * s.head_dim:  # a default width follows the heads
            spec_changes["d_model"] = spec_changes.get("n_heads", s.n_heads) * spec_changes.get("head_dim", s.head_dim)
        s = s.replace(**spec_changes)
    kw = {d: v for d, v in changes.items() if d in ("layout", "dtype")}
    if set(changes) & set(fp8.DIMS):
        kw["fp8"] = fp8.twin_apply(case.fp8, changes)
    if set(changes) & set(paged.DIMS):  # flat keys, applied apart: Case.replace takes flat keys or options, not both
        case = case.replace(**paged.twin_apply(changes))
    expect = case.expect
    if case.level == "layer-model":  # latent RoPE is the model's expected difference (case.py)
        expect = "differ" if s.rope == "latent" else "match"
    return case.replace(spec=s, expect=expect, **kw)


def twin_id(declined: Case, changes: dict) -> str:
    return f"{declined.id}~{changes_text(changes)}"


def forced_changes(case: Case, backend) -> dict:
    """Changes every twin of `case` needs for `backend`, known from its claims without asking:
    an fp8 case for a backend that reads no fp8 cache is twinned at τ (cache=none), a pool view
    the backend does not take at dense pools, so the search spends its tries on the other dimensions."""
    from .protocol import cache_layout, fp8_claims, pool_views
    from ..reference.cache_layouts import DEFAULT

    forced = {"cache": fp8.NONE} if case.cache_fp8 and not fp8_claims(backend)[0] else {}
    if case.pages and case.pages.view not in pool_views(backend):
        forced["pool_view"] = paged.DENSE  # a backend that needs dense pools (the only view every backend takes)
    if case.level == "kernel-extend" and not paged.twin_value(case, "paging") and cache_layout(backend) != DEFAULT:
        forced["paging"] = paged.TWIN_PAGES[0]  # a server layout takes pages only
    return forced


def find_twin(case: Case, accepts: Callable[[Case], bool], forced: dict | None = None) -> tuple[Case, dict] | None:
    """The nearest valid variant `accepts` takes, and its changes; None if none within MAX_TRIES.

    Fewest changed dimensions first; among those, dimensions in CAPABILITY_DIMS order and each
    dimension's candidates nearest first. `forced` (forced_changes): changes every candidate
    carries."""
    forced = dict(forced or {})
    dims = [d for d in CAPABILITY_DIMS if candidates(case, d) and d not in forced]
    tries = 0
    for n in range(0 if forced else 1, len(dims) + 1):
        for subset in itertools.combinations(dims, n):
            for values in itertools.product(*(candidates(case, d) for d in subset)):
                changes = {**forced, **dict(zip(subset, values))}
                try:
                    twin = apply_changes(case, changes)
                except (ValueError, TypeError):
                    continue  # not a valid case (aligned RoPE with an odd rank, rank > d_h, …)
                tries += 1
                if accepts(twin):
                    return twin, {d: changes[d] for d in CAPABILITY_DIMS if d in changes}
                if tries >= MAX_TRIES:
                    return None
    return None


def check_twin(declined: Case, changes_str: str, twin: Case) -> str:
    """'' when `twin` is exactly what `changes_str` makes of `declined`, else why not."""
    try:
        changes = parse_changes(changes_str)
        want = apply_changes(declined, changes)
    except ValueError as e:
        return str(e)
    if any(_value(declined, d) == v for d, v in changes.items()):
        return f"twin changes {changes_str!r} name a value the declined case already has"
    if want != twin:
        return f"the twin case is not the declined case with {changes_str!r}"
    return ""
