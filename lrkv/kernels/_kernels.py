"""Triton kernels for factored LRKV decode (paper Eqs. 6–7) and cache append.

Never import this module directly: `lrkv.kernels.runtime.kernels()` loads it once per
mode, because Triton decides at *decoration* time whether `@triton.jit` compiles for the
GPU or builds an interpreter function (TRITON_INTERPRET=1). Loading the same file under
two module names gives the two variants without touching the process environment for
longer than the import.

The kernels (each entry a thin @triton.jit function over the @triton.jit helpers below):

* `decode_split_kernel`, `paged_split_kernel`, `extend_split_kernel` — stage 1 of split-K
  decode over a contiguous cache, a paged cache, and the ragged causal extend: each finds
  its row's sequence and length and runs the one shared tile loop, `_attend_split`. One
  program per (query row, group of heads g, KV split s). For every tile of BLOCK_T slots it
  loads the shared K/V tile ONCE and reuses it for all heads of the group (the bandwidth saving of
  LRKV: the shared stream is read once per group instead of once per head), then per head

      logits_h = scale · key_scale_h ⊙ ( q_h S_K^T + (q_h B_h^K) R_h^{K T} )      (Eq. 6)

  keeps one online softmax over the SUMMED logits, a d_h-wide shared accumulator a_h S_V
  and an r-wide private accumulator a_h R_h^V, both rescaled when the running max grows.
  It writes the split's running max m, normaliser l and the two unnormalised accumulators.

* `decode_combine_kernel` — stage 2, one program per (b, h): merges the splits by
  log-sum-exp and applies B_h^V once per head to the merged private accumulator:

      out_h = (Σ_s w_s acc_s) / L + ((Σ_s w_s acc_p) / L) (B_h^V)^T              (Eq. 7)

* `append_kernel` — writes one token's cache entries at slot lengths[b] (contiguous or
  paged) as raw bits, so the copy is bit-exact whatever the float dtype.

* `append_fp8_kernel` — the same write for an fp8 cache (DESIGN §4.1): each part's entry is
  quantized, saturating round-to-nearest-even, with its static scale or with a dynamic one
  (amax / max finite per token or token-head) that it also writes into the scale tensor; the
  fp8 bits are computed in integer-exact arithmetic (`_fp8_bits`), bit for bit the reference's
  `lrkv.reference.fp8.quantize`.

The tile loop reads as the math, in the manner of Triton's fused-attention tutorial:
load q → for each tile: where its slots live (`_slot_rows`), the shared logits
(`_shared_logits`), the private logits of one of three variants (`_private_logits_per_head`,
`_private_logits_wide`, `_private_logits_rope`), one online-softmax step (`_online_softmax`),
the shared and private value accumulators (`_shared_values`, `_private_values_per_head`,
`_private_values_wide`) → store the split's partial state (`_store_softmax_state`,
`_store_private_wide`).

Conventions used by every kernel (DESIGN §8):
  - EVERY load is masked (the interpreter turns an out-of-bounds load into a crash, and on
    the GPU it is silent corruption); masks also re-check page-table entries and lengths
    against the allocation, so that not even a wrong length can leave it;
  - loads are cast to the accumulation dtype right away (float32, or float64 for float64
    inputs), which also keeps bfloat16 out of the interpreter's numpy arithmetic; the one
    exception is a tile feeding a tensor-core tl.dot (DOT_LP), which is consumed in q's
    16-bit dtype: as loaded, or converted exactly from an fp8 cache;
  - row offsets are int64: b · stride_b overflows int32 at realistic cache sizes
    (16 × 128K × 32 × 54 elements of latents is 3.6e9);
  - every tensor has unit stride on its last axis and is dense past its first (the Python
    wrappers copy one that is not): a cache part needs one stride, its first axis's, and
    the others are products of the sizes;
  - an optional tensor (key_scale, the RoPE table, the page table, an fp8 scale) is passed
    as None when absent: Triton compiles each combination as its own kernel, so `X is not
    None` is a compile-time switch.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _to_acc(x, ACC_FP64: tl.constexpr):
    # Loads are cast here, right after tl.load: float64 inputs stay float64 (the
    # interpreter's tight check), everything else accumulates in float32. An fp8 cache tile
    # goes through float32 first (exact: 4 significant bits; there is no direct fp8 ->
    # float64 conversion); its scale is applied to the product it feeds (`_fp8_scaled`).
    if x.dtype.is_fp8():
        x = x.to(tl.float32)
    if ACC_FP64:
        return x.to(tl.float64)
    else:
        return x.to(tl.float32)


# Reductions go through tl.reduce with Triton's own combine functions instead of tl.sum /
# tl.max: those are @jit functions of triton.language, compiled-mode objects whenever
# triton was imported before TRITON_INTERPRET was set, and the interpreter cannot call
# them. tl.reduce is patched by the interpreter and recognises these combine functions.
@triton.jit
def _rsum(x, AXIS: tl.constexpr):
    return tl.reduce(x, AXIS, tl.standard._sum_combine)


@triton.jit
def _rmax(x, AXIS: tl.constexpr):
    return tl.reduce(x, AXIS, tl.standard._elementwise_max)


# How a tile product [M, K] @ [K, N] is computed (the DOT constexpr). `a` is always in the
# accumulation dtype; `b` is the tile as loaded (`_ld` keeps it in q's 16-bit dtype for DOT_LP).
DOT_IEEE = tl.constexpr(0)  # fp32/fp64 tl.dot, no TF32: the interpreter, and float32 everywhere
DOT_LP = tl.constexpr(1)  # 16-bit tensor cores; a split into hi + lo halves of b's dtype
DOT_FMA = tl.constexpr(2)  # broadcast-and-sum: float64 on a GPU (no fp64 tl.dot relied on)
DOT_TF32X3 = tl.constexpr(3)  # float32 on request: three TF32 tensor-core products


@triton.jit
def _ld(x, DOT: tl.constexpr, ACC_FP64: tl.constexpr, LP: tl.constexpr):
    # A tile that feeds a tl.dot as its `b` operand: for DOT_LP in LP, q's 16-bit dtype — a
    # 16-bit tile as loaded, an fp8 tile converted (exact: e4m3 and e5m2 values are bf16 and
    # fp16 values), so fp8 caches take the same tensor-core products; else cast right after
    # the load (the interpreter has no bfloat16 arithmetic).
    if DOT == DOT_LP:
        if x.dtype.is_fp8():
            x = x.to(tl.float32)  # the interpreter converts fp8 through float32 only
        return x.to(LP)
    else:
        return _to_acc(x, ACC_FP64)


@triton.jit
def _mm(a, b, DOT: tl.constexpr, A_EXACT: tl.constexpr):
    # a [M, K] (accumulation dtype) @ b [K, N] -> [M, N] in the accumulation dtype.
    # DOT_LP: a = hi + lo with hi = a rounded to b's dtype; two 16-bit products with fp32
    # accumulation keep ~16 mantissa bits of a (FlashAttention rounds P to 8). A_EXACT says
    # a already holds values of b's dtype (q, loaded as such), so lo = 0 is skipped.
    if DOT == DOT_LP:
        a_hi = a.to(b.dtype)
        out = tl.dot(a_hi, b, out_dtype=tl.float32)
        if not A_EXACT:
            a_lo = (a - a_hi.to(a.dtype)).to(b.dtype)
            out += tl.dot(a_lo, b, out_dtype=tl.float32)
        return out
    elif DOT == DOT_FMA:
        return _rsum(a[:, :, None] * b[None, :, :], 1)
    elif DOT == DOT_TF32X3:
        return tl.dot(a, b, input_precision="tf32x3")
    else:
        return tl.dot(a, b, input_precision="ieee")


# ---- which slots a program reads ----------------------------------------------------------
@triton.jit
def _extend_block(pid, CU, BLK, NSEQ, LENGTHS, SLOT_LIMIT, BLOCK_B: tl.constexpr, BLOCK_Q: tl.constexpr):
    """Extend: program row `pid` is token block k = pid − blk[b] of its sequence b — the count
    of blk[b+1] <= pid (BLK: blocks before each sequence, [NSEQ+1]; CU = cu_seqlens_q itself
    when BLOCK_Q = 1, so a block is a token). Returns (b, the block's first query row cu[b] +
    k·BLOCK_Q, its causal length p + 1 with p = lengths[b] − n_b + k·BLOCK_Q its position, the
    block's tokens min(BLOCK_Q, n_b − k·BLOCK_Q)). A row past the last block (the grid is an
    upper bound) finds no sequence: it gets no tokens."""
    seq = 0
    for b0 in range(0, NSEQ, BLOCK_B):
        offs_b = b0 + tl.arange(0, BLOCK_B)
        ends = tl.load(BLK + 1 + offs_b, mask=offs_b < NSEQ, other=2147483647)  # [BLOCK_B]  blk[b+1]
        seq += _rsum(tl.where(ends <= pid, 1, 0), 0)
    b64 = seq.to(tl.int64)
    found = seq < NSEQ
    blk0 = tl.load(BLK + b64, mask=found, other=0)
    start = tl.load(CU + b64, mask=found, other=0)
    end = tl.load(CU + b64 + 1, mask=found, other=0)
    seq_len = tl.load(LENGTHS + b64, mask=found, other=0).to(tl.int32)
    first = (pid - blk0) * BLOCK_Q  # the block's first token, within the sequence's new ones
    n_tok = tl.where(found, tl.minimum(end - start - first, BLOCK_Q), 0)
    length = tl.minimum(seq_len - (end - start) + first + 1, SLOT_LIMIT)  # validated; clamped for safety
    return b64, (start + first).to(tl.int64), length, n_tok


@triton.jit
def _slot_rows(offs_t, tmask, b64, PT, PAGE_SIZE, NUM_PAGES, MAX_PAGES, t0=0, BLOCK_T: tl.constexpr = 16,
               TILE_IN_PAGE: tl.constexpr = False):
    """Where logical slots offs_t of sequence b live (DESIGN §4): (mask, row0, row1).

    Contiguous (PT is None): row0 = b, row1 = the slot. Paged (the block-table convention, PT
    the contiguous [B, MAX_PAGES] page table): slot j is row j % page_size of page
    page_table[b, j // page_size]; a slot whose table entry is past max_pages, negative or past
    the last page is masked off, so no load leaves the allocation.
    TILE_IN_PAGE (the wrapper checked that page_size and every tile start t0 are multiples of
    BLOCK_T): the whole tile lies in one page, so the table is read once per tile and the rows
    are written as t0 % page_size + arange — affine in the slot, as in the contiguous layout,
    which lets the compiler keep one base address per tile instead of one per element.
    """
    if PT is not None:
        if TILE_IN_PAGE:
            pidx = t0 // PAGE_SIZE
            lane = offs_t * 0  # vector lanes (the interpreter mis-types scalar & vector masks)
            in_table = (lane + pidx) < MAX_PAGES
            page = tl.load(PT + b64 * MAX_PAGES + (lane + pidx).to(tl.int64), mask=tmask & in_table, other=0)
            tmask = tmask & in_table & (page >= 0) & (page < NUM_PAGES)
            row0 = page.to(tl.int64)
            row1 = (t0 % PAGE_SIZE + tl.arange(0, BLOCK_T)).to(tl.int64)
        else:
            page_idx = offs_t // PAGE_SIZE
            tmask = tmask & (page_idx < MAX_PAGES)
            page = tl.load(PT + b64 * MAX_PAGES + page_idx.to(tl.int64), mask=tmask, other=0)
            tmask = tmask & (page >= 0) & (page < NUM_PAGES)
            row0 = page.to(tl.int64)
            row1 = (offs_t % PAGE_SIZE).to(tl.int64)
    else:
        row0 = offs_t.to(tl.int64) * 0 + b64
        row1 = offs_t.to(tl.int64)
    return tmask, row0, row1


# ---- the shared stream: one tile per group, reused by every head --------------------------
@triton.jit
def _shared_logits(q, SK, srow, tmask, offs_d, dmask, DOT: tl.constexpr, ACC_FP64: tl.constexpr, LP: tl.constexpr):
    """q_h S_K^T [BLOCK_H, BLOCK_T], Eq. 6's shared term, for every head of the group from ONE
    [BLOCK_D, BLOCK_T] tile of shared keys: LRKV's saving, read once per group, not per head.
    srow [BLOCK_T]: the element offsets of the tile's cache rows (d_h contiguous)."""
    kT = tl.load(SK + srow[None, :] + offs_d[:, None],
                 mask=dmask[:, None] & tmask[None, :], other=0.0)  # [BLOCK_D, BLOCK_T]  S_K^T
    return _mm(q, _ld(kT, DOT, ACC_FP64, LP), DOT, True)


@triton.jit
def _shared_values(acc_s, alpha, p, SV, srow, tmask, offs_d, dmask, DOT: tl.constexpr, ACC_FP64: tl.constexpr,
                   LP: tl.constexpr, CS=None, slot=None, static=None, GRAN: tl.constexpr = 0):
    """acc_s [BLOCK_H, BLOCK_D] rescaled by alpha, plus this tile's p S_V: Eq. 7's shared term.
    An fp8 S_V under DOT_LP (GRAN, its scale) is scaled here (`_fp8_lp_values`); otherwise
    its scale is already on p."""
    vs = tl.load(SV + srow[:, None] + offs_d[None, :],
                 mask=tmask[:, None] & dmask[None, :], other=0.0)  # [BLOCK_T, BLOCK_D]  S_V
    if DOT == DOT_LP and GRAN != FP8_NONE:
        return acc_s * alpha[:, None] + _fp8_lp_values(p, vs, CS, slot, 0, tmask, offs_d, dmask, static, GRAN, LP)
    return acc_s * alpha[:, None] + _mm(p, _ld(vs, DOT, ACC_FP64, LP), DOT, False)


@triton.jit
def _online_softmax(m_i, l_i, logits, GUARD: tl.constexpr = False):
    """One step of the online softmax over a tile of SUMMED logits [BLOCK_H, BLOCK_T]:
    (m_new, alpha = exp(m_old − m_new), p = exp(logits − m_new), l_new). Masked slots carry
    −inf logits, so p is 0 there. One query token per program: m_new is finite because every
    tile has a valid slot. A block of tokens (GUARD) has rows whose causal range ends before
    the tile or the split: their m stays −inf, and exp(−inf − −inf) would be NaN, so they
    subtract 0 instead (alpha = p = 0, l = 0: an empty row, as the combine expects)."""
    m_new = tl.maximum(m_i, _rmax(logits, 1))  # [BLOCK_H]
    m_ref = m_new
    if GUARD:
        m_ref = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp(m_i - m_ref)  # [BLOCK_H]
    p = tl.exp(logits - m_ref[:, None])  # [BLOCK_H, BLOCK_T]
    return m_new, alpha, p, l_i * alpha + _rsum(p, 1)


# ---- fp8 caches: each part's scale, applied to the product it feeds (DESIGN §4.1) ---------
# Granularity codes of a part's scale. The kernels take the four parts' codes packed into
# one constexpr, FP8 = sk | sv << 3 | lk << 6 | lv << 9 (lrkv.kernels.decode.fp8_code), and
# decode them with `_fp8_part`. 0: the part is not fp8.
FP8_NONE = tl.constexpr(0)
FP8_TENSOR = tl.constexpr(1)  # []                  one scalar
FP8_HEAD = tl.constexpr(2)  # [H]                 latents only
FP8_TOKEN = tl.constexpr(3)  # [rows, slots]       one per slot, paged like the parts
FP8_TOKEN_HEAD = tl.constexpr(4)  # [rows, slots, H]    latents only
# Scales are contiguous (the wrappers copy one that is not): a per-token scale of slot
# (row0, row1) is element `slot = row0 · slots + row1` (slots: T_max, or the page size), a
# per-token-head one element slot · H + h, a per-head one element h.


@triton.jit
def _static_scale(S, heads, hmask, GRAN: tl.constexpr, ACC_FP64: tl.constexpr):
    """A per-tensor or per-head scale as a [BLOCK_H] vector (head h's row), loaded once per
    program; ones for the per-token granularities (read per tile) and for a non-fp8 part."""
    if GRAN == FP8_TENSOR:
        s = _to_acc(tl.load(S + heads * 0, mask=hmask, other=1.0), ACC_FP64)
    elif GRAN == FP8_HEAD:
        s = _to_acc(tl.load(S + heads, mask=hmask, other=1.0), ACC_FP64)
    else:
        s = _to_acc((heads * 0).to(tl.float32) + 1.0, ACC_FP64)
    return s


@triton.jit
def _fp8_scaled(term, static, S, slot, H, tmask, heads, hmask, GRAN: tl.constexpr, ACC_FP64: tl.constexpr):
    """term [BLOCK_H, BLOCK_T] (a logit term or the softmax weights) times its part's scale.

    Every granularity's scale is constant along the axis the term's product contracts (d_h
    for the shared parts, r for the latents), so scaling the product equals scaling the
    stored tile — one multiply per (head, slot) instead of per element, and one rounding
    fewer. K scales multiply their own logit term (shared and latent K never share a scale),
    V scales the weights that meet their own values. Per-token scales are read at the tile's
    slots (`slot` [BLOCK_T], paged: the physical page and row) exactly as the parts are;
    masked slots read 1, so a garbage NaN scale never enters."""
    if GRAN == FP8_TOKEN:
        s = tl.load(S + slot[None, :] + heads[:, None] * 0,
                    mask=hmask[:, None] & tmask[None, :], other=1.0)  # [BLOCK_H, BLOCK_T]
        out = term * _to_acc(s, ACC_FP64)
    elif GRAN == FP8_TOKEN_HEAD:
        s = tl.load(S + slot[None, :] * H + heads[:, None],
                    mask=hmask[:, None] & tmask[None, :], other=1.0)  # [BLOCK_H, BLOCK_T]
        out = term * _to_acc(s, ACC_FP64)
    elif GRAN == FP8_NONE:
        out = term
    else:
        out = term * static[:, None]  # per tensor (folded: a scalar), per head (its row)
    return out


@triton.jit
def _fp8_lp_values(p, v, S, slot, H, tmask, col_head, cmask, static, GRAN: tl.constexpr, LP: tl.constexpr):
    """p [BLOCK_H, BLOCK_T] @ an fp8 value tile v [BLOCK_T, N] with 16-bit products (DOT_LP),
    scaled. The scale cannot go on the weights here as `_fp8_scaled` puts it for fp32
    products: a weight times a scale (~ amax / 448, or / 57344 for e5m2) falls below fp16's
    normal range, and the 16-bit split of the weight would lose its bits. So a per-tensor or
    per-head scale (constant along the slots the product contracts) multiplies the product,
    exactly, and a per-token (-head) scale dequantizes the tile on load — each row times its
    slot's scale (per token-head: column c times the scale of its head col_head[c]) rounded
    to LP, q's dtype, as the same values in a 16-bit cache would be held."""
    if GRAN == FP8_TOKEN:
        s = tl.load(S + slot, mask=tmask, other=1.0)  # [BLOCK_T]
        v = (v.to(tl.float32) * s[:, None]).to(LP)
    elif GRAN == FP8_TOKEN_HEAD:
        s = tl.load(S + slot[:, None] * H + col_head[None, :],
                    mask=tmask[:, None] & cmask[None, :], other=1.0)  # [BLOCK_T, N]
        v = (v.to(tl.float32) * s).to(LP)
    out = _mm(p, _ld(v, DOT_LP, False, LP), DOT_LP, False)  # [BLOCK_H, N]
    if GRAN == FP8_TENSOR or GRAN == FP8_HEAD:
        out = out * static[:, None]  # row h is head h's (wide: only head h's columns are kept)
    return out


# ---- the bases B^K, B^V: contiguous [H, d_h, r] -------------------------------------------
@triton.jit
def _basis_at(h, d, j, H, D, R):
    """Element offset of B[h, d, j] in a contiguous [H, d_h, r] basis (h, d, j broadcast):
    head h reads its own basis B_h, in Eq. 6 (B_h^K) and Eq. 7 (B_h^V) alike."""
    return h * (D * R) + d * R + j


# ---- the per-head private path: one [BLOCK_T, r] tile and product per head ----------------
# Latents are [rows, slots, H, r] dense in (slots, H, r): a slot's cache row starts at
# row0 · s_lb + row1 · H·r (`lrow`), head h's r entries at lrow + h·r.
@triton.jit
def _head_basis(BK, h, H, D, R, offs_d, offs_r, dmask, rmask):
    """Head h's basis tile B_h^K [BLOCK_D, BLOCK_R] and h's d- and r-masks, all-false past
    the last head. The masks are built as vectors: the interpreter mis-types scalar & vector."""
    dv = dmask & ((offs_d * 0 + h) < H)
    rv = rmask & ((offs_r * 0 + h) < H)
    bk = tl.load(BK + _basis_at(h, offs_d[:, None], offs_r[None, :], H, D, R),
                 mask=dv[:, None] & rv[None, :], other=0.0)  # [BLOCK_D, BLOCK_R]
    return bk, dv, rv


# A program's rows are (query token, head) pairs: row i is token i // GROUP of the program's
# block of BLOCK_Q tokens and head i % GROUP of its group; `rsel` holds that head, or −1 for a
# padded row, so where(rsel == hh) selects head hh's rows. Decode has one token: rows are heads.
# With one token a head's product is a vector (broadcast-and-sum); with a block of tokens it is
# a tl.dot of the head's rows against its tile, which every token of the block shares.
# The head loops stay loops (not tl.static_range): unrolled, the compiler hoists every head's
# tile and keeps them live — fp8 caches then spill under Triton 3.6 at 16 warps, and a block
# of tokens keeps every head's tl.dot staging buffers in shared memory (past the 227 KB a block
# may hold at 64 rows); compile_check, both Tritons.


@triton.jit
def _q_latent_head(q_lat, q, Q_ROW, BK, h, hh, rsel, offs_d, offs_r, dmask, rmask, H, D, R,
                   BLOCK_Q: tl.constexpr, DOT: tl.constexpr, ACC_FP64: tl.constexpr, LP: tl.constexpr):
    """q_lat [BLOCK_H, BLOCK_R] with head h's rows set to q B_h^K (Eq. 6's private query)."""
    bk, dv, rv = _head_basis(BK, h, H, D, R, offs_d, offs_r, dmask, rmask)  # [BLOCK_D, BLOCK_R]
    if BLOCK_Q == 1:
        qh = tl.load(Q_ROW + h * D + offs_d, mask=dv, other=0.0)  # [BLOCK_D]  the token's q_h
        ql = _rsum(_to_acc(qh, ACC_FP64)[:, None] * _to_acc(bk, ACC_FP64), 0)  # [BLOCK_R]
        out = tl.where(rsel[:, None] == hh, ql[None, :], q_lat)
    else:
        qm = tl.where(rsel[:, None] == hh, q, 0.0)  # [BLOCK_H, BLOCK_D]  head h's token rows
        out = tl.where(rsel[:, None] == hh, _mm(qm, _ld(bk, DOT, ACC_FP64, LP), DOT, True), q_lat)
    return out


@triton.jit
def _q_latent(q, Q_ROW, BK, pid_g, rsel, offs_d, offs_r, dmask, rmask, H, D, R,
              BLOCK_H: tl.constexpr, BLOCK_R: tl.constexpr, GROUP: tl.constexpr, BLOCK_Q: tl.constexpr,
              DOT: tl.constexpr, ACC_FP64: tl.constexpr, LP: tl.constexpr):
    """q_h B_h^K for every row (Eq. 6's private query): [BLOCK_H, BLOCK_R], once per program.

    One head at a time, because a [BLOCK_H, BLOCK_D, BLOCK_R] product does not fit in
    registers at d_h = 128. Q_ROW points at the query token's [H, d_h] row (one token); q
    [BLOCK_H, BLOCK_D] holds every row's query (a block of tokens).
    """
    q_lat = tl.full([BLOCK_H, BLOCK_R], 0.0, dtype=tl.float64 if ACC_FP64 else tl.float32)
    for hh in range(GROUP):
        q_lat = _q_latent_head(q_lat, q, Q_ROW, BK, pid_g * GROUP + hh, hh, rsel, offs_d, offs_r, dmask, rmask,
                               H, D, R, BLOCK_Q, DOT, ACC_FP64, LP)
    return q_lat


@triton.jit
def _private_logits_head(logits, q_lat, LK, lrow, tmask, offs_r, rmask, rsel, h, hh, H, R,
                         BLOCK_Q: tl.constexpr, DOT: tl.constexpr, ACC_FP64: tl.constexpr, LP: tl.constexpr):
    """logits [BLOCK_H, BLOCK_T] + (q B_h^K) R_h^{K T} on head h's rows (Eq. 6's private term)."""
    rv = rmask & ((offs_r * 0 + h) < H)
    if BLOCK_Q == 1:
        zk = tl.load(LK + lrow[:, None] + h * R + offs_r[None, :],
                     mask=tmask[:, None] & rv[None, :], other=0.0)  # [BLOCK_T, BLOCK_R]  R_h^K
        ql = _rsum(tl.where(rsel[:, None] == hh, q_lat, 0.0), 0)  # [BLOCK_R]  q_h B_h^K
        lh = _rsum(_to_acc(zk, ACC_FP64) * ql[None, :], 1)  # [BLOCK_T]  (q_h B_h^K) R_h^{K T}
        out = tl.where(rsel[:, None] == hh, logits + lh[None, :], logits)
    else:
        zkT = tl.load(LK + lrow[None, :] + h * R + offs_r[:, None],
                      mask=rv[:, None] & tmask[None, :], other=0.0)  # [BLOCK_R, BLOCK_T]  R_h^{K T}
        lh = _mm(tl.where(rsel[:, None] == hh, q_lat, 0.0), _ld(zkT, DOT, ACC_FP64, LP), DOT, False)
        out = tl.where(rsel[:, None] == hh, logits + lh, logits)  # lh [BLOCK_H, BLOCK_T]
    return out


@triton.jit
def _private_logits_per_head(logits, q_lat, LK, lrow, tmask, offs_r, rmask, rsel, pid_g, H, R,
                             GROUP: tl.constexpr, BLOCK_Q: tl.constexpr, DOT: tl.constexpr, ACC_FP64: tl.constexpr,
                             LP: tl.constexpr):
    """logits [BLOCK_H, BLOCK_T] + (q_h B_h^K) R_h^{K T}, Eq. 6's private term, one head at a
    time: a [heads, BLOCK_T, r] tile would not fit in registers (it spills at H = 16, r = 64);
    rows move in and out of the per-group [BLOCK_H, ...] blocks with where(rsel == hh), which
    is cheap next to the loads."""
    for hh in range(GROUP):
        logits = _private_logits_head(logits, q_lat, LK, lrow, tmask, offs_r, rmask, rsel, pid_g * GROUP + hh, hh,
                                      H, R, BLOCK_Q, DOT, ACC_FP64, LP)
    return logits


@triton.jit
def _private_values_head(acc_p, p, LV, lrow, tmask, offs_r, rmask, rsel, h, hh, H, R, BLOCK_Q: tl.constexpr,
                         DOT: tl.constexpr, ACC_FP64: tl.constexpr, LP: tl.constexpr, CS, slot, static,
                         GRAN: tl.constexpr):
    """acc_p [BLOCK_H, BLOCK_R] + this tile's a R_h^V on head h's rows. A block of tokens over
    an fp8 R^V under DOT_LP takes the scale here (`_fp8_lp_values`); otherwise it is on p."""
    rv = rmask & ((offs_r * 0 + h) < H)
    zv = tl.load(LV + lrow[:, None] + h * R + offs_r[None, :],
                 mask=tmask[:, None] & rv[None, :], other=0.0)  # [BLOCK_T, BLOCK_R]  R_h^V
    if BLOCK_Q == 1:
        ph = _rsum(tl.where(rsel[:, None] == hh, p, 0.0), 0)  # [BLOCK_T]  head h's softmax weights
        ch = _rsum(ph[:, None] * _to_acc(zv, ACC_FP64), 0)  # [BLOCK_R]  a_h R_h^V (this tile)
        out = tl.where(rsel[:, None] == hh, acc_p + ch[None, :], acc_p)
    else:
        pm = tl.where(rsel[:, None] == hh, p, 0.0)  # [BLOCK_H, BLOCK_T]  head h's rows' weights
        if DOT == DOT_LP and GRAN != FP8_NONE:
            ch = _fp8_lp_values(pm, zv, CS, slot, H, tmask, offs_r * 0 + h, rv, static, GRAN, LP)
        else:
            ch = _mm(pm, _ld(zv, DOT, ACC_FP64, LP), DOT, False)  # [BLOCK_H, BLOCK_R]
        out = tl.where(rsel[:, None] == hh, acc_p + ch, acc_p)
    return out


@triton.jit
def _private_values_per_head(acc_p, p, LV, lrow, tmask, offs_r, rmask, rsel, pid_g, H, R, GROUP: tl.constexpr,
                             BLOCK_Q: tl.constexpr, DOT: tl.constexpr, ACC_FP64: tl.constexpr, LP: tl.constexpr,
                             CS, slot, static, GRAN: tl.constexpr):
    """acc_p [BLOCK_H, BLOCK_R] + this tile's a_h R_h^V for every head, one head at a time
    (Eq. 7's private term before B_h^V, which stage 2 applies once)."""
    for hh in range(GROUP):
        acc_p = _private_values_head(acc_p, p, LV, lrow, tmask, offs_r, rmask, rsel, pid_g * GROUP + hh, hh, H, R,
                                     BLOCK_Q, DOT, ACC_FP64, LP, CS, slot, static, GRAN)
    return acc_p


# ---- exact RoPE: the private logits of rotated keys, per head and slot --------------------
@triton.jit
def _private_logits_rope(logits, Q_ROW, BK, LK, lrow, tmask, ROPE, offs_t, offs_d, offs_r, dmask, rmask, rsel,
                         pid_g, H, D, R, GROUP: tl.constexpr, DOT: tl.constexpr, ACC_FP64: tl.constexpr,
                         LP: tl.constexpr):
    """logits [BLOCK_H, BLOCK_T] + q_h · rope(z_j B_h^T, j) for every head, one head at a time.

    rope(k, j)·q = k·rope(q, −j): instead of rebuilding the rotated private key as a
    [BLOCK_T, d_h] tile (two tl.dots), rotate q_h back by each slot's angle and project it
    through B_h^K — the same position-dependent contraction, O(T·r·d_h) per head, one tl.dot
    per head and tile. ROPE is the contiguous [slots, 2, d_h] table (cos, sin), indexed by the
    LOGICAL slot, which is the same in the paged layout.
    """
    cmask = tmask[:, None] & dmask[None, :]
    cos = _to_acc(tl.load(ROPE + offs_t[:, None] * (2 * D) + offs_d[None, :],
                          mask=cmask, other=0.0), ACC_FP64)  # [BLOCK_T, BLOCK_D]
    sin = _to_acc(tl.load(ROPE + offs_t[:, None] * (2 * D) + D + offs_d[None, :],
                          mask=cmask, other=0.0), ACC_FP64)
    # rotate_half(x)[d] = sign_d · x[perm(d)] (rotate-half convention, DESIGN §5)
    half = D // 2
    perm_d = tl.where(offs_d < half, offs_d + half, offs_d - half)
    sign_d = tl.where(offs_d < half, -1.0, 1.0)
    for hh in range(GROUP):
        h = pid_g * GROUP + hh
        bk, dv, rv = _head_basis(BK, h, H, D, R, offs_d, offs_r, dmask, rmask)  # [BLOCK_D, BLOCK_R]  B_h^K
        qh = _to_acc(tl.load(Q_ROW + h * D + offs_d, mask=dv, other=0.0), ACC_FP64)
        qp = _to_acc(tl.load(Q_ROW + h * D + perm_d, mask=dv, other=0.0), ACC_FP64)
        # rope(q_h, −j)_d = q_d cos_{j,d} − sign_d q_{perm(d)} sin_{j,d}   [BLOCK_T, BLOCK_D]
        q_rot = qh[None, :] * cos - (sign_d * qp)[None, :] * sin
        qb = _mm(q_rot, _ld(bk, DOT, ACC_FP64, LP), DOT, False)  # [BLOCK_T, BLOCK_R]
        z = tl.load(LK + lrow[:, None] + h * R + offs_r[None, :],
                    mask=tmask[:, None] & rv[None, :], other=0.0)  # [BLOCK_T, BLOCK_R]  R_h^K
        lh = _rsum(qb * _to_acc(z, ACC_FP64), 1)  # [BLOCK_T]  q_h · rope(z_j B_h^T, j)
        logits = tl.where(rsel[:, None] == hh, logits + lh[None, :], logits)
    return logits


# ---- the "wide" private path: one [BLOCK_T, G·r] latent tile per head group ------------------
# A group's latents for one slot are G·r CONSECUTIVE elements of the cache row ([.., H, r] with
# r contiguous), so the group reads them as one wide, coalesced tile instead of G strided
# [BLOCK_T, r] tiles, and every head's private logits (Eq. 6) and private value accumulation
# (Eq. 7) come from ONE tl.dot each against a block-diagonal operand: column c of the wide axis
# belongs to head c // r, entry c % r. The off-diagonal products are wasted tensor-core work
# (G× the useful FLOPs), which at ≈ 16 FLOP per loaded byte is still far below the ridge point.
@triton.jit
def _wide_cols(pid_g, H, R, GROUP: tl.constexpr, BLOCK_GR: tl.constexpr):
    """The wide axis of a group: (offset in the cache row, head in group, entry, global head,
    valid) per column. The offsets are the group's one contiguous run of G·r latents, written
    as such so that the compiler sees the contiguity and can vectorise the loads."""
    offs_c = tl.arange(0, BLOCK_GR)
    hc = offs_c // R  # [BLOCK_GR] head within the group
    jc = offs_c % R  # [BLOCK_GR] latent entry
    head_c = pid_g * GROUP + hc
    cmask = (hc < GROUP) & (head_c < H)
    return pid_g * (GROUP * R) + offs_c, hc, jc, head_c, cmask


@triton.jit
def _q_block_diag(Q, qrow, BK, hmask, rsel, hc, jc, head_c, cmask, H, D, R,
                  BLOCK_H: tl.constexpr, BLOCK_GR: tl.constexpr, DOT: tl.constexpr, ACC_FP64: tl.constexpr,
                  LP: tl.constexpr):
    """The block-diagonal private query [BLOCK_H, BLOCK_GR]: a row of head g holds q B_g^K
    (Eq. 6's private query) in head g's r columns and zeros elsewhere (qrow [BLOCK_H]: each
    row's q offset).

    Q_group [BLOCK_H, d_h] @ [B_h0 | B_h1 | ...] [d_h, G·r] in 16-wide slices of d_h (a whole
    [d_h, G·r] basis tile would not fit in registers), then masked to the diagonal blocks: the
    off-diagonal products are wasted, once per program, outside the slot loop. q is used as
    loaded, so with 16-bit inputs each product is exact and the sum is in fp32, as in the
    per-head `_q_latent`."""
    acc = tl.full([BLOCK_H, BLOCK_GR], 0.0, dtype=tl.float64 if ACC_FP64 else tl.float32)
    for d0 in range(0, D, 16):
        offs = d0 + tl.arange(0, 16)
        dm = offs < D
        qc = tl.load(Q + qrow[:, None] + offs[None, :],
                     mask=hmask[:, None] & dm[None, :], other=0.0)  # [BLOCK_H, 16]
        bc = tl.load(BK + _basis_at(head_c[None, :], offs[:, None], jc[None, :], H, D, R),
                     mask=dm[:, None] & cmask[None, :], other=0.0)  # [16, BLOCK_GR]  B_{h(c)}^K
        acc += _mm(_to_acc(qc, ACC_FP64), _ld(bc, DOT, ACC_FP64, LP), DOT, True)
    return tl.where(rsel[:, None] == hc[None, :], acc, 0.0)


@triton.jit
def _q_block_diag_halves(q_bd, DOT: tl.constexpr, LP: tl.constexpr):
    """(hi, lo) of the block-diagonal query for DOT_LP — its 16-bit hi + lo halves in LP, q's
    dtype, split once per program rather than per tile (see _mm) — else (q_bd, q_bd)."""
    if DOT == DOT_LP:
        q_hi = q_bd.to(LP)
        return q_hi, (q_bd - q_hi.to(q_bd.dtype)).to(LP)
    else:
        return q_bd, q_bd


@triton.jit
def _private_logits_wide(logits, q_bd, q_bd_lo, LK, lrow, col, tmask, cmask,
                         DOT: tl.constexpr, ACC_FP64: tl.constexpr, LP: tl.constexpr):
    """logits [BLOCK_H, BLOCK_T] + (q_h B_h^K) R_h^{K T} for every head of the group (Eq. 6),
    one tl.dot of the block-diagonal query with the group's wide latent tile. For DOT_LP,
    q_bd / q_bd_lo are its hi / lo 16-bit halves, split once before the slot loop."""
    zkT = tl.load(LK + lrow[None, :] + col[:, None],
                  mask=cmask[:, None] & tmask[None, :], other=0.0)  # [BLOCK_GR, BLOCK_T]
    if DOT == DOT_LP:
        zkT = _ld(zkT, DOT, ACC_FP64, LP)
        logits += tl.dot(q_bd, zkT, out_dtype=tl.float32)
        logits += tl.dot(q_bd_lo, zkT, out_dtype=tl.float32)
    else:
        logits += _mm(q_bd, _ld(zkT, DOT, ACC_FP64, LP), DOT, False)
    return logits


@triton.jit
def _private_values_wide(acc_pw, p, LV, lrow, col, tmask, cmask, DOT: tl.constexpr, ACC_FP64: tl.constexpr,
                         LP: tl.constexpr, CS=None, slot=None, H=0, head_c=None, static=None,
                         GRAN: tl.constexpr = 0):
    """acc_pw [BLOCK_H, BLOCK_GR] + p R^V over the group's wide value latents: row g, head g's
    columns is a_g R_g^V for this tile (Eq. 7's private term before B_g^V); the other
    columns are never stored. An fp8 R^V under DOT_LP is scaled here, as in `_shared_values`."""
    zv = tl.load(LV + lrow[:, None] + col[None, :],
                 mask=tmask[:, None] & cmask[None, :], other=0.0)  # [BLOCK_T, BLOCK_GR]
    if DOT == DOT_LP and GRAN != FP8_NONE:
        return acc_pw + _fp8_lp_values(p, zv, CS, slot, H, tmask, head_c, cmask, static, GRAN, LP)
    return acc_pw + _mm(p, _ld(zv, DOT, ACC_FP64, LP), DOT, False)


# ---- the split's partial state: one scratch buffer, four regions ---------------------------
@triton.jit
def _scratch(WS, n_rows, D, R):
    """(ACC_S, ACC_P, M, L): the regions of the split scratch WS for its n_rows = rows · H ·
    splits rows (row (b, h, s) is (b · H + h) · splits + s): acc_s [n_rows, d_h], then acc_p
    [n_rows, r], m [n_rows], l [n_rows] (lrkv.kernels.decode.scratch_size)."""
    ACC_P = WS + n_rows * D
    M = ACC_P + n_rows * R
    return WS, ACC_P, M, M + n_rows


@triton.jit
def _store_softmax_state(M, L, ACC_S, m_i, l_i, acc_s, base, hmask, offs_d, dmask, D):
    """m, l [BLOCK_H] and acc_s [BLOCK_H, BLOCK_D] of this split at scratch rows `base`."""
    tl.store(M + base, m_i, mask=hmask)
    tl.store(L + base, l_i, mask=hmask)
    tl.store(ACC_S + base[:, None] * D + offs_d[None, :], acc_s, mask=hmask[:, None] & dmask[None, :])


@triton.jit
def _store_private_wide(ACC_P, acc_pw, prog64, rtok, pid_s, num_splits, rsel, hmask, hc, jc, head_c, cmask, H, R,
                        BLOCK_Q: tl.constexpr):
    """The block diagonal of acc_pw [BLOCK_H, BLOCK_GR] — a row of head g, the columns of head
    g, which is a R_g^V — into the scratch rows' acc_p; the off-diagonal products are dropped.
    One token: a column's scratch row is the same for every row, so it is computed per column."""
    keep = (rsel[:, None] == hc[None, :]) & cmask[None, :] & hmask[:, None]
    if BLOCK_Q == 1:
        base_c = (prog64 * H + head_c) * num_splits + pid_s  # [BLOCK_GR]
        tl.store(ACC_P + (base_c * R + jc)[None, :] + rsel[:, None] * 0, acc_pw, mask=keep)
    else:
        base = ((prog64 + rtok)[:, None] * H + head_c[None, :]) * num_splits + pid_s  # [BLOCK_H, BLOCK_GR]
        tl.store(ACC_P + base * R + jc[None, :], acc_pw, mask=keep)


# ---- stage 1: the tile loop every entry shares ---------------------------------------------
@triton.jit
def _attend_split(Q, SK, SV, LK, LV, BK, KS, ROPE, SCALE, WS, CS_SK, CS_SV, CS_LK, CS_LV, PT,
                  prog64, b64, length, n_tok, n_rows, H, D, R, SPLIT_SIZE, SLOT_LIMIT, PAGE_SIZE, NUM_PAGES,
                  s_sb, s_lb, s_ksb, GROUP: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_T: tl.constexpr,
                  BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr, DOT: tl.constexpr, WIDE: tl.constexpr,
                  BLOCK_GR: tl.constexpr, FP8: tl.constexpr, TILE_IN_PAGE: tl.constexpr, BLOCK_Q: tl.constexpr):
    """One (query tokens, head group, split) program of stage 1: the online softmax of Eq. 6
    over the split's slots, its partial state (m, l, a_h S_V, a_h R_h^V) stored for Eq. 7.

    Query rows prog64 … prog64 + n_tok − 1 (n_tok <= BLOCK_Q: decode and paged decode have
    one, extend a block of one sequence's new tokens) read cache row `b64`, the first up to
    `length` slots and each next one slot further (causal); the entries work these out, decode
    and paged decode from lengths[b], extend from cu_seqlens_q. Every cache tile is loaded
    once for the whole block, so extend's loads grow with the cache, not with tokens × cache
    (FlashAttention's forward shares a K/V tile among a block of queries the same way); the
    program's BLOCK_H rows are its (token, head) pairs. n_rows: the grid's query rows (the
    scratch's). Optional parts
    come as None, and Triton compiles each combination as its own kernel: KS (QK-RMSNorm
    key_scale), ROPE (exact RoPE's [slots, 2, d_h] cos/sin table), PT (a paged cache's
    [B, max_pages] table), CS_* (an fp8 part's float32 scale, FP8 its granularity codes).

    WIDE: the group's latents are read as one [BLOCK_T, BLOCK_GR ≥ GROUP·r] tile and the
    private logits and values are one tl.dot each (`_private_*_wide`); otherwise one head at
    a time. Exact RoPE keeps the per-head private logits (its contraction is per head and
    slot); its private values follow WIDE like the others.

    An fp8 cache (DESIGN §4.1): the parts are loaded as stored and each scale multiplies the
    product it feeds (`_fp8_scaled`): the shared-K scale the shared logit term q_h S_K^T only,
    the latent-K scale the private term (q_h B_h^K) R_h^{K T} only (Eq. 6), the V scales the
    softmax weights that meet S_V and R_h^V (Eq. 7; l uses the unscaled weights). A
    per-tensor scale is a scalar folded into its term."""
    pid_g = tl.program_id(1)
    pid_s = tl.program_id(2)
    num_splits = tl.num_programs(2)
    ACC_FP64: tl.constexpr = Q.dtype.element_ty == tl.float64  # accumulate in float64 for float64 inputs
    LP: tl.constexpr = Q.dtype.element_ty  # DOT_LP's product dtype: q's, also for an fp8 cache's tiles
    # the four parts' fp8 granularities (0: not fp8), unpacked from FP8
    FP8_SK: tl.constexpr = FP8 & 7
    FP8_SV: tl.constexpr = (FP8 >> 3) & 7
    FP8_LK: tl.constexpr = (FP8 >> 6) & 7
    FP8_LV: tl.constexpr = (FP8 >> 9) & 7
    CACHE_FP8: tl.constexpr = FP8 != 0
    if PT is not None:
        max_pages = SLOT_LIMIT // PAGE_SIZE
        slots = PAGE_SIZE  # the parts' second axis: [P, page, ...]
    else:
        max_pages = 0
        slots = SLOT_LIMIT  # [B, T_max, ...]

    # ---- the split's slot range: [split_lo, split_hi), up to the block's longest causal range
    # (its last token's), clamped to the allocation
    split_lo = pid_s * SPLIT_SIZE
    if BLOCK_Q == 1:
        last = length
    else:
        last = tl.where(n_tok > 0, length + n_tok - 1, 0)
    split_hi = tl.minimum(split_lo + SPLIT_SIZE, tl.minimum(last, SLOT_LIMIT))

    # ---- the program's rows, (token, head) pairs, and the index vectors
    rows = tl.arange(0, BLOCK_H)
    if BLOCK_Q == 1:
        rtok = rows * 0  # [BLOCK_H] token of the row within the block
        rhead = rows  # [BLOCK_H] head of the row within the group
    else:
        rtok = rows // GROUP
        rhead = rows % GROUP
    heads = pid_g * GROUP + rhead  # [BLOCK_H] global head index
    hmask = (rhead < GROUP) & (heads < H) & (rtok < n_tok)
    rsel = tl.where(hmask, rhead, -1)  # the row's head in the group; −1: a padded row
    qrow = (prog64 + rtok) * (H * D) + heads * D  # [BLOCK_H] int64: the row's q (q is [rows, H, d_h])
    # the heads the program's once-per-program loads (the bases) mask by: none for an extend row
    # past the last token block (the grid is an upper bound), which then loads nothing at all
    if BLOCK_Q == 1:
        h_live = H
    else:
        h_live = tl.where(n_tok > 0, H, 0)
    offs_d = tl.arange(0, BLOCK_D)
    offs_r = tl.arange(0, BLOCK_R)
    dmask = offs_d < D
    rmask = offs_r < R

    # The scale arrives as a 1-element tensor in the accumulation dtype: a Python float
    # argument would be passed as float32 and cost the float64 path 8 digits.
    sm_scale = _to_acc(tl.load(SCALE, mask=pid_s >= 0, other=1.0), ACC_FP64)

    # ---- load q for the rows: [BLOCK_H, BLOCK_D]
    Q_ROW = Q + prog64 * (H * D)  # one token: its [H, d_h] row
    q = _to_acc(tl.load(Q + qrow[:, None] + offs_d[None, :],
                        mask=hmask[:, None] & dmask[None, :], other=0.0), ACC_FP64)

    # ---- the private query, once per program (exact RoPE rotates it per tile instead; it
    # runs one token per program: its rotated query is per head and slot)
    if ROPE is not None:
        tl.static_assert(BLOCK_Q == 1, "exact RoPE runs one query token per program")
    if ROPE is None and not WIDE:
        q_lat = _q_latent(q, Q_ROW, BK, pid_g, rsel, offs_d, offs_r, dmask, rmask, h_live, D, R,
                          BLOCK_H, BLOCK_R, GROUP, BLOCK_Q, DOT, ACC_FP64, LP)  # [BLOCK_H, BLOCK_R]
    if WIDE:
        col, hc, jc, head_c, cmask = _wide_cols(pid_g, h_live, R, GROUP, BLOCK_GR)
        if ROPE is None:
            q_bd, q_bd_lo = _q_block_diag_halves(
                _q_block_diag(Q, qrow, BK, hmask, rsel, hc, jc, head_c, cmask, H, D, R,
                              BLOCK_H, BLOCK_GR, DOT, ACC_FP64, LP),
                DOT, LP)  # [BLOCK_H, BLOCK_GR] each
        acc_p = tl.full([BLOCK_H, BLOCK_GR], 0.0, dtype=q.dtype)  # a_h R^V over the whole wide axis
    else:
        acc_p = tl.full([BLOCK_H, BLOCK_R], 0.0, dtype=q.dtype)  # a_h R_h^V

    # ---- fp8 cache: the static (per-tensor / per-head) scales, once per program  [BLOCK_H]
    # (ones, never loaded, for a part that is not fp8)
    st_sk = _static_scale(CS_SK, heads, hmask, FP8_SK, ACC_FP64)
    st_sv = _static_scale(CS_SV, heads, hmask, FP8_SV, ACC_FP64)
    st_lk = _static_scale(CS_LK, heads, hmask, FP8_LK, ACC_FP64)
    st_lv = _static_scale(CS_LV, heads, hmask, FP8_LV, ACC_FP64)

    # ---- running state of the online softmax
    m_i = tl.full([BLOCK_H], float("-inf"), dtype=q.dtype)
    l_i = tl.full([BLOCK_H], 0.0, dtype=q.dtype)
    acc_s = tl.full([BLOCK_H, BLOCK_D], 0.0, dtype=q.dtype)  # a_h S_V

    # ---- loop over the split's tiles
    for t0 in range(split_lo, split_hi, BLOCK_T):
        # where the tile's slots live: contiguous rows, or pages through the page table;
        # slot [BLOCK_T] is the flat (row, slot) index of the fp8 scales (int32: the wrapper
        # refuses a scale of 2^31 elements; int64 costs the fp8 wide tile a spill), srow / lrow
        # the element offsets of the shared / latent cache rows (dense past their first axis)
        offs_t = t0 + tl.arange(0, BLOCK_T)  # logical slots (= positions)
        tmask, row0, row1 = _slot_rows(offs_t, offs_t < split_hi, b64, PT, PAGE_SIZE, NUM_PAGES, max_pages,
                                       t0, BLOCK_T, TILE_IN_PAGE)
        slot = (row0 * slots + row1).to(tl.int32)
        srow = row0 * s_sb + row1 * D
        lrow = row0 * s_lb + row1 * (H * R)

        # Eq. 6: shared logits q_h S_K^T, then each head's private logits added to its row
        logits = _shared_logits(q, SK, srow, tmask, offs_d, dmask, DOT, ACC_FP64, LP)  # [BLOCK_H, BLOCK_T]
        if CACHE_FP8:
            # the shared-K scale multiplies the shared term alone; the private term is built
            # from zero and scaled by the latent-K scale below
            shared_term = _fp8_scaled(logits, st_sk, CS_SK, slot, H, tmask, heads, hmask, FP8_SK, ACC_FP64)
            logits = logits * 0.0
        if ROPE is not None:
            logits = _private_logits_rope(logits, Q_ROW, BK, LK, lrow, tmask, ROPE, offs_t, offs_d, offs_r, dmask,
                                          rmask, rsel, pid_g, H, D, R, GROUP, DOT, ACC_FP64, LP)
        elif WIDE:
            logits = _private_logits_wide(logits, q_bd, q_bd_lo, LK, lrow, col, tmask, cmask, DOT, ACC_FP64, LP)
        else:
            logits = _private_logits_per_head(logits, q_lat, LK, lrow, tmask, offs_r, rmask, rsel, pid_g, H, R,
                                              GROUP, BLOCK_Q, DOT, ACC_FP64, LP)
        if CACHE_FP8:
            logits = shared_term + _fp8_scaled(logits, st_lk, CS_LK, slot, H, tmask, heads, hmask, FP8_LK, ACC_FP64)
        if KS is not None:
            # QK-RMSNorm: the joint inverse RMS multiplies the SUMMED dot product
            ks = _to_acc(tl.load(KS + (row0 * s_ksb + row1 * H)[None, :] + heads[:, None],
                                 mask=hmask[:, None] & tmask[None, :], other=0.0), ACC_FP64)  # [BLOCK_H, BLOCK_T]
            logits = logits * ks
        # masked slots become −inf through `where`, never through arithmetic: NaN garbage stays out
        logits = tl.where(tmask[None, :], logits * sm_scale, float("-inf"))
        if BLOCK_Q > 1:  # causal: the row of token i of the block attends length + i slots
            logits = tl.where(offs_t[None, :] < (length + rtok)[:, None], logits, float("-inf"))

        # one online softmax per row over the summed logits
        m_new, alpha, p, l_i = _online_softmax(m_i, l_i, logits, BLOCK_Q > 1)

        # Eq. 7: both accumulators rescaled by alpha, then this tile's a_h S_V and a_h R_h^V
        # (fp8: the weights that meet each value part carry that part's scale — with fp32
        # products; 16-bit ones scale the tile or the product instead, see _fp8_lp_values)
        p_s = p
        p_p = p
        if CACHE_FP8:
            if DOT != DOT_LP:
                p_s = _fp8_scaled(p, st_sv, CS_SV, slot, H, tmask, heads, hmask, FP8_SV, ACC_FP64)
            if DOT != DOT_LP or (not WIDE and BLOCK_Q == 1):  # one token per head: no tile product
                p_p = _fp8_scaled(p, st_lv, CS_LV, slot, H, tmask, heads, hmask, FP8_LV, ACC_FP64)
        acc_s = _shared_values(acc_s, alpha, p_s, SV, srow, tmask, offs_d, dmask, DOT, ACC_FP64, LP,
                               CS_SV, slot, st_sv, FP8_SV)
        acc_p = acc_p * alpha[:, None]
        if WIDE:
            acc_p = _private_values_wide(acc_p, p_p, LV, lrow, col, tmask, cmask, DOT, ACC_FP64, LP,
                                         CS_LV, slot, H, head_c, st_lv, FP8_LV)
        else:
            acc_p = _private_values_per_head(acc_p, p_p, LV, lrow, tmask, offs_r, rmask, rsel, pid_g, H, R,
                                             GROUP, BLOCK_Q, DOT, ACC_FP64, LP, CS_LV, slot, st_lv, FP8_LV)
        m_i = m_new

    # ---- store the split's partial state (scratch rows [n_rows, H, splits])
    ACC_S, ACC_P, M, L = _scratch(WS, n_rows.to(tl.int64) * H * num_splits, D, R)
    base = ((prog64 + rtok) * H + heads) * num_splits + pid_s  # [BLOCK_H]
    _store_softmax_state(M, L, ACC_S, m_i, l_i, acc_s, base, hmask, offs_d, dmask, D)
    if WIDE:
        _store_private_wide(ACC_P, acc_p, prog64, rtok, pid_s, num_splits, rsel, hmask, hc, jc, head_c, cmask, H, R,
                            BLOCK_Q)
    else:
        tl.store(ACC_P + base[:, None] * R + offs_r[None, :], acc_p, mask=hmask[:, None] & rmask[None, :])


# ---- stage 1 entries: grid (rows, head groups, splits) -------------------------------------
# Every tensor is contiguous past its first axis (the wrapper copies one that is not, once per
# call): q [rows, H, d_h] and the bases [H, d_h, r] wholly; a cache part [rows, slots, ...]
# with one stride for its first axis (s_sb: shared_k and shared_v, s_lb: latent_k and
# latent_v, s_ksb: key_scale); the scratch WS in its four regions (`_scratch`).
# Counts that change from call to call (split size, slot limit, pages) are not specialised on
# (== 1, % 16): that would only multiply compiles. H, d_h and r are: the strides folded from
# them (a slot's row at row1 · d_h, row1 · H·r) need Triton's divisibility-by-16 facts to
# vectorise the loads, as the stride arguments they replace had them.
@triton.jit(do_not_specialize=["SPLIT_SIZE", "SLOT_LIMIT"])
def decode_split_kernel(
    Q, SK, SV, LK, LV, BK, KS, ROPE, LENGTHS, SCALE, WS,  # q [B, H, d_h]; cache [B, T, d_h], [B, T, H, r]
    CS_SK, CS_SV, CS_LK, CS_LV,  # fp8 scales (DESIGN §4.1), None for a cache at compute precision
    H, D, R, SPLIT_SIZE, SLOT_LIMIT,  # SLOT_LIMIT: T_max
    s_sb, s_lb, s_ksb,
    GROUP: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_R: tl.constexpr, DOT: tl.constexpr, WIDE: tl.constexpr, BLOCK_GR: tl.constexpr, FP8: tl.constexpr,
):
    """Stage 1 of split-K decode (Eqs. 6–7) over a contiguous cache: batch row b attends its
    lengths[b] slots."""
    pid_b = tl.program_id(0)
    b64 = pid_b.to(tl.int64)
    length = tl.load(LENGTHS + pid_b, mask=pid_b >= 0, other=0).to(tl.int32)
    _attend_split(Q, SK, SV, LK, LV, BK, KS, ROPE, SCALE, WS, CS_SK, CS_SV, CS_LK, CS_LV, None,
                  b64, b64, length, 1, tl.num_programs(0), H, D, R, SPLIT_SIZE, SLOT_LIMIT, 1, 0, s_sb, s_lb, s_ksb,
                  GROUP, BLOCK_H, BLOCK_T, BLOCK_D, BLOCK_R, DOT, WIDE, BLOCK_GR, FP8, False, 1)


@triton.jit(do_not_specialize=["SPLIT_SIZE", "SLOT_LIMIT", "PAGE_SIZE", "NUM_PAGES"])
def paged_split_kernel(
    Q, SK, SV, LK, LV, BK, KS, ROPE, LENGTHS, PT, SCALE, WS,  # cache pages [P, page, d_h], [P, page, H, r]
    CS_SK, CS_SV, CS_LK, CS_LV,
    H, D, R, SPLIT_SIZE, SLOT_LIMIT, PAGE_SIZE, NUM_PAGES,  # SLOT_LIMIT: max_pages · page
    s_sb, s_lb, s_ksb,
    GROUP: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_R: tl.constexpr, DOT: tl.constexpr, WIDE: tl.constexpr, BLOCK_GR: tl.constexpr, FP8: tl.constexpr,
    TILE_IN_PAGE: tl.constexpr,
):
    """Stage 1 of split-K decode (Eqs. 6–7) over a paged cache: batch row b attends its
    lengths[b] slots through the page table PT [B, max_pages]."""
    pid_b = tl.program_id(0)
    b64 = pid_b.to(tl.int64)
    length = tl.load(LENGTHS + pid_b, mask=pid_b >= 0, other=0).to(tl.int32)
    _attend_split(Q, SK, SV, LK, LV, BK, KS, ROPE, SCALE, WS, CS_SK, CS_SV, CS_LK, CS_LV, PT,
                  b64, b64, length, 1, tl.num_programs(0), H, D, R, SPLIT_SIZE, SLOT_LIMIT, PAGE_SIZE, NUM_PAGES,
                  s_sb, s_lb, s_ksb, GROUP, BLOCK_H, BLOCK_T, BLOCK_D, BLOCK_R, DOT, WIDE, BLOCK_GR, FP8,
                  TILE_IN_PAGE, 1)


@triton.jit(do_not_specialize=["SPLIT_SIZE", "SLOT_LIMIT", "NSEQ", "PAGE_SIZE", "NUM_PAGES"])
def extend_split_kernel(
    Q, SK, SV, LK, LV, BK, KS, ROPE, LENGTHS, CU, PT, SCALE, WS,  # q [N, H, d_h]; CU [2, NSEQ + 1]; PT or None
    CS_SK, CS_SV, CS_LK, CS_LV,
    H, D, R, SPLIT_SIZE, SLOT_LIMIT, NSEQ, PAGE_SIZE, NUM_PAGES,
    s_sb, s_lb, s_ksb,
    GROUP: tl.constexpr, BLOCK_H: tl.constexpr, BLOCK_T: tl.constexpr, BLOCK_D: tl.constexpr,
    BLOCK_R: tl.constexpr, DOT: tl.constexpr, WIDE: tl.constexpr, BLOCK_GR: tl.constexpr, FP8: tl.constexpr,
    TILE_IN_PAGE: tl.constexpr, BLOCK_B: tl.constexpr, BLOCK_Q: tl.constexpr,
):
    """Stage 1 of extend (chunked prefill, speculative verification; DESIGN §4), contiguous or
    paged: program row k is the k-th block of up to BLOCK_Q new tokens of one sequence of a
    ragged batch (`_extend_block`; CU holds cu_seqlens_q, then the token blocks before each
    sequence — cu_seqlens_q again when BLOCK_Q = 1), and the same split loop runs over the
    block's causal slots, each token's 0 … p (Eqs. 6–7). Rows past the last block have no
    tokens and store nothing. The same stage 2 merges, per query token (N = cu[NSEQ] of them:
    the scratch's rows)."""
    pid = tl.program_id(0)
    BLK = CU + NSEQ + 1
    b64, token0, length, n_tok = _extend_block(pid, CU, BLK, NSEQ, LENGTHS, SLOT_LIMIT, BLOCK_B, BLOCK_Q)
    n_rows = tl.load(CU + NSEQ, mask=pid >= 0, other=0)  # N = cu[NSEQ]
    _attend_split(Q, SK, SV, LK, LV, BK, KS, ROPE, SCALE, WS, CS_SK, CS_SV, CS_LK, CS_LV, PT,
                  token0, b64, length, n_tok, n_rows, H, D, R, SPLIT_SIZE, SLOT_LIMIT, PAGE_SIZE, NUM_PAGES,
                  s_sb, s_lb, s_ksb, GROUP, BLOCK_H, BLOCK_T, BLOCK_D, BLOCK_R, DOT, WIDE, BLOCK_GR, FP8,
                  TILE_IN_PAGE, BLOCK_Q)


@triton.jit(do_not_specialize=["NUM_SPLITS"])
def decode_combine_kernel(
    WS, BV, OUT, LSE,  # scratch (`_scratch`); basis_v [H, d_h, r]; out [B, H, d_h]; lse [B, H]
    H, D, R, NUM_SPLITS,
    BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr, BLOCK_R: tl.constexpr,
):
    """Stage 2: log-sum-exp merge of the splits, then B_h^V once per head (Eq. 7)."""
    pid_b = tl.program_id(0)
    pid_h = tl.program_id(1)
    ACC_FP64: tl.constexpr = WS.dtype.element_ty == tl.float64
    offs_s = tl.arange(0, BLOCK_S)
    offs_d = tl.arange(0, BLOCK_D)
    offs_r = tl.arange(0, BLOCK_R)
    smask = offs_s < NUM_SPLITS
    dmask = offs_d < D
    rmask = offs_r < R
    bh = pid_b.to(tl.int64) * H + pid_h
    base = bh * NUM_SPLITS + offs_s  # [BLOCK_S]  the splits' scratch rows
    ACC_S, ACC_P, M, L = _scratch(WS, tl.num_programs(0).to(tl.int64) * H * NUM_SPLITS, D, R)

    # weights of the splits: w_s = exp(m_s − max m), L = Σ w_s l_s
    m = _to_acc(tl.load(M + base, mask=smask, other=float("-inf")), ACC_FP64)
    l = _to_acc(tl.load(L + base, mask=smask, other=0.0), ACC_FP64)
    m_max = _rmax(m, 0)
    # empty splits carry m = -inf; an empty sequence has every split empty
    m_ref = tl.where(m_max == float("-inf"), 0.0, m_max)
    w = tl.exp(m - m_ref)  # [BLOCK_S], 0 for empty splits
    l_tot = _rsum(w * l, 0)
    inv = tl.where(l_tot > 0, 1.0 / tl.where(l_tot > 0, l_tot, 1.0), 0.0)  # no 1/0, even unused

    # merged accumulators; B_h^V applied once, to the r-wide private one
    acc_s = tl.load(ACC_S + base[:, None] * D + offs_d[None, :], mask=smask[:, None] & dmask[None, :], other=0.0)
    acc_p = tl.load(ACC_P + base[:, None] * R + offs_r[None, :], mask=smask[:, None] & rmask[None, :], other=0.0)
    out_s = _rsum(w[:, None] * _to_acc(acc_s, ACC_FP64), 0) * inv  # [BLOCK_D]  a_h S_V
    ap = _rsum(w[:, None] * _to_acc(acc_p, ACC_FP64), 0) * inv  # [BLOCK_R]  a_h R_h^V
    bv = tl.load(BV + _basis_at(pid_h, offs_d[:, None], offs_r[None, :], H, D, R),
                 mask=dmask[:, None] & rmask[None, :], other=0.0)  # [BLOCK_D, BLOCK_R]  B_h^V
    out_p = _rsum(_to_acc(bv, ACC_FP64) * ap[None, :], 1)  # [BLOCK_D]  (a_h R_h^V) B_h^{V T}
    out = out_s + out_p  # Eq. 7
    lse = tl.where(l_tot > 0, m_ref + tl.log(tl.where(l_tot > 0, l_tot, 1.0)), float("-inf"))
    tl.store(OUT + bh * D + offs_d, out, mask=dmask)
    tl.store(LSE + bh, lse, mask=pid_h < H)


# ---- cache append: one token per sequence at slot POS[b] ----------------------------------
# The entries are contiguous ([B, d_h], [B, H, r], [B, H]); a cache part is dense past its
# first axis, whose stride is s_*b (the wrapper writes through a contiguous copy otherwise).
@triton.jit
def _append_key_scale(E_KS, KS, s_ksb, b64, row0, row1, ok, offs_x, H, BLOCK_HR: tl.constexpr):
    """Copy one token's key_scale [H] into its slot as bits (both append kernels: it stays at
    compute precision in an fp8 cache too)."""
    for h0 in range(0, H, BLOCK_HR):
        hh = h0 + offs_x
        km = (hh < H) & ok
        xk = tl.load(E_KS + b64 * H + hh, mask=km, other=0)
        tl.store(KS + row0 * s_ksb + row1 * H + hh, xk, mask=km)


@triton.jit
def _append_slot(POS, PT, pid_b, b64, PAGE_SIZE, NUM_PAGES, SLOT_LIMIT, offs_x, offs_d, D):
    """Where sequence b's new token goes: (row0, row1, ok) as vectors over offs_x (every lane
    the same: the interpreter mis-types scalar & vector masks, and vector lanes keep the masks
    uniform), their lane 0 as scalars r0, r1, and ok_d, the d_h-wide mask of a valid slot.
    Contiguous (PT is None): row b, slot POS[b]; paged: page page_table[b, pos // page], row
    pos % page (PT the contiguous [B, max_pages] table, max_pages = SLOT_LIMIT / page)."""
    pos = tl.load(POS + pid_b + offs_x * 0, mask=offs_x >= 0, other=-1).to(tl.int32)  # [BLOCK_HR]
    ok = (pos >= 0) & (pos < SLOT_LIMIT)  # validated before launch; re-checked for safety
    if PT is not None:
        max_pages = SLOT_LIMIT // PAGE_SIZE
        pidx = tl.where(ok, pos // PAGE_SIZE, 0)
        ok = ok & (pidx < max_pages)
        page = tl.load(PT + b64 * max_pages + pidx.to(tl.int64), mask=ok, other=-1)
        ok = ok & (page >= 0) & (page < NUM_PAGES)
        row0 = page.to(tl.int64)
        row1 = (pos % PAGE_SIZE).to(tl.int64)
    else:
        row0 = b64 + offs_x.to(tl.int64) * 0
        row1 = pos.to(tl.int64)
    # lane 0 of the [BLOCK_HR] vectors, broadcast to the d_h-wide rows
    r0 = _rsum(tl.where(offs_x == 0, row0, 0), 0)
    r1 = _rsum(tl.where(offs_x == 0, row1, 0), 0)
    ok_d = (offs_d < D) & ((offs_d * 0 + _rsum(tl.where((offs_x == 0) & ok, 1, 0), 0)) > 0)
    return row0, row1, ok, r0, r1, ok_d


@triton.jit(do_not_specialize=["PAGE_SIZE", "NUM_PAGES", "SLOT_LIMIT"])
def append_kernel(
    POS, PT,  # positions [B]; page table [B, max_pages] or None (contiguous)
    E_SK, E_SV, E_LK, E_LV, E_KS,  # entries: [B, d_h], [B, d_h], [B, H, r], [B, H, r], [B, H] (or None)
    SK, SV, LK, LV, KS,  # caches (bit views: same-width integer dtypes)
    H, D, R, PAGE_SIZE, NUM_PAGES, SLOT_LIMIT,  # SLOT_LIMIT: T_max (paged: max_pages · page)
    s_skb, s_svb, s_lkb, s_lvb, s_ksb,
    BLOCK_D: tl.constexpr, BLOCK_HR: tl.constexpr,
):
    """Write one token per sequence at slot POS[b] (the reference's `append`), bit for bit."""
    pid_b = tl.program_id(0)
    b64 = pid_b.to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    offs_x = tl.arange(0, BLOCK_HR)
    row0, row1, ok, r0, r1, ok_d = _append_slot(POS, PT, pid_b, b64, PAGE_SIZE, NUM_PAGES, SLOT_LIMIT, offs_x,
                                                offs_d, D)

    # shared K/V: one d_h-wide row each
    xs = tl.load(E_SK + b64 * D + offs_d, mask=ok_d, other=0)
    tl.store(SK + r0 * s_skb + r1 * D + offs_d, xs, mask=ok_d)
    xs = tl.load(E_SV + b64 * D + offs_d, mask=ok_d, other=0)
    tl.store(SV + r0 * s_svb + r1 * D + offs_d, xs, mask=ok_d)

    # latent K/V: the token's [H, r] row, BLOCK_HR elements at a time
    for i0 in range(0, H * R, BLOCK_HR):
        idx = i0 + offs_x  # flattened (h, r)
        hm = (idx < H * R) & ok
        x = tl.load(E_LK + b64 * (H * R) + idx, mask=hm, other=0)
        tl.store(LK + row0 * s_lkb + row1 * (H * R) + idx, x, mask=hm)
        x = tl.load(E_LV + b64 * (H * R) + idx, mask=hm, other=0)
        tl.store(LV + row0 * s_lvb + row1 * (H * R) + idx, x, mask=hm)
    if KS is not None:
        _append_key_scale(E_KS, KS, s_ksb, b64, row0, row1, ok, offs_x, H, BLOCK_HR)


# ---- fp8 append: saturating RNE, bit for bit the reference's quantizer (DESIGN §4.1) --------
@triton.jit
def _to_f64(x):
    # Entries at compute precision, exactly as float64 (bf16/fp16 through float32: the
    # interpreter has no bfloat16 arithmetic).
    if x.dtype == tl.float64:
        return x
    else:
        return x.to(tl.float32).to(tl.float64)


@triton.jit
def _amax_scale(amax, MAX_FINITE: tl.constexpr):
    """A dynamic scale from its group's amax (float64, exact: a max of entries): amax / max
    finite rounded once to float32 — the reference's `dynamic_scale` operations; the float64
    quotient never lies on a float32 midpoint, so this is also the correctly rounded float32
    quotient. An all-zero group gets 1, a quotient below float32's smallest normal that normal."""
    s = (amax / MAX_FINITE).to(tl.float32)
    s = tl.maximum(s, 1.1754943508222875e-38)
    return tl.where(amax == 0, 1.0, s)


@triton.jit
def _fp8_bits(x, s, MANT: tl.constexpr, MIN_EXP: tl.constexpr, MAX_FINITE: tl.constexpr):
    """The fp8 bit pattern (uint8) of RNE(clamp(x / s, ±max finite)): x float64 entries,
    s their float32 scale (broadcast).

    Why float64 and integer arithmetic, not a float32 quotient and a cast: a float32 x / s
    rounds once to 24 bits and the grid rounding a second time — a value just past a tie
    lands on it and rounds to even the wrong way (x = 16.442968, s = 1.3154374: the float32
    quotient is exactly 12.5, the exact one just above it: e4m3 0x54 against the correct
    0x55), and the interpreter's float32 -> fp8 cast is not RNE at all. The float64 quotient
    of two 24-bit numbers is never within 2^-53 of a tie without being on it, so its RNE is
    the exact quotient's — the reference rounds the same float64 quotient, so the two agree
    bit for bit. The grid step: clamp (saturation: no NaN or inf from an outlier), the binade
    exponent e from the float64 bits (floored at the smallest normal binade: subnormals share
    its ulp), v = |y| · 2^(MANT − e) exact, k = RNE(v) by adding and subtracting 1.5 · 2^52;
    the bits are ((e − MIN_EXP + 1) << MANT) + k − 2^MANT (a carry of k into the next binade
    is the next exponent, subnormals included), and y's sign bit (−0 stays 0x80)."""
    y = x / s.to(tl.float64)
    y = tl.minimum(tl.maximum(y, -MAX_FINITE), MAX_FINITE)
    a = tl.abs(y)
    e = ((a.to(tl.int64, bitcast=True) >> 52) & 0x7FF) - 1023
    e = tl.maximum(e, MIN_EXP)
    inv_ulp = ((MANT - e + 1023) << 52).to(tl.float64, bitcast=True)  # 2^(MANT − e)
    v = a * inv_ulp  # [0, 2^(MANT+1)]: a power-of-two scaling, exact
    k = (v + 6755399441055744.0) - 6755399441055744.0  # round half to even at integers
    bits = ((e - MIN_EXP + 1) << MANT) + k.to(tl.int64) - (1 << MANT)
    sign = (y.to(tl.int64, bitcast=True) >> 63) & 1
    return (bits | (sign << 7)).to(tl.uint8)


@triton.jit
def _append_shared_fp8(E, C, s_cb, CS, slots, b64, r0, r1, ok_d, offs_d, D,
                       GRAN: tl.constexpr, MANT: tl.constexpr, MIN_EXP: tl.constexpr, MAX_FINITE: tl.constexpr):
    """One shared part's entry [d_h] quantized into the cache row (r0, r1): per tensor with the
    given scalar, per token with amax over d_h — the scale then written at [r0, r1] too
    (element r0 · slots + r1 of the contiguous scale)."""
    x = _to_f64(tl.load(E + b64 * D + offs_d, mask=ok_d, other=0.0))  # [BLOCK_D]
    if GRAN == FP8_TOKEN:
        s = _amax_scale(_rmax(tl.abs(x), 0), MAX_FINITE) + (offs_d * 0).to(tl.float32)  # [BLOCK_D], one value
        tl.store(CS + r0 * slots + r1 + offs_d * 0, s, mask=ok_d & (offs_d == 0))
    else:
        s = tl.load(CS + offs_d * 0, mask=ok_d, other=1.0)
    tl.store(C + r0 * s_cb + r1 * D + offs_d, _fp8_bits(x, s, MANT, MIN_EXP, MAX_FINITE), mask=ok_d)


@triton.jit
def _append_latent_fp8(E, C, s_cb, CS, slots, b64, r0, r1, okn, H, R, GRAN: tl.constexpr, MANT: tl.constexpr,
                       MIN_EXP: tl.constexpr, MAX_FINITE: tl.constexpr, BLOCK_HH: tl.constexpr,
                       BLOCK_R: tl.constexpr):
    """One latent part's entry [H, r] quantized into the cache row (r0, r1), BLOCK_HH heads at
    a time: per tensor / per head with the given scales; per token with amax over all (H, r)
    (a first pass); per token-head with amax over r per head — dynamic scales written at
    [r0, r1] ([r0, r1, h]) too. okn > 0: the slot is valid."""
    offs_h = tl.arange(0, BLOCK_HH)
    offs_r = tl.arange(0, BLOCK_R)
    rm = offs_r < R
    slot = r0 * slots + r1  # the slot's element of a per-token scale [rows, slots]
    if GRAN == FP8_TOKEN:
        am = tl.full([BLOCK_HH], 0.0, dtype=tl.float64)
        for h0 in range(0, H, BLOCK_HH):
            hh = h0 + offs_h
            hm = (hh < H) & ((hh * 0 + okn) > 0)
            x = _to_f64(tl.load(E + b64 * (H * R) + hh[:, None] * R + offs_r[None, :],
                                mask=hm[:, None] & rm[None, :], other=0.0))  # [BLOCK_HH, BLOCK_R]
            am = tl.maximum(am, _rmax(tl.abs(x), 1))
        s_tok = _amax_scale(_rmax(am, 0), MAX_FINITE)
        tl.store(CS + slot + offs_h * 0, s_tok + (offs_h * 0).to(tl.float32),
                 mask=(offs_h == 0) & ((offs_h * 0 + okn) > 0))
    for h0 in range(0, H, BLOCK_HH):
        hh = h0 + offs_h
        hm = (hh < H) & ((hh * 0 + okn) > 0)
        m = hm[:, None] & rm[None, :]
        x = _to_f64(tl.load(E + b64 * (H * R) + hh[:, None] * R + offs_r[None, :], mask=m, other=0.0))
        if GRAN == FP8_TENSOR:
            s = tl.load(CS + hh * 0, mask=hm, other=1.0)  # [BLOCK_HH]
        elif GRAN == FP8_HEAD:
            s = tl.load(CS + hh, mask=hm, other=1.0)
        elif GRAN == FP8_TOKEN:
            s = s_tok + (hh * 0).to(tl.float32)
        else:
            s = _amax_scale(_rmax(tl.abs(x), 1), MAX_FINITE)  # [BLOCK_HH] one per head
            tl.store(CS + slot * H + hh, s, mask=hm)
        tl.store(C + r0 * s_cb + r1 * (H * R) + hh[:, None] * R + offs_r[None, :],
                 _fp8_bits(x, s[:, None], MANT, MIN_EXP, MAX_FINITE), mask=m)


@triton.jit(do_not_specialize=["PAGE_SIZE", "NUM_PAGES", "SLOT_LIMIT"])
def append_fp8_kernel(
    POS, PT,  # positions [B]; page table [B, max_pages] or None (contiguous)
    E_SK, E_SV, E_LK, E_LV, E_KS,  # entries at compute precision: [B, d_h], [B, d_h], [B, H, r], [B, H, r], [B, H]
    SK, SV, LK, LV, KS,  # caches: the fp8 parts as uint8 bits; key_scale as a same-width integer view (or None)
    C_SK, C_SV, C_LK, C_LV,  # contiguous float32 scales: [] / [H] given, [rows, slots(, H)] written here
    H, D, R, PAGE_SIZE, NUM_PAGES, SLOT_LIMIT,
    s_skb, s_svb, s_lkb, s_lvb, s_ksb,
    FP8: tl.constexpr,  # the four parts' FP8_* codes, packed as in the split kernels
    MANT: tl.constexpr, MIN_EXP: tl.constexpr, MAX_FINITE: tl.constexpr,  # the format (3, −6, 448 / 2, −14, 57344)
    BLOCK_D: tl.constexpr, BLOCK_HR: tl.constexpr, BLOCK_HH: tl.constexpr, BLOCK_R: tl.constexpr,
):
    """Write one token per sequence at slot POS[b] of an fp8 cache: each part quantized with
    its own scale (`_append_shared_fp8`, `_append_latent_fp8`), key_scale copied as bits."""
    pid_b = tl.program_id(0)
    b64 = pid_b.to(tl.int64)
    offs_d = tl.arange(0, BLOCK_D)
    offs_x = tl.arange(0, BLOCK_HR)
    row0, row1, ok, r0, r1, ok_d = _append_slot(POS, PT, pid_b, b64, PAGE_SIZE, NUM_PAGES, SLOT_LIMIT, offs_x,
                                                offs_d, D)
    okn = _rsum(tl.where((offs_x == 0) & ok, 1, 0), 0)  # 1: the slot is valid
    G_SK: tl.constexpr = FP8 & 7  # the four parts' granularities, unpacked
    G_SV: tl.constexpr = (FP8 >> 3) & 7
    G_LK: tl.constexpr = (FP8 >> 6) & 7
    G_LV: tl.constexpr = (FP8 >> 9) & 7
    if PT is not None:
        slots = PAGE_SIZE  # per-token scales are paged like the parts: [P, page(, H)]
    else:
        slots = SLOT_LIMIT  # [B, T_max(, H)]

    # shared K/V: one d_h-wide row each, per tensor or per token
    _append_shared_fp8(E_SK, SK, s_skb, C_SK, slots, b64, r0, r1, ok_d, offs_d, D, G_SK, MANT, MIN_EXP,
                       MAX_FINITE)
    _append_shared_fp8(E_SV, SV, s_svb, C_SV, slots, b64, r0, r1, ok_d, offs_d, D, G_SV, MANT, MIN_EXP,
                       MAX_FINITE)
    # latent K/V: [H, r], any granularity
    _append_latent_fp8(E_LK, LK, s_lkb, C_LK, slots, b64, r0, r1, okn, H, R, G_LK, MANT, MIN_EXP,
                       MAX_FINITE, BLOCK_HH, BLOCK_R)
    _append_latent_fp8(E_LV, LV, s_lvb, C_LV, slots, b64, r0, r1, okn, H, R, G_LV, MANT, MIN_EXP,
                       MAX_FINITE, BLOCK_HH, BLOCK_R)
    # key_scale stays at compute precision: its bits, as append_kernel copies them
    if KS is not None:
        _append_key_scale(E_KS, KS, s_ksb, b64, row0, row1, ok, offs_x, H, BLOCK_HR)
