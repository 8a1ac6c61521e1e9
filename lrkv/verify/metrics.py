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

`locate` says where: the element of the largest |out − ref| and the first positions whose
non-finite values differ, each named by the level's axes. It is description only — the
verdict comes from the numbers above, so a location in a report can never change one.
"""

from __future__ import annotations

import math
from collections.abc import Callable
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


def _pow2_at(x: float) -> float:
    """The power of two p with p <= x < 2p (1 for x = 0)."""
    return math.ldexp(1.0, math.frexp(x)[1] - 1) if x > 0 else 1.0


def _log10_norm(x: torch.Tensor) -> float:
    """log10 of x's 2-norm without overflow or underflow (-inf for a zero x)."""
    top = float(x.abs().max())
    if top == 0:
        return -math.inf
    p = _pow2_at(top)
    return math.log10(p) + 0.5 * math.log10(float(((x / p) ** 2).sum()))


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
    # Sums of squares are taken of the values over the power of two at their largest magnitude
    # (an exact division): an unwritten output buffer holds garbage up to 1e308, whose squares
    # overflow to inf (inf / inf, log10(0)).
    top = _pow2_at(max(float(a.abs().max()), float(b.abs().max())))
    energy = float(((a / top) ** 2 + (b / top) ** 2).sum())
    cos_diff = 1.0 - 2.0 * float(((a / top) * (b / top)).sum()) / energy if energy > 0 else 0.0
    if not bool((err > 0).any()):
        sqnr = math.inf
    else:  # 20 log10(|ref| / |err|), -inf where the reference is all zero
        sqnr = 20.0 * (_log10_norm(b) - _log10_norm(err))
    return ErrorMetrics(float(err.max()), max_rel, float(err.mean()), cos_diff, sqnr, nonfinite_match)


def worst_of(*ms: ErrorMetrics) -> ErrorMetrics:
    """Field-wise worst of several metrics (the err_base of several baseline paths)."""
    return ErrorMetrics(max(m.max_abs for m in ms), max(m.max_rel for m in ms), max(m.mean_abs for m in ms),
                        max(m.cos_diff for m in ms), min(m.sqnr_db for m in ms), all(m.nonfinite_match for m in ms))


NONFINITE_SHOWN = 3  # non-finite mismatches named by position; the rest are counted

Position = Callable[[tuple[int, ...]], dict[str, int]]  # an element's index -> its named position


def unnamed(index: tuple[int, ...]) -> dict[str, int]:
    """The position of an element of an output whose axes have no names."""
    return {f"axis {i}": v for i, v in enumerate(index)}


def _element(a: torch.Tensor, b: torch.Tensor, index: tuple[int, ...], name: Position) -> dict:
    return {"at": name(index), "got": json_float(a[index]), "ref": json_float(b[index])}


def locate(out: torch.Tensor, ref: torch.Tensor, name: Position = unnamed) -> dict:
    """Where out is furthest from ref: {"worst": the element of the largest |out − ref| among
    positions finite in both (None if there is none), "nonfinite": {"count", "first"} of the
    positions whose NaN/±inf differ from ref's (None if they all match)}; each element is
    {"at": name(index), "got", "ref"}. Ties go to the first element in memory order."""
    a = out.detach().to(torch.float64).cpu()
    b = ref.detach().to(torch.float64).cpu()
    differ = (torch.isnan(a) != torch.isnan(b)) | (torch.isposinf(a) != torch.isposinf(b)) \
        | (torch.isneginf(a) != torch.isneginf(b))
    both = torch.isfinite(a) & torch.isfinite(b)
    worst = None
    if bool(both.any()):
        err = torch.where(both, (a - b).abs(), torch.tensor(-1.0, dtype=torch.float64))
        index = tuple(int(i) for i in torch.unravel_index(err.argmax(), err.shape))
        worst = _element(a, b, index, name)
    nonfinite = None
    if bool(differ.any()):
        first = [tuple(int(i) for i in ix) for ix in differ.nonzero()[:NONFINITE_SHOWN]]
        nonfinite = {"count": int(differ.sum()), "first": [_element(a, b, ix, name) for ix in first]}
    return {"worst": worst, "nonfinite": nonfinite}


# a token of the extend level is also placed in its sequence: these keys describe the token
TOKEN_DETAIL = ("sequence", "new_token", "new_tokens")


def position_text(at: dict) -> str:
    """'batch 2, head 1, channel 17'; an extend token as 'token 5 (sequence 1, new token 2 of 4)'."""
    parts = []
    for axis, i in at.items():
        if axis in TOKEN_DETAIL:
            continue
        text = f"{axis} {i}"
        if axis == "token" and "sequence" in at:
            text += f" (sequence {at['sequence']}, new token {at.get('new_token')} of {at.get('new_tokens')})"
        parts.append(text)
    return ", ".join(parts)


def _value(x) -> str:
    return f"{parse_float(x):.4g}"


def worst_text(where: dict | None) -> str:
    """' at batch 2, head 1, channel 17 (ref 0.412, got 0.443)', or '' when nothing is located."""
    w = (where or {}).get("worst")
    if not w:
        return ""
    return f" at {position_text(w['at'])} (ref {_value(w['ref'])}, got {_value(w['got'])})"


def nonfinite_text(where: dict | None) -> str:
    """'non-finite values (NaN/inf) differ from the reference's at 12 positions, first:
    (batch 0, head 3, channel 0: got nan, ref 0.412), …' (got and ref show which side has them)."""
    nf = (where or {}).get("nonfinite")
    if not nf:
        return "non-finite values (NaN/inf) at positions where the reference has none, or vice versa"
    shown = ", ".join(f"({position_text(e['at'])}: got {_value(e['got'])}, ref {_value(e['ref'])})"
                      for e in nf["first"])
    more = ", …" if nf["count"] > len(nf["first"]) else ""
    n = nf["count"]
    return (f"non-finite values (NaN/inf) differ from the reference's at {n} position{'s' if n != 1 else ''}, "
            f"first: {shown}{more}")
