"""`lrkv gate --replay N` (DESIGN §7): re-run records the report cannot have chosen.

The gate re-judges a report from its evidence, but evidence can be copied: records from an
earlier good run of the same cases re-judge as passes. Replay re-runs, here, N pass/xfail
records drawn with a seed made at gate time (printed, so a replay can be repeated with
--replay-seed), plus every record whose status differs from its baseline entry, and
compares each with what the report says. Only replayable records are drawn (tp records are
not), so N are re-run whenever the report has N eligible; the summary says how many were
asked, eligible, added from the baseline and could not be run:

  * the status must be the same;
  * each stored metric of each output must equal the re-run's bit for bit when the backend
    declares `deterministic = True` and the report was made in this environment (same
    torch, Triton and device); otherwise it may differ by the backend's run-to-run spread
    (two re-runs) plus REPLAY_SLACK of the bound — far below what changes a verdict.

The required server properties a record carries are run again too (in the worker, as
`lrkv verify` runs them), and each must have its stored status: a bitwise verdict has no
other evidence. A mismatch, or a record that cannot be replayed here (the backend does not
import), is an ERROR. tp records are not replayed (they need their ranks); the summary says so.
"""

from __future__ import annotations

import random
import secrets
from dataclasses import dataclass

from .metrics import parse_float

REPLAY_SLACK = 0.05  # × the bound: re-run noise allowed beyond the measured spread
METRICS = ("max_abs", "mean_abs")  # the stored metrics a replay compares
NOT_REPLAYED_LEVELS = ("tp",)


@dataclass(frozen=True)
class ReplayResult:
    seed: int
    replayed: list[str]  # record keys
    mismatches: list[tuple[dict, str]]  # (record, why)
    not_replayed: list[tuple[dict, str]]  # (record, why) — tp records
    asked: int | None = None  # --replay N
    eligible: int | None = None  # pass/xfail records of a replayable level: the pool N is drawn from
    changed: int = 0  # records re-run because their status differs from the baseline's, beyond the N
    impossible: int = 0  # picked records whose backend cannot be imported here (each a mismatch)

    def summary(self) -> str:
        s = (f"replay: {len(self.replayed)} records re-run (seed {self.seed}), {len(self.mismatches)} "
             f"did not reproduce")
        if self.asked is not None:
            s += (f"; {self.asked} drawn at random as asked (--replay {self.asked})"
                  if self.asked <= (self.eligible or 0) else
                  f"; --replay {self.asked} asked, but the report has only {self.eligible} eligible pass/xfail "
                  f"records: all of them drawn")
        if self.changed:
            s += f"; {self.changed} more whose status differs from the baseline"
        if self.impossible:
            s += f"; {self.impossible} could not be run here (the backend does not import)"
        if self.not_replayed:
            s += f"; {len(self.not_replayed)} not replayable here ({self.not_replayed[0][1]})"
        return s


def new_seed() -> int:
    """A seed no report can know in advance."""
    return secrets.randbelow(2**32)


def eligible(report: dict) -> list[int]:
    """Indices of the records a replay draws from: pass/xfail records of a level it can re-run."""
    return [i for i, r in enumerate(report["records"])
            if r["status"] in ("pass", "xfail") and r["level"] not in NOT_REPLAYED_LEVELS]


def draw(report: dict, n: int, seed: int) -> set[int]:
    """n eligible records at random (all of them when there are fewer)."""
    pool = eligible(report)
    return set(random.Random(seed).sample(pool, min(n, len(pool))))


def changed(report: dict, baseline: dict) -> set[int]:
    """The eligible records whose status differs from their baseline entry's."""
    base, recs = baseline.get("entries", {}), report["records"]
    return {i for i in eligible(report)
            if recs[i]["key"] in base and base[recs[i]["key"]]["status"] != recs[i]["status"]}


def pick(report: dict, baseline: dict, n: int, seed: int) -> list[int]:
    """Indices of the records to replay: `draw`'s n, and every record whose status differs from
    its baseline entry's."""
    return sorted(draw(report, n, seed) | changed(report, baseline))


def same_environment(report: dict) -> bool:
    from .tolerance_report import environment

    here, there = environment(), report.get("environment", {})
    return all(here.get(k) == there.get(k) for k in ("torch", "triton", "device", "interpreter"))


