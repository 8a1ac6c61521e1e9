"""The cache under tensor parallelism (English review Sec. 4; MLRA summary).

Both proofs count what each device holds from the cache the reference allocates, with one
sharding rule (algebra/layouts.shard_by_head_axis): a [B, T, heads, width] tensor splits by
heads, a head-free [B, T, width] tensor is held whole by every device.
"""

from __future__ import annotations

from fractions import Fraction

from lrkv.spec import AttentionSpec, per_device_cache_elements, tp_cache_ratio

from ..record import Verdict
from ..registry import proof
from ..symbolic import grid
from .formula_check import DH, H, R, check_formula, formula_verdict
from .layouts import P, derive_or_error, per_token, per_token_per_device, reference_layout, shard_by_head_axis


def aggregate_over_mha(layout=reference_layout, per_device=per_token_per_device):
    """P × what one device holds of the allocated LRKV cache, over the allocated MHA cache."""
    return lambda s: (P * per_device(layout(AttentionSpec.lrkv(s[H], s[DH], s[R])), s)
                      / per_token(layout(AttentionSpec.mha(s[H], s[DH])), s))


# ----------------------------------------------------------------------------- tensor parallel
def tp_ratio_formula(H, d_h, r, P, **_):
    return P / H + r / d_h


@proof(
    "tp_replication",
    item=5,
    claim="With P tensor-parallel shards that each keep their own copy of the shared block, the aggregate LRKV payload is 2b(P d_h + H r) per token, i.e. P/H + r/d_h of MHA.",
    source="English review Sec. 4 (tensor parallelism); lrkv.spec.tp_cache_ratio, per_device_cache_elements",
    expected="proved",
)
def tp_replication(*, formula=tp_ratio_formula, spec_impls=None, per_device=per_token_per_device) -> Verdict:
    """derivation: per device, the allocated shared_k/v [B, T, d_h] whole and latent_k/v
    [B, T, H, r] split by heads (symbolic P); P devices over the allocated MHA cache."""
    derived, how, err = derive_or_error(aggregate_over_mha(per_device=per_device))
    pts = [pt for pt in grid(H=(4, 8, 12, 18, 32), d_h=(2, 64, 128), r=(0, 7, 54, 55), P=(1, 2, 4, 8))
           if pt["H"] % pt["P"] == 0]
    impls = {
        "tp_cache_ratio": lambda H, d_h, r, P: tp_cache_ratio(AttentionSpec.lrkv(H, d_h, r), P),
        "P·per_device/mha": lambda H, d_h, r, P: Fraction(
            P * per_device_cache_elements(AttentionSpec.lrkv(H, d_h, r), P), 2 * H * d_h),
    }
    ok, ev = check_formula(derived=derived, formula=formula, impls=spec_impls or impls, points=pts,
                           symbols=dict(H=H, d_h=DH, r=R, P=P), derivation_error=err)
    ev["derivation_samples"] = how
    return formula_verdict(ok, ev, "From the allocated cache, each device holds shared_k/v whole and H/P heads "
                           "of latent_k/v: 2(d_h + (H/P) r); P of them over MHA's 2H d_h is P/H + r/d_h. "
                           f"tp_cache_ratio agrees on {len(pts)} grid points (P | H).")



