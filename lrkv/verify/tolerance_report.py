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
import tempfile
from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import resources
from pathlib import Path

import torch

from .. import __version__
from ..checks import parse_json
from .metrics import parse_float
from .options.fp8 import COMPUTE_KEY
from .options.paged import LEVELS as PAGED_LEVELS

SCHEMA = "lrkv.tolerance-report/1"
STATUSES = ("pass", "fail", "error", "skip", "xfail")
MARKDOWN_MAX_ROWS = 40  # rows per Markdown table; a PR comment must stay well under 65,536 chars
MARKDOWN_WHERE_CHARS = 600  # the failing cells of each output (cells.py): sequences, heads, what they share
MARKDOWN_REASON_CHARS = 400  # a failure's reason names each failing output's worst element: out and lse both fit


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


def build_report(records: list[dict], policy, backends: list[dict], *, selection, grid: str | None = None,
                 argv: list[str] | None = None, seconds: float | None = None, complete: bool = True,
                 shard: dict | None = None) -> dict:
    """The report of a run: `selection` (a selection.Selection) says which cases it was asked to
    verify (the gate rebuilds them); `grid` is its label for people (default: the grid's name);
    `shard`: the part of the selection a `--shard I/N` run made (shards.py; absent otherwise)."""
    return ({} if shard is None else {"shard": shard}) | {
        "schema": SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "suite_version": __version__,
        "git": git_info(),
        "environment": environment(),
        "command": argv or [],
        "grid": grid or selection.grid,
        "selection": selection.to_dict(),
        "seconds": seconds,
        "complete": complete,
        "interrupted": not complete,
        "policy": policy.to_dict(),
        "backends": backends,
        "summary": summarize(records),
        "coverage": report_coverage(records, policy, backends),
        "properties": property_table(records),
        "records": records,
    }


def property_table(records: list[dict]) -> dict:
    """The server properties per backend (server_properties.py): how often each ran and held."""
    from .server_properties import table

    return table(records)


def report_coverage(records: list[dict], policy, backends: list[dict]) -> dict:
    """The coverage table of every backend and level (coverage.py), from the records as judged."""
    from .coverage import coverage

    roles = [b["name"] for b in backends if b.get("role") == "baseline"]
    cov = coverage(((r, r["status"]) for r in records), policy.coverage, roles)
    for info in backends:  # a server layout's coverage names it: the table is per layout
        for lv, table in cov.get(info["name"], {}).items():
            if "cache_layout" in info and lv in PAGED_LEVELS:
                table["cache_layout"] = info["cache_layout"]
    return cov


def level_label(level: str, table: dict) -> str:
    """'kernel-paged', or 'kernel-paged [vllm-blocks]' for a backend handed a server layout."""
    return level + (f" [{table['cache_layout']}]" if table.get("cache_layout") else "")


@dataclass(frozen=True)
class Verification:
    """What a set of records verified (DESIGN §7: a run that verified nothing is never green)."""

    failed: bool  # some record is fail or error
    empty: dict[str, str]  # backend -> why it verified no case
    unavailable: frozenset[str]  # backends that were unavailable here (a toolchain is missing)
    independent: tuple[str, ...]  # non-baseline backends with at least one verified case

    @property
    def nothing_verified(self) -> bool:
        return bool(self.empty) or not self.independent

    def message(self) -> str:
        parts = [f"{b}: {why}" for b, why in self.empty.items()]
        if not self.independent and not self.empty:
            parts.append("only baseline paths ran (reference, materialized and eager pass by construction); "
                         "name a backend to verify with --backend")
        return "nothing verified: " + "; ".join(parts) if parts else ""


def _why_empty(recs: list[dict]) -> str:
    if not recs:
        return "no case selected for it"
    reasons = Counter(r["reason"].split(";")[0][:120] for r in recs if r["status"] in ("skip", "error"))
    counts = Counter(r["status"] for r in recs)
    top = "; ".join(f"{n}× {why}" for why, n in reasons.most_common(2))
    return f"0 of {len(recs)} cases verified ({', '.join(f'{n} {s}' for s, n in counts.items())}){': ' + top if top else ''}"


