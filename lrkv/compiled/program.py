"""torch.export of the decode step with a shared, bounded dynamic cache length.

Every cache tensor's dim 1 is the same `Dim("T_max", min=t_min, max=t_max)` and every
batch dim the same `Dim("B", min=1, max=b_max)`: one symbol each, so the exporter proves
the shapes consistent once and the engines accept any (B, T) inside the box. The example
inputs use B = 2 and T >= 2 because torch.export specialises dims whose example is 0 or 1.
"""

from __future__ import annotations

import torch
from torch.export import Dim

from ..reference.weights import LRKVWeights, init_lrkv_weights
from .config import ExportConfig
from .modules import build_module
from .signature import input_sigs


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
