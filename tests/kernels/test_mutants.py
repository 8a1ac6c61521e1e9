"""Every kernel-bug mutant (lrkv.mutants.kernel: the same Triton kernels compiled with one
line changed, or run the wrong way) is REJECTED by the harness's tolerance rule (DESIGN §6, the
packaged policy), while the correct kernel PASSES the same rule on the same case. This is
what makes a green gate mean something."""

from __future__ import annotations

import pytest
import torch

from lrkv.kernels import runtime, triton_backend
from lrkv.kernels.decode import paged_decode_attention
from lrkv.kernels.testing import kernel_case, kernel_inputs, passes
from lrkv.kernels.triton_backend import TritonBackend
from lrkv.mutants import kernel as kernel_mutants
from lrkv.mutants.kernel import KERNEL_MUTANTS, PATCHES, KernelMutant, patched

pytestmark = pytest.mark.equivalence

# One split of several tiles (block_t 16 over 64 slots), so the running max grows inside
# the split; lengths short of T_max with NaN after them; r != d_h; H >= 2; q x 3 so that the
# softmax is peaked enough for a missing rescale to matter.
LAUNCH = dict(num_splits=1, block_t=16)
# Both private-stream paths of the kernel (one wide [BLOCK_T, G·r] tile per group, or one
# tile per head) run the patched lines; each mutant must be caught on either.
PRIVATE = ("wide", "per_head")


def mutant_case(dtype, rope="none", lengths=(61, 40)):
    return kernel_case(H=3, d_h=32, r=5, lengths=lengths, t_max=64, dtype=dtype, q_scale=3.0, rope=rope,
                       key_scale=True, seed=40)


# Dropping the newest of 61 tokens moves the output by ~0.007, under one bfloat16 ulp at its
# magnitude (0.0156): no rule can see that at bfloat16. A short sequence, where the newest
# token carries a real share of the weight, exposes the bug at either dtype.
MUTANT_LENGTHS = {"length_off_by_one": (7, 3)}


def verdict(backend, case) -> bool:
    """Whether the backend's decode passes the harness's rule on the case (out and lse)."""
    out, lse = kernel_inputs(case).call(backend.decode_attention)
    return passes(case, out=out, lse=lse)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
@pytest.mark.parametrize("rope", ["none", "exact"], ids=["none", "exact"])
def test_correct_kernel_passes(dtype, rope):
    assert verdict(TritonBackend(**LAUNCH), mutant_case(dtype, rope))


# fp16_accumulation rounds the running state to float16 once per tile: at bfloat16 that is
# inside the dtype's own error (the rule rightly lets it through); float32 exposes it.
MUTANT_DTYPES = [(m, dt) for m in KERNEL_MUTANTS for dt in (torch.float32, torch.bfloat16)
                 if not (m == "fp16_accumulation" and dt == torch.bfloat16)]


@pytest.mark.parametrize("private", PRIVATE)
@pytest.mark.parametrize("mutant,dtype", MUTANT_DTYPES, ids=lambda x: str(x).removeprefix("torch."))
def test_mutant_rejected(mutant, dtype, private):
    case = mutant_case(dtype, lengths=MUTANT_LENGTHS.get(mutant, (61, 40)))
    assert not verdict(KernelMutant(mutant, private=private, **LAUNCH), case), \
        f"mutant {mutant} ({private}) slipped through the tolerance rule"
    # the correct kernel passes the same case
    assert verdict(TritonBackend(private=private, **LAUNCH), case)


@pytest.mark.parametrize("private", PRIVATE)
@pytest.mark.parametrize("mutant", ["wrong_head_basis", "scale_rank", "no_private_rescale", "separate_softmax"])
def test_mutant_rejected_exact_rope(mutant, private):
    # exact RoPE has its own private-logit path in the kernel
    assert not verdict(KernelMutant(mutant, private=private, **LAUNCH), mutant_case(torch.float32, "exact")), \
        f"mutant {mutant} slipped through with exact RoPE"


def test_read_past_length_stays_in_bounds_when_paged():
    # The mutant reads one slot past each length; in a paged cache that slot may sit on a
    # page the table marks -1. The kernel's own masks must keep the read inside the
    # allocation (the interpreter would crash on an out-of-bounds load): the result is wrong
    # (NaN garbage, or a valid-looking but foreign slot), never a crash.
    case = kernel_case(level="kernel-paged", page_size=16, H=2, d_h=16, r=4, lengths=[32, 16], seed=41)
    p = kernel_inputs(case)
    p.cache.page_table[1, 1] = -1  # sequence 1 (length 16) owns only page 0: slot 16 has no page (a server's table)
    good, _ = p.call(paged_decode_attention)
    with patched("read_past_length"):
        bad, _ = p.call(paged_decode_attention)
    assert torch.isfinite(good).all()
    # sequence 0 is full (nothing past it); sequence 1's extra slot is masked by the table
    torch.testing.assert_close(bad, good, rtol=0, atol=0)


def test_each_patch_applies_once_and_changes_the_source():
    # a patch whose text no longer occurs exactly once in the kernel source is refused, so a
    # mutant cannot silently turn into the correct kernel when the kernels are edited
    src = runtime._KERNEL_FILE.read_text()
    for name, (old, new) in PATCHES.items():
        assert src.count(old) == 1 and old != new, name
    with pytest.raises(ValueError, match="occurs 0 times"):
        runtime.load_patched("nowhere", "this text is not in the kernels", "x")
    assert runtime._KERNEL_FILE.read_text().count("tl.exp(") > 1
    with pytest.raises(ValueError, match=r"occurs [2-9] times"):
        runtime.load_patched("twice", "tl.exp(", "tl.exp2(")


def test_patched_module_is_its_own_and_leaves_the_shipped_one_alone():
    mod = kernel_mutants.patched_kernels("scale_rank")
    assert mod.__name__ == f"lrkv.kernels._kernels_{runtime.mode()[0]}_scale_rank"
    assert mod is not runtime.kernels()
    with patched("scale_rank"):
        assert runtime.kernels() is mod
    assert runtime.kernels() is not mod
    shipped = runtime._KERNEL_FILE.read_text()
    assert "mutant" not in shipped.lower() and "1.0 / tl.sqrt(R" not in shipped


def test_mutant_registry():
    for name in KERNEL_MUTANTS:  # `--backend lrkv.mutants.kernel:mutant_NAME`, one per mutant
        b = getattr(kernel_mutants, f"mutant_{name}")()
        assert isinstance(b, TritonBackend) and b.mutant == name and b.name == f"triton[{name}]"
    with pytest.raises(ValueError, match="unknown kernel mutant 'scale_sqrt_r'"):  # one name per mutant
        KernelMutant("scale_sqrt_r")
    with pytest.raises(TypeError):
        KernelMutant(5)
    with pytest.raises(ValueError, match="wrapper mutant"):
        kernel_mutants.patched_kernels("separate_softmax")
    # the shipped backend and entry points take no mutant
    with pytest.raises(TypeError):
        TritonBackend(mutant="scale_rank")
    assert not any(n.startswith("mutant_") for n in vars(triton_backend))
