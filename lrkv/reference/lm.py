"""A tiny decoder LM: embeddings, N × (RMSNorm → attention → RMSNorm → SwiGLU MLP), LM head.

Its purpose is the model-level check of DESIGN §4: incremental generation with caches
(prefill, then one `layer_step` per token per layer) must reproduce the full-sequence
materialized forward. Any attention family from `lrkv.reference.layers` can be plugged in.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..spec import AttentionSpec
from .layers import layer_module
from .norms import rms_norm


@dataclass(frozen=True)
class TinyLMConfig:
    attention: AttentionSpec  # the attention layer of every block
    vocab_size: int = 61  # odd on purpose: nothing may assume a power of two
    n_layers: int = 2  # N
    mlp_hidden: int = 0  # SwiGLU width; 0 means 2·d
    norm_eps: float = 1e-6

    def __post_init__(self):
        if self.vocab_size < 2:
            raise ValueError(f"vocab_size must be >= 2, got {self.vocab_size}")
        if self.n_layers < 1:
            raise ValueError(f"n_layers must be >= 1, got {self.n_layers}")
        if self.mlp_hidden < 0:
            raise ValueError(f"mlp_hidden must be >= 0, got {self.mlp_hidden}")

    @property
    def d_model(self) -> int:
        return self.attention.d_model

    @property
    def hidden(self) -> int:
        return self.mlp_hidden or 2 * self.d_model


@dataclass
class Block:
    attn: object  # family weights (carries its spec)
    norm_attn: torch.Tensor  # [d]
    norm_mlp: torch.Tensor  # [d]
    w_gate: torch.Tensor  # [d, hidden]
    w_up: torch.Tensor  # [d, hidden]
    w_down: torch.Tensor  # [hidden, d]


@dataclass
class TinyLM:
    config: TinyLMConfig
    embed: torch.Tensor  # [V, d]
    blocks: list[Block] = field(default_factory=list)
    norm_final: torch.Tensor | None = None  # [d]
    lm_head: torch.Tensor | None = None  # [d, V]


def init_tiny_lm(config: TinyLMConfig, seed: int = 0, dtype: torch.dtype = torch.float64) -> TinyLM:
    g = torch.Generator().manual_seed(seed)
    d, hid, V = config.d_model, config.hidden, config.vocab_size
    mod = layer_module(config.attention)

    def randn(*shape, std):
        return (torch.randn(*shape, generator=g, dtype=torch.float64) * std).to(dtype)

    def gain():
        return (1.0 + 0.1 * torch.randn(d, generator=g, dtype=torch.float64)).to(dtype)

    blocks = [
        Block(
            attn=mod.init_weights(config.attention, seed * 1000 + i + 1, dtype),
            norm_attn=gain(), norm_mlp=gain(),
            w_gate=randn(d, hid, std=d**-0.5), w_up=randn(d, hid, std=d**-0.5),
            w_down=randn(hid, d, std=hid**-0.5),
        )
        for i in range(config.n_layers)
    ]
    return TinyLM(config, randn(V, d, std=1.0), blocks, gain(), randn(d, V, std=d**-0.5))


def _mlp(blk: Block, x: torch.Tensor, eps: float) -> torch.Tensor:
    h = rms_norm(x, blk.norm_mlp, eps)
    return (torch.nn.functional.silu(h @ blk.w_gate) * (h @ blk.w_up)) @ blk.w_down


def _check_tokens(model: TinyLM, tokens: torch.Tensor) -> None:
    if tokens.dtype not in (torch.int32, torch.int64):
        raise TypeError(f"tokens must be int32/int64, got {tokens.dtype}")
    if tokens.numel() and (tokens.min() < 0 or tokens.max() >= model.config.vocab_size):
        raise ValueError(f"token ids must lie in [0, {model.config.vocab_size})")


def lm_forward(model: TinyLM, tokens: torch.Tensor, lengths: torch.Tensor | None = None) -> torch.Tensor:
    """Full-sequence materialized forward.  tokens [B, T] -> logits [B, T, V]"""
    _check_tokens(model, tokens)
    cfg = model.config
    mod = layer_module(cfg.attention)
    x = model.embed[tokens]  # [B, T, d]
    for blk in model.blocks:
        x = x + mod.layer_forward(blk.attn, rms_norm(x, blk.norm_attn, cfg.norm_eps), lengths)
        x = x + _mlp(blk, x, cfg.norm_eps)
    return rms_norm(x, model.norm_final, cfg.norm_eps) @ model.lm_head


def lm_prefill(model: TinyLM, tokens: torch.Tensor, t_max: int, lengths: torch.Tensor | None = None):
    """Prefill every layer's cache from a prompt.  Returns (logits [B, T, V], caches)."""
    _check_tokens(model, tokens)
    cfg = model.config
    mod = layer_module(cfg.attention)
    x = model.embed[tokens]
    caches = []
    for blk in model.blocks:
        y, cache = mod.prefill(blk.attn, rms_norm(x, blk.norm_attn, cfg.norm_eps), lengths, t_max)
        caches.append(cache)
        x = x + y
        x = x + _mlp(blk, x, cfg.norm_eps)
    return rms_norm(x, model.norm_final, cfg.norm_eps) @ model.lm_head, caches


def lm_step(model: TinyLM, token: torch.Tensor, caches: list, positions: torch.Tensor):
    """One incremental step for every sequence.  token [B] -> logits [B, V]"""
    _check_tokens(model, token)
    cfg = model.config
    mod = layer_module(cfg.attention)
    x = model.embed[token]  # [B, d]
    for blk, cache in zip(model.blocks, caches):
        y, _ = mod.layer_step(blk.attn, rms_norm(x, blk.norm_attn, cfg.norm_eps), cache, positions)
        x = x + y
        x = x + _mlp(blk, x, cfg.norm_eps)
    return rms_norm(x, model.norm_final, cfg.norm_eps) @ model.lm_head, caches


def generate(model: TinyLM, prompt: torch.Tensor, n_new: int, t_max: int | None = None):
    """Greedy generation with caches.  Returns (tokens [B, T0 + n_new], step logits [B, n_new, V])."""
    B, T0 = prompt.shape
    if T0 < 1:
        raise ValueError("prompt must hold at least one token")
    t_max = T0 + n_new if t_max is None else t_max
    if t_max < T0 + n_new:
        raise ValueError(f"t_max ({t_max}) must be >= prompt + new tokens ({T0 + n_new})")
    logits, caches = lm_prefill(model, prompt, t_max)
    tokens = [prompt]
    nxt = logits[:, -1].argmax(-1)
    step_logits = []
    for i in range(n_new):
        tokens.append(nxt[:, None])
        pos = torch.full((B,), T0 + i, dtype=torch.int32, device=prompt.device)
        lg, caches = lm_step(model, nxt, caches, pos)
        step_logits.append(lg)
        nxt = lg.argmax(-1)
    return torch.cat(tokens, dim=1), torch.stack(step_logits, dim=1) if step_logits else logits[:, :0]
