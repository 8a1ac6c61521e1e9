"""What the equivalence suite verified in this pytest session, per backend label.

The suite (lrkv.testing.suite) records each case that met the rule and each backend that was
unavailable; the plugin (lrkv.testing.plugin) prints the counts at the end of the session and
fails a session in which a `--lrkv-backend` verified nothing. A module of its own so that the
plugin, which loads the suite, and the suite need not import each other.
"""

from __future__ import annotations

from collections import Counter


class Tally:
    """What the suite verified in this session, per backend label."""

    def __init__(self) -> None:
        self.verified: Counter[str] = Counter()  # cases (grid and drawn examples) that met the rule
        self.unavailable: dict[str, str] = {}  # label -> available()'s reason
        self.skips: dict[str, Counter[str]] = {}  # label -> skip reason -> count
        self.labels: dict[str, str] = {}  # test node id -> backend label

    def skipped(self, label: str, reason: str) -> None:
        self.skips.setdefault(label, Counter())[reason] += 1


TALLIES: list[Tally] = []  # one per configured session (a stack: pytester nests sessions)


def tally() -> Tally | None:
    """The running session's tally (None outside a pytest session with this plugin)."""
    return TALLIES[-1] if TALLIES else None


def record_verified(label: str, n: int = 1) -> None:
    t = tally()
    if t is not None:
        t.verified[label] += n


def record_unavailable(label: str, why: str) -> None:
    t = tally()
    if t is not None:
        t.unavailable[label] = why
