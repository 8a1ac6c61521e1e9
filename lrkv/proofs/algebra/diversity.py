"""Head-diversity geometry (Sec. 4.3 pp. 7–9; Appendix C.1 p. 15).

  * The bilinear head map A_h = W_Q W_K^T is unchanged by a shared orthogonal change of head
    coordinates R (and by any invertible M on queries with M^{-T} on keys). Under RoPE the
    logit of offset Δ is x W_Q R_Δ W_K^T y^T (R_i R_j^T = R_{i−j}), and a change M keeps it
    iff M R_Δ M^T = R_Δ — M must commute with the rotations (e.g. rotate within a plane),
    a change that mixes rotary planes of different frequencies breaks it.
  * Centring: G_c = J G J with J = I − 11^T/H has J1 = 0, so rank(G_c) ≤ H − 1 and the
    effective rank exp(entropy) ≤ H − 1 (Gibbs): Table 3's centred percentages, which divide
    by H, are capped at (H − 1)/H — 83.33% at 6 heads, 94.44% at 18.
"""

from __future__ import annotations

from fractions import Fraction

import sympy as sp

from ..record import Verdict, failing
from ..registry import proof
from ..symbolic import check_identity, is_zero, matrix, nonzero_evidence, residual, rope_matrix


def rotation2(alpha):
    c, s = sp.cos(alpha), sp.sin(alpha)
    return sp.Matrix([[c, -s], [s, c]])


def _embed(block: sp.Matrix, dims: tuple[int, int], n: int) -> sp.Matrix:
    """An n×n identity with a 2×2 block acting on the two given coordinates."""
    M = sp.eye(n)
    for a, i in enumerate(dims):
        for b, j in enumerate(dims):
            M[i, j] = block[a, b]
    return M


def plane_aligned_change(alpha, beta):
    """Rotate inside rotary plane 0 (dims 0, 2) by α and plane 1 (dims 1, 3) by β: commutes with RoPE."""
    return _embed(rotation2(alpha), (0, 2), 4) * _embed(rotation2(beta), (1, 3), 4)


def plane_mixing_change(alpha, beta):
    """Rotate dims 0 and 1, which belong to different rotary planes (the wrong variant)."""
    return _embed(rotation2(alpha), (0, 1), 4)


def linear_gauges(alpha):
    """(label, change of query coordinates, change of key coordinates) that must keep A_h."""
    M = matrix("m", 2, 2)
    return [("rotation", rotation2(alpha), rotation2(alpha)),
            ("reflection_rotation", sp.diag(1, -1) * rotation2(alpha), sp.diag(1, -1) * rotation2(alpha)),
            ("invertible_M", M, M.inv().T)]


def relative_rotation(Ri, Rj):
    """R_i R_j^T: the rotation a query at i and a key at j contribute (should be R_{i−j})."""
    return Ri * Rj.T


@proof(
    "bilinear_map_gauge",
    item=9,
    claim="A_h = W_Q W_K^T is invariant under a shared orthogonal change of head coordinates; under RoPE the offset-Δ map W_Q R_Δ W_K^T keeps that invariance only for changes that commute with the rotations.",
    source="Sec. 4.3 (bilinear form, pp. 7–9); Appendix C.1 (p. 15); English review Sec. 6 and Sec. 8 (gauge caveat)",
    expected="proved",
)
def bilinear_map_gauge(*, change=plane_aligned_change, breaking_change=plane_mixing_change,
                       gauges=linear_gauges, compose=relative_rotation) -> Verdict:
    ev: dict = {}
    WQ, WK = matrix("q", 3, 2), matrix("k", 3, 2)
    al, be = sp.symbols("alpha beta", real=True)
    A = WQ * WK.T
    lin_ok, ok_inv = True, True
    for label, Mq, Mk in gauges(al):
        how = "rational" if label == "invertible_M" else "trig"
        ok, e = check_identity(lambda Mq=Mq, Mk=Mk: (WQ * Mq) * (WK * Mk).T, lambda: A, how=how)
        ev[f"linear_{label}"] = e
        if label == "invertible_M":
            ok_inv = ok
        else:
            lin_ok &= ok
    # RoPE composes: R_i R_j^T = R_{i−j} plane by plane (d_h = 4, frequencies w0, w1).
    i, j, w0, w1 = sp.symbols("i j omega_0 omega_1", real=True)
    Rt = lambda t: rope_matrix([t * w0, t * w1])  # noqa: E731
    ok_rel, e_rel = check_identity(lambda: compose(Rt(i), Rt(j)), lambda: Rt(i - j), how="trig")
    ev["relative_position"] = e_rel
    # Invariance of W_Q M R_Δ M^T W_K^T for all W_Q, W_K ⇔ M R_Δ M^T = R_Δ.
    d = sp.Symbol("Delta", real=True)
    RD = Rt(d)
    Mc = change(al, be)
    res_c = residual(Mc * RD * Mc.T, RD, how="trig")
    commutes = is_zero(res_c)
    ev["candidate_change"] = {"M": str(Mc.tolist()), "M_RΔ_MT_minus_RΔ": "0" if commutes else nonzero_evidence(res_c)}
    Mm = breaking_change(al, be)
    res_m = residual(Mm * RD * Mm.T, RD, how="trig")
    mixing_breaks = not is_zero(res_m)
    ev["plane_mixing_change"] = nonzero_evidence(res_m) if mixing_breaks else "0"
    ev["checks"] = {"linear_orthogonal": lin_ok, "linear_invertible": ok_inv, "relative_position": ok_rel,
                    "candidate_commutes": commutes, "plane_mixing_breaks": mixing_breaks}
    if lin_ok and ok_inv and ok_rel and commutes and mixing_breaks:
        return Verdict("proved", "For symbolic 3×2 W_Q, W_K: (W_Q R)(W_K R)^T = W_Q W_K^T for rotations and "
                       "reflections (R R^T = I) and for any invertible M with M^{-T} on keys. With RoPE, "
                       "R_i R_j^T = R_{i−j} and the map at offset Δ survives a change M iff M R_Δ M^T = R_Δ: "
                       "true for rotations inside a rotary plane, false for a rotation mixing two planes "
                       "of different frequency (non-zero residual).", ev)
    return Verdict("refuted", "The candidate change of basis does not preserve the RoPE bilinear map "
                   "(or the linear invariance failed).", ev)


