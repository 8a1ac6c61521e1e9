"""The interpreter memcheck (lrkv.kernels.memcheck): out-of-bounds reads planted in the kernel
source (`runtime.load_patched`, one line changed) each FAIL with a MemcheckError naming the
kernel, the access, the argument and the program; a masked-off lane with a wild address and
the shipped kernels — decode, paged, extend, append, fp8 append, at the interpreter's launch
and at the launch an sm_90 GPU picks (`triton-sm90`) — pass. The interpreter alone would run
every planted read silently (a few elements past a tensor is whatever lies there).

Where a planted read lands more than a few bytes past its tensor, the tensor is a view of a
larger buffer, so the address is in that buffer's storage and never in another argument by
chance of the allocator; a read of one element past a tensor's end lands in its allocation's
padding or the allocator's header, which no tensor's data occupies.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest
import torch

from lrkv.kernels import memcheck, runtime
from lrkv.kernels.decode import decode_attention, paged_decode_attention
from lrkv.kernels.launch import gpu_launch, launch_overrides, pick_launch
from lrkv.kernels.memcheck import MemcheckError
from lrkv.kernels.testing import kernel_case, kernel_inputs, policy
from lrkv.kernels.triton_backend import TritonBackend
from lrkv.verify import runner
from lrkv.verify.backend_registry import get_backend

SCALE_LOAD = "sm_scale = _to_acc(tl.load(SCALE, mask=pid_s >= 0, other=1.0), ACC_FP64)"
# name -> (text of _kernels.py, its replacement): each reads out of bounds, but the last
PLANTS = {
    # paged decode reads the page-table entry one past the sequence's last: past the table
    # for the last sequence when it fills its row
    "page_table_entry_past": ("page = tl.load(PT + b64 * MAX_PAGES + page_idx.to(tl.int64), mask=tmask, other=0)",
                              "page = tl.load(PT + b64 * MAX_PAGES + page_idx.to(tl.int64) + 1, mask=tmask, "
                              "other=0)"),
    # the combine reads NUM_SPLITS + 1 splits: the last (b, h) program's l of split S lies
    # one element past the scratch (m and l are its last regions)
    "combine_split_past": ("smask = offs_s < NUM_SPLITS", "smask = offs_s < NUM_SPLITS + 1"),
    # every program reads the next query row: the last one reads one row past q
    "q_row_past": ("qrow = (prog64 + rtok) * (H * D) + heads * D", "qrow = (prog64 + 1 + rtok) * (H * D) + heads * D"),
    # an unmasked load one element past the scale scalar, its value discarded by tl.where
    "discarded_by_where": (SCALE_LOAD, "sm_scale = tl.where(pid_s < 0, _to_acc(tl.load(SCALE + 1), ACC_FP64), "
                                       "_to_acc(tl.load(SCALE, mask=pid_s >= 0, other=1.0), ACC_FP64))"),
    # a load 2^40 elements past the scale, its only lane masked off: legal, adds 0
    "masked_off_wild": (SCALE_LOAD, SCALE_LOAD[:-1] + " + _to_acc(tl.load(SCALE + (1 << 40), mask=pid_s < 0, "
                                                      "other=0.0), ACC_FP64))"),
}


def planted(name: str):
    return runtime.load_patched(f"memcheck_{name}", *PLANTS[name])


def decode_case(**kw):
    shape = dict(H=2, d_h=16, r=4, lengths=[37, 20], t_max=40, dtype="float32", seed=3)
    return kernel_case(**{**shape, **kw})


def fails(name: str, fn, inp, **launch) -> str:
    """The MemcheckError message of `fn` on `inp` with the planted kernels `name`."""
    with runtime.using(planted(name)), pytest.raises(MemcheckError) as err:
        inp.call(fn, **launch)
    return str(err.value)


def test_memcheck_page_table_entry_past_the_last_sequence_s_pages():
    case = decode_case(level="kernel-paged", page_size=8, lengths=[20, 40])  # 5 pages a row; sequence 1 fills its
    inp = kernel_inputs(case)
    assert inp.cache.page_table.shape == (2, 5) and int(inp.cache.lengths[1]) == 40
    # block_t 16 > page 8: the per-slot table lookup (a tile-in-page launch reads it per tile)
    msg = fails("page_table_entry_past", paged_decode_attention, inp, num_splits=1, block_t=16)
    assert re.search(r"paged_split_kernel load out of bounds in program \(1, 0, 0\): .* 1 element\(s\) of 4 B "
                     r"\(\+4 B\) past the end of argument 'PT' \(parameter 9, \[2, 5\] int32", msg), msg


def test_memcheck_combine_reading_one_split_too_many():
    inp = kernel_inputs(decode_case())
    msg = fails("combine_split_past", decode_attention, inp, num_splits=3)  # BLOCK_S 4: one spare lane
    # the last program, (b, h) = (1, 1), reads l of split 3: one past the [2·2·3·(16+4+2)] scratch
    assert re.search(r"decode_combine_kernel load out of bounds in program \(1, 1, 0\): .* \(\+4 B\) past the end of "
                     r"argument 'WS' \(parameter 0, \[264\] float32.* 1 of 4 active lanes", msg), msg


def test_memcheck_one_row_past_q_even_inside_its_storage():
    inp = kernel_inputs(decode_case())
    buf = torch.zeros(3, *inp.q.shape[1:], dtype=inp.q.dtype)
    buf[:2] = inp.q
    inp = replace(inp, q=buf[:2])  # a contiguous view: row 2 is the buffer's, not q's
    msg = fails("q_row_past", decode_attention, inp, num_splits=2)
    assert re.search(r"decode_split_kernel load out of bounds in program \(1, 0, 0\): .* 1 element\(s\) of 4 B "
                     r"\(\+4 B\) past the end of argument 'Q' \(parameter 0, \[2, 2, 16\] float32", msg), msg
    assert "32 of 32 active lanes" in msg  # the whole [2 heads, 16] row


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_memcheck_an_active_lane_whose_value_where_discards(dtype):
    msg = fails("discarded_by_where", decode_attention, kernel_inputs(decode_case(dtype=dtype)))
    size = 8 if dtype == "float64" else 4
    assert re.search(rf"decode_split_kernel load out of bounds in program \(0, 0, 0\): .* \(\+{size} B\) past the "
                     rf"end of argument 'SCALE' \(parameter 9, \[1\] {dtype}", msg), msg


def test_memcheck_passes_a_masked_off_lane_with_a_wild_address():
    inp = kernel_inputs(decode_case())
    want = inp.call(decode_attention, num_splits=2)
    with runtime.using(planted("masked_off_wild")):
        got = inp.call(decode_attention, num_splits=2)  # 4 TiB past SCALE, masked: never read
    for a, b in zip(got, want):
        torch.testing.assert_close(a, b, rtol=0, atol=0, equal_nan=True)


def test_memcheck_off_when_lrkv_memcheck_is_0(monkeypatch):
    inp = kernel_inputs(decode_case())
    monkeypatch.setenv("LRKV_MEMCHECK", "0")
    with runtime.using(planted("combine_split_past")):
        inp.call(decode_attention, num_splits=3)  # one element past the scratch, read silently
    monkeypatch.setenv("LRKV_MEMCHECK", "maybe")
    with pytest.raises(ValueError, match="LRKV_MEMCHECK='maybe'"):
        inp.call(decode_attention, num_splits=3)


def test_memcheck_extent_is_the_view_s_not_its_storage():
    base = torch.zeros(4, 6, dtype=torch.float32)
    lo = base.data_ptr()
    assert memcheck.extent(base[1:3, 2:5]) == (lo + 8 * 4, lo + 17 * 4)  # elements 8 .. 16
    assert memcheck.extent(base.t()) == (lo, lo + 24 * 4)
    empty = memcheck.extent(base[:, :0])  # size 0: nothing addressable
    assert empty[0] == empty[1]
    assert memcheck.extent(base[::2, 5]) == (lo + 5 * 4, lo + 18 * 4)


def test_memcheck_kernels_use_no_unchecked_memory_path():
    """Every memory entry of Triton's interpreter builder reaches create_masked_load/_store,
    which the memcheck wraps, except the read-modify-write atomics: our kernels use none."""
    from triton.runtime.interpreter import InterpreterBuilder

    memory = {n for n in dir(InterpreterBuilder) if re.search(r"load|store|atomic|descriptor|gather|scatter", n)}
    via_masked = {"create_load", "create_store", "create_masked_load", "create_masked_store", "create_atomic_load",
                  "create_atomic_store", "create_atomic_poll", "create_descriptor_load", "create_descriptor_store",
                  "create_descriptor_gather", "create_descriptor_scatter", "create_make_tensor_descriptor"}
    unchecked = {"create_atomic_rmw", "create_atomic_cas"}
    registers = {"create_gather"}  # tl.gather: np.take_along_axis of a tensor already loaded
    assert memory == via_masked | unchecked | registers, sorted(memory ^ (via_masked | unchecked | registers))
    source = runtime._KERNEL_FILE.read_text()
    assert not re.search(r"\btl\.atomic_(add|and|cas|max|min|or|xchg|xor)\b", source)


# ----------------------------------------------------------------------------- the shipped kernels
CASES = [  # small, ragged (an empty sequence), partial tiles; hinted ones: several splits, a short last one
    dict(level="kernel", lengths=[37, 20, 0], key_scale=True),
    dict(level="kernel", lengths=[37, 20, 0], rope="exact", dtype="bfloat16", splits=3, tile=16),
    dict(level="kernel-paged", lengths=[37, 20, 0], page_size=8, splits=3, tile=16),
    dict(level="kernel-paged", lengths=[37, 20, 0], page_size=16, dtype="bfloat16", key_scale=True),
    dict(level="kernel-extend", lengths=[37, 20, 3], n_new=[3, 2, 0]),
    dict(level="kernel-extend", lengths=[37, 20, 3], n_new=[1, 4, 3], page_size=8, rope="exact"),
    dict(level="kernel", lengths=[37, 20, 0], dtype="bfloat16", cache_format="float8_e4m3fn",
         scale_granularity="per_token_head", splits=3),
    dict(level="kernel-paged", lengths=[37, 20, 0], page_size=8, cache_format="float8_e5m2",
         scale_granularity="per_token"),
    dict(level="layer", lengths=[37, 20, 1], key_scale=True),  # the append kernel, then decode
    dict(level="layer", lengths=[37, 20, 1], cache_format="float8_e4m3fn", scale_granularity="per_token_head"),
]


class Launches:
    """A listener (memcheck.listen) keeping each launch's kernel and whether the memcheck checks it."""

    def __init__(self):
        self.seen: list[tuple[str, bool]] = []

    def begin(self, launch) -> bool:
        self.seen.append((launch.kernel, launch.module in memcheck._WATCHED and memcheck.enabled()))
        return False

    def access(self, addrs, itemsize, store):
        raise AssertionError("asked for no access")


