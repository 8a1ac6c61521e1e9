"""The tolerance rule (DESIGN §6), its policy, and the verdict of one record.

For a backend at dtype τ on a case (inputs already rounded to τ, the float64 oracle run on
those rounded values, its paths cross-checked first — runner.py):

    err      = backend vs the float64 reference
    err_base = each oracle path run at the output's own precision (τ for out/y; the
               accumulation dtype, float32, for the lse of half-precision inputs) against
               ITS OWN float64 run — the worst of the paths (FlashAttention's rule)
    atol     = 2·max|(y + 0.3) − 0.3 − y| computed in the output's dtype, y = the reference
               rounded to it and a grid across its magnitude (FlashAttention-3), and at least
               ATOL_ULPS ulps at the output's magnitude (a tiny output must not get atol ≈ 0)

    pass iff  max|err|  <= k·max|err_base|       + atol
         and  mean|err| <= k_mean·mean|err_base| + atol
         and  non-finite positions match exactly
         and  every output has the contract's dtype (out: τ; lse: float32 for half inputs)

At τ = float64 both bounds are raised to at least the float64 rounding bound of bounds.py
(c·u·n·magnitude), since err_base is 0 there.

`judge_record` is the single place that decides a record's status from its evidence: the
runner calls it when it makes the record, and the gate calls it again on the report it is
given, under the policy the baseline pins — a stored status is never trusted.

The policy ships inside the package (policy.toml, read with importlib.resources). A project
may override it with `lrkv.toml` ([policy.*] tables) or `[tool.lrkv.policy]` in
pyproject.toml in the working directory (merged over the packaged tables), or replace it
with `--policy FILE`. Every report records the policy's content, source and sha256.
"""

from __future__ import annotations

import hashlib
import json
import math
import tomllib
from dataclasses import asdict, dataclass, field, fields, replace
from importlib import resources
from pathlib import Path

import torch

from ..checks import check_float, parse_toml
from ..spec import as_dtype, dtype_name
from .metrics import ErrorMetrics, json_float, nonfinite_text, parse_float, worst_text

PACKAGED_POLICY = "policy.toml"  # package data of lrkv.verify
PROJECT_FILE = "lrkv.toml"  # [policy.*] tables in the working directory
PYPROJECT = "pyproject.toml"  # [tool.lrkv.policy.*]
FA3_SHIFT = 0.3  # FA3: atol = 2·|(y + 0.3) − 0.3 − y|
FA3_FACTOR = 2.0
ATOL_ULPS = 4.0  # floor of atol: this many ulps of the output's dtype at its largest magnitude
ATOL_PROBES = 1024  # extra points spanning [−max|y|, max|y|]: a 2-element output must not get atol 0 by luck
PROBE_STEP = 0.7548776662466927  # an irrational step (plastic-number based) so the probes are generic
TABLES = ("defaults", "dtype", "backend", "coverage", "properties")
MAX_CASE_TIMEOUT = 86400.0  # one day: a timer past threading.TIMEOUT_MAX raises OverflowError in every case


@dataclass(frozen=True)
class Tolerance:
    """The knobs of the rule for one (backend, dtype). Defaults are DESIGN §6's."""

    k: float = 2.0  # max|err| may reach k× the same-algorithm path's max error (FA3 uses 2)
    k_mean: float = 1.5  # the same for the mean error
    float64_c: float = 8.0  # constant c of the float64 bound c·u·n·magnitude
    regression_factor: float = 2.0  # gate: REGRESSED when an error grows beyond this factor ...
    regression_slack: float = 0.1  # ... plus this fraction of the bound (rounding noise across CPUs)
    case_timeout: float = 120.0  # seconds one backend call may take before it is an ERROR (a hang)


_KNOBS = {f.name for f in fields(Tolerance)}


def _canonical(tables: dict) -> str:
    return json.dumps(tables, sort_keys=True, separators=(",", ":"), allow_nan=False)


