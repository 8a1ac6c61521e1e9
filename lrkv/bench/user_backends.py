"""A user's decode backend as a bench row: `lrkv bench --backend package.module:attribute`.

The object is resolved exactly as `lrkv verify --backend` resolves it
(`lrkv.verify.backend_registry.get_backend`: an object, a class or a zero-argument factory,
checked against the backend protocol of DESIGN §4) and times the factored LRKV row through
its `decode_attention` — the kernel contract of README "The decode contract" — on the same
inputs, in the same interleaved rounds and the same table as the built-in rows.

Nothing is dropped silently: a backend that is not available, does not declare the kernel
level or the run's dtype becomes a skipped row with the reason; one whose `available()` or
`decode_attention` raises, or whose output is obviously wrong on a small batch
(`lrkv.bench.sanity`), an error row — never a timing.
"""

from __future__ import annotations

import torch

from ..spec import dtype_name
from ..verify.backend_registry import get_backend
from ..verify.protocol import check_available
from .families import BenchFamily, step_args
from .prepared import Prepared, finish
from .sanity import WrongOutput, check_output


class OutputCheckFailed(RuntimeError):
    """The backend's output failed the sanity check (or it raised there): its row is not timed."""


class UserSteps:
    """The lrkv row of one protocol backend; `label` is the --backend value that named it."""

    def __init__(self, label: str, dtype: torch.dtype):
        self.label = label
        try:
            self.backend = get_backend(label)
        except (ValueError, TypeError) as e:  # the CLI prints it and exits 2: say which value
            raise type(e)(str(e) if label in str(e) else f"{label}: {e}") from None
        self.name = self.backend.name
        self.dtype = dtype
        self._broken = ""  # available() raised: every row of this backend is an error row, with why
        self._checked: dict[tuple, str] = {}  # (spec, device) -> "" or why the output is wrong

    def available(self, device: str) -> tuple[bool, str]:
        if "kernel" not in self.backend.levels:
            return False, f"{self.label} does not declare the kernel level (levels: {sorted(self.backend.levels)})"
        if self.dtype not in self.backend.dtypes:
            return False, (f"{self.label} does not take {dtype_name(self.dtype)} (dtypes: "
                           f"{', '.join(dtype_name(d) for d in self.backend.dtypes)}); pick one with --dtype")
        try:
            ok, why = check_available(self.backend, self.label)
        except ValueError as e:  # it raised, or returned something else than (bool, str)
            self._broken = str(e)
            return True, ""  # planned, so that prepare() turns it into an error row per shape
        return ok, "" if ok else f"{self.label} not available: {why}"

    def supports(self, family: BenchFamily) -> tuple[bool, str]:
        if family.name != "lrkv":
            return False, "a user backend implements the factored LRKV decode contract only"
        return True, ""

    def _call(self, *args, scale):
        return self.backend.decode_attention(*args, scale=scale)

    def prepare(self, family: BenchFamily, spec, inputs: dict, device: str) -> Prepared:
        if self._broken:
            raise RuntimeError(self._broken)
        key = (spec.short(), device)
        if key not in self._checked:  # once per spec and device: a small batch against float64
            try:
                check_output(self._call, spec, device, self.dtype)
                self._checked[key] = ""
            except WrongOutput as e:  # wrong output: the check's own message
                self._checked[key] = str(e)
            except Exception as e:  # noqa: BLE001 — a raise in the backend is the same verdict: not timed
                self._checked[key] = f"decode_attention raised {type(e).__name__}: {e}"
        if self._checked[key]:
            raise OutputCheckFailed(self._checked[key])
        args = step_args(family, inputs)
        return finish(lambda: self._call(*args, scale=spec.scale), device)
