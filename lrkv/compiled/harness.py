"""The one place `lrkv.compiled` touches the verification harness (DESIGN §6, §7).

Export verification uses the harness as `lrkv verify` does: `runner.run` (inputs drawn and
rounded, float64 reference, materialized baseline, the tolerance rule, the mpmath oracle
on tiny float64 kernel cases), the policy `lrkv verify` uses (the packaged one, or the built-in
defaults), `report.build_report` and the gate's classes. Export adds one condition of its
own: a release needs every record to pass (or be an expected difference) and at least one
pass — a grid that the engine skipped entirely verifies nothing.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..verify import gate as gate_mod
from ..verify.case import Case
from ..verify.metrics import parse_float
from ..verify.tolerance_report import build_report, render_markdown, summarize
from ..verify.runner import backend_info, run
from ..verify.tolerance import Policy, load_policy
from .progress import say

EMPTY_BASELINE = {"entries": {}}  # a fresh engine has no accepted history: nothing can regress


def verify_cases(backend, cases: list[Case], *, grid: str, policy_path: str | Policy | None = None,
                 argv: list[str] | None = None) -> dict:
    """Run `cases` through `backend` with the harness and return the tolerance report.

    policy_path: a tolerance TOML or a Policy (a re-check uses the one recorded in the
    report); None means what `lrkv verify` uses (the packaged policy, with the project's
    lrkv.toml / [tool.lrkv.policy] override)."""
    policy = policy_path if isinstance(policy_path, Policy) else load_policy(policy_path)
    total = len(cases)
    done = [0]

    def on_step(what: str) -> None:
        done[0] += 1
        say(f"verified {done[0]}/{total}: {what}")

    records = run(cases, [(backend.name, backend)], policy, on_step=on_step)
    return build_report(records, policy, [backend_info(backend, backend.name)], grid=grid, argv=argv)


def worst_ratio(report: dict) -> float:
    """max|err| / bound over every judged output (out or y, and lse) of the gated records."""
    ratios = []
    for r in report["records"]:
        if r["status"] == "xfail":
            continue  # an expected difference is recorded, not gated
        for ev in (r.get("outputs") or {}).values():
            bound = parse_float(ev["bound"]["max_abs"])
            if bound > 0:
                ratios.append(parse_float(ev["metrics"]["max_abs"]) / bound)
    return max(ratios, default=0.0)


def gate(report: dict) -> tuple[int, str]:
    """(exit code, one-line verdict). 0 only if the harness gate passes AND every record passed;
    4 (DESIGN §7: nothing was verified) when no case passed and none failed — all skipped."""
    entries = gate_mod.classify(report, EMPTY_BASELINE)
    code = gate_mod.exit_code(entries)
    t = report["summary"]["total"]
    if t["skip"] or t["pass"] == 0:
        code = code or 1  # an engine release must not rest on skipped cases
    if t["pass"] == 0 and not t.get("fail") and not t.get("error"):
        code = 4
    counts = ", ".join(f"{v} {k}" for k, v in t.items() if v or k in ("pass", "fail"))
    verdict = "PASS" if code == 0 else "NOTHING VERIFIED" if code == 4 else "FAIL"
    return code, f"{verdict}: {counts} (worst max|err| / bound = {worst_ratio(report):.3g})"


def write_report(report: dict, json_path: Path, md_path: Path | None = None) -> None:
    # JSON-safe already: the harness writes non-finite floats as strings.
    json_path.write_text(json.dumps(report, indent=1, allow_nan=False) + "\n")
    if md_path is not None:
        md_path.write_text(render_markdown(report))


__all__ = ["verify_cases", "gate", "write_report", "worst_ratio", "summarize"]