@dataclass(frozen=True)
class Policy:
    """Tolerance tables: defaults, per dtype, per backend, per backend and dtype."""

    defaults: dict
    dtype: dict
    backend: dict
    source: str = "built-in defaults"
    # [coverage]: features no backend must cover (optional = [...]), and per backend
    # ([coverage.backend.<name>] optional = [...]); names from lrkv/verify/features.py
    coverage: dict = field(default_factory=dict)
    # [properties]: server properties every verified backend must hold (require = [...]), and
    # per backend ([properties.backend.<name>] require = [...]); names from server_properties.py
    properties: dict = field(default_factory=dict)

    def resolve(self, backend: str, dtype) -> Tolerance:
        """backend.<name>.<dtype> > backend.<name> > dtype.<dtype> > defaults > built-in."""
        dt = dtype_name(dtype)
        tol = replace(Tolerance(), **self.defaults)
        tol = replace(tol, **self.dtype.get(dt, {}))
        b = self.backend.get(backend, {})
        tol = replace(tol, **{k: v for k, v in b.items() if k in _KNOBS})
        return replace(tol, **b.get(dt, {}))

    def required_properties(self, backend: str) -> frozenset[str]:
        """The server properties the policy requires of `backend` (on top of what it declares)."""
        per = (self.properties.get("backend") or {}).get(backend, {})
        return frozenset(self.properties.get("require", ())) | frozenset(per.get("require", ()))

    def check_property_backends(self, known) -> None:
        """A `[properties.backend.<name>]` table must name a known backend (`known`: the
        registered names and the run's backends): a misspelt name would require nothing of anyone."""
        for name in (self.properties.get("backend") or {}):
            if name not in known:
                raise ValueError(f"policy ({self.source}): properties.backend.{name}: no backend is named {name!r} "
                                 f"(known here: {', '.join(sorted(known))}); correct the name, or verify that "
                                 "backend in this run")

    def tables(self) -> dict:
        """What the policy says — the content its sha256 covers (comments and order do not count)."""
        tables = {"builtin": asdict(Tolerance()), "defaults": self.defaults, "dtype": self.dtype,
                  "backend": self.backend}
        if self.coverage:  # absent when empty: policies without one keep their sha256
            tables["coverage"] = self.coverage
        if self.properties:  # likewise
            tables["properties"] = self.properties
        return tables

    @property
    def sha256(self) -> str:
        return hashlib.sha256(_canonical(self.tables()).encode()).hexdigest()

    def to_dict(self) -> dict:
        return {"source": self.source, "sha256": self.sha256, **self.tables()}

    @classmethod
    def from_dict(cls, data: dict, source: str = "report") -> Policy:
        """A policy recorded in a report; its sha256, when present, must match its content."""
        pol = _validated(data.get("defaults", {}), data.get("dtype", {}), data.get("backend", {}),
                         data.get("source", source), data.get("coverage", {}), data.get("properties", {}))
        sha = data.get("sha256")
        if sha is not None and sha != pol.sha256:
            raise ValueError(f"policy: sha256 {sha[:12]}… does not match its content ({pol.sha256[:12]}…): "
                             "the report was altered")
        if data.get("builtin") not in (None, asdict(Tolerance())):
            raise ValueError("policy.builtin: made by a suite with other built-in defaults; re-run lrkv verify")
        return pol


def _check_knobs(table: dict, where: str) -> dict:
    if not isinstance(table, dict):
        raise ValueError(f"{where} must be a table, got {type(table).__name__}")
    out = {}
    for k, v in table.items():
        if k not in _KNOBS:
            raise ValueError(f"{where}: unknown tolerance key {k!r}; known: {sorted(_KNOBS)}")
        timeout = k == "case_timeout"
        out[k] = check_float(f"{where}.{k}", v, minimum=0.0, exclusive_minimum=timeout,
                             maximum=MAX_CASE_TIMEOUT if timeout else None)
    return out


def _name_lists(table, section: str, key: str, names, keep_empty: bool) -> dict:
    """A policy table `key = [name, ...]` with per-backend `backend.<name>.key = [...]` (the
    shape of [coverage] and [properties]); names(value, where) validates one list. keep_empty:
    keep a key given as an empty list (coverage's sha256 has always counted it)."""
    if not isinstance(table, dict):
        raise ValueError(f"{section} must be a table, got {type(table).__name__}")
    unknown = set(table) - {key, "backend"}
    if unknown:
        raise ValueError(f"{section}: unknown keys {sorted(unknown)}; expected {key}, backend")
    out = {}
    if key in table and (keep_empty or table[key]):
        out[key] = sorted(set(names(table[key], f"{section}.{key}")))
    backends = table.get("backend", {})
    if not isinstance(backends, dict):
        raise ValueError(f"{section}.backend must be a table of backend names")
    per = {}
    for name, t in backends.items():
        if not isinstance(t, dict) or set(t) - {key}:
            raise ValueError(f"{section}.backend.{name} must be a table with one key, {key}")
        if keep_empty or t.get(key):
            per[name] = {key: sorted(set(names(t.get(key, []), f"{section}.backend.{name}.{key}")))}
    if per:
        out["backend"] = per
    return out


def _check_coverage(table) -> dict:
    """[coverage]: optional = [feature, ...] and backend.<name>.optional = [feature, ...]."""
    from .features import check_feature_names

    return _name_lists(table, "coverage", "optional", check_feature_names, keep_empty=True)


