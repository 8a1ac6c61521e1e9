"""Fused split-K decode kernel vs the float64 oracle (paper Eqs. 6–7).

On a CPU machine these run in Triton's interpreter (lrkv.kernels.testing.kernel_context
forces it for this module only); on a GPU they run natively. float64/float32 are held to
tight bounds; bfloat16/float16 to the DESIGN §6 tolerance rule against the materialized
path at the same dtype. Shapes are small: the interpreter executes programs one by one.
"""

from __future__ import annotations

import pytest
import torch


from lrkv.kernels.decode import pick_launch
from lrkv.kernels.testing import (
    assert_tight, make_case, run_decode, tolerance_rule,
)
from lrkv.reference.rope import ExactRope

pytestmark = pytest.mark.equivalence

LOW = (torch.bfloat16, torch.float16)
TIGHT = (torch.float64, torch.float32)


run = run_decode


@pytest.mark.parametrize("dtype", TIGHT, ids=str)
@pytest.mark.parametrize("rope", [None, ExactRope()], ids=["none", "exact"])
@pytest.mark.parametrize("key_scale", [False, True], ids=["", "ks"])
def test_tight_vs_reference(dtype, rope, key_scale):
    # lengths: full, partial (NaN garbage after it), empty, single token
    case = make_case(B=4, T=40, H=5, d_h=32, r=7, lengths=[40, 17, 0, 1], dtype=dtype, key_scale=key_scale,
                     rope=rope, seed=1)
    out, lse = assert_tight(case, dtype)
    assert torch.all(out[2] == 0) and torch.all(lse[2] == float("-inf")), "empty sequence: out 0, lse -inf"


@pytest.mark.parametrize("dtype", LOW, ids=str)
@pytest.mark.parametrize("rope,key_scale", [(None, False), (ExactRope(), True)], ids=["none", "exact-ks"])
def test_low_precision_tolerance_rule(dtype, rope, key_scale):
    case = make_case(B=3, T=48, H=5, d_h=32, r=7, lengths=[48, 29, 1], dtype=dtype, key_scale=key_scale,
                     rope=rope, seed=2)
    out, lse = run(case)
    assert out.dtype == dtype and lse.dtype == torch.float32  # DESIGN §4: lse in fp32 for half inputs
    ref_out, ref_lse = case.reference()
    base_out, base_lse = case.baseline()
    for name, a, ref, base in (("out", out, ref_out, base_out), ("lse", lse, ref_lse, base_lse)):
        res = tolerance_rule(a, ref, base, dtype)
        assert res.passed, f"{name} {dtype}: {res}"


@pytest.mark.parametrize("num_splits", [1, 3, 17])
def test_split_count_invariance(num_splits):
    # 17 splits over 37 slots: 3 slots each, the last splits empty — the merge must ignore them
    case = make_case(B=2, T=37, H=3, d_h=16, r=5, lengths=[37, 22], seed=3)
    out, lse = assert_tight(case, torch.float64, num_splits=num_splits)
    ref, ref_lse = run(case, num_splits=1)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-13)
    torch.testing.assert_close(lse, ref_lse, rtol=0, atol=1e-13)


@pytest.mark.parametrize("group_size", [1, 2, 5])
def test_group_size_invariance(group_size):
    # H = 5: groups of 2 leave a padded group with one real head
    case = make_case(B=2, T=33, H=5, d_h=16, r=6, lengths=[33, 9], seed=4, key_scale=True, rope=ExactRope())
    assert_tight(case, torch.float64, group_size=group_size)


@pytest.mark.parametrize("block_t", [16, 32, 64])
def test_tile_size_invariance(block_t):
    case = make_case(B=2, T=70, H=2, d_h=16, r=3, lengths=[70, 45], seed=5)
    assert_tight(case, torch.float64, block_t=block_t, num_splits=2)


@pytest.mark.parametrize("r", [1, 3, 17, 33])
def test_odd_ranks(r):
    # ranks that are not powers of two: masked inside a 16/32/64-wide tile
    case = make_case(B=2, T=24, H=3, d_h=24, r=r, lengths=[24, 11], seed=6)
    assert_tight(case, torch.float64)


@pytest.mark.parametrize("dtype", TIGHT, ids=str)
def test_queries_times_100(dtype):
    # huge logits: the online max must keep exp() in range; softmax becomes near one-hot
    case = make_case(B=2, T=40, H=3, d_h=16, r=5, lengths=[40, 23], dtype=dtype, q_mult=100.0, seed=7)
    assert_tight(case, dtype)


