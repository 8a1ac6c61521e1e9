"""Pools as servers allocate them (lrkv.reference.cache_layouts.pool_views; DESIGN §4 "Pool
views"): the parts handed over as views of a larger allocation with the same values and NaN
between them, kept on a move to another device, taken by our Triton kernels without a copy
where one first-axis stride addresses them; a backend that needs dense pools declares it and
its view cases run at their dense twins — shown in the coverage table, refused by the gate
against a baseline that covered them."""

from __future__ import annotations

import json
import math

import pytest
import torch

from lrkv.cli import main
from lrkv.reference.cache_layouts import CACHE_LAYOUTS
from lrkv.reference.cache_layouts.pool_views import FP8_ROW_BYTES, OFFSET, PAGE_GAP, VIEWS, padded_width, rehome
from lrkv.reference.cache import moved
from lrkv.reference.fp8 import PARTS
from lrkv.spec import AttentionSpec
from lrkv.verify import gate
from lrkv.verify.case import Case
from lrkv.verify.features import case_features
from lrkv.verify.levels import get_level
from lrkv.verify.protocol import normalize_backend

SPEC = AttentionSpec.lrkv(3, 8, 2)


def _case(view: str, hnd: bool = False, **kw) -> Case:
    return Case.flat("kernel-paged", SPEC, "float32", (5, 8, 0, 4), 12, page_size=4, page_hnd=hnd, pool_view=view,
                     seed=3, **kw)


