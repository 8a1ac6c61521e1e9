"""The `kernel-extend` level: the extend contract of DESIGN §4 — several new tokens per
sequence (chunked prefill, speculative verification), ragged and causal.

`extend_attention(q [N, H, d_h], cu_seqlens_q, <cache>, basis_k, basis_v, lengths, *, scale,
key_scale, rope, page_table)`: sequence b's last `case.extend.n_new[b]` tokens as ragged queries
(each the model's own query at its position), over a contiguous cache, or a paged one (as the
kernel-paged level draws it) when page_size > 0. Oracle paths: `lrkv.reference.extend`'s
factored and materialized extends.
"""

from __future__ import annotations

import bisect
import itertools
from dataclasses import dataclass, replace

import torch

from ...reference import extend as ref_extend
from ...reference.extend import query_positions
from ...reference.cache import FactoredCache
from ...reference.cache_layouts import DEFAULT as DEFAULT_LAYOUT
from ...reference.cache_layouts.pool_views import DENSE
from ...reference.fp8 import PARTS
from ...reference.rope import ExactRope
from ..bounds import kernel_conditioning
from ..case import Case
from . import Level
from .contract import call_out_lse, oracle_path, out_lse_outputs
from .inputs import ContractInputs
from .fp8_inputs import dequantized
from .kernel import draw_kernel_inputs, quantized
from .paged import paged_cache

@dataclass
class ExtendInputs(ContractInputs):
    """The arguments of the extend contract (DESIGN §4); the cache contiguous, or paged (its
    page table a keyword); its lengths include the new tokens."""

    q: torch.Tensor  # [N, H, d_h]
    cu_seqlens_q: torch.Tensor  # [B+1] int32
    cache: FactoredCache
    basis_k: torch.Tensor  # [H, d_h, r]
    basis_v: torch.Tensor
    scale: float
    rope: ExactRope | None = None
    cache_layout: str = DEFAULT_LAYOUT  # the layout the backend is handed (lrkv.reference.cache_layouts)
    pool_view: str = DENSE  # its parts as views of a larger allocation (cache_layouts.pool_views)
    ARGS = ("q", "cu_seqlens_q", *PARTS, "basis_k", "basis_v", "lengths")
    LAYOUT_ARGS = "EXTEND"
    PAGE_TABLE_KW = True


def make_extend_inputs(case: Case, quantize: bool = True) -> ExtendInputs:
    """quantize=False: an fp8 case's cache at τ, before quantization (its quantization cost's reference)."""
    if case.level != "kernel-extend":
        raise ValueError(f"make_extend_inputs needs a kernel-extend case, got level {case.level!r}")
    inp, e = draw_kernel_inputs(case)
    # each new token's query is the model's query at its own position (rotated, normed)
    rows = [(b, p) for b, (n, L) in enumerate(zip(case.extend.n_new, case.lengths)) for p in range(L - n, L)]
    H, d_h = case.spec.n_heads, case.spec.head_dim
    q = torch.stack([e["q"][b, p] for b, p in rows]) if rows else torch.zeros(0, H, d_h, dtype=torch.float64)
    cu = torch.tensor([0, *torch.tensor(case.extend.n_new).cumsum(0).tolist()], dtype=torch.int32)
    if case.cache_fp8 and quantize:  # quantized as a contiguous cache (then paged with its per-token scales)
        inp = quantized(case, inp.to(case.torch_dtype))
    cache = paged_cache(case, inp.cache) if case.pages and case.pages.size else inp.cache
    return ExtendInputs(q=q, cu_seqlens_q=cu, cache=cache, basis_k=inp.basis_k, basis_v=inp.basis_v,
                        scale=inp.scale, rope=inp.rope,
                        pool_view=case.pages.view if case.pages else DENSE).to(case.torch_dtype)


def _conditioning(inp: ExtendInputs, case: Case):
    """Each query is a decode over its sequence's first p + 1 slots: condition that decode."""
    c = dequantized(inp.cache).gather()
    seq, pos = query_positions(inp.cu_seqlens_q, c.lengths)
    per_query = replace(c, lengths=pos + 1, **{n: t[seq] for n, t in c.tensors().items()})  # [N, T, ...]
    return kernel_conditioning(inp.q, per_query, inp.basis_k, inp.basis_v, scale=inp.scale)


def _position(case: Case, output: str, index: tuple[int, ...]) -> dict[str, int]:
    """Row `token` of out/lse is a new token: name its sequence and its index among that
    sequence's new tokens (0-based), then the head (and channel)."""
    token, *rest = index
    ends = list(itertools.accumulate(case.extend.n_new))
    seq = bisect.bisect_right(ends, token)  # sequences with no new token own no row
    return {"token": token, "sequence": seq, "new_token": token - (ends[seq] - case.extend.n_new[seq]),
            "new_tokens": case.extend.n_new[seq], **dict(zip(("head", "channel"), rest))}


LEVEL = Level(
    name="kernel-extend", needs="kernel-extend", make_inputs=make_extend_inputs,
    paths=lambda case: {"factored": oracle_path(ref_extend, "extend_attention"),
                        "materialized": oracle_path(ref_extend, "materialized_extend_attention")},
    consistency=lambda case: [("factored", "materialized")], call=call_out_lse("extend_attention"),
    outputs=lambda case: out_lse_outputs(sum(case.extend.n_new), case), conditioning=_conditioning,
    unquantized=lambda case: make_extend_inputs(case, quantize=False), position=_position,
)
