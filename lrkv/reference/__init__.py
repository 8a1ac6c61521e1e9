"""lrkv.reference — float64 oracles (DESIGN §2). Import submodules directly:

    lrkv.reference.lrkv       factored + materialized LRKV (Eqs. 6–7), layer step, prefill
    lrkv.reference.contract   the kernel-level decode contract and its validation
    lrkv.reference.rope       rotate-half RoPE, aligned bases
    lrkv.reference.norms      RMSNorm, the joint key scale
"""
