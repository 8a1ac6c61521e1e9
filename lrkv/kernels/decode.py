"""Fused split-K factored decode (paper Eqs. 6–7) — the public wrappers and the custom op.

    decode_attention(q, <cache parts>, basis_k, basis_v, lengths, *, scale, ...)    contiguous cache
    paged_decode_attention(..., lengths, page_table, *, scale, ...)               paged cache

Both implement the kernel-level contract of DESIGN §4 (and extend's, `lrkv.kernels.extend`),
thinly: they pack the tensors into a `FactoredCache` for the one wrapper, `attend`. They return out [B, H, d_h] in q's
dtype and lse [B, H] in the accumulation dtype (float32, float64 for float64 inputs). They
validate every argument before launch, pick the launch shape, then call
`torch.ops.lrkv.factored_decode`, registered with
`torch.library.triton_op` so `torch.compile` sees (and can fuse around) the two Triton
kernels on a GPU. In fallback mode (no GPU, TRITON_INTERPRET unset, see
`lrkv.kernels.runtime`) the wrappers compute the float64 reference math instead.

The launch shape (tile, warps, head group, splits, private path) comes from the launch
table of `lrkv.kernels.launch` (`pick_launch`); every field can be overridden.

FP8 caches (DESIGN §4.1): with `cache_scales=CacheScales(...)` (the reference's keyword and
type) the four parts are fp8 — float8_e4m3fn or float8_e5m2, every granularity (per_tensor,
per_head, per_token, per_token_head; paged: the per-token scales paged like the parts). The
kernel loads each part as stored and multiplies its scale into the product that part feeds
(the shared-K scale into the shared logit term only, the latent-K scale into the private
term only, the V scales into the weights that meet their values; a per-tensor scale is a
scalar folded there). q stays at its dtype, out has q's dtype, lse is float32 (float64 for
float64 q). `check_cache_scales` runs before every launch, with check=False too (a scale of
the wrong shape would be read out of bounds). The tile products are q's: with a bf16/fp16 q
the fp8 tiles are converted to q's dtype, exactly, and feed the same 16-bit tensor-core
products (dot='lp') as a 16-bit cache; float32 q, and bf16 under the interpreter, run fp32
products (dot='ieee').
"""

from __future__ import annotations

import functools
from dataclasses import replace

import torch
from torch.library import triton_op, wrap_triton

from ..reference.cache import FactoredCache
from ..reference.contract import validate_cache_inputs
from ..reference.fp8 import PER_HEAD, PER_TENSOR, PER_TOKEN, PER_TOKEN_HEAD, SHARED_PARTS, is_fp8
from ..reference.fp8_cache import CacheScales, check_cache_scales
from ..reference.lrkv import accumulation_dtype
from ..reference.lrkv import attend as reference_attend
from ..reference.rope import ExactRope, rope_freqs
from . import runtime
from .launch import DOT_MODES, WIDE_LIMIT_COLUMNS, default_dot, pick_launch, tile_in_page, wide_applies
from .validate import check_kernel_extras, check_launch_options, next_pow2

MAX_BLOCK_B = 1024  # extend: sequences scanned per step when a program looks up its sequence


@functools.lru_cache(maxsize=4)  # 128K slots x d_h 128 x 2 x fp32 is 128 MiB per table: keep few
def _rope_table_cached(slots: int, d_h: int, theta: float, dtype: torch.dtype, device: str):
    # Angles in float64, cast once — the same tables as lrkv.reference.rope.apply_rope.
    freqs = rope_freqs(d_h, theta)
    ang = torch.arange(slots, dtype=torch.float64)[:, None] * freqs[None, :]  # [slots, d_h/2]
    cos = torch.cat((ang.cos(), ang.cos()), dim=-1)  # [slots, d_h]
    sin = torch.cat((ang.sin(), ang.sin()), dim=-1)
    return torch.stack((cos, sin), dim=1).to(dtype).to(device).contiguous()  # [slots, 2, d_h]