# ----------------------------------------------------------------------------- TP payload per device
@proof(
    "tp_payload_mla_mlra",
    item=5,
    claim="Per device under P-way tensor parallelism, derived from the cache layouts: MLA keeps its whole d_c + d_rope on every device (576 at DeepSeek-V3 sizes), MLRA shards its latent heads ((L/P) d_c + d_rope: 192 at 4-way at those sizes), LRKV holds 2(d_h + (H/P) r), MHA 2 H d_h / P.",
    source="deepseek-ai/DeepSeek-V3 inference/model.py (absorb: kv_cache [B, S, kv_lora_rank = 512], pe_cache [B, S, qk_rope_head_dim = 64], no head axis); SongtaoLiu0823/MLRA model/mlra_4_gen.py (4 latent heads of kv_lora_rank/4, one k_cache of qk_rope_head_dim shared by all); MLRA summary (MLA's single latent head cannot be partitioned, 4-way TP); lrkv.spec.per_device_cache_elements",
    expected="proved",
)
def tp_payload_mla_mlra(*, shard=shard_by_head_axis, layout=reference_layout) -> Verdict:
    """Derive each family's per-device payload from the shapes the reference allocates and one
    sharding rule, then compare with lrkv.spec.per_device_cache_elements (written separately).

    The 576/192 instance uses DeepSeek-V3's public sizes (kv_lora_rank 512, qk_rope_head_dim 64)
    in MLRA-4's layout (kv_lora_rank split into 4 latent heads, one shared k_pe); the MLRA
    summary itself gives only K_C ∈ R^{L×(H·d_c)}, 4-way TP and 2.8×. The MLRA code's default
    small config (kv_lora_rank 256, qk_rope_head_dim 32) gives 288 and 96 by the same rule.
    """
    mism, count = [], 0
    derived: dict[str, dict] = {}

    def check(spec, P_):
        nonlocal count
        count += 1
        try:
            got = sum(shard(shape, P_) for shape in layout(spec).values())
        except ValueError as e:
            got = f"ValueError: {e}"
        want = per_device_cache_elements(spec, P_)
        if got != want:
            mism.append({"spec": spec.short(), "P": P_, "derived_from_layout": got, "spec_value": want})
        return got

    for P_ in (1, 2, 4, 8):
        for Hv in (8, 16, 128):
            check(AttentionSpec.mha(Hv, 128), P_)
            check(AttentionSpec.gqa(Hv, 128, 8), P_)
            check(AttentionSpec.mqa(Hv, 128), P_)
            for rv in (0, 55):
                check(AttentionSpec.lrkv(Hv, 128, rv), P_)
            for dc, dr in ((128, 0), (512, 64)):
                check(AttentionSpec.mla(Hv, 128, dc, rope_dim=dr), P_)
            if P_ <= 4:
                for nb in (4, 2):
                    check(AttentionSpec.mlra(Hv, 128, latent_dim=128, n_latent_heads=4, n_branches=nb, rope_dim=64), P_)
    v3_mla = AttentionSpec.mla(128, 128, 512, rope_dim=64)
    v3_mlra = AttentionSpec.mlra(128, 128, latent_dim=128, n_latent_heads=4, n_branches=4, rope_dim=64)
    code_mlra = AttentionSpec.mlra(16, 64, latent_dim=64, n_latent_heads=4, n_branches=4, rope_dim=32)
    for label, spec in (("deepseek_v3_mla", v3_mla), ("mlra4_at_v3_sizes", v3_mlra), ("mlra4_code_default", code_mlra)):
        derived[label] = {"layout": {k: list(v) for k, v in layout(spec).items()},
                          **{f"P{P_}": check(spec, P_) for P_ in (1, 4)}}
    instances_ok = (derived["deepseek_v3_mla"]["P1"] == derived["deepseek_v3_mla"]["P4"] == 576
                    and derived["mlra4_at_v3_sizes"]["P1"] == 576 and derived["mlra4_at_v3_sizes"]["P4"] == 192)
    ev = {"grid_points": count, "mismatches": mism[:10], "mismatch_count": len(mism), "derived": derived,
          "rule": "[B, T, heads, width] splits by heads (replicated below one head per device); [B, T, width] "
                  "is held whole by every device", "instances_576_192": instances_ok}
    if not mism and instances_ok:
        return Verdict("proved", "From the reference's cache shapes and one rule (head-indexed tensors "
                       "split, head-free tensors are held whole): MLA's [B, T, 512] + [B, T, 64] stays 576 "
                       "on every device at DeepSeek-V3 sizes, MLRA-4's [B, T, 4, 128] + [B, T, 64] gives "
                       "128 + 64 = 192 at 4-way, LRKV keeps its [B, T, d_h] shared block whole and splits "
                       "[B, T, H, r]; per_device_cache_elements agrees on every grid point.", ev)
    return Verdict("refuted", "The per-device payload derived from the layouts differs from "
                   "per_device_cache_elements (or from 576/192 at DeepSeek-V3 sizes).", ev)


