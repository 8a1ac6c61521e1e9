"""The proof report: JSON artifact, Markdown summary, rich table (DESIGN §1, item 2).

JSON (`schema: "lrkv.proofs-report/2"`) carries every record with its evidence; the
Markdown is written for a reader who never opens the paper — what holds, what fails,
which printed numbers only agree under an assumption, which do not agree at all — and
`validate_report` checks a report against its own schema (structure and arithmetic).
"""

from __future__ import annotations

import json
import platform
import subprocess
import sys
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path

from .record import ERROR, REQUIRED_EVIDENCE, STATUSES
from .registry import RunResult

SCHEMA = "lrkv.proofs-report/2"  # /2: the statuses consistent and unverifiable

# The numbered claim groups (1–10) of the proof suite, as section labels.
ITEMS = {
    1: "Score and value associativity (Eqs. 6–7)",
    2: "One softmax, denominator sqrt(d_h)",
    3: "RoPE and the factored cache",
    4: "QK-RMSNorm on the factored key",
    5: "Cache, parameter and decode-cost formulas (Eqs. 8–10)",
    6: "Endpoints of the rank knob and what the factorisation contains",
    7: "Gradients of the factors",
    8: "Split-K online softmax",
    9: "MLA absorption and head-diversity geometry",
    10: "The paper's printed numbers and the sources' claims",
}

STATUS_MEANING = {
    "proved": "the claim holds: a symbolic residual simplified to zero, or every printed number was reproduced",
    "refuted": "the claim is false: a counterexample is attached",
    "reconciled": "printed numbers disagree as stated but agree exactly under one named assumption",
    "consistent": "a printed number lies inside a bound the formulas derive, but nothing reproduces its exact value",
    "unverifiable": "the sources lack what a check needs (a figure, the cells); what they do show is attached",
    "inconsistent": "printed numbers disagree and no searched assumption makes them agree",
}

_PROOF_SCHEMA = {
    "type": "object",
    "required": ["name", "item", "claim", "source", "status", "expected", "ok", "summary", "assumption",
                 "evidence", "elapsed_s", "error"],
    "additionalProperties": False,
    "properties": {
        "name": {"type": "string", "pattern": "^[a-z0-9_]+$"},
        "item": {"type": "integer", "minimum": 1, "maximum": 10},
        "claim": {"type": "string", "minLength": 1},
        "source": {"type": "string", "minLength": 1},
        "status": {"enum": [*STATUSES, ERROR]},
        "expected": {"enum": list(STATUSES)},
        "ok": {"type": "boolean"},
        "summary": {"type": ["string", "null"]},
        "assumption": {"type": ["string", "null"]},
        "evidence": {"type": ["object", "null"]},
        "elapsed_s": {"type": "number", "minimum": 0},
        "error": {"type": ["string", "null"]},
    },
}

REPORT_SCHEMA = {
    "$schema": "https://json-schema.org/draft/2020-12/schema",
    "type": "object",
    "required": ["schema", "created", "suite_version", "environment", "git", "selection", "elapsed_s",
                 "summary", "ok", "proofs"],
    "additionalProperties": False,
    "properties": {
        "schema": {"const": SCHEMA},
        "created": {"type": "string"},
        "suite_version": {"type": "string"},
        "environment": {"type": "object", "required": ["python", "sympy", "platform"]},
        "git": {"type": "object", "required": ["commit", "dirty"]},
        "selection": {"type": ["array", "null"], "items": {"type": "string"}},
        "elapsed_s": {"type": "number", "minimum": 0},
        "summary": {
            "type": "object",
            "required": ["total", "ok", "mismatched", "errors", "by_status"],
            "properties": {
                "total": {"type": "integer", "minimum": 0},
                "ok": {"type": "integer", "minimum": 0},
                "mismatched": {"type": "integer", "minimum": 0},
                "errors": {"type": "integer", "minimum": 0},
                "by_status": {"type": "object", "additionalProperties": {"type": "integer", "minimum": 0}},
            },
        },
        "ok": {"type": "boolean"},
        "proofs": {"type": "array", "items": _PROOF_SCHEMA},
    },
}


# ----------------------------------------------------------------------------- building
def _git() -> dict:
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=5).stdout.strip() or None
        dirty = bool(subprocess.run(["git", "status", "--porcelain"], cwd=root, capture_output=True, text=True,
                                    timeout=5).stdout.strip()) if commit else None
    except (OSError, subprocess.SubprocessError):
        commit, dirty = None, None
    return {"commit": commit, "dirty": dirty}


def result_dict(r: RunResult) -> dict:
    p = r.proof
    return {
        "name": r.name, "item": r.item, "claim": r.claim, "source": r.source, "status": r.status,
        "expected": r.expected, "ok": r.ok, "summary": p.summary if p else None,
        "assumption": p.assumption if p else None, "evidence": p.evidence if p else None,
        "elapsed_s": round(r.elapsed_s, 4), "error": r.error,
    }