def rope_table(slots: int, d_h: int, theta: float, dtype: torch.dtype, device) -> torch.Tensor:
    """cos and sin of exact RoPE at logical slot j (rotate-half, duplicated halves), packed as
    one contiguous [slots, 2, d_h] table: [j, 0] is cos, [j, 1] sin (the kernels' ROPE).

    Built for the next power of two of `slots` and sliced, so nearby cache sizes share one
    table (rows are per position, so a prefix of a longer table is the shorter table)."""
    return _rope_table_cached(next_pow2(max(slots, 1)), d_h, float(theta), dtype, str(torch.device(device)))[:slots]


# ----------------------------------------------------------------------------- layouts
# The kernels take every tensor with unit stride on its last axis and dense past its first
# (a cache part then needs one stride, its first axis's; _kernels.py); a tensor that is not
# so laid out is copied, once per call (docs/kernels.md: the cost of a copy).
def dense_past_first(t: torch.Tensor) -> bool:
    """Whether t is contiguous past its first axis (axes of size 1 may have any stride)."""
    expected = 1
    for n, s in zip(reversed(t.shape[1:]), reversed(t.stride()[1:])):
        if n > 1 and s != expected:
            return False
        expected *= n
    return True


def _dense(t: torch.Tensor | None) -> torch.Tensor | None:
    return t if t is None or dense_past_first(t) else t.contiguous()