def _check_properties(table) -> dict:
    """[properties]: require = [property, ...] and backend.<name>.require = [property, ...]."""
    from .server_properties import PROPERTIES

    def names(value, where: str) -> list[str]:
        if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
            raise ValueError(f"{where} must be a list of property names, got {value!r}")
        unknown = sorted(set(value) - set(PROPERTIES))
        if unknown:
            raise ValueError(f"{where}: unknown server properties {unknown}; known: {', '.join(PROPERTIES)}")
        return value

    return _name_lists(table, "properties", "require", names, keep_empty=False)


def _validated(defaults: dict, dtypes: dict, backends: dict, source: str, coverage: dict | None = None,
               properties: dict | None = None) -> Policy:
    d = _check_knobs(defaults, "defaults")
    if not isinstance(dtypes, dict) or not isinstance(backends, dict):
        raise ValueError("policy: 'dtype' and 'backend' must be tables")
    dt = {}
    for name, t in dtypes.items():
        try:
            dt[dtype_name(name)] = _check_knobs(t, f"dtype.{name}")
        except (TypeError, KeyError) as e:
            raise ValueError(f"dtype.{name}: unknown dtype ({e})") from None
    bk = {}
    for name, table in backends.items():
        if not isinstance(table, dict):
            raise ValueError(f"backend.{name} must be a table")
        knobs = {k: v for k, v in table.items() if not isinstance(v, dict)}
        per_dtype = {k: v for k, v in table.items() if isinstance(v, dict)}
        entry = _check_knobs(knobs, f"backend.{name}")
        for dname, t in per_dtype.items():
            entry[dtype_name(dname)] = _check_knobs(t, f"backend.{name}.{dname}")
        bk[name] = entry
    return Policy(d, dt, bk, source, _check_coverage(coverage or {}), _check_properties(properties or {}))


def _read_toml(path: Path) -> dict:
    try:
        text = path.read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{path}: not valid TOML: not UTF-8 ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise ValueError(f"{path}: cannot read: {e.strerror or e}") from None
    return parse_toml(path, text)  # malformed or nested too deeply: a ValueError naming the file


def _subtable(data: dict, keys: tuple[str, ...], where: Path):
    """data[k0][k1]… or None where a key is absent; a key that holds no table is an error."""
    for i, key in enumerate(keys[:-1]):
        data = data.get(key)
        if data is None:
            return None
        if not isinstance(data, dict):
            raise ValueError(f"{where}: field {'.'.join(keys[:i + 1])} must be a table, got "
                             f"{type(data).__name__} {data!r}")
    return data.get(keys[-1])


def _from_tables(data: dict, source: str) -> Policy:
    unknown = set(data) - set(TABLES)
    if unknown:
        raise ValueError(f"{source}: unknown policy tables {sorted(unknown)}; expected {', '.join(TABLES)}")
    return _validated(data.get("defaults", {}), data.get("dtype", {}), data.get("backend", {}), source,
                      data.get("coverage", {}), data.get("properties", {}))


def packaged_policy() -> Policy:
    """The default policy shipped inside the package."""
    text = resources.files("lrkv.verify").joinpath(PACKAGED_POLICY).read_text()
    return _from_tables(tomllib.loads(text), f"lrkv/verify/{PACKAGED_POLICY} (packaged)")


def _merge(base: dict, over: dict) -> dict:
    out = dict(base)
    for k, v in over.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def project_policy_tables(directory: str | Path = ".") -> tuple[dict, str] | None:
    """The project's policy override ([policy] of lrkv.toml, or [tool.lrkv.policy]), if any."""
    d = Path(directory)
    if (d / PROJECT_FILE).is_file():
        data = _read_toml(d / PROJECT_FILE)
        if "policy" in data:
            return data["policy"], str(d / PROJECT_FILE)
    if (d / PYPROJECT).is_file():
        pol = _subtable(_read_toml(d / PYPROJECT), ("tool", "lrkv", "policy"), d / PYPROJECT)
        if pol is not None:
            return pol, f"{d / PYPROJECT} [tool.lrkv.policy]"
    return None


def load_policy(path: str | Path | None = None, *, directory: str | Path = ".") -> Policy:
    """The policy in force: `path` (a whole policy TOML) if given; else the packaged policy with
    the project's override (lrkv.toml / pyproject.toml in `directory`) merged over it."""
    if path is not None:
        path = Path(path)
        if not path.is_file():
            raise ValueError(f"--policy: {path} does not exist or is not a file")
        return _from_tables(_read_toml(path), str(path))
    base = packaged_policy()
    found = project_policy_tables(directory)
    if found is None:
        return base
    tables, where = found
    if not isinstance(tables, dict):
        raise ValueError(f"{where}: the policy must be a table")
    merged = _merge({t: getattr(base, t) for t in TABLES}, tables)
    return _from_tables(merged, f"{where} over the packaged policy")


