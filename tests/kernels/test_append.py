"""Append kernel (bit-exact vs the reference `append`, contiguous and paged) and the
layer level of the `triton` backend (project → append → decode → W_o) through the harness.
The caches are the harness's layer-level draw (`make_layer_inputs`: lengths[b] − 1 projected
tokens, NaN after them)."""

from __future__ import annotations

import pytest
import torch

from lrkv.kernels.append import append, paged_append
from lrkv.kernels.testing import kernel_device, policy
from lrkv.kernels.triton_backend import TritonBackend
from lrkv.reference import lrkv as L
from lrkv.reference.cache import FactoredCache
from lrkv.spec import AttentionSpec
from lrkv.verify.case import Case
from lrkv.verify.levels.layer import make_layer_inputs
from lrkv.verify.runner import run

pytestmark = pytest.mark.equivalence


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.view({2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()])


def assert_bit_equal(a, b):
    assert a.keys() == b.keys()
    for name in a:
        assert torch.equal(bits(a[name]).cpu(), bits(b[name]).cpu()), f"{name} differs bitwise"


def setup(spec, dtype, t_max=9, prefill=(4, 0, 7), seed=0):
    """float64 weights, a cache at `dtype` on the kernel device holding `prefill` tokens (NaN
    after them), and the next token's activations [B, d] (float64)."""
    inp = make_layer_inputs(Case("layer", spec, dtype, tuple(n + 1 for n in prefill), t_max, seed=seed))
    dev = kernel_device()
    cache = FactoredCache(**{k: (v if v is None else v.to(dev)) for k, v in vars(inp.cache).items()})
    return inp.weights.to(torch.float64), cache, inp.x_t.to(torch.float64).to(dev)


def _on(entries: dict, cache) -> dict:
    """The projected entries on the cache's device, rounded to its dtype (append never rounds)."""
    return {k: v.to(device=cache.lengths.device, dtype=cache.shared_k.dtype) for k, v in entries.items()}


SPECS = [AttentionSpec.lrkv(3, 16, 5), AttentionSpec.lrkv(3, 16, 6, qk_norm=True, rope="exact")]


@pytest.mark.parametrize("spec", SPECS, ids=lambda s: s.short())
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_append_bit_exact(spec, dtype):
    w, cache, x = setup(spec, dtype)
    ref = cache.clone()
    for step in range(2):  # two appends: positions follow the lengths
        pos = cache.lengths.clone()
        # the reference projection runs on the CPU (float64 weights); its entries move to the cache's device
        entries = _on(L.project_token(w.to(torch.float64), (x * (step + 1)).cpu(), pos.cpu()), cache)
        append(cache, entries, pos)
        L.append(ref, entries, ref.lengths.clone())
        assert_bit_equal(cache.tensors(), ref.tensors())
        assert torch.equal(cache.lengths, ref.lengths)


@pytest.mark.parametrize("page_size", [1, 4])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_paged_append_bit_exact(page_size, dtype):
    spec = SPECS[1]
    w, cache, x = setup(spec, dtype, t_max=9)
    paged = cache.paginate(page_size, generator=torch.Generator().manual_seed(7))
    ref = cache.clone()
    for step in range(2):
        pos = paged.lengths.clone()
        entries = _on(L.project_token(w, (x + step).cpu(), pos.cpu()), paged)
        paged_append(paged, entries, pos)
        L.append(ref, entries, ref.lengths.clone())
    # gathered back through the page table: bit-equal inside every length, NaN past it
    names = list(ref.tensors())
    back = paged.gather().tensors()
    valid = torch.arange(9, device=paged.lengths.device)[None, :] < paged.lengths[:, None]  # [B, T]
    inside = lambda t: torch.where(valid.reshape(*valid.shape, *[1] * (t.dim() - 2)), t, 0)  # noqa: E731
    assert_bit_equal({k: inside(back[k][:, :9]) for k in names}, {k: inside(v) for k, v in ref.tensors().items()})
    assert all(back[k][:, :9][~valid].isnan().all() for k in names)
    assert torch.equal(paged.lengths, ref.lengths)


