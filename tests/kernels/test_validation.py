"""Every malformed call is refused BEFORE launch with a ValueError/TypeError naming the
problem (an out-of-bounds access must be impossible), and the CPU fallback says what it is."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from lrkv.kernels import runtime
from lrkv.kernels.decode import decode_attention, paged_decode_attention
from lrkv.kernels.testing import assert_passes, kernel_case, kernel_inputs
from lrkv.kernels.triton_backend import TritonBackend
from lrkv.reference.rope import ExactRope

NAMES = ("q", "shared_k", "shared_v", "latent_k", "latent_v", "basis_k", "basis_v", "lengths")


@pytest.fixture
def case():
    return kernel_case(H=3, d_h=16, r=4, lengths=[8, 3], seed=30)


def inputs(case) -> dict:
    """The case's decode arguments by name (q, ..., lengths, scale, key_scale, rope)."""
    inp = kernel_inputs(case)
    return dict(zip(NAMES, inp.args()), key_scale=inp.cache.key_scale, scale=inp.scale, rope=inp.rope)


def call(case, **over):
    i = inputs(case)
    kw = {k: over.pop(k) for k in list(over) if k not in i}
    i.update(over)
    return decode_attention(*[i[n] for n in NAMES], scale=i["scale"], key_scale=i["key_scale"], rope=i["rope"],
                            **kw)


def t(x, **kw):
    return torch.as_tensor(x, **kw)


@pytest.mark.parametrize("over,exc,match", [
    (lambda i: dict(q=i["q"][:, :, :8]), ValueError, r"shared_k must have shape"),
    (lambda i: dict(q=i["q"][0]), ValueError, r"q must be \[B, H, d_h\]"),
    (lambda i: dict(latent_k=i["latent_k"][..., :3]), ValueError, r"latent_v must have shape"),
    (lambda i: dict(basis_v=i["basis_v"][:2]), ValueError, r"basis_v must have shape"),
    (lambda i: dict(shared_v=i["shared_v"].float()), TypeError, r"shared_v has dtype torch.float32"),
    (lambda i: dict(q=i["q"].int()), TypeError, r"q has dtype torch.int32"),
    (lambda i: dict(lengths=i["lengths"].float()), TypeError, r"lengths must be int32 or int64"),
    (lambda i: dict(lengths=i["lengths"] + 1), ValueError, r"lengths must lie in \[0, T_max=8\]"),
    (lambda i: dict(lengths=i["lengths"] - 4), ValueError, r"lengths must lie in"),
    (lambda i: dict(lengths=i["lengths"][:1]), ValueError, r"lengths must have shape \[2\]"),
    (lambda i: dict(key_scale=torch.ones(2, 8, 2, dtype=torch.float64, device=i["q"].device)), ValueError,
     r"key_scale must have shape"),
    (lambda i: dict(scale=-1.0), ValueError, r"scale must be a positive float"),
    (lambda i: dict(scale=float("inf")), ValueError, r"scale must be finite"),
    (lambda i: dict(scale=float("nan")), ValueError, r"scale must be a positive float"),
    (lambda i: dict(key_scale=-torch.ones(2, 8, 3, dtype=torch.float64, device=i["q"].device)), ValueError,
     r"key_scale must be >= 0"),
    (lambda i: dict(rope="exact"), TypeError, r"rope must be None or ExactRope"),
    (lambda i: dict(num_splits=0), ValueError, r"num_splits must lie in \[1, 256\]"),
    (lambda i: dict(num_splits=257), ValueError, r"num_splits must lie"),
    (lambda i: dict(group_size=4), ValueError, r"group_size must lie in \[1, min\(H=3"),
    (lambda i: dict(block_t=24), ValueError, r"block_t must be one of"),
    (lambda i: dict(num_warps=3), ValueError, r"num_warps must be one of"),
    (lambda i: dict(dot="tf32"), ValueError, r"dot must be one of"),
    (lambda i: dict(dot="lp"), ValueError, r"dot='lp' needs float16/bfloat16"),
    (lambda i: dict(mutant="scale_rank"), TypeError, r"unexpected keyword argument 'mutant'"),
    (lambda i: dict(num_splits=2.0), TypeError, r"num_splits must be an int"),
], ids=lambda x: x if isinstance(x, str) else None)
def test_contract_violations_named(case, over, exc, match):
    with pytest.raises(exc, match=match):
        call(case, **over(inputs(case)))