# ----------------------------------------------------------------------------- the rule
def ulp(magnitude: float, dtype) -> float:
    """The spacing of `dtype` at `magnitude` (its smallest normal spacing for 0)."""
    fi = torch.finfo(as_dtype(dtype))
    if magnitude <= fi.tiny:
        return fi.eps * fi.tiny
    return fi.eps * 2.0 ** math.floor(math.log2(magnitude))


def fa3_atol(ref: torch.Tensor, dtype) -> float:
    """max(2·max|(y + 0.3) − 0.3 − y| in `dtype`, ATOL_ULPS ulps at max|y|), y = the finite
    reference values rounded to `dtype` and a grid spanning their magnitude range.

    FA3 evaluates the first term on large outputs, where it is ~ one ulp at the output's
    magnitude; on a tiny output the few values present can round exactly (atol 0), hence the
    grid, and a legitimate reordering moves a result by a few ulps, hence the floor. Each
    output gets its own atol at its own magnitude (lse at |lse|, not at |out|).
    """
    y = ref[torch.isfinite(ref)].to(torch.float64)
    if y.numel() == 0:
        return 0.0
    m = float(y.abs().max())
    # generic (non-dyadic) probes: a dyadic grid such as linspace(-m, m, 2^k + 1) would round exactly
    probes = m * torch.sin(torch.arange(ATOL_PROBES, dtype=torch.float64) * PROBE_STEP)
    y = torch.cat((y, probes)).to(as_dtype(dtype))
    fa3 = FA3_FACTOR * float(((y + FA3_SHIFT) - FA3_SHIFT - y).abs().max())
    return max(fa3, ATOL_ULPS * ulp(m, dtype))


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


def judge(m: ErrorMetrics, bound: Bound, what: str = "out", where: dict | None = None) -> tuple[bool, str]:
    """Apply the rule; the reason says which clause failed, by how much, and (given `where`,
    metrics.locate's) at which element. The verdict never reads `where`."""
    if not m.nonfinite_match:
        return False, f"{what}: {nonfinite_text(where)}"
    if not m.max_abs <= bound.max_abs:
        times = f"{m.max_abs / bound.max_abs:.3g}x; " if bound.max_abs > 0 else ""
        return False, (f"{what}: max|err| {m.max_abs:.3g} > bound {bound.max_abs:.3g} ({times}atol "
                       f"{bound.atol:.3g}){worst_text(where)}")
    if not m.mean_abs <= bound.mean_abs:
        at = worst_text(where)
        return False, f"{what}: mean|err| {m.mean_abs:.3g} > bound {bound.mean_abs:.3g}" + (f", worst{at}" if at else "")
    return True, ""


# ----------------------------------------------------------------------------- verdict
def contract_dtype(output: str, case_dtype: str) -> str:
    """The dtype the contract fixes for an output: lse accumulates (float32 for half inputs)."""
    if output == "lse" and case_dtype in ("bfloat16", "float16"):
        return "float32"
    return case_dtype


def judge_record(rec: dict, tol: Tolerance) -> tuple[str, str]:
    """(status, reason) of a record from its evidence alone — used by the runner AND the gate.

    The evidence is rec["outputs"] (per output: dtype, metrics, err_base metrics, atol and
    the float64 bound) and rec["oracle"] (the mpmath check of float64 outputs). Bounds are
    recomputed from `tol`, never read from the record. An output's "where" (its worst element)
    only names the failing element in the reason: it cannot change the status.
    """
    outputs = rec.get("outputs")
    if not isinstance(outputs, dict) or not outputs:
        raise ValueError("record has no outputs to judge")
    ok, reasons = True, []
    for name, ev in outputs.items():
        want = contract_dtype(name, rec["dtype"])
        if ev["dtype"] != want:
            ok = False
            reasons.append(f"{name}: dtype {ev['dtype']}, the contract says {want}")
        m = ErrorMetrics.from_dict(ev["metrics"])
        bound = make_bound(ErrorMetrics.from_dict(ev["baseline_metrics"]), parse_float(ev["atol"]), tol,
                           parse_float(ev.get("float64")))
        good, why = judge(m, bound, name, ev.get("where"))
        if not good:
            ok = False
            reasons.append(why)
    oracle = rec.get("oracle")
    if oracle is not None:
        m = ErrorMetrics.from_dict(oracle["metrics"])
        if not (m.nonfinite_match and m.max_abs <= parse_float(oracle["bound"])):
            ok = False
            reasons.append(f"out: differs from the mpmath oracle by {m.max_abs:.3g} (bound "
                           f"{parse_float(oracle['bound']):.3g})")
    reason = "; ".join(reasons)
    if rec.get("expect", "match") == "differ":
        if ok:
            return "fail", "expected to differ from the model but matched within the bound"
        return "xfail", f"expected difference ({rec['spec'].get('rope')!r} RoPE is not the model): {reason}"
    return ("pass", "") if ok else ("fail", reason)
