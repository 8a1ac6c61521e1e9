"""The tolerance report (DESIGN §7): JSON with a published schema, and a Markdown summary.

The report is self-describing: the suite version, the git commit (and whether the tree was
dirty), the environment, the tolerance policy actually applied, the backends and one record
per (case, backend) with the metrics, err_base ("baseline_metrics"), the bound, the status
and a one-line command that replays the case.
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
from collections import Counter
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path

import torch

from .. import __version__
from .metrics import parse_float

SCHEMA = "lrkv.tolerance-report/1"
STATUSES = ("pass", "fail", "error", "skip", "xfail")
MARKDOWN_MAX_ROWS = 40  # rows per Markdown table; a PR comment must stay well under 65,536 chars


def _git(*args: str) -> str | None:
    try:
        return subprocess.run(["git", *args], capture_output=True, text=True, timeout=10,
                              check=True).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None


def git_info() -> dict:
    commit = _git("rev-parse", "HEAD")
    status = _git("status", "--porcelain", "--untracked-files=no") if commit else None
    return {"commit": commit, "dirty": None if status is None else bool(status)}


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment() -> dict:
    try:
        import triton
        triton_version = triton.__version__
    except Exception:  # noqa: BLE001 — absent or broken both mean "no triton"
        triton_version = None
    cuda = torch.cuda.is_available()
    return {
        "python": platform.python_version(), "torch": torch.__version__, "triton": triton_version,
        "device": torch.cuda.get_device_name(0) if cuda else f"cpu: {_cpu_name()}",
        "cuda": torch.version.cuda if cuda else None,
        "interpreter": os.environ.get("TRITON_INTERPRET") == "1",
        "platform": platform.platform(), "cpu_count": os.cpu_count(),
    }


def summarize(records: list[dict]) -> dict:
    total = Counter(r["status"] for r in records)
    per = {}
    for r in records:
        per.setdefault(r["backend"], Counter())[r["status"]] += 1
    return {"total": {s: total.get(s, 0) for s in STATUSES},
            "by_backend": {b: {s: c.get(s, 0) for s in STATUSES} for b, c in per.items()}}


def build_report(records: list[dict], policy, backends: list[dict], *, grid: str, argv: list[str] | None = None,
                 seconds: float | None = None) -> dict:
    return {
        "schema": SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "suite_version": __version__,
        "git": git_info(),
        "environment": environment(),
        "command": argv or [],
        "grid": grid,
        "seconds": seconds,
        "policy": policy.to_dict(),
        "backends": backends,
        "summary": summarize(records),
        "records": records,
    }


def schema() -> dict:
    return json.loads(resources.files("lrkv.verify").joinpath("report.schema.json").read_text())


def validate_report(report: dict) -> None:
    """Raise jsonschema.ValidationError if the report does not follow the published schema."""
    import jsonschema

    jsonschema.validate(report, schema())


def load_report(path: str | Path) -> dict:
    data = json.loads(Path(path).read_text())
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: not a tolerance report (schema {data.get('schema')!r}, expected {SCHEMA!r})")
    return data


def write_report(report: dict, out_dir: str | Path) -> tuple[Path, Path]:
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    jpath, mpath = out / "report.json", out / "report.md"
    jpath.write_text(json.dumps(report, indent=1, allow_nan=False) + "\n")
    mpath.write_text(render_markdown(report))
    return jpath, mpath


# ----------------------------------------------------------------------------- Markdown
def _g(x) -> str:
    v = parse_float(x) if x is not None else None
    return "—" if v is None else f"{v:.3g}"


def _row(cells) -> str:
    return "| " + " | ".join(str(c).replace("|", "\\|").replace("\n", " ") for c in cells) + " |"


def _table(header: list[str], rows: list[list], limit: int = MARKDOWN_MAX_ROWS) -> list[str]:
    lines = [_row(header), _row(["---"] * len(header))]
    lines += [_row(r) for r in rows[:limit]]
    if len(rows) > limit:
        lines.append(f"\n… {len(rows) - limit} more in report.json")
    return lines


def render_markdown(report: dict) -> str:
    recs = report["records"]
    tot = report["summary"]["total"]
    bad = tot["fail"] + tot["error"]
    env, git = report["environment"], report["git"]
    commit = (git["commit"] or "unknown")[:12] + (" (dirty)" if git.get("dirty") else "")
    lines = [
        f"## LRKV tolerance report — {'❌' if bad else '✅'} {tot['pass']} pass · {tot['fail']} fail · "
        f"{tot['error']} error · {tot['skip']} skip · {tot['xfail']} xfail",
        "",
        f"suite {report['suite_version']} · commit `{commit}` · torch {env['torch']} · triton {env['triton']} · "
        f"{env['device']}{' · TRITON_INTERPRET' if env['interpreter'] else ''} · grid `{report['grid']}` · "
        f"policy `{report['policy']['source']}`",
        "",
    ]
    rows = []
    for b, counts in report["summary"]["by_backend"].items():
        mine = [r for r in recs if r["backend"] == b and r["ratio"] is not None and r["status"] != "xfail"]
        worst = max(mine, key=lambda r: parse_float(r["ratio"]), default=None)
        secs = sum(r["seconds"] for r in recs if r["backend"] == b)
        rows.append([b, counts["pass"], counts["fail"], counts["error"], counts["skip"], counts["xfail"],
                     "—" if worst is None else f"{_g(worst['ratio'])} ({worst['id']})", f"{secs:.1f}s"])
    lines += _table(["backend", "pass", "fail", "error", "skip", "xfail", "worst max|err|/bound", "time"], rows)
    failing = [r for r in recs if r["status"] in ("fail", "error")]
    if failing:
        lines += ["", f"### Failures and errors ({len(failing)})", ""]
        lines += _table(["backend", "case", "max abs err", "bound", "×bound", "reason"],
                        [[r["backend"], f"`{r['id']}`", _g((r["metrics"] or {}).get("max_abs")),
                          _g((r["bound"] or {}).get("max_abs")), _g(r["ratio"]), r["reason"][:200]]
                         for r in failing])
        lines += ["", "<details><summary>Replay a failing case</summary>", "", "```sh"]
        lines += [r["repro"] for r in failing[:10]] + ["```", "</details>"]
    xfail = [r for r in recs if r["status"] == "xfail"]
    if xfail:
        lines += ["", f"<details><summary>Expected differences ({len(xfail)}): recorded, not gated</summary>", ""]
        lines += _table(["backend", "case", "max abs err", "bound", "×bound"],
                        [[r["backend"], f"`{r['id']}`", _g(r["metrics"]["max_abs"]), _g(r["bound"]["max_abs"]),
                          _g(r["ratio"])] for r in xfail])
        lines += ["</details>"]
    skipped = [r for r in recs if r["status"] == "skip"]
    if skipped:
        reasons = Counter(f"{r['backend']}: {r['reason']}" for r in skipped)
        lines += ["", f"<details><summary>Skipped ({len(skipped)})</summary>", ""]
        lines += [f"- {n}× {why}" for why, n in reasons.most_common(MARKDOWN_MAX_ROWS)] + ["</details>"]
    return "\n".join(lines) + "\n"
