"""lrkv.verify — the verification harness (DESIGN §4, §6, §7; docs/harness.md).

In dependency order (a module imports only those above it):

    case              the Case (one check) and its id
    metrics           max_abs, max_rel, mean_abs, cos_diff, sqnr_db, nonfinite_match
    bounds            the float64 rounding bound; the mpmath oracle's reference output
    tolerance         the rule, its policy (policy.toml, packaged) and judge_record
    protocol          the backend protocol; backend_registry: names and module:attr paths
    levels/           the Level protocol and its registry; one module per case level
                      (kernel, paged, extend, layer, model; tp is lrkv.distributed.level)
    grids             the default, quick, mutants and tp grids
    runner            cases x backends -> records;  tolerance_report: JSON + Markdown
    gate              PASS/FAIL/REGRESSED/MISSING/ERROR/IMPROVED/UNVERIFIED against a baseline
    builtin_backends  reference, materialized, eager, inductor (inductor.py compiles); tiled
    strategies        hypothesis strategies and the ci/dev profiles;  hunt: the false-failure hunt
    verify_cli        `lrkv verify`;  gate_cli: `lrkv gate`;  console: plain output, ::error annotations

Importing this package imports none of them. The broken backends the gate must reject live above
it, in lrkv.mutants.
"""
