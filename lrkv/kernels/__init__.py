"""lrkv.kernels — Triton kernels for the factored LRKV cache (DESIGN §2, §4; docs/kernels.md).

    decode.decode_attention        fused split-K decode, contiguous cache (Eqs. 6–7)
    decode.paged_decode_attention  the same over a paged cache
    extend.extend_attention        ragged causal extend (chunked prefill, speculative), contiguous or paged
    append.append / paged_append   write one token's cache entries, bit-exact
    backend.TritonBackend          the `triton` backend of `lrkv verify`
    runtime                        cuda | interpreter | fallback, and `interpreter()`
    compile_check                  compile for sm_90 without a GPU: the compile report (registers, spills, occupancy)
    occupancy                      blocks per SM of a compiled kernel, and where the split rule gets it

Importing this package imports neither Triton nor the kernels: `runtime` loads them on
first use, in the mode the process is in (Triton fixes interpreter vs. GPU when a kernel
is decorated, so the choice is made as late as possible).
"""

from __future__ import annotations


def available() -> tuple[bool, str]:
    """Whether the Triton kernels run here (natively or in the interpreter), and why."""
    from . import runtime

    which, why = runtime.mode()
    return which != "fallback", f"{which}: {why}"


def mode() -> str:
    """'cuda' | 'interpreter' | 'fallback' — where decode/append would run now."""
    from . import runtime

    return runtime.mode()[0]
