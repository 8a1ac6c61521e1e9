"""The tolerance rule (DESIGN §6) and its policy (ci/tolerance.toml).

For a backend at dtype τ on a case (inputs already rounded to τ, the float64 reference
run on those rounded values):

    err      = backend vs float64 reference
    err_base = same-dtype eager paths with other operation orders vs the same reference:
               the materialized path @ τ and the factored reference math @ τ, field-wise
               worst (runner.py says why both)
    atol(τ)  = 2·max|(y + 0.3) − 0.3 − y| computed in τ, y = reference rounded to τ (and a
               grid across its magnitude range): FlashAttention-3's rounding error of
               arithmetic at the output's magnitude

    pass iff  max|err|  <= k·max|err_base|       + atol(τ)
         and  mean|err| <= k_mean·mean|err_base| + atol(τ)
         and  non-finite positions match exactly.

At τ = float64 both bounds are raised to at least the float64 rounding bound of
`bounds.float64_bound` (c·u·n·magnitude), because err_base can be exactly 0 on small
cases while a legitimate re-ordering still rounds differently.
"""

from __future__ import annotations

import tomllib
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import torch

from ..spec import as_dtype, dtype_name
from .metrics import ErrorMetrics, json_float

POLICY_PATH = Path("ci/tolerance.toml")  # relative to the working directory (the repo root in CI)
FA3_SHIFT = 0.3  # FA3: atol = 2·|(y + 0.3) − 0.3 − y|
FA3_FACTOR = 2.0
ATOL_PROBES = 1024  # extra points spanning [−max|y|, max|y|]: a 2-element output must not get atol 0 by luck
PROBE_STEP = 0.7548776662466927  # an irrational step (plastic-number based) so the probes are generic


@dataclass(frozen=True)
class Tolerance:
    """The knobs of the rule for one (backend, dtype). Defaults are DESIGN §6's."""

    k: float = 2.0  # max|err| may reach k× the same-dtype eager path's max error (FA3 uses 2)
    k_mean: float = 1.5  # the same for the mean error
    float64_c: float = 8.0  # constant c of the float64 bound c·u·n·magnitude
    regression_factor: float = 2.0  # gate: REGRESSED when an error grows beyond this factor ...
    regression_slack: float = 0.1  # ... plus this fraction of the bound (rounding noise across CPUs)


_KNOBS = {f.name for f in fields(Tolerance)}


@dataclass(frozen=True)
class Policy:
    """Tolerance tables: defaults, per dtype, per backend, per backend and dtype."""

    defaults: dict
    dtype: dict
    backend: dict
    source: str = "built-in defaults"

    def resolve(self, backend: str, dtype) -> Tolerance:
        """backend.<name>.<dtype> > backend.<name> > dtype.<dtype> > defaults > built-in."""
        dt = dtype_name(dtype)
        tol = replace(Tolerance(), **self.defaults)
        tol = replace(tol, **self.dtype.get(dt, {}))
        b = self.backend.get(backend, {})
        tol = replace(tol, **{k: v for k, v in b.items() if k in _KNOBS})
        return replace(tol, **b.get(dt, {}))

    def to_dict(self) -> dict:
        return {"source": self.source, "builtin": asdict(Tolerance()), "defaults": self.defaults,
                "dtype": self.dtype, "backend": self.backend}

    @classmethod
    def from_dict(cls, data: dict, source: str = "report") -> Policy:
        return _validated(data.get("defaults", {}), data.get("dtype", {}), data.get("backend", {}), source)


def _check_knobs(table: dict, where: str) -> dict:
    for k, v in table.items():
        if k not in _KNOBS:
            raise ValueError(f"{where}: unknown tolerance key {k!r}; known: {sorted(_KNOBS)}")
        if isinstance(v, bool) or not isinstance(v, (int, float)) or v < 0:
            raise ValueError(f"{where}.{k} must be a non-negative number, got {v!r}")
    return {k: float(v) for k, v in table.items()}


