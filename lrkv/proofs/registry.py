"""Registry of proofs: `@proof(...)` declares a claim once; `run()` executes them.

A registered function takes only keyword arguments with correct defaults (the suite's
implementation of the thing under test). Tests call it with deliberately wrong
variants and see a status that differs from the expected one — every proof can fail.

EXPECTED is a plain dict so that a test can tamper with one expectation and watch the
CLI exit non-zero.
"""

from __future__ import annotations

import fnmatch
import functools
import importlib
import time
import traceback
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .record import ERROR, Proof, Verdict, _check_status

# One concept per module; importing a module registers its proofs (order = report order).
PROOF_MODULES: tuple[str, ...] = (
    # algebra/: the paper's equations and the identities the decode paths use
    "lrkv.proofs.algebra.associativity",
    "lrkv.proofs.algebra.softmax",
    "lrkv.proofs.algebra.rope",
    "lrkv.proofs.algebra.rmsnorm",
    "lrkv.proofs.algebra.cache_formulas",
    "lrkv.proofs.algebra.tp",
    "lrkv.proofs.algebra.param_formula",
    "lrkv.proofs.algebra.decode_cost",
    "lrkv.proofs.algebra.planner",
    "lrkv.proofs.algebra.endpoints",
    "lrkv.proofs.algebra.gradients",
    "lrkv.proofs.algebra.splitk",
    "lrkv.proofs.algebra.mla",
    "lrkv.proofs.algebra.diversity",
    "lrkv.proofs.algebra.special_cases",
    "lrkv.proofs.algebra.eckart_young",
    # paper/: the numbers and prose claims of the paper and of the four source documents
    "lrkv.proofs.paper.cache_numbers",
    "lrkv.proofs.paper.table12",
    "lrkv.proofs.paper.table8",
    "lrkv.proofs.paper.quality",
    "lrkv.proofs.paper.downstream",
    "lrkv.proofs.paper.budgets",
    "lrkv.proofs.paper.head_diversity",
    "lrkv.proofs.paper.v1_summary",
    "lrkv.proofs.paper.mlra",
    "lrkv.proofs.paper.chinese_review",
    "lrkv.proofs.paper.hand_example",
)


@dataclass(frozen=True)
class ProofSpec:
    name: str
    item: int
    claim: str
    source: str
    fn: Callable[..., Proof]  # the wrapped function: keyword overrides -> Proof


REGISTRY: dict[str, ProofSpec] = {}
EXPECTED: dict[str, str] = {}


def proof(name: str, *, item: int, claim: str, source: str, expected: str):
    """Register a proof body `(**variants) -> Verdict` under `name`."""
    _check_status("expected", expected)

    def deco(body: Callable[..., Verdict]) -> Callable[..., Proof]:
        @functools.wraps(body)
        def wrapper(**variants) -> Proof:  # keyword overrides only: each one swaps a thing under test
            v = body(**variants)
            if not isinstance(v, Verdict):
                raise TypeError(f"proof {name} returned {type(v).__name__}, expected Verdict")
            return Proof(
                name=name, item=item, claim=claim, source=source, status=v.status,
                expected=EXPECTED[name], summary=v.summary, evidence=v.evidence,
                assumption=v.assumption,
            )

        wrapper.__name__ = wrapper.__qualname__ = name  # factories (paper/table12.py) share one body name
        if name in REGISTRY and getattr(REGISTRY[name].fn, "__wrapped__", body).__module__ != body.__module__:
            raise ValueError(f"proof {name!r} registered twice")
        REGISTRY[name] = ProofSpec(name, item, claim, source, wrapper)
        EXPECTED[name] = expected
        return wrapper

    return deco


def load_all() -> dict[str, ProofSpec]:
    for mod in PROOF_MODULES:
        importlib.import_module(mod)
    return REGISTRY


def select(patterns: Iterable[str] | None) -> list[str]:
    """Names matching any of the patterns (exact names or fnmatch globs), in registry order."""
    load_all()
    names = list(REGISTRY)
    if not patterns:
        return names
    chosen: list[str] = []
    for pat in patterns:
        hits = [n for n in names if fnmatch.fnmatchcase(n, pat)]
        if not hits:
            raise KeyError(f"no proof matches {pat!r}; known: {', '.join(names)}")
        chosen += [h for h in hits if h not in chosen]
    return [n for n in names if n in chosen]


@dataclass(frozen=True)
class RunResult:
    """One executed proof: the record, or the error it raised, and its wall time."""

    name: str
    item: int
    claim: str
    source: str
    expected: str
    proof: Proof | None
    error: str | None
    elapsed_s: float

    @property
    def status(self) -> str:
        return self.proof.status if self.proof is not None else ERROR

    @property
    def ok(self) -> bool:
        return self.proof is not None and self.proof.status == self.expected


def run(names: Iterable[str] | None = None) -> list[RunResult]:
    load_all()
    results = []
    for name in (list(names) if names is not None else list(REGISTRY)):
        spec = REGISTRY[name]
        t0 = time.perf_counter()
        try:
            p, err = spec.fn(), None
        except Exception:  # a proof that raises is reported, and fails the run
            p, err = None, traceback.format_exc(limit=6)
        results.append(RunResult(
            name=name, item=spec.item, claim=spec.claim, source=spec.source,
            expected=EXPECTED[name], proof=p, error=err, elapsed_s=time.perf_counter() - t0,
        ))
    return results