def build_report(results: list[RunResult], *, selection: list[str] | None, elapsed_s: float) -> dict:
    import sympy

    from lrkv import __version__

    by_status = Counter(r.status for r in results)
    n_ok = sum(r.ok for r in results)
    n_err = by_status.get(ERROR, 0)
    return {
        "schema": SCHEMA,
        "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "suite_version": __version__,
        "environment": {"python": sys.version.split()[0], "sympy": sympy.__version__, "platform": platform.platform()},
        "git": _git(),
        "selection": selection,
        "elapsed_s": round(elapsed_s, 3),
        "summary": {"total": len(results), "ok": n_ok, "mismatched": len(results) - n_ok - n_err,
                    "errors": n_err, "by_status": dict(sorted(by_status.items()))},
        "ok": n_ok == len(results),
        "proofs": [result_dict(r) for r in results],
    }


def validate_report(report: dict) -> list[str]:
    """Problems with a report (empty list = valid): JSON Schema, then the arithmetic it implies."""
    problems: list[str] = []
    try:
        import jsonschema

        v = jsonschema.Draft202012Validator(REPORT_SCHEMA)
        problems += [f"{'/'.join(map(str, e.path)) or '<root>'}: {e.message}" for e in v.iter_errors(report)]
    except ImportError:  # jsonschema is a declared dependency; keep the semantic checks regardless
        for key in REPORT_SCHEMA["required"]:
            if key not in report:
                problems.append(f"<root>: missing {key!r}")
    if problems:
        return problems
    proofs = report["proofs"]
    names = [p["name"] for p in proofs]
    if len(set(names)) != len(names):
        problems.append("proofs: duplicate names")
    for p in proofs:
        if p["ok"] != (p["status"] == p["expected"]):
            problems.append(f"{p['name']}: ok={p['ok']} but status {p['status']} vs expected {p['expected']}")
        if (p["status"] == ERROR) != (p["error"] is not None):
            problems.append(f"{p['name']}: error field inconsistent with status {p['status']}")
        if p["status"] == "reconciled" and not p["assumption"]:
            problems.append(f"{p['name']}: reconciled without an assumption")
        key = REQUIRED_EVIDENCE.get(p["status"])
        if key and not (p["evidence"] or {}).get(key):
            problems.append(f"{p['name']}: {p['status']} without evidence[{key!r}]")
    s = report["summary"]
    counts = Counter(p["status"] for p in proofs)
    if s["total"] != len(proofs) or s["ok"] != sum(p["ok"] for p in proofs) or dict(counts) != s["by_status"]:
        problems.append("summary: counts do not match the proofs")
    if s["errors"] != counts.get(ERROR, 0) or s["mismatched"] != s["total"] - s["ok"] - s["errors"]:
        problems.append("summary: errors/mismatched do not match the proofs")
    if report["ok"] != (s["ok"] == s["total"]):
        problems.append("ok: does not match the summary")
    return problems


# ----------------------------------------------------------------------------- Markdown
def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def _evidence_block(evidence: dict | None, limit: int = 500) -> str:
    """Compact evidence for the Markdown; the JSON report keeps all of it."""
    if not evidence:
        return ""
    text = json.dumps(evidence, ensure_ascii=False, separators=(", ", ": "))
    if len(text) > limit:
        text = text[:limit] + f" … ({len(text) - limit} more characters in the JSON report)"
    return f"<details><summary>evidence</summary>\n\n```json\n{text}\n```\n\n</details>\n"