def _storage(t: torch.Tensor) -> torch.Tensor:
    return torch.as_strided(t, (t.untyped_storage().nbytes() // t.element_size(),), (1,), 0)


@pytest.mark.parametrize("layout", CACHE_LAYOUTS)
@pytest.mark.parametrize("view", VIEWS[1:])
@pytest.mark.parametrize("hnd", [False, True])
def test_views_hold_the_same_values_with_nan_between(layout, view, hnd):
    dense = get_level("kernel-paged").make_inputs(_case("dense", hnd)).in_layout(layout).named_tensors()
    laid = get_level("kernel-paged").make_inputs(_case(view, hnd)).in_layout(layout).named_tensors()
    parts = [n for n in ("kv_rows", *PARTS) if n in laid]
    for name in parts:
        d, v = dense[name], laid[name]
        assert v.shape == d.shape and v.stride() != d.stride(), name  # a view, not a dense copy
        assert torch.equal(v.isnan(), d.isnan()) and torch.equal(v.nan_to_num(), d.nan_to_num()), name
        # every element of the allocation no part owns is NaN
        owned = sum(laid[n].numel() for n in parts if laid[n].untyped_storage().data_ptr() == v.untyped_storage().data_ptr())
        assert int(_storage(v).isnan().sum()) >= _storage(v).numel() - owned
        assert v.stride(0) != math.prod(v.shape[1:])  # a pitch from the shape is wrong
    for name in set(laid) - set(parts):  # page tables, lengths, key scales: as they were
        assert laid[name].stride() == dense[name].stride(), name
    if view == "kv-interleaved" and "shared_v" in laid:  # K and V of a page in one allocation
        k, v = laid["shared_k"], laid["shared_v"]
        assert k.untyped_storage().data_ptr() == v.untyped_storage().data_ptr()
        assert v.storage_offset() - k.storage_offset() == k.stride(0) // 2
    if view != "kv-interleaved":
        t = laid[parts[0]]
        assert t.storage_offset() == OFFSET and t.stride(0) >= math.prod(t.shape[1:]) + PAGE_GAP


def test_fused_fp8_rows_are_padded_to_flashmla_656_bytes():
    assert padded_width(112, torch.float8_e4m3fn, fused_row=True) == FP8_ROW_BYTES
    assert padded_width(656, torch.float8_e4m3fn, fused_row=True) == 2 * FP8_ROW_BYTES  # at least one more
    assert padded_width(32, torch.bfloat16, fused_row=True) == 48 and padded_width(6, torch.float8_e5m2, False) == 16
    rows = torch.zeros(3, 4, 112).to(torch.float8_e4m3fn)
    out = rehome({"kv_rows": rows}, "rows-padded", fused_row=True)["kv_rows"]
    assert out.stride(1) == FP8_ROW_BYTES and out.dtype == torch.float8_e4m3fn
    assert _storage(out).view(torch.uint8)[OFFSET + 112] == 0x7F  # e4m3fn's NaN in the padding


def test_a_move_to_another_device_keeps_the_view():
    inp = get_level("kernel-paged").make_inputs(_case("kv-interleaved"))
    k = inp.named_tensors()["shared_k"]
    m = moved(k, "meta")
    assert m.device.type == "meta" and (m.stride(), m.storage_offset()) == (k.stride(), k.storage_offset())
    assert moved(k, "cpu") is k


@pytest.mark.parametrize("view,copied", [("kv-interleaved", False), ("pages-apart", False), ("rows-padded", True)])
def test_the_triton_kernels_take_a_first_axis_pitch_without_a_copy(view, copied):
    from lrkv.kernels.decode import _dense_pair

    laid = get_level("kernel-paged").make_inputs(_case(view)).named_tensors()
    for k, v in (("shared_k", "shared_v"), ("latent_k", "latent_v")):
        got = _dense_pair(laid[k], laid[v])
        assert (got[0] is not laid[k] and got[1] is not laid[v]) == copied, (view, k)


def test_case_option_round_trips_and_names_itself():
    case = _case("rows-padded", hnd=True)
    assert case.id.endswith("+page4+hnd+rows-padded") and Case.from_json(case.to_json()) == case
    assert "pool a view: row pitch padded" in case_features(case)
    assert not {f for f in case_features(_case("dense")) if f.startswith("pool a view")}
    with pytest.raises(ValueError, match="pool_view must be one of"):
        _case("strided")
    with pytest.raises(ValueError, match="pool_view need page_size >= 1"):
        Case.flat("kernel-extend", SPEC, "float32", (5, 8), 12, n_new=(1, 1), pool_view="pages-apart")


class _DensePools:
    """A correct paged kernel (the example's) that needs dense pools, and says so."""

    name, levels, dtypes, pool_views = "dense-only", frozenset({"kernel-paged"}), (torch.float32,), ("dense",)

    def __init__(self):
        from examples.my_paged_backend import PagedDecode

        self._inner = PagedDecode()

    def available(self):
        return True, ""

    def paged_decode_attention(self, *a, **kw):
        return self._inner.paged_decode_attention(*a, **kw)


@pytest.mark.parametrize("bad,match", [("dense", "must be a tuple"), (("dense", "strided"), "unknown"),
                                       (("kv-interleaved",), "must include 'dense'")])
def test_pool_views_claims_are_checked(bad, match):
    b = _DensePools()
    b.pool_views = bad
    with pytest.raises((TypeError, ValueError), match=match):
        normalize_backend(b, "x")


def test_a_backend_that_needs_dense_pools_runs_dense_twins_and_the_gate_sees_it(tmp_path, monkeypatch):
    import sys
    import types

    cases = [a for v in VIEWS for a in ("--case", _case(v).to_json())]
    mod = types.ModuleType("planted_views")
    mod.taking, mod.dense = type("Taking", (_DensePools,), {"pool_views": VIEWS})(), _DensePools()
    monkeypatch.setitem(sys.modules, "planted_views", mod)
    assert main(["verify", "--backend", "planted_views:taking", *cases, "--out", str(tmp_path / "all"),
                 "--no-progress"]) == 0
    base = tmp_path / "b.json"
    assert main(["gate", str(tmp_path / "all" / "report.json"), "--baseline", str(base), "--update-baseline"]) == 0

    assert main(["verify", "--backend", "planted_views:dense", *cases, "--out", str(tmp_path / "d"),
                 "--no-progress"]) == 0
    rep = json.loads((tmp_path / "d" / "report.json").read_text())
    recs = rep["records"]
    declined = [r for r in recs if r["status"] == "skip"]
    assert [r["reason"].split(";")[0] for r in declined] == [f"unsupported: pool view '{v}'" for v in VIEWS[1:]]
    twins = [r for r in recs if "twin" in r]
    assert [(r["twin"]["changes"], r["status"], r["case"]["pool_view"]) for r in twins] == \
        [("pool_view=dense", "pass", "dense")] * 3
    table = rep["coverage"]["dense-only"]["kernel-paged"]["features"]
    assert {table[f]["status"] for f in table if f.startswith("pool a view")} == {"not supported"}
    assert rep["backends"][0]["pool_views"] == ["dense"]
    # the same backend's report gated against the baseline of one that took views: coverage shrank
    entries = gate.classify(rep, json.loads(base.read_text()) | {"entries": {}})
    shrunk = {e.case_id for e in entries if e.klass == "UNCOVERED"}
    assert {"coverage:kernel-paged:pool a view: K/V interleaved", "coverage:kernel-paged:pool a view: pages apart",
            "coverage:kernel-paged:pool a view: row pitch padded"} <= shrunk


def test_a_failure_on_a_view_says_the_pools_are_views():
    from lrkv.mutants.layouts import BlockPitchFromShape
    from lrkv.verify.cells import where_lines
    from lrkv.verify.runner import run
    from lrkv.verify.tolerance import load_policy

    recs = run([_case("dense"), _case("pages-apart")], [("m", BlockPitchFromShape())], load_policy())
    assert [r["status"] for r in recs] == ["pass", "fail"]
    assert "the pools are views of a larger allocation (pool_view pages-apart" in " ".join(where_lines(recs[1]))
