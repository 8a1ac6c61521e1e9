"""The traced decode step: the export-friendly math, its nn.Modules, and torch.export of them.

Everything in the first three sections is traced by `torch.export` into one graph that
ONNX, AOTInductor and TensorRT all compile, so it obeys four rules:

* no data-dependent Python (`if lengths.max() > T`, `.item()`, `.tolist()`): those checks
  live in `lrkv.compiled.config`, which runs *before* the engine;
* masks are built with tensor ops (`arange(T) < lengths`, `lrkv.reference.masking`),
  never by slicing to a length;
* garbage past `lengths[b]` (NaN in the tests) is removed with `torch.where`, never by
  multiplying with a 0/1 mask — `NaN · 0` is NaN;
* non-trivial constants (the softmax scale, norm eps, RoPE frequencies) arrive as tensors
  (module buffers), never as Python floats: torch.onnx stores Python scalars through
  float32 (1/sqrt(8) becomes 0.35355338 in a float64 graph), which a float64 engine must not
  inherit. 0, 1 and −inf are exact in float32 and stay literals.

The last section exports the module with one shared, bounded dynamic cache length: every
cache tensor's dim 1 is the same `Dim("T_max", min=t_min, max=t_max)` and every batch dim
the same `Dim("B", min=1, max=b_max)`, so the exporter proves the shapes consistent once
and the engines accept any (B, T) inside the box. The example inputs use B = 2 and T >= 2
because torch.export specialises dims whose example is 0 or 1.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch.export import Dim

from ..reference.lrkv import factored_logits
from ..reference.masking import NEG_INF, valid_mask, zero_garbage
from ..reference.norms import joint_key_scale, rms_norm
from ..reference.rope import apply_rope, rope_freqs
from ..reference.weights import LRKVWeights, init_lrkv_weights
from .config import NATIVE_OPSET, ExportConfig, input_sigs, weight_sigs


# ----------------------------------------------------------------------------- decode math (Eqs. 6–7)
def factored_decode(
    q: torch.Tensor,  # [B, H, d_h]
    shared_k: torch.Tensor,  # [B, T, d_h]
    shared_v: torch.Tensor,  # [B, T, d_h]
    latent_k: torch.Tensor,  # [B, T, H, r]
    latent_v: torch.Tensor,  # [B, T, H, r]
    basis_k: torch.Tensor,  # [H, d_h, r]
    basis_v: torch.Tensor,  # [H, d_h, r]
    lengths: torch.Tensor,  # [B] int
    key_scale: torch.Tensor | None,  # [B, T, H] or None
    *,
    scale: torch.Tensor,  # 0-d, q's dtype: 1/sqrt(d_h)
    rope_freqs: torch.Tensor | None,  # [d_h/2] float64 for rope='exact'; None: no decode-time RoPE
) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernel-level contract (paper Eqs. 6–7) without validation. Returns out [B, H, d_h], lse [B, H].

    The softmax subtracts an explicit max instead of calling `logsumexp`: exporters lower
    logsumexp of an all −inf row to `max + log(sum(exp(x − max)))` with `max = −inf`, which
    is NaN; an empty sequence must give out 0 and lse −inf (DESIGN §4), so the max is
    clamped to 0 for empty rows first.
    """
    # The softmax and Eq. 7 are a second copy of reference.lrkv.decode_attention's: masking.softmax_rows'
    # logsumexp exports as NaN on empty rows. Eq. 6 is the reference's own function, its RoPE frequencies a buffer.
    T = shared_k.shape[1]
    valid = valid_mask(lengths, T)  # [B, T]
    logits = factored_logits(q, shared_k, latent_k, basis_k, key_scale=key_scale, freqs=rope_freqs)  # Eq. 6
    logits = torch.where(valid[:, None, :], logits * scale, NEG_INF)  # [B, H, T]
    m = logits.amax(dim=-1, keepdim=True)  # [B, H, 1]; −inf for an empty sequence
    m = torch.where(m > NEG_INF, m, 0.0)
    p = torch.exp(logits - m)  # exactly 0 at masked slots
    s = p.sum(dim=-1, keepdim=True)  # [B, H, 1]; 0 for an empty sequence
    lse = (m + torch.log(s)).squeeze(-1)  # log 0 = −inf: the contract's empty-row lse
    a = p / torch.where(s > 0, s, 1.0)
    # Eq. 7: a_h S_V + (a_h R_h^V) B_h^{V T}; garbage zeroed by where before contracting.
    sv = zero_garbage(shared_v, valid)  # [B, T, d_h]
    lv = zero_garbage(latent_v, valid)  # [B, T, H, r]
    out = torch.einsum("bht,btd->bhd", a, sv)
    out = out + torch.einsum("bhr,hdr->bhd", torch.einsum("bht,bthr->bhr", a, lv), basis_v)
    return out, lse


