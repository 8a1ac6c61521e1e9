"""lrkv.mutants — deliberately broken backends: the gate must be able to say no (docs/harness.md §7).

Each mutant carries one bug a real implementation could have; `lrkv verify` and `lrkv gate`
must reject every one, which is how the tests show the rule and the gate are not vacuous.
None of them ships in the verified path: this package sits above lrkv.verify,
lrkv.distributed and lrkv.kernels (it may import them; they never import it), and each mutant is
named by its import path, e.g. `lrkv verify --backend lrkv.mutants.decode:NoPrivateRescale`.

One module per level or topic:

    decode     the kernel level: one decode bug each (scale, mask, RoPE, strides, ...)
    paged      the kernel-paged and kernel-extend levels: page table and ragged-query bugs
    fp8        fp8 caches: one scale bug each
    server     server properties: buffers, outputs written, determinism, batch invariance, compile
    coverage   bugs only one feature reaches: coverage, not a tolerance, must catch them
    tp         the tp level (`lrkv verify --tp P`): wrong tensor-parallel layers
    layouts    server cache layouts (vllm-blocks, flashinfer-csr, fused-rows) read wrong
    kernel     the Triton kernels: patched copies of their source (lrkv.kernels.runtime.load_patched)

Importing this package imports none of them and registers nothing.
"""
