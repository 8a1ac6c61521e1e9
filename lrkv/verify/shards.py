"""Shards of a selection (DESIGN §7 "Shards and merge"): which cases `lrkv verify --shard i/n` runs.

A fleet splits one selection over n machines the way Playwright's `--shard=i/n` does, and the
verdict must survive the split: every shard names the selection's **fingerprint** (its
cases, in order), n, i and the ids of its cases, and `lrkv merge` and the gate check that the
shards are exactly the n parts of one selection (merge.py).

The split is deterministic and balanced by cost, not by count: a layer-model case decodes
token by token and a float64 kernel case runs the mpmath oracle, so equal counts are far from
equal times. Each case's cost is its measured seconds in an earlier report (`--costs
REPORT`, its records' seconds summed per case) or, for a case that report lacks, an estimate
from its shapes scaled to seconds by the cases both know. The cases are dealt largest first,
each to the least loaded part (LPT: within 4/3 of the best split), ties broken by index, so
every machine that computes the split from the same selection and costs gets the same one.
"""

from __future__ import annotations

import hashlib
import json
import re
import statistics
from dataclasses import dataclass

from .case import Case

MAX_SHARDS = 10_000
# relative cost of a case's own work per level: layer-model decodes a step per token, the tp
# level starts ranks; the rest prepare one oracle and call each backend once
LEVEL_WEIGHT = {"kernel": 1.0, "kernel-paged": 1.2, "kernel-extend": 1.5, "layer": 1.5, "layer-model": 4.0, "tp": 8.0}
ELEMENTS_PER_UNIT = 50_000  # cache elements that cost about as much as a case's fixed overhead
MPMATH_WEIGHT = 3.0  # a tiny float64 kernel case is also checked against the mpmath oracle


@dataclass(frozen=True)
class Shard:
    index: int  # i, 1-based (as --shard i/n is written)
    count: int  # n

    def __post_init__(self):
        for name, v in (("index", self.index), ("count", self.count)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise TypeError(f"shard {name} must be an int, got {type(v).__name__}")
        if not 1 <= self.count <= MAX_SHARDS:
            raise ValueError(f"shard count {self.count}: must be 1..{MAX_SHARDS}")
        if not 1 <= self.index <= self.count:
            raise ValueError(f"shard {self.index}/{self.count}: the index must be 1..{self.count}")

    @classmethod
    def parse(cls, text: str) -> Shard:
        """'i/n' (e.g. '2/4'); ValueError naming the text otherwise."""
        m = re.fullmatch(r"\s*(\d+)\s*/\s*(\d+)\s*", str(text))
        if not m:
            raise ValueError(f"--shard {text!r}: expected i/n, e.g. 2/4 (shard 2 of 4)")
        return cls(int(m.group(1)), int(m.group(2)))

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def fingerprint(selection, cases: list[Case]) -> str:
    """sha256 of the selection and the cases it resolves to, in order: two shards belong to
    one run only if this is equal (another grid, filter or grid code gives another one)."""
    text = json.dumps({"selection": selection.to_dict(), "cases": [c.to_json() for c in cases]}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


def records_digest(records: list[dict]) -> str:
    """sha256 of records as written (key order aside): a shard's records, edited anywhere, change it."""
    text = json.dumps(records, sort_keys=True, separators=(",", ":"), allow_nan=False)
    return hashlib.sha256(text.encode()).hexdigest()


def estimated_cost(case: Case) -> float:
    """A case's cost in units of its fixed overhead, from its level and shapes (no run needed)."""
    s = case.spec
    elements = case.batch * case.t_max * s.n_heads * (s.head_dim + max(s.rank, 1))
    cost = LEVEL_WEIGHT.get(case.level, 1.0) * (1.0 + elements / ELEMENTS_PER_UNIT)
    if case.level == "layer-model":
        cost *= max(case.t_max, 1) / 8
    if case.level == "kernel" and case.dtype == "float64":
        cost *= MPMATH_WEIGHT
    return cost


def measured_costs(report: dict) -> dict[str, float]:
    """case id -> seconds its records took in a report (a twin counts for its declined case)."""
    out: dict[str, float] = {}
    for r in report.get("records", []):
        cid = (r.get("twin") or {}).get("of", r.get("id"))
        if isinstance(cid, str) and isinstance(r.get("seconds"), (int, float)):
            out[cid] = out.get(cid, 0.0) + float(r["seconds"])
    return out


def costs(cases: list[Case], measured: dict[str, float] | None = None) -> list[float]:
    """Each case's cost: measured where known, else its estimate in the measured cases' seconds."""
    est = [estimated_cost(c) for c in cases]
    if not measured:
        return est
    both = [measured[c.id] / e for c, e in zip(cases, est) if c.id in measured and measured[c.id] > 0]
    scale = statistics.median(both) if both else 1.0
    return [measured[c.id] if c.id in measured else e * scale for c, e in zip(cases, est)]


def partition(weights: list[float], n: int) -> list[list[int]]:
    """n lists of indices into weights (each in ascending order): largest first, each to the
    least loaded part, ties by index — deterministic, and balanced within 4/3 of the best."""
    if n < 1:
        raise ValueError(f"partition into {n} parts: need at least 1")
    loads = [0.0] * n
    parts: list[list[int]] = [[] for _ in range(n)]
    for i in sorted(range(len(weights)), key=lambda i: (-weights[i], i)):
        k = min(range(n), key=lambda k: (loads[k], k))
        parts[k].append(i)
        loads[k] += weights[i]
    return [sorted(p) for p in parts]


def shard_cases(cases: list[Case], shard: Shard, measured: dict[str, float] | None = None) -> list[Case]:
    """The cases of shard i/n, in selection order."""
    return [cases[i] for i in partition(costs(cases, measured), shard.count)[shard.index - 1]]