def verification(records: list[dict], backends: list[dict]) -> Verification:
    """Recompute, from the records, which backends verified something."""
    by = {b["name"]: [] for b in backends}
    for r in records:
        by.setdefault(r["backend"], []).append(r)
    roles = {b["name"]: b.get("role", "verified") for b in backends}
    for r in records:
        roles.setdefault(r["backend"], r.get("role", "verified"))
    empty = {name: _why_empty(recs) for name, recs in by.items() if not any(r["status"] == "pass" for r in recs)}
    independent = tuple(n for n, recs in by.items()
                        if roles.get(n) != "baseline" and any(r["status"] == "pass" for r in recs))
    unavailable = frozenset(b["name"] for b in backends if not b.get("available", True))
    from .server_properties import failures

    failed = any(r["status"] in ("fail", "error") for r in records) or bool(failures(records))
    return Verification(failed, empty, unavailable, independent)


def schema(name: str = "report.schema.json") -> dict:
    return json.loads(resources.files("lrkv.verify").joinpath(name).read_text())


def validate_report(report: dict) -> None:
    """Raise jsonschema.ValidationError if the report does not follow the published schema."""
    import jsonschema

    jsonschema.validate(report, schema())


def validate_file(data: dict, path, schema_name: str) -> None:
    """Validate a loaded report/baseline; a violation is a ValueError naming the file and the field."""
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema(schema_name))
    error = jsonschema.exceptions.best_match(validator.iter_errors(data))
    if error is not None:
        where = "/".join(str(p) for p in error.absolute_path) or "(top level)"
        raise ValueError(f"{path}: field {where}: {error.message[:300]}")


MAX_JSON_BYTES = 256 << 20  # a report or baseline file; the default grid's report is ~3 MiB


def read_json(path) -> dict:
    """A JSON file, with a ValueError naming it when it is missing, malformed or larger than
    MAX_JSON_BYTES (read no further: `lrkv gate /dev/zero` must not read until memory runs out)."""
    path = Path(path)
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_JSON_BYTES + 1)
        if len(raw) > MAX_JSON_BYTES:
            raise ValueError(f"{path}: larger than {MAX_JSON_BYTES >> 20} MiB, the limit for a report or baseline "
                             "(a default-grid report is a few MiB)")
        text = raw.decode("utf-8")
    except FileNotFoundError:
        raise ValueError(f"{path}: no such file") from None
    except (IsADirectoryError, PermissionError, UnicodeDecodeError) as e:
        raise ValueError(f"{path}: cannot read: {e}") from None
    try:
        data = parse_json(path, text)  # too deeply nested: ValueError naming the file
    except json.JSONDecodeError as e:
        raise ValueError(f"{path}: not valid JSON: {e}") from None
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a JSON object, got {type(data).__name__}")
    return data


def load_report(path: str | Path) -> dict:
    data = read_json(path)
    if data.get("schema") != SCHEMA:
        raise ValueError(f"{path}: field schema: not a tolerance report ({data.get('schema')!r}, expected {SCHEMA!r})")
    validate_file(data, path, "report.schema.json")
    return data


