"""Triton kernel for factored LRKV extend (DESIGN §4): ragged, causal, over the cache.

Never import this module directly: `lrkv.kernels.runtime.extend_kernels()` loads it once per
mode, right after `_kernels.py` of the same mode, whose tile helpers (`_to_acc`, `_rsum`,
`_rmax`, `_mm`, `_ld`), slot addressing (`_slot_rows`) and Eq. 6's private query and logits
(`_q_latent`, `_private_logits`) it reuses — so both kernels follow one set of conventions
(masked loads, casts right after loads, int64 row offsets; see `_kernels.py`).

`extend_kernel`: one program per (query token n, group of heads g). The program finds its
sequence b from cu_seqlens_q (b = #{b' : cu[b'+1] <= n}), its position

    p = lengths[b] − n_b + (n − cu[b]),     n_b = cu[b+1] − cu[b]

and runs ONE online softmax over the summed shared + private logits of slots 0 … p
(Eq. 6; causal), loading each shared K/V tile once for all heads of the group, with the
d_h-wide shared accumulator a_h S_V and the r-wide private accumulator a_h R_h^V rescaled
together. At the end it applies B_h^V once per head (Eq. 7) and writes out and lse.

There is no split-K stage: an extend call has N query tokens, which already give the GPU
N × groups programs. Each query re-reads its sequence's prefix; blocking several queries
of a chunk per program (FlashAttention-style) would cut that traffic on long chunks and is
left for when a GPU profile asks for it.
"""

from __future__ import annotations

import sys

import triton
import triton.language as tl

_base = sys.modules[__name__.replace("_extend_kernels_", "_kernels_")]
_to_acc = _base._to_acc
_rsum = _base._rsum
_rmax = _base._rmax
_mm = _base._mm
_ld = _base._ld
_slot_rows = _base._slot_rows
_q_latent = _base._q_latent
_private_logits = _base._private_logits


