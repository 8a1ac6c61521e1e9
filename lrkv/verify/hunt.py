"""Hunt for false failures: correct backends judged on many random cases.

A tolerance rule that rejects a correct backend is as wrong as one that passes a broken
one — a gate that cries wolf gets ignored. This draws cases with the hypothesis strategies
(every level and dtype the backend claims, adversarial inputs included), runs the correct
built-in backends through the harness exactly as `lrkv verify` does, and counts every
record that is not a pass (or, for rope='latent' at layer-model level, an expected
difference). It never shrinks or stops at the first failure: it measures a rate.

    python3 -m lrkv.verify.hunt --examples 2500 --out reports/hunt.json
    python3 -m lrkv.verify.hunt --backend tiled --level layer --examples 500 --seed 7

Exit 0 when no false failure was found, 1 otherwise (each is listed with its replay command).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter

from hypothesis import HealthCheck, Phase, given, seed as hypothesis_seed, settings
from hypothesis import strategies as st

from ..checks import arg_int, arg_out_file
from .backend_registry import get_backend
from .runner import not_applicable, prepare, run_case
from .strategies import cases, lrkv_specs
from .tolerance import load_policy

CORRECT = ("reference", "materialized", "eager", "tiled", "examples.my_backend:backend")
LEVELS = ("kernel", "layer", "layer-model")
MAX_T = {"kernel": 24, "layer": 24, "layer-model": 10}  # layer-model costs one decode step per token
THETAS = (10000.0, 10000.0, 500000.0, 17.0)  # the default base, Llama-3's, and an unusual small one


def _specs(level: str):
    ropes = ("none", "exact", "aligned") if level == "layer-model" else ("none", "exact", "aligned", "latent")
    return st.tuples(lrkv_specs(ropes=ropes), st.sampled_from(THETAS)).map(
        lambda sv: sv[0].replace(rope_theta=sv[1]) if sv[0].rope != "none" else sv[0])


def hunt(labels, levels, examples: int, seed: int, progress=None) -> dict:
    """Draw `examples` cases per level; run every applicable backend; collect non-passes."""
    policy = load_policy()
    backends = [(label, get_backend(label)) for label in labels]
    dtypes = ("float64", "float32", "bfloat16", "float16")
    stats = Counter()
    failures = []
    for level in levels:
        @hypothesis_seed(seed * 7919 + LEVELS.index(level))  # a different, reproducible stream per run
        @settings(max_examples=examples, database=None, deadline=None, derandomize=False,
                  phases=(Phase.generate,), suppress_health_check=list(HealthCheck))
        @given(case=cases(level=level, dtypes=dtypes, specs=_specs(level), max_t=MAX_T[level]),
               layout=st.sampled_from(("contiguous", "contiguous", "strided")))
        def one(case, layout):
            if level == "kernel":
                case = case.replace(layout=layout)
            users = [(lb, b) for lb, b in backends if not not_applicable(b, case)]
            if not users:
                return
            prep = prepare(case, policy)
            stats["cases"] += 1
            for label, b in users:
                rec = run_case(prep, b, label, policy.resolve(b.name, case.dtype))
                stats["records"] += 1
                stats[rec["status"]] += 1
                ok = rec["status"] == "pass" or (rec["status"] == "xfail" and case.expect == "differ")
                if not ok:
                    failures.append({"backend": b.name, "id": case.id, "status": rec["status"],
                                     "reason": rec["reason"], "repro": rec["repro"]})
                    print(f"FALSE FAILURE {rec['status']} {b.name} {case.id}: {rec['reason'][:300]}\n"
                          f"  {rec['repro']}", file=sys.stderr, flush=True)
            if progress is not None:
                progress(level, stats, failures)

        one()
    return {"examples_per_level": examples, "levels": list(levels), "backends": [b.name for _, b in backends],
            "seed": seed, "stats": dict(stats), "false_failures": failures}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m lrkv.verify.hunt", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", action="append", help=f"backends (default: {', '.join(CORRECT)})")
    p.add_argument("--level", action="append", choices=LEVELS, help="levels (default: all)")
    p.add_argument("--examples", type=arg_int(minimum=1), default=200, help="cases drawn per level")
    p.add_argument("--seed", type=arg_int(minimum=0), default=0)
    p.add_argument("--out", type=arg_out_file(), help="write the result as JSON")
    args = p.parse_args(argv)
    t0 = time.perf_counter()
    last = [0.0]

    def progress(level, stats, failures):
        if time.perf_counter() - last[0] > 10:
            last[0] = time.perf_counter()
            print(f"[{time.perf_counter() - t0:6.0f}s] {level}: {stats['cases']} cases, {stats['records']} records, "
                  f"{len(failures)} false failures", file=sys.stderr, flush=True)

    try:
        result = hunt(args.backend or CORRECT, args.level or LEVELS, args.examples, args.seed, progress)
    except (ValueError, TypeError) as e:
        print(f"hunt: {e}", file=sys.stderr)
        return 2
    result["seconds"] = round(time.perf_counter() - t0, 1)
    s = result["stats"]
    print(f"{s.get('cases', 0)} cases, {s.get('records', 0)} records in {result['seconds']}s: "
          f"{len(result['false_failures'])} false failures")
    for f in result["false_failures"][:20]:
        print(f"  {f['status'].upper()} {f['backend']} {f['id']}: {f['reason'][:200]}\n    {f['repro']}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    return 1 if result["false_failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
