"""`lrkv bench --backend package.module:attribute`: a user's decode backend timed beside the
built-ins, in the same table — and every way it can fail to be timed is a row that says why.

Tiny shapes, eager built-ins, one round: no timing is judged, only the rows.
"""

from __future__ import annotations

import json

import pytest
import torch

from lrkv.bench.backends import step_backends
from lrkv.bench.grid import BenchGrid
from lrkv.bench.render import footnotes
from lrkv.bench.runner import RunOptions, run_bench
from lrkv.mutants.decode import Mutant
from lrkv.mutants.layouts import LayoutBackend
from lrkv.reference.cache_layouts import ADAPTERS
from lrkv.spec import PAPER_SCALES, PaperScale
from lrkv.verify.protocol import BaseBackend

TINY = PaperScale("tiny", 4, 16, 64, None, 3, 2, 12, "test scale")
HERE = __name__  # backends below are resolved by 'tests.bench.test_user_backend:<attr>'


class _Good(Mutant):  # the float64 reference itself: correct at any dtype it declares
    name = "good"


class _Unavailable(_Good):
    name = "unavailable"

    def available(self):
        return False, "needs the vendor library (test)"


class _RaisesInAvailable(_Good):
    name = "raises-available"

    def available(self):
        raise OSError("driver missing (test)")


class _RaisesInDecode(_Good):
    name = "raises-decode"

    def decode_attention(self, *a, **kw):
        raise ZeroDivisionError("kernel bug (test)")


class _Wrong(_Good):  # drops the private (latent) term: plausible shapes, wrong numbers
    name = "wrong"

    def decode_attention(self, q, sk, sv, lk, lv, bk, bv, lengths, **kw):
        return super().decode_attention(q, sk, sv, torch.zeros_like(lk), torch.zeros_like(lv), bk, bv, lengths, **kw)


class _LayerOnly(BaseBackend):
    name = "layer-only"
    levels = frozenset({"layer"})


class _Paged(_Good):  # every kernel entry, in the contract's own paged form
    name = "paged"
    levels = frozenset({"kernel", "kernel-paged", "kernel-extend"})


class _Vllm(LayoutBackend):  # a vLLM team's backend: paged decode and extend on vLLM's block pools
    name = "vllm"
    calls: list = []

    def _attend(self, signature, args, **kw):
        self.calls.append((signature, dict(zip(getattr(ADAPTERS[self.cache_layout], signature), args)) | kw))
        return super()._attend(signature, args, **kw)


paged, vllm = _Paged(), _Vllm()
good, unavailable, raises_available, raises_decode, wrong, layer_only = (
    _Good(), _Unavailable(), _RaisesInAvailable(), _RaisesInDecode(), _Wrong(), _LayerOnly())
not_a_backend = object()


@pytest.fixture
def tiny(monkeypatch):
    monkeypatch.setitem(PAPER_SCALES, "tiny", TINY)
    return "tiny"


def _run(tiny, *names, dtype=torch.float32):
    grid = BenchGrid("t", (tiny,), (1,), (16,), families=("mha", "lrkv"), rounds=1)
    opts = RunOptions(backends=["eager", *(f"{HERE}:{n}" for n in names)], dtype=dtype, measure_machine=False,
                      min_sample_s=1e-4, threads=1)
    result = run_bench(grid, opts)
    return result, {(r.family, r.backend): r for r in result.rows}


def test_a_user_backend_is_timed_beside_the_builtins(tiny):
    result, rows = _run(tiny, "good")
    assert set(rows) == {("mha", "eager"), ("lrkv", "eager"), ("lrkv", "good"), ("lrkv", "good-paged"),
                         ("lrkv", "good-extend")}  # lrkv only: its contract; a row per kernel entry
    row = rows["lrkv", "good"]
    assert row.status == "ok" and row.time_s > 0 and row.mha_backend == "eager" and row.vs_mha > 0
    assert row.bytes_total == rows["lrkv", "eager"].bytes_total  # same inputs, same bytes
    assert "good" in result.grid["backends"]


def test_named_alone_the_default_builtins_stay():
    assert [b.name for b in step_backends("cpu", [f"{HERE}:good"])] == ["inductor", "good", "good-paged",
                                                                         "good-extend"]
    assert [b.name for b in step_backends("cpu", ["eager", f"{HERE}:good"])] == ["eager", "good", "good-paged",
                                                                                 "good-extend"]


def test_the_users_paged_and_extend_entries_are_timed_in_its_declared_layout(tiny):
    """A paged-only vLLM backend (cache_layout 'vllm-blocks'): its paged decode and extend rows are
    timed on vLLM's block pools — block 0 the null block, a block_table, seq_lens — beside ours."""
    _Vllm.calls.clear()
    result, rows = _run(tiny, "vllm", "paged")
    for entry, method in (("paged", "paged_decode_attention"), ("extend", "extend_attention")):
        row = rows["lrkv", f"vllm-{entry}"]
        assert row.status == "ok" and row.time_s > 0 and row.vs_mha > 0, row.reason
        assert f"{method}, cache layout vllm-blocks, pages of 16" in row.note
        assert row.bytes_total == rows["lrkv", "eager"].bytes_total
        own = rows["lrkv", f"paged-{entry}"]  # a backend of the contract's own paged form
        assert own.status == "ok" and "cache layout pages" in own.note
    decode = rows["lrkv", "vllm"]  # paged entries only: its contiguous decode row says why it is not timed
    assert decode.status == "skipped" and "does not declare the kernel level" in decode.reason
    seen = {sig for sig, _ in _Vllm.calls}
    assert seen == {"DECODE", "EXTEND"}
    for sig, laid in _Vllm.calls:  # what the backend was handed: vLLM's block pools
        table = laid["block_table"]
        assert torch.isnan(laid["shared_k"][0]).all()  # block 0: the null block
        assert laid["shared_k"].shape[0] == int(table.max()) + 1 and "seq_lens" in laid
        if sig == "EXTEND":
            assert laid["cu_seqlens_q"].tolist() == list(range(len(laid["seq_lens"]) + 1))
            assert "slot_mapping" in laid


