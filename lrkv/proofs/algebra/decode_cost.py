"""What a decode step costs: the arithmetic (Sec. 3, p. 4: O(Lr + r d_h); English
review Sec. 4) and the bytes a kernel reads when it does not reuse the shared block.

The multiply-accumulates are counted from the contractions the reference decode actually
performs (algebra/tracing.py records every einsum of lrkv.reference.lrkv.decode_attention
and lrkv.reference.dense.decode_attention; each costs the product of its index sizes).
Softmax and the element-wise work are not counted — the same simplification as the review's.
"""

from __future__ import annotations

import sympy as sp
import torch

from lrkv.spec import AttentionSpec, decode_arithmetic_ratio

from ..record import Verdict, failing
from ..registry import proof
from ..symbolic import grid
from .formula_check import DH, H, R, T, check_formula, formula_verdict
from .layouts import derive, per_token, reference_layout, symbol_of
from .tracing import contractions, symbolic_macs

# Prime sizes (with the history length T) for counting the decode contractions.
DECODE_SAMPLES = ({H: 5, DH: 7, R: 3, T: 11}, {H: 13, DH: 17, R: 2, T: 19})


def _randn(g: torch.Generator, *shape: int) -> torch.Tensor:
    return torch.randn(*shape, generator=g, dtype=torch.float64)


def lrkv_decode_step(s) -> None:
    """One factored decode step of the reference at sample sizes (batch 1, T visible tokens)."""
    from lrkv.reference import lrkv as lrkv_ref

    g = torch.Generator().manual_seed(0)
    Hh, dh, r, t = s[H], s[DH], s[R], s[T]
    lrkv_ref.decode_attention(_randn(g, 1, Hh, dh), _randn(g, 1, t, dh), _randn(g, 1, t, dh),
                              _randn(g, 1, t, Hh, r), _randn(g, 1, t, Hh, r), _randn(g, Hh, dh, r),
                              _randn(g, Hh, dh, r), torch.tensor([t], dtype=torch.int32), scale=dh**-0.5)


def mha_decode_step(s) -> None:
    """One dense MHA decode step of the reference at the same sizes."""
    from lrkv.reference import dense

    g = torch.Generator().manual_seed(0)
    Hh, dh, t = s[H], s[DH], s[T]
    dense.decode_attention(_randn(g, 1, Hh, dh), _randn(g, 1, t, Hh, dh), _randn(g, 1, t, Hh, dh),
                           torch.tensor([t], dtype=torch.int32), scale=dh**-0.5)


def macs_per_head(step):
    """MACs of one decode step per head (batch 1), from the contractions `step` performs."""
    return lambda s: sp.expand(symbolic_macs(contractions(lambda: step(s)), s) / H)


# ----------------------------------------------------------------------------- decode arithmetic
def arithmetic_formula(d_h, r, T, **_):
    return 1 + r / d_h + r / T


@proof(
    "decode_arithmetic",
    item=5,
    claim="Per head and decode step, MHA's history contractions cost 2T d_h MACs and factored LRKV adds 2T r + 2 r d_h, a ratio of 1 + r/d_h + r/T (→ 1 + r/d_h for long histories).",
    source="Sec. 3 (O(Lr + r d_h), p. 4); English review Sec. 4; lrkv.spec.decode_arithmetic_ratio",
    expected="proved",
)
def decode_arithmetic(*, formula=arithmetic_formula, spec_impls=None, lrkv_step=lrkv_decode_step,
                      mha_step=mha_decode_step) -> Verdict:
    """derivation: Σ over the einsums each reference decode performs of Π index sizes, per head,
    LRKV over MHA, as polynomials in d_h, r, T (H cancels)."""
    try:
        lr, how = derive(macs_per_head(lrkv_step), DECODE_SAMPLES)
        mh, _ = derive(macs_per_head(mha_step), DECODE_SAMPLES)
        derived, err = sp.simplify(lr / mh), None
        how = {**how, "lrkv_macs_per_head": str(lr), "mha_macs_per_head": str(mh)}
    except ValueError as e:
        derived, how, err = None, {}, str(e)
    pts = grid(H=(1, 18), d_h=(2, 64, 128), r=(0, 7, 55), T=(1, 3, 2048, 8192))
    impls = {"decode_arithmetic_ratio": lambda H, d_h, r, T: decode_arithmetic_ratio(AttentionSpec.lrkv(H, d_h, r), T)}
    ok, ev = check_formula(derived=derived, formula=formula, impls=spec_impls or impls, points=pts,
                           symbols=dict(d_h=DH, r=R, T=T), derivation_error=err)
    ev["derivation_samples"] = how
    ev["limit_T_to_infinity"] = str(sp.limit(formula(d_h=DH, r=R, T=T), T, sp.oo))
    return formula_verdict(ok, ev, "The reference's factored decode performs 2T d_h + 2T r + 2 r d_h MACs per "
                           "head (shared score and value, private score and value, q B and the B^T "
                           "back-projection: its six einsums), the dense decode 2T d_h (two einsums); the "
                           "ratio is 1 + r/d_h + r/T, decode_arithmetic_ratio agrees on the grid, and the "
                           "T → ∞ limit is 1 + r/d_h.")




