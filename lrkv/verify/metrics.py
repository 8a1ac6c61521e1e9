"""Error metrics of one output against the float64 reference (DESIGN §6, §7).

All arithmetic is float64 whatever the output dtype. Non-finite values are judged by
position (after FlashMLA's check: inf/NaN must sit exactly where the reference has them);
the numeric metrics are taken over positions where both tensors are finite.

    max_abs      max |out − ref|
    max_rel      max |out − ref| / |ref| over positions where ref ≠ 0
    mean_abs     mean |out − ref|
    cos_diff     1 − 2Σ(out·ref) / Σ(out² + ref²)      (FlashMLA; 0 for identical tensors)
    sqnr_db      10·log10(Σref² / Σ(out − ref)²)      (torchao; +inf for identical tensors)
    nonfinite_match  NaN, +inf and −inf masks all equal
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass

import torch


@dataclass(frozen=True)
class ErrorMetrics:
    max_abs: float
    max_rel: float
    mean_abs: float
    cos_diff: float
    sqnr_db: float
    nonfinite_match: bool

    def to_dict(self) -> dict:
        """JSON-safe: non-finite floats become the strings 'inf', '-inf', 'nan'."""
        return {k: (v if isinstance(v, bool) else json_float(v)) for k, v in asdict(self).items()}

    @classmethod
    def from_dict(cls, data: dict) -> ErrorMetrics:
        return cls(**{k: (data[k] if k == "nonfinite_match" else parse_float(data[k]))
                      for k in cls.__dataclass_fields__})


def json_float(x: float) -> float | str:
    """A float for JSON: finite floats unchanged, others as 'inf' / '-inf' / 'nan'."""
    x = float(x)
    if math.isfinite(x):
        return x
    return "nan" if math.isnan(x) else ("inf" if x > 0 else "-inf")


def parse_float(x: float | str | None) -> float | None:
    """Inverse of json_float (None stays None)."""
    return None if x is None else float(x)


def error_metrics(out: torch.Tensor, ref: torch.Tensor) -> ErrorMetrics:
    """Compare out with ref (same shape, any float dtypes)."""
    if tuple(out.shape) != tuple(ref.shape):
        raise ValueError(f"output shape {list(out.shape)} differs from the reference's {list(ref.shape)}")
    a = out.detach().to(torch.float64).cpu()
    b = ref.detach().to(torch.float64).cpu()
    nonfinite_match = (
        torch.equal(torch.isnan(a), torch.isnan(b))
        and torch.equal(torch.isposinf(a), torch.isposinf(b))
        and torch.equal(torch.isneginf(a), torch.isneginf(b))
    )
    both = torch.isfinite(a) & torch.isfinite(b)
    a, b = a[both], b[both]
    if a.numel() == 0:
        return ErrorMetrics(0.0, 0.0, 0.0, 0.0, math.inf, nonfinite_match)
    err = (a - b).abs()
    nz = b != 0
    max_rel = float((err[nz] / b[nz].abs()).max()) if nz.any() else 0.0
    if bool((err[~nz] > 0).any()):
        max_rel = math.inf  # a nonzero error where the reference is exactly zero
    energy = float((a * a + b * b).sum())
    cos_diff = 1.0 - 2.0 * float((a * b).sum()) / energy if energy > 0 else 0.0
    noise, signal = float((err * err).sum()), float((b * b).sum())
    if noise == 0:
        sqnr = math.inf
    elif signal == 0:
        sqnr = -math.inf
    else:
        sqnr = 10.0 * math.log10(signal / noise)
    return ErrorMetrics(float(err.max()), max_rel, float(err.mean()), cos_diff, sqnr, nonfinite_match)


def worst_of(*ms: ErrorMetrics) -> ErrorMetrics:
    """Field-wise worst of several metrics (the err_base of several baseline paths)."""
    return ErrorMetrics(max(m.max_abs for m in ms), max(m.max_rel for m in ms), max(m.mean_abs for m in ms),
                        max(m.cos_diff for m in ms), min(m.sqnr_db for m in ms), all(m.nonfinite_match for m in ms))
