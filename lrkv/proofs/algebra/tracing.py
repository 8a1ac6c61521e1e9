"""Watch the reference compute: the contractions a decode step performs and the tensors a
training forward allocates (torch's public TorchFunctionMode; the reference is unchanged).

  * `contractions(fn)`  every einsum / matmul the call makes, with its operand shapes; its
                        multiply-accumulates are the product of the sizes of all its indices.
  * `allocations(fn)`   the elements of every new storage the call creates (views share their
                        base's storage and are counted once; the inputs are not counted).

Both feed derivations that count what the reference does rather than restate a formula.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping

import sympy as sp
import torch
from torch.overrides import TorchFunctionMode

from .layouts import symbol_of

_CONTRACTIONS = {torch.einsum, torch.matmul, torch.bmm, torch.mm, torch.Tensor.matmul, torch.Tensor.__matmul__}


class _Recorder(TorchFunctionMode):
    def __init__(self) -> None:
        super().__init__()
        self.contractions: list[tuple[str, list[tuple[int, ...]]]] = []
        self.outputs: list[torch.Tensor] = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func in _CONTRACTIONS:
            if func is torch.einsum:
                eq, ops = args[0], (args[1] if len(args) == 2 and isinstance(args[1], (list, tuple)) else args[1:])
            else:
                eq, ops = "matmul", args[:2]
            self.contractions.append((eq.replace(" ", ""), [tuple(o.shape) for o in ops]))
        for o in (out if isinstance(out, (tuple, list)) else (out,)):
            if isinstance(o, torch.Tensor):
                self.outputs.append(o)  # kept alive: a freed storage's address could be reused
        return out


def contractions(fn: Callable[[], object]) -> list[tuple[str, list[tuple[int, ...]]]]:
    """(equation, operand shapes) of each einsum/matmul `fn()` performs."""
    with _Recorder() as rec:
        fn()
    if not rec.contractions:
        raise ValueError("the call performed no einsum or matmul: nothing to count")
    return rec.contractions


def index_sizes(equation: str, shapes: list[tuple[int, ...]]) -> dict[str, int]:
    """Letter -> size for an explicit einsum equation; matmul as '...mk,...kn'."""
    if equation == "matmul":
        (a, b) = shapes
        if len(a) < 2 or len(b) < 2:
            raise ValueError(f"matmul of vectors is not counted: {a} @ {b}")
        batch = {f"z{i}": n for i, n in enumerate(a[:-2])}
        return {**batch, "m": a[-2], "k": a[-1], "n": b[-1]}
    lhs = equation.split("->")[0].split(",")
    if "..." in equation or len(lhs) != len(shapes):
        raise ValueError(f"einsum {equation!r} is not an explicit equation over {len(shapes)} operands")
    sizes: dict[str, int] = {}
    for letters, shape in zip(lhs, shapes):
        if len(letters) != len(shape):
            raise ValueError(f"einsum {equation!r}: {letters} does not fit shape {shape}")
        for c, n in zip(letters, shape):
            prev = sizes.get(c)
            if prev is not None and prev != n and 1 not in (prev, n):
                raise ValueError(f"einsum {equation!r}: index {c} has sizes {prev} and {n}")
            sizes[c] = n if prev is None else max(prev, n)  # a size-1 axis broadcasts
    return sizes


def symbolic_macs(calls: Iterable[tuple[str, list[tuple[int, ...]]]], sample: Mapping[sp.Symbol, int]) -> sp.Expr:
    """Σ over contractions of Π (named) index sizes: one multiply-accumulate per index tuple."""
    total = sp.Integer(0)
    for eq, shapes in calls:
        total += sp.Mul(*(symbol_of(n, sample) for n in index_sizes(eq, shapes).values()))
    return sp.expand(total)


def allocations(fn: Callable[[], object], inputs: Iterable[torch.Tensor]) -> int:
    """Elements of the new storages `fn()` creates, each storage once, the inputs excluded."""
    given = {t.untyped_storage().data_ptr() for t in inputs}
    with _Recorder() as rec:
        fn()
    seen: dict[int, int] = {}
    for o in rec.outputs:
        st = o.untyped_storage()
        ptr = st.data_ptr()
        if ptr in given or ptr in seen or st.nbytes() == 0:
            continue
        seen[ptr] = st.nbytes() // o.element_size()
    return sum(seen.values())


def polynomial_in(values: Mapping[int, int], var: sp.Symbol, degree: int = 2) -> sp.Expr:
    """The polynomial of degree ≤ `degree` through the first degree + 1 points; every further
    point must lie on it (else ValueError: the count is not such a polynomial)."""
    pts = sorted(values.items())
    if len(pts) <= degree + 1:
        raise ValueError(f"need more than {degree + 1} points to check a degree-{degree} fit, got {len(pts)}")
    poly = sp.expand(sp.interpolate([(sp.Integer(t), sp.Integer(v)) for t, v in pts[: degree + 1]], var))
    off = [(t, v) for t, v in pts[degree + 1:] if poly.subs(var, t) != v]
    if off:
        raise ValueError(f"counts {dict(pts)} are not a polynomial of degree ≤ {degree} in {var}: {off}")
    return poly
