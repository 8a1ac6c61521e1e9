"""The standard for `reconciled` (docs/proofs.md, "Statuses"): one assumption, declared before any
search, that reproduces the printed value under round-to-nearest — and nothing one printed unit
away. Each record that was disputed is fed its printed value moved by ±1 unit and must not
reconcile; each record that does reconcile must not reconcile its perturbations either.

Run: pytest -m proofs tests/proofs/test_reconciled_standard.py
"""

from __future__ import annotations

import copy
from fractions import Fraction

import pytest

from lrkv.proofs.paper import data
from lrkv.proofs.paper.readings import audit, perturbed, range_audit, range_reproduced
from lrkv.proofs.registry import EXPECTED, REGISTRY, load_all

pytestmark = pytest.mark.proofs

load_all()


def _set(table, path, value):
    t = copy.deepcopy(table)
    node = t
    for k in path[:-1]:
        node = node[k]
    node[path[-1]] = value
    return t


def test_perturbation_and_range_helpers():
    assert perturbed("48.4") == ["48.3", "48.5"] and perturbed("0.526") == ["0.525", "0.527"]
    assert perturbed("648.0") == ["647.9", "648.1"] and perturbed("45") == ["44", "46"]
    a = audit(lambda p: [1] if p == "48.4" else [], "48.4", 1)
    assert a["is_evidence"] and a["matching_perturbed"] == {"48.3": 0, "48.5": 0}
    assert not audit(lambda p: [1], "48.4", 1)["is_evidence"]  # fits everything: shows nothing
    vals = [Fraction(4531, 100), Fraction(5260, 100)]
    assert range_reproduced(vals, "45", "53") and not range_reproduced(vals, "44", "53")
    assert not any(range_audit(vals, "45", "53")["perturbed_ranges_reproduced"].values())


# (record, keyword, a function of the printed value giving that keyword's table, the printed values)
PERTURBED = [
    ("paper_table12_pct_2p5b", "printed", lambda v: _set(data.TABLE12, ("rows", "2.5B", "pct"), v),
     ["48.3", "47.0", "48.6", "49.0"]),  # the old 28-reading search reconciled 47.0, 48.6 and 49.0 too
    ("paper_table12_pct_128m", "printed", lambda v: _set(data.TABLE12, ("rows", "128M", "pct"), v), ["52.5", "52.7"]),
    ("paper_table12_pct_6p3b", "printed", lambda v: _set(data.TABLE12, ("rows", "6.3B", "pct"), v), ["45.0", "45.2"]),
    ("paper_g4_128m", "printed", lambda v: _set(data.APPENDIX_G4, ("lines", "128M", "printed_fraction"), v),
     ["0.525", "0.527"]),
    ("paper_g4_2p5b", "printed", lambda v: _set(data.APPENDIX_G4, ("lines", "2.5B", "printed_fraction"), v),
     ["0.483", "0.485"]),
    ("paper_table12_bytes", "printed", lambda v: _set(data.TABLE12, ("rows", "2.5B", "mha"), v), ["647.9", "648.1"]),
    ("paper_table12_bytes", "printed", lambda v: _set(data.TABLE12, ("rows", "2.5B", "lrkv"), v), ["359.9", "360.1"]),
    # the summary's own 15% no longer answers for a tampered 14–16%; containment no longer reconciles
    ("v1_flops_reduction", "printed", lambda v: _set(data.V1_SUMMARY, ("flops_reduction_pct",), v),
     [("14", "16"), ("19", "25"), ("21", "25"), ("20", "24"), ("20", "26")]),
    ("paper_cache_reduction_range", "printed", lambda v: _set(data.CACHE_REDUCTION, ("printed_range_pct",), v),
     [("44", "53"), ("46", "53"), ("45", "52"), ("45", "54")]),
    ("paper_table8_fractions", "printed", lambda v: _set(data.TABLE8, ("mla_pct", 192), v), ["12-4", "12-6"]),
    ("paper_table8_mla384_prose", "printed", lambda v: _set(data.TABLE8, ("prose_mla384_pct",), v), ["49", "51"]),
]


@pytest.mark.parametrize("name,key,make,values", PERTURBED, ids=[f"{n}:{v[0]}" for n, _, _, v in PERTURBED])
def test_a_perturbed_printed_value_does_not_reconcile(name, key, make, values):
    for v in values:
        p = REGISTRY[name].fn(**{key: make(v)})
        assert p.status != "reconciled", f"{name} reconciled a perturbed printed value {v}: {p.assumption}"


def test_the_declared_assumption_still_reconciles_where_it_fits():
    """The standard can say yes: 48.5% at 2.5B is Table 7's rank 55; the printed 128M 52.6% is rank 46."""
    p = REGISTRY["paper_table12_pct_2p5b"].fn(printed=_set(data.TABLE12, ("rows", "2.5B", "pct"), "48.5"))
    assert p.status == "reconciled" and "rank 55" in p.assumption
    q = REGISTRY["paper_table12_pct_128m"].fn()
    assert q.status == "reconciled" and q.evidence["declared_audit"]["is_evidence"]


def test_wider_searches_report_their_size_and_perturbation_hits():
    p = REGISTRY["paper_table12_pct_2p5b"].fn()
    rs = p.evidence["rule_search"]
    assert rs["candidates_tried"] == 28 and rs["matching_printed"] == 1 and rs["matching_perturbed"]["48.5"] == 3
    assert not rs["is_evidence"] and p.status == "inconsistent"
    b = REGISTRY["paper_table12_bytes"].fn().evidence["search_audit_2p5b_mha"]
    assert b["candidates_tried"] == 2 * 4 * 7 * 6 * 128 * 257 and b["matching_printed"] == 48
    f = REGISTRY["v1_flops_reduction"].fn().evidence["readings"]["v3_fig3_compute_savings"]
    assert f["mean_in_range"] and not f["reproduced"]  # inside the range, and not evidence of it


def test_every_reconciled_record_names_one_assumption():
    for name in [n for n, e in EXPECTED.items() if e == "reconciled"]:
        p = REGISTRY[name].fn()
        if p.status == "reconciled":
            assert p.assumption and " and " not in p.assumption.split("(")[0], f"{name}: {p.assumption}"
