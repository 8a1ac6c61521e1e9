"""Progress lines for long steps (exports, compiles, verification grids), on stderr.

Plain lines rather than a live bar: they survive CI logs and pytest's capture alike.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

QUIET = False  # tests and library callers may silence it


def say(msg: str) -> None:
    if not QUIET:
        print(f"[lrkv engine] {msg}", file=sys.stderr, flush=True)


@contextmanager
def step(msg: str) -> Iterator[None]:
    """`with step("compiling AOTInductor package"):` -> a start line and a timed end line."""
    say(f"{msg} ...")
    t0 = time.perf_counter()
    try:
        yield
    except BaseException:
        say(f"{msg}: failed after {time.perf_counter() - t0:.1f} s")
        raise
    say(f"{msg}: done in {time.perf_counter() - t0:.1f} s")
