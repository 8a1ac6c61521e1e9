"""The paged-decode and extend levels of the harness (DESIGN §4): inputs and plug-ins.

  kernel-paged   `paged_decode_attention(q, <cache pages>, basis_k, basis_v, lengths, page_table,
                 *, scale, key_scale, rope)` — the kernel case's contiguous cache scattered into
                 pages of `case.page_size` slots: physical pages shuffled (page_shuffle), two
                 spare pages nobody owns, sequence 1 reading sequence 0's pages for their common
                 prefix (shared_prefix); every slot no sequence reads is garbage (NaN by default).
  kernel-extend  `extend_attention(q [N, H, d_h], cu_seqlens_q, <cache>, basis_k, basis_v, lengths,
                 *, scale, key_scale, rope, page_table)` — sequence b's last `case.n_new[b]`
                 tokens as ragged queries (each the model's own query at its position), over a
                 contiguous cache, or a paged one (as above) when page_size > 0.

Both are judged like the kernel level: the float64 factored and materialized oracles
(`lrkv.reference.paged`, `lrkv.reference.extend`) must agree first; err_base is each at τ
against its own float64 run.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..reference import extend as ref_extend
from ..reference import paged as ref_paged
from ..reference.extend import query_positions
from ..reference.lrkv import accumulation_dtype
from ..reference.rope import ExactRope
from .bounds import kernel_conditioning
from .cases import FINITE_GARBAGE, Case, ContractInputs, KernelInputs, _generator, draw_kernel_inputs
from .levels import Level, _pair, register_level

SPARE_PAGES = 2  # pages no sequence owns: garbage a wrong page index can land on
CACHE = ("shared_k", "shared_v", "latent_k", "latent_v", "key_scale")


@dataclass
class PagedInputs(ContractInputs):
    """The arguments of the paged decode contract (DESIGN §4)."""

    q: torch.Tensor  # [B, H, d_h]
    shared_k: torch.Tensor  # [P, page, d_h]
    shared_v: torch.Tensor  # [P, page, d_h]
    latent_k: torch.Tensor  # [P, page, H, r]
    latent_v: torch.Tensor  # [P, page, H, r]
    basis_k: torch.Tensor  # [H, d_h, r]
    basis_v: torch.Tensor  # [H, d_h, r]
    lengths: torch.Tensor  # [B] int32
    page_table: torch.Tensor  # [B, max_pages] int32
    scale: float
    key_scale: torch.Tensor | None = None  # [P, page, H]
    rope: ExactRope | None = None

    def args(self) -> tuple:
        return (self.q, self.shared_k, self.shared_v, self.latent_k, self.latent_v, self.basis_k, self.basis_v,
                self.lengths, self.page_table)

    def kwargs(self) -> dict:
        return {"scale": self.scale, "key_scale": self.key_scale, "rope": self.rope}


    def contiguous(self) -> KernelInputs:
        """The decode-contract view: the pages gathered back into [B, max_pages·page, ...]."""
        sk, sv, lk, lv, ks = ref_paged.gather_cache(self.page_table, self.lengths, self.shared_k, self.shared_v,
                                                     self.latent_k, self.latent_v, self.key_scale)
        return KernelInputs(self.q, sk, sv, lk, lv, self.basis_k, self.basis_v, self.lengths, self.scale, ks,
                            self.rope)


@dataclass
class ExtendInputs(ContractInputs):
    """The arguments of the extend contract (DESIGN §4); page_table None: contiguous cache."""

    q: torch.Tensor  # [N, H, d_h]
    cu_seqlens_q: torch.Tensor  # [B+1] int32
    shared_k: torch.Tensor  # [B, T_max, d_h] or pages [P, page, d_h]
    shared_v: torch.Tensor
    latent_k: torch.Tensor  # [B, T_max, H, r] or pages [P, page, H, r]
    latent_v: torch.Tensor
    basis_k: torch.Tensor  # [H, d_h, r]
    basis_v: torch.Tensor
    lengths: torch.Tensor  # [B] int32, the new tokens included
    scale: float
    key_scale: torch.Tensor | None = None
    rope: ExactRope | None = None
    page_table: torch.Tensor | None = None  # [B, max_pages] int32

    def args(self) -> tuple:
        return (self.q, self.cu_seqlens_q, self.shared_k, self.shared_v, self.latent_k, self.latent_v,
                self.basis_k, self.basis_v, self.lengths)

    def kwargs(self) -> dict:
        return {"scale": self.scale, "key_scale": self.key_scale, "rope": self.rope, "page_table": self.page_table}



# ----------------------------------------------------------------------------- drawing
def paginate(case: Case, cache: dict[str, torch.Tensor]) -> tuple[dict[str, torch.Tensor], torch.Tensor]:
    """Scatter contiguous cache tensors [B, T_max, ...] into pages [P, page_size, ...].

    Sequence b's logical page i is physical page page_table[b, i]: a random permutation
    (page_shuffle) of B·cdiv(T_max, page) + SPARE_PAGES pages, in sequence-major order
    otherwise. With shared_prefix, sequence 1's first pages ARE sequence 0's (equal content:
    the same tokens were drawn), and its own copies become unused. Pages nobody reads, and
    slots past each length, hold garbage (NaN, or large finite values).
    """
    page = case.page_size
    B, T = case.batch, case.t_max
    max_pages = -(-T // page)
    n_pages = B * max_pages + SPARE_PAGES
    order = (torch.randperm(n_pages, generator=_generator(case, 40)) if case.page_shuffle
             else torch.arange(n_pages))
    table = order[: B * max_pages].reshape(B, max_pages).to(torch.int32)
    if case.shared_prefix:
        table[1, : case.shared_prefix // page] = table[0, : case.shared_prefix // page]
    pages = {}
    for i, (name, t) in enumerate(cache.items()):
        if t is None:
            continue
        tail = t.shape[2:]
        if case.nan_garbage:
            pool = torch.full((n_pages, page, *tail), float("nan"), dtype=t.dtype)
        else:
            pool = FINITE_GARBAGE * torch.randn((n_pages, page, *tail), generator=_generator(case, 41 + i),
                                                dtype=t.dtype)
        padded = torch.cat([t, pool[:1, :1].expand(B, max_pages * page - T, *tail)], dim=1)  # garbage to whole pages
        blocks = padded.reshape(B, max_pages, page, *tail)
        for b in reversed(range(B)):  # sequence 0 writes its (shared) pages last
            pool[table[b].long()] = blocks[b]
        pages[name] = pool
    return pages, table


def make_paged_inputs(case: Case) -> PagedInputs:
    if case.level != "kernel-paged":
        raise ValueError(f"make_paged_inputs needs a kernel-paged case, got level {case.level!r}")
    inp, _ = draw_kernel_inputs(case)
    pages, table = paginate(case, {n: getattr(inp, n) for n in CACHE})
    return PagedInputs(q=inp.q, basis_k=inp.basis_k, basis_v=inp.basis_v, lengths=inp.lengths, page_table=table,
                       scale=inp.scale, rope=inp.rope, key_scale=pages.get("key_scale"),
                       **{n: pages[n] for n in CACHE[:4]}).to(case.torch_dtype)


def make_extend_inputs(case: Case) -> ExtendInputs:
    if case.level != "kernel-extend":
        raise ValueError(f"make_extend_inputs needs a kernel-extend case, got level {case.level!r}")
    inp, e = draw_kernel_inputs(case)
    # each new token's query is the model's query at its own position (rotated, normed)
    rows = [(b, p) for b, (n, L) in enumerate(zip(case.n_new, case.lengths)) for p in range(L - n, L)]
    H, d_h = case.spec.n_heads, case.spec.head_dim
    q = torch.stack([e["q"][b, p] for b, p in rows]) if rows else torch.zeros(0, H, d_h, dtype=torch.float64)
    cu = torch.tensor([0, *torch.tensor(case.n_new).cumsum(0).tolist()], dtype=torch.int32)
    cache = {n: getattr(inp, n) for n in CACHE}
    table = None
    if case.page_size:
        cache, table = paginate(case, cache)
    return ExtendInputs(q=q, cu_seqlens_q=cu, basis_k=inp.basis_k, basis_v=inp.basis_v, lengths=inp.lengths,
                        scale=inp.scale, rope=inp.rope, key_scale=cache.get("key_scale"), page_table=table,
                        **{n: cache[n] for n in CACHE[:4]}).to(case.torch_dtype)


# ----------------------------------------------------------------------------- levels
def _out_lse(fn_name: str, module):
    def path(inp):
        out, lse = inp.call(getattr(module, fn_name))  # looked up at call time (tests plant bugs)
        return {"out": out, "lse": lse}
    return path


def _outputs(rows_of):
    def outputs(case: Case) -> dict:
        n, H, d_h = rows_of(case), case.spec.n_heads, case.spec.head_dim
        return {"out": ((n, H, d_h), case.torch_dtype), "lse": ((n, H), accumulation_dtype(case.torch_dtype))}
    return outputs


def _paged_call(backend, inp: PagedInputs, case: Case) -> dict:
    out, lse = _pair(inp.call(backend.paged_decode_attention), "paged_decode_attention")
    return {"out": out, "lse": lse}


def _extend_call(backend, inp: ExtendInputs, case: Case) -> dict:
    out, lse = _pair(inp.call(backend.extend_attention), "extend_attention")
    return {"out": out, "lse": lse}


def _extend_conditioning(inp: ExtendInputs, case: Case):
    """Each query is a decode over its sequence's first p + 1 slots: condition that decode."""
    cache = [inp.shared_k, inp.shared_v, inp.latent_k, inp.latent_v, inp.key_scale]
    if inp.page_table is not None:
        cache = ref_paged.gather_cache(inp.page_table, inp.lengths, *cache)
    seq, pos = query_positions(inp.cu_seqlens_q, inp.lengths)
    sk, sv, lk, lv, ks = (None if t is None else t[seq] for t in cache)
    return kernel_conditioning(inp.q, sk, sv, lk, lv, inp.basis_k, inp.basis_v, pos + 1, scale=inp.scale,
                               key_scale=ks, rope=inp.rope)


register_level(Level(
    name="kernel-paged", needs="kernel-paged", make_inputs=make_paged_inputs,
    paths=lambda case: {"factored": _out_lse("paged_decode_attention", ref_paged),
                        "materialized": _out_lse("materialized_paged_decode_attention", ref_paged)},
    consistency=lambda case: [("factored", "materialized")], call=_paged_call,
    outputs=_outputs(lambda case: case.batch),
    conditioning=lambda inp, case: kernel_conditioning(*inp.contiguous().args(), **inp.contiguous().kwargs()),
))

register_level(Level(
    name="kernel-extend", needs="kernel-extend", make_inputs=make_extend_inputs,
    paths=lambda case: {"factored": _out_lse("extend_attention", ref_extend),
                        "materialized": _out_lse("materialized_extend_attention", ref_extend)},
    consistency=lambda case: [("factored", "materialized")], call=_extend_call,
    outputs=_outputs(lambda case: sum(case.n_new)),
    conditioning=_extend_conditioning,
))