def _dense_pair(k: torch.Tensor, v: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """K and V of one stream, dense past their first axis with ONE first-axis stride between
    them (the kernels' s_sb / s_lb); both copied contiguous when theirs differ."""
    k, v = _dense(k), _dense(v)
    if k.shape[0] > 1 and k.stride(0) != v.stride(0):
        k, v = k.contiguous(), v.contiguous()
    return k, v


def scratch_size(rows: int, H: int, splits: int, d_h: int, r: int) -> int:
    """Elements of the split scratch: for each of its rows · H · splits rows acc_s (d_h), acc_p
    (r), m and l, as four regions one after the other (the kernels' `_scratch`)."""
    return rows * H * splits * (d_h + r + 2)


# ----------------------------------------------------------------------------- fp8 caches
# The reference's granularity names -> the split kernel's FP8_* constexprs (_kernels.py).
FP8_CODES = {PER_TENSOR: 1, PER_HEAD: 2, PER_TOKEN: 3, PER_TOKEN_HEAD: 4}
PARTS = ("shared_k", "shared_v", "latent_k", "latent_v")


def fp8_part_codes(granularity: str) -> dict[str, int]:
    """FP8_SK, FP8_SV, FP8_LK, FP8_LV for a cache of `granularity` ("" : not fp8, all 0).
    Shared parts drop the head axis (per_head -> per_tensor, per_token_head -> per_token)."""
    if not granularity:
        return {p: 0 for p in PARTS}
    drop = {PER_HEAD: PER_TENSOR, PER_TOKEN_HEAD: PER_TOKEN}
    return {p: FP8_CODES[drop.get(granularity, granularity) if p in SHARED_PARTS else granularity] for p in PARTS}


def fp8_code(granularity: str) -> int:
    """The kernels' packed FP8 constexpr: the four parts' codes, 3 bits each (shared_k in the
    lowest), 0 for a cache at compute precision."""
    codes = fp8_part_codes(granularity)
    return sum(codes[p] << (3 * i) for i, p in enumerate(PARTS))


def check_fp8_cache(parts: dict[str, torch.Tensor], cache_scales) -> None:
    """Before any launch, with check=False too: the reference's `check_cache_scales` (an fp8
    part needs cache_scales, scales need an fp8 cache; one format; float32 scales of the
    granularity's shape — rows, slots = the parts' first two axes, B, T_max or P, page — on
    the cache's device), and fewer than 2^31 elements in each scale (the kernels index them
    with int32). Malformed parts are left to the contract's own checks."""
    if not all(isinstance(t, torch.Tensor) for t in parts.values()) or parts["latent_k"].dim() != 4:
        return  # the contract check names the malformed part
    rows, slots = parts["shared_k"].shape[:2]
    check_cache_scales(parts, cache_scales, rows=rows, slots=slots, heads=parts["latent_k"].shape[2])
    for p in PARTS if cache_scales is not None else ():
        if (n := cache_scales.of(p).numel()) >= 2 ** 31:
            raise ValueError(f"cache_scales.{p} has {n} elements: the kernels index the scales with int32, "
                             f"so at most 2^31 - 1")


def scale_tensors(cache_scales: CacheScales | None) -> dict[str, torch.Tensor]:
    """The scales by the names the kernel-side checks report (devices, strides)."""
    if cache_scales is None:
        return {}
    return {f"cache_scales.{p}": cache_scales.of(p) for p in PARTS}


# ----------------------------------------------------------------------------- custom op
def _traceable(kernel):
    """wrap_triton(kernel): the launch as torch.compile and torch.export trace it. torch 2.11's
    wrap_triton refuses the interpreter's kernels (InterpretedFunction, not JITFunction); those
    launch as they are — the interpreter is a CPU check, never traced."""
    try:
        return wrap_triton(kernel)
    except RuntimeError:
        if runtime.is_interpreted():
            return kernel
        raise


@triton_op("lrkv::factored_decode", mutates_args=())
def factored_decode(
    q: torch.Tensor,  # [B, H, d_h]
    shared_k: torch.Tensor,  # [B, T, d_h] or paged [P, page, d_h]
    shared_v: torch.Tensor,
    latent_k: torch.Tensor,  # [B, T, H, r] or paged [P, page, H, r]
    latent_v: torch.Tensor,
    basis_k: torch.Tensor,  # [H, d_h, r]
    basis_v: torch.Tensor,
    lengths: torch.Tensor,  # [B]
    page_table: torch.Tensor | None,  # [B, max_pages] int32, or None (contiguous)
    key_scale: torch.Tensor | None,  # [B, T, H] or paged [P, page, H]
    rope_table: torch.Tensor | None,  # [slots, 2, d_h] cos, sin (exact RoPE only; `rope_table`)
    scale: float,
    num_splits: int,
    split_size: int,
    group_size: int,
    block_t: int,
    num_warps: int,
    dot: int,
    wide: bool = False,
    cu_seqlens_q: torch.Tensor | None = None,  # [B+1] int32: extend (q is then [N, H, d_h])
    scale_sk: torch.Tensor | None = None,  # fp8 cache: float32 scales (DESIGN §4.1), [] or [rows, slots]
    scale_sv: torch.Tensor | None = None,
    scale_lk: torch.Tensor | None = None,  # [], [H], [rows, slots] or [rows, slots, H]
    scale_lv: torch.Tensor | None = None,
    fp8_granularity: str = "",  # the scales' granularity; "" for a cache at compute precision
    block_q: int = 1,  # extend: query tokens of one sequence per program
) -> tuple[torch.Tensor, torch.Tensor]:
    """Launch stage 1 (splits) on a (rows, head groups, splits) grid — a row is a batch row,
    or with `cu_seqlens_q` a block of up to `block_q` query tokens of one sequence of the
    ragged extend batch — then stage 2 (merge) on (query rows, heads). No checks here: the wrappers validate, and this body must stay
    traceable by torch.compile (no data-dependent Python). Tensors not laid out as the
    kernels take them (unit last stride, dense past the first axis) are copied first."""
    K = runtime.kernels()
    B, H, D = q.shape  # B: rows (extend: N query tokens)
    R = latent_k.shape[3]
    acc = torch.float64 if q.dtype == torch.float64 else torch.float32
    paged = page_table is not None
    page = shared_k.shape[1] if paged else 1
    n_pages = shared_k.shape[0] if paged else 0
    slots = page_table.shape[1] * page if paged else shared_k.shape[1]
    n_groups = -(-H // group_size)
    block_d, block_r = next_pow2(D, 16), next_pow2(R, 16)

    ws = torch.empty(scratch_size(B, H, num_splits, D, R), dtype=acc, device=q.device)  # acc_s, acc_p, m, l
    out = torch.empty((B, H, D), dtype=acc, device=q.device)
    lse = torch.empty((B, H), dtype=acc, device=q.device)
    if B == 0:
        return out.to(q.dtype), lse
    scale_t = torch.full((1,), scale, dtype=acc, device=q.device)
    q, basis_k, basis_v = q.contiguous(), basis_k.contiguous(), basis_v.contiguous()
    sk, sv = _dense_pair(shared_k, shared_v)
    lk, lv = _dense_pair(latent_k, latent_v)
    ks = _dense(key_scale)
    pt = None if page_table is None else page_table.contiguous()
    cs = [None if t is None else t.contiguous() for t in (scale_sk, scale_sv, scale_lk, scale_lv)]
    strides = (sk.stride(0), lk.stride(0), 0 if ks is None else ks.stride(0))
    meta = dict(GROUP=group_size, BLOCK_H=next_pow2(group_size * block_q, 16), BLOCK_T=block_t, BLOCK_D=block_d,
                BLOCK_R=block_r, DOT=dot, WIDE=wide, BLOCK_GR=next_pow2(group_size * R, 16) if wide else 16,
                FP8=fp8_code(fp8_granularity), num_warps=num_warps)
    in_page = paged and tile_in_page(page, block_t, split_size)
    grid = (B, n_groups, num_splits)
    if cu_seqlens_q is not None:
        n_seq = cu_seqlens_q.shape[0] - 1
        blocks = cu_seqlens_q  # a block per token
        if block_q > 1:  # the token blocks before each sequence: cumsum of ⌈n_b / block_q⌉ (on the device)
            n_b = cu_seqlens_q[1:] - cu_seqlens_q[:-1]
            blocks = torch.cat((cu_seqlens_q[:1] * 0, torch.cumsum((n_b + block_q - 1) // block_q, 0)))
            # Σ ⌈n_b / block_q⌉ <= min(N, ⌈N / block_q⌉ + NSEQ): an upper bound known without a sync
            grid = (min(B, -(-B // block_q) + n_seq), n_groups, num_splits)
        cu_blocks = torch.stack((cu_seqlens_q, blocks)).to(torch.int32)  # [2, NSEQ + 1]: one argument
        _traceable(K.extend_split_kernel)[grid](
            q, sk, sv, lk, lv, basis_k, ks, rope_table, lengths, cu_blocks, pt, scale_t, ws, *cs,
            H, D, R, split_size, slots, n_seq, page, n_pages, *strides,
            TILE_IN_PAGE=in_page, BLOCK_B=min(next_pow2(n_seq, 16), MAX_BLOCK_B), BLOCK_Q=block_q, **meta)
    elif paged:
        _traceable(K.paged_split_kernel)[grid](
            q, sk, sv, lk, lv, basis_k, ks, rope_table, lengths, pt, scale_t, ws, *cs,
            H, D, R, split_size, slots, page, n_pages, *strides, TILE_IN_PAGE=in_page, **meta)
    else:
        _traceable(K.decode_split_kernel)[grid](
            q, sk, sv, lk, lv, basis_k, ks, rope_table, lengths, scale_t, ws, *cs,
            H, D, R, split_size, slots, *strides, **meta)
    _traceable(K.decode_combine_kernel)[(B, H)](
        ws, basis_v, out, lse, H, D, R, num_splits,
        BLOCK_S=next_pow2(num_splits, 2), BLOCK_D=block_d, BLOCK_R=block_r, num_warps=4,
    )
    # lse stays in the accumulation dtype (DESIGN §4): merging partial states needs fp32
    return out.to(q.dtype), lse


# ----------------------------------------------------------------------------- wrappers
def _device_ok(t: torch.Tensor) -> tuple[bool, str]:
    which, why = runtime.mode()
    if which == "cuda" and t.device.type != "cuda":
        return False, "the Triton kernels are compiled for CUDA here; move the inputs to the GPU"
    if which == "interpreter" and t.device.type not in ("cpu", "cuda"):
        return False, "the Triton interpreter takes CPU (or CUDA) tensors"
    return True, ""


def run_factored_decode(q, cache: FactoredCache, basis_k, basis_v, *, scale, rope, num_splits, group_size, block_t,
                        num_warps, dot, private=None, programs_per_sm=None, cu_seqlens_q=None, block_q=None):
    """Pick the launch shape and run the custom op — decode, paged decode and (with
    `cu_seqlens_q`) extend alike, over an fp8 cache with `cache.scales`."""
    extend = cu_seqlens_q is not None
    rows, H, d_h = q.shape  # rows: B (extend: N query tokens)
    cfg = pick_launch(B=max(rows, 1) if extend else rows, H=H, d_h=d_h, r=cache.latent_k.shape[3],
                      slots=cache.t_max, dtype=q.dtype, device=q.device, num_splits=num_splits,
                      group_size=group_size, block_t=block_t, num_warps=num_warps, dot=dot, private=private,
                      programs_per_sm=programs_per_sm, rope_exact=rope is not None, paged=cache.paged,
                      extend=extend, fp8=cache.scales is not None, block_q=block_q,
                      seqs=cu_seqlens_q.shape[0] - 1 if extend else None)
    sc = cache.scales
    fp8_args = () if sc is None else (*(sc.of(p) for p in PARTS), sc.granularity)
    table = None
    if rope is not None:
        table = rope_table(cache.t_max, d_h, rope.theta, torch.float64 if cfg.acc_fp64 else torch.float32, q.device)
    return torch.ops.lrkv.factored_decode(
        q, *cache.parts, basis_k, basis_v, cache.lengths, cache.page_table, cache.key_scale, table, float(scale),
        cfg.num_splits, cfg.split_size, cfg.group_size, cfg.block_t, cfg.num_warps, DOT_MODES[cfg.dot],
        cfg.private == "wide", cu_seqlens_q, *fp8_args, block_q=cfg.block_q,
    )


def check_launch(q: torch.Tensor, tensors: dict, *, num_splits, group_size, block_t, num_warps, dot,
                 private=None, programs_per_sm=None, block_q=None, rope_exact: bool = False, r: int) -> None:
    """The kernel-side checks every layout shares, after the layout's own contract check:
    launch options and (when a kernel will run) device placement and strides."""
    check_launch_options(num_splits=num_splits, group_size=group_size, block_t=block_t,
                         num_warps=num_warps, H=q.shape[1], dot=dot, dtype=q.dtype,
                         interpreted=runtime.is_interpreted(), private=private,
                         programs_per_sm=programs_per_sm, block_q=block_q,
                         extend=tensors.get("cu_seqlens_q") is not None, rope_exact=rope_exact)
    if private == "wide":
        on_gpu = q.device.type == "cuda" and not runtime.is_interpreted()
        ok, why = wide_applies(r, default_dot(q.dtype, on_gpu) if dot is None else dot)
        if not ok:
            raise ValueError(f"private='wide': {why}")
        if group_size is not None and next_pow2(group_size * r, 16) > WIDE_LIMIT_COLUMNS:
            raise ValueError(f"private='wide' with group_size={group_size} and r={r} needs a "
                             f"{next_pow2(group_size * r, 16)}-column tile; at most {WIDE_LIMIT_COLUMNS} "
                             f"fit: use group_size <= {max(1, WIDE_LIMIT_COLUMNS // r)}")
    if runtime.mode()[0] != "fallback":
        check_kernel_extras(dict(q=q, **tensors), d_h=q.shape[2], H=q.shape[1], device_ok=_device_ok)


def attend(q: torch.Tensor, cache: FactoredCache, basis_k: torch.Tensor, basis_v: torch.Tensor, *, scale: float,
           rope: ExactRope | None = None, cu_seqlens_q: torch.Tensor | None = None, check: bool = True,
           num_splits=None, group_size=None, block_t=None, num_warps=None, dot=None, private=None,
           programs_per_sm=None, block_q=None) -> tuple[torch.Tensor, torch.Tensor]:
    """The one wrapper behind decode, paged decode (a paged cache) and extend (cu_seqlens_q):
    Eqs. 6–7 over a FactoredCache. Validates the contract (`check`), then the launch; an fp8
    cache's scales are checked either way. Fallback mode runs the float64 reference `attend`
    on the float inputs upcast, cast back to the contract's dtypes. The launch options
    (num_splits … programs_per_sm) override `pick_launch`'s row; the public entries pass theirs here."""
    check_fp8_cache(dict(zip(PARTS, cache.parts)), cache.scales)
    if check:
        validate_cache_inputs(q, cache, basis_k, basis_v, scale=scale, rope=rope, cu_seqlens_q=cu_seqlens_q)
        check_launch(q, dict(cu_seqlens_q=cu_seqlens_q, **dict(zip(PARTS, cache.parts)), basis_k=basis_k,
                             basis_v=basis_v, lengths=cache.lengths, page_table=cache.page_table,
                             key_scale=cache.key_scale, **scale_tensors(cache.scales)),
                     num_splits=num_splits, group_size=group_size, block_t=block_t, num_warps=num_warps, dot=dot,
                     private=private, programs_per_sm=programs_per_sm, block_q=block_q, rope_exact=rope is not None,
                     r=cache.latent_k.shape[3])
    if runtime.mode()[0] == "fallback":
        # fp8 parts pass as stored (the reference dequantizes them with their scales)
        f = lambda t: t.to(torch.float64) if t.is_floating_point() and not is_fp8(t.dtype) else t  # noqa: E731
        wide = replace(cache, **{n: f(t) for n, t in cache.tensors().items()})
        out, lse = reference_attend(f(q), wide, f(basis_k), f(basis_v), scale=scale, rope=rope,
                                    cu_seqlens_q=cu_seqlens_q)
        return out.to(q.dtype), lse.to(accumulation_dtype(q.dtype))
    return run_factored_decode(q, cache, basis_k, basis_v, scale=scale, rope=rope, num_splits=num_splits,
                               group_size=group_size, block_t=block_t, num_warps=num_warps, dot=dot,
                               private=private, programs_per_sm=programs_per_sm, block_q=block_q,
                               cu_seqlens_q=None if cu_seqlens_q is None else cu_seqlens_q.to(torch.int32))


def decode_attention(
    q: torch.Tensor,  # [B, H, d_h]  rotated/normed, k-gain folded in
    shared_k: torch.Tensor,  # [B, T_max, d_h]
    shared_v: torch.Tensor,  # [B, T_max, d_h]
    latent_k: torch.Tensor,  # [B, T_max, H, r]
    latent_v: torch.Tensor,  # [B, T_max, H, r]
    basis_k: torch.Tensor,  # [H, d_h, r]
    basis_v: torch.Tensor,  # [H, d_h, r]
    lengths: torch.Tensor,  # [B] int32/int64
    *,
    scale: float,
    key_scale: torch.Tensor | None = None,  # [B, T_max, H]
    rope: ExactRope | None = None,
    check: bool = True,
    cache_scales: CacheScales | None = None,  # fp8 cache: [] / [H] / [B, T_max] / [B, T_max, H] scales
    **launch,  # num_splits, group_size, block_t, num_warps, dot, private, programs_per_sm: `attend`'s
) -> tuple[torch.Tensor, torch.Tensor]:
    """Factored decode over a contiguous cache (Eqs. 6–7). Returns out [B, H, d_h], lse [B, H].

    `check=False` skips validation (for benchmarks that validated once); the kernel still
    masks every access, but garbage inputs then give garbage outputs. An fp8 cache needs
    `cache_scales` (module doc); its dtypes and scale shapes are checked either way.
    """
    return attend(q, FactoredCache(shared_k, shared_v, latent_k, latent_v, lengths, key_scale, cache_scales),
                  basis_k, basis_v, scale=scale, rope=rope, check=check, **launch)


def paged_decode_attention(
    q: torch.Tensor,  # [B, H, d_h]
    shared_k: torch.Tensor,  # [P, page, d_h]
    shared_v: torch.Tensor,  # [P, page, d_h]
    latent_k: torch.Tensor,  # [P, page, H, r]
    latent_v: torch.Tensor,  # [P, page, H, r]
    basis_k: torch.Tensor,  # [H, d_h, r]
    basis_v: torch.Tensor,  # [H, d_h, r]
    lengths: torch.Tensor,  # [B]
    page_table: torch.Tensor,  # [B, max_pages] int32
    *,
    scale: float,
    key_scale: torch.Tensor | None = None,  # [P, page, H]
    rope: ExactRope | None = None,
    check: bool = True,
    cache_scales: CacheScales | None = None,  # fp8 cache: per-token scales paged [P, page(, H)]
    **launch,  # the launch options, as decode_attention's
) -> tuple[torch.Tensor, torch.Tensor]:
    """Factored decode over a paged cache: slot t of sequence b is page_table[b, t // page],
    row t % page. Exact RoPE rotates by the logical slot t. Same outputs as `decode_attention`;
    an fp8 cache's per-token scales are read at the same physical page and row as its parts."""
    cache = FactoredCache(shared_k, shared_v, latent_k, latent_v, lengths, key_scale, cache_scales, page_table)
    return attend(q, cache, basis_k, basis_v, scale=scale, rope=rope, check=check, **launch)
