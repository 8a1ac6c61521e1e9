"""Rendering a result: the rich table for the terminal, Markdown for docs, and the headline.

One table per paper scale; columns (one row per family x backend at each B, T):
  time        median ms per decode step (one layer), over interleaved rounds
  pred ms     GPU Triton rows: the time the traffic model predicts (lrkv.bench.prediction)
  MB read     bytes the step must read: cache payload + weights (spec accounting)
  GB/s        MB read / time;  %copy: of the copy bandwidth measured in the run
  x MHA       time / MHA's time, the per-round median — the measured headline
  payload     the cache payload ratio the formulas predict (Eq. 9 for lrkv)
  target      PASS / MISS where a performance target applies (lrkv.bench.targets)
"""

from __future__ import annotations

from .result import BenchResult, BenchRow

HEADERS = ("family", "B", "T", "ms", "pred ms", "MB read", "GB/s", "%copy", "x MHA", "payload", "target")
XMHA = HEADERS.index("x MHA")  # the bold cell of an lrkv row
WARM = "*"  # marks a T whose bytes fit in the last-level cache: timed warm, not from memory


def _k(t: int) -> str:
    return f"{t // 1024}K" if t % 1024 == 0 else str(t)


def _f(x: float | None, fmt: str) -> str:
    return "" if x is None else format(x, fmt)


def _scale_title(result: BenchResult, scale: str) -> str:
    spec = next((r.spec for r in result.rows if r.scale == scale and r.family == "lrkv"), "")
    return f"{scale} ({spec})" if spec else scale


def cells(row: BenchRow, *, show_backend: bool = False) -> list[str]:
    """The table cells of one row (strings; skipped/error rows say why in the time column)."""
    name = row.family + (f" / {row.backend}" if show_backend else "")
    T = _k(row.seq_len) + (WARM if "fits in LLC" in row.note else "")
    head = [name, str(row.batch), T]
    if row.status != "ok":
        # a skipped reason is printed whole under the table (footnotes): a short cell keeps the columns readable
        width = 40 if row.status == "skipped" else 70
        return head + [f"{row.status}: {row.reason}"[:width], "", "", "", "", "", _f(row.payload_ratio, ".3f"), ""]
    return head + [
        _f(row.time_s * 1e3, ".3f"), _f(row.predicted_s * 1e3 if row.predicted_s else None, ".3f"),
        _f(row.bytes_total / 1e6, ".1f"), _f(row.bandwidth / 1e9, ".1f"),
        _f(row.bandwidth_frac * 100 if row.bandwidth_frac is not None else None, ".0f"),
        _f(row.vs_mha, ".3f"), _f(row.payload_ratio, ".3f"), row.target or "",
    ]


def caption(result: BenchResult) -> str:
    g = result.grid
    backends = ", ".join(g.get("backends", []))
    how = f"{g.get('device')} {g.get('dtype')}, backends {backends}"
    if g.get("formulation"):
        how += f", formulation {g['formulation']}"
    if g.get("rounds"):
        how += f", {g['rounds']} rounds"
    return f"{result.machine.label()} | {how} | {result.created}"


def _multi_backend(result: BenchResult) -> bool:
    return len({r.backend for r in result.rows}) > 1


def rich_tables(result: BenchResult) -> list:
    """One rich.table.Table per scale, a rule between shapes."""
    from rich.table import Table

    show_backend = _multi_backend(result)
    tables = []
    for scale in dict.fromkeys(r.scale for r in result.rows):
        table = Table(title=f"lrkv bench {_scale_title(result, scale)}: one decode step, one layer")
        for h in HEADERS:
            # ms holds a skipped/error row's reason: capped, so the numbers keep their width (reasons
            # are printed whole under the table)
            table.add_column(h, justify="left" if h == "family" else "right", no_wrap=True,
                             max_width=28 if h == "ms" else None)
        last = None
        for row in (r for r in result.rows if r.scale == scale):
            if last is not None and row.key != last:
                table.add_section()
            last = row.key
            c = cells(row, show_backend=show_backend)
            if row.family == "lrkv" and row.status == "ok":
                c[0], c[XMHA] = f"[bold]{c[0]}[/bold]", f"[bold]{c[XMHA]}[/bold]"
            style = {"PASS": "green", "MISS": "bold red"}.get(row.target or "")
            if style:
                c[-1] = f"[{style}]{c[-1]}[/{style}]"
            table.add_row(*c, style="dim" if row.status != "ok" else None)
        tables.append(table)
    return tables


