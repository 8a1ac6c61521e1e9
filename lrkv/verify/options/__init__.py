"""A case's per-level options (DESIGN §3): each a small frozen dataclass that owns its JSON
keys (`KEYS`: flat key -> attribute), its validation against the case core (`check`), its id
flags and its report shapes. `lrkv.verify.case.OPTIONS` names them; a case holds None for an
option whose keys all keep their defaults."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

MAX_T = 1 << 20  # t_max limit: a case is drawn in float64 on the CPU (the core's bound, lrkv.verify.case)


@dataclass(frozen=True)
class Feature:
    """A feature of a case level (lrkv.verify.features, DESIGN §8); here, below the case, so
    that an option can list its own features without importing the case it belongs to."""

    name: str
    levels: tuple[str, ...]
    test: Callable[..., bool]  # Case -> whether the case exercises it
    why: str  # what a kernel gets wrong without it
    dim: str = ""  # a capability dimension (CAPABILITY_DIMS); '' for a feature
    needs: tuple[str, ...] = ()  # capability features it needs: excused when none of them can be covered
