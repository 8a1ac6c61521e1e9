"""One report from the shards of a run (DESIGN §7 "Shards and merge"): `lrkv merge` and the gate's check.

Each `lrkv verify --shard I/N` report names the fingerprint of its selection (shards.py), N, I,
its cases and the sha256 of its records. `merge` refuses, naming the file, anything that
would make the merged report claim more than the shards verified: a shard missing or given
twice, a shard of another selection (grid, filters or grid code), commit, policy, suite
version or set of backends, an incomplete (interrupted) shard, and an edited one (its records
no longer hash to what it says, or hold a case it was not given). The merged report is a
report like a serial run's: the same schema, its records in selection order, the summary,
coverage table and server properties recomputed from them, and under `merged` each shard's
entry as it was written, with the machine, time and commit it ran on.

The gate trusts the merged file no more than any other (`problems`): it recomputes the
fingerprint from the selection it rebuilds, requires shards 1..N exactly once, each of the
report's commit, policy and fingerprint, their cases a partition of the selection, and each
shard's records to hash as they did when the shard wrote them. Every record is then
re-judged and accounted for as in a serial report (gate.py, ledger.py).
"""

from __future__ import annotations

from .shards import fingerprint, records_digest
from .tolerance_report import SCHEMA

# what every shard of one run shares with the others (compared as written)
SAME = (("suite_version", "suite version"), ("git", "commit"), ("selection", "selection"),
        ("backends", "backends"))


def _label(meta: dict) -> str:
    return f"shard {meta.get('index')}/{meta.get('count')}"


def _case_of(rec: dict) -> str:
    twin = rec.get("twin")
    return twin.get("of", rec.get("id")) if isinstance(twin, dict) else rec.get("id")


def _own_records(records: list[dict], cases) -> list[dict]:
    wanted = set(cases)
    return [r for r in records if _case_of(r) in wanted]


def partition_problems(shards: list[dict], count: int, selection_ids: list[str], name=_label) -> list[str]:
    """What is wrong with shards as the N parts of a selection: an index missing, out of range or
    twice, and cases held by two shards, by none, or outside the selection."""
    out = []
    by_index: dict[int, list[dict]] = {}
    for s in shards:
        if s.get("count") != count:
            out.append(f"{name(s)}: one of {s.get('count')} shards, the others are of {count}")
        by_index.setdefault(s.get("index"), []).append(s)
    for i, group in sorted(by_index.items(), key=lambda kv: str(kv[0])):
        if not isinstance(i, int) or not 1 <= i <= count:
            out.append(f"{name(group[0])}: index out of 1..{count}")
        elif len(group) > 1:
            out.append(f"shard {i}/{count} duplicated: given {len(group)} times ({', '.join(name(s) for s in group)})")
    out += [f"shard {i}/{count} missing: its cases have no records" for i in range(1, count + 1) if i not in by_index]
    if out:
        return out
    holder: dict[str, dict] = {}
    known = set(selection_ids)
    for s in shards:
        for cid in s.get("cases", []):
            if cid not in known:
                out.append(f"{name(s)} holds case {cid}, which is not in the selection")
            elif cid in holder:
                out.append(f"{name(s)} and {name(holder[cid])} both hold case {cid} (split with other --costs?)")
            holder.setdefault(cid, s)
    lost = [cid for cid in selection_ids if cid not in holder]
    if lost:
        out.append(f"{len(lost)} cases of the selection are in no shard (e.g. {lost[0]}; split with other --costs?)")
    return out


def problems(report: dict) -> list[tuple[str, str]]:
    """(key, what is wrong) for a merged report's shards, as the gate re-checks them ([] if sound)."""
    from .selection import Selection

    merged = report["merged"]
    try:
        sel = Selection.from_dict(report.get("selection"))
        cases = sel.resolve()
    except (ValueError, TypeError) as e:
        return [("shards", f"report altered: its selection cannot be rebuilt ({e})")]
    fp, count, shards = fingerprint(sel, cases), merged["count"], merged["shards"]
    out = []
    if merged["fingerprint"] != fp:
        out.append(("shards", f"the shards were made for another selection or grid code (fingerprint "
                              f"{merged['fingerprint'][:12]}), this checkout rebuilds {fp[:12]}: foreign shards"))
    out += [("shards", why) for why in partition_problems(shards, count, [c.id for c in cases])]
    commit, policy = (report.get("git") or {}).get("commit"), report["policy"].get("sha256")
    for s in shards:
        key, name = f"shard:{s.get('index')}", _label(s)
        if s["fingerprint"] != fp:
            out.append((key, f"{name} is foreign: made for selection fingerprint {s['fingerprint'][:12]}, "
                             f"the report's is {fp[:12]} (another grid, filter or grid code)"))
        if (s.get("git") or {}).get("commit") != commit:
            out.append((key, f"{name} is foreign: made from commit {(s.get('git') or {}).get('commit')}, "
                             f"the report names {commit}"))
        if s["policy_sha256"] != policy:
            out.append((key, f"{name} is foreign: judged under policy {s['policy_sha256'][:12]}, the report's is "
                             f"{str(policy)[:12]}"))
        if records_digest(_own_records(report["records"], s.get("cases", []))) != s["records_sha256"]:
            out.append((key, f"{name} was edited: the records of its cases no longer hash to the sha256 it was "
                             "written with"))
    return out


