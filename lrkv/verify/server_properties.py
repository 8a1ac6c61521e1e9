"""How a kernel behaves inside a server (DESIGN §7): the harness's server properties.

A serving engine calls an attention kernel thousands of times a second on the same buffers,
with batches that change every step. A kernel can meet the tolerance rule on fresh tensors
and still break a server; these properties catch the known ways (each a public bug or a
peer's test):

  same_buffers      called again on the SAME tensors (same storage, same pointers) after a
                    second draw — new values, new lengths, new page table — is written into
                    them, the result must match the second draw's oracle (a cache keyed by
                    pointer or shape replays stale results: SGLang reverted a CUDA-graph
                    change for this)
  outputs_written   every output element is written: the call runs with torch's
                    uninitialized-memory fill on (torch.empty returns NaN), so an output
                    left unwritten is NaN where the plain call is not — even when freed
                    memory happened to hold the right answer (FlashMLA, KernelBench)
  inputs_untouched  every input's storage is bit for bit what it was (an in-place rotation of
                    the shared cache corrupts the server's cache); a backend may declare
                    inputs it owns as scratch (`scratch_inputs`)
  deterministic     two calls on identical inputs agree bit for bit (atomics, racing partial
                    writes); always recorded, required when the backend declares
                    `deterministic = True`
  batch_invariant   sequence b's outputs are bit for bit the same decoded alone and at another
                    batch position (split counts chosen from the batch size break this:
                    FlashAttention's and FlashInfer's batch-invariant modes, vLLM's
                    `supports_batch_invariance`); always recorded, required when the backend
                    declares `batch_invariant = True`
  compiles          opt-in (`compile_safe = True`): the call under
                    torch.compile(fullgraph=True) meets the rule

`run_properties` runs in the backend's process (the worker: isolation.py), since allocation,
pointers and in-place writes are facts of that process; the runner judges what needs the
oracle (same_buffers, compiles) with the tolerance rule and records every verdict on the
case's record (`record["properties"]`). Those a wrong kernel would fail for its case's reason
(NEED_A_PASSING_CASE) are judged only on a case whose first draw passed the rule. Properties
run on a subset of each level's cases (`selected`) to stay within ~30 % of a run's time.
"""

from __future__ import annotations

import contextlib
import random
from dataclasses import fields, replace

import torch

LEVELS = ("kernel", "kernel-paged", "kernel-extend")
PROPERTIES = ("same_buffers", "outputs_written", "inputs_untouched", "deterministic", "batch_invariant", "compiles")
ALWAYS_REQUIRED = ("same_buffers", "outputs_written", "inputs_untouched")
DECLARED = {"deterministic": "deterministic", "batch_invariant": "batch_invariant", "compiles": "compile_safe"}
EVERY = {"same_buffers": 12, "outputs_written": 12, "inputs_untouched": 12,
         "compiles": 40}  # a property runs on every N-th case of a level (grid order)
ON_PROBES = ("deterministic", "batch_invariant")  # a split order's properties: on the probe cases (plan)
ROWS_SHOWN = 6  # unwritten rows named in a reason
SECOND_SEED = 7919  # the second draw's seed offset
NO_SECOND_DRAW = "no second draw of this case has the same shapes"  # same_buffers' one skip on a passing case
# The properties a wrong kernel fails for the same reason as its case: same_buffers and compiles
# are judged against the oracle, batch_invariant on other batches (a read of a neighbour's pages
# or of garbage moves with the batch). On a case whose first draw failed the rule they are
# recorded as a skip with FIRST_DRAW_FAILED — judged, they would repeat the case's failure
# under a server bug's name (a numeric bug as a failed same_buffers). The others compare the
# backend with itself on the same inputs (outputs_written, inputs_untouched, deterministic),
# which no deterministic numeric bug can fail: they are judged on every case. The gate refuses
# such a skip on a record that passes.
NEED_A_PASSING_CASE = ("same_buffers", "batch_invariant", "compiles")
FIRST_DRAW_FAILED = "not judged: the first draw already failed the rule (the case's own failure says where)"
MAX_SLOTS = 4096  # batch × T_max of a case the properties run on: their second draw and extra calls stay cheap


