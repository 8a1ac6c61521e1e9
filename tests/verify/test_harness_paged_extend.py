"""The harness's paged-decode and extend levels (DESIGN §4): their Case fields, inputs and
grid coverage; a decode-only backend gets them recorded as "not implemented" skips; and the
tolerance rule passes the oracle's own paths on random paged / extend cases."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings

from lrkv.spec import AttentionSpec
from lrkv.verify.backend_registry import get_backend
from lrkv.verify.builtin_backends import ReferenceBackend
from lrkv.verify.case import Case
from lrkv.verify.grids import default_grid
from lrkv.verify.levels.extend import make_extend_inputs
from lrkv.verify.levels.paged import make_paged_inputs
from lrkv.verify.runner import prepare, run, run_case
from lrkv.verify.strategies import cases
from lrkv.verify.tolerance import load_policy

SPEC = AttentionSpec.lrkv(2, 8, 3, rope="exact", qk_norm=True)
POLICY = load_policy()


@pytest.mark.parametrize("kw,exc,match", [
    (dict(level="kernel-paged"), ValueError, "page_size"),
    (dict(level="kernel-paged", page_size=-1), ValueError, "page_size"),
    (dict(level="kernel", page_size=4), ValueError, "kernel-paged and kernel-extend only"),
    (dict(level="kernel-paged", page_size=4, shared_prefix=6), ValueError, "whole number of pages"),
    (dict(level="kernel-paged", page_size=4, shared_prefix=12), ValueError, "must not exceed"),
    (dict(level="kernel-paged", page_size=4, page_shuffle="yes"), TypeError, "page_shuffle"),
    (dict(level="kernel-extend"), ValueError, "n_new must give one count per sequence"),
    (dict(level="kernel-extend", n_new=(1, 9)), ValueError, r"n_new\[1\] = 9 exceeds lengths\[1\]"),
    (dict(level="kernel-extend", n_new=(1, -1)), ValueError, r"n_new\[1\]"),
    (dict(level="kernel-extend", n_new=(1, 1), tile=4), ValueError, "kernel-extend cases take none"),
    (dict(level="kernel", n_new=(1, 1)), ValueError, "n_new applies to level kernel-extend only"),
    (dict(level="kernel-paged", page_size=4, layout="strided"), ValueError, "layout"),
])
def test_case_fields_are_validated_by_name(kw, exc, match):
    with pytest.raises(exc, match=match):
        Case.flat(spec=SPEC, dtype="float64", lengths=kw.pop("lengths", (9, 8)), t_max=12, **kw)


def test_case_json_round_trip():
    for c in (Case.flat("kernel-paged", SPEC, "float32", (9, 8), 12, page_size=4, shared_prefix=8, page_shuffle=False),
              Case.flat("kernel-extend", SPEC, "bfloat16", (9, 0), 12, n_new=(3, 0), page_size=5)):
        back = Case.from_json(c.to_json())
        assert back == c and back.id == c.id and "+page" in c.id


def test_paged_inputs_shuffle_share_and_fill_unused_pages_with_nan():
    case = Case.flat("kernel-paged", SPEC, "float64", (9, 8, 0), 12, page_size=4, shared_prefix=8)
    inp = make_paged_inputs(case)
    table = inp.cache.page_table
    assert table.dtype == torch.int32 and table.shape == (3, 3)
    assert torch.equal(table[0, :2], table[1, :2])  # the common prefix: the same physical pages
    read = {int(table[b, i]) for b, n in enumerate(case.lengths) for i in range(-(-n // 4))}
    unused = [p for p in range(inp.cache.shared_k.shape[0]) if p not in read]
    assert len(unused) >= 2 + 2 + 3  # spare pages, sequence 1's own prefix copies, the empty sequence's
    assert inp.cache.shared_k[unused].isnan().all() and inp.cache.latent_v[unused].isnan().all()
    in_order = make_paged_inputs(case.replace(page_shuffle=False, shared_prefix=0)).cache.page_table
    assert in_order.flatten().tolist() == list(range(9)) and not torch.equal(table, in_order)


def test_extend_inputs_are_ragged_last_tokens():
    case = Case.flat("kernel-extend", SPEC, "float32", (9, 8, 4), 12, n_new=(3, 0, 4), page_size=5)
    inp = make_extend_inputs(case)
    assert inp.q.shape == (7, 2, 8) and inp.cu_seqlens_q.tolist() == [0, 3, 3, 7]
    assert inp.cache.page_table is not None and inp.q.dtype == torch.float32
    contiguous = make_extend_inputs(case.replace(page_size=0))
    assert contiguous.cache.page_table is None and torch.equal(contiguous.q, inp.q)


def test_default_grid_covers_paged_and_extend():
    grid = default_grid()
    paged = [c for c in grid if c.level == "kernel-paged"]
    extend = [c for c in grid if c.level == "kernel-extend"]
    sized = [c for c in paged + extend if c.pages and c.pages.size]
    assert {1, 16} <= {c.pages.size for c in sized} and any(c.t_max % c.pages.size for c in sized)
    assert any(c.pages.shuffle for c in paged) and any(not c.pages.shuffle for c in paged)
    assert any(c.pages.shared_prefix for c in paged) and any(c.pages and c.pages.shared_prefix for c in extend)
    assert any(c.nan_garbage for c in paged) and any(not c.nan_garbage for c in paged)
    assert any(c.pages is None for c in extend) and any(c.pages for c in extend)
    # n_b of 0, 1, 2–8 and a 64+ chunk in ONE ragged batch
    assert any({0, 1} <= set(c.extend.n_new) and any(2 <= n <= 8 for n in c.extend.n_new) and max(c.extend.n_new) >= 64
               for c in extend)
    # lengths at page boundaries, and at tile boundaries (16, 32 + 1)
    assert any(n and n % c.pages.size == 0 for c in sized for n in c.lengths)
    assert any({16, 33} <= set(c.lengths) for c in paged)
    assert {c.spec.rope for c in paged + extend} >= {"none", "exact", "aligned"}
    assert any(c.spec.qk_norm for c in paged) and any(c.spec.qk_norm for c in extend)


def test_decode_only_backend_gets_not_implemented_skips():
    grid = [c for c in default_grid() if c.level in ("kernel-paged", "kernel-extend")]
    mine = get_backend("tiled")  # decode and the layer step only
    assert not {"kernel-paged", "kernel-extend"} & mine.levels
    recs = run(grid, [("tiled", mine)], POLICY)
    assert len(recs) == len(grid)  # one record per case: never dropped
    assert all(r["status"] == "skip" and r["reason"].startswith("not implemented") for r in recs), \
        {(r["status"], r["reason"]) for r in recs}


def _judge(case, backend_name):
    prep = prepare(case, POLICY)
    assert not prep.inconsistent, prep.inconsistent
    b = get_backend(backend_name)
    return run_case(prep, b, backend_name, POLICY.resolve(b.name, case.dtype))


@pytest.mark.equivalence
@settings(max_examples=10)
@given(cases(level="kernel-paged", dtypes=("float64", "float32", "bfloat16"), max_t=20))
def test_oracle_paths_pass_random_paged_cases(case):
    rec = _judge(case, "reference" if case.dtype == "float64" else "eager")
    assert rec["status"] == "pass", (rec["reason"], rec["repro"])


@pytest.mark.equivalence
@settings(max_examples=10)
@given(cases(level="kernel-extend", dtypes=("float64", "float32", "float16"), max_t=20))
def test_oracle_paths_pass_random_extend_cases(case):
    rec = _judge(case, "materialized" if case.dtype == "float64" else "eager")
    assert rec["status"] == "pass", (rec["reason"], rec["repro"])


@pytest.mark.parametrize("label,level", [("examples.my_paged_backend:backend", "kernel-paged"),
                                         ("examples.my_extend_backend:backend", "kernel-extend")])
def test_readme_example_backends_pass_their_level(label, level):
    grid = [c for c in default_grid() if c.level == level]
    recs = run(grid, [(label, get_backend(label))], POLICY)
    skips = [r for r in recs if r["status"] == "skip"]
    assert len(recs) - sum("twin" in r for r in recs) == len(grid)  # one record per case, plus twins
    assert sum("twin" in r for r in recs) == len(skips)  # each declined float64 case ran at its twin
    judged = [r for r in recs if r["status"] != "skip"]
    assert judged and all(r["status"] == "pass" for r in judged), [(r["id"], r["reason"]) for r in judged]
    # float64 (a dtype it lacks) and the fp8 caches (it reads none), each run at its twin
    assert all(r["reason"].startswith(("dtype", "cache ")) for r in recs if r["status"] == "skip")


class _Vandal(ReferenceBackend):
    """Correct answers, then it scribbles over every tensor it was handed (a kernel that uses
    its inputs as scratch): the next backend of the same case must not see the damage."""

    name = "vandal"
    role = "verified"

    @staticmethod
    def _scribble(args, kwargs):
        for t in [*args, *kwargs.values()]:
            if isinstance(t, torch.Tensor):
                t.fill_(float("nan") if t.is_floating_point() else 0)

    def decode_attention(self, *args, **kw):
        out = tuple(o.clone() for o in super().decode_attention(*args, **kw))
        self._scribble(args, kw)
        return out

    def paged_decode_attention(self, *args, **kw):
        out = tuple(o.clone() for o in super().paged_decode_attention(*args, **kw))
        self._scribble(args, kw)
        return out

    def extend_attention(self, *args, **kw):
        out = tuple(o.clone() for o in super().extend_attention(*args, **kw))
        self._scribble(args, kw)
        return out


@pytest.mark.parametrize("level", ["kernel", "kernel-paged", "kernel-extend"])
def test_each_backend_gets_its_own_copy_of_the_inputs(level):
    # The vandal runs first on every case and wrecks what it was given; the honest reference
    # after it must still pass everything — the runner hands each backend a copy (with the
    # drawn strides) of the prepared inputs, never the shared ones.
    grid = [c for c in default_grid() if c.level == level and c.dtype == "float64"][:4]
    assert grid
    recs = run(grid, [("vandal", _Vandal()), ("reference", get_backend("reference"))], POLICY)
    honest = [r for r in recs if r["backend"] == "reference"]
    assert len(honest) == len(grid)
    assert all(r["status"] == "pass" for r in honest), [(r["id"], r["reason"]) for r in honest]