def merge(shards: list[tuple[str, dict]], argv: list[str] | None = None) -> dict:
    """One report from N shard reports [(file name, loaded report)]; ValueError naming the file
    and what is wrong (see the module docstring) before anything is built."""
    from .tolerance import Policy
    from .tolerance_report import build_report

    if not shards:
        raise ValueError("lrkv merge: no shard report given")
    names = {id(rep): f"{path}" for path, rep in shards}
    first_path, first = shards[0]
    for path, rep in shards:
        if rep.get("schema") != SCHEMA:
            raise ValueError(f"{path}: not a tolerance report")
        if "merged" in rep:
            raise ValueError(f"{path}: already a merged report; merge the shard reports themselves")
        if "shard" not in rep:
            raise ValueError(f"{path}: not a shard report (made without `lrkv verify --shard I/N`)")
        if not rep.get("complete", False):
            raise ValueError(f"{path}: shard {rep['shard']['index']}/{rep['shard']['count']} is incomplete (the run "
                             "was interrupted): run it again")
        meta = rep["shard"]
        if records_digest(rep["records"]) != meta["records_sha256"]:
            raise ValueError(f"{path}: shard {meta['index']}/{meta['count']} was edited: its records no longer "
                             "hash to the sha256 it was written with")
        stray = [r["key"] for r in rep["records"] if _case_of(r) not in set(meta["cases"])]
        if stray:
            raise ValueError(f"{path}: shard {meta['index']}/{meta['count']} was edited: record {stray[0]} is of a "
                             "case the shard was not given")
        if meta["fingerprint"] != first["shard"]["fingerprint"]:
            raise ValueError(f"{path}: shard {meta['index']}/{meta['count']} is foreign: another selection (grid, "
                             f"filters or grid code) than {first_path} (fingerprint {meta['fingerprint'][:12]} vs "
                             f"{first['shard']['fingerprint'][:12]})")
        if rep["policy"].get("sha256") != first["policy"].get("sha256"):
            raise ValueError(f"{path}: shard {meta['index']}/{meta['count']} is foreign: judged under policy "
                             f"{rep['policy'].get('sha256', '')[:12]}, {first_path} under "
                             f"{first['policy'].get('sha256', '')[:12]}")
        for field, what in SAME:
            if rep.get(field) != first.get(field):
                raise ValueError(f"{path}: shard {meta['index']}/{meta['count']} is foreign: another {what} than "
                                 f"{first_path} ({str(rep.get(field))[:80]} vs {str(first.get(field))[:80]})")
        if meta["costs"] != first["shard"]["costs"]:
            raise ValueError(f"{path}: shard {meta['index']}/{meta['count']} was split with other costs "
                             f"({meta['costs']}) than {first_path} ({first['shard']['costs']}): give every "
                             "shard the same --costs")
    from .selection import Selection

    sel = Selection.from_dict(first["selection"])
    cases = sel.resolve()
    if fingerprint(sel, cases) != first["shard"]["fingerprint"]:
        raise ValueError(f"{first_path}: its selection rebuilds to other cases here (fingerprint "
                         f"{fingerprint(sel, cases)[:12]}, the shards' {first['shard']['fingerprint'][:12]}): "
                         "merge on a checkout of the commit the shards ran")
    labels = {id(rep["shard"]): f"shard {rep['shard']['index']}/{rep['shard']['count']} ({names[id(rep)]})"
              for _, rep in shards}
    bad = partition_problems([rep["shard"] for _, rep in shards], first["shard"]["count"], [c.id for c in cases],
                             name=lambda s: labels[id(s)])
    if bad:
        raise ValueError("lrkv merge: " + "; ".join(bad))
    order = {c.id: i for i, c in enumerate(cases)}
    parts = sorted(shards, key=lambda pr: pr[1]["shard"]["index"])
    records = sorted((r for _, rep in parts for r in rep["records"]), key=lambda r: order[_case_of(r)])  # stable
    policy = Policy.from_dict(first["policy"], source=first["policy"].get("source", "report"))
    report = build_report(records, policy, first["backends"], selection=sel, grid=first.get("grid"),
                          argv=argv or ["merge", *(p for p, _ in shards)],
                          seconds=max((rep.get("seconds") or 0.0) for _, rep in parts))
    report.update(suite_version=first["suite_version"], git=first["git"], environment=first["environment"],
                  policy=first["policy"])
    report["merged"] = {"fingerprint": first["shard"]["fingerprint"], "count": first["shard"]["count"],
                        "shards": [dict(rep["shard"], git=rep["git"], policy_sha256=rep["policy"]["sha256"],
                                        created=rep["created"], seconds=rep.get("seconds"),
                                        environment=rep["environment"]) for _, rep in parts]}
    return report