def centring_matrix(n):
    return sp.eye(n) - sp.ones(n, n) / n


def centred_ceiling(H):
    return Fraction(H - 1, H)


def centring_general(n):
    """J = I − 11^T/n as a matrix expression of symbolic size."""
    return sp.Identity(n) - sp.OneMatrix(n, n) / n


def plogp(x):
    """One term of the (negative) entropy."""
    return x * sp.log(x)


def log_lower_bound(x):
    """ln x ≥ 1 − 1/x for x > 0: the tangent bound behind Gibbs' inequality."""
    return 1 - 1 / x


def gibbs_inequality(entropy_term=plogp, bound=log_lower_bound, k: int = 3) -> tuple[bool, dict]:
    """exp(entropy) ≤ k for any distribution on k atoms (i.e. KL(p‖uniform) ≥ 0), in three steps:

    bound_is_valid    g(x) = ln x − bound(x) has g(1) = 0 and x² g'(x) = x − 1, so g falls on
                      (0, 1) and rises on (1, ∞): g ≥ 0 for every x > 0;
    kl_is_sum_of_g    ln k − H(p) = Σ p_i g(k p_i) identically once Σ p_i = 1 (the bound terms
                      sum to Σ p_i − 1 = 0), so ln k − H(p) ≥ 0 — the inequality itself;
    uniform_attains   the uniform distribution gives exp(H) = k (the ceiling is reached).
    """
    x = sp.Symbol("x", positive=True)
    g = sp.log(x) - bound(x)
    valid = sp.simplify(g.subs(x, 1)) == 0 and sp.simplify(x**2 * sp.diff(g, x) - (x - 1)) == 0
    ps = sp.symbols(f"p_1:{k}", positive=True)
    p = [*ps, 1 - sum(ps)]  # a distribution on k atoms
    kl = sp.log(k) + sum(entropy_term(q) for q in p)  # ln k − H(p)
    decomposition = sp.simplify(sp.expand_log(kl - sum(q * (sp.log(k * q) - bound(k * q)) for q in p), force=True))
    n = sp.Symbol("n", positive=True, integer=True)
    uniform = sp.simplify(sp.exp(-n * entropy_term(1 / n)))
    checks = {"bound_is_valid": valid, "kl_is_sum_of_g": decomposition == 0, "uniform_attains": uniform == n}
    return all(checks.values()), {"g": str(g), "x2_dg": str(sp.simplify(x**2 * sp.diff(g, x))),
                                  "ln_k_minus_H_minus_sum_p_g": str(decomposition), "k": k,
                                  "uniform_effective_rank": str(uniform), "steps": checks}