def required(name: str, declared: dict, asked=frozenset()) -> bool:
    """Whether a failure of `name` blocks: always for the first three, else when declared
    (`declared`: `declarations(backend)`, or a report's `declares` entry) or when the policy
    asks for it (`asked`: `Policy.required_properties(backend)`)."""
    return name in ALWAYS_REQUIRED or declared.get(DECLARED[name]) is True or name in asked


def declarations(backend) -> dict:
    """What a backend declares about itself (recorded in the report's backend entry)."""
    scratch = getattr(backend, "scratch_inputs", ())
    return {"deterministic": getattr(backend, "deterministic", False) is True,
            "batch_invariant": getattr(backend, "batch_invariant", False) is True,
            "compile_safe": getattr(backend, "compile_safe", False) is True,
            "scratch_inputs": sorted(scratch) if isinstance(scratch, (tuple, list, set, frozenset)) else []}


def eligible(case) -> bool:
    """Whether the properties may run on a case: a kernel level, and small (MAX_SLOTS)."""
    return case.level in LEVELS and len(case.lengths) * case.t_max <= MAX_SLOTS


def plan(cases) -> dict[str, tuple[int, bool]]:
    """case id -> (its index among the eligible cases of its level, in run order; whether it is
    one of the level's PROBES): the share of properties each case runs (`selected`). The runner
    and the gate both count from this, so the gate knows which property every record must carry.

    The probes — the cases the bitwise properties of a split order (deterministic,
    batch_invariant) run on — are the first eligible case of each batch size in float32 and in
    half precision at the level (float64 only where the level has no other: a reordered float64
    sum can round the same, and half of the grid is not float64)."""
    out: dict[str, tuple[int, bool]] = {}
    seen: dict[str, int] = {}
    eligible_cases = [c for c in cases if eligible(c)]
    low = {c.level for c in eligible_cases if c.dtype != "float64"}
    probes: set[tuple] = set()
    for case in eligible_cases:
        if case.id in out:
            continue
        i = seen[case.level] = seen.get(case.level, -1) + 1
        kind = "float32" if case.dtype == "float32" else "float64" if case.dtype == "float64" else "half"
        key = (case.level, len(case.lengths), kind)
        probe = (kind != "float64" or case.level not in low) and key not in probes
        probes.add(key)
        out[case.id] = (i, probe)
    return out


def selected(share: tuple[int, bool], declared: dict, asked=frozenset()) -> list[str]:
    """The properties a case with this share (`plan`) runs (the rest record nothing): the split
    order's on the probes, the others on every EVERY-th eligible case of the level; `compiles`
    only where the backend declares `compile_safe` or the policy asks."""
    index, probe = share
    return [p for p in PROPERTIES if (probe if p in ON_PROBES else index % EVERY[p] == 0)
            and (p != "compiles" or declared.get("compile_safe") is True or p in asked)]


def second_draws(case) -> list:
    """The candidate cases of the second draw written into the same buffers, in order: a new
    seed with the lengths rotated by one (new lengths, new page table) where the case allows
    it, then the new seed alone. The runner takes the first with the same shapes; the gate
    accepts only these."""
    seed = case.seed + SECOND_SEED
    out = []
    if len(case.lengths) > 1 and len(set(case.lengths)) > 1:
        rot = case.lengths[1:] + case.lengths[:1]
        new = case.extend.n_new if case.extend else ()
        rot_new = new[1:] + new[:1]
        try:
            out.append(case.replace(lengths=rot, n_new=rot_new, seed=seed))
        except (ValueError, TypeError):  # the rotation breaks a constraint (a shared prefix, say)
            pass
    return out + [case.replace(seed=seed)]


def failures(records: list[dict]) -> list[tuple[dict, str, dict]]:
    """(record, property, entry) for every required property that failed or errored."""
    return [(r, n, e) for r in records for n, e in (r.get("properties") or {}).items()
            if e.get("required") and e.get("status") in ("fail", "error")]


