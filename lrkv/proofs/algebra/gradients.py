"""Gradients of the factored projections (English review Sec. 3).

With W_h = W_S + U_h B_h^T and G_h = ∂L/∂W_h, the differential is
dW_h = dW_S + (dU_h) B_h^T + U_h (dB_h)^T, and matching Frobenius coefficients gives

    ∇_{W_S} L = Σ_h G_h,      ∇_{U_h} L = G_h B_h,      ∇_{B_h} L = G_h^T U_h.

By the chain rule, for ANY differentiable loss dL = Σ_h ⟨G_h, dW_h⟩_F, so the parameter
gradients are exactly those of the linear functional Σ_h tr(G_h^T W_h(θ)) with G_h held
fixed. That functional is differentiated with MatrixSymbols of symbolic size and with
fully symbolic 2×2 matrices, and additionally a genuinely non-linear loss
L = Σ_h Σ_ij f(W_h[i, j]) with an undefined function f is checked (G_h[i, j] = f'(W_h[i, j])).
"""

from __future__ import annotations

import sympy as sp

from ..record import Verdict, failing
from ..registry import proof
from ..symbolic import check_identity, is_zero, jsonable, matrix

H_HEADS = 2


def paper_gradients(G, U, B):
    """The review's formulas; G, U, B are per-head lists."""
    return {"W_S": sum(G[1:], G[0]), "U": [g * b for g, b in zip(G, B)], "B": [g.T * u for g, u in zip(G, U)]}


def _general(gradients) -> tuple[bool, dict]:
    d, d_h, r = sp.symbols("d d_h r", positive=True, integer=True)
    W_S = sp.MatrixSymbol("W_S", d, d_h)
    G = [sp.MatrixSymbol(f"G{h}", d, d_h) for h in range(H_HEADS)]
    U = [sp.MatrixSymbol(f"U{h}", d, r) for h in range(H_HEADS)]
    B = [sp.MatrixSymbol(f"B{h}", d_h, r) for h in range(H_HEADS)]
    terms = [sp.Trace(G[h].T * (W_S + U[h] * B[h].T)) for h in range(H_HEADS)]
    # sympy 1.14 returns 0 for d(Add of Traces)/d(MatrixSymbol); differentiation is linear,
    # so differentiate term by term and sum.
    diff = lambda X: sp.MatAdd(*[t.diff(X) for t in terms]).doit()  # noqa: E731
    try:
        cand = gradients(G, U, B)
        pairs = [("W_S", diff(W_S), cand["W_S"])]
        pairs += [(f"U{h}", diff(U[h]), cand["U"][h]) for h in range(H_HEADS)]
        pairs += [(f"B{h}", diff(B[h]), cand["B"][h]) for h in range(H_HEADS)]
        out, ok = {}, True
        for name, auto, mine in pairs:
            res = sp.expand((auto - mine).doit()).doit()
            zero = res == 0 or getattr(res, "is_ZeroMatrix", False)
            ok &= bool(zero)
            out[name] = {"sympy_derivative": str(auto), "candidate": str(mine), "residual": str(res)}
        return ok, out
    except (sp.ShapeError, ValueError, TypeError) as e:
        return False, {"error": f"{type(e).__name__}: {e}"}


def _explicit(gradients, loss: str) -> tuple[bool, dict]:
    d, d_h, r = 2, 2, 1
    W_S = matrix("w", d, d_h)
    U = [matrix(f"u{h}", d, r) for h in range(H_HEADS)]
    B = [matrix(f"b{h}", d_h, r) for h in range(H_HEADS)]
    W = [W_S + U[h] * B[h].T for h in range(H_HEADS)]
    if loss == "linear":
        G = [matrix(f"g{h}", d, d_h) for h in range(H_HEADS)]
        L = sum(sum(G[h][i, j] * W[h][i, j] for i in range(d) for j in range(d_h)) for h in range(H_HEADS))
    else:  # L = Σ f(W_h[i, j]); G_h[i, j] = f'(W_h[i, j]) evaluated at the factored weights
        f = sp.Function("f")
        L = sum(f(W[h][i, j]) for h in range(H_HEADS) for i in range(d) for j in range(d_h))
        # f'(W_h[i, j]) in sympy's own chain-rule form: W_h[i, j] contains w_ij with coefficient 1.
        G = [sp.Matrix(d, d_h, lambda i, j, h=h: sp.diff(f(W[h][i, j]), W_S[i, j])) for h in range(H_HEADS)]
    grad = lambda M: M.applyfunc(lambda e: sp.diff(L, e))  # noqa: E731 - entry-wise ∂L/∂θ
    try:
        cand = gradients(G, U, B)
        checks = {"W_S": check_identity(lambda: grad(W_S), lambda: cand["W_S"])}
        for h in range(H_HEADS):
            checks[f"U{h}"] = check_identity(lambda h=h: grad(U[h]), lambda h=h: cand["U"][h])
            checks[f"B{h}"] = check_identity(lambda h=h: grad(B[h]), lambda h=h: cand["B"][h])
    except (sp.ShapeError, ValueError, TypeError) as e:
        return False, {"error": f"{type(e).__name__}: {e}"}
    return all(ok for ok, _ in checks.values()), {k: e for k, (_, e) in checks.items()}


