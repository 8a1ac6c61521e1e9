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


def _doc_block_runner():
    import importlib.machinery
    import importlib.util

    loader = importlib.machinery.SourceFileLoader("doc_block", str(ROOT / "ci" / "doc-block"))
    module = importlib.util.module_from_spec(importlib.util.spec_from_loader("doc_block", loader))
    loader.exec_module(module)
    return module


def test_ci_runs_the_readme_quick_starts_verbatim_with_their_promised_exits():
    """.ci/run runs Quick start 1 and 3 through ci/doc-block, which takes a line's promised
    exit from its comment: the mutant line must exit 1, every other line 0."""
    from tests.test_helpers.doc_blocks import blocks

    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    for heading in ("Quick start 1", "Quick start 3"):
        assert f'ci/doc-block README.md "{heading}" sh' in ci, heading
    runner = _doc_block_runner()
    (qs1,) = blocks(ROOT / "README.md", "Quick start 1", "sh")
    promised = runner.commands(qs1)
    assert [want for cmd, want in promised if "lrkv.mutants." in cmd] == [1]  # the broken kernel
    assert [want for cmd, want in promised if "lrkv.mutants." not in cmd] == [0, 0, 0]
    assert runner.commands("# only a comment\n\nlrkv proofs   # a table\n") == [("lrkv proofs   # a table", 0)]


def test_doc_block_fails_a_line_that_breaks_its_promise(tmp_path, capsys):
    doc = tmp_path / "doc.md"
    doc.write_text("## Try\n\n```sh\ntrue\nfalse   # refused: exit 1\ntrue   # exit 3\n```\n", encoding="utf-8")
    runner = _doc_block_runner()
    assert runner.main([str(doc), "Try", "sh"]) == 1  # the third line exits 0, not 3
    assert "FAILED: exit 0" in capsys.readouterr().out
    doc.write_text("## Try\n\n```sh\ntrue\nfalse   # refused: exit 1\n```\n", encoding="utf-8")
    assert runner.main([str(doc), "Try", "sh"]) == 0


def test_the_cluster_lines_of_the_testing_doc_expand_to_the_shards_they_promise(tmp_path):
    """docs/testing.md's Slurm and Kubernetes lines, verbatim through sh (with `lrkv` printing its
    arguments): each is a valid `lrkv verify --shard I/N` of the right shard, then merge and gate."""
    import os
    import subprocess

    from lrkv.cli import build_parser
    from lrkv.verify.shards import Shard
    from tests.test_helpers.doc_blocks import blocks

    (block,) = blocks(ROOT / "docs" / "testing.md", "A run over many machines", "sh")
    env = dict(os.environ, SLURM_ARRAY_TASK_ID="3", SLURM_ARRAY_TASK_COUNT="8", JOB_COMPLETION_INDEX="2")
    script = "lrkv() { printf '%s\\037' \"$@\"; printf '\\036'; }\n" + block
    out = subprocess.run(["sh", "-c", script], cwd=tmp_path, env=env, capture_output=True, text=True, check=True)
    commands = [c.split("\x1f")[:-1] for c in out.stdout.split("\x1e")[:-1]]
    assert [c[0] for c in commands] == ["verify", "verify", "merge", "gate"]
    parsed = [build_parser(c[0]).parse_args(c) for c in commands]
    assert [p.shard for p in parsed[:2]] == [Shard(3, 8), Shard(3, 8)]
    assert parsed[2].shards == ["reports/shard-*"] and parsed[3].report == "reports/lrkv/report.json"


def test_ci_runs_the_readme_test_command_and_the_slow_tests_it_leaves_out():
    """.ci/run calls the README's test command (command 2) and then `pytest -m slow`, so a test
    marked slow (left out of the test command) still runs in CI."""
    import re

    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    command = re.search(r'^python3 -m pip install "torch==[^"]+" -e "\.\[dev\]" && (python3 -m pytest)$', readme, re.M)
    assert command, "the README's test command moved"
    assert re.search(rf"^{re.escape(command[1])}$", ci, re.M)
    assert re.search(r"^step python3 -m pytest -m slow$", ci, re.M)
    assert "not slow" in (ROOT / "pyproject.toml").read_text(encoding="utf-8")  # what that step makes up for
