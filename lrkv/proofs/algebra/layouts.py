"""What the float64 reference actually allocates: cache layouts, K/V weight shapes, and the
symbolic element counts read off them (the inputs of the Eq. 8–10 derivations).

A derivation that restates the formula it proves cannot fail. These helpers count the
elements of the tensors the reference allocates instead: the reference is built at sizes
that are distinct primes (H = 5, d_h = 7, r = 3, …), every dimension of every tensor is
mapped back to the symbol whose value it has, and the per-token count becomes a polynomial
in H, d_h, r. Two independent prime assignments must give the same polynomial, so a
dimension that only happens to equal a size (a merged H·r axis, say) is caught, not guessed.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping

import sympy as sp

from lrkv.spec import AttentionSpec

H, DH, R, D, P = sp.symbols("H d_h r d P", positive=True)

# Two assignments of distinct primes (and 1 for the batch and one slot): a dimension that
# equals one of them is that symbol. Both must give the same polynomial.
SAMPLES: tuple[dict[sp.Symbol, int], ...] = (
    {H: 5, DH: 7, R: 3, D: 11},
    {H: 13, DH: 17, R: 2, D: 19},
)

# The K/V projection weights of each reference weight class (field names of the dataclasses).
KV_WEIGHT_FIELDS = {
    "lrkv": ("w_shared_k", "w_shared_v", "u_k", "u_v", "basis_k", "basis_v"),
    "dense": ("w_k", "w_v"),
}


def reference_layout(spec: AttentionSpec) -> dict[str, tuple[int, ...]]:
    """The shapes of every cached tensor that the float64 reference allocates for `spec`
    (batch 1, one slot, on the meta device): [B, T, width] or [B, T, heads, width]."""
    import torch

    from lrkv.reference import cache as lrkv_cache, dense, mla, mlra

    alloc = {"mha": dense.allocate_cache, "gqa": dense.allocate_cache, "mqa": dense.allocate_cache,
             "mla": mla.allocate_cache, "mlra": mlra.allocate_cache, "lrkv": lrkv_cache.allocate_cache}[spec.family]
    c = alloc(spec, 1, 1, device="meta")
    return {f.name: tuple(getattr(c, f.name).shape) for f in dataclasses.fields(c)
            if f.name != "lengths" and isinstance(getattr(c, f.name), torch.Tensor)}


def reference_kv_weight_shapes(spec: AttentionSpec) -> dict[str, tuple[int, ...]]:
    """The shapes of the K/V projection weights the reference initialises for `spec`."""
    from lrkv.reference import dense, weights

    if spec.family == "lrkv":
        w, fields = weights.init_lrkv_weights(spec), KV_WEIGHT_FIELDS["lrkv"]
    elif spec.family in ("mha", "gqa", "mqa"):
        w, fields = dense.init_weights(spec), KV_WEIGHT_FIELDS["dense"]
    else:
        raise ValueError(f"no K/V weight layout for family {spec.family!r}")
    return {f: tuple(getattr(w, f).shape) for f in fields}


def shard_by_head_axis(shape: tuple[int, ...], P: int) -> int:
    """Elements per token ONE of P devices holds of a [B, T, ...] tensor.

    A [B, T, heads, width] tensor splits along its head axis (each device keeps the heads its
    queries read; a tensor with fewer heads than devices is replicated, one head each); a
    [B, T, width] tensor has no head axis, every device's queries read all of it, so every
    device holds it whole (DeepSeek-V3's kv_cache/pe_cache, LRKV's shared block, MLRA's k_pe).
    """
    if len(shape) == 3:
        return shape[2]
    heads, width = shape[2], shape[3]
    if heads >= P and heads % P:
        raise ValueError(f"{heads} heads do not split over {P} devices")
    return max(1, heads // P) * width


def symbol_of(value: int, sample: Mapping[sp.Symbol, int]) -> sp.Expr:
    """The symbol whose sample value is `value` (1 stays 1); ValueError when none or several."""
    if value == 1:
        return sp.Integer(1)
    hits = [s for s, v in sample.items() if v == value]
    if len(hits) != 1:
        raise ValueError(f"dimension {value} is not one of the sample sizes {dict(sample)}: "
                         "the layout has an axis this derivation cannot name")
    return hits[0]


def symbolic_numel(dims: tuple[int, ...], sample: Mapping[sp.Symbol, int]) -> sp.Expr:
    """Product of the named dimensions."""
    return sp.Mul(*(symbol_of(v, sample) for v in dims))


def per_token(shapes: Mapping[str, tuple[int, ...]], sample: Mapping[sp.Symbol, int]) -> sp.Expr:
    """Σ over cached tensors of the elements one token occupies: drop [B, T], name the rest."""
    return sp.expand(sum((symbolic_numel(s[2:], sample) for s in shapes.values()), sp.Integer(0)))


def per_token_per_device(shapes: Mapping[str, tuple[int, ...]], sample: Mapping[sp.Symbol, int],
                         devices: sp.Expr = P) -> sp.Expr:
    """`shard_by_head_axis` with a symbolic device count: head axes split by P, widths held whole."""
    total = sp.Integer(0)
    for s in shapes.values():
        if len(s) == 3:
            total += symbol_of(s[2], sample)
        elif len(s) == 4:
            total += symbol_of(s[2], sample) / devices * symbol_of(s[3], sample)
        else:
            raise ValueError(f"a cache tensor is [B, T, width] or [B, T, heads, width], got {s}")
    return sp.expand(total)


def weight_count(shapes: Mapping[str, tuple[int, ...]], sample: Mapping[sp.Symbol, int]) -> sp.Expr:
    """Σ over weight tensors of their (named) element counts."""
    return sp.expand(sum((symbolic_numel(s, sample) for s in shapes.values()), sp.Integer(0)))


def derive(count: Callable[[Mapping[sp.Symbol, int]], sp.Expr], samples=SAMPLES) -> tuple[sp.Expr, dict]:
    """The polynomial `count(sample)` gives; every sample must agree (else ValueError)."""
    exprs = [count(s) for s in samples]
    if any(sp.simplify(e - exprs[0]) != 0 for e in exprs[1:]):
        raise ValueError(f"the samples disagree: {[str(e) for e in exprs]} — a dimension matched a size by chance")
    return exprs[0], {"samples": [{str(k): v for k, v in s.items()} for s in samples], "derived": str(exprs[0])}


def derive_or_error(count: Callable[[Mapping[sp.Symbol, int]], sp.Expr], samples=SAMPLES
                    ) -> tuple[sp.Expr | None, dict, str | None]:
    """`derive`, with a count the reference cannot give (an unnamed axis, samples that disagree)
    returned as an error string, so the derivation sub-check fails instead of the proof raising."""
    try:
        derived, how = derive(count, samples)
    except ValueError as e:
        return None, {}, str(e)
    return derived, how, None


def numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)
