"""Where a failing output fails (DESIGN §7): its failing cells, and what their sequences share.

A *cell* is one row of an output: a (sequence, head) pair of out — its head_dim channels
together — or of lse; a new token's (token, head) at the extend level, named with its
sequence and its position in it; (sequence[, position]) of a layer's y. A cell FAILS when
one of its elements is further from the reference than the bound's per-element allowance —
the rule's max|err| bound, which every element must meet — or its NaN/inf differs from the
reference's. When an output fails the rule's mean clause alone (no element above the max
bound), the allowance is the mean bound instead, and `rule` says so.

`failing_cells` is computed for an output that fails the rule only (so that a passing run
pays nothing for it) and is description only: `tolerance.judge_record` never reads it, so
an edited or deleted `cells` can change no verdict. It is bounded: the first CELLS_SHOWN
cells, SHOWN sequences and heads, and counts of all of them. `shared` says, from the case
alone, what the failing sequences have in common — their lengths modulo the page size (a
length that is an exact multiple of it: a full last page), a page boundary, a partly filled
last page of NaN garbage, the head-major pool, a shared prefix, empty or full sequences —
so that a last-page bug reads as one, not as a list of indices.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from .metrics import json_float, parse_float

CELLS_SHOWN = 6  # failing cells named; the rest are counted
SHOWN = 12  # failing sequences and heads named
REDUCED = ("channel", "feature")  # the trailing axis a cell spans
TOKEN_KEYS = ("new_token", "new_tokens")  # an extend token's detail: replaced by its position in the sequence


def _join(xs) -> str:
    xs = list(xs)
    return ", ".join(map(str, xs[:SHOWN])) + (", …" if len(xs) > SHOWN else "")


def _cell_at(case, full: dict) -> dict:
    """A cell's named position: the element's, its channel/feature dropped, batch named sequence,
    an extend token with its position in its sequence (slot p of the cache: it attends 0…p)."""
    at = {("sequence" if k == "batch" else k): v for k, v in full.items() if k not in REDUCED and k not in TOKEN_KEYS}
    if "token" in full and "new_tokens" in full:
        seq = full["sequence"]
        at["position"] = case.lengths[seq] - full["new_tokens"] + full["new_token"]
    return at


def failing_cells(out: torch.Tensor, ref: torch.Tensor, max_allowed: float, mean_allowed: float, case,
                  name: Callable[[tuple[int, ...]], dict]) -> dict:
    """{rule, allowance, count, of, first, sequences, heads, shared}: the failing cells of an
    output (the module doc's rule); name(index) names an element (the level's position)."""
    a = out.detach().to(torch.float64).cpu()
    b = ref.detach().to(torch.float64).cpu()
    differ = (torch.isnan(a) != torch.isnan(b)) | (torch.isposinf(a) != torch.isposinf(b)) \
        | (torch.isneginf(a) != torch.isneginf(b))
    both = torch.isfinite(a) & torch.isfinite(b)
    err = torch.where(both, (a - b).abs(), torch.zeros((), dtype=torch.float64))
    rule, allowance = "max_abs", max_allowed
    if not bool(((err > allowance) | differ).any()):  # the mean clause failed alone
        rule, allowance = "mean_abs", mean_allowed
    bad = (err > allowance) | differ
    axes = list(name(tuple(0 for _ in a.shape))) if a.dim() else []
    reduce = a.dim() >= 2 and bool(axes) and axes[-1] in REDUCED
    if reduce:
        bad, worst, nonfinite = bad.any(-1), err.amax(-1), differ.sum(-1)
    else:
        worst, nonfinite = err, differ.to(torch.int64)
    idx = bad.nonzero()
    first = []
    for ix in idx[:CELLS_SHOWN].tolist():
        full = name(tuple(ix) + ((0,) if reduce else ()))
        cell = {"at": _cell_at(case, full), "max_err": json_float(worst[tuple(ix)])}
        if int(nonfinite[tuple(ix)]):
            cell["nonfinite"] = int(nonfinite[tuple(ix)])
        first.append(cell)
    # which sequences and heads: name every failing cell (cheap: cells, not elements)
    seqs, heads, positions = set(), set(), set()
    for ix in idx.tolist():
        at = _cell_at(case, name(tuple(ix) + ((0,) if reduce else ())))
        if "sequence" in at:
            seqs.add(at["sequence"])
        if "head" in at:
            heads.add(at["head"])
        if "position" in at:
            positions.add(at["position"])
    got_nan = bool((torch.isnan(a) & ~torch.isnan(b)).any())
    out_cells = {"rule": rule, "allowance": json_float(allowance), "count": int(idx.shape[0]),
                 "of": int(bad.numel()), "first": first}
    if seqs:
        out_cells["sequences"] = {"count": len(seqs), "of": len(case.lengths), "first": sorted(seqs)[:SHOWN]}
    if heads:
        out_cells["heads"] = {"count": len(heads), "of": case.spec.n_heads, "first": sorted(heads)[:SHOWN]}
    out_cells["shared"] = shared(case, sorted(seqs), sorted(heads), sorted(positions), got_nan)
    return out_cells


def shared(case, seqs: list[int], heads: list[int], positions: list[int], got_nan: bool) -> list[str]:
    """What the failing sequences (heads, query positions) share, in sentences, from the case."""
    lengths = list(case.lengths)
    facts: list[str] = []
    if not seqs:
        return facts
    passing = [i for i in range(len(lengths)) if i not in set(seqs)]
    lf, lp = [lengths[i] for i in seqs], [lengths[i] for i in passing]
    page = case.pages.size if case.pages is not None and case.pages.size else 0
    if page:
        line = f"lengths {_join(lf)} (mod page size {page}: {_join(n % page for n in lf)})"
        if lp:
            line += f", the passing sequences' {_join(lp)} (mod {page}: {_join(n % page for n in lp)})"
        full = [n > 0 and n % page == 0 for n in lf]
        if all(full):
            if lp and not any(n > 0 and n % page == 0 for n in lp):
                facts.append(f"exactly the sequences whose length is a multiple of the page size {page} fail "
                             f"(a full last page{'; the empty ones pass' if 0 in lp else ''})")
            else:
                facts.append(f"every failing sequence's length is a multiple of the page size {page} "
                             "(a full last page)")
        elif not any(full) and all(n > 0 for n in lf):
            facts.append(f"every failing sequence ends inside a page (its last page partly filled"
                         f"{': the slots past its length hold NaN garbage' if case.nan_garbage else ''})")
        if positions and all(p % page == 0 for p in positions):
            facts.append(f"every failing query sits at the first slot of a page (a page boundary, page size {page})")
        elif positions and all(p % page == page - 1 for p in positions):
            facts.append(f"every failing query sits at the last slot of a page (a page boundary, page size {page})")
        if case.pages.hnd:
            facts.append("the page pool is head-major (page_hnd: [pages, heads, page, ...])")
        if case.pages.shared_prefix and set(seqs) <= {0, 1}:
            facts.append(f"sequences 0 and 1 share their first {case.pages.shared_prefix} tokens' pages")
        if case.pages.pool:
            facts.append(f"{case.pages.pool} unused pages below the used ones (high page indices)")
        if case.pages.view != "dense":
            facts.append(f"the pools are views of a larger allocation (pool_view {case.pages.view}: "
                         f"NaN between their pages or rows — a pitch or page stride taken from the shape reads it)")
        facts.append(line)
    elif lp and len(set(lf)) == 1 and lf[0] not in lp:
        facts.append(f"length {lf[0]} (the passing sequences': {_join(lp)})")
    if all(n == 0 for n in lf):
        facts.append("the failing sequences are empty (length 0)")
    elif all(n == case.t_max for n in lf) and lp:
        facts.append(f"the failing sequences fill the cache (length = t_max {case.t_max}: no garbage slot)")
    if got_nan and case.nan_garbage:
        facts.append("NaN where the reference is finite, and the garbage slots past each length hold NaN: "
                     "a read past a length (or a NaN garbage page)")
    if heads and len(heads) < case.spec.n_heads:
        facts.append(f"only head{'s' if len(heads) > 1 else ''} {_join(heads)} of {case.spec.n_heads}")
    if case.layout == "strided":
        facts.append("the cache is handed as strided views (shared K/V packed, latents head-major)")
    return facts


def cells_text(cells: dict | None, shown: int = 3) -> str:
    """'sequences 1, 3 of 4, all 3 heads: <what they share>; 6 of 12 cells over the max|err|
    bound 6.7e-06, first: (sequence 1, head 0: err 0.339), …' ('' without failing cells)."""
    if not cells or not cells.get("count"):
        return ""
    parts = []
    for what in ("sequences", "heads"):
        s = cells.get(what)
        if not s:
            continue
        if what == "heads" and s["count"] == s["of"] and s["of"] > 1:
            parts.append(f"all {s['of']} heads")
            continue
        more = ", …" if s["count"] > len(s["first"]) else ""
        parts.append(f"{what if s['count'] != 1 else what[:-1]} {', '.join(map(str, s['first']))}{more} of {s['of']}")

    def cell(c: dict) -> str:
        at = ", ".join(f"{k} {v}" for k, v in c["at"].items())
        nf = f", {c['nonfinite']} NaN/inf" if c.get("nonfinite") else ""
        return f"({at}: err {parse_float(c['max_err']):.3g}{nf})"

    bound = "max|err|" if cells["rule"] == "max_abs" else "mean|err|"
    first = cells["first"][:shown]
    listed = ", ".join(cell(c) for c in first) + (", …" if cells["count"] > len(first) else "")
    head = ", ".join(parts)
    if cells.get("shared"):
        head += (": " if head else "") + "; ".join(cells["shared"])
    return (f"{head}; " if head else "") + (f"{cells['count']} of {cells['of']} cells over the {bound} bound "
                                             f"{parse_float(cells['allowance']):.3g}, first: {listed}")