def umask() -> int:
    """The process's umask (read by setting it and putting it back at once)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def write_atomic(path: str | Path, text: str) -> Path:
    """Write text to path through a temporary file and a rename: never a half-written file.
    The file gets the mode a plain open() gives it — an existing file's own, else 0o666 less
    the umask — not mkstemp's 0600 (a baseline or report others in the group read)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        mode = path.stat().st_mode & 0o7777
    except FileNotFoundError:
        mode = 0o666 & ~umask()
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            os.fchmod(f.fileno(), mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def report_paths(out_dir: str | Path) -> tuple[Path, Path]:
    out = Path(out_dir)
    return out / "report.json", out / "report.md"


def clear_report(out_dir: str | Path) -> None:
    """Remove a previous run's report, so that a run that dies leaves no stale green report."""
    for p in report_paths(out_dir):
        p.unlink(missing_ok=True)


def write_report(report: dict, out_dir: str | Path) -> tuple[Path, Path]:
    jpath, mpath = report_paths(out_dir)
    write_atomic(mpath, render_markdown(report))
    write_atomic(jpath, json.dumps(report, indent=1, allow_nan=False) + "\n")  # last: its presence means done
    return jpath, mpath


# ----------------------------------------------------------------------------- Markdown
def _names(table: dict, status: str) -> list[str]:
    return [n for n, e in table["features"].items() if e["status"] == status]


def coverage_markdown(cov: dict) -> list[str]:
    """A compact coverage table: per backend and level, covered/of and the features left out."""
    if not cov:
        return []
    rows = []
    for b, levels in cov.items():
        for lv, t in levels.items():
            unc = _names(t, "uncovered")
            rows.append([b + ("" if t.get("required", True) else " (baseline path)"), level_label(lv, t),
                         f"{t['covered']}/{t['of']}",
                         ", ".join(unc) or "—", ", ".join(_names(t, "not supported")) or "—",
                         ", ".join(_names(t, "optional")) or "—"])
    lines = ["", "### Coverage", "",
             "_A feature is covered when a passing record (a twin included) exercises it; an uncovered "
             "one blocks the gate (UNCOVERED)._", ""]
    lines += _table(["backend", "level", "covered", "uncovered", "not supported by the backend", "optional (policy)"],
                    rows, limit=4 * MARKDOWN_MAX_ROWS)
    why = [(b, lv, n, e.get("reasons", [])) for b, levels in cov.items() for lv, t in levels.items()
           for n, e in t["features"].items() if e["status"] == "uncovered"]
    if why:
        lines += ["", f"<details><summary>Why each uncovered feature was not exercised ({len(why)})</summary>", ""]
        lines += [f"- {b} · {lv} · **{n}**: {'; '.join(rs) or 'no record carries it'}"
                  for b, lv, n, rs in why[:MARKDOWN_MAX_ROWS]] + ["</details>"]
    return lines



def properties_markdown(props: dict) -> list[str]:
    """The per-backend table of server properties (held/ran, required, the first failure)."""
    if not props:
        return []
    rows = [[b, name, f"{t['held']}/{t['ran']}", "yes" if t["required"] else "recorded",
             "✅" if t["ran"] and not t["failed"] else ("—" if not t["ran"] else "❌"), t["first"] or ""]
            for b, table in props.items() for name, t in table.items()]
    return ["", "### Server properties (same buffers, outputs written, inputs untouched, determinism, batch "
            "invariance)", ""] + _table(["backend", "property", "held/ran", "required", "", "first failure"], rows)


def quantization_markdown(records: list[dict]) -> list[str]:
    """One row per fp8 case: what storing its cache in fp8 costs (quantization_cost.py), not gated."""
    seen: dict[str, dict] = {}
    for r in records:
        if r.get("quantization_cost") and r["id"] not in seen:
            seen[r["id"]] = r
    if not seen:
        return []
    rows = [[f"`{rid}`", r["shapes"].get("cache", ""), r["dtype"], (r.get("case") or {}).get(COMPUTE_KEY) or "—",
             _g(r["quantization_cost"]["max_abs"]), _g(r["quantization_cost"]["mean_abs"]),
             _g(r["quantization_cost"]["sqnr_db"])] for rid, r in seen.items()]
    return ["", f"<details><summary>Quantization cost of the fp8 cases ({len(rows)}): recorded, not gated — the "
            "dequantize-then-attend output at τ (without a case's fp8 compute roundings) against the float64 "
            "oracle on the cache before quantization</summary>", ""] + \
        _table(["case", "cache", "τ", "fp8 compute", "max abs", "mean abs", "SQNR dB"], rows) + ["</details>"]


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


def headline(report: dict) -> str:
    """The report's verdict in one line: ❌ failures, ⚠️ nothing verified / incomplete, ✅ otherwise."""
    recs = report["records"]
    tot = summarize(recs)["total"]
    counts = (f"{tot['pass']} pass · {tot['fail']} fail · {tot['error']} error · {tot['skip']} skip · "
              f"{tot['xfail']} xfail")
    ver = verification(recs, report["backends"])
    if not report.get("complete", True):
        return f"⚠️ INCOMPLETE (interrupted run — the gate refuses it) · {counts}"
    if "shard" in report:
        s = report["shard"]
        return f"⚠️ SHARD {s['index']}/{s['count']} (one part of a run: `lrkv merge` its shards; the gate refuses it alone) · {counts}"
    if ver.failed:
        return f"❌ {counts}"
    if ver.nothing_verified:
        return f"⚠️ {ver.message()} · {counts}"
    return f"✅ {counts}"


NO_COMMIT = "none (no git commit)"  # made outside a git repository, or before its first commit; the gate says the same


def _clip(text: str, n: int) -> str:
    return text if len(text) <= n else text[:n - 1] + "…"


def render_markdown(report: dict) -> str:
    from .cells import where_lines

    recs = report["records"]
    env, git = report["environment"], report["git"]
    commit = (git["commit"][:12] if git["commit"] else NO_COMMIT) + (" (dirty)" if git.get("dirty") else "")
    policy = report["policy"]
    lines = [
        f"## LRKV tolerance report — {headline(report)}",
        "",
        f"suite {report['suite_version']} · commit `{commit}` · torch {env['torch']} · triton {env['triton']} · "
        f"{env['device']}{' · TRITON_INTERPRET' if env['interpreter'] else ''} · grid `{report['grid']}` · "
        f"policy `{policy['source']}` (sha256 `{policy.get('sha256', '')[:12]}`)"
        + (f" · merged from {report['merged']['count']} shards" if "merged" in report else ""),
        "",
    ]
    rows = []
    roles = {b["name"]: b.get("role", "verified") for b in report["backends"]}
    devices = {b["name"]: b["device"] for b in report["backends"] if b.get("device")}
    for b, counts in summarize(recs)["by_backend"].items():
        mine = [r for r in recs if r["backend"] == b and r["ratio"] is not None and r["status"] != "xfail"]
        worst = max(mine, key=lambda r: parse_float(r["ratio"]), default=None)
        secs = sum(r["seconds"] for r in recs if r["backend"] == b)
        label = f"{b} (baseline path)" if roles.get(b) == "baseline" else b
        label += f" · {devices[b]}" if b in devices else ""
        rows.append([label, counts["pass"], counts["fail"], counts["error"], counts["skip"], counts["xfail"],
                     "—" if worst is None else f"{_g(worst['ratio'])} ({worst['id']})", f"{secs:.1f}s"])
    lines += _table(["backend", "pass", "fail", "error", "skip", "xfail", "worst max|err|/bound", "time"], rows)
    if any(v == "baseline" for v in roles.values()):
        lines += ["", "_Baseline paths are the oracle's own algorithms at lower precision: they pass by "
                      "construction and do not count as verified backends._"]
    failing = [r for r in recs if r["status"] in ("fail", "error")]
    if failing:
        lines += ["", f"### Failures and errors ({len(failing)})", ""]
        lines += _table(["backend", "case", "max abs err", "bound", "×bound", "where it fails", "reason"],
                        [[r["backend"], f"`{r['id']}`", _g((r["metrics"] or {}).get("max_abs")),
                          _g((r["bound"] or {}).get("max_abs")), _g(r["ratio"]),
                          _clip(" · ".join(where_lines(r)), MARKDOWN_WHERE_CHARS) or "—",
                          r["reason"][:MARKDOWN_REASON_CHARS]] for r in failing])
        lines += ["", "<details><summary>Replay a failing case</summary>", "", "```sh"]
        lines += [r["repro"] for r in failing[:10]] + ["```", "</details>"]
    xfail = [r for r in recs if r["status"] == "xfail"]
    if xfail:
        lines += ["", f"<details><summary>Expected differences ({len(xfail)}): recorded, not gated</summary>", ""]
        lines += _table(["backend", "case", "max abs err", "bound", "×bound"],
                        [[r["backend"], f"`{r['id']}`", _g(r["metrics"]["max_abs"]), _g(r["bound"]["max_abs"]),
                          _g(r["ratio"])] for r in xfail])
        lines += ["</details>"]
    lines += coverage_markdown(report.get("coverage") or {})
    lines += properties_markdown(report.get("properties") or {})
    lines += quantization_markdown(recs)
    skipped = [r for r in recs if r["status"] == "skip"]
    if skipped:
        reasons = Counter(f"{r['backend']}: {r['reason']}" for r in skipped)
        lines += ["", f"<details><summary>Skipped ({len(skipped)})</summary>", ""]
        lines += [f"- {n}× {why}" for why, n in reasons.most_common(MARKDOWN_MAX_ROWS)] + ["</details>"]
    return "\n".join(lines) + "\n"
