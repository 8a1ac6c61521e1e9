"""A typed view of a tolerance report (DESIGN §7) for users' own test suites."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path

FAILING = ("fail", "error")
VERIFIED = ("pass", "xfail")  # a case the backend was judged on and met its expectation


@dataclass(frozen=True)
class Report:
    """The report dict `lrkv verify` writes, with the questions a test asks of it."""

    data: dict

    @property
    def records(self) -> list[dict]:
        return list(self.data["records"])

    @property
    def counts(self) -> dict[str, int]:
        """Records per status (pass, fail, skip, error, xfail)."""
        c = Counter(r["status"] for r in self.data["records"])
        return {s: c.get(s, 0) for s in ("pass", "fail", "skip", "error", "xfail")}

    @property
    def failures(self) -> list[dict]:
        """The FAIL and ERROR records."""
        return [r for r in self.data["records"] if r["status"] in FAILING]

    @property
    def verified(self) -> int:
        """How many cases were judged and met their expectation."""
        return sum(1 for r in self.data["records"] if r["status"] in VERIFIED)

    @property
    def nothing_verified(self) -> str:
        """'' when every backend verified a case; else why not (DESIGN §7: never green)."""
        from ..verify.tolerance_report import verification

        return verification(self.data["records"], self.data.get("backends", [])).message()

    @property
    def ok(self) -> bool:
        """No FAIL or ERROR, and something verified: a run that verified nothing is not green."""
        return not self.failures and not self.nothing_verified

    def failure_message(self) -> str:
        """One block per failing case: status, backend and id, where (cells.py), the replay
        command, and the reason."""
        if not self.failures:
            return self.nothing_verified
        from ..verify.cells import failure_text

        lines = [f"{len(self.failures)} of {len(self.data['records'])} cases failed:"]
        lines += [failure_text(r) for r in self.failures]
        return "\n".join(lines)

    def write(self, out_dir: str | Path) -> tuple[Path, Path]:
        """Write report.json and report.md (the files `lrkv gate` reads)."""
        from ..verify.tolerance_report import write_report

        return write_report(self.data, out_dir)

    def __repr__(self) -> str:
        c = ", ".join(f"{n} {s}" for s, n in self.counts.items() if n)
        return f"<lrkv Report: {c or 'empty'}>"
