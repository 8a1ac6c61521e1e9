"""Which cases a run was asked to verify (DESIGN §7): a grid name and its filters, or the cases given.

`lrkv verify` records its Selection in the report; the gate rebuilds the case list from it
(`Selection.resolve`) instead of trusting the records, so a record deleted, duplicated,
renamed or re-labelled `expect='differ'` cannot go unnoticed: every gated backend needs
exactly one record per case of the selection, and each record's case must be that case.
A named grid is rebuilt from this checkout's code; explicitly given cases (`--case`, a list
passed to `lrkv.testing.check_backend`) travel in the report itself — for those, only a
baseline and a replay (`lrkv gate --replay`) check that nothing was left out.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

from .case import CASE_LEVELS, Case

NAMED_GRIDS = ("default", "quick", "mutants", "tp")  # rebuilt by the gate from the code
GIVEN = "case"  # the cases are listed in the selection itself


@functools.cache
def _named(grid: str, tp: int | None) -> tuple[Case, ...]:
    """A named grid's cases (cached per process: the default grid's all-pairs arrays take seconds)."""
    from . import grids

    if grid == "tp":
        return tuple(grids.tp_grid(tp))
    return tuple({"default": grids.default_grid, "quick": grids.quick_grid, "mutants": grids.mutant_grid}[grid]())


@dataclass(frozen=True)
class Selection:
    grid: str = "default"  # one of NAMED_GRIDS, or GIVEN
    tp: int | None = None  # ranks, for grid 'tp'
    cases: tuple[Case, ...] = ()  # grid GIVEN: the cases themselves
    dtype: tuple[str, ...] = ()  # keep only these dtypes (empty: all)
    level: tuple[str, ...] = ()  # keep only these levels (empty: all)
    filter: str = ""  # keep only ids containing this text
    twins: bool = True  # a declined case is also run at its twin (twins.py); False: --no-twins

    def __post_init__(self):
        from ..spec import dtype_name

        if self.grid not in (*NAMED_GRIDS, GIVEN):
            raise ValueError(f"selection grid {self.grid!r}: known grids {', '.join(NAMED_GRIDS)}, or {GIVEN!r}")
        if (self.grid == "tp") != (self.tp is not None):
            raise ValueError("selection tp: the 'tp' grid needs its rank count, and only it has one")
        if self.tp is not None and (not isinstance(self.tp, int) or isinstance(self.tp, bool) or self.tp < 1):
            raise ValueError(f"selection tp must be an int >= 1, got {self.tp!r}")
        if (self.grid == GIVEN) != bool(self.cases):
            raise ValueError(f"selection cases: given cases need grid {GIVEN!r}, and grid {GIVEN!r} needs cases")
        if not all(isinstance(c, Case) for c in self.cases):
            raise TypeError("selection cases must be Case objects")
        try:
            dtypes = tuple(dtype_name(d) for d in self.dtype)
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"--dtype: {e}") from None
        object.__setattr__(self, "dtype", dtypes)
        unknown = sorted(set(self.level) - set(CASE_LEVELS))
        if unknown:
            raise ValueError(f"--level: unknown {unknown}; known: {', '.join(CASE_LEVELS)}")
        if not isinstance(self.twins, bool):
            raise TypeError(f"selection twins must be a bool, got {type(self.twins).__name__}")
        if not isinstance(self.filter, str):
            raise TypeError(f"selection filter must be a string, got {type(self.filter).__name__}")

    def resolve(self) -> list[Case]:
        """The selected cases, in grid order."""
        cases = list(self.cases) if self.grid == GIVEN else list(_named(self.grid, self.tp))
        return [c for c in cases if (not self.dtype or c.dtype in self.dtype)
                and (not self.level or c.level in self.level) and self.filter in c.id]

    def describe(self) -> str:
        what = f"{len(self.cases)} given cases" if self.grid == GIVEN else \
            (f"grid tp (P={self.tp})" if self.grid == "tp" else f"grid {self.grid}")
        narrowed = [f"dtype {','.join(self.dtype)}" if self.dtype else "", f"level {','.join(self.level)}"
                    if self.level else "", f"filter {self.filter!r}" if self.filter else ""]
        return ", ".join([what, *(n for n in narrowed if n), *(["no twins"] if not self.twins else [])])

    def to_dict(self) -> dict:
        return {"grid": self.grid, "tp": self.tp, "cases": [c.to_dict() for c in self.cases] or None,
                "dtype": list(self.dtype) or None, "level": list(self.level) or None, "filter": self.filter or None, "twins": self.twins}

    @classmethod
    def from_dict(cls, data: dict) -> Selection:
        """ValueError naming the field for anything malformed (the gate reads it from a report)."""
        if not isinstance(data, dict):
            raise ValueError(f"selection must be an object, got {type(data).__name__}")
        unknown = sorted(set(data) - {"grid", "tp", "cases", "dtype", "level", "filter", "twins"})
        if unknown:
            raise ValueError(f"selection: unknown fields {unknown}")
        try:
            cases = tuple(Case.from_dict(c) for c in data.get("cases") or ())
            return cls(grid=data.get("grid"), tp=data.get("tp"), cases=cases, dtype=tuple(data.get("dtype") or ()),
                       level=tuple(data.get("level") or ()), filter=data.get("filter") or "",
                       twins=data.get("twins", True))
        except TypeError as e:
            raise ValueError(f"selection: {e}") from None
