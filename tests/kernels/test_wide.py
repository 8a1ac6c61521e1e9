"""The wide private path of the decode kernel: one [BLOCK_T, G·r] latent tile per head group,
every head's private logits (Eq. 6) and private value accumulation (Eq. 7) in one tl.dot each
against a block-diagonal operand. It must agree with the float64 oracle and with the per-head
path on every layout it can be handed (contiguous — one contiguous run of G·r latents per
slot — and strided, head-major or padded views, which the wrapper copies contiguous; paged), at every group padding; and the launch heuristics and option
checks that choose it must say what they do.
"""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from lrkv.kernels import launch as launch_mod
from lrkv.kernels.decode import attend, decode_attention, dense_past_first, paged_decode_attention
from lrkv.kernels.launch import WIDE_LIMIT_COLUMNS, WIDE_MAX_COLUMNS, pick_launch, tile_in_page
from lrkv.kernels.testing import check, kernel_case, kernel_inputs

from ..test_helpers.device import skip_float64_wide_natively, wide_exact_dtype

pytestmark = pytest.mark.equivalence


def _head_major(t: torch.Tensor) -> torch.Tensor:
    """The same values as a [B, T, H, r] view of a [B, H, T, r] allocation (stride(2) = T·r)."""
    return t.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)


def _padded_rank(t: torch.Tensor) -> torch.Tensor:
    """A [.., H, r] view of a [.., H, r + 4] allocation with NaN in the unused columns."""
    big = torch.full((*t.shape[:3], t.shape[3] + 4), float("nan"), dtype=t.dtype, device=t.device)
    big[..., 2:2 + t.shape[3]] = t
    return big[..., 2:2 + t.shape[3]]


LAYOUTS = {"contiguous": lambda t: t, "head_major": _head_major, "padded_rank": _padded_rank}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", (torch.float64, torch.float32), ids=str)
@pytest.mark.parametrize("rope,key_scale", [("none", False), ("none", True), ("exact", True)],
                         ids=["none", "ks", "exact-ks"])
def test_wide_matches_oracle_and_per_head(layout, dtype, rope, key_scale):
    # the latents laid out as these views (a padded rank is beyond the Case's layout knob)
    skip_float64_wide_natively(dtype)
    case = kernel_case(H=5, d_h=32, r=7, lengths=[40, 17, 0], dtype=dtype, key_scale=key_scale, rope=rope, seed=21)
    inp = kernel_inputs(case)
    c = inp.cache
    inp = replace(inp, cache=replace(c, latent_k=LAYOUTS[layout](c.latent_k), latent_v=LAYOUTS[layout](c.latent_v)))
    # only the contiguous layout is passed as it is; the others are copied before the launch
    assert dense_past_first(inp.cache.latent_k) == (layout == "contiguous")
    wide = check(decode_attention, case, inputs=inp, private="wide", num_splits=2)
    per_head = check(decode_attention, case, inputs=inp, private="per_head", num_splits=2)
    for a, b in zip(wide, per_head):  # two orders of the same sums: agree to rounding
        torch.testing.assert_close(a, b, rtol=0, atol=1e-12 if dtype == torch.float64 else 2e-5)


@pytest.mark.parametrize("group_size,r", [(1, 7), (2, 7), (3, 7), (5, 7), (3, 1), (2, 17), (4, 33)])
def test_wide_group_paddings(group_size, r):
    # G·r = 7 .. 132: tiles of 16 .. 256 columns, with masked tail columns and padded heads
    # (H = 5 in groups of 2 leaves a last group with one real head)
    case = kernel_case(H=5, d_h=16, r=r, lengths=[33, 9], seed=22, key_scale=True, dtype=wide_exact_dtype())
    check(decode_attention, case, private="wide", group_size=group_size, num_splits=3)


@pytest.mark.parametrize("dtype", (torch.bfloat16, torch.float16), ids=str)
def test_wide_low_precision_rule(dtype):
    # float16 runs the GPU's 16-bit tl.dot path here (the block-diagonal query split into
    # hi + lo halves once per program); bfloat16 runs it in float32 (no bf16 matmul in numpy)
    case = kernel_case(H=6, d_h=32, r=7, lengths=[48, 29, 1], dtype=dtype, key_scale=True, seed=23, q_scale=3.0)
    out, lse = check(decode_attention, case, private="wide")
    assert out.dtype == dtype and lse.dtype == torch.float32


