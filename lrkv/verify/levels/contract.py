"""What the three kernel contracts' levels share (DESIGN §4): a backend's `(out, lse)` answer,
the contract's output shapes and dtypes, and oracle paths named by function.
"""

from __future__ import annotations

from typing import Any

from ...reference.lrkv import accumulation_dtype
from ..case import Case
from . import Outputs, PathFn, named_axes


def pair(res: Any, what: str, parts: str = "(out, lse)") -> tuple[Any, Any]:
    """A backend's two-part answer, or a ValueError naming the call and what it must return."""
    if not (isinstance(res, tuple) and len(res) == 2):
        raise ValueError(f"{what} must return a tuple {parts}, got {type(res).__name__}")
    return res


def call_out_lse(entry: str):
    """The level's `call`: the backend's `entry` method on the contract's arguments."""
    def call(backend, inp, case: Case) -> Outputs:
        out, lse = pair(inp.call(getattr(backend, entry)), entry)
        return {"out": out, "lse": lse}
    return call


def oracle_path(module, fn_name: str) -> PathFn:
    """An oracle path: `module.fn_name` on the contract's arguments, looked up at call time
    (so a test can plant a bug in the oracle and watch the harness refuse to judge); extra
    keywords reach it (err_base's fp8 compute roundings)."""
    def path(inp, **extra) -> Outputs:
        out, lse = inp.call(getattr(module, fn_name), **extra)
        return {"out": out, "lse": lse}
    return path


def out_lse_outputs(rows: int, case: Case) -> dict:
    """out [rows, H, d_h] at τ and lse [rows, H] at the accumulation dtype (float32 for half inputs)."""
    H, d_h = case.spec.n_heads, case.spec.head_dim
    return {"out": ((rows, H, d_h), case.torch_dtype), "lse": ((rows, H), accumulation_dtype(case.torch_dtype))}


# the decode and paged contracts' outputs: one row per batch element
OUT_LSE_AXES = named_axes(out=("batch", "head", "channel"), lse=("batch", "head"))
