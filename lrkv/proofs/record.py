"""The Proof record: one algebraic or numerical claim of the LRKV paper and its verdict.

A proof function returns a `Verdict` (what it found); the registry wraps it into a frozen
`Proof` that also carries the claim, where the paper makes it, and the status the suite
expects. Keeping the expectation apart from the finding is what lets CI fail when a
finding changes (DESIGN §1, item 2).

Statuses:
  proved        the claim holds: a symbolic residual simplified to zero (general symbols or
                fully symbolic small matrices), or recomputed numbers equal the printed ones
  refuted       the claim is false: a counterexample is attached
  reconciled    printed numbers disagree with the formulas as stated, but agree exactly
                under one named assumption (a different rank, layer count, unit, dtype …)
  consistent    a printed number lies inside a bound the formulas derive (and would fail
                outside it), but nothing in the sources reproduces its exact value: the
                evidence names the bound (`evidence["bound"]`)
  unverifiable  the sources do not hold what checking the claim needs (a figure, the table
                cells): the evidence names what is missing (`evidence["missing"]`) and what the
                sources do show; it never stands in for a check that could be run
  inconsistent  printed numbers disagree and no assumption searched makes them agree
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Literal

Status = Literal["proved", "refuted", "reconciled", "consistent", "unverifiable", "inconsistent"]
STATUSES: tuple[str, ...] = ("proved", "refuted", "reconciled", "consistent", "unverifiable", "inconsistent")
# What the evidence of a status must carry (the report validator checks the same).
REQUIRED_EVIDENCE = {"consistent": "bound", "unverifiable": "missing"}
# Only the runner uses this: a proof that raised has no status of its own.
ERROR = "error"


def _check_status(name: str, value: str) -> None:
    if value not in STATUSES:
        raise ValueError(f"{name} must be one of {STATUSES}, got {value!r}")


def _check_json(evidence: Any, where: str) -> None:
    # Evidence goes into the JSON report verbatim; fail at construction, not at write time.
    try:
        json.dumps(evidence, allow_nan=False)
    except (TypeError, ValueError) as e:
        raise TypeError(f"evidence of {where} is not JSON-serialisable: {e}") from None


@dataclass(frozen=True)
class Verdict:
    """What a proof body found. `summary` says why, in words a reader without the paper follows."""

    status: str  # one of STATUSES
    summary: str  # one or two sentences: what was shown and how
    evidence: dict = field(default_factory=dict)  # residuals, counterexamples, recomputed numbers
    assumption: str | None = None  # required for `reconciled`: the assumption that makes numbers agree

    def __post_init__(self) -> None:
        _check_status("status", self.status)
        if self.status == "reconciled" and not self.assumption:
            raise ValueError("a reconciled verdict must name its assumption")
        key = REQUIRED_EVIDENCE.get(self.status)
        if key and not (isinstance(self.evidence, dict) and self.evidence.get(key)):
            raise ValueError(f"a {self.status} verdict must give evidence[{key!r}]")
        _check_json(self.evidence, "verdict")


@dataclass(frozen=True)
class Proof:
    """One claim, where it comes from, what the suite found and what it expects."""

    name: str  # registry key, snake_case
    item: int  # the numbered claim group (1–10; report.ITEMS)
    claim: str  # the claim, one sentence
    source: str  # equation / table / page as the source reviews cite them
    status: str  # one of STATUSES
    expected: str  # the status the suite expects (CI fails when status != expected)
    summary: str  # why the status holds
    evidence: dict  # JSON-serialisable
    assumption: str | None = None  # for reconciled verdicts

    def __post_init__(self) -> None:
        _check_status("status", self.status)
        _check_status("expected", self.expected)
        _check_json(self.evidence, self.name)

    @property
    def ok(self) -> bool:
        return self.status == self.expected

    def to_dict(self) -> dict:
        return {
            "name": self.name, "item": self.item, "claim": self.claim, "source": self.source,
            "status": self.status, "expected": self.expected, "ok": self.ok,
            "summary": self.summary, "assumption": self.assumption, "evidence": self.evidence,
        }


def failing(checks: dict) -> list[str]:
    """The names of the sub-checks that did not hold, in order (for a verdict's summary)."""
    return [name for name, held in checks.items() if not held]