def _validated(defaults: dict, dtypes: dict, backends: dict, source: str) -> Policy:
    d = _check_knobs(defaults, "defaults")
    dt = {dtype_name(name): _check_knobs(t, f"dtype.{name}") for name, t in dtypes.items()}
    bk = {}
    for name, table in backends.items():
        knobs = {k: v for k, v in table.items() if not isinstance(v, dict)}
        per_dtype = {k: v for k, v in table.items() if isinstance(v, dict)}
        entry = _check_knobs(knobs, f"backend.{name}")
        for dname, t in per_dtype.items():
            entry[dtype_name(dname)] = _check_knobs(t, f"backend.{name}.{dname}")
        bk[name] = entry
    return Policy(d, dt, bk, source)


def load_policy(path: str | Path | None = None) -> Policy:
    """Read a policy TOML; with no path, ci/tolerance.toml if present, else the built-in defaults."""
    if path is None:
        if not POLICY_PATH.is_file():
            return Policy({}, {}, {})
        path = POLICY_PATH
    path = Path(path)
    with path.open("rb") as f:
        data = tomllib.load(f)
    unknown = set(data) - {"defaults", "dtype", "backend"}
    if unknown:
        raise ValueError(f"{path}: unknown top-level tables {sorted(unknown)}; expected defaults, dtype, backend")
    return _validated(data.get("defaults", {}), data.get("dtype", {}), data.get("backend", {}), str(path))


# ----------------------------------------------------------------------------- the rule
def fa3_atol(ref: torch.Tensor, dtype) -> float:
    """2·max|(y + 0.3) − 0.3 − y| in dtype τ over y = the finite reference values rounded to τ
    and a grid spanning their magnitude range.

    FA3 evaluates it on large outputs, where the max is ~ one ulp at the output's magnitude;
    on a tiny output the few values present can round exactly (atol 0), hence the grid.
    """
    y = ref[torch.isfinite(ref)].to(torch.float64)
    if y.numel() == 0:
        return 0.0
    m = float(y.abs().max())
    # generic (non-dyadic) probes: a dyadic grid such as linspace(-m, m, 2^k + 1) would round exactly
    probes = m * torch.sin(torch.arange(ATOL_PROBES, dtype=torch.float64) * PROBE_STEP)
    y = torch.cat((y, probes)).to(as_dtype(dtype))
    return FA3_FACTOR * float(((y + FA3_SHIFT) - FA3_SHIFT - y).abs().max())


@dataclass(frozen=True)
class Bound:
    max_abs: float  # allowed max|err|
    mean_abs: float  # allowed mean|err|
    atol: float  # atol(τ)
    k: float
    k_mean: float
    float64: float | None = None  # the float64 rounding bound, when τ = float64

    def to_dict(self) -> dict:
        return {k: (None if v is None else json_float(v)) for k, v in asdict(self).items()}


def make_bound(base: ErrorMetrics, atol: float, tol: Tolerance, float64: float | None = None) -> Bound:
    max_b = tol.k * base.max_abs + atol
    mean_b = tol.k_mean * base.mean_abs + atol
    if float64 is not None:
        max_b, mean_b = max(max_b, float64), max(mean_b, float64)
    return Bound(max_b, mean_b, atol, tol.k, tol.k_mean, float64)


def judge(m: ErrorMetrics, bound: Bound, what: str = "out") -> tuple[bool, str]:
    """Apply the rule; the reason says which clause failed and by how much."""
    if not m.nonfinite_match:
        return False, f"{what}: non-finite values (NaN/inf) at positions where the reference has none, or vice versa"
    if not m.max_abs <= bound.max_abs:
        return False, (f"{what}: max|err| {m.max_abs:.3g} > bound {bound.max_abs:.3g} "
                       f"({m.max_abs / bound.max_abs:.3g}x; atol {bound.atol:.3g})")
    if not m.mean_abs <= bound.mean_abs:
        return False, (f"{what}: mean|err| {m.mean_abs:.3g} > bound {bound.mean_abs:.3g} "
                       f"({m.mean_abs / bound.mean_abs:.3g}x)")
    return True, ""