def _outputs_mismatch(stored: dict, runs: list[dict], exact: bool) -> str:
    """'' when every stored metric is reproduced (see the module docstring), else what differs."""
    for name, ev in (stored.get("outputs") or {}).items():
        new = [r["outputs"][name] for r in runs]
        bound = parse_float(ev["bound"]["max_abs"]) or 0.0
        for m in METRICS:
            s, got = parse_float(ev["metrics"][m]), [parse_float(r["metrics"][m]) for r in new]
            if s is None or any(g is None for g in got):
                if [s] * len(got) != got:
                    return f"{name} {m}: stored {ev['metrics'][m]!r}, re-run {new[0]['metrics'][m]!r}"
                continue
            if exact:
                if s != got[0]:
                    return f"{name} {m}: stored {s!r}, re-run {got[0]!r} (a deterministic backend: bit for bit)"
                continue
            spread = max(got) - min(got)
            allowed = 2 * spread + REPLAY_SLACK * bound
            if abs(s - got[0]) > allowed:
                return (f"{name} {m}: stored {s:.6g}, re-run {got[0]:.6g} (allowed {allowed:.3g}: spread "
                        f"{spread:.3g} + {REPLAY_SLACK:g} × bound {bound:.3g})")
    return ""


def replay(report: dict, baseline: dict, n: int, live: dict, policy, seed: int | None = None,
           on_step=None) -> ReplayResult:
    """Re-run the picked records here (runner.run_case, the harness's own call) and compare."""
    from .isolation import Calls, default_mode

    infos = {b["name"]: b for b in report.get("backends", [])}
    here = [(infos.get(name, {}).get("ref", name), b) for name, (b, _) in live.items() if b is not None]
    with Calls(here, default_mode()) as calls:  # isolated as `lrkv verify` runs them
        return _replay(report, baseline, n, live, policy, new_seed() if seed is None else seed, on_step, infos, calls)


def _replay(report, baseline, n, live, policy, seed, on_step, infos, calls) -> ReplayResult:
    from .case import Case
    from .runner import prepare, run_case

    exact_env = same_environment(report)
    replayed, mismatches, impossible = [], [], 0
    skipped = [(r, f"{r['level']} records run on their own ranks and are not replayed") for r in report["records"]
               if r["status"] in ("pass", "xfail") and r["level"] in NOT_REPLAYED_LEVELS]
    drawn = draw(report, n, seed)
    picked = sorted(drawn | changed(report, baseline))  # = pick(...)
    for i in picked:
        rec = report["records"][i]
        backend, why_not = live.get(rec["backend"], (None, "the report does not list the backend"))
        if backend is None:
            impossible += 1
            mismatches.append((rec, f"replay impossible: backend {rec['backend']!r} cannot be imported here "
                                    f"({why_not})"))
            continue
        label = infos.get(rec["backend"], {}).get("ref", rec["backend"])
        case = Case.from_dict(rec["case"])
        tol = policy.resolve(backend.name, case.dtype)
        deterministic = getattr(backend, "deterministic", False) is True and exact_env
        prep = prepare(case, policy)
        wanted = required_properties(rec, backend, policy)
        runs = [run_case(prep, backend, label, tol, calls, (wanted, policy) if wanted and k == 0 else None)
                for k in range(1 if deterministic else 2)]
        replayed.append(rec["key"])
        if on_step is not None:
            on_step(rec["key"])
        bad = next((r for r in runs if r["status"] != rec["status"]), None)
        if bad is not None:
            mismatches.append((rec, f"stored {rec['status']}, re-run {bad['status']}"
                                    + (f" ({bad['reason'][:200]})" if bad["reason"] else "")))
            continue
        why = _outputs_mismatch(rec, runs, deterministic) or _properties_mismatch(rec, runs[0], wanted)
        if why:
            mismatches.append((rec, why))
    return ReplayResult(seed, replayed, mismatches, skipped, asked=n, eligible=len(eligible(report)),
                        changed=len(set(picked) - drawn), impossible=impossible)


def required_properties(rec: dict, backend, policy) -> list[str]:
    """The server properties a replay re-runs on a record: those it carries (the gate has
    checked that they are the ones its case runs) that block when they fail — a bitwise
    verdict carries no evidence, so only running it again tells an edited one."""
    from .server_properties import declarations, required

    declared, asked = declarations(backend), policy.required_properties(backend.name)
    return [p for p, e in (rec.get("properties") or {}).items()
            if e.get("status") != "skip" and required(p, declared, asked)]


def _properties_mismatch(stored: dict, run: dict, wanted: list[str]) -> str:
    """'' when every re-run property has its stored status, else the first that does not."""
    now = run.get("properties") or {}
    for p in wanted:
        was, got = stored["properties"][p].get("status"), (now.get(p) or {}).get("status")
        if was != got:
            why = (now.get(p) or {}).get("reason", "")
            return f"property {p}: stored {was}, re-run {got}" + (f" ({why[:200]})" if why else "")
    return ""
