"""Every kernel-bug mutant (lrkv.kernels.kernel_mutants — the same Triton kernels compiled with one
line changed) is REJECTED by the DESIGN §6 tolerance rule, while the correct kernel PASSES
the same rule on the same case. This is what makes a green gate mean something."""

from __future__ import annotations

import pytest
import torch


from lrkv.kernels.triton_backend import TritonBackend
from lrkv.kernels.decode import paged_decode_attention
from lrkv.kernels.kernel_mutants import KERNEL_MUTANTS
from lrkv.kernels.paged import paginate
from lrkv.kernels.testing import make_case, tolerance_rule
from lrkv.reference.cache import FactoredCache
from lrkv.reference.rope import ExactRope

pytestmark = pytest.mark.equivalence

# One split of several tiles (block_t 16 over 64 slots), so the running max grows inside
# the split; lengths short of T_max with NaN after them; r != d_h; H >= 2; q x 3 so that the
# softmax is peaked enough for a missing rescale to matter.
LAUNCH = dict(num_splits=1, block_t=16)
# Both private-stream paths of the kernel (one wide [BLOCK_T, G·r] tile per group, or one
# tile per head) carry the mutation switches; each must be caught on either.
PRIVATE = ("wide", "per_head")


def mutant_case(dtype, rope=None, lengths=(61, 40)):
    return make_case(B=2, T=64, H=3, d_h=32, r=5, lengths=list(lengths), dtype=dtype, q_mult=3.0, rope=rope,
                     key_scale=True, seed=40)


# Dropping the newest of 61 tokens moves the output by ~0.007, under one bfloat16 ulp at its
# magnitude (0.0156): no rule can see that at bfloat16. A short sequence, where the newest
# token carries a real share of the weight, exposes the bug at either dtype.
MUTANT_LENGTHS = {"length_off_by_one": (7, 3)}


def verdict(backend, case, dtype):
    out, _ = backend.decode_attention(*case.args(), scale=case.scale, key_scale=case.inputs["key_scale"],
                                      rope=case.rope)
    return tolerance_rule(out, case.reference()[0], case.baseline()[0], dtype)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("rope", [None, ExactRope()], ids=["none", "exact"])
def test_correct_kernel_passes(dtype, rope):
    res = verdict(TritonBackend(**LAUNCH), mutant_case(dtype, rope), dtype)
    assert res.passed, str(res)


# fp16_accumulation rounds the running state to float16 once per tile: at bfloat16 that is
# inside the dtype's own error (the rule rightly lets it through); float32 exposes it.
MUTANT_DTYPES = [(m, dt) for m in KERNEL_MUTANTS for dt in (torch.float32, torch.bfloat16)
                 if not (m == "fp16_accumulation" and dt == torch.bfloat16)]


@pytest.mark.parametrize("private", PRIVATE)
@pytest.mark.parametrize("mutant,dtype", MUTANT_DTYPES, ids=lambda x: str(x).removeprefix("torch."))
def test_mutant_rejected(mutant, dtype, private):
    case = mutant_case(dtype, lengths=MUTANT_LENGTHS.get(mutant, (61, 40)))
    res = verdict(TritonBackend(mutant=mutant, private=private, **LAUNCH), case, dtype)
    assert not res.passed, f"mutant {mutant} ({private}) slipped through the tolerance rule: {res}"
    # the correct kernel passes the same case
    assert verdict(TritonBackend(private=private, **LAUNCH), case, dtype).passed


@pytest.mark.parametrize("private", PRIVATE)
@pytest.mark.parametrize("mutant", ["wrong_head_basis", "scale_rank", "no_private_rescale", "separate_softmax"])
def test_mutant_rejected_exact_rope(mutant, private):
    # exact RoPE has its own private-logit path in the kernel
    res = verdict(TritonBackend(mutant=mutant, private=private, **LAUNCH), mutant_case(torch.float32, ExactRope()),
                  torch.float32)
    assert not res.passed, f"mutant {mutant} slipped through with exact RoPE: {res}"


def test_read_past_length_stays_in_bounds_when_paged():
    # The mutant reads one slot past each length; in a paged cache that slot may sit on a
    # page the table marks -1. The kernel's own masks must keep the read inside the
    # allocation (the interpreter would crash on an out-of-bounds load): the result is wrong
    # (NaN garbage, or a valid-looking but foreign slot), never a crash.
    case = make_case(B=2, T=32, H=2, d_h=16, r=4, lengths=[32, 16], seed=41)
    i = case.inputs
    cache = FactoredCache(shared_k=i["shared_k"], shared_v=i["shared_v"], latent_k=i["latent_k"],
                          latent_v=i["latent_v"], lengths=i["lengths"])
    p = paginate(cache, 16, generator=torch.Generator().manual_seed(2), extra_pages=0)
    p.page_table[1, 1] = -1  # sequence 1 (length 16) owns only page 0: slot 16 has no page
    args = (i["q"], p.shared_k, p.shared_v, p.latent_k, p.latent_v, i["basis_k"], i["basis_v"], p.lengths,
            p.page_table)
    good, _ = paged_decode_attention(*args, scale=case.scale)
    bad, _ = paged_decode_attention(*args, scale=case.scale, mutant="read_past_length")
    assert torch.isfinite(good).all()
    # sequence 0 is full (nothing past it); sequence 1's extra slot is masked by the table
    torch.testing.assert_close(bad, good, rtol=0, atol=0)
