"""A benchmark's rows and the result document (JSON schema "lrkv.bench/1").

One `BenchRow` per (scale, family, backend, B, T). Times are seconds per decode step of one
layer; bytes are what the step must read (`lrkv.bench.families.read_bytes`); every ratio is
against MHA at the same scale and shape, measured in the same rounds (`lrkv.bench.timing`).
"""

from __future__ import annotations

import datetime
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from ..checks import parse_json
from .machine import Machine

SCHEMA = "lrkv.bench/1"


@dataclass
class BenchRow:
    scale: str  # PAPER_SCALES label (2.5B: H=18, r=55; 6.3B: H=32, r=54)
    family: str  # lrkv | lrkv-mat | mha | gqa | mqa | mla | mlra
    backend: str  # inductor | triton | sdpa
    device: str  # cpu | cuda
    dtype: str  # storage and compute dtype of the step
    batch: int  # B
    seq_len: int  # T (every sequence full)
    spec: str  # AttentionSpec.short()
    status: str = "ok"  # ok | skipped | error
    reason: str = ""  # why skipped / the error
    note: str = ""  # how it ran (cuda graph, cache-resident, ...)
    time_s: float | None = None  # median over rounds of the per-call time
    time_min_s: float | None = None
    spread: float | None = None  # (max − min)/median over rounds
    samples_s: list[float] = field(default_factory=list)
    compile_s: float | None = None  # prepare + the first call: the compile (and CUDA-graph capture) when this row triggered one
    bytes_payload: int = 0  # cache bytes read (spec accounting)
    bytes_weights: int = 0  # bases / absorbed up-projections read
    bytes_total: int = 0
    bandwidth: float | None = None  # bytes_total / time_s
    bandwidth_frac: float | None = None  # of the measured copy bandwidth
    vs_mha: float | None = None  # time / MHA time, median of per-round ratios (the headline)
    mha_backend: str = ""  # which MHA row vs_mha is against
    payload_ratio: float | None = None  # cache payload / MHA's (Eq. 9 for lrkv): the prediction
    bytes_ratio: float | None = None  # bytes_total / MHA's bytes_total
    arithmetic_ratio: float | None = None  # decode MACs / MHA's (lrkv: 1 + r/d_h + r/T)
    target: str | None = None  # PASS | MISS where a performance target applies
    target_rule: str = ""  # each rule that applies, with the measured value and its verdict
    checks: list[dict] = field(default_factory=list)  # the same per rule: rule, text, value, bound, verdict
    launch: dict | None = None  # Triton rows: the launch shape the kernel picked (LaunchConfig)
    predicted_s: float | None = None  # GPU Triton rows: the traffic model's time (lrkv.bench.prediction)
    prediction: dict | None = None  # its terms (bytes, registers, occupancy, waves, ...), or {'why': ...}

    @property
    def key(self) -> tuple:
        return (self.scale, self.batch, self.seq_len)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> BenchRow:
        names = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in names})


def _now() -> str:
    return datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")


@dataclass
class BenchResult:
    machine: Machine
    grid: dict  # the BenchGrid that ran (as a dict) plus device, dtype, backends, formulation
    rows: list[BenchRow]
    roofline: dict = field(default_factory=dict)  # lrkv.bench.roofline.summary(...)
    notes: list[str] = field(default_factory=list)
    sweep: dict = field(default_factory=dict)  # lrkv.bench.sweep: the launch-shape sweep, when run
    created: str = field(default_factory=_now)
    schema: str = SCHEMA

    def ok_rows(self) -> list[BenchRow]:
        return [r for r in self.rows if r.status == "ok"]

    def targets(self) -> list[BenchRow]:
        return [r for r in self.rows if r.target is not None]

    def to_dict(self) -> dict:
        return dict(schema=self.schema, created=self.created, machine=self.machine.to_dict(), grid=self.grid,
                    rows=[r.to_dict() for r in self.rows], roofline=self.roofline, notes=self.notes,
                    sweep=self.sweep)

    def write_json(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=1) + "\n")
        return path

    @classmethod
    def from_dict(cls, data: dict) -> BenchResult:
        if data.get("schema") != SCHEMA:
            raise ValueError(f"not a {SCHEMA} document (schema {data.get('schema')!r})")
        return cls(machine=Machine.from_dict(data["machine"]), grid=data["grid"],
                   rows=[BenchRow.from_dict(r) for r in data["rows"]], roofline=data.get("roofline", {}),
                   notes=data.get("notes", []), sweep=data.get("sweep", {}), created=data["created"],
                   schema=data["schema"])

    @classmethod
    def read_json(cls, path: str | Path) -> BenchResult:
        return cls.from_dict(parse_json(path, Path(path).read_text()))  # nested too deeply: a ValueError