@triton.jit(do_not_specialize=["B", "H", "D", "R", "PAGE_SIZE", "NUM_PAGES", "MAX_PAGES", "SLOT_LIMIT"])
def extend_kernel(
    Q, CU, SK, SV, LK, LV, BK, BV, KS, COS, SIN, LENGTHS, PT, SCALE, OUT, LSE,
    B, H, D, R, PAGE_SIZE, NUM_PAGES, MAX_PAGES, SLOT_LIMIT,
    s_qn, s_qh, s_qd,  # q            [N, H, d_h]
    s_skb, s_skt, s_skd,  # shared_k     [B, T, d_h]  (paged: [P, page, d_h])
    s_svb, s_svt, s_svd,  # shared_v
    s_lkb, s_lkt, s_lkh, s_lkr,  # latent_k     [B, T, H, r]
    s_lvb, s_lvt, s_lvh, s_lvr,  # latent_v
    s_bkh, s_bkd, s_bkr,  # basis_k      [H, d_h, r]
    s_bvh, s_bvd, s_bvr,  # basis_v
    s_ksb, s_kst, s_ksh,  # key_scale    [B, T, H]
    s_cst, s_csd,  # cos/sin      [T, d_h]  (exact RoPE, by logical slot)
    s_ptb, s_ptp,  # page_table   [B, max_pages]
    GROUP: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_T: tl.constexpr,
    BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_B: tl.constexpr,
    HAS_KS: tl.constexpr, ROPE_EXACT: tl.constexpr, PAGED: tl.constexpr,
    DOT: tl.constexpr, ACC_FP64: tl.constexpr,
):
    """One (query token, head group) program: causal online softmax of Eq. 6, then Eq. 7."""
    pid_n = tl.program_id(0)
    pid_g = tl.program_id(1)
    n64 = pid_n.to(tl.int64)

    # ---- which sequence, which position (ragged queries)
    seq = 0
    for b0 in range(0, B, BLOCK_B):
        offs_b = b0 + tl.arange(0, BLOCK_B)
        ends = tl.load(CU + 1 + offs_b, mask=offs_b < B, other=2147483647)  # cu[b+1]
        seq += _rsum(tl.where(ends <= pid_n, 1, 0), 0)
    b64 = seq.to(tl.int64)
    start = tl.load(CU + b64, mask=seq >= 0, other=0)
    end = tl.load(CU + b64 + 1, mask=seq >= 0, other=0)
    length = tl.load(LENGTHS + b64, mask=seq >= 0, other=0).to(tl.int32)
    pos = length - (end - start) + (pid_n - start)  # position of this query token
    limit = tl.minimum(pos + 1, SLOT_LIMIT)  # causal: slots 0 … p (validated; clamped for safety)

    rows = tl.arange(0, BLOCK_H)
    heads = pid_g * GROUP + rows  # [BLOCK_H]
    hmask = (rows < GROUP) & (heads < H)
    offs_d = tl.arange(0, BLOCK_D)
    offs_r = tl.arange(0, BLOCK_R)
    dmask = offs_d < D
    rmask = offs_r < R

    sm_scale = _to_acc(tl.load(SCALE, mask=pid_n >= 0, other=1.0), ACC_FP64)
    q = _to_acc(tl.load(Q + n64 * s_qn + heads[:, None] * s_qh + offs_d[None, :] * s_qd,
                        mask=hmask[:, None] & dmask[None, :], other=0.0), ACC_FP64)  # [BLOCK_H, BLOCK_D]

    # q_h B_h^K per head of the group: [BLOCK_H, BLOCK_R]
    q_lat = tl.full([BLOCK_H, BLOCK_R], 0.0, dtype=q.dtype)
    if not ROPE_EXACT:
        q_lat = _q_latent(q_lat, Q + n64 * s_qn, s_qh, s_qd, BK, s_bkh, s_bkd, s_bkr, pid_g, rows, offs_d, offs_r,
                          dmask, rmask, H, GROUP, False, ACC_FP64)

    m_i = tl.full([BLOCK_H], float("-inf"), dtype=q.dtype)
    l_i = tl.full([BLOCK_H], 0.0, dtype=q.dtype)
    acc_s = tl.full([BLOCK_H, BLOCK_D], 0.0, dtype=q.dtype)
    acc_p = tl.full([BLOCK_H, BLOCK_R], 0.0, dtype=q.dtype)

    for t0 in range(0, limit, BLOCK_T):
        offs_t = t0 + tl.arange(0, BLOCK_T)  # logical slots (= positions)
        tmask = offs_t < limit
        tmask, row0, row1 = _slot_rows(offs_t, tmask, b64, PT, s_ptb, s_ptp, PAGE_SIZE, NUM_PAGES, MAX_PAGES,
                                       PAGED)

        # shared K tile, once for the group: [BLOCK_D, BLOCK_T]; logits q_h S_K^T
        kT = tl.load(SK + row0[None, :] * s_skb + row1[None, :] * s_skt + offs_d[:, None] * s_skd,
                     mask=dmask[:, None] & tmask[None, :], other=0.0)
        logits = _mm(q, _ld(kT, DOT, ACC_FP64), DOT, True)  # [BLOCK_H, BLOCK_T]

        # + private logits, summed BEFORE the softmax
        logits = _private_logits(logits, q_lat, Q + n64 * s_qn, s_qh, s_qd, BK, s_bkh, s_bkd, s_bkr,
                                 LK, s_lkb, s_lkt, s_lkh, s_lkr, row0, row1, tmask, COS, SIN, s_cst, s_csd,
                                 offs_t, offs_d, offs_r, dmask, rmask, rows, pid_g, H, D, GROUP, ROPE_EXACT,
                                 False, DOT, ACC_FP64)

        if HAS_KS:  # QK-RMSNorm: the joint inverse RMS multiplies the summed dot product
            ks = _to_acc(tl.load(KS + row0[None, :] * s_ksb + row1[None, :] * s_kst + heads[:, None] * s_ksh,
                                 mask=hmask[:, None] & tmask[None, :], other=0.0), ACC_FP64)
            logits = logits * ks
        logits = tl.where(tmask[None, :], logits * sm_scale, float("-inf"))

        # one online softmax per head over the summed logits
        m_new = tl.maximum(m_i, _rmax(logits, 1))  # finite: slot t0 <= p is valid in every tile
        alpha = tl.exp(m_i - m_new)
        p = tl.exp(logits - m_new[:, None])  # [BLOCK_H, BLOCK_T]
        l_i = l_i * alpha + _rsum(p, 1)
        vs = tl.load(SV + row0[:, None] * s_svb + row1[:, None] * s_svt + offs_d[None, :] * s_svd,
                     mask=tmask[:, None] & dmask[None, :], other=0.0)  # [BLOCK_T, BLOCK_D]
        acc_s = acc_s * alpha[:, None] + _mm(p, _ld(vs, DOT, ACC_FP64), DOT, False)  # a_h S_V
        acc_p = acc_p * alpha[:, None]  # the private accumulator shares the rescale
        for hh in range(GROUP):
            h = pid_g * GROUP + hh
            rv = rmask & ((offs_r * 0 + h) < H)
            zv = tl.load(LV + row0[:, None] * s_lvb + row1[:, None] * s_lvt + h * s_lvh
                         + offs_r[None, :] * s_lvr, mask=tmask[:, None] & rv[None, :], other=0.0)
            ph = _rsum(tl.where(rows[:, None] == hh, p, 0.0), 0)  # [BLOCK_T]
            ch = _rsum(ph[:, None] * _to_acc(zv, ACC_FP64), 0)  # [BLOCK_R]  a_h R_h^V (this tile)
            acc_p = tl.where(rows[:, None] == hh, acc_p + ch[None, :], acc_p)
        m_i = m_new

    # ---- Eq. 7: out_h = (acc_s + acc_p (B_h^V)^T) / l, once per head
    inv = tl.where(l_i > 0, 1.0 / tl.where(l_i > 0, l_i, 1.0), 0.0)  # [BLOCK_H]
    out = acc_s
    for hh in range(GROUP):
        h = pid_g * GROUP + hh
        dv = dmask & ((offs_d * 0 + h) < H)
        rv = rmask & ((offs_r * 0 + h) < H)
        bv = tl.load(BV + h * s_bvh + offs_d[:, None] * s_bvd + offs_r[None, :] * s_bvr,
                     mask=dv[:, None] & rv[None, :], other=0.0)  # [BLOCK_D, BLOCK_R]
        ap = _rsum(tl.where(rows[:, None] == hh, acc_p, 0.0), 0)  # [BLOCK_R]
        oh = _rsum(_to_acc(bv, ACC_FP64) * ap[None, :], 1)  # [BLOCK_D]  (a_h R_h^V) B_h^{V T}
        out = tl.where(rows[:, None] == hh, out + oh[None, :], out)
    out = out * inv[:, None]
    lse = tl.where(l_i > 0, m_i + tl.log(tl.where(l_i > 0, l_i, 1.0)), float("-inf"))
    tl.store(OUT + (n64 * H + heads[:, None]) * D + offs_d[None, :], out, mask=hmask[:, None] & dmask[None, :])
    tl.store(LSE + n64 * H + heads, lse, mask=hmask)
