"""A case's JSON form and id are those of the flat record they always were: every case of the
built-in grids and of a default and a Triton report written before the case core and its
options (lrkv/verify/options/) replays byte for byte (`--case`, the gate and old reports read them)."""

import gzip
import json
from pathlib import Path

import pytest

from lrkv.verify import grids
from lrkv.verify.case import OPTIONS, Case, case_shapes

FIXTURE = Path(__file__).with_name("cases_before_options.jsonl.gz")  # to_json of each case, id included


ADDED_SINCE = {"page_hnd": False, "page_pool": 0, "pool_view": "dense"}  # keys added to the flat form later, at their defaults


def test_every_recorded_case_round_trips_to_the_same_json_and_id():
    lines = gzip.open(FIXTURE, "rt").read().splitlines()
    assert len(lines) > 250
    for line in lines:
        case = Case.from_json(line)
        assert case.to_dict() == {**json.loads(line), **ADDED_SINCE} and case.id == json.loads(line)["id"]


@pytest.mark.parametrize("grid", [grids.default_grid, grids.quick_grid, grids.mutant_grid, lambda: grids.tp_grid(2)])
def test_every_grid_case_round_trips(grid):
    for case in grid():
        assert Case.from_json(case.to_json()) == case and Case.from_json(case.to_json()).id == case.id


def test_an_option_at_its_defaults_is_absent_and_the_json_stays_flat():
    case = Case.flat("kernel-extend", grids.BASE, "float32", (9, 8), 12, n_new=(3, 0), page_size=0,
                     scale_granularity="")
    assert case.pages is None and case.fp8 is None and case.extend.n_new == (3, 0)
    d = case.to_dict()
    assert not set(OPTIONS) & set(d) and d["page_size"] == 0 and d["n_new"] == [3, 0]
    assert case_shapes(case)["n_new"] == [3, 0] and "page_size" not in case_shapes(case)
    assert case.replace(page_size=4).pages.size == 4 and case.replace(seed=3).id.endswith(":s3+new3-0")


def test_an_option_of_the_wrong_type_is_refused():
    with pytest.raises(TypeError, match="pages must be a Paged"):
        Case("kernel-paged", grids.BASE, "float32", (9,), 12, pages=4)