@proof(
    "centred_gram_ceiling",
    item=9,
    claim="The centred Gram matrix JGJ (J = I − 11^T/H) has rank ≤ H − 1, so the centred effective rank is at most H − 1 and, as a percentage of H, at most (H − 1)/H: 83.33% at 6 heads, 94.44% at 18.",
    source="Appendix C.1 (p. 15), Table 3 (p. 16); English review Sec. 6; Chinese review §4.5",
    expected="proved",
)
def centred_gram_ceiling(*, centring=centring_matrix, ceiling=centred_ceiling, general=centring_general,
                         entropy_term=plogp, log_lower_bound=log_lower_bound) -> Verdict:
    """Sub-checks: general_J_ones (J1 = 0 for symbolic H), explicit_rank_deficient (JGJ·1 = 0 and
    det JGJ = 0 for symbolic symmetric G), gibbs (exp(entropy) ≤ k on k atoms, proved through
    ln x ≥ 1 − 1/x — see gibbs_inequality; an earlier form checked only the identity
    ln 3 + Σp ln p = Σp ln(3p), true for any p, and never the inequality), ceilings (the candidate equals rank(J)/H, the rank computed, not restated)."""
    ev: dict = {}
    checks: dict[str, bool] = {}
    n = sp.Symbol("H", positive=True, integer=True)
    gen = sp.expand(general(n) * sp.OneMatrix(n, 1)).doit()
    ev["general_J_times_ones"] = str(gen)
    checks["general_J_ones"] = bool(gen == 0 or getattr(gen, "is_ZeroMatrix", False))
    explicit = True
    for Hv in (3, 4):
        G = sp.Matrix(Hv, Hv, lambda a, b: sp.Symbol(f"g_{min(a, b)}{max(a, b)}", real=True))  # symmetric
        Jc = centring(Hv)
        Gc = Jc * G * Jc
        # A non-zero null vector (1) already forces rank ≤ H − 1; the determinant is shown at H = 3.
        null = is_zero(residual(Gc * sp.ones(Hv, 1), sp.zeros(Hv, 1)))
        entry = {"Gc_times_ones": "0" if null else "non-zero"}
        if Hv == 3:
            det = sp.expand(Gc.det(method="berkowitz"))
            entry["det_Gc"] = str(det)
            explicit &= det == 0
        ev[f"explicit_H{Hv}"] = entry
        explicit &= null
    checks["explicit_rank_deficient"] = explicit
    # exp(entropy) ≤ number of atoms with weight (Gibbs): the inequality, not only its identity.
    checks["gibbs"], ev["gibbs"] = gibbs_inequality(entropy_term, log_lower_bound)
    table, ceil_ok = {}, True
    for Hv in (6, 18):
        derived = Fraction(centring(Hv).rank(), Hv)  # at most rank(J) eigenvalues carry weight
        c = ceiling(Hv)
        table[str(Hv)] = {"candidate": f"{float(c) * 100:.2f}%", "rank_J_over_H": str(derived)}
        ceil_ok &= c == derived
    checks["ceilings"] = ceil_ok
    ev["ceilings"] = table
    ev["checks"] = checks
    if all(checks.values()):
        return Verdict("proved", "J1 = 0 for symbolic H (and JGJ·1 = 0, det JGJ = 0 for symbolic symmetric "
                       "G at H = 3, 4), so one eigenvalue is always 0 and at most H − 1 carry weight; "
                       "exp(entropy) ≤ number of atoms (Gibbs: ln k − H(p) = Σ p_i g(k p_i) with g(x) = ln x − 1 + 1/x ≥ 0; "
                       "equality when uniform). Ceiling rank(J)/H = "
                       "(H − 1)/H: 83.33% at H = 6, 94.44% at H = 18.", ev)
    failed = [k_ for k_, v in checks.items() if not v]
    return Verdict("refuted", f"Sub-check(s) {failed} fail for the candidate centring or ceiling.", ev)


# ----------------------------------------------------------------------------- Frobenius trace identity
def review_trace_forms(WQi, WKi, WQj, WKj) -> dict:
    """⟨A_i, A_j⟩_F as each review writes it, with small d_h×d_h products only."""
    return {
        "english_review": (WKj.T * WKi * WQi.T * WQj).trace(),  # tr((W_j^K)^T W_i^K (W_i^Q)^T W_j^Q)
        "chinese_review": (WKi.T * WKj * WQj.T * WQi).trace(),  # tr((W_i^K)^T W_j^K (W_j^Q)^T W_i^Q)
    }