# wide against per-head: two orders of the same sums, equal to their dtype's rounding
AGREE_ATOL = {torch.float64: 1e-12, torch.float32: 2e-5}


def test_wide_paged_matches_contiguous():
    dtype = wide_exact_dtype()
    case = kernel_case(level="kernel-paged", page_size=16, H=5, d_h=16, r=6, lengths=[48, 21], seed=24,
                       key_scale=True, rope="exact", dtype=dtype)
    p = kernel_inputs(case)
    out, lse = check(paged_decode_attention, case, inputs=p, private="wide")
    ref_out, ref_lse = attend(p.q, p.cache.gather(), p.basis_k, p.basis_v, scale=p.scale, rope=p.rope,
                              private="per_head")  # the pages gathered back
    torch.testing.assert_close(out, ref_out, rtol=0, atol=AGREE_ATOL[dtype])
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=AGREE_ATOL[dtype])


@pytest.mark.parametrize("page_size,num_splits,whole_tiles", [(16, None, True), (32, 3, True), (16, 5, False),
                                                              (8, None, False)])
@pytest.mark.parametrize("private", ["wide", "per_head"])
def test_paged_tiles_inside_one_page(page_size, num_splits, whole_tiles, private):
    # block_t 16: a page of 16 or 32 slots holds whole tiles, so the kernel reads the page
    # table once per tile (TILE_IN_PAGE) — unless a split starts mid-tile (5 splits of 96
    # slots are 20 long) or a page is shorter than a tile; every way, the paged result is the
    # contiguous one. Shuffled pages, a table entry of -1 past a length, NaN in unowned slots.
    T = 96
    dtype = wide_exact_dtype()
    case = kernel_case(level="kernel-paged", page_size=page_size, H=5, d_h=16, r=6, lengths=[96, 37, 0], seed=28,
                       key_scale=True, dtype=dtype)
    p = kernel_inputs(case)
    p.cache.page_table[1, -(-37 // page_size):] = -1  # never read: past sequence 1's length (a server's table)
    split_size = None if num_splits is None else -(-T // num_splits)
    assert tile_in_page(page_size, 16, split_size) == whole_tiles
    out, lse = check(paged_decode_attention, case, inputs=p, block_t=16, num_splits=num_splits, private=private)
    ref_out, ref_lse = attend(p.q, p.cache.gather(), p.basis_k, p.basis_v, scale=p.scale, rope=p.rope,
                              private="per_head", block_t=16)
    torch.testing.assert_close(out, ref_out, rtol=0, atol=AGREE_ATOL[dtype])
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=AGREE_ATOL[dtype])


def test_wide_nan_garbage_in_neighbouring_heads_not_read():
    # The contiguous fast path reads the group's columns as one run: the run must stop at the
    # group's last head, so a NaN in the next group's latents (or past H) never enters.
    case = kernel_case(H=4, d_h=16, r=5, lengths=[20], seed=25, dtype=wide_exact_dtype())
    inp = kernel_inputs(case)

    def fifth_head_nan(t):  # a [.., 4, 5] view of a [.., 5, 5] allocation: stride(2) == r
        big = torch.full((1, 20, 5, 5), float("nan"), dtype=t.dtype, device=t.device)
        big[:, :, :4] = t
        return big[:, :, :4]

    c = inp.cache
    inp = replace(inp, cache=replace(c, latent_k=fifth_head_nan(c.latent_k), latent_v=fifth_head_nan(c.latent_v)))
    # not dense past its first axis (the slot stride is 5 heads): the wrapper hands the kernel a
    # contiguous copy of the 4 heads, so the NaN fifth head cannot be read at any group size
    assert not dense_past_first(inp.cache.latent_k) and not dense_past_first(inp.cache.latent_v)
    for g in (1, 2, 3, 4):
        out, _ = check(decode_attention, case, inputs=inp, private="wide", group_size=g)
        assert torch.isfinite(out).all()


# ------------------------------------------------------------------ launch heuristics
CPU = torch.device("cpu")


@pytest.mark.parametrize("H,r,group,n_groups", [(18, 55, 9, 2), (32, 54, 8, 4), (4, 6, 4, 1), (8, 128, 4, 2)])
def test_wide_sizes_the_group(H, r, group, n_groups):
    assert pick_launch(B=1, H=H, d_h=128, r=r, slots=4096, dtype=torch.bfloat16, device=CPU).private == "per_head"
    cfg = pick_launch(B=1, H=H, d_h=128, r=r, slots=4096, dtype=torch.bfloat16, device=CPU, private="wide")
    assert (cfg.group_size, cfg.n_groups) == (group, n_groups)
    assert group * r <= cfg.block_gr <= WIDE_MAX_COLUMNS


def test_per_head_where_wide_cannot_run():
    cfg = pick_launch(B=1, H=4, d_h=32, r=8, slots=64, dtype=torch.float64, device=CPU, dot="fma")
    assert cfg.private == "per_head"  # broadcast-and-sum products: no tl.dot for the wide tile
    cfg = pick_launch(B=1, H=2, d_h=32, r=WIDE_LIMIT_COLUMNS + 1, slots=64, dtype=torch.float32, device=CPU)
    assert cfg.private == "per_head"
    cfg = pick_launch(B=1, H=2, d_h=32, r=0, slots=64, dtype=torch.float32, device=CPU)
    assert cfg.private == "per_head"  # r = 0: no private stream (and no column -> head map)


def test_rank_zero_runs_per_head_and_refuses_wide():
    case = kernel_case(H=3, d_h=16, r=0, lengths=[20, 7], seed=27)  # r = 0: the shared stream alone
    check(decode_attention, case)
    with pytest.raises(ValueError, match="no private stream"):
        kernel_inputs(case).call(decode_attention, private="wide")


def test_gpu_launch_defaults(monkeypatch):
    # what a CUDA run would pick (132 SMs, as on an H200), without a GPU
    monkeypatch.setattr(launch_mod, "num_sms", lambda device: 132)
    monkeypatch.setattr(launch_mod.runtime, "is_interpreted", lambda: False)
    monkeypatch.setattr(launch_mod, "triton_before_tier", lambda: False)  # the current Triton's table
    monkeypatch.setattr(launch_mod, "compiled_programs_per_sm", lambda *a: (2, "two blocks per SM"))  # the rule alone
    cuda = torch.device("cuda")
    cfg = pick_launch(B=8, H=18, d_h=128, r=55, slots=32768, dtype=torch.bfloat16, device=cuda)
    assert (cfg.private, cfg.block_t, cfg.num_warps, cfg.dot) == ("per_head", 32, 16, "lp")

    def expected_splits(pps):  # at most pps x SMs programs over the (b, group) pairs: whole waves, whole tiles
        want = pps * 132 // (8 * 2)
        size = -(-(-(-32768 // want)) // 16) * 16
        return -(-32768 // size)

    assert cfg.num_splits == expected_splits(2) == 16  # 256 programs: one wave at 2 per SM, not 272
    assert 8 * cfg.n_groups * cfg.num_splits <= 2 * 132
    more = pick_launch(B=8, H=18, d_h=128, r=55, slots=32768, dtype=torch.bfloat16, device=cuda, programs_per_sm=8)
    assert more.num_splits == expected_splits(8) == 64 and more.programs_per_sm == 8
    f64 = pick_launch(B=8, H=18, d_h=128, r=55, slots=32768, dtype=torch.float64, device=cuda)
    assert (f64.private, f64.dot) == ("per_head", "fma")
    # exact RoPE: per-head private logits either way, at 16 warps per SM (compile_check)
    rope = pick_launch(B=8, H=18, d_h=128, r=55, slots=32768, dtype=torch.bfloat16, device=cuda, rope_exact=True)
    assert (rope.private, rope.block_t, rope.num_warps, rope.group_size) == ("per_head", 16, 16, 9)


@pytest.mark.parametrize("kw,exc,match", [
    (dict(private="blockdiag"), ValueError, "private must be one of"),
    (dict(private="wide", dot="fma"), ValueError, "needs tl.dot"),
    (dict(private="wide", group_size=5, r_override=500), ValueError, "at most 2048 fit"),
    (dict(programs_per_sm=0), ValueError, "programs_per_sm must lie in"),
    (dict(programs_per_sm=True), TypeError, "programs_per_sm must be an int"),
])
def test_bad_launch_options_refused_before_launch(kw, exc, match):
    r = kw.pop("r_override", 3)
    inp = kernel_inputs(kernel_case(H=5, d_h=16, r=r, lengths=[8], seed=26, dtype=wide_exact_dtype()))
    with pytest.raises(exc, match=match):
        inp.call(decode_attention, **kw)
