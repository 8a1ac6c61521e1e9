"""Which model `lrkv cache` sizes: one of the paper's presets, a custom model, or a preset
with some fields replaced.

A custom model (no --preset) is given whole: --heads, --head-dim, --rank and --layers;
--kv-heads (GQA's KV heads) is optional — GQA is only a comparison row, shown when it is
given; --mla-latent (MLA's d_c) defaults to 4·d_h, DeepSeek-V2/V3's ratio (d_c = 512 at
d_h = 128). With --preset, each of these flags replaces that field of the
preset and the rest stay Table 7's — as --rank and --layers always did; a preset changed in
its shape (heads, head dim, KV heads, latent) is labelled "<preset>+custom". Every check
names the flag, so a preset field that no longer fits (2.5B's 6 KV heads under --heads 16)
says which flag to give.
"""

from __future__ import annotations

from .presets import PaperScale, preset

# (flag, PaperScale field) a custom model needs; mla_latent has a default
REQUIRED = (("--heads", "n_heads"), ("--head-dim", "head_dim"), ("--rank", "rank"), ("--layers", "n_layers"))
SHAPE = ("n_heads", "head_dim", "gqa_kv_heads", "mla_latent")  # changing one makes a preset "+custom"
MLA_LATENT_PER_HEAD_DIM = 4  # DeepSeek-V2/V3: d_c = 512 = 4 · 128


def cache_model(preset_label: str | None, *, heads: int | None = None, head_dim: int | None = None,
                rank: int | None = None, layers: int | None = None, kv_heads: int | None = None,
                mla_latent: int | None = None) -> PaperScale:
    """The model to size; ValueError naming the flag when it is incomplete or inconsistent.
    (Each value is already an int in range: the CLI's argument types check that.)"""
    given = dict(n_heads=heads, head_dim=head_dim, rank=rank, n_layers=layers, gqa_kv_heads=kv_heads,
                 mla_latent=mla_latent)
    if preset_label is None:
        missing = [flag for flag, field in REQUIRED if given[field] is None]
        if missing:
            raise ValueError(f"a custom model (no --preset) needs --heads, --head-dim, --rank and --layers "
                             f"(--kv-heads adds a GQA row); missing: {', '.join(missing)}")
        if mla_latent is None:
            given["mla_latent"] = MLA_LATENT_PER_HEAD_DIM * head_dim
        base, label, where = None, "custom", "the custom model's"
    else:
        base = preset(preset_label)
        changed = any(given[f] is not None and given[f] != getattr(base, f) for f in SHAPE)
        label, where = base.label + ("+custom" if changed else ""), f"the {base.label} preset's"
    values = {f: (getattr(base, f) if v is None and base is not None else v) for f, v in given.items()}
    H, d_h = values["n_heads"], values["head_dim"]
    flag_of = {"rank": "--rank", "gqa_kv_heads": "--kv-heads"}
    src = {f: "" if given[f] is not None else f" ({where})" for f in flag_of}
    if values["rank"] > d_h:
        raise ValueError(f"--rank: rank ({values['rank']}){src['rank']} must be <= d_h ({d_h}) of {label} "
                         f"(--head-dim): U_h B_h^T of a {d_h}-wide head has rank at most d_h")
    if values["gqa_kv_heads"] is not None and H % values["gqa_kv_heads"]:
        raise ValueError(f"--kv-heads: {values['gqa_kv_heads']} KV heads{src['gqa_kv_heads']} must divide the "
                         f"{H} query heads (--heads) of {label}")
    source = "custom: " + ", ".join(f"{k}={v}" for k, v in given.items() if v is not None)
    return PaperScale(label=label, n_heads=H, head_dim=d_h, d_model=H * d_h, n_layers=values["n_layers"],
                      rank=values["rank"], gqa_kv_heads=values["gqa_kv_heads"], mla_latent=values["mla_latent"],
                      source=base.source if base and label == base.label else source)