def test_append_rejects_bad_calls():
    spec = SPECS[0]
    w, cache, x = setup(spec, torch.float32, t_max=8, prefill=(4, 0, 7))
    pos = cache.lengths.clone()
    entries = _on(L.project_token(w, x.cpu(), pos.cpu()), cache)
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
    paged = cache.paginate(4, generator=torch.Generator().manual_seed(1))
    pos = paged.lengths.clone()
    entries = _on(L.project_token(w, x.cpu(), pos.cpu()), paged)
    broken = paged.clone()
    broken.page_table[0, 1] = -1  # sequence 0 writes position 4: page 1
    with pytest.raises(ValueError, match=r"page_table\[0, 1\] = -1"):
        paged_append(broken, entries, pos)
    shared = paged.clone()
    shared.page_table[2, 1] = shared.page_table[0, 1]  # seq 2 writes slot 7 (page 1, row 3); seq 0 slot 4
    shared.lengths = torch.tensor([4, 0, 4], dtype=torch.int32, device=shared.lengths.device)
    with pytest.raises(ValueError, match="same physical slot"):
        paged_append(shared, entries, shared.lengths.clone())
    prefix = paged.clone()  # seq 2 shares seq 0's second page; seq 0 reads slots 0–6 of it as valid
    prefix.page_table[2, 1] = prefix.page_table[0, 1]
    prefix.lengths = torch.tensor([7, 0, 5], dtype=torch.int32, device=prefix.lengths.device)
    before = prefix.clone()
    with pytest.raises(ValueError, match=r"sequence 2 would write page .* which sequence 0 reads as its slot 5.*read-only"):
        paged_append(prefix, entries, prefix.lengths.clone())
    assert all(torch.equal(bits(a), bits(b)) for a, b in zip(before.tensors().values(), prefix.tensors().values()))


@pytest.mark.parametrize("which", ["kernel", "reference", "paged"])
@pytest.mark.parametrize("bad, err, words", [
    (lambda e: {**e, "shared_k": e["shared_k"].double()}, TypeError,
     r"entries\['shared_k'\] has dtype torch.float64 but the cache holds torch.bfloat16"),
    (lambda e: {**e, "latent_v": e["latent_v"].index_fill(0, torch.tensor([1], device=e["latent_v"].device),
                                                          float("nan"))}, ValueError,
     r"entries\['latent_v'\] contains NaN or Inf"),
    (lambda e: {**e, "key_scale": -e["key_scale"]}, ValueError, "key_scale must be >= 0"),
])
def test_append_refuses_entries_it_would_have_to_round_or_that_are_not_finite(which, bad, err, words):
    """float64 entries were rounded silently into a bfloat16 cache, and NaN entries written into
    a slot every later decode reads."""
    w, cache, x = setup(SPECS[1], torch.bfloat16, t_max=8, prefill=(4, 0, 6))
    target = cache.paginate(4, generator=torch.Generator().manual_seed(1)) if which == "paged" else cache
    pos = target.lengths.clone()
    entries = bad({k: v.to(pos.device) for k, v in _on(L.project_token(w, x.cpu(), pos.cpu()), target).items()})
    before = {k: v.clone() for k, v in target.tensors().items()}
    call = {"kernel": append, "reference": L.append, "paged": paged_append}[which]
    with pytest.raises(err, match=words):
        call(target, entries, pos)
    assert_bit_equal(target.tensors(), before)  # nothing written
    assert torch.equal(target.lengths, pos)


LAYER_SPECS = [
    AttentionSpec.lrkv(3, 16, 5),
    AttentionSpec.lrkv(3, 16, 6, rope="exact", qk_norm=True),
    AttentionSpec.lrkv(3, 16, 6, rope="aligned"),
    AttentionSpec.lrkv(3, 16, 6, rope="latent"),
]


@pytest.mark.parametrize("spec", LAYER_SPECS, ids=lambda s: s.short())
def test_layer_step_matches_reference(spec):
    # the harness's layer level: one layer_step (project → Triton append → Triton decode → W_o)
    # after lengths[b] − 1 tokens, judged against the float64 layer_step by the gate's rule
    case = Case("layer", spec, "float64", (4, 1, 6), 6, seed=3)
    recs = run([case], [("triton", TritonBackend(num_splits=2))], policy())
    assert [r["status"] for r in recs] == ["pass"], [(r["id"], r["reason"]) for r in recs]
