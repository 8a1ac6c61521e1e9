"""Kernel-bug mutants: bugs a real split-K kernel could ship with, which the tolerance rule of
DESIGN §6 must reject (tests/kernels/test_mutants.py; the harness's mutant grid through
tests/kernels/test_harness.py).

    lrkv verify --grid mutants --backend lrkv.mutants.kernel:mutant_scale_rank      (one per mutant)

Two kinds, and the shipped kernels carry the state of neither:

* **patches** — the kernel source (`lrkv/kernels/_kernels.py`) with one small textual change,
  loaded as a module of its own (`lrkv.kernels.runtime.load_patched`, which refuses a patch
  whose text does not occur exactly once): the same kernels compiled with one line changed,
  not a Python-level imitation.
* **wrappers** — a bug that is a second algorithm (it would need outputs or running
  statistics the correct kernel does not have) runs the CORRECT kernels in a wrong way,
  here in Python.

| name                   | kind    | where                  | what goes wrong                                   |
|------------------------|---------|------------------------|---------------------------------------------------|
| no_private_rescale     | patch   | stage 1 online softmax | a_h R_h^V not multiplied by exp(m_old − m_new)     |
| length_off_by_one      | patch   | stage 1 length mask    | slot len−1 dropped (t < len − 1)                  |
| wrong_head_basis       | patch   | the bases' addressing  | head h uses B_{(h+1) mod H} (keys and values)     |
| drop_private_value     | patch   | stage 2                | out_h = a_h S_V, the (a_h R_h^V) B_h^{V T} term lost |
| scale_rank             | patch   | stage 1 logits         | scale 1/sqrt(r) instead of 1/sqrt(d_h)            |
| read_past_length       | patch   | stage 1 length mask    | t <= len: one garbage (NaN) slot read per sequence |
| fp16_accumulation      | patch   | stage 1                | l and both accumulators rounded to fp16 per tile  |
| separate_softmax       | wrapper | both stages            | shared and private logits get a softmax each      |

`read_past_length` stays inside the allocation (the kernel clamps every length to T_max, or
to the page table's capacity), so it corrupts results without corrupting memory; it is
invisible for a sequence that fills its whole cache, which is why the tests leave garbage
after every length.
"""

from __future__ import annotations

import contextlib
import functools
from collections.abc import Callable
from dataclasses import replace
from types import ModuleType

import torch

from ..kernels import runtime
from ..kernels.triton_backend import TritonBackend
from ..reference.cache import FactoredCache

# name -> (text of lrkv/kernels/_kernels.py, its replacement); each text occurs there once
PATCHES: dict[str, tuple[str, str]] = {
    "no_private_rescale": ("acc_p = acc_p * alpha[:, None]", "acc_p = acc_p"),
    "length_off_by_one": ("    split_lo = pid_s * SPLIT_SIZE\n", "    split_lo = pid_s * SPLIT_SIZE\n    length = length - 1\n"),
    "wrong_head_basis": ("return h * (D * R) + d * R + j", "return (h + 1) % H * (D * R) + d * R + j"),
    "drop_private_value": ("out = out_s + out_p", "out = out_s"),
    "scale_rank": ("sm_scale = _to_acc(tl.load(SCALE, mask=pid_s >= 0, other=1.0), ACC_FP64)",
                   "sm_scale = 1.0 / tl.sqrt(R * 1.0)"),
    "read_past_length": ("    split_lo = pid_s * SPLIT_SIZE\n", "    split_lo = pid_s * SPLIT_SIZE\n    length = length + 1\n"),
    "fp16_accumulation": ("        m_i = m_new\n",
                          "        m_i = m_new; l_i = l_i.to(tl.float16).to(l_i.dtype); "
                          "acc_s = acc_s.to(tl.float16).to(acc_s.dtype); acc_p = acc_p.to(tl.float16).to(acc_p.dtype)\n"),
}

# One launch of the correct kernels: a cache in, (out, lse) out; the rest of the call is fixed.
Launch = Callable[[FactoredCache], tuple[torch.Tensor, torch.Tensor]]