def functional_append(cache: torch.Tensor, entry: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """A copy of cache [B, T, ...] with entry [B, ...] written at slot positions[b].

    A one-hot `where` rather than `index_put`: it lowers to plain Equal/Where in every
    exporter (ONNX, TensorRT's parser, inductor) and cannot write out of bounds — a
    position outside [0, T) writes nothing (the Python wrapper rejects it before that).
    The decode reads the whole cache anyway, so the O(T) select costs no extra pass.
    """
    B, T = cache.shape[:2]
    hit = torch.arange(T, device=cache.device)[None, :] == positions[:, None].to(torch.int64)  # [B, T]
    hit = hit.reshape(B, T, *([1] * (cache.dim() - 2)))
    return torch.where(hit, entry[:, None].to(cache.dtype), cache)


# ----------------------------------------------------------------------------- the new token's projections
def project_token(
    weights: LRKVWeights, x: torch.Tensor, positions: torch.Tensor, *,
    eps: torch.Tensor,  # 0-d, x's dtype: spec.norm_eps
    head_freqs: torch.Tensor | None,  # [d_h/2] float64 when spec.rope != "none"
    native_rms_norm: bool = False,
) -> dict[str, torch.Tensor]:
    """x [B, d], positions [B] -> shared_k/v [B, d_h], latent_k/v [B, H, r], key_scale [B, H]
    (qk_norm), q [B, H, d_h] (rotated, normed, key gain folded in).

    The same math as `lrkv.reference.lrkv.project_token` (and verified against it), except
    that eps and the head RoPE frequencies come in as tensors (see the module docstring),
    and that with `native_rms_norm=True` (ONNX opset >= 23) the query's QK-RMSNorm is
    `torch.nn.functional.rms_norm`, which torch.onnx lowers to the native `RMSNormalization`
    op. Its epsilon is a float32 *attribute* in ONNX, so a float64 engine then normalises
    with eps rounded to float32 (a relative change of ~1e-15 in the output) — the default
    opset-18 path keeps eps exact. The key side has no native equivalent: the factored
    decode needs the *joint* inverse RMS of s + z B^T (DESIGN §5), cached as key_scale.
    """
    # Second copy of reference.lrkv.project_token, taking eps and the RoPE frequencies as tensors (module docstring).
    spec = weights.spec
    s_k = x @ weights.w_shared_k  # [B, d_h]   x W_shared^K
    s_v = x @ weights.w_shared_v
    z_k = torch.einsum("bd,hdr->bhr", x, weights.u_k)  # [B, H, r]   x U_h^K
    z_v = torch.einsum("bd,hdr->bhr", x, weights.u_v)
    q = torch.einsum("bd,dhe->bhe", x, weights.w_q)  # [B, H, d_h]
    out = {"shared_v": s_v, "latent_v": z_v}
    if spec.qk_norm:
        # Joint scale of the FULL key from ||s||², s·(zB^T), z(B^TB)z^T, before RoPE as in the
        # reference (rotation preserves the norm). eps is a tensor: see the module docstring.
        out["key_scale"] = joint_key_scale(s_k, z_k, weights.basis_k, eps)
        if native_rms_norm:
            q = F.rms_norm(q, (spec.head_dim,), eps=spec.norm_eps) * weights.q_gain
        else:
            q = rms_norm(q, weights.q_gain, eps)
    if spec.rope != "none":
        q = apply_rope(q, positions[:, None], head_freqs)
        s_k = apply_rope(s_k, positions, head_freqs)  # shared keys are cached rotated
        if spec.rope in ("latent", "aligned"):
            z_k = apply_rope(z_k, positions[:, None], weights.latent_freqs)
    if spec.qk_norm:
        q = q * weights.k_gain  # the key gain commutes with RoPE (tied per plane): fold into q
    out.update(shared_k=s_k, latent_k=z_k, q=q)
    return out


# ----------------------------------------------------------------------------- the modules torch.export traces
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
    """The kernel-level contract (DESIGN §4) with the spec's choices baked in (softmax scale,
    exact RoPE theta, whether key_scale exists).

    forward(q, <the cache's four parts>, basis_k, basis_v, lengths[, key_scale])
    -> (out [B, H, d_h], lse [B, H]), inputs in the order of `signature.input_sigs`."""

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
    """One layer-level decode step: project the new token, append it to the cache
    *functionally* (a new cache tensor is returned; an exported graph cannot mutate its
    inputs portably), the factored decode, the output projection.

    forward(x_t [B, d], positions [B], *cache[, *weights]) -> (y [B, d], *new cache), inputs
    in the order of `signature.input_sigs`. With weights="embedded" the weights are buffers
    (graph constants) and not arguments. Every new cache tensor equals the old one except at
    slot positions[b].
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


# ----------------------------------------------------------------------------- torch.export
def dims(config: ExportConfig) -> dict[str, Dim]:
    return {"B": Dim("B", min=1, max=config.b_max), "T": Dim("T_max", min=config.t_min, max=config.t_max)}


def dynamic_shapes(config: ExportConfig) -> tuple:
    """torch.export's dynamic_shapes for the module's `*args` forward."""
    d = dims(config)
    per_arg = tuple({i: d[s] for i, s in enumerate(sig.shape) if isinstance(s, str)} or None
                    for sig in input_sigs(config))
    return (per_arg,)


def example_inputs(config: ExportConfig, *, B: int | None = None, T: int | None = None, seed: int = 0,
                   weights: LRKVWeights | None = None) -> tuple[torch.Tensor, ...]:
    """Finite inputs of the right shapes (values matter only for a smoke run)."""
    B = config.example_b if B is None else B
    T = config.example_t if T is None else T
    g = torch.Generator().manual_seed(seed)
    w = weights if weights is not None else init_lrkv_weights(config.spec, seed)
    out = []
    for sig in input_sigs(config):
        shape = sig.concrete(B, T)
        if sig.name in ("lengths", "positions"):
            lo, hi = (1, T + 1) if sig.name == "lengths" else (0, T)  # lengths in [1, T], positions in [0, T)
            out.append(torch.randint(lo, hi, shape, generator=g).to(torch.int32))
        elif sig.name in ("key_scale",):
            out.append((torch.rand(shape, generator=g, dtype=torch.float64) + 0.5).to(config.torch_dtype))
        elif config.level == "layer" and hasattr(w, sig.name) and sig.name not in ("shared_k", "shared_v",
                                                                                   "latent_k", "latent_v"):
            t = getattr(w, sig.name)
            out.append(t if sig.dtype == "float64" else t.to(config.torch_dtype))
        else:
            out.append(torch.randn(shape, generator=g, dtype=torch.float64).to(sig.torch_dtype(config.torch_dtype)))
    return tuple(out)


def export_program(config: ExportConfig, weights: LRKVWeights | None = None,
                   device: str | torch.device = "cpu") -> torch.export.ExportedProgram:
    """The decode step as an ExportedProgram with dynamic B and T_max, on `device`."""
    module = build_module(config, weights).to(device)
    args = tuple(t.to(device) for t in example_inputs(config, weights=weights))
    with torch.no_grad():
        return torch.export.export(module, args, dynamic_shapes=dynamic_shapes(config), strict=False)