def test_nan_inside_valid_length_refused(case):
    i = inputs(case)
    lk = i["latent_k"].clone()
    lk[1, 2, 0, 0] = float("nan")  # slot 2 < length 3
    with pytest.raises(ValueError, match="latent_k contains NaN or Inf inside the valid length"):
        call(case, latent_k=lk)
    q = i["q"].clone()
    q[0, 0, 0] = float("inf")
    with pytest.raises(ValueError, match="q contains NaN or Inf"):
        call(case, q=q)


def test_rope_needs_even_head_dim():
    case = kernel_case(H=2, d_h=15, r=3, lengths=[4], seed=31)
    with pytest.raises(ValueError, match="rope needs an even d_h"):
        call(case, rope=ExactRope())


def test_wrong_device_refused(case):
    if runtime.mode()[0] != "cuda":
        pytest.skip("device placement is only enforced when the kernels are compiled for CUDA")
    with pytest.raises(ValueError, match=r"q is on cpu|all inputs must be on one device"):
        call(case, q=inputs(case)["q"].cpu())


def test_page_table_checked_before_launch():
    case = kernel_case(level="kernel-paged", page_size=4, H=3, d_h=16, r=4, lengths=[8, 3], seed=30)
    p = kernel_inputs(case)
    n_pages = p.cache.shared_k.shape[0]
    bad = p.cache.page_table.clone()
    bad[1, 0] = n_pages  # sequence 1 (length 3) reads page 0 of its table
    with pytest.raises(ValueError, match=rf"page_table\[1, 0\] = {n_pages} is outside"):
        replace(p, cache=replace(p.cache, page_table=bad)).call(paged_decode_attention)
    with pytest.raises(TypeError, match="page_table must be int32"):
        replace(p, cache=replace(p.cache, page_table=p.cache.page_table.long())).call(paged_decode_attention)
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, max_pages\*page_size=8\]"):
        replace(p, cache=replace(p.cache, lengths=p.cache.lengths + 1)).call(paged_decode_attention)
    twice = p.cache.page_table.clone()
    twice[0, 1] = twice[0, 0]  # sequence 0 (length 8) would read one page for slots 0..3 and 4..7
    with pytest.raises(ValueError, match=r"page_table\[0, 1\] = \d+ repeats page_table\[0, 0\]"):
        replace(p, cache=replace(p.cache, page_table=twice)).call(paged_decode_attention)
    unused = p.cache.page_table.clone()
    unused[1, 1] = -1  # page 1 of sequence 1 covers slots 4..7, past its length: never read
    out, lse = replace(p, cache=replace(p.cache, page_table=unused)).call(paged_decode_attention)
    assert_passes(case, out=out, lse=lse)


def test_fallback_is_reference_and_backend_says_unavailable(case, monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine never falls back")
    monkeypatch.setattr(runtime, "_FORCED", [])
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert runtime.mode()[0] == "fallback"
    ok, why = TritonBackend().available()
    assert not ok and "TRITON_INTERPRET" in why
    out, lse = call(case)  # the reference math, cast back
    assert_passes(case, out=out, lse=lse)
    with pytest.raises(RuntimeError, match="fallback mode"):  # no kernels here to patch
        runtime.load_patched("scale_rank", "tl.minimum(length, SLOT_LIMIT)", "length")


def test_backend_available_with_the_kernels():
    assert TritonBackend().available()[0]  # live inside this module
