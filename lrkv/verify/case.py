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

A case is a core (the fields below) plus one option object per level-specific dimension
(`OPTIONS`; lrkv/verify/options/): `pages` (page size, order, shared prefix), `extend` (new
tokens per sequence) and `fp8` (an fp8 cache's format and scales, outliers, FA3-style fp8
compute; DESIGN §4 "FP8 caches"). Each option owns its flat JSON keys, validation, id flags
and report shapes; its JSON keys stay flat, so a case's JSON and id are those of a flat record.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields, replace

import torch

from ..checks import check_bool, check_choice, check_float, check_int, parse_json
from ..spec import AttentionSpec, as_dtype, dtype_name
from . import options
from .options import MAX_T
from .options.extend import Extend
from .options.fp8 import CACHE_FORMATS, KERNEL_LEVELS, Fp8  # noqa: F401  (CACHE_FORMATS: protocol.py's)
from .options.fp8 import LEVELS as FP8_LEVELS
from .options.paged import Paged

DEFAULT_ROPE_THETA = 10000.0

CASE_LEVELS = ("kernel", "layer", "layer-model", "tp", "kernel-paged", "kernel-extend")
EXPECTATIONS = ("match", "differ")
DTYPES = ("float64", "float32", "bfloat16", "float16")
LAYOUTS = ("contiguous", "strided")  # strided: shared K/V packed in one tensor, latents stored head-major
MAX_SEED = 2**32 - 1  # seeds feed torch.Generator streams (seed·1_000_003 + stream must fit in 64 bits)
MAX_Q_SCALE = 1.0e6
MAX_TP = 64  # ranks of a tp case: each is a process on this machine
# the per-level options (lrkv/verify/options/), in id-flag and JSON order: attribute -> (class, its module)
OPTIONS = {"pages": (Paged, options.paged), "extend": (Extend, options.extend), "fp8": (Fp8, options.fp8)}


@dataclass(frozen=True)
class Case:
    """One check: the case core, and an option object per level-specific dimension (None when
    absent). `id` is derived from the other fields when left empty."""

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
    pages: Paged | None = None  # kernel-paged (required), kernel-extend (optional): options/paged.py
    extend: Extend | None = None  # kernel-extend (required): options/extend.py
    fp8: Fp8 | None = None  # kernel levels and layer: an fp8 cache, outliers, fp8 compute (options/fp8.py)
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
        for name, (cls, _) in OPTIONS.items():
            opt = getattr(self, name)
            if opt is not None and not isinstance(opt, cls):
                raise TypeError(f"{name} must be a {cls.__name__} or None, got {opt!r}")
            if opt == cls():  # every key at its default: the option is absent
                object.__setattr__(self, name, None)
        if self.level == "kernel-paged" and (self.pages is None or self.pages.size < 1):
            raise ValueError("page_size: a kernel-paged case needs page_size >= 1")
        if self.level == "kernel-extend" and self.extend is None:
            Extend().check(self)  # names the missing n_new
        for name in OPTIONS:
            if getattr(self, name) is not None:
                getattr(self, name).check(self)
        if self.near_cancel and self.spec.qk_norm:
            raise ValueError("near_cancel with qk_norm would make key_scale inconsistent; use one")
        if not self.id:
            object.__setattr__(self, "id", self._derive_id())

    @property
    def cache_fp8(self) -> str:
        """'<format>/<granularity>' of an fp8 cache, '' for a cache at τ (truthy: the cache is fp8)."""
        return self.fp8.label if self.fp8 else ""

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
            *(getattr(self, name).flags() for name in OPTIONS if getattr(self, name) is not None),
            "+differ" if self.expect != "match" else "",  # part of the id: a pass can't turn into an xfail
            f"+tp{self.tp}" if self.level == "tp" else "",  # P in the id: --tp 2 and --tp 4 records differ
        ))
        return f"{self.level}:{self.spec.short()}:{self.dtype}:T{self.t_max}:L{lens}:s{self.seed}{flags}"

    # ----------------------------------------------------------------- (de)serialisation
    def to_dict(self) -> dict:
        """The flat JSON form: the core's fields, then every option's keys (defaults when absent)."""
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in OPTIONS and f.name != "id"}
        d["spec"] = self.spec.to_dict()
        d["lengths"] = list(self.lengths)
        for name, (cls, module) in OPTIONS.items():
            opt = getattr(self, name) or cls()
            d.update({key: getattr(opt, attr) for key, attr in module.KEYS.items()})
        d["n_new"] = list(d["n_new"])
        d["id"] = self.id
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
        known = {f.name for f in fields(cls) if f.name not in OPTIONS}.union(*(m.KEYS for _, m in OPTIONS.values()))
        unknown = set(data) - known
        if unknown:
            raise ValueError(f"unknown Case fields: {sorted(unknown)}")
        missing = {"level", "dtype", "lengths", "t_max"} - set(data)
        if missing:
            raise ValueError(f"case: required fields missing: {sorted(missing)}")
        for name, (option, module) in OPTIONS.items():  # an option whose keys all keep their defaults: None
            given = {attr: data.pop(key) for key, attr in module.KEYS.items() if key in data}
            data[name] = option(**given)
        data["id"] = ""  # always re-derived: an edited case must not keep a stale id
        return cls(spec=spec, **data)

    @classmethod
    def flat(cls, level: str, spec: AttentionSpec, dtype: str, lengths, t_max: int, **fields) -> Case:
        """A case from the flat JSON vocabulary (the options' keys as keywords: page_size=4, ...)."""
        return cls.from_dict(dict(level=level, spec=spec, dtype=dtype, lengths=lengths, t_max=t_max, **fields))

    @classmethod
    def from_json(cls, text: str) -> Case:
        try:
            data = parse_json("--case", text)  # nested too deeply: a ValueError naming --case
        except json.JSONDecodeError as e:
            raise ValueError(f"--case is not valid JSON: {e}") from None
        return cls.from_dict(data)

    def replace(self, **changes) -> Case:
        """A copy with fields changed, the core's or an option's flat JSON keys (DESIGN §3); the
        id is re-derived."""
        if not set(changes) & {k for _, m in OPTIONS.values() for k in m.KEYS}:
            return replace(self, **{"id": "", **changes})
        return Case.from_dict({**self.to_dict(), "spec": self.spec, **changes})


def case_shapes(case: Case) -> dict:
    """The sizes a report shows for a case (batch, lengths, heads, ranks, pages, new tokens)."""
    s = case.spec
    shapes = {"batch": case.batch, "t_max": case.t_max, "lengths": list(case.lengths), "n_heads": s.n_heads,
              "head_dim": s.head_dim, "rank": s.rank, "d_model": s.d_model}
    for name in OPTIONS:
        shapes.update(getattr(case, name).shapes() if getattr(case, name) is not None else {})
    return shapes
