"""Each server-layout mutant (lrkv.mutants.layouts) is rejected by `lrkv verify` and by the
gate, while the same read-back without the bug (`LayoutBackend`, in each layout) passes the
same cases: token-major and head-major pages, an empty sequence, a full and a partial last page,
and pools handed over as views (K/V interleaved, pages apart, rows padded)."""

from __future__ import annotations

import json
import sys
import types

import pytest

from lrkv.cli import main
from lrkv.mutants.layouts import (LAYOUT_MUTANTS, BlockPitchFromShape, HndReadAsNhd, LayoutBackend, NhdReadAsHnd,
                                  RowPitchFromWidth)
from lrkv.reference.cache_layouts import ADAPTERS
from lrkv.spec import AttentionSpec
from lrkv.verify.case import Case

SPEC = AttentionSpec.lrkv(3, 8, 2, qk_norm=True)
CASES = [Case.flat("kernel-paged", SPEC, "float32", (5, 8, 0, 4), 12, page_size=4, page_hnd=hnd, seed=1)
         for hnd in (False, True)]
VIEW_CASES = [Case.flat("kernel-paged", SPEC, "float32", (5, 8, 0, 4), 12, page_size=4, page_hnd=hnd, pool_view=view,
                        seed=3) for view, hnd in (("kv-interleaved", False), ("pages-apart", True), ("rows-padded", False))]
EXTEND = [Case.flat("kernel-extend", SPEC, "float32", (9, 4, 6, 0), 12, n_new=(3, 0, 6, 0), page_size=page,
                    page_hnd=page == 4, seed=2) for page in (4, 0)]  # paged head-major, and contiguous


def _verify(tmp_path, backend: str, out: str, cases=CASES) -> tuple[int, list[dict]]:
    argv = ["verify", "--backend", backend, "--out", str(tmp_path / out), "--no-progress"]
    for c in cases:
        argv += ["--case", c.to_json()]
    code = main(argv)
    return code, json.loads((tmp_path / out / "report.json").read_text())["records"]


@pytest.mark.parametrize("layout", sorted(ADAPTERS))
def test_the_read_back_without_a_bug_passes_in_every_layout(tmp_path, monkeypatch, layout):
    mod = types.ModuleType("planted_layout")
    mod.backend = type("Correct", (LayoutBackend,), {"name": f"correct-{layout}", "cache_layout": layout})()
    monkeypatch.setitem(sys.modules, "planted_layout", mod)
    code, recs = _verify(tmp_path, "planted_layout:backend", "ok", CASES + EXTEND + VIEW_CASES)
    assert code == 0 and [r["status"] for r in recs] == ["pass", "pass", "pass", "skip", "pass", "pass", "pass", "pass"]
    assert {r.get("cache_layout") for r in recs} == {layout, None}  # None: the contiguous extend case
    assert recs[3]["reason"].startswith("not applicable: a contiguous cache")
    assert recs[4]["twin"]["changes"] == "paging=16" and recs[4]["case"]["page_size"] == 16  # its paged twin
    base, report = tmp_path / "b.json", str(tmp_path / "ok" / "report.json")
    assert main(["gate", report, "--baseline", str(base), "--update-baseline"]) == 0
    assert main(["gate", report, "--baseline", str(base)]) == 0  # the skip re-asked from the layout: made again


@pytest.mark.parametrize("mutant", LAYOUT_MUTANTS, ids=lambda m: m.__name__)
def test_every_layout_mutant_is_rejected_by_verify_and_the_gate(tmp_path, mutant):
    label = f"lrkv.mutants.layouts:{mutant.__name__}"
    code, recs = _verify(tmp_path, label, "m", CASES + VIEW_CASES)
    assert code == 1 and mutant.bug
    failing = {r["case"]["page_hnd"] for r in recs[:2] if r["status"] == "fail"}
    # a pool misread in one stride order is right in the other; a pitch from the shape is right
    # on dense pools
    assert failing == {NhdReadAsHnd: {False}, HndReadAsNhd: {True}, BlockPitchFromShape: set(),
                       RowPitchFromWidth: set()}.get(mutant, {False, True})
    assert [r["status"] for r in recs[2:]] == ["fail"] * 3  # every mutant fails every pool view
    assert _verify(tmp_path, "lrkv.mutants.layouts:LayoutBackend", "ok", CASES + VIEW_CASES)[0] == 0
    base = tmp_path / "b.json"
    assert main(["gate", str(tmp_path / "ok" / "report.json"), "--baseline", str(base), "--update-baseline"]) == 0
    gated = tmp_path / "gate.json"
    assert main(["gate", str(tmp_path / "m" / "report.json"), "--baseline", str(base), "--subset",
                 "--markdown", str(gated)]) == 1
    assert "| FAIL |" in gated.read_text()
    assert main(["gate", str(tmp_path / "m" / "report.json"), "--baseline", str(base), "--update-baseline"]) == 1
