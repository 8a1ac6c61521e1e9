"""Kernel-bug mutation switches.

Each name is a bug a real split-K kernel could ship with; `MUTANT` is a constexpr of the
Triton kernels (0, the correct kernel, by default), so a mutant is the same kernel compiled
with one line changed — not a Python-level imitation. The harness's mutation tests (and
tests/test_triton_mutants.py) check that the tolerance rule of DESIGN §6 rejects each one.

| name                   | where                  | what goes wrong                                   |
|------------------------|------------------------|---------------------------------------------------|
| no_private_rescale     | stage 1 online softmax | a_h R_h^V not multiplied by exp(m_old − m_new)     |
| length_off_by_one      | stage 1 length mask    | slot len−1 dropped (t < len − 1)                  |
| wrong_head_basis       | q_h B_h^K and stage 2  | head h uses B_{(h+1) mod H} (keys and values)     |
| drop_private_value     | stage 2                | out_h = a_h S_V, the (a_h R_h^V) B_h^{V T} term lost |
| scale_rank             | stage 1 logits         | scale 1/sqrt(r) instead of 1/sqrt(d_h)            |
| read_past_length       | stage 1 length mask    | t <= len: one garbage (NaN) slot read per sequence |
| separate_softmax       | stage 1 and 2          | shared and private logits get a softmax each      |
| fp16_accumulation      | stage 1                | l and both accumulators rounded to fp16 per tile  |

`read_past_length` stays inside the allocation (it is clamped to T_max, or to the page
table's capacity), so it corrupts results without corrupting memory; it is invisible for a
sequence that fills its whole cache, which is why the tests leave garbage after every length.
"""

from __future__ import annotations

# name -> the code the kernels test against (see lrkv/kernels/_kernels.py, M_* constants)
KERNEL_MUTANTS: dict[str, int] = {
    "no_private_rescale": 1,
    "length_off_by_one": 2,
    "wrong_head_basis": 3,
    "drop_private_value": 4,
    "scale_rank": 5,
    "read_past_length": 6,
    "separate_softmax": 7,
    "fp16_accumulation": 8,
}

# The same bugs under the names of the harness's Python mutants (lrkv.verify.decode_mutants,
# `name` attributes) and other likely spellings; lookups accept either.
ALIASES: dict[str, str] = {
    "mutant-no-private-rescale": "no_private_rescale",
    "mutant-off-by-one-mask": "length_off_by_one",
    "mutant-wrong-head-basis": "wrong_head_basis",
    "mutant-dropped-private-value": "drop_private_value",
    "mutant-scale-sqrt-r": "scale_rank",
    "mutant-reads-past-length": "read_past_length",
    "mutant-separate-softmax": "separate_softmax",
    "mutant-fp16-accumulation": "fp16_accumulation",
    "missing_private_rescale": "no_private_rescale",
    "no_rescale_private": "no_private_rescale",
    "off_by_one_length": "length_off_by_one",
    "off_by_one_mask": "length_off_by_one",
    "wrong_head_b": "wrong_head_basis",
    "wrong_basis_head": "wrong_head_basis",
    "dropped_private_value": "drop_private_value",
    "drop_private_v": "drop_private_value",
    "scale_sqrt_r": "scale_rank",
    "scale_1_sqrt_r": "scale_rank",
    "rank_scale": "scale_rank",
    "read_one_past_length": "read_past_length",
    "one_past_length": "read_past_length",
}


def mutant_code(name: str | int | None) -> int:
    """0 for None/'none'; the kernel's code for a mutant name; ValueError otherwise."""
    if name is None or name == "none" or name == 0:
        return 0
    if isinstance(name, bool):
        raise TypeError("mutant must be a name or int, not a bool")
    if isinstance(name, int):
        if name not in KERNEL_MUTANTS.values():
            raise ValueError(f"unknown kernel mutant code {name}; known: {sorted(KERNEL_MUTANTS.values())}")
        return name
    key = ALIASES.get(name, name)
    if key not in KERNEL_MUTANTS:
        raise ValueError(f"unknown kernel mutant {name!r}; known: {', '.join(KERNEL_MUTANTS)}")
    return KERNEL_MUTANTS[key]
