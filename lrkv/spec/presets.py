"""The paper's configurations as the seed reviews report them (Tables 5, 7, 8, 9).

Table 7 (p. 24) fixes per scale: H, d_h = 128, the LRKV rank, the GQA KV-head count and
the MLA latent width. Table 5 (p. 23) gives widths and layer counts; the reviews report
24 layers at 1536 wide for the 512M and 1.2B labels and 18 layers for 2.5B, and no layer
count for 128M or 6.3B — those stay None rather than guessed (the proofs reconcile them
against Table 12 separately).
"""

from __future__ import annotations

from dataclasses import dataclass

from .attention import AttentionSpec


@dataclass(frozen=True)
class PaperScale:
    label: str  # the paper's nominal size label (MHA reference architecture)
    n_heads: int  # H
    head_dim: int  # d_h
    d_model: int  # d = H·d_h
    n_layers: int | None  # N where Table 5 states it, else None
    rank: int  # LRKV r, Table 7
    gqa_kv_heads: int | None  # n_kv, Table 7; None: a custom model given without GQA's (no GQA row)
    mla_latent: int  # d_c, Table 7
    source: str  # where the numbers come from

    def spec(self, family: str, **kw) -> AttentionSpec:
        """The attention layer of this scale for one family."""
        H, d_h, d = self.n_heads, self.head_dim, self.d_model
        if family == "lrkv":
            return AttentionSpec.lrkv(H, d_h, kw.pop("rank", self.rank), d_model=d, **kw)
        if family == "mha":
            return AttentionSpec.mha(H, d_h, d_model=d, **kw)
        if family == "gqa":
            if "n_kv_heads" not in kw and self.gqa_kv_heads is None:
                raise ValueError(f"{self.label} has no GQA KV-head count (--kv-heads): no GQA spec to build")
            return AttentionSpec.gqa(H, d_h, kw.pop("n_kv_heads", self.gqa_kv_heads), d_model=d, **kw)
        if family == "mqa":
            return AttentionSpec.mqa(H, d_h, d_model=d, **kw)
        if family == "mla":
            return AttentionSpec.mla(H, d_h, kw.pop("latent_dim", self.mla_latent), d_model=d, **kw)
        if family == "mlra":
            return AttentionSpec.mlra(H, d_h, d_model=d, **kw)
        raise ValueError(f"family must be one of mha, gqa, mqa, mla, mlra, lrkv; got {family!r}")


PAPER_SCALES: dict[str, PaperScale] = {
    "128M": PaperScale("128M", 6, 128, 768, None, 46, 3, 128, "Table 7; Table 8 (H=6, d_h=128)"),
    "512M": PaperScale("512M", 12, 128, 1536, 24, 51, 4, 256, "Table 5 (24 layers, 1536 wide); Table 9 (8K context)"),
    "1.2B": PaperScale("1.2B", 12, 128, 1536, 24, 51, 4, 256, "Table 5 (24 layers, 1536 wide); Table 7"),
    "2.5B": PaperScale("2.5B", 18, 128, 2304, 18, 55, 6, 384, "Table 5 (18 layers); Table 7"),
    "6.3B": PaperScale("6.3B", 32, 128, 4096, None, 54, 2, 1024, "Table 7"),
}

# Table 8 (p. 25): the 128M rank sweep and MLA latent sweep.
TABLE8_LRKV_RANKS: tuple[int, ...] = (8, 16, 32, 64, 128)
TABLE8_MLA_LATENTS: tuple[int, ...] = (128, 192, 384)

# MLRA-4 as in its public code (DESIGN §10): 4 latent heads of 128, a shared 64-wide k_rope.
MLRA4 = dict(latent_dim=128, n_latent_heads=4, n_branches=4, rope_dim=64)
MLRA2 = dict(latent_dim=128, n_latent_heads=4, n_branches=2, rope_dim=64)
# DeepSeek-V3 MLA sizes (DESIGN §10): d_c = 512, d_rope = 64, d_nope = 128.
DEEPSEEK_V3_MLA = dict(latent_dim=512, rope_dim=64)


def preset(label: str) -> PaperScale:
    if not isinstance(label, str) or label not in PAPER_SCALES:
        raise ValueError(f"unknown paper scale {label!r}; known: {sorted(PAPER_SCALES)}")
    return PAPER_SCALES[label]
