"""lrkv.verify — the verification harness (DESIGN §4, §6, §7; docs/harness.md).

    backend     the backend protocol, BaseBackend, the registry (names and module:attr paths)
    backends    built-ins: reference, materialized, eager, inductor, inductor-cudagraphs  (inductor.py
                compiles: CPU, or CUDA through inductor's Triton)
    tiled       a tiled split-K online-softmax decode in plain PyTorch (backend `tiled`)
    cases       Case, input drawing (rounded to the case dtype); grid.py: default/quick/mutants
    metrics     max_abs, max_rel, mean_abs, cos_diff, sqnr_db, nonfinite_match
    tolerance   the rule, its policy (policy.toml, packaged) and judge_record; bounds.py: float64 bound, mpmath oracle
    runner      cases x backends -> records;  report: JSON (report.schema.json) + Markdown
    gate        PASS/FAIL/REGRESSED/MISSING/ERROR/IMPROVED against ci/baseline.json
    strategies  hypothesis strategies and the ci/dev profiles
    mutants     deliberately broken backends the gate must reject
    cli         `lrkv verify`, `lrkv gate`;  console: plain unwrapped output, ::error annotations, summary table
"""