def table(records: list[dict]) -> dict:
    """backend -> property -> {ran, held, failed, required, first}: the report's property table."""
    out: dict = {}
    for r in records:
        for name, e in (r.get("properties") or {}).items():
            row = out.setdefault(r["backend"], {}).setdefault(
                name, {"ran": 0, "held": 0, "failed": 0, "required": False, "first": ""})
            if e.get("status") == "skip":
                continue
            row["ran"] += 1
            row["required"] = row["required"] or bool(e.get("required"))
            if e.get("status") == "pass":
                row["held"] += 1
            else:
                row["failed"] += 1
                row["first"] = row["first"] or f"{r['id']}: {e.get('reason', '')}"[:300]
    return {b: dict(sorted(props.items(), key=lambda kv: PROPERTIES.index(kv[0]))) for b, props in out.items()}


# ----------------------------------------------------------------------------- in the worker
def named_tensors(inp) -> dict[str, torch.Tensor]:
    """Every tensor of an input bundle by name, an fp8 cache's scales included (named_tensors)."""
    if hasattr(inp, "named_tensors"):
        return inp.named_tensors()
    return {f.name: getattr(inp, f.name) for f in fields(inp) if isinstance(getattr(inp, f.name), torch.Tensor)}


def _select_cache(c, ix: torch.Tensor):
    """The cache of sequences ix: a paged one keeps its pages (its lengths and page table
    selected); a contiguous one's slots, key scales and per-token fp8 scales are selected."""
    if c.paged:
        return replace(c, lengths=c.lengths[ix], page_table=c.page_table[ix])
    scales = c.scales
    if scales is not None:
        from ..reference.fp8_cache import CacheScales
        from ..reference.fp8 import DYNAMIC_GRANULARITIES, PARTS

        scales = CacheScales(scales.format, scales.granularity, **{
            p: scales.of(p)[ix] if scales.granularity_of(p) in DYNAMIC_GRANULARITIES else scales.of(p) for p in PARTS})
    return replace(c, lengths=c.lengths[ix], scales=scales, **{n: t[ix] for n, t in c.tensors().items()})


def _bits(t: torch.Tensor) -> torch.Tensor:
    """t's bytes, so that equality is bitwise (NaN == NaN, -0.0 != 0.0)."""
    return t.detach().contiguous().view(torch.uint8)


