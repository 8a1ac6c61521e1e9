"""All-pairs arrays for the paged and extend grids (DESIGN §8).

`all_pairs(params, valid)` returns rows (one value per dimension) such that every pair of
values of any two dimensions meets in some row — every pair, that is, which some valid row
holds. It is the greedy construction of AETG (Cohen et al., 1997): while a pair is uncovered,
draw random valid rows that hold it and keep the one covering the most uncovered pairs.

Why not allpairspy (which the grids used before): with a validity filter its search leaves
pairs out without saying so. The paged array it built missed 10 of its 517 possible pairs
(exact RoPE never met the (4, 32, 6) shape); with the fp8 cache as a dimension it missed 118
of 824 and took 18 s per process, against 0.3 s here. Here a pair is dropped only when
no valid row holding it turned up in `DRAWS_PER_PAIR` random draws; `impossible_pairs` lists
those, and `tests/verify/test_pairs.py` checks the construction against exhaustive enumeration
and names the reason for each pair the paged array leaves out.
"""

from __future__ import annotations

import itertools
import random
from collections.abc import Callable, Sequence

Row = dict[str, object]
Pair = tuple[str, object, str, object]  # (dimension, value, dimension, value), dimensions in params' order

DRAWS_PER_PAIR = 400  # random completions tried per uncovered pair before it is called impossible
SEED = 0  # the arrays are part of the case ids: the same every run


def pairs_of(names: Sequence[str], row: Row) -> set[Pair]:
    """The pairs one row covers."""
    return {(a, row[a], b, row[b]) for a, b in itertools.combinations(names, 2)}


def every_pair(params: dict[str, Sequence]) -> list[Pair]:
    """Every pair of values of two dimensions, valid or not, in params' order."""
    return [(a, va, b, vb) for a, b in itertools.combinations(params, 2) for va in params[a] for vb in params[b]]


def all_pairs(params: dict[str, Sequence], valid: Callable[[Row], bool]) -> list[Row]:
    """A covering array of strength 2 over params whose rows all satisfy valid(row)."""
    rng, names = random.Random(SEED), list(params)
    uncovered = set(every_pair(params))
    rows: list[Row] = []
    for pair in every_pair(params):  # a fixed order: the same array every run
        if pair not in uncovered:
            continue
        best, gain = None, 0
        for i in range(DRAWS_PER_PAIR):
            row = {n: rng.choice(params[n]) for n in names}
            row[pair[0]], row[pair[2]] = pair[1], pair[3]
            if not valid(row):
                continue
            g = len(pairs_of(names, row) & uncovered)
            if g > gain:
                best, gain = row, g
            if gain and i >= DRAWS_PER_PAIR // 8:  # enough candidates seen: greedy, not exhaustive
                break
        if best is None:  # no valid row holds it (see impossible_pairs)
            uncovered.discard(pair)
            continue
        rows.append(best)
        uncovered -= pairs_of(names, best)
    return rows


def impossible_pairs(params: dict[str, Sequence], rows: list[Row]) -> list[Pair]:
    """The pairs no row of the array holds (all_pairs found no valid row for them)."""
    covered = set().union(*(pairs_of(list(params), r) for r in rows))
    return [p for p in every_pair(params) if p not in covered]
