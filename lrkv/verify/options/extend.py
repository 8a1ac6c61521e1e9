"""Level kernel-extend's new tokens: n_new[b] ragged, causal queries per sequence."""

from __future__ import annotations

from dataclasses import dataclass

from . import Feature
from ...checks import check_int

KEYS = {"n_new": "n_new"}
CHUNK = 64  # n_new at least this long: an extend chunk spanning several query tiles


@dataclass(frozen=True)
class Extend:
    n_new: tuple[int, ...] = ()  # new tokens per sequence (n_b <= lengths[b]; 0 allowed)

    def __post_init__(self) -> None:
        if isinstance(self.n_new, (str, bytes)) or not hasattr(self.n_new, "__iter__"):
            raise TypeError(f"n_new must be a sequence of integers, got {self.n_new!r}")
        object.__setattr__(self, "n_new", tuple(check_int(f"n_new[{i}]", n, minimum=0)
                                                for i, n in enumerate(self.n_new)))

    def check(self, case) -> None:
        if case.level != "kernel-extend":
            raise ValueError("n_new applies to level kernel-extend only")
        if len(self.n_new) != case.batch:
            raise ValueError(f"n_new must give one count per sequence ({case.batch}), got {list(self.n_new)}")
        over = [b for b, (n, L) in enumerate(zip(self.n_new, case.lengths)) if n > L]
        if over:
            raise ValueError(f"n_new[{over[0]}] = {self.n_new[over[0]]} exceeds lengths[{over[0]}] = "
                             f"{case.lengths[over[0]]}: the new tokens are part of the length")
        if case.splits or case.tile:
            raise ValueError("splits and tile are decode split-K hints; kernel-extend cases take none")

    def flags(self) -> str:
        return "+new" + "-".join(map(str, self.n_new))

    def shapes(self) -> dict:
        return {"n_new": list(self.n_new)}


def new_tokens(length: int):
    """The hypothesis draw of n_b for a sequence of `length` tokens: 0 (idle), 1 (decode), 2–8
    (speculative verification, a short chunk), or occasionally a longer chunk (9 … length: prefill)."""
    from hypothesis import strategies as st  # with a draw, not with the case

    kinds = [st.just(0)]
    if length >= 1:
        kinds += [st.just(1), st.just(1)]
    if length >= 2:
        few = st.integers(2, min(8, length))
        kinds += [few, few]
    if length >= 9:
        kinds.append(st.integers(9, length))
    return st.one_of(*kinds)


def features() -> list:
    """The extend features (lrkv.verify.features): idle, decode, speculative, chunk and prefill rows."""

    ext, new = ("kernel-extend",), lambda c: c.extend.n_new if c.extend else ()  # noqa: E731
    return [
        Feature("n_new=0", ext, lambda c: 0 in new(c), "an idle sequence in the batch"),
        Feature("n_new=1", ext, lambda c: 1 in new(c), "a decode step inside an extend batch"),
        Feature("n_new 2-8", ext, lambda c: any(2 <= n <= 8 for n in new(c)), "speculative verification (2–8)"),
        Feature(f"n_new>={CHUNK}", ext, lambda c: max(new(c), default=0) >= CHUNK,
                "a chunked-prefill chunk spanning several query tiles"),
        Feature("n_new=length", ext, lambda c: any(0 < n == L for n, L in zip(new(c), c.lengths)),
                "a prefill from an empty cache"),
        Feature("extend contiguous", ext, lambda c: c.pages is None or c.pages.size == 0,
                "extend on a contiguous cache", dim="paging"),
        Feature("extend paged", ext, lambda c: c.pages is not None and c.pages.size > 0, "extend on a paged cache",
                dim="paging"),
    ]
