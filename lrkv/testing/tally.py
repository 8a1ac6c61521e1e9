"""What the equivalence suite verified in this pytest session, per backend label and level.

The suite (lrkv.testing.suite) records each case that met the rule, the levels each loaded
backend declares, and each backend that was unavailable; the plugin (lrkv.testing.plugin)
prints the counts at the end of the session and fails a session in which a backend verified
nothing, or verified nothing at a level it declares while the case grid ran for it. A module
of its own so that the plugin, which loads the suite, and the suite need not import each other.
"""

from __future__ import annotations

from collections import Counter

# the backend levels a case grid exercises (`tp` runs only under `lrkv verify --tp`), and the
# backend level each case level needs (lrkv.verify.levels: layer-model runs the layer step)
GRID_LEVELS = ("kernel", "kernel-paged", "kernel-extend", "layer")
NEEDS = {"layer-model": "layer"}


class Tally:
    """What the suite verified in this session, per backend label."""

    def __init__(self) -> None:
        self.verified: Counter[str] = Counter()  # cases (grid and drawn examples) that met the rule
        self.levels: dict[str, Counter[str]] = {}  # label -> case level -> cases verified
        self.features: dict[str, dict[str, set[str]]] = {}  # label -> case level -> features covered
        self.declared: dict[str, frozenset[str]] = {}  # label -> the backend's levels
        self.unavailable: dict[str, str] = {}  # label -> available()'s reason
        self.skips: dict[str, Counter[str]] = {}  # label -> skip reason -> count
        self.level_skips: dict[tuple[str, str], Counter[str]] = {}  # (label, backend level) -> reason -> count
        self.labels: dict[str, str] = {}  # test node id -> backend label
        self.grid_levels: dict[str, str] = {}  # grid test node id -> its case's backend level
        self.grid_labels: set[str] = set()  # labels whose grid cases were collected
        self.failed: set[str] = set()  # node ids of the suite's tests that failed (setup or call)

    def export(self) -> dict:
        """What a pytest-xdist worker hands its controller (JSON-able), which merges it."""
        return {"verified": dict(self.verified), "levels": {k: dict(v) for k, v in self.levels.items()},
                "features": {k: {lv: sorted(f) for lv, f in v.items()} for k, v in self.features.items()},
                "declared": {k: sorted(v) for k, v in self.declared.items()}, "unavailable": self.unavailable,
                "skips": {k: dict(v) for k, v in self.skips.items()},
                "level_skips": [[k[0], k[1], dict(v)] for k, v in self.level_skips.items()],
                "labels": self.labels, "grid_levels": self.grid_levels, "grid_labels": sorted(self.grid_labels),
                "failed": sorted(self.failed)}

    def merge(self, data: dict) -> None:
        self.verified.update(data["verified"])
        for k, v in data["levels"].items():
            self.levels.setdefault(k, Counter()).update(v)
        for k, v in data["features"].items():
            for lv, f in v.items():
                self.features.setdefault(k, {}).setdefault(lv, set()).update(f)
        for k, v in data["declared"].items():
            self.declared[k] = self.declared.get(k, frozenset()) | frozenset(v)
        self.unavailable.update(data["unavailable"])
        for k, v in data["skips"].items():
            self.skips.setdefault(k, Counter()).update(v)
        for label, level, v in data["level_skips"]:
            self.level_skips.setdefault((label, level), Counter()).update(v)
        self.labels.update(data["labels"])
        self.grid_levels.update(data["grid_levels"])
        self.grid_labels.update(data["grid_labels"])
        self.failed.update(data.get("failed", ()))

    def skipped(self, label: str, reason: str, level: str | None = None) -> None:
        self.skips.setdefault(label, Counter())[reason] += 1
        if level is not None:
            self.level_skips.setdefault((label, level), Counter())[reason] += 1

    def failures(self, label: str, level: str | None = None) -> int:
        """The label's suite tests that failed; with `level`, its grid cases of that backend level."""
        return sum(1 for node in self.failed if self.labels.get(node) == label
                   and (level is None or self.grid_levels.get(node) == level))

    def spanning(self, label: str) -> int:
        """Checks verified that belong to no case level (the server properties): the rest of
        `verified` once the per-level counts are taken, so that the summary adds up."""
        return self.verified[label] - sum(self.levels.get(label, Counter()).values())

    def level_counts(self, label: str) -> Counter[str]:
        """Backend level -> cases verified, for one label."""
        out: Counter[str] = Counter()
        for case_level, n in self.levels.get(label, Counter()).items():
            out[NEEDS.get(case_level, case_level)] += n
        return out

    def unverified_levels(self, label: str) -> list[str]:
        """The grid levels the label's backend declares and verified no case of — asked only
        when the case grid ran for it (a session that deselected the grid chose fewer levels)."""
        if label not in self.grid_labels:
            return []
        counts = self.level_counts(label)
        return [lv for lv in GRID_LEVELS if lv in self.declared.get(label, ()) and not counts[lv]]


TALLIES: list[Tally] = []  # one per configured session (a stack: pytester nests sessions)


def tally() -> Tally | None:
    """The running session's tally (None outside a pytest session with this plugin)."""
    return TALLIES[-1] if TALLIES else None


def record_verified(label: str, case=None) -> None:
    """One case (a lrkv.verify.case.Case, or None for a check spanning levels) met the rule."""
    t = tally()
    if t is None:
        return
    t.verified[label] += 1
    if case is not None:
        from ..verify.features import case_features

        t.levels.setdefault(label, Counter())[case.level] += 1
        t.features.setdefault(label, {}).setdefault(case.level, set()).update(case_features(case))


def record_declared(label: str, levels) -> None:
    t = tally()
    if t is not None:
        t.declared[label] = frozenset(levels)


def record_unavailable(label: str, why: str) -> None:
    t = tally()
    if t is not None:
        t.unavailable[label] = why
