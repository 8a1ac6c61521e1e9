"""A verification case: what one check runs (DESIGN §6, §8), and its id.

A `Case` is a frozen, JSON-serialisable description (`lrkv verify --case '<json>'` replays
one). Its inputs are drawn by its level (`lrkv.verify.levels`): in float64 from the case's
seed, then ROUNDED to the case dtype τ, so that every backend is judged on exactly the
numbers it was given (FlashAttention's tests do the same).

Levels (one module each under lrkv/verify/levels/):
  kernel        the decode contract of DESIGN §4 on a cache drawn from real projections
  kernel-paged  the paged decode contract: the kernel case's cache scattered into pages
  kernel-extend the extend contract: `n_new[b]` new tokens per sequence (ragged, causal)
  layer         one `layer_step` (project, append, attend, output projection)
  layer-model   incremental `layer_step`s from an empty cache vs the training-form
                `layer_forward` over the whole sequence. rope='latent' is the paper's Sec. 3
                claim and is EXPECTED to differ here (expect='differ').
  tp            the same incremental decode on `tp` tensor-parallel ranks (torch.distributed)
                against the single-process float64 decode

At the kernel and layer levels `cache_format` stores the cache in fp8 (DESIGN §4 "FP8
caches"): the drawn cache is rounded to τ, as a server's projection writes it, then quantized
with the `scale_granularity`'s scales (lrkv.reference.fp8_cache.quantize_cache); q stays at
τ. A layer step also quantizes the token it appends (the backend's own quantizer). At the
kernel levels `fp8_compute` ("q", "p", "qp") says the kernel may also round q and/or the
softmax weights to e4m3, FA3-style: err_base is then that algorithm's error
(lrkv.reference.fp8.round_query / rounded_weights), the oracle stays exact.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields, replace

import torch

from ..checks import check_bool, check_choice, check_float, check_int, parse_json
from ..spec import AttentionSpec, as_dtype, dtype_name

DEFAULT_ROPE_THETA = 10000.0

CASE_LEVELS = ("kernel", "layer", "layer-model", "tp", "kernel-paged", "kernel-extend")
KERNEL_LEVELS = ("kernel", "kernel-paged", "kernel-extend")  # the kernel contracts of DESIGN §4
FP8_LEVELS = (*KERNEL_LEVELS, "layer")  # an fp8 cache: the kernels read it, the layer step also writes it
MAX_PAGE_SIZE = 1 << 16
EXPECTATIONS = ("match", "differ")
DTYPES = ("float64", "float32", "bfloat16", "float16")
LAYOUTS = ("contiguous", "strided")  # strided: shared K/V packed in one tensor, latents stored head-major
MAX_T = 1 << 20  # t_max limit: a case is drawn in float64 on the CPU
MAX_SEED = 2**32 - 1  # seeds feed torch.Generator streams (seed·1_000_003 + stream must fit in 64 bits)
MAX_Q_SCALE = 1.0e6
MAX_TP = 64  # ranks of a tp case: each is a process on this machine
CACHE_FORMATS = ("float8_e4m3fn", "float8_e5m2")  # an fp8 cache (DESIGN §4 "FP8 caches"); "" = the cache at τ
FP8_COMPUTE_DTYPES = ("float32", "bfloat16", "float16")  # q's dtype over an fp8 cache (the contract)


@dataclass(frozen=True)
class Case:
    """One check. `id` is derived from the other fields when left empty."""

    level: str  # one of CASE_LEVELS (lrkv/verify/levels/ has a module for each)
    spec: AttentionSpec  # the LRKV layer (family 'lrkv')
    dtype: str  # τ: dtype of every float input the backend receives
    lengths: tuple[int, ...]  # valid cache length per sequence (after the new token); batch = len
    t_max: int  # allocated cache slots; slots at or past lengths[b] are garbage
    seed: int = 0  # seeds weights, activations and garbage
    nan_garbage: bool = True  # garbage slots hold NaN (False: large finite values)
    q_scale: float = 1.0  # queries multiplied by this (adversarial: 100)
    near_cancel: bool = False  # head 0's shared and private keys nearly cancel
    splits: int = 0  # split-K hint for tiled backends (0: backend's choice); need not divide T
    tile: int = 0  # tile-size hint for tiled backends (0: backend's choice)
    expect: str = "match"  # 'differ': known to deviate (latent RoPE vs the model); recorded, not gated
    layout: str = "contiguous"  # kernel cache layout: 'strided' hands the backend non-contiguous views
    tp: int = 1  # tensor-parallel ranks P (level 'tp' only)
    page_size: int = 0  # kernel-paged (>= 1), kernel-extend (0: contiguous cache): slots per page
    page_shuffle: bool = True  # physical pages in a random order (False: sequence-major order)
    shared_prefix: int = 0  # sequences 0 and 1 share their first shared_prefix tokens' pages (whole pages)
    n_new: tuple[int, ...] = ()  # kernel-extend: new tokens per sequence (n_b <= lengths[b]; 0 allowed)
    cache_format: str = ""  # kernel and layer levels: the cache stored as this fp8 format (CACHE_FORMATS), q at τ
    scale_granularity: str = ""  # with cache_format: per_tensor, per_head, per_token or per_token_head
    outliers: bool = False  # kernel levels: cached tokens and channels ×16; layer: the appended token ×4
    fp8_compute: str = ""  # kernel levels, fp8 cache: "q" / "p" / "qp" rounded to e4m3 too (FA3-style; err_base's)
    id: str = field(default="", compare=False)

    def __post_init__(self) -> None:
        check_choice("level", self.level, CASE_LEVELS)
        if not isinstance(self.spec, AttentionSpec) or self.spec.family != "lrkv":
            raise ValueError("spec must be an lrkv AttentionSpec")
        try:
            object.__setattr__(self, "dtype", dtype_name(self.dtype))
        except (TypeError, ValueError, KeyError):
            raise ValueError(f"dtype must be one of {DTYPES}, got {self.dtype!r}") from None
        check_choice("dtype", self.dtype, DTYPES)
        if isinstance(self.lengths, (str, bytes)) or not hasattr(self.lengths, "__iter__"):
            raise TypeError(f"lengths must be a sequence of integers, got {self.lengths!r}")
        object.__setattr__(self, "lengths", tuple(check_int(f"lengths[{i}]", n, minimum=0)
                                                  for i, n in enumerate(self.lengths)))
        if not self.lengths:
            raise ValueError("lengths must name at least one sequence")
        check_int("t_max", self.t_max, minimum=1, maximum=MAX_T)
        if any(n > self.t_max for n in self.lengths):
            raise ValueError(f"lengths must lie in [0, t_max={self.t_max}], got {list(self.lengths)}")
        check_int("seed", self.seed, minimum=0, maximum=MAX_SEED)
        check_bool("nan_garbage", self.nan_garbage)
        check_bool("near_cancel", self.near_cancel)
        object.__setattr__(self, "q_scale", check_float("q_scale", self.q_scale, minimum=0.0, maximum=MAX_Q_SCALE,
                                                        exclusive_minimum=True))
        check_int("splits", self.splits, minimum=0, maximum=MAX_T)
        check_int("tile", self.tile, minimum=0, maximum=MAX_T)
        check_choice("expect", self.expect, EXPECTATIONS)
        check_choice("layout", self.layout, LAYOUTS)
        if self.level not in KERNEL_LEVELS and min(self.lengths) < 1:
            raise ValueError(f"level {self.level!r} appends a token, so every length must be >= 1")
        check_int("tp", self.tp, minimum=1, maximum=MAX_TP)
        if (self.tp != 1) and self.level != "tp":
            raise ValueError(f"tp applies to level 'tp' only, got tp={self.tp} at level {self.level!r}")
        if self.tp > self.spec.n_heads:  # the split rule of lrkv.distributed.partition
            raise ValueError(f"tp ({self.tp}) must be <= spec.n_heads ({self.spec.n_heads}): every rank needs a "
                             "query head")
        if self.level in ("layer-model", "tp") and set(self.lengths) != {self.t_max}:
            raise ValueError(f"{self.level} cases run whole sequences: every length must equal t_max")
        if self.level not in KERNEL_LEVELS and (self.q_scale != 1.0 or self.near_cancel):
            raise ValueError("q_scale and near_cancel are kernel-level adversarial inputs")
        if self.level != "kernel" and self.layout != "contiguous":
            raise ValueError("layout is a kernel-level adversarial input (the paged and extend levels "
                             "have their own layouts)")
        self._check_paged_extend()
        self._check_fp8()
        if self.near_cancel and self.spec.qk_norm:
            raise ValueError("near_cancel with qk_norm would make key_scale inconsistent; use one")
        if not self.id:
            object.__setattr__(self, "id", self._derive_id())

    def _check_paged_extend(self) -> None:
        check_int("page_size", self.page_size, minimum=0, maximum=MAX_PAGE_SIZE)
        check_bool("page_shuffle", self.page_shuffle)
        check_int("shared_prefix", self.shared_prefix, minimum=0, maximum=MAX_T)
        if isinstance(self.n_new, (str, bytes)) or not hasattr(self.n_new, "__iter__"):
            raise TypeError(f"n_new must be a sequence of integers, got {self.n_new!r}")
        object.__setattr__(self, "n_new", tuple(check_int(f"n_new[{i}]", n, minimum=0)
                                                for i, n in enumerate(self.n_new)))
        paged_level = self.level in ("kernel-paged", "kernel-extend")
        if not paged_level and (self.page_size or self.shared_prefix or not self.page_shuffle):
            raise ValueError("page_size, page_shuffle and shared_prefix apply to levels kernel-paged and "
                             "kernel-extend only")
        if self.level == "kernel-paged" and self.page_size < 1:
            raise ValueError("page_size: a kernel-paged case needs page_size >= 1")
        if self.level == "kernel-extend":
            if len(self.n_new) != self.batch:
                raise ValueError(f"n_new must give one count per sequence ({self.batch}), got {list(self.n_new)}")
            over = [b for b, (n, L) in enumerate(zip(self.n_new, self.lengths)) if n > L]
            if over:
                raise ValueError(f"n_new[{over[0]}] = {self.n_new[over[0]]} exceeds lengths[{over[0]}] = "
                                 f"{self.lengths[over[0]]}: the new tokens are part of the length")
            if self.splits or self.tile:
                raise ValueError("splits and tile are decode split-K hints; kernel-extend cases take none")
        elif self.n_new:
            raise ValueError("n_new applies to level kernel-extend only")
        if self.shared_prefix:
            if self.page_size < 1 or self.batch < 2:
                raise ValueError("shared_prefix needs page_size >= 1 and at least two sequences")
            if self.shared_prefix % self.page_size:
                raise ValueError(f"shared_prefix ({self.shared_prefix}) must be a whole number of pages "
                                 f"(page_size {self.page_size})")
            if self.shared_prefix > min(self.lengths[:2]):
                raise ValueError(f"shared_prefix ({self.shared_prefix}) must not exceed the lengths of "
                                 f"sequences 0 and 1 ({list(self.lengths[:2])})")

    def _check_fp8(self) -> None:
        from ..reference.fp8 import check_fp8_compute
        from ..spec.fp8_scales import GRANULARITIES

        check_bool("outliers", self.outliers)
        if self.cache_format:
            check_choice("cache_format", self.cache_format, CACHE_FORMATS)
            check_choice("scale_granularity", self.scale_granularity, GRANULARITIES)
            if self.dtype not in FP8_COMPUTE_DTYPES:
                raise ValueError(f"an fp8 cache is read at a compute dtype {FP8_COMPUTE_DTYPES}, got dtype "
                                 f"{self.dtype!r} (q and out have it; the cache is {self.cache_format})")
        elif self.scale_granularity:
            raise ValueError("scale_granularity applies to an fp8 cache only: give cache_format too")
        if self.level not in FP8_LEVELS and (self.cache_format or self.outliers):
            raise ValueError(f"cache_format and outliers apply to the levels {', '.join(FP8_LEVELS)} only")
        check_fp8_compute(self.fp8_compute)
        if self.fp8_compute and (not self.cache_format or self.level not in KERNEL_LEVELS):
            raise ValueError(f"fp8_compute applies to an fp8 cache at the levels {', '.join(KERNEL_LEVELS)} only")

    @property
    def fp8(self) -> str:
        """'<format>/<granularity>' of an fp8 cache, '' for a cache at τ."""
        return f"{self.cache_format}/{self.scale_granularity}" if self.cache_format else ""

    @property
    def batch(self) -> int:
        return len(self.lengths)

    @property
    def torch_dtype(self) -> torch.dtype:
        return as_dtype(self.dtype)

    def _derive_id(self) -> str:
        lens = "-".join(map(str, self.lengths))
        if len(self.lengths) > 4:
            lens = f"{len(self.lengths)}x" + hashlib.sha1(lens.encode()).hexdigest()[:6]
        flags = "".join((
            "" if self.nan_garbage else "+finitegarbage",
            f"+q{self.q_scale:g}" if self.q_scale != 1.0 else "",
            "+cancel" if self.near_cancel else "",
            f"+splits{self.splits}" if self.splits else "",
            f"+tile{self.tile}" if self.tile else "",
            f"+theta{self.spec.rope_theta:g}" if self.spec.rope_theta != DEFAULT_ROPE_THETA else "",
            "+strided" if self.layout != "contiguous" else "",
            f"+page{self.page_size}" if self.page_size else "",
            "+inorder" if not self.page_shuffle else "",
            f"+prefix{self.shared_prefix}" if self.shared_prefix else "",
            "+new" + "-".join(map(str, self.n_new)) if self.n_new else "",
            f"+{self.cache_format.removeprefix('float8_')}.{self.scale_granularity}" if self.cache_format else "",
            "+outliers" if self.outliers else "",
            f"+fp8compute.{self.fp8_compute}" if self.fp8_compute else "",
            "+differ" if self.expect != "match" else "",  # part of the id: a pass can't turn into an xfail
            f"+tp{self.tp}" if self.level == "tp" else "",  # P in the id: --tp 2 and --tp 4 records differ
        ))
        return f"{self.level}:{self.spec.short()}:{self.dtype}:T{self.t_max}:L{lens}:s{self.seed}{flags}"

    # ----------------------------------------------------------------- (de)serialisation
    def to_dict(self) -> dict:
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        d["spec"] = self.spec.to_dict()
        d["lengths"] = list(self.lengths)
        d["n_new"] = list(self.n_new)
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), sort_keys=True)

    @classmethod
    def from_dict(cls, data: dict) -> Case:
        if not isinstance(data, dict):
            raise ValueError(f"a case must be a JSON object, got {type(data).__name__}")
        data = dict(data)
        if "spec" not in data:
            raise ValueError("case: field 'spec' is required (an lrkv AttentionSpec as an object)")
        spec = data.pop("spec")
        if not isinstance(spec, (dict, AttentionSpec)):
            raise ValueError(f"case.spec must be an object, got {type(spec).__name__}")
        spec = spec if isinstance(spec, AttentionSpec) else AttentionSpec.from_dict(spec)
        known = {f.name for f in fields(cls)}
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown Case fields: {sorted(unknown)}")
        missing = {"level", "dtype", "lengths", "t_max"} - set(data)
        if missing:
            raise ValueError(f"case: required fields missing: {sorted(missing)}")
        data["id"] = ""  # always re-derived: an edited case must not keep a stale id
        return cls(spec=spec, **data)

    @classmethod
    def from_json(cls, text: str) -> Case:
        try:
            data = parse_json("--case", text)  # nested too deeply: a ValueError naming --case
        except json.JSONDecodeError as e:
            raise ValueError(f"--case is not valid JSON: {e}") from None
        return cls.from_dict(data)

    def replace(self, **changes) -> Case:
        """A copy with fields changed; the id is re-derived unless given."""
        changes.setdefault("id", "")
        return replace(self, **changes)


def case_shapes(case: Case) -> dict:
    """The sizes a report shows for a case (batch, lengths, heads, ranks, pages, new tokens)."""
    s = case.spec
    shapes = {"batch": case.batch, "t_max": case.t_max, "lengths": list(case.lengths), "n_heads": s.n_heads,
              "head_dim": s.head_dim, "rank": s.rank, "d_model": s.d_model}
    if case.page_size:
        shapes["page_size"] = case.page_size
    if case.level == "kernel-extend":
        shapes["n_new"] = list(case.n_new)
    if case.cache_format:
        shapes["cache"] = case.fp8
    return shapes