def separate_softmax(launch: Launch, cache: FactoredCache) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(shared logits) S_V + softmax(private logits) R^V B^V — the sum Eq. 6 keeps
    whole, split in two. Each half is the correct kernel with the other stream zeroed:

        latent stream 0  ->  logits = q S_K^T (times key_scale, scale)      out = a_s S_V
        shared stream 0  ->  logits = (q B^K) R^{K T} (times the same)     out = a_p R^V B^{V T}

    lse is the shared softmax's (the first running max and sum, as a kernel would keep)."""
    def zeroed(*names: str) -> FactoredCache:
        return replace(cache, **{n: torch.zeros_like(getattr(cache, n)) for n in names})

    out_s, lse = launch(zeroed("latent_k", "latent_v"))
    out_p, _ = launch(zeroed("shared_k", "shared_v"))
    return (out_s.to(lse.dtype) + out_p.to(lse.dtype)).to(out_s.dtype), lse


# name -> the wrapper that runs the correct kernels its wrong way
WRAPPERS: dict[str, Callable[[Launch, FactoredCache], tuple[torch.Tensor, torch.Tensor]]] = {
    "separate_softmax": separate_softmax,
}

KERNEL_MUTANTS: tuple[str, ...] = (*PATCHES, *WRAPPERS)  # every kernel mutant, by name


def check_mutant(name: str) -> str:
    """The mutant's name; TypeError / ValueError for anything else."""
    if not isinstance(name, str):
        raise TypeError(f"a kernel mutant is named by a str, got {type(name).__name__}")
    if name not in KERNEL_MUTANTS:
        raise ValueError(f"unknown kernel mutant {name!r}; known: {', '.join(KERNEL_MUTANTS)}")
    return name


def patched_kernels(name: str, which: str | None = None) -> ModuleType:
    """The kernel module with patch mutant `name` applied, for mode `which` (default: the
    current one): `lrkv.kernels._kernels_WHICH_NAME`."""
    if check_mutant(name) not in PATCHES:
        raise ValueError(f"{name!r} is a wrapper mutant: it runs the correct kernels")
    return runtime.load_patched(name, *PATCHES[name], which=which)


@contextlib.contextmanager
def patched(name: str):
    """Launch the kernels with patch mutant `name` inside the block (the public entry points —
    decode_attention, paged_decode_attention, extend_attention — then run the bug)."""
    with runtime.using(patched_kernels(name)):
        yield


class KernelMutant(TritonBackend):
    """The `triton` backend with one kernel mutant in, named `triton[NAME]`: a patch mutant
    launches its patched kernels, the wrapper mutant runs the correct ones its wrong way."""

    def __init__(self, mutant: str, **kw):
        self.mutant = check_mutant(mutant)
        super().__init__(**kw)
        self.name = f"triton[{mutant}]" + ("-batch-invariant" if self.batch_invariant else "")
        self.description = f"triton kernels with the {mutant} bug (must be rejected)"

    def _attend(self, q, cache: FactoredCache, basis_k, basis_v, **kw):
        run = super()._attend
        if self.mutant in WRAPPERS:
            return WRAPPERS[self.mutant](lambda c: run(q, c, basis_k, basis_v, **kw), cache)
        with patched(self.mutant):
            return run(q, cache, basis_k, basis_v, **kw)


# `lrkv verify --grid mutants --backend lrkv.mutants.kernel:mutant_scale_rank` etc.:
# zero-argument factories, one per kernel mutant (a test keeps them in step with KERNEL_MUTANTS).
mutant_no_private_rescale = functools.partial(KernelMutant, "no_private_rescale")
mutant_length_off_by_one = functools.partial(KernelMutant, "length_off_by_one")
mutant_wrong_head_basis = functools.partial(KernelMutant, "wrong_head_basis")
mutant_drop_private_value = functools.partial(KernelMutant, "drop_private_value")
mutant_scale_rank = functools.partial(KernelMutant, "scale_rank")
mutant_read_past_length = functools.partial(KernelMutant, "read_past_length")
mutant_fp16_accumulation = functools.partial(KernelMutant, "fp16_accumulation")
mutant_separate_softmax = functools.partial(KernelMutant, "separate_softmax")
