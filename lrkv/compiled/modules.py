"""nn.Module wrappers of the decode step that `torch.export` can trace.

`KernelDecode` is the kernel-level contract (DESIGN §4) with the spec's choices baked in
(softmax scale, exact RoPE theta, whether key_scale exists). `LayerStep` is one layer-level
decode step — project the new token (`lrkv.compiled.project`), append it to the
cache *functionally* (a new cache tensor is returned; an exported graph cannot mutate its
inputs portably), the factored decode, the output projection.

Both take their inputs positionally in the order of `lrkv.compiled.signature.input_sigs`,
so one flat tuple drives torch.export, ONNX, AOTInductor and TensorRT alike.
"""

from __future__ import annotations

import torch

from ..reference.rope import rope_freqs
from ..reference.weights import LRKVWeights
from .config import NATIVE_OPSET, ExportConfig
from .core import factored_decode, functional_append
from .project import project_token
from .signature import input_sigs, weight_sigs


class _Constants(torch.nn.Module):
    """Buffers for every non-trivial constant, so exporters store them at full precision
    (torch.onnx rounds Python float scalars through float32)."""

    def __init__(self, config: ExportConfig):
        super().__init__()
        self.config = config
        spec, dt = config.spec, config.torch_dtype
        self.register_buffer("scale", torch.tensor(config.softmax_scale, dtype=dt))
        self.register_buffer("eps", torch.tensor(spec.norm_eps, dtype=dt))
        # Head RoPE frequencies stay float64: angles are formed in float64 and cast once.
        freqs = rope_freqs(spec.head_dim, spec.rope_theta) if spec.rope != "none" else torch.zeros(0)
        self.register_buffer("head_freqs", freqs.to(torch.float64))

    def decode_freqs(self) -> torch.Tensor | None:
        """Only rope='exact' changes decode math; latent/aligned rotate once, at append (DESIGN §5)."""
        return self.head_freqs if self.config.spec.rope == "exact" else None


class KernelDecode(_Constants):
    """forward(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths[, key_scale])
    -> (out [B, H, d_h], lse [B, H])."""

    def __init__(self, config: ExportConfig):
        super().__init__(config)
        assert config.level == "kernel"
        self.names = [s.name for s in input_sigs(config)]

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        a = dict(zip(self.names, args))
        return factored_decode(
            a["q"], a["shared_k"], a["shared_v"], a["latent_k"], a["latent_v"], a["basis_k"], a["basis_v"],
            a["lengths"], a.get("key_scale"), scale=self.scale, rope_freqs=self.decode_freqs(),
        )


class LayerStep(_Constants):
    """forward(x_t [B, d], positions [B], *cache[, *weights]) -> (y [B, d], *new cache).

    With weights="embedded" the weights are buffers (graph constants) and not arguments.
    Every new cache tensor equals the old one except at slot positions[b].
    """

    def __init__(self, config: ExportConfig, weights: LRKVWeights | None = None):
        super().__init__(config)
        assert config.level == "layer"
        self.names = [s.name for s in input_sigs(config)]
        self.cache_names = ["shared_k", "shared_v", "latent_k", "latent_v"] + (
            ["key_scale"] if config.spec.qk_norm else [])
        self.weight_names = [s.name for s in weight_sigs(config)]
        if config.weights == "embedded":
            if weights is None:
                raise ValueError("weights='embedded' needs the LRKVWeights to embed")
            for name in self.weight_names:
                t = getattr(weights, name)
                # latent_freqs are angles and stay float64 (as in LRKVWeights.to).
                self.register_buffer(name, t if name == "latent_freqs" else t.to(config.torch_dtype))

    def _weights(self, a: dict[str, torch.Tensor]) -> LRKVWeights:
        src = a if self.config.weights == "inputs" else {n: getattr(self, n) for n in self.weight_names}
        fields = {n: src.get(n) for n in ("w_q", "w_shared_k", "w_shared_v", "u_k", "u_v", "basis_k", "basis_v",
                                          "w_o", "q_gain", "k_gain", "latent_freqs")}
        return LRKVWeights(self.config.spec, **fields)

    def forward(self, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        a = dict(zip(self.names, args))
        w = self._weights(a)
        positions = a["positions"]
        entries = project_token(w, a["x_t"], positions, eps=self.eps, head_freqs=self.head_freqs,
                                native_rms_norm=self.config.opset >= NATIVE_OPSET)
        cache = {n: functional_append(a[n], entries[n], positions) for n in self.cache_names}
        lengths = positions + 1  # the appended token is visible to its own query
        out, _ = factored_decode(
            entries["q"], cache["shared_k"], cache["shared_v"], cache["latent_k"], cache["latent_v"],
            w.basis_k, w.basis_v, lengths, cache.get("key_scale"),
            scale=self.scale, rope_freqs=self.decode_freqs(),
        )
        y = torch.einsum("bhd,hde->be", out, w.w_o)  # [B, d]
        return (y, *[cache[n] for n in self.cache_names])


def build_module(config: ExportConfig, weights: LRKVWeights | None = None) -> torch.nn.Module:
    return (KernelDecode(config) if config.level == "kernel" else LayerStep(config, weights)).eval()