@proof(
    "factor_gradients",
    item=7,
    claim="With G_h = ∂L/∂W_h: ∇W_S = Σ_h G_h, ∇U_h = G_h B_h, ∇B_h = G_h^T U_h.",
    source="English review Sec. 3 (optimization paths); Eqs. 2–5",
    expected="proved",
)
def factor_gradients(*, gradients=paper_gradients) -> Verdict:
    gen_ok, gen = _general(gradients)
    lin_ok, lin = _explicit(gradients, "linear")
    nl_ok, nl = _explicit(gradients, "nonlinear")
    ev = {"general_sizes_H2": gen, "explicit_linear_d2_dh2_r1_H2": lin, "explicit_nonlinear_f": jsonable(nl),
          "checks": {"general": gen_ok, "explicit_linear": lin_ok, "explicit_nonlinear": nl_ok}}
    if gen_ok and lin_ok and nl_ok:
        return Verdict("proved", "sympy's matrix derivative of Σ_h tr(G_h^T(W_S + U_h B_h^T)) equals the three "
                       "formulas for symbolic sizes; entry-wise differentiation agrees for fully symbolic "
                       "2×2 matrices, both for the linear functional and for the non-linear loss "
                       "Σ f(W_h[i,j]) with f undefined. W_S collects every head's gradient.", ev)
    return Verdict("refuted", "The candidate gradients differ from the derivative of the loss.", ev)


# ----------------------------------------------------------------------------- zero initialisation
def zero_factors(d: int, d_h: int, r: int):
    """U_h = 0 and B_h = 0: the initialisation the English review warns against."""
    return sp.zeros(d, r), sp.zeros(d_h, r)


def nonlinear_loss(W, G):
    """A loss with a non-constant gradient: tr(G^T W) + ½‖W‖²_F (any smooth loss would do)."""
    return (G.T * W).trace() + sum(e**2 for e in W) / 2


def reference_factors():
    """U_k, U_v, B_k, B_v as the reference's init_lrkv_weights draws them (a small spec)."""
    from lrkv.reference.weights import init_lrkv_weights
    from lrkv.spec import AttentionSpec

    w = init_lrkv_weights(AttentionSpec.lrkv(2, 4, 2, d_model=8))
    return w.u_k, w.u_v, w.basis_k, w.basis_v


@proof(
    "zero_init_kills_residual_gradients",
    item=7,
    claim="Initialising both residual factors at zero makes both residual gradients vanish (∇U_h = G_h B_h = 0 and ∇B_h = G_h^T U_h = 0), and they stay zero under gradient descent; zeroing only one factor does not, and the reference initialises both factors non-zero.",
    source="English review Sec. 3 ('Zeroing both factors would make both residual gradients vanish initially'); Sec. 3 of the paper (small random residual factors); lrkv.reference.weights.init_lrkv_weights",
    expected="proved",
)
def zero_init_kills_residual_gradients(*, init=zero_factors, loss=nonlinear_loss, factors=reference_factors) -> Verdict:
    """both_vanish: ∂L/∂U and ∂L/∂B by differentiation of a non-linear loss of W = W_S + U B^T,
    at the initialisation, for symbolic W_S and G; stays_zero: one gradient step leaves U = B = 0;
    one_zero_factor_recovers: with only B = 0 (U symbolic), ∇B ≠ 0, so 'both' is what matters;
    reference_init_nonzero: the reference's init_lrkv_weights draws both factors non-zero."""
    import torch

    d, d_h, r = 3, 2, 1
    W_S, G = matrix("w", d, d_h), matrix("g", d, d_h)
    U_s, B_s = matrix("u", d, r), matrix("b", d_h, r)
    L = loss(W_S + U_s * B_s.T, G)
    grad_U = sp.Matrix(d, r, lambda i, j: sp.diff(L, U_s[i, j]))
    grad_B = sp.Matrix(d_h, r, lambda i, j: sp.diff(L, B_s[i, j]))

    def at(U0, B0):
        sub = {**dict(zip(U_s, U0)), **dict(zip(B_s, B0))}
        return grad_U.subs(sub).applyfunc(sp.expand), grad_B.subs(sub).applyfunc(sp.expand)

    U0, B0 = init(d, d_h, r)
    gU, gB = at(U0, B0)
    eta = sp.Symbol("eta", positive=True)
    U1, B1 = (U0 - eta * gU).applyfunc(sp.expand), (B0 - eta * gB).applyfunc(sp.expand)
    gU_only_B0, gB_only_B0 = at(U_s, sp.zeros(d_h, r))
    ref_nonzero = all(bool(torch.count_nonzero(t)) for t in factors())
    checks = {"both_vanish": is_zero(gU) and is_zero(gB),
              "stays_zero": is_zero(U1) and is_zero(B1) and is_zero(at(U1, B1)[0]) and is_zero(at(U1, B1)[1]),
              "one_zero_factor_recovers": is_zero(gU_only_B0) and not is_zero(gB_only_B0),
              "reference_init_nonzero": ref_nonzero}
    ev = {"d": d, "d_h": d_h, "r": r, "loss": "tr(G^T W) + ½‖W‖²", "grad_U_at_init": jsonable(gU),
          "grad_B_at_init": jsonable(gB), "grad_B_with_only_B_zero": jsonable(gB_only_B0), "checks": checks}
    if all(checks.values()):
        return Verdict("proved", "Differentiating a non-linear loss of W = W_S + U B^T: at U = B = 0 both "
                       "∂L/∂U = (∂L/∂W) B and ∂L/∂B = (∂L/∂W)^T U are 0 for every W_S and G, so a gradient step "
                       "leaves the factors at 0 for good; with only B = 0, ∂L/∂B = (∂L/∂W)^T U ≠ 0 and training "
                       "moves. The reference draws both factors small and non-zero.", ev)
    return Verdict("refuted", f"Sub-check(s) {failing(checks)} fail.", ev)
