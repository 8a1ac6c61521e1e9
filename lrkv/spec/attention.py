"""What is verified: one frozen, validated description of an attention layer.

Families (DESIGN §1, §10):
  mha / gqa / mqa  — dense per-head (or per-group) keys and values
  mla              — one joint latent c of width d_c; optional decoupled RoPE channel
                     (d_rope = 0 is the paper's simplified form, d_rope > 0 DeepSeek's)
  mlra             — the latent split into latent heads, one RMSNorm and up-projection
                     each, grouped into branches with separate softmaxes, summed
  lrkv             — W_h = W_shared + U_h B_h^T for keys and values (paper Eqs. 2–5)

Every invalid combination raises at construction time, naming the field — TypeError for a
value of the wrong kind (qk_norm="no", rank=2.0), ValueError for a wrong value (rank=-1,
rope_theta=inf) — through the shared helpers of `lrkv.checks`, so a spec that exists is a
spec the reference can run.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from ..checks import check_bool, check_choice, check_float, check_int

Family = Literal["mha", "gqa", "mqa", "mla", "mlra", "lrkv"]
RopeMode = Literal["none", "exact", "latent", "aligned"]

FAMILIES: tuple[str, ...] = ("mha", "gqa", "mqa", "mla", "mlra", "lrkv")
ROPE_MODES: tuple[str, ...] = ("none", "exact", "latent", "aligned")


@dataclass(frozen=True)
class AttentionSpec:
    """One attention layer. Build it with the family constructors below.

    Shapes use DESIGN §3 names. Fields that do not apply to a family must keep their
    defaults; setting them is an error (a silently ignored field hides a mistake).
    """

    family: Family
    n_heads: int  # H, query heads
    head_dim: int  # d_h, width of each query/key/value head (the "nope" part for mla/mlra)
    d_model: int | None = None  # d, residual width; None means H * d_h
    n_kv_heads: int | None = None  # n_kv for mha/gqa/mqa (mha: H, mqa: 1); None elsewhere
    rank: int = 0  # r, LRKV residual rank (lrkv only)
    rope: RopeMode = "none"  # lrkv: none|exact|latent|aligned; mha/gqa/mqa: none|exact
    rope_theta: float = 10000.0  # RoPE base, rotate-half convention (DESIGN §5)
    qk_norm: bool = False  # post-projection per-head RMSNorm of q and k (lrkv, mha/gqa/mqa)
    norm_eps: float = 1e-6  # epsilon of every RMSNorm in the layer
    latent_dim: int = 0  # d_c: mla latent width; mlra: width of ONE latent head
    n_latent_heads: int = 0  # mlra: number of latent heads (public code: 4)
    n_branches: int = 0  # mlra: softmax branches (4 = MLRA-4, 2 = MLRA-2)
    rope_dim: int = 0  # d_rope: decoupled RoPE key width (mla DeepSeek form, mlra)

    # ----------------------------------------------------------------- validation
    def __post_init__(self) -> None:
        # Every field is checked for its kind before any family rule reads it, and stored
        # normalised (a numpy int becomes an int, rope_theta=10000 becomes 10000.0).
        check_choice("family", self.family, FAMILIES)
        self._set("n_heads", check_int("n_heads", self.n_heads, minimum=1))
        self._set("head_dim", check_int("head_dim", self.head_dim, minimum=1))
        d_model = self.n_heads * self.head_dim if self.d_model is None else self.d_model
        self._set("d_model", check_int("d_model", d_model, minimum=1))
        if self.n_kv_heads is not None:
            self._set("n_kv_heads", check_int("n_kv_heads", self.n_kv_heads, minimum=1))
        for name in ("rank", "latent_dim", "n_latent_heads", "n_branches", "rope_dim"):
            self._set(name, check_int(name, getattr(self, name), minimum=0))
        check_choice("rope", self.rope, ROPE_MODES)
        self._set("rope_theta", check_float("rope_theta", self.rope_theta, minimum=0.0, exclusive_minimum=True))
        self._set("qk_norm", check_bool("qk_norm", self.qk_norm))
        self._set("norm_eps", check_float("norm_eps", self.norm_eps, minimum=0.0))
        getattr(self, f"_validate_{self.family}")()

    def _set(self, name: str, value) -> None:
        object.__setattr__(self, name, value)  # frozen dataclass: normalise during __post_init__ only

    def _forbid(self, *names: str) -> None:
        defaults = {f.name: f.default for f in dataclasses.fields(self)}
        for name in names:
            if getattr(self, name) != defaults[name]:
                raise ValueError(f"{name} does not apply to family {self.family!r}")

    def _validate_dense(self, expected_kv: int | None) -> None:
        self._forbid("rank", "latent_dim", "n_latent_heads", "n_branches", "rope_dim")
        if self.n_kv_heads is None:
            raise ValueError(f"n_kv_heads is required for family {self.family!r}")
        if expected_kv is not None and self.n_kv_heads != expected_kv:
            raise ValueError(
                f"n_kv_heads must be {expected_kv} for family {self.family!r}, got {self.n_kv_heads}"
            )
        if self.n_heads % self.n_kv_heads:
            raise ValueError(
                f"n_kv_heads ({self.n_kv_heads}) must divide n_heads ({self.n_heads})"
            )
        if self.rope not in ("none", "exact"):
            raise ValueError(f"rope must be 'none' or 'exact' for family {self.family!r}")
        if self.rope == "exact" and self.head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}")

    def _validate_mha(self) -> None:
        self._validate_dense(self.n_heads)

    def _validate_gqa(self) -> None:
        self._validate_dense(None)

    def _validate_mqa(self) -> None:
        self._validate_dense(1)

    def _validate_mla(self) -> None:
        self._forbid("n_kv_heads", "rank", "n_latent_heads", "n_branches", "qk_norm")
        check_int("latent_dim", self.latent_dim, minimum=1)
        if self.rope not in ("none",):
            raise ValueError(
                "rope must be 'none' for mla: positions enter only through the decoupled "
                "rope_dim channel (rope_dim > 0 is DeepSeek's form)"
            )
        if self.rope_dim % 2:
            raise ValueError(f"rope_dim must be even, got {self.rope_dim}")

    def _validate_mlra(self) -> None:
        self._forbid("n_kv_heads", "rank", "qk_norm")
        check_int("latent_dim", self.latent_dim, minimum=1)
        check_int("n_latent_heads", self.n_latent_heads, minimum=1)
        check_int("n_branches", self.n_branches, minimum=1)
        if self.n_latent_heads % self.n_branches:
            raise ValueError(
                f"n_branches ({self.n_branches}) must divide n_latent_heads ({self.n_latent_heads})"
            )
        groups = self.n_latent_heads // self.n_branches  # head groups per branch, one latent head each
        if self.n_heads % groups:
            raise ValueError(
                f"n_heads ({self.n_heads}) must be divisible by n_latent_heads / n_branches ({groups}): "
                "each branch splits the heads into that many equal groups, one per latent head"
            )
        if self.rope != "none":
            raise ValueError("rope must be 'none' for mlra: positions use the rope_dim channel")
        if self.rope_dim % 2:
            raise ValueError(f"rope_dim must be even, got {self.rope_dim}")

    def _validate_lrkv(self) -> None:
        self._forbid("n_kv_heads", "latent_dim", "n_latent_heads", "n_branches", "rope_dim")
        if self.rope != "none" and self.head_dim % 2:
            raise ValueError(f"head_dim must be even for RoPE, got {self.head_dim}")
        if self.rope == "latent" and self.rank % 2:
            raise ValueError(
                f"rank must be even for rope='latent' (the latent is rotated in pairs), got {self.rank}"
            )
        if self.rope == "aligned":
            if self.rank % 2:
                raise ValueError(
                    f"rank must be even for rope='aligned' (whole rotary planes), got {self.rank}"
                )
            if self.rank > self.head_dim:
                raise ValueError(
                    f"rank ({self.rank}) must be <= head_dim ({self.head_dim}) for rope='aligned': "
                    "each pair of basis columns occupies one of the d_h/2 rotary planes"
                )

    # ----------------------------------------------------------------- constructors
    @classmethod
    def mha(cls, n_heads: int, head_dim: int, **kw) -> AttentionSpec:
        return cls("mha", n_heads, head_dim, n_kv_heads=n_heads, **kw)

    @classmethod
    def gqa(cls, n_heads: int, head_dim: int, n_kv_heads: int, **kw) -> AttentionSpec:
        return cls("gqa", n_heads, head_dim, n_kv_heads=n_kv_heads, **kw)

    @classmethod
    def mqa(cls, n_heads: int, head_dim: int, **kw) -> AttentionSpec:
        return cls("mqa", n_heads, head_dim, n_kv_heads=1, **kw)

    @classmethod
    def mla(cls, n_heads: int, head_dim: int, latent_dim: int, rope_dim: int = 0, **kw) -> AttentionSpec:
        return cls("mla", n_heads, head_dim, latent_dim=latent_dim, rope_dim=rope_dim, **kw)

    @classmethod
    def mlra(
        cls,
        n_heads: int,
        head_dim: int,
        latent_dim: int = 128,
        n_latent_heads: int = 4,
        n_branches: int = 4,
        rope_dim: int = 64,
        **kw,
    ) -> AttentionSpec:
        return cls(
            "mlra", n_heads, head_dim, latent_dim=latent_dim, n_latent_heads=n_latent_heads,
            n_branches=n_branches, rope_dim=rope_dim, **kw,
        )

    @classmethod
    def lrkv(cls, n_heads: int, head_dim: int, rank: int, **kw) -> AttentionSpec:
        return cls("lrkv", n_heads, head_dim, rank=rank, **kw)

    # ----------------------------------------------------------------- helpers
    @property
    def scale(self) -> float:
        """Softmax scale. LRKV keeps 1/sqrt(d_h), never 1/sqrt(r) (paper Eq. 6)."""
        return (self.head_dim + self.rope_dim) ** -0.5

    @property
    def group_size(self) -> int:
        """Query heads per KV head (mha/gqa/mqa)."""
        assert self.n_kv_heads is not None
        return self.n_heads // self.n_kv_heads

    def replace(self, **changes) -> AttentionSpec:
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> AttentionSpec:
        if not isinstance(data, dict):
            raise TypeError(f"spec must be a mapping of AttentionSpec fields, got {type(data).__name__}")
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = set(data) - names
        if unknown:
            raise ValueError(f"unknown AttentionSpec fields: {sorted(unknown)}")
        return cls(**data)

    def short(self) -> str:
        """A compact id used in case ids and report rows."""
        f = self.family
        base = f"{f}-H{self.n_heads}-dh{self.head_dim}"
        if f == "lrkv":
            base += f"-r{self.rank}-rope_{self.rope}" + ("-qkn" if self.qk_norm else "")
        elif f in ("gqa",):
            base += f"-kv{self.n_kv_heads}"
        elif f == "mla":
            base += f"-dc{self.latent_dim}-dr{self.rope_dim}"
        elif f == "mlra":
            base += f"-L{self.n_latent_heads}x{self.latent_dim}-b{self.n_branches}-dr{self.rope_dim}"
        if f in ("mha", "gqa", "mqa") and self.rope != "none":
            base += f"-rope_{self.rope}"
        return base