def where_lines(rec: dict) -> list[str]:
    """One line per output of a record with failing cells: 'out: sequences 1, 3 of 4, …'; an
    output failing in the same sequences and heads as one before it says so in short."""
    lines, seen = [], {}
    for name, ev in (rec.get("outputs") or {}).items():
        cells = ((ev or {}).get("where") or {}).get("cells")
        if not cells or not cells.get("count"):
            continue
        key = repr((cells.get("sequences"), cells.get("heads"), cells.get("shared")))
        if key in seen:
            bound = "max|err|" if cells["rule"] == "max_abs" else "mean|err|"
            lines.append(f"{name}: the same sequences and heads as {seen[key]} ({cells['count']} of {cells['of']} "
                         f"cells over the {bound} bound {parse_float(cells['allowance']):.3g})")
            continue
        seen[key] = name
        lines.append(f"{name}: {cells_text(cells)}")
    return lines


def failure_text(rec: dict, what: str = "") -> str:
    """A failing record for a person, in the order they need it: which case failed (`what`
    adds to that line), where — one line per failing output — the replay command, and the
    full reason last."""
    lines = [f"{rec['status'].upper()} {rec['backend']} {rec['id']}{what}"]
    lines += [f"  where: {line}" for line in where_lines(rec)]
    lines += [f"  replay: {rec['repro']}", f"  why: {rec['reason']}"]
    return "\n".join(lines)