@proof(
    "frobenius_trace_identity",
    item=9,
    claim="For A_h = W_h^Q (W_h^K)^T, ⟨A_i, A_j⟩_F = tr((W_j^K)^T W_i^K (W_i^Q)^T W_j^Q), computed from d_h×d_h products without forming the d×d maps.",
    source="Sec. 4.3 and App. C.1, p. 15 (Chinese review §4.5; English review Sec. 6)",
    expected="proved",
)
def frobenius_trace_identity(*, forms=review_trace_forms) -> Verdict:
    d, d_h = 3, 2
    WQi, WKi, WQj, WKj = (matrix(n, d, d_h) for n in ("qi", "ki", "qj", "kj"))
    Ai, Aj = WQi * WKi.T, WQj * WKj.T
    inner = sum(Ai[a, b] * Aj[a, b] for a in range(d) for b in range(d))  # the definition, entry by entry
    got = forms(WQi, WKi, WQj, WKj)
    checks = {name: sp.expand(v - inner) == 0 for name, v in got.items()}
    syms = sorted(set().union(*(m.free_symbols for m in (WQi, WKi, WQj, WKj))), key=lambda x: x.name)
    point = {x: (i % 5) - 2 for i, x in enumerate(syms)}  # one deterministic integer point: a cheap witness
    ev = {"d": d, "d_h": d_h, "entries": "all symbols", "checks": checks,
          "residual_at_integer_point": {k: str(sp.expand(got[k] - inner).subs(point)) for k in got}}
    if checks and all(checks.values()):
        return Verdict("proved", "Σ_ab (A_i)_ab (A_j)_ab equals both reviews' trace forms as polynomials in all "
                       "entries of symbolic 3×2 W^Q, W^K (cyclic trace: tr(A_i^T A_j) = tr(W_i^K W_i^Q^T W_j^Q "
                       "W_j^K^T)), so Gram entries need only d_h×d_h products.", ev)
    return Verdict("refuted", f"Trace form(s) {failing(checks)} differ from ⟨A_i, A_j⟩_F.", ev)


# ----------------------------------------------------------------------------- the centred spectrum
def centred_orthogonal_effective_rank(H: int, centring=centring_matrix) -> sp.Expr:
    """Effective rank of J G J for H orthonormal head maps (G = I): the spectrum of J."""
    J = centring(H)
    if J * J == J:  # a projector: eigenvalues 1 (trace-many times) and 0 — no characteristic polynomial needed
        ones = int(J.trace())
        eig = [sp.Integer(1)] * ones + [sp.Integer(0)] * (H - ones)
    else:
        eig = [v for v, m in J.eigenvals().items() for _ in range(m)]
    total = sum(eig)
    p = [v / total for v in eig if v != 0]
    return sp.nsimplify(sp.exp(-sum(x * sp.log(x) for x in p)))


def identical_maps_gram(n_heads: int, width: int) -> sp.Matrix:
    """The cosine Gram of H head maps that are all the same symbolic map f (normalised rows)."""
    f = matrix("f", 1, width)
    F = sp.Matrix.vstack(*([f] * n_heads))
    return (F * F.T) / (f * f.T)[0]


@proof(
    "identical_maps_centred_gram",
    item=9,
    claim="If all head maps are identical, the centred Gram J G J is the zero matrix: every centred eigenvalue vanishes and the effective rank's normalisation Σλ is 0, so the diagnostic is undefined and must handle that case.",
    source="English review Sec. 6 ('If all maps are identical, every centered eigenvalue vanishes and the normalization is undefined'); App. C.1",
    expected="proved",
)
def identical_maps_centred_gram(*, centring=centring_matrix, gram=identical_maps_gram) -> Verdict:
    """zero_matrix: J G J = 0 for H = 3 identical symbolic maps (G = 11^T after normalisation);
    trace_zero: Σλ = tr(J G J) = 0, the denominator of p_i; distinct_maps_nonzero: for three
    distinct symbolic maps J G J ≠ 0, so the zero is a property of identical maps, not of J."""
    H, w = 3, 3
    G = gram(H, w)
    Gc = (centring(H) * G * centring(H)).applyfunc(lambda e: sp.cancel(sp.together(e)))
    zero = all(e == 0 for e in Gc)
    trace_zero = sp.cancel(Gc.trace()) == 0
    F = matrix("g", H, w)  # three distinct maps (rows), unnormalised: the centring alone
    Gd = (centring(H) * (F * F.T) * centring(H)).applyfunc(sp.expand)
    distinct_nonzero = any(e != 0 for e in Gd)
    checks = {"zero_matrix": zero, "trace_zero": trace_zero, "distinct_maps_nonzero": distinct_nonzero}
    ev = {"H": H, "map_width": w, "G": str(G.applyfunc(sp.cancel).tolist()), "JGJ": str(Gc.tolist()), "checks": checks}
    if all(checks.values()):
        return Verdict("proved", "Identical normalised maps have cosine Gram G = 11^T, and J 1 = 0 gives J G J = 0: "
                       "every centred eigenvalue is 0 and p_i = λ_i/Σλ is 0/0, so the effective rank is undefined "
                       "(distinct symbolic maps give J G J ≠ 0).", ev)
    return Verdict("refuted", f"Sub-check(s) {failing(checks)} fail.", ev)
