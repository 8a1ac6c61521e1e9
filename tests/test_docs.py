"""The docs a user clones stand on their own: no reference to folders outside the repository,
and the design document they cite (DESIGN §N) is in it."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]


def test_no_reference_outside_the_repository():
    for path in DOCS:
        text = path.read_text(encoding="utf-8")
        assert "../shared" not in text and "shared/DESIGN" not in text, path.name
        for target in re.findall(r"\]\((\.\./[^)]+)\)", text):
            assert (path.parent / target).resolve().is_relative_to(ROOT), (path.name, target)


def test_design_document_has_every_cited_section():
    design = (ROOT / "docs" / "design.md").read_text(encoding="utf-8")
    sections = {int(n) for n in re.findall(r"^## (\d+)\. ", design, flags=re.M)}
    cited = set()
    for path in [*DOCS, *ROOT.joinpath("lrkv").rglob("*.py")]:
        cited |= {int(n) for n in re.findall(r"DESIGN §(\d+)", path.read_text(encoding="utf-8"))}
    assert cited and cited <= sections, sorted(cited - sections)


def test_the_readme_contract_examples_run_as_written():
    """The decode contract's Python blocks (what a kernel computes for rope=), verbatim."""
    from tests.test_helpers.doc_blocks import blocks

    for code in blocks(ROOT / "README.md", "The decode contract", "python"):
        scope: dict = {}
        exec(compile(code, "README.md (The decode contract)", "exec"), scope)
        assert scope["rotated"].shape == scope["private_k"].shape
