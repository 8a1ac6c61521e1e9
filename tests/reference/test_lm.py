"""The tiny decoder LM: incremental generation with caches == its full materialized forward."""

import pytest
import torch

from lrkv.reference.lm import TinyLMConfig, generate, init_tiny_lm, lm_forward, lm_prefill, lm_step
from lrkv.spec import MLRA2, AttentionSpec

SPECS = {
    "lrkv-exact-qkn": AttentionSpec.lrkv(2, 8, 3, rope="exact", qk_norm=True),
    "lrkv-aligned": AttentionSpec.lrkv(2, 8, 4, rope="aligned"),
    "lrkv-none": AttentionSpec.lrkv(3, 8, 5),
    "mha": AttentionSpec.mha(2, 8, rope="exact"),
    "gqa": AttentionSpec.gqa(4, 8, 2, rope="exact"),
    "mla-deepseek": AttentionSpec.mla(2, 8, 12, rope_dim=4),
    "mlra-2": AttentionSpec.mlra(4, 8, **{**MLRA2, "latent_dim": 8, "rope_dim": 4}),
}


@pytest.mark.equivalence
@pytest.mark.parametrize("name", list(SPECS))
def test_generation_reproduces_full_forward(name):
    model = init_tiny_lm(TinyLMConfig(SPECS[name], n_layers=2), seed=3)
    prompt = torch.randint(0, 61, (2, 4), generator=torch.Generator().manual_seed(0))
    tokens, step_logits = generate(model, prompt, n_new=6)
    full = lm_forward(model, tokens)
    torch.testing.assert_close(step_logits, full[:, 4:], rtol=0, atol=1e-10)
    assert tokens.shape == (2, 10)


@pytest.mark.equivalence
def test_varlen_prompts():
    model = init_tiny_lm(TinyLMConfig(SPECS["lrkv-exact-qkn"], n_layers=2), seed=1)
    tokens = torch.randint(0, 61, (2, 5), generator=torch.Generator().manual_seed(2))
    lengths = torch.tensor([5, 2], dtype=torch.int32)
    _, caches = lm_prefill(model, tokens, t_max=8, lengths=lengths)
    nxt = torch.tensor([7, 9])
    logits, _ = lm_step(model, nxt, caches, lengths.clone())
    for b, n in enumerate(lengths.tolist()):
        seq = torch.cat([tokens[b, :n], nxt[b:b + 1]])[None]
        torch.testing.assert_close(logits[b], lm_forward(model, seq)[0, -1], rtol=0, atol=1e-10)


def test_lm_rejects_bad_tokens_and_config():
    model = init_tiny_lm(TinyLMConfig(SPECS["lrkv-none"], n_layers=1))
    with pytest.raises(ValueError, match="token ids"):
        lm_forward(model, torch.tensor([[0, 61]]))
    with pytest.raises(TypeError, match="tokens"):
        lm_forward(model, torch.tensor([[0.0]]))
    with pytest.raises(ValueError, match="n_layers"):
        TinyLMConfig(SPECS["lrkv-none"], n_layers=0)
    with pytest.raises(ValueError, match="t_max"):
        generate(model, torch.tensor([[1, 2]]), n_new=3, t_max=4)