@pytest.mark.parametrize("dtype", (torch.float64, torch.float32, torch.bfloat16), ids=str)
def test_near_cancelling_keys(dtype):
    case = make_case(B=2, T=32, H=3, d_h=16, r=5, lengths=[32, 19], dtype=dtype, cancel=True, seed=8)
    if dtype in TIGHT:
        assert_tight(case, dtype)
    else:
        out, _ = run(case)
        res = tolerance_rule(out, case.reference()[0], case.baseline()[0], dtype)
        assert res.passed, str(res)


@pytest.mark.parametrize("garbage", [float("nan"), float("inf"), -1e30], ids=["nan", "inf", "huge"])
def test_garbage_past_length_never_read(garbage):
    case = make_case(B=3, T=36, H=3, d_h=16, r=5, lengths=[5, 0, 20], garbage=garbage, seed=9, key_scale=True)
    out, lse = assert_tight(case, torch.float64, num_splits=3)
    assert torch.isfinite(out).all()


def test_empty_and_length_one_sequences():
    case = make_case(B=4, T=16, H=2, d_h=16, r=4, lengths=[0, 1, 0, 1], seed=10, rope=ExactRope())
    out, lse = assert_tight(case, torch.float64, num_splits=3)
    assert torch.all(out[[0, 2]] == 0) and torch.all(lse[[0, 2]] == float("-inf"))
    # one token: softmax weight 1, out = v_0 of that head exactly (to rounding)
    i = case.inputs
    v0 = i["shared_v"][1, 0] + (i["basis_v"] @ i["latent_v"][1, 0, :, :, None]).squeeze(-1)  # [H, d_h]
    torch.testing.assert_close(out[1], v0, rtol=0, atol=1e-14)


def test_many_heads_padded_groups():
    # H = 18 (two groups of 9, each padded to 16 rows), the benchmark's head count
    case = make_case(B=1, T=20, H=18, d_h=16, r=5, lengths=[20], seed=11)
    assert_tight(case, torch.float32)


def test_float64_gpu_path_without_tl_dot():
    # the broadcast-and-sum products a GPU uses for float64, checked here too
    case = make_case(B=2, T=24, H=3, d_h=16, r=5, lengths=[24, 7], seed=12, rope=ExactRope(), key_scale=True)
    assert_tight(case, torch.float64, dot="fma")


def test_float16_without_split_products():
    case = make_case(B=2, T=24, H=3, d_h=16, r=5, lengths=[24, 7], dtype=torch.float16, seed=13)
    out, _ = run(case, dot="ieee")
    res = tolerance_rule(out, case.reference()[0], case.baseline()[0], torch.float16)
    assert res.passed, str(res)


def test_strided_inputs():
    # views with non-unit strides everywhere: q from a [B, d_h, H] buffer, the cache a slice
    # of a wider allocation, the bases transposed in memory
    case = make_case(B=2, T=24, H=3, d_h=16, r=5, lengths=[24, 13], seed=14, key_scale=True)
    i = dict(case.inputs)
    i["q"] = i["q"].transpose(1, 2).contiguous().transpose(1, 2)
    wide = torch.full((2, 30, 3, 9), float("nan"), dtype=torch.float64, device=i["latent_k"].device)
    wide[:, :24, :, 2:7] = i["latent_k"]
    i["latent_k"] = wide[:, :24, :, 2:7]
    i["basis_k"] = i["basis_k"].transpose(1, 2).contiguous().transpose(1, 2)
    i["shared_v"] = torch.cat([i["shared_v"], i["shared_v"]], dim=2)[:, :, :16]
    assert not i["q"].is_contiguous() and not i["latent_k"].is_contiguous()
    case.inputs = i
    assert_tight(case, torch.float64, num_splits=2)


def test_launch_shape_from_length():
    cpu = torch.device("cpu")
    cfg = pick_launch(B=1, H=18, d_h=128, r=55, slots=131072, dtype=torch.bfloat16, device=cpu)
    assert (cfg.group_size, cfg.n_groups, cfg.block_h, cfg.block_r) == (9, 2, 16, 64)
    cfg = pick_launch(B=1, H=32, d_h=128, r=54, slots=40, dtype=torch.bfloat16, device=cpu, num_splits=17)
    assert cfg.num_splits == 17 and cfg.split_size == 3  # an explicit count is kept, even with empty splits
