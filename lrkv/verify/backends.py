"""Built-in backends (DESIGN §4): reference, materialized, eager, inductor.

Each implements the kernel level (`decode_attention`, the contract of
`lrkv.reference.contract`) and the layer level (`layer_step`); reference, materialized and
eager also the paged-decode and extend levels (`lrkv.reference.paged`, `.extend`). The layer level reuses the
reference `layer_step` with the backend's decode plugged in, except inductor, which
compiles the whole step.
"""

from __future__ import annotations

import torch

from ..reference.contract import validate_decode_inputs
from ..reference import extend as ref_extend
from ..reference import paged as ref_paged
from ..reference.lrkv import decode_attention, layer_step, materialized_decode_attention
from .backend import BaseBackend
from .inductor import compiled_decode, compiled_layer_step

F64 = (torch.float64,)
LOW = (torch.float32, torch.bfloat16, torch.float16)


class ReferenceBackend(BaseBackend):
    """float64 factored decode, paper Eqs. 6–7: the oracle itself."""

    name = "reference"
    role = "baseline"  # the oracle itself: passes by construction
    levels = frozenset({"kernel", "kernel-paged", "kernel-extend", "layer"})
    paged_fn, extend_fn = "paged_decode_attention", "extend_attention"  # names in lrkv.reference.*
    dtypes = F64
    description = "float64 factored decode (Eqs. 6-7), the oracle"

    def decode_attention(self, q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, *,
                         scale, key_scale=None, rope=None):
        return decode_attention(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
                                scale=scale, key_scale=key_scale, rope=rope)

    def paged_decode_attention(self, q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
                               page_table, *, scale, key_scale=None, rope=None):
        return getattr(ref_paged, self.paged_fn)(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v,
                                                 lengths, page_table, scale=scale, key_scale=key_scale, rope=rope)

    def extend_attention(self, q, cu_seqlens_q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v,
                         lengths, *, scale, key_scale=None, rope=None, page_table=None):
        return getattr(ref_extend, self.extend_fn)(q, cu_seqlens_q, shared_k, shared_v, latent_k, latent_v,
                                                   basis_k, basis_v, lengths, scale=scale, key_scale=key_scale,
                                                   rope=rope, page_table=page_table)

    def layer_step(self, weights, x_t, cache, positions):
        return layer_step(weights, x_t, cache, positions, decode=self.decode_attention)


class MaterializedBackend(ReferenceBackend):
    """float64 with K_h = S_K + R_h B_h^T and V_h rebuilt explicitly (a different operation order)."""

    name = "materialized"
    description = "float64 decode over explicit K_h, V_h"
    paged_fn, extend_fn = "materialized_paged_decode_attention", "materialized_extend_attention"

    def decode_attention(self, q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, *,
                         scale, key_scale=None, rope=None):
        return materialized_decode_attention(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v,
                                             lengths, scale=scale, key_scale=key_scale, rope=rope)


class EagerBackend(ReferenceBackend):
    """The reference math run in PyTorch eager at the input dtype (no upcast)."""

    name = "eager"
    dtypes = LOW
    description = "reference factored math in eager PyTorch at float32/bfloat16/float16"


class InductorBackend(BaseBackend):
    """torch.compile (inductor, CPU) of the kernel- and layer-level decode; T dynamic."""

    name = "inductor"
    levels = frozenset({"kernel", "layer"})
    dtypes = (torch.float64, torch.float32)
    description = "torch.compile(inductor) of the factored decode and the layer step, CPU"

    def available(self) -> tuple[bool, str]:
        try:
            import torch._dynamo
            from torch._inductor.cpp_builder import get_cpp_compiler
        except Exception as e:  # noqa: BLE001 — any import failure means "not here"
            return False, f"torch inductor is not importable: {e}"
        if not torch._dynamo.is_dynamo_supported():
            return False, "torch.compile is not supported on this Python/platform"
        try:
            get_cpp_compiler()
        except Exception as e:  # noqa: BLE001
            return False, f"inductor's CPU backend needs a C++ compiler: {e}"
        return True, ""

    def decode_attention(self, q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths, *,
                         scale, key_scale=None, rope=None):
        # Same contract checks as the reference, eagerly: a compiled graph must not see bad input.
        validate_decode_inputs(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
                               scale=scale, key_scale=key_scale, rope=rope)
        return compiled_decode(q, shared_k, shared_v, latent_k, latent_v, basis_k, basis_v, lengths,
                               scale=scale, key_scale=key_scale, rope=rope)

    def layer_step(self, weights, x_t, cache, positions):
        return compiled_layer_step(weights, x_t, cache, positions)