def same_bits(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.dtype == b.dtype and torch.equal(_bits(a), _bits(b))


def _storage_snapshot(inp) -> dict[str, torch.Tensor]:
    """A copy of every input tensor's whole storage (a strided view's padding included), as bytes."""
    return {name: torch.empty(0, dtype=torch.uint8, device=t.device).set_(t.untyped_storage()).clone()
            for name, t in named_tensors(inp).items()}


@contextlib.contextmanager
def _poisoned_allocations():
    """torch.empty & co. return NaN (floats) / the largest integer while inside."""
    det, warn = torch.are_deterministic_algorithms_enabled(), torch.is_deterministic_algorithms_warn_only_enabled()
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.use_deterministic_algorithms(True, warn_only=True)
    torch.utils.deterministic.fill_uninitialized_memory = True
    try:
        yield
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = fill
        torch.use_deterministic_algorithms(det, warn_only=warn)


def _unwritten(plain: dict, poisoned: dict) -> str:
    """'' when the poisoned call wrote every element the plain call did; else which rows not."""
    problems = []
    for name, t in poisoned.items():
        holes = torch.isnan(t) & ~torch.isnan(plain[name])
        if holes.any():
            rows = holes.reshape(*holes.shape[:2], -1).any(-1) if holes.dim() > 2 else holes
            idx = rows.nonzero().tolist()
            problems.append(f"{name}: {int(holes.sum())} elements never written, rows (b|token, head) "
                            f"{idx[:ROWS_SHOWN]}{' …' if len(idx) > ROWS_SHOWN else ''}")
    return "; ".join(problems)


def _select(level: str, inp, idx: list[int]):
    """The input bundle of sequences idx (in that order): a smaller or reordered batch."""
    ix = torch.tensor(idx, dtype=torch.long)
    cache = _select_cache(inp.cache, ix)
    if level != "kernel-extend":
        return replace(inp, q=inp.q[ix], cache=cache)
    cu = inp.cu_seqlens_q.tolist()  # the query rows of each sequence, in order
    rows = torch.cat([torch.arange(cu[i], cu[i + 1]) for i in idx]) if idx else torch.zeros(0, dtype=torch.long)
    counts = torch.tensor([cu[i + 1] - cu[i] for i in idx], dtype=inp.cu_seqlens_q.dtype)
    new_cu = torch.cat([torch.zeros(1, dtype=counts.dtype), counts.cumsum(0).to(counts.dtype)])
    return replace(inp, q=inp.q[rows], cu_seqlens_q=new_cu, cache=cache)


def _rows(level: str, inp, outs: dict, b: int) -> dict:
    """Sequence b's rows of every output."""
    if level != "kernel-extend":
        return {k: v[b] for k, v in outs.items()}
    cu = inp.cu_seqlens_q.tolist()
    return {k: v[cu[b]:cu[b + 1]] for k, v in outs.items()}


def _modified(level: str, inp, lengths=None, drop_first_query: int | None = None):
    """The whole batch with one neighbour changed: `lengths` new (a shorter sequence — its last
    slot becomes garbage that holds data), or sequence `drop_first_query`'s first new token
    dropped (kernel-extend: the remaining queries keep their positions)."""
    out = _select(level, inp, list(range(int(inp.cache.lengths.shape[0]))))
    if lengths is not None:
        return replace(out, cache=replace(out.cache, lengths=torch.tensor(lengths, dtype=inp.cache.lengths.dtype)))
    cu = inp.cu_seqlens_q.tolist()
    keep = torch.ones(cu[-1], dtype=torch.bool)
    keep[cu[drop_first_query]] = False
    counts = [cu[i + 1] - cu[i] - (i == drop_first_query) for i in range(len(cu) - 1)]
    new_cu = torch.tensor([0, *torch.tensor(counts).cumsum(0).tolist()], dtype=inp.cu_seqlens_q.dtype)
    return replace(out, q=inp.q[keep], cu_seqlens_q=new_cu)


def batch_variants(level: str, inp, seed: int) -> list[tuple[str, list[int], int | None, object]]:
    """(what changed, the sequence at each position, the neighbour changed or None, the bundle):
    the batches a server runs each sequence in, as vLLM's and FlashInfer's batch-invariance
    tests build them — the batch cut to 1 (the longest alone) and to B − 1 (without the
    longest: a new longest length), grown to B + 1 and B + 2 (an even and an odd size, copies
    appended), every sequence at a random position, and one neighbour changed: the longest one
    token shorter (the total and the longest length move by one; FA3's scheduler changed a
    decode row when an unrelated prefill grew from 9 to 10 tokens), and at the extend level a
    neighbour with one new token fewer. docs/harness.md says which split-count rules this meets."""
    B = int(inp.cache.lengths.shape[0])
    lengths = inp.cache.lengths.tolist()
    rng = random.Random(seed)

    def shuffled(idx: list[int]) -> list[int]:
        rng.shuffle(idx)
        return idx

    longest = max(range(B), key=lambda i: lengths[i])
    out = []
    if B > 1:
        out.append((f"it is decoded alone (batch {B} -> 1)", [longest], None))
        out.append((f"the longest sequence ({longest}) leaves the batch ({B} -> {B - 1}, shuffled)",
                    shuffled([i for i in range(B) if i != longest]), None))
    for extra in (1, 2):
        out.append((f"the batch grows from {B} to {B + extra} (copies appended, shuffled)",
                    shuffled(list(range(B)) + [i % B for i in range(extra)]), None))
    variants = [(why, idx, None, _select(level, inp, idx)) for why, idx, _ in out]
    n_new = [int(x) for x in inp.cu_seqlens_q.diff().tolist()] if level == "kernel-extend" else [0] * B
    if B > 1 and lengths[longest] > max(n_new[longest], 0) and lengths[longest] > 0:
        shorter = list(lengths)
        shorter[longest] -= 1
        variants.append((f"sequence {longest}'s length changes from {lengths[longest]} to {shorter[longest]}",
                         list(range(B)), longest, _modified(level, inp, lengths=shorter)))
    if B > 1 and level == "kernel-extend" and any(n_new):
        c = max(range(B), key=lambda i: n_new[i])
        variants.append((f"sequence {c}'s new tokens change from {n_new[c]} to {n_new[c] - 1}", list(range(B)), c,
                         _modified(level, inp, drop_first_query=c)))
    return variants


def _batch_variance(level: str, call, inp, base: dict, seed: int, every_variant: bool = True) -> str:
    """'' when each sequence's outputs, bit for bit, do not depend on the batch it is in: on
    every variant where the property is required, else on the first (the longest sequence
    alone) — recorded, at one extra call, not the six a kernel interpreted on a CPU pays."""
    variants = batch_variants(level, inp, seed)
    for why, idx, changed, bundle in variants if every_variant else variants[:1]:
        outs = call(bundle.clone())
        for pos, b in enumerate(idx):
            if b == changed:
                continue
            a, c = _rows(level, inp, base, b), _rows(level, bundle, outs, pos)
            for name in a:
                if not same_bits(a[name], c[name]):
                    return f"sequence {b}'s {name} changes when {why} (position {b} -> {pos})"
    return ""


def run_properties(backend, case, inputs, second, wanted: list[str], every_variant: bool = True) -> dict:
    """Run the wanted properties on the backend (in its process). Returns name ->
    ('ok' | 'fail' | 'error', reason) for the bitwise ones, and ('outputs', outputs) for the
    judged ones ('same_buffers': the second call's; 'compiles': the compiled call's). One
    property that raises is an 'error' of that property alone."""
    from .levels import get_level

    level = get_level(case.level)
    if hasattr(backend, "configure"):
        backend.configure(case)
    call = lambda inp: level.call(backend, inp, case)  # noqa: E731
    scratch = set(getattr(backend, "scratch_inputs", ()) or ())
    buffers = inputs.clone()  # the tensors the server reuses: the first call is on them, not a copy
    before = _storage_snapshot(buffers)
    plain = call(buffers)
    reference = {k: v.clone() for k, v in plain.items()}
    after = _storage_snapshot(buffers)

    def inputs_untouched():
        written = [n for n in before if n not in scratch and not torch.equal(before[n], after[n])]
        return ("fail", f"the backend wrote into its inputs: {', '.join(written)} (declare a tensor it owns "
                        "in scratch_inputs)") if written else ("ok", "")

    def deterministic():
        again = call(inputs.clone())
        diff = [n for n in reference if not same_bits(reference[n], again[n])]
        return ("fail", f"two calls on identical inputs differ in {', '.join(diff)}") if diff else ("ok", "")

    def outputs_written():
        for t in [torch.full_like(v, float("nan")) for v in reference.values()]:
            del t  # on CUDA the caching allocator hands these poisoned blocks to the next torch.empty
        with _poisoned_allocations():
            poisoned = call(inputs.clone())
        holes = _unwritten(reference, poisoned)
        return ("fail", holes) if holes else ("ok", "")

    def batch_invariant():
        why = _batch_variance(case.level, call, inputs, reference, case.seed, every_variant)
        return ("fail", why) if why else ("ok", "")

    def compiles():
        try:
            compiled = torch.compile(lambda: call(inputs.clone()), fullgraph=True)
            return ("outputs", {k: v.clone() for k, v in compiled().items()})
        except Exception as e:  # noqa: BLE001 — a graph break or a compile error is the finding
            return ("fail", f"torch.compile(fullgraph=True) failed: {type(e).__name__}: {str(e)[:300]}")

    def same_buffers():  # last: it overwrites the buffers
        dst = named_tensors(buffers)
        for name, t in named_tensors(second).items():
            if dst[name].shape != t.shape:
                raise ValueError(f"second draw: {name} has shape {list(t.shape)}, the buffers {list(dst[name].shape)}")
            dst[name].copy_(t)  # same storage, same pointers, new data
        return ("outputs", {k: v.clone() for k, v in call(buffers).items()})

    checks = {"inputs_untouched": inputs_untouched, "deterministic": deterministic, "outputs_written": outputs_written,
              "batch_invariant": batch_invariant, "compiles": compiles, "same_buffers": same_buffers}
    out: dict = {}
    for name, check in checks.items():  # same_buffers last: it overwrites the buffers
        if name in wanted:
            try:
                out[name] = check()
            except Exception as e:  # noqa: BLE001 — this property could not run here: its own error
                out[name] = ("error", f"{type(e).__name__}: {str(e)[:300]}")
    return out
