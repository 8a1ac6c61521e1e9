"""Storage dtypes by name, so the accounting works without a tensor at hand."""

from __future__ import annotations

import torch

_ALIASES: dict[str, torch.dtype] = {
    "float64": torch.float64, "fp64": torch.float64, "double": torch.float64,
    "float32": torch.float32, "fp32": torch.float32, "float": torch.float32,
    "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
    "float16": torch.float16, "fp16": torch.float16, "half": torch.float16,
    "float8_e4m3fn": torch.float8_e4m3fn, "fp8": torch.float8_e4m3fn, "fp8_e4m3": torch.float8_e4m3fn,
    "float8_e5m2": torch.float8_e5m2, "fp8_e5m2": torch.float8_e5m2,
}
FP8_DTYPES = (torch.float8_e4m3fn, torch.float8_e5m2)  # the cache formats with scales (DESIGN §4)


def as_dtype(dtype: str | torch.dtype) -> torch.dtype:
    """'bf16' / 'bfloat16' / torch.bfloat16 -> torch.bfloat16; anything else is a TypeError."""
    if isinstance(dtype, torch.dtype):
        return dtype
    if isinstance(dtype, str) and dtype.lower() in _ALIASES:
        return _ALIASES[dtype.lower()]
    raise TypeError(f"unknown dtype {dtype!r}; expected one of {sorted(_ALIASES)} or a torch.dtype")


def dtype_bytes(dtype: str | torch.dtype) -> int:
    return torch.empty((), dtype=as_dtype(dtype)).element_size()


def dtype_name(dtype: str | torch.dtype) -> str:
    return str(as_dtype(dtype)).removeprefix("torch.")