# ----------------------------------------------------------------------------- bytes read without reuse
def reads_without_reuse(shapes, sample) -> sp.Expr:
    """Elements one decode step reads per token when every head fetches what it needs afresh:
    each of the H heads reads every head-free tensor whole and its own slice of the head-indexed
    ones (the allocated layout says which is which)."""
    total = sp.Integer(0)
    for s in shapes.values():
        if len(s) == 3:
            total += H * symbol_of(s[2], sample)  # read once per head
        else:
            total += symbol_of(s[2], sample) * symbol_of(s[3], sample)  # each head its own slice
    return sp.expand(total)


@proof(
    "shared_reread_per_head",
    item=5,
    claim="A decode kernel that fetches the shared block afresh for every head reads as many shared elements per token as MHA's whole cache (H · 2 d_h = 2 H d_h), and with the private latents more than MHA; Eq. 9's saving needs the shared tile reused across heads.",
    source="English review Sec. 4 ('If it fetches the entire common block afresh for every head, that block alone can require as many reads as MHA'); Eq. 9",
    expected="proved",
)
def shared_reread_per_head(*, reads=reads_without_reuse, layout=reference_layout) -> Verdict:
    """shared_alone_equals_mha: the head-free tensors of the allocated LRKV cache, read H times,
    against MHA's allocated cache; more_than_mha: with the latents the reads exceed MHA's."""
    def shared_only(s):
        shapes = {k: v for k, v in layout(AttentionSpec.lrkv(s[H], s[DH], s[R])).items() if len(v) == 3}
        return reads(shapes, s)

    try:
        shared, how = derive(shared_only)
        total, _ = derive(lambda s: reads(layout(AttentionSpec.lrkv(s[H], s[DH], s[R])), s))
        mha, _ = derive(lambda s: per_token(layout(AttentionSpec.mha(s[H], s[DH])), s))
        excess = sp.factor(total - mha)
        checks = {"shared_alone_equals_mha": sp.simplify(shared - mha) == 0,
                  "more_than_mha": bool(excess.is_positive)}
        ev = {"shared_reads": str(shared), "all_reads": str(total), "mha_cache": str(mha), "excess_over_mha": str(excess),
              "with_reuse": "2 d_h + 2 H r (Eq. 9's count: the shared block read once)", "derivation_samples": how}
    except ValueError as e:
        checks, ev = {"shared_alone_equals_mha": False, "more_than_mha": False}, {"error": str(e)}
    ev["checks"] = checks
    if all(checks.values()):
        return Verdict("proved", "From the allocated layouts: shared_k/v hold 2 d_h per token; fetched once per "
                       "head that is H · 2 d_h = 2 H d_h, exactly MHA's k/v [B, T, H, d_h] ×2, and the private "
                       "latents add 2 H r on top. Eq. 9's 1/H + r/d_h is the byte count only when one fetch of "
                       "the shared tile serves every head.", ev)
    return Verdict("refuted", f"Sub-check(s) {failing(checks)} fail.", ev)