def to_markdown(report: dict) -> str:
    proofs = report["proofs"]
    s = report["summary"]
    by = s["by_status"]
    head = ", ".join(f"{by.get(k, 0)} {k}" for k in (*STATUSES, ERROR) if by.get(k, 0))
    verdict = ("every status matches the suite's expectation" if report["ok"]
               else f"**{s['mismatched']} status mismatch(es), {s['errors']} error(s)** — the run fails")
    lines = [
        "# LRKV proof report",
        "",
        f"{s['total']} claims about Low-Rank Key-Value attention (arXiv 2601.11471v3 and its v1) and MLRA "
        f"(arXiv 2603.02188) checked with sympy and exact "
        f"arithmetic: {head}; {verdict}.",
        "",
        "LRKV gives every attention head the key/value projection W_h = W_shared + U_h B_h^T: one dense projection "
        "shared by all heads plus a rank-r private correction. The cache stores the shared features x W_shared "
        "once and each head's r-wide latent x U_h, and decode contracts them without rebuilding per-head keys "
        "(Eqs. 6–7). The claims below are the paper's algebra, the suite's own decode identities, the "
        "numbers printed in the paper's tables, and the claims of the two reviews, the v1 summary and the MLRA "
        "summary (docs/proofs.md maps each one to its proof).",
        "",
        "Statuses: " + "; ".join(f"**{k}** — {v}" for k, v in STATUS_MEANING.items()) + ".",
        "Symbolic proofs use general symbols (MatrixSymbols of symbolic size, symbolic angles) or small matrices "
        "whose every entry is a symbol; numbers are only used to exhibit a counterexample.",
        "",
    ]
    glance = ["## At a glance", ""]
    held = [p for p in proofs if p["status"] == "proved"]
    if held:
        per_item = Counter(p["item"] for p in held)
        glance.append(f"- **Holds ({len(held)}):** " + "; ".join(
            f"{ITEMS.get(i, i)} ({n})" for i, n in sorted(per_item.items())) + ".")
    for status, label, field in (("refuted", "Fails", "summary"), ("reconciled", "Agrees only if", "assumption"),
                                 ("consistent", "Within a bound, not reproduced", "summary"),
                                 ("unverifiable", "Cannot be checked from the sources", "summary"),
                                 ("inconsistent", "Does not agree", "summary")):
        group = [p for p in proofs if p["status"] == status]
        if group:
            glance.append(f"- **{label} ({len(group)}):**")
            for p in group:
                why = p[field]
                glance.append(f"  - `{p['name']}` — {p['claim']} *{why}*")
    lines += glance + [""]
    bad = [p for p in proofs if not p["ok"]]
    if bad:
        lines += ["## Failures of this run", "", "| name | status | expected | |", "|---|---|---|---|"]
        for p in bad:
            detail = (p["error"] or "").strip().splitlines()[-1:] if p["error"] else [p["summary"] or ""]
            lines.append(f"| `{p['name']}` | {p['status']} | {p['expected']} | {_md_escape(detail[0] if detail else '')} |")
        lines.append("")
    sections = [
        ("proved", "What holds", "Proved identities and reproduced numbers."),
        ("refuted", "What fails", "Claims that are false as stated, with the counterexample."),
        ("reconciled", "Printed numbers that agree only under an assumption",
         "The printed number is not what the stated configuration gives, but one named assumption reproduces it exactly."),
        ("consistent", "Printed numbers within a derived bound",
         "The printed number respects a bound the formulas derive (and would be flagged outside it), but no "
         "source reproduces its value: consistent with the model, not confirmed by it."),
        ("unverifiable", "Claims the sources cannot check",
         "What a check would need is not in the sources; the record says what is missing and what the sources show."),
        ("inconsistent", "Printed numbers that do not agree",
         "No searched assumption (rank, layers, batch, context, MB/MiB, fp32/bf16, rounding, denominator) reproduces them."),
    ]
    for status, title, blurb in sections:
        group = [p for p in proofs if p["status"] == status]
        if not group:
            continue
        lines += [f"## {title} ({len(group)})", "", blurb, ""]
        for item in sorted({p["item"] for p in group}):
            lines += [f"### {item}. {ITEMS.get(item, '')}", ""]
            for p in (q for q in group if q["item"] == item):
                mark = "" if p["ok"] else f" — **expected {p['expected']}**"
                lines += [f"**`{p['name']}`**{mark} — {p['claim']}", "",
                          f"- *Source:* {p['source']}",
                          f"- *Why:* {p['summary']}"]
                if p["assumption"]:
                    lines.append(f"- *Assumption:* {p['assumption']}")
                lines += ["", _evidence_block(p["evidence"])]
    errs = [p for p in proofs if p["status"] == ERROR]
    if errs:
        lines += [f"## Proofs that raised ({len(errs)})", ""]
        for p in errs:
            lines += [f"**`{p['name']}`** — {p['claim']}", "", "```", (p["error"] or "").strip(), "```", ""]
    lines += ["## All proofs", "", "| # | name | status | expected | source |", "|---|---|---|---|---|"]
    for p in proofs:
        flag = "" if p["ok"] else " ✗"
        lines.append(f"| {p['item']} | `{p['name']}` | {p['status']}{flag} | {p['expected']} | {_md_escape(p['source'])} |")
    git = report["git"]
    lines += ["", f"*lrkv {report['suite_version']}, sympy {report['environment']['sympy']}, "
              f"commit {(git['commit'] or 'unknown')[:12]}{' (dirty)' if git['dirty'] else ''}, "
              f"{report['elapsed_s']:.1f} s, {report['created']}.*", ""]
    return "\n".join(lines)


# ----------------------------------------------------------------------------- rich
def print_table(report: dict, console) -> None:
    from rich.table import Table

    colour = {"proved": "green", "refuted": "magenta", "reconciled": "yellow", "consistent": "blue",
              "unverifiable": "white", "inconsistent": "cyan", ERROR: "red"}
    table = Table(title="LRKV proofs", show_lines=False)
    table.add_column("#", justify="right")
    table.add_column("name", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("expected", no_wrap=True)
    table.add_column("source", overflow="fold")
    table.add_column("s", justify="right")
    for p in report["proofs"]:
        st = f"[{colour.get(p['status'], 'white')}]{p['status']}[/]"
        exp = p["expected"] if p["ok"] else f"[bold red]{p['expected']} ✗[/]"
        table.add_row(str(p["item"]), p["name"], st, exp, p["source"], f"{p['elapsed_s']:.2f}")
    console.print(table)
    s = report["summary"]
    style = "bold green" if report["ok"] else "bold red"
    console.print(f"[{style}]{s['ok']}/{s['total']} as expected[/] "
                  f"({', '.join(f'{v} {k}' for k, v in s['by_status'].items())}); {report['elapsed_s']:.1f} s")
