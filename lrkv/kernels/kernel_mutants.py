"""Kernel-bug mutants: bugs a real split-K kernel could ship with, which the tolerance rule of
DESIGN §6 must reject (tests/kernels/test_mutants.py; the harness's mutant grid through
tests/kernels/test_harness.py).

Two kinds, and the correct kernel carries the state of neither:

* **switches** — a one-token change of the kernels, the `MUTANT` constexpr of
  `lrkv/kernels/_kernels.py` (0, the correct kernel, by default; the `M_*` constants there),
  which compiles out of the correct kernel. A switch mutant is the same kernel compiled
  with one line changed, not a Python-level imitation.
* **wrappers** — a bug that is a second algorithm (it would need outputs or running
  statistics the correct kernel does not have) runs the CORRECT kernel in a wrong way,
  here in Python.

| name                   | kind    | where                  | what goes wrong                                   |
|------------------------|---------|------------------------|---------------------------------------------------|
| no_private_rescale     | switch  | stage 1 online softmax | a_h R_h^V not multiplied by exp(m_old − m_new)     |
| length_off_by_one      | switch  | stage 1 length mask    | slot len−1 dropped (t < len − 1)                  |
| wrong_head_basis       | switch  | q_h B_h^K and stage 2  | head h uses B_{(h+1) mod H} (keys and values)     |
| drop_private_value     | switch  | stage 2                | out_h = a_h S_V, the (a_h R_h^V) B_h^{V T} term lost |
| scale_rank             | switch  | stage 1 logits         | scale 1/sqrt(r) instead of 1/sqrt(d_h)            |
| read_past_length       | switch  | stage 1 length mask    | t <= len: one garbage (NaN) slot read per sequence |
| fp16_accumulation      | switch  | stage 1                | l and both accumulators rounded to fp16 per tile  |
| separate_softmax       | wrapper | both stages            | shared and private logits get a softmax each      |

`read_past_length` stays inside the allocation (it is clamped to T_max, or to the page
table's capacity), so it corrupts results without corrupting memory; it is invisible for a
sequence that fills its whole cache, which is why the tests leave garbage after every length.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

# name -> the MUTANT constexpr the kernels compile (the M_* constants of _kernels.py)
SWITCHES: dict[str, int] = {
    "no_private_rescale": 1,
    "length_off_by_one": 2,
    "wrong_head_basis": 3,
    "drop_private_value": 4,
    "scale_rank": 5,
    "read_past_length": 6,
    "fp16_accumulation": 7,
}

# One launch of the correct kernel: cache tensors by name (shared_k, shared_v, latent_k,
# latent_v) in, (out, lse) out; everything else of the call is fixed by the caller.
Launch = Callable[..., tuple[torch.Tensor, torch.Tensor]]


def separate_softmax(launch: Launch, cache: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(shared logits) S_V + softmax(private logits) R^V B^V — the sum Eq. 6 keeps
    whole, split in two. Each half is the correct kernel with the other stream zeroed:

        latent stream 0  ->  logits = q S_K^T (times key_scale, scale)      out = a_s S_V
        shared stream 0  ->  logits = (q B^K) R^{K T} (times the same)     out = a_p R^V B^{V T}

    lse is the shared softmax's (the first running max and sum, as a kernel would keep)."""
    def zeroed(*names: str) -> dict[str, torch.Tensor]:
        return {**cache, **{n: torch.zeros_like(cache[n]) for n in names}}

    out_s, lse = launch(**zeroed("latent_k", "latent_v"))
    out_p, _ = launch(**zeroed("shared_k", "shared_v"))
    return (out_s.to(lse.dtype) + out_p.to(lse.dtype)).to(out_s.dtype), lse


# name -> the wrapper that runs the correct kernel its wrong way
WRAPPERS: dict[str, Callable[[Launch, dict], tuple[torch.Tensor, torch.Tensor]]] = {
    "separate_softmax": separate_softmax,
}

KERNEL_MUTANTS: tuple[str, ...] = (*SWITCHES, *WRAPPERS)  # every kernel mutant, by name


def check_mutant(name: str | int | None) -> str | None:
    """The mutant's name, None for the correct kernel (None, 'none', 0); ValueError otherwise.
    An int is a switch's code."""
    if name is None or name == "none" or name == 0:
        return None
    if isinstance(name, bool):
        raise TypeError("mutant must be a name or int, not a bool")
    if isinstance(name, int):
        by_code = {code: n for n, code in SWITCHES.items()}
        if name not in by_code:
            raise ValueError(f"unknown kernel mutant code {name}; known: {sorted(by_code)}")
        return by_code[name]
    if name not in KERNEL_MUTANTS:
        raise ValueError(f"unknown kernel mutant {name!r}; known: {', '.join(KERNEL_MUTANTS)}")
    return name


def mutant_code(name: str | int | None) -> int:
    """The MUTANT constexpr to compile: a switch's code; 0 for the correct kernel and for a
    wrapper mutant (which runs the correct kernel)."""
    return SWITCHES.get(check_mutant(name), 0)


def mutant_wrapper(name: str | int | None):
    """The wrapper of a wrapper mutant, else None."""
    return WRAPPERS.get(check_mutant(name))
