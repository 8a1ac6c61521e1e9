"""The kernels compile for sm_90 (H100/H200) with Triton's real compiler — no GPU needed.

The interpreter accepts code the GPU compiler rejects (non-constexpr globals, loop-carried
type changes, dot shapes), so this catches compile errors on a CPU-only machine before a
GPU run; it also guards against register spills in the benchmark's main configuration.
"""

from __future__ import annotations

import pytest
import torch

from lrkv.kernels.compile_check import Variant, compile_aux, compile_variant

pytestmark = [
    # On a GPU machine every native test compiles the kernels for real; this module is the
    # CPU-only stand-in (and its ASTSource call follows the Triton version it was written on).
    pytest.mark.skipif(torch.cuda.is_available(), reason="CUDA present: the native tests compile the kernels"),
]


def _no_spill_promise():
    """The no-spill assertions hold for the Triton the sm_90 compile report was made with;
    an older one spills at every wide shape (ci/logs/triton36-rehearsal.log)."""
    from lrkv.kernels import launch, runtime

    if launch.triton_before_tier():
        pytest.skip(f"Triton {runtime.triton_version()} is older than {'.'.join(map(str, launch.TRITON_TIER))}, "
                    "where the launch table's no-spill shapes were compiled; it spills at every wide shape "
                    "(ci/logs/triton36-rehearsal.log) and has its own measured entry")


def _compile(v, **kw):
    try:
        return compile_variant(v, **kw)
    except FileNotFoundError as e:  # a Triton wheel without its bundled ptxas
        pytest.skip(f"CUDA toolchain of the triton wheel not found: {e}")


@pytest.mark.parametrize("variant,mutant", [
    (Variant(num_warps=8), None),  # bf16, H = 18 as 2 x 9, r = 55: the benchmark's main shape
    (Variant(dtype="float16", rope_exact=True, key_scale=True, paged=True, num_warps=8), "read_past_length"),
    (Variant(dtype="float64", d_h=32, r=8, group=4), None),  # the no-tl.dot float64 path
], ids=["bf16-main", "fp16-exact-paged-mutant", "fp64-fma"])
def test_split_kernel_compiles_for_sm90(variant, mutant):
    # a patched kernel (lrkv.mutants.kernel) must compile too: the GPU gate runs the mutants natively
    module = None
    if mutant is not None:
        from lrkv.mutants.kernel import patched_kernels

        module = patched_kernels(mutant, which="cuda")
    res = _compile(variant, module=module)
    assert res["entry"] == ("paged_split_kernel" if variant.paged else "decode_split_kernel")
    if variant == Variant(num_warps=8) and "stack" in res:
        _no_spill_promise()
        assert res["stack"] == 0, f"the main configuration spills registers: {res}"


# (H, r, paged, fp8 format, granularity): both paper scales with a 16-bit cache, contiguous and
# paged; fp8 caches with every granularity once at H = 18 (each format, both layouts) and once at H = 32
DEFAULT_LAUNCHES = [(H, r, paged, "", "") for H, r in ((18, 55), (32, 54)) for paged in (False, True)] + [
    (18, 55, False, "e4m3", "per_token_head"), (18, 55, True, "e5m2", "per_tensor"),
    (18, 55, False, "e5m2", "per_head"), (18, 55, True, "e4m3", "per_token"), (32, 54, False, "e4m3", "per_token_head"),
]


@pytest.mark.parametrize("H,r,paged,fp8,granularity", DEFAULT_LAUNCHES,
                         ids=lambda x: {True: "paged16", False: "contiguous", "": "-"}.get(x, str(x)))
def test_gpu_default_launch_compiles_without_spills(H, r, paged, fp8, granularity, monkeypatch):
    # Exactly the launch shape a CUDA run picks at the paper scales (bf16, d_h = 128), over a
    # bf16 cache and over fp8 caches of each format and granularity: registers must not
    # spill there (a spill turns a bandwidth-bound loop into local-memory traffic).
    # pick_launch is asked as if on a 132-SM GPU, which this machine need not have.
    from lrkv.kernels import launch

    _no_spill_promise()
    monkeypatch.setattr(launch, "num_sms", lambda device: 132)
    monkeypatch.setattr(launch.runtime, "is_interpreted", lambda: False)
    cfg = launch.pick_launch(B=8, H=H, d_h=128, r=r, slots=32768, dtype=torch.bfloat16,
                             device=torch.device("cuda"), paged=paged, fp8=bool(fp8))
    assert cfg.private == "per_head" and cfg.dot == "lp"
    res = _compile(Variant.from_launch(cfg, r=r, d_h=128, paged=paged, page_size=16,  # vLLM's page size
                                       fp8=fp8, fp8_granularity=granularity or "per_token_head"))
    assert res["variant"]["private"] == "per_head" and res["variant"]["group"] == cfg.group_size
    if "stack" not in res:
        pytest.skip("cuobjdump not bundled with this triton: register usage unknown")
    assert res["stack"] == 0, f"the GPU default launch spills registers: {res}"


def test_combine_and_append_compile_for_sm90():
    try:
        res = compile_aux()
    except FileNotFoundError as e:
        pytest.skip(f"CUDA toolchain of the triton wheel not found: {e}")
    assert {r["kernel"] for r in res} == {"decode_combine_kernel", "append_kernel", "append_fp8_kernel"}
