"""What the compiled-engine tests share: the spec every engine is built for, and small helpers."""

from __future__ import annotations

import pytest
import torch

from lrkv.compiled.config import ExportConfig
from lrkv.compiled.engine import engine_class
from lrkv.compiled.engine_backends import DEFAULT_B_MAX, DEFAULT_T_MAX
from lrkv.compiled.export import verify_cases
from lrkv.compiled.program import example_inputs
from lrkv.compiled.config import input_sigs
from lrkv.spec import AttentionSpec
from lrkv.verify.case import Case

# Odd rank, d_model != H·d_h, exact RoPE and QK-norm: every optional input and constant is live.
SPEC = AttentionSpec.lrkv(2, 8, 3, rope="exact", qk_norm=True, d_model=12)
# The registry backends' default range: the fixtures' engines are the very ones that
# get_backend("onnxruntime" / "aoti") builds, so the registry tests reuse them.
T_MIN, T_MAX, B_MAX = 1, DEFAULT_T_MAX, DEFAULT_B_MAX
KERNEL_SPEC = "H=2,d_h=8,r=3,rope=exact"  # for the `lrkv export` CLI tests


def skip_unless_available(kind: str) -> None:
    ok, reason = engine_class(kind).available()
    if not ok:
        pytest.skip(reason)


def run_cases(backend, cases: list[Case]) -> list[dict]:
    """Report records of `cases` run by the harness (lrkv.verify.runner) through `backend`."""
    return verify_cases(backend, cases, grid="test")["records"]


def failures(records: list[dict]) -> list[tuple[str, str]]:
    return [(r["id"], r["reason"]) for r in records if r["status"] != "pass"]


def named_inputs(config: ExportConfig, B: int, T: int, seed: int = 0) -> dict[str, torch.Tensor]:
    return dict(zip([s.name for s in input_sigs(config)], example_inputs(config, B=B, T=T, seed=seed)))