def test_memcheck_passes_the_shipped_kernels_at_both_launches():
    cases = [kernel_case(H=4, d_h=32, r=6, t_max=40, seed=9, **{"dtype": "float32", **kw}) for kw in CASES]
    # the GPU's launch as is; and with a partial head group (3 + 1) and 3 splits (extend takes no hints)
    backends = [("triton", TritonBackend()), ("triton-sm90", get_backend("triton-sm90")),
                ("triton-sm90 G3 S3", TritonBackend(launch_as="sm90", group_size=3, num_splits=3))]
    with memcheck.listen(Launches()) as launches:
        recs = runner.run(cases, backends, policy(), properties=False, isolation="inprocess", twins=False)
    bad = [(r["id"], r["backend"], r["status"], r["reason"]) for r in recs if r["status"] != "pass"]
    assert len(recs) == 3 * len(cases) and not bad, bad
    assert launches.seen and all(checked for _, checked in launches.seen), launches.seen
    assert {k for k, _ in launches.seen} == {"decode_split_kernel", "paged_split_kernel", "extend_split_kernel",
                                             "decode_combine_kernel", "append_kernel", "append_fp8_kernel"}


def test_memcheck_sm90_backend_launches_as_the_gpu():
    inp = kernel_inputs(kernel_case(H=4, d_h=32, r=6, lengths=[1024, 700], dtype="bfloat16"))
    backend = get_backend("triton-sm90")
    assert backend.name == "triton-sm90" and backend.launch_as == "sm90"
    got = backend._launch(inp.q, inp.cache, None, None)
    gpu = gpu_launch(rows=2, H=4, d_h=32, r=6, slots=1024, dtype=torch.bfloat16)
    assert got == launch_overrides(gpu) and (got["num_splits"], got["block_t"]) == (4, 32)  # 1024 / 256 slots
    here = pick_launch(B=2, H=4, d_h=32, r=6, slots=1024, dtype=torch.bfloat16, device=torch.device("cpu"))
    assert (here.num_splits, here.block_t) == (1, 128)  # the interpreter's own: one SM, big tiles
    backend.configure(kernel_case(H=4, d_h=32, r=6, lengths=[40], splits=3, tile=5))
    assert backend._launch(inp.q, inp.cache, None, None)["num_splits"] == 3  # a case's hint, as the GPU takes it
    with pytest.raises(ValueError, match="launch_as"):
        TritonBackend(launch_as="sm80")


