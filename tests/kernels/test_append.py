"""Append kernel (bit-exact vs the reference `append`, contiguous and paged) and the
layer level of the `triton` backend (project → append → decode → W_o) vs the reference."""

from __future__ import annotations

import pytest
import torch


from lrkv.kernels.append import append, paged_append
from lrkv.kernels.triton_backend import TritonBackend
from lrkv.kernels.paged import paginate, to_contiguous
from lrkv.kernels.testing import kernel_device, tight_check
from lrkv.reference import lrkv as L
from lrkv.reference.cache import allocate_cache
from lrkv.reference.weights import init_lrkv_weights
from lrkv.spec import AttentionSpec

pytestmark = pytest.mark.equivalence


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def assert_bit_equal(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(bits(a[name]).cpu(), bits(b[name]).cpu()), f"{name} differs bitwise"


def setup(spec, dtype, B=3, t_max=9, prefill=(4, 0, 7), seed=0):
    dev = kernel_device()
    w = init_lrkv_weights(spec, seed=seed, dtype=torch.float64)
    cache = allocate_cache(spec, B, t_max, dtype, device=dev)
    g = torch.Generator().manual_seed(seed + 1)
    for name, t in cache.tensors().items():  # fill the prefix with data, leave NaN after it
        vals = torch.randn(t.shape, generator=g, dtype=torch.float64).to(dtype).to(dev)
        m = (torch.arange(t_max, device=dev)[None, :] < torch.tensor(prefill, device=dev)[:, None])
        t.copy_(torch.where(m.reshape(B, t_max, *([1] * (t.dim() - 2))), vals, t))
    cache.lengths = torch.tensor(prefill, dtype=torch.int32, device=dev)
    x = torch.randn(B, spec.d_model, generator=g, dtype=torch.float64).to(dev)
    return w, cache, x


def _on(entries: dict, device) -> dict:
    return {k: v.to(device) for k, v in entries.items()}


SPECS = [AttentionSpec.lrkv(3, 16, 5), AttentionSpec.lrkv(3, 16, 6, qk_norm=True, rope="exact")]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_append_bit_exact(spec, dtype):
    w, cache, x = setup(spec, dtype)
    ref = cache.clone()
    for step in range(2):  # two appends: positions follow the lengths
        pos = cache.lengths.clone()
        # the reference projection runs on the CPU (float64 weights); its entries move to the cache's device
        entries = _on(L.project_token(w.to(torch.float64), (x * (step + 1)).cpu(), pos.cpu()), pos.device)
        append(cache, entries, pos)
        L.append(ref, entries, ref.lengths.clone())
        assert_bit_equal(cache.tensors(), ref.tensors())
        assert torch.equal(cache.lengths, ref.lengths)


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_paged_append_bit_exact(page_size, dtype):
    spec = SPECS[1]
    w, cache, x = setup(spec, dtype, t_max=9)
    paged = paginate(cache, page_size, generator=torch.Generator().manual_seed(7))
    ref = cache.clone()
    for step in range(2):
        pos = paged.lengths.clone()
        entries = _on(L.project_token(w, (x + step).cpu(), pos.cpu()), pos.device)
        paged_append(paged, entries, pos)
        L.append(ref, entries, ref.lengths.clone())
    back = to_contiguous(paged)
    assert_bit_equal({k: v[:, :9] for k, v in back.tensors().items()}, ref.tensors())
    assert torch.equal(paged.lengths, ref.lengths)


def test_append_rejects_bad_calls():
    spec = SPECS[0]
    w, cache, x = setup(spec, torch.float32, t_max=8, prefill=(4, 0, 7))
    pos = cache.lengths.clone()
    entries = _on(L.project_token(w, x.cpu(), pos.cpu()), pos.device)
    with pytest.raises(ValueError, match="positions must equal"):
        append(cache, entries, pos + 1)
    with pytest.raises(ValueError, match="entries lacks 'latent_v'"):
        append(cache, {k: v for k, v in entries.items() if k != "latent_v"}, pos)
    with pytest.raises(ValueError, match=r"entries\['shared_k'\] must have shape"):
        append(cache, {**entries, "shared_k": entries["shared_k"][:, :3]}, pos)
    full = cache.clone()
    full.lengths = torch.tensor([8, 0, 7], dtype=torch.int32, device=full.lengths.device)
    with pytest.raises(ValueError, match="cache is full"):
        append(full, entries, full.lengths.clone())
    aliased = cache.clone()
    aliased.shared_k = aliased.shared_k[:, :1].expand(-1, 8, -1)  # every slot one storage row
    with pytest.raises(ValueError, match="overlaps itself"):
        append(aliased, entries, pos)


def test_paged_append_rejects_missing_and_shared_pages():
    spec = SPECS[0]
    w, cache, x = setup(spec, torch.float32, t_max=8, prefill=(4, 0, 7))
    paged = paginate(cache, 4, generator=torch.Generator().manual_seed(1))
    pos = paged.lengths.clone()
    entries = _on(L.project_token(w, x.cpu(), pos.cpu()), pos.device)
    broken = paged.clone()
    broken.page_table[0, 1] = -1  # sequence 0 writes position 4: page 1
    with pytest.raises(ValueError, match=r"page_table\[0, 1\] = -1"):
        paged_append(broken, entries, pos)
    shared = paged.clone()
    shared.page_table[2, 1] = shared.page_table[0, 1]  # seq 2 writes slot 7 (page 1, row 3); seq 0 slot 4
    shared.lengths = torch.tensor([4, 0, 4], dtype=torch.int32, device=shared.lengths.device)
    with pytest.raises(ValueError, match="same physical slot"):
        paged_append(shared, entries, shared.lengths.clone())


LAYER_SPECS = [
    AttentionSpec.lrkv(3, 16, 5),
    AttentionSpec.lrkv(3, 16, 6, rope="exact", qk_norm=True),
    AttentionSpec.lrkv(3, 16, 6, rope="aligned"),
    AttentionSpec.lrkv(3, 16, 6, rope="latent"),
]


@pytest.mark.parametrize("spec", LAYER_SPECS, ids=lambda s: s.short())
def test_layer_step_matches_reference(spec):
    dev = kernel_device()
    w = init_lrkv_weights(spec, seed=3)
    B, T = 2, 6
    g = torch.Generator().manual_seed(4)
    x = torch.randn(B, T, spec.d_model, generator=g, dtype=torch.float64)
    _, cache = L.prefill(w, x[:, :3], t_max=T)
    ref = cache.clone()
    wd = w.__class__(**{k: (v.to(dev) if isinstance(v, torch.Tensor) else v) for k, v in vars(w).items()})
    cache = L.FactoredCache(**{k: (None if v is None else v.to(dev)) for k, v in vars(cache).items()})
    backend = TritonBackend(num_splits=2)
    for t in range(3, T):
        y, cache = backend.layer_step(wd, x[:, t].to(dev), cache, cache.lengths.clone())
        y_ref, ref = L.layer_step(w, x[:, t], ref, ref.lengths.clone())
        ok, err, bound = tight_check(y, y_ref, torch.float64)
        assert ok, f"step {t}: {err:.3g} > {bound:.3g}"
    assert torch.equal(cache.lengths.cpu(), ref.lengths)
