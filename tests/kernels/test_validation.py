"""Every malformed call is refused BEFORE launch with a ValueError/TypeError naming the
problem (an out-of-bounds access must be impossible), and the CPU fallback says what it is."""

from __future__ import annotations

import pytest
import torch


from lrkv.kernels import runtime
from lrkv.kernels.triton_backend import TritonBackend, kernel_mutant_backends
from lrkv.kernels.decode import decode_attention, paged_decode_attention
from lrkv.kernels.kernel_mutants import KERNEL_MUTANTS, mutant_code
from lrkv.kernels.paged import paginate
from lrkv.kernels.testing import make_case, tight_check
from lrkv.reference.cache import FactoredCache
from lrkv.reference.rope import ExactRope

NAMES = ("q", "shared_k", "shared_v", "latent_k", "latent_v", "basis_k", "basis_v", "lengths")


@pytest.fixture
def case():
    return make_case(B=2, T=8, H=3, d_h=16, r=4, lengths=[8, 3], seed=30)


def call(case, **over):
    i = {**case.inputs, **{k: v for k, v in over.items() if k in case.inputs}}
    kw = {k: v for k, v in over.items() if k not in case.inputs}
    kw.setdefault("scale", case.scale)
    return decode_attention(*[i[n] for n in NAMES], key_scale=i["key_scale"], **kw)


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
    (lambda i: dict(rope="exact"), TypeError, r"rope must be None or ExactRope"),
    (lambda i: dict(num_splits=0), ValueError, r"num_splits must lie in \[1, 256\]"),
    (lambda i: dict(num_splits=257), ValueError, r"num_splits must lie"),
    (lambda i: dict(group_size=4), ValueError, r"group_size must lie in \[1, min\(H=3"),
    (lambda i: dict(block_t=24), ValueError, r"block_t must be one of"),
    (lambda i: dict(num_warps=3), ValueError, r"num_warps must be one of"),
    (lambda i: dict(dot="tf32"), ValueError, r"dot must be one of"),
    (lambda i: dict(dot="lp"), ValueError, r"dot='lp' needs float16/bfloat16"),
    (lambda i: dict(mutant="typo"), ValueError, r"unknown kernel mutant 'typo'"),
    (lambda i: dict(num_splits=2.0), TypeError, r"num_splits must be an int"),
], ids=lambda x: x if isinstance(x, str) else None)
def test_contract_violations_named(case, over, exc, match):
    with pytest.raises(exc, match=match):
        call(case, **over(case.inputs))


def test_nan_inside_valid_length_refused(case):
    i = case.inputs
    lk = i["latent_k"].clone()
    lk[1, 2, 0, 0] = float("nan")  # slot 2 < length 3
    with pytest.raises(ValueError, match="latent_k contains NaN or Inf inside the valid length"):
        call(case, latent_k=lk)
    q = i["q"].clone()
    q[0, 0, 0] = float("inf")
    with pytest.raises(ValueError, match="q contains NaN or Inf"):
        call(case, q=q)


def test_rope_needs_even_head_dim():
    case = make_case(B=1, T=4, H=2, d_h=15, r=3, seed=31)
    with pytest.raises(ValueError, match="rope needs an even d_h"):
        call(case, rope=ExactRope())


def test_wrong_device_refused(case):
    if runtime.mode()[0] != "cuda":
        pytest.skip("device placement is only enforced when the kernels are compiled for CUDA")
    with pytest.raises(ValueError, match=r"q is on cpu|all inputs must be on one device"):
        call(case, q=case.inputs["q"].cpu())


def _paged(case, page_size=4):
    i = case.inputs
    cache = FactoredCache(shared_k=i["shared_k"], shared_v=i["shared_v"], latent_k=i["latent_k"],
                          latent_v=i["latent_v"], lengths=i["lengths"], key_scale=i["key_scale"])
    return paginate(cache, page_size, generator=torch.Generator().manual_seed(0))


def _call_paged(case, p, **kw):
    i = case.inputs
    return paged_decode_attention(i["q"], p.shared_k, p.shared_v, p.latent_k, p.latent_v, i["basis_k"],
                                  i["basis_v"], p.lengths, p.page_table, scale=case.scale, **kw)


def test_page_table_checked_before_launch(case):
    p = _paged(case)
    bad = p.page_table.clone()
    bad[1, 0] = p.num_pages  # sequence 1 (length 3) reads page 0 of its table
    with pytest.raises(ValueError, match=rf"page_table\[1, 0\] = {p.num_pages} is outside"):
        _call_paged(case, p.__class__(**{**vars(p), "page_table": bad}))
    with pytest.raises(TypeError, match="page_table must be int32"):
        _call_paged(case, p.__class__(**{**vars(p), "page_table": p.page_table.long()}))
    with pytest.raises(ValueError, match=r"lengths must lie in \[0, max_pages\*page_size=8\]"):
        _call_paged(case, p.__class__(**{**vars(p), "lengths": p.lengths + 1}))
    unused = p.page_table.clone()
    unused[1, 1] = -1  # page 1 of sequence 1 covers slots 4..7, past its length: never read
    out, _ = _call_paged(case, p.__class__(**{**vars(p), "page_table": unused}))
    ok, err, bound = tight_check(out, case.reference()[0], torch.float64)
    assert ok


def test_fallback_is_reference_and_backend_says_unavailable(case, monkeypatch):
    if torch.cuda.is_available():
        pytest.skip("a CUDA machine never falls back")
    monkeypatch.setattr(runtime, "_FORCED", [])
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert runtime.mode()[0] == "fallback"
    ok, why = TritonBackend().available()
    assert not ok and "TRITON_INTERPRET" in why
    out, lse = call(case)  # the reference math, cast back
    ok, err, bound = tight_check(out, case.reference()[0], torch.float64)
    assert ok
    with pytest.raises(RuntimeError, match="kernel mutants need the kernel"):
        call(case, mutant="scale_rank")


def test_mutant_codes_match_the_kernel_source():
    K = runtime.kernels()
    for name, code in KERNEL_MUTANTS.items():
        assert getattr(K, f"M_{name.upper()}").value == code, name


def test_mutant_registry():
    assert mutant_code(None) == 0 and mutant_code("none") == 0
    assert mutant_code("scale_sqrt_r") == KERNEL_MUTANTS["scale_rank"]  # harness-style alias
    assert set(kernel_mutant_backends()) == set(KERNEL_MUTANTS)
    with pytest.raises(ValueError):
        TritonBackend(mutant="nope")
    assert TritonBackend().available()[0]  # live inside this module