def test_a_backend_without_a_paged_entry_gets_a_not_timed_row(tiny):
    result, rows = _run(tiny, "good")
    for entry in ("paged", "extend"):
        row = rows["lrkv", f"good-{entry}"]
        assert row.status == "skipped" and row.time_s is None
        assert row.reason.startswith(f"not timed: no {entry} entry"), row.reason
        assert any(f"not timed: no {entry} entry" in n and f"lrkv / good-{entry}" in n for n in footnotes(result))
    assert rows["lrkv", "good"].status == "ok"


@pytest.mark.parametrize("attr,status,needle", [
    ("unavailable", "skipped", "not available: needs the vendor library"),
    ("layer_only", "skipped", "does not declare the kernel level"),
    ("raises_available", "error", "available() raised OSError: driver missing"),
    ("raises_decode", "error", "decode_attention raised ZeroDivisionError: kernel bug"),
    ("wrong", "error", "out is wrong: max error"),
])
def test_a_backend_that_cannot_be_timed_is_a_row_saying_why(tiny, attr, status, needle):
    result, rows = _run(tiny, attr)
    name = globals()[attr].name
    row = rows["lrkv", name]
    assert row.status == status and needle in row.reason and row.time_s is None, row.reason
    assert rows["lrkv", "eager"].status == "ok"  # the others are still timed
    if status == "skipped":  # the table cell cuts a reason short: the footnote has it whole
        assert any(needle in n and f"lrkv / {name}" in n for n in footnotes(result))


def test_a_dtype_the_backend_lacks_is_a_skipped_row(tiny):
    _, rows = _run(tiny, "good", dtype=torch.bfloat16)  # Mutant declares float64 and float32
    row = rows["lrkv", "good"]
    assert row.status == "skipped" and "does not take bfloat16" in row.reason


def test_two_backends_of_one_name_are_refused():
    with pytest.raises(ValueError, match="share the name 'good'"):
        step_backends("cpu", ["eager", f"{HERE}:good", f"{HERE}:good"])


def _main(argv, tmp_path):
    from lrkv.cli import main

    return main(["bench", "--scales", "tiny", "--batch", "1", "--seq-lens", "16", "--families", "lrkv",
                 "--rounds", "1", "--threads", "1", "--out", str(tmp_path), "--no-plot", "--no-progress", *argv])


@pytest.mark.parametrize("value,needle", [
    ("flash", "unknown backend 'flash'"),
    ("examples.my_backend:", "unknown backend"),
    (f"{HERE}:missing", "has no attribute 'missing'"),
    ("no_such_module_xyz:backend", "cannot import backend module 'no_such_module_xyz'"),
    (f"{HERE}:not_a_backend", "lacks 'name'"),
])
def test_cli_bad_backend_exits_2_naming_it_before_anything_runs(tiny, tmp_path, capsys, value, needle):
    try:
        rc = _main(["--backend", "eager", "--backend", value], tmp_path)
    except SystemExit as e:  # refused by argparse itself
        rc = e.code
    out = capsys.readouterr()
    assert rc == 2 and needle in out.out + out.err and "--backend" in out.out + out.err
    assert "measuring the machine" not in out.out and not list(tmp_path.iterdir())  # nothing ran, nothing written


def _doc_command(*needle: str) -> list[str]:
    """The one `lrkv ...` line of docs/bench.md's sh blocks that contains every needle, as argv."""
    import re
    import shlex
    from pathlib import Path

    doc = (Path(__file__).resolve().parents[2] / "docs" / "bench.md").read_text()
    lines = [ln for block in re.findall(r"```sh\n(.*?)```", doc, flags=re.S) for ln in block.splitlines()
             if ln.startswith("lrkv ") and all(n in ln for n in needle)]
    assert len(lines) == 1, lines
    return shlex.split(lines[0], comments=True)[1:]


def test_the_docs_command_times_the_example_backend_verbatim(tmp_path, capsys, monkeypatch):
    """docs/bench.md's example, as written: examples.my_backend resolves (from the repository
    on sys.path here, from the working directory for a user), its row is timed."""
    from lrkv.cli import main

    argv = _doc_command("examples.my_backend:backend", "--device cpu")
    monkeypatch.chdir(tmp_path)  # --out is relative: write under tmp
    assert main(argv) == 0
    out = json.loads(next(tmp_path.glob("reports/*/bench.json")).read_text())
    by = {(r["family"], r["backend"]): r["status"] for r in out["rows"]}
    assert by == {("mha", "eager"): "ok", ("lrkv", "eager"): "ok", ("lrkv", "my-splitk"): "ok",
                  ("lrkv", "my-splitk-paged"): "ok", ("lrkv", "my-splitk-extend"): "skipped"}  # no extend entry
    assert "lrkv / my-splitk" in capsys.readouterr().out


def test_the_docs_gpu_command_puts_the_example_beside_triton_and_sdpa():
    """The GPU line cannot run here: parse it as written and build its backends for CUDA."""
    from lrkv.cli import build_parser

    args = build_parser("bench").parse_args(_doc_command("examples.my_backend:backend", "--device cuda"))
    built = step_backends("cuda", args.backend, dtype=torch.bfloat16)
    assert [b.name for b in built] == ["triton", "sdpa", "my-splitk", "my-splitk-paged", "my-splitk-extend"]
    assert built[2].available("cuda") == (True, "")  # it declares bfloat16 and the kernel level
