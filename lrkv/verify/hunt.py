"""Hunt for false failures: correct backends judged on many random cases.

A tolerance rule that rejects a correct backend is as wrong as one that passes a broken
one — a gate that cries wolf gets ignored. This draws cases with the hypothesis strategies
at every kernel and layer level (kernel, kernel-paged, kernel-extend, layer, layer-model),
at every dtype the hunted backends claim, adversarial inputs included, and runs them through
the harness's `runner.run` exactly as `lrkv verify` does. Every record that is not a pass —
a skip (the backend declined) and, for rope='latent' at layer-model level, an expected
difference aside — is a false failure. It never shrinks or stops at the first failure: it
measures a rate.

    python3 -m lrkv.verify.hunt --examples 2500 --out reports/hunt.json
    python3 -m lrkv.verify.hunt --backend tiled --level layer --examples 500 --seed 7
    TRITON_INTERPRET=1 python3 -m lrkv.verify.hunt --backend triton --level kernel-extend --examples 60
    python3 -m lrkv.verify.hunt --fp8 --examples 1000 --seed 3     (every case with an fp8 cache)
    python3 -m lrkv.verify.hunt --fp8-compute --backend tiled-fp8-compute --level kernel
                                                                  (... and FA3-style roundings)
    python3 -m lrkv.verify.hunt --examples 2000 --seed 9 --report reports/hunt-2 --shard 2/4
          (one machine's part of a hunt, as a tolerance report; on each of 4 machines, then
           `lrkv merge reports/hunt-* --out reports/hunt` and `lrkv gate reports/hunt/report.json --baseline B`)

Exit 0 when no false failure was found, 1 otherwise (each is listed with its replay command),
2 on a usage error (an unknown or unavailable backend, a level no hunted backend declares).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections import Counter

from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import seed as hypothesis_seed
from hypothesis import strategies as st

from ..checks import arg_int, arg_out_dir, arg_out_file
from ..spec import dtype_name
from .backend_registry import get_backend
from .case import DTYPES, FP8_LEVELS, Case, Paged
from .levels import get_level
from .protocol import check_available
from .runner import not_applicable, run
from .server_properties import plan
from .shards import Shard, shard_cases
from .strategies import PAGED_LEVELS, cases, lrkv_specs, with_fp8
from .tolerance import load_policy

CORRECT = ("reference", "materialized", "eager", "tiled", "examples.my_backend:backend",
           "examples.my_paged_backend:backend", "examples.my_extend_backend:backend",
           "examples.my_vllm_backend:backend", "examples.my_flashinfer_backend:backend")
# new levels go last: a level's hypothesis stream is seeded by its index, so old seeds replay
LEVELS = ("kernel", "layer", "layer-model", "kernel-paged", "kernel-extend")
# layer-model costs one decode step per token; paged / extend need room for several pages and chunks
MAX_T = {"kernel": 24, "layer": 24, "layer-model": 10, "kernel-paged": 32, "kernel-extend": 32}
THETAS = (10000.0, 10000.0, 500000.0, 17.0)  # the default base, Llama-3's, and an unusual small one


def _specs(level: str):
    ropes = ("none", "exact", "aligned") if level == "layer-model" else ("none", "exact", "aligned", "latent")
    return st.tuples(lrkv_specs(ropes=ropes), st.sampled_from(THETAS)).map(
        lambda sv: sv[0].replace(rope_theta=sv[1]) if sv[0].rope != "none" else sv[0])


def declares(backend, level: str) -> bool:
    return get_level(level).needs in backend.levels


def claimed_dtypes(backends, level: str) -> tuple[str, ...]:
    """Every dtype some hunted backend that declares `level` claims (in DTYPES order)."""
    claimed = {dtype_name(d) for _, b in backends if declares(b, level) for d in b.dtypes}
    return tuple(d for d in DTYPES if d in claimed)


def draw_cases(level: str, dtypes: tuple[str, ...], examples: int, seed: int, fp8: bool = False,
               rounding: bool = False) -> list[Case]:
    """`examples` cases of `level`, reproducibly from `seed` (a different stream per level);
    fp8: each with an fp8 cache (`strategies.with_fp8`; kernel levels); rounding: and the
    kernel levels' cases with FA3-style roundings (fp8 compute)."""
    drawn: list[Case] = []

    @hypothesis_seed(seed * 7919 + LEVELS.index(level))
    @settings(max_examples=examples, database=None, deadline=None, derandomize=False,
              phases=(Phase.generate,), suppress_health_check=list(HealthCheck))
    @given(case=cases(level=level, dtypes=dtypes, specs=_specs(level), max_t=MAX_T[level]),
           layout=st.sampled_from(("contiguous", "contiguous", "strided")))
    def one(case, layout):
        drawn.append(case.replace(layout=layout) if level == "kernel" else case)

    one()
    return [with_fp8(c, rounding) for c in drawn] if fp8 or rounding else drawn