class PlantedTriton(TritonBackend):
    """`triton` with the combine reading one split too many: the harness must record it."""

    name = "triton[memcheck-planted]"

    def _attend(self, *args, **kw):
        with runtime.using(planted("combine_split_past")):
            return super()._attend(*args, **kw)


def test_memcheck_failure_is_an_error_record_from_the_worker():
    case = decode_case()
    recs = runner.run([case], [("planted", PlantedTriton(num_splits=3))], policy(), properties=False,
                      isolation="process", twins=False)
    assert [r["status"] for r in recs] == ["error"], recs
    assert recs[0]["reason"].startswith("MemcheckError: memcheck: decode_combine_kernel load out of bounds in "
                                        "program (1, 1, 0)"), recs[0]["reason"]


def test_memcheck_documented_commands_run_verbatim(tmp_path):
    """docs/kernels.md's memcheck commands as a user types them (ci/doc-block's reading: one
    command a line, the exit its comment promises), run in a scratch directory."""
    import importlib.machinery
    import importlib.util
    import json
    import os
    import subprocess
    from pathlib import Path

    from tests.test_helpers.doc_blocks import blocks

    root = Path(__file__).resolve().parents[2]
    loader = importlib.machinery.SourceFileLoader("doc_block", str(root / "ci" / "doc-block"))
    doc_block = importlib.util.module_from_spec(importlib.util.spec_from_loader("doc_block", loader))
    loader.exec_module(doc_block)
    (block,) = blocks(root / "docs" / "kernels.md", "Memory safety in the interpreter", "sh")
    commands = doc_block.commands(block)
    assert len(commands) == 3, commands
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, (str(root), os.environ.get("PYTHONPATH"))))}
    for cmd, want in commands:
        got = subprocess.run(["bash", "-c", cmd], cwd=tmp_path, env=env, capture_output=True, text=True)
        assert got.returncode == want, (cmd, got.stdout[-3000:], got.stderr[-3000:])
    for out, backend in (("memcheck-sm90", "triton-sm90"), ("unchecked", "triton")):
        recs = json.loads((tmp_path / "reports" / out / "report.json").read_text())["records"]
        assert recs and {r["backend"] for r in recs} == {backend}, out
        assert all(r["status"] == "pass" for r in recs), [(r["id"], r["status"]) for r in recs]