def footnotes(result: BenchResult) -> list[str]:
    notes = [caption(result)]
    if any("fits in LLC" in r.note for r in result.rows):
        notes.append(f"T marked `{WARM}`: the step's bytes fit in the last-level cache, so it was timed warm "
                     "(repeated calls), not from DRAM")
    for scale in dict.fromkeys(r.scale for r in result.rows if r.family == "gqa-eq"):
        ratios = {r.family: r for r in result.rows if r.scale == scale and r.payload_ratio}
        if "gqa-eq" in ratios and "lrkv" in ratios:
            g = ratios["gqa-eq"]
            notes.append(f"gqa-eq at {scale} is {g.spec} (n_kv nearest LRKV's bytes): its cache is "
                         f"{g.payload_ratio / ratios['lrkv'].payload_ratio:.3f}x LRKV's")
    if any("interpreter" in r.note for r in result.rows):
        notes.append("rows run in Triton's CPU interpreter: the code path only, their times mean nothing")
    # the table cell cuts a reason short; each distinct one in full, once (a user backend's especially)
    skipped: dict[str, list[str]] = {}
    for r in result.rows:
        if r.status == "skipped" and f"{r.family} / {r.backend}" not in skipped.setdefault(r.reason, []):
            skipped[r.reason].append(f"{r.family} / {r.backend}")
    notes += [f"skipped ({', '.join(rows)}): {reason}" for reason, rows in skipped.items()]
    predicted = [r for r in result.rows if r.prediction]
    if predicted:
        notes.append("pred ms: the traffic model's bytes, streamed a tile per loop iteration by the programs the "
                     "compiled kernel fits per SM, at most the copy bandwidth, in whole waves (docs/kernels.md, "
                     "A predicted H200 time): "
                     + "; ".join(f"{r.backend} B={r.batch} T={_k(r.seq_len)}: " + (
                         r.prediction["why"] if "why" in r.prediction else
                         f"{r.prediction['bytes'] / 1e6:.0f} MB, {r.prediction['registers']} registers "
                         f"({r.prediction['registers_from']}), {r.prediction['blocks_per_sm']} x "
                         f"{r.prediction['num_warps']} warps/SM, {r.prediction['waves']} wave(s) of "
                         f"{r.prediction['programs']} programs") for r in predicted))
    graph = {r.note.split(";")[0] for r in result.rows if r.device == "cuda" and r.note}
    if graph:
        notes.append("GPU rows: " + ", ".join(sorted(graph)))
    return notes


def markdown_table(result: BenchResult, *, families: tuple[str, ...] | None = None) -> str:
    """The same tables in Markdown, with the machine line (for docs/bench.md, a README)."""
    show_backend = _multi_backend(result)
    lines = []
    for scale in dict.fromkeys(r.scale for r in result.rows):
        lines += [f"**{_scale_title(result, scale)}**", "", "| " + " | ".join(HEADERS) + " |",
                  "|" + "|".join("---" if i == 0 else "---:" for i in range(len(HEADERS))) + "|"]
        for row in (r for r in result.rows if r.scale == scale):
            if families and row.family not in families:
                continue
            c = cells(row, show_backend=show_backend)
            c[2] = c[2].replace(WARM, "\\" + WARM)  # a lone * must not start emphasis
            if row.family == "lrkv" and row.status == "ok":
                c[0], c[XMHA] = f"**{c[0]}**", f"**{c[XMHA]}**"
            lines.append("| " + " | ".join(c) + " |")
        lines.append("")
    return "\n".join(lines + [f"- {n}" for n in footnotes(result)])


def headline(result: BenchResult) -> list[str]:
    """Measured LRKV / MHA against the payload ratio, per scale and backend, and the targets."""
    out = []
    lrkv = [r for r in result.ok_rows() if r.family == "lrkv"]
    for scale in dict.fromkeys(r.scale for r in lrkv):
        for backend in dict.fromkeys(r.backend for r in lrkv if r.scale == scale):
            rs = [r for r in lrkv if r.scale == scale and r.backend == backend]
            parts = ", ".join(f"B={r.batch} T={_k(r.seq_len)}: {r.vs_mha:.2f}" for r in rs if r.vs_mha is not None)
            if not parts:
                continue  # no MHA row timed beside it
            out.append(f"LRKV/MHA measured ({scale}, {backend}, payload ratio {rs[0].payload_ratio:.3f}): {parts}")
    checked = result.targets()
    if checked:
        n_pass = sum(r.target == "PASS" for r in checked)
        out.append(f"targets: {n_pass}/{len(checked)} rows PASS")
        by_rule: dict[str, list[str]] = {}
        for r in checked:
            for c in r.checks:
                by_rule.setdefault(c["text"], []).append(c["verdict"])
        for text, verdicts in by_rule.items():
            judged = [v for v in verdicts if v != "SKIP"]
            skipped = f" ({len(verdicts) - len(judged)} not judged: no peer row)" if len(judged) < len(verdicts) else ""
            out.append(f"  {judged.count('PASS')}/{len(judged)} PASS — {text}{skipped}")
    bad = [r for r in result.rows if r.status == "error"]
    if bad:
        out.append(f"{len(bad)} row(s) failed: " + "; ".join(f"{r.family}/{r.backend} B={r.batch} T={r.seq_len}: "
                                                          f"{r.reason}" for r in bad[:3]))
    return out


def targets_markdown(result: BenchResult) -> str:
    """Every target check of the run, one line per (row, rule): what was measured against what."""
    checked = result.targets()
    if not checked:
        return ""
    lines = ["**Targets** (lrkv.bench.targets)", "", "| scale | B | T | row | rule | measured | bound | verdict |",
             "|---|---:|---:|---|---|---:|---:|---|"]
    for r in checked:
        for c in r.checks:
            got = c["why"] if c["value"] is None else f"{c['value']:.3g}"
            lines.append(f"| {r.scale} | {r.batch} | {_k(r.seq_len)} | {r.family} / {r.backend} | {c['text']} | "
                         f"{got} | {c['bound']:.3g} | {c['verdict']} |")
    n_pass = sum(r.target == "PASS" for r in checked)
    return "\n".join(lines + ["", f"{n_pass}/{len(checked)} rows meet every rule that applies to them."])