def coverage(level: str, drawn: list[Case]) -> dict:
    """What the drawn cases of one level exercised (so a log shows the features were hit)."""
    c: dict[str, Counter] = {k: Counter() for k in ("dtype", "rope", "batch", "lengths", "garbage")}
    for case in drawn:
        s = case.spec
        c["dtype"][case.dtype] += 1
        c["rope"][s.rope + ("+qk_norm" if s.qk_norm else "")] += 1
        c["batch"]["1" if case.batch == 1 else "2-3" if case.batch <= 3 else "4-9" if case.batch < 10 else ">=10"] += 1
        c["garbage"]["nan" if case.nan_garbage else "finite"] += 1
        if case.cache_fp8:
            f = case.fp8
            c.setdefault("fp8", Counter())[f.label + ("+outliers" if f.outliers else "")
                                           + (f"+fp8compute.{f.compute}" if f.compute else "")] += 1
        for n in case.lengths:
            c["lengths"]["0" if n == 0 else "1" if n == 1 else "t_max" if n == case.t_max
                         else "page boundary" if case.pages and case.pages.size and n % case.pages.size == 0
                         else "other"] += 1
        if len(set(case.lengths)) > 1:
            c["lengths"]["varlen batches"] += 1
    if level == "kernel":
        c["layout"] = Counter(case.layout for case in drawn)
    if level in PAGED_LEVELS:
        pages = [(case, case.pages or Paged()) for case in drawn]
        c["page_size"] = Counter(str(p.size) for _, p in pages)
        c["pages"] = Counter()
        for case, p in pages:
            if p.size:
                c["pages"]["shuffled" if p.shuffle else "in order"] += 1
                c["pages"]["page size not dividing t_max"] += bool(case.t_max % p.size)
                c["pages"]["shared prefix"] += bool(p.shared_prefix)
                c["pages"]["head-major (HND)"] += p.hnd
                c.setdefault("pool_view", Counter())[p.view] += 1
    if level == "kernel-extend":
        c["n_new"] = Counter()
        for new in (case.extend.n_new for case in drawn):
            for n in new:
                c["n_new"]["0" if n == 0 else "1" if n == 1 else "2-8" if n <= 8 else ">8"] += 1
            c["n_new"]["idle batches (all 0)"] += not sum(new)
    out = {"cases": len(drawn), "max_batch": max((case.batch for case in drawn), default=0),
           "max_t": max((case.t_max for case in drawn), default=0)}
    out.update({k: dict(sorted((str(a), b) for a, b in v.items() if b)) for k, v in c.items()})
    return out


def is_false_failure(rec: dict) -> bool:
    """A record a correct backend must not produce: anything but a pass or a skip (declined),
    except an expected difference (rope='latent' at layer-model level, expect='differ')."""
    status = rec["status"]
    return not (status in ("pass", "skip") or (status == "xfail" and rec.get("expect") == "differ"))


def hunt(labels, levels, examples: int, seed: int, progress=None, *, strict: bool = False,
         properties: bool = False, fp8: bool = False, rounding: bool = False, shard=None,
         report: dict | None = None) -> dict:
    """Draw `examples` cases per level; run them through `runner.run`; collect non-passes.

    strict: a level that no hunted backend declares is an error (else it is left out).
    properties: also run the server properties (server_properties.py) on their share of the
    drawn cases; a required one that fails on a correct backend is a false failure too.
    fp8: the kernel and layer levels only, every case with an fp8 cache (`strategies.with_fp8`);
    rounding: as fp8, the kernel levels' cases also with FA3-style roundings (fp8 compute).
    report: a dict to receive what a tolerance report of the hunt needs (its `cases`, in order,
    each once; `records`; `backends`; `policy`); shard: a shards.Shard — run only its part of
    those cases (split as `lrkv verify --shard` splits a grid), their server-property share
    counted over all of them."""
    fp8 = fp8 or rounding
    policy = load_policy()
    backends = [(label, get_backend(label)) for label in labels]
    for label, b in backends:
        ok, why = check_available(b, label)
        if not ok:
            raise ValueError(f"backend {label!r} is unavailable: {why}")
    stats: Counter = Counter()
    by_level: dict[str, dict[str, Counter]] = {}
    drawn_coverage: dict[str, dict] = {}
    failures: list[dict] = []
    run_levels, planned = [], []
    for level in levels:
        if fp8 and level not in FP8_LEVELS:
            if strict:
                raise ValueError(f"--fp8: fp8 caches exist at the levels {', '.join(FP8_LEVELS)} only, not {level!r}")
            continue
        users = [(lb, b) for lb, b in backends if declares(b, level)]
        if not users:
            if strict:
                raise ValueError(f"no hunted backend declares level {level!r} "
                                 f"({', '.join(b.name for _, b in backends)})")
            continue
        run_levels.append(level)
        drawn = draw_cases(level, claimed_dtypes(users, level), examples, seed, fp8, rounding)
        if report is not None or shard is not None:  # a report holds one record per case: each drawn case once
            drawn = list({c.id: c for c in reversed(drawn)}.values())[::-1]
        planned.append((level, users, drawn))
    everything = [c for _, _, drawn in planned for c in drawn]
    shares = plan(everything)
    mine = {c.id for c in shard_cases(everything, shard)} if shard is not None else None
    if report is not None:
        report.update(cases=everything, records=[], backends=backends, policy=policy)
    for level, users, drawn in planned:
        if mine is not None:
            drawn = [c for c in drawn if c.id in mine]
        user_names = {b.name for _, b in users}
        drawn_coverage[level] = coverage(level, drawn)
        claimed = [any(not not_applicable(b, case) for _, b in users) for case in drawn]
        counts = by_level.setdefault(level, {b.name: Counter() for _, b in users})
        records: list[dict] = []  # runner.run appends here; tally empties it as it goes
        steps = [0]

        def tally(_step: str, level=level, records=records, steps=steps, claimed=claimed, counts=counts,
                  user_names=user_names):
            steps[0] += bool(_step)
            if _step and steps[0] % len(backends) == 0:  # runner.run reports every backend of a case, then the next
                stats["cases"] += claimed[steps[0] // len(backends) - 1]
            for rec in records:
                twin = "twin" in rec
                if rec["status"] == "skip" and not twin and rec["backend"] not in user_names:
                    continue  # a backend without this level: no evidence either way
                per = counts.setdefault(rec["backend"], Counter())
                per[rec["status"]] += 1
                stats[rec["status"]] += 1
                if rec["status"] != "skip":
                    stats["records"] += 1
                if twin:
                    per["twins"] += 1
                    stats["twins"] += 1
                for name, e in (rec.get("properties") or {}).items():
                    stats[f"property {e['status']}"] += 1
                    if e.get("required") and e["status"] in ("fail", "error"):
                        failures.append({"level": level, "backend": rec["backend"], "id": rec["id"],
                                         "status": f"property {name} {e['status']}", "reason": e["reason"],
                                         "repro": rec["repro"]})
                        print(f"FALSE FAILURE property {name} {rec['backend']} {rec['id']}: {e['reason'][:300]}",
                              file=sys.stderr, flush=True)
                if is_false_failure(rec):
                    f = {"level": level, "backend": rec["backend"], "id": rec["id"], "status": rec["status"],
                         "reason": rec["reason"], "repro": rec["repro"]}
                    if twin:
                        f["twin_of"] = rec["twin"]["of"]
                    failures.append(f)
                    print(f"FALSE FAILURE {rec['status']} {rec['backend']} {rec['id']}: {rec['reason'][:300]}\n"
                          f"  {rec['repro']}", file=sys.stderr, flush=True)
            if report is not None:
                report["records"] += records
            records.clear()
            if progress is not None:
                progress(level, stats, failures)

        # every hunted backend goes in: runner.run decides what each claims, and may add a
        # twin record for the nearest variant a declining backend supports (`twin`, twins.py)
        # the server properties (server_properties.py) only with --properties: they add calls
        run(drawn, backends, policy, on_step=tally, records=records, properties=properties, shares=shares)
        tally("")  # any record made after the last on_step
    return {"examples_per_level": examples, "levels": run_levels, "backends": [b.name for _, b in backends],
            "seed": seed, "stats": dict(stats),
            "by_level": {lv: {name: dict(sorted(c.items())) for name, c in per.items()}
                         for lv, per in by_level.items()},
            "coverage": drawn_coverage, "false_failures": failures}


def summary_lines(result: dict) -> list[str]:
    """One line per level: each backend's record counts by status."""
    lines = []
    for level, per in result["by_level"].items():
        parts = []
        for name, c in per.items():
            counts = ", ".join(f"{n} {s}" for s, n in c.items() if s != "twins")
            twins = f" ({c['twins']} twin)" if c.get("twins") else ""
            parts.append(f"{name} {counts or 'no records'}{twins}")
        lines.append(f"  {level} ({result['coverage'][level]['cases']} drawn): {'; '.join(parts)}")
    return lines


def _shard(text: str) -> Shard:
    try:
        return Shard.parse(text)
    except (ValueError, TypeError) as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def write_hunt_report(report: dict, shard: Shard | None, argv, seconds: float, out) -> str:
    """The hunt as a tolerance report: its selection is the drawn cases themselves (each once),
    so the gate accounts for every one of them, as for a grid (a shard names its part)."""
    from .runner import backend_info
    from .selection import GIVEN, Selection
    from .shards import fingerprint, records_digest
    from .tolerance_report import build_report, write_report

    sel = Selection(grid=GIVEN, cases=tuple(report["cases"]))
    meta = None
    if shard is not None:
        mine = [c.id for c in shard_cases(report["cases"], shard)]
        meta = {"index": shard.index, "count": shard.count, "fingerprint": fingerprint(sel, report["cases"]),
                "costs": "estimated", "cases": mine, "records_sha256": records_digest(report["records"])}
    infos = [backend_info(b, label) for label, b in report["backends"]]
    built = build_report(report["records"], report["policy"], infos, selection=sel, grid="hunt",
                         argv=["python3 -m lrkv.verify.hunt", *(argv if argv is not None else sys.argv[1:])],
                         seconds=seconds, shard=meta)
    return str(write_report(built, out)[0])


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python3 -m lrkv.verify.hunt", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", action="append", help=f"backends (default: {', '.join(CORRECT)})")
    p.add_argument("--level", action="append", choices=LEVELS, help="levels (default: all)")
    p.add_argument("--examples", type=arg_int(minimum=1), default=200, help="cases drawn per level")
    p.add_argument("--seed", type=arg_int(minimum=0), default=0)
    p.add_argument("--out", type=arg_out_file(), help="write the result as JSON")
    p.add_argument("--fp8", action="store_true",
                   help="every drawn case with an fp8 cache (both formats, every granularity, outliers; the kernel "
                        "and layer levels only)")
    p.add_argument("--fp8-compute", action="store_true", dest="rounding",
                   help="as --fp8, and the kernel levels' cases with FA3-style roundings of q and/or the softmax "
                        "weights (fp8 compute p, q or qp)")
    p.add_argument("--properties", action="store_true",
                   help="also run the server properties on their share of the drawn cases (a required one "
                        "failing on a correct backend is a false failure)")
    p.add_argument("--report", type=arg_out_dir(), metavar="DIR",
                   help="also write the hunt as a tolerance report (DIR/report.json, report.md) of the drawn cases, "
                        "with their server properties, for `lrkv gate`")
    p.add_argument("--shard", type=_shard, metavar="I/N",
                   help="with --report: run part I of N of the drawn cases (as `lrkv verify --shard`); "
                        "`lrkv merge` joins the N reports into the one the gate reads")
    args = p.parse_args(argv)
    if args.shard is not None and args.report is None:
        p.error("--shard I/N needs --report DIR: the shard reports are what `lrkv merge` joins")
    t0 = time.perf_counter()
    last = [0.0]

    def progress(level, stats, failures):
        if time.perf_counter() - last[0] > 10:
            last[0] = time.perf_counter()
            print(f"[{time.perf_counter() - t0:6.0f}s] {level}: {stats['cases']} cases, {stats['records']} records, "
                  f"{len(failures)} false failures", file=sys.stderr, flush=True)

    try:
        report = {} if args.report else None
        result = hunt(args.backend or CORRECT, args.level or LEVELS, args.examples, args.seed, progress,
                      strict=bool(args.level), properties=args.properties or bool(args.report), fp8=args.fp8,
                      rounding=args.rounding, shard=args.shard, report=report)
    except (ValueError, TypeError) as e:
        print(f"hunt: {e}", file=sys.stderr)
        return 2
    result["seconds"] = round(time.perf_counter() - t0, 1)
    s = result["stats"]
    print(f"{s.get('cases', 0)} cases, {s.get('records', 0)} records in {result['seconds']}s: "
          f"{len(result['false_failures'])} false failures")
    print("\n".join(summary_lines(result)))
    for f in result["false_failures"][:20]:
        print(f"  {f['status'].upper()} {f['backend']} {f['id']}: {f['reason'][:200]}\n    {f['repro']}")
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1) + "\n")
    if args.report:
        print(f"report: {write_hunt_report(report, args.shard, argv, result['seconds'], args.report)}")
    return 1 if result["false_failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
