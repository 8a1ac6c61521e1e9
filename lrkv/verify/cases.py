"""Verification cases: what one check runs, and the inputs it draws (DESIGN §6, §8).

A `Case` is a frozen, JSON-serialisable description (`lrkv verify --case '<json>'` replays
one). Inputs are drawn in float64 from the case's seed, then ROUNDED to the case dtype τ;
the float64 reference later runs on the rounded values upcast, so that every backend is
judged on exactly the numbers it was given (FlashAttention's tests do the same).

Levels:
  kernel       the decode contract of DESIGN §4 on a cache drawn from real projections
  layer        one `layer_step` (project, append, attend, output projection)
  layer-model  incremental `layer_step`s from an empty cache vs the training-form
               `layer_forward` over the whole sequence (the model). rope='latent' is the
               paper's Sec. 3 claim and is EXPECTED to differ here (expect='differ').
  kernel-paged the paged decode contract: the kernel case's cache scattered into pages of
               `page_size` slots (shuffled unless page_shuffle=False; sequences 0 and 1
               sharing their first `shared_prefix` tokens' pages; unused pages garbage)
  kernel-extend the extend contract: `n_new[b]` new tokens per sequence (ragged, causal),
               over a contiguous cache, or a paged one when page_size > 0
  tp           the same incremental decode on `tp` tensor-parallel ranks (torch.distributed)
               against the single-process float64 decode; its plug-in is lrkv.distributed.harness
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field, fields, replace

import torch

from ..reference.cache import FactoredCache, allocate_cache
from ..reference.lrkv import decode_rope, project_token
from ..reference.rope import ExactRope, apply_rope, rope_freqs
from ..reference.weights import LRKVWeights, init_lrkv_weights
from ..checks import check_bool, check_choice, check_float, check_int
from ..spec import AttentionSpec, as_dtype, dtype_name

DEFAULT_ROPE_THETA = 10000.0

CASE_LEVELS = ("kernel", "layer", "layer-model", "tp", "kernel-paged", "kernel-extend")
KERNEL_LEVELS = ("kernel", "kernel-paged", "kernel-extend")  # the kernel contracts of DESIGN §4
MAX_PAGE_SIZE = 1 << 16
EXPECTATIONS = ("match", "differ")
DTYPES = ("float64", "float32", "bfloat16", "float16")
LAYOUTS = ("contiguous", "strided")  # strided: shared K/V packed in one tensor, latents stored head-major

FINITE_GARBAGE = 1.0e4  # scale of finite garbage (nan_garbage=False): reading it shows up as a huge error
NEAR_CANCEL_GAIN = 30.0  # head 0's private keys are scaled up by this ...
NEAR_CANCEL_RESIDUAL = 1.0e-3  # ... and the shared key set to −(head 0's private key)·(1 − this) + noise
MAX_T = 1 << 20  # t_max limit: a case is drawn in float64 on the CPU
MAX_SEED = 2**32 - 1  # seeds feed torch.Generator streams (seed·1_000_003 + stream must fit in 64 bits)
MAX_Q_SCALE = 1.0e6
MAX_TP = 64  # ranks of a tp case: each is a process on this machine


@dataclass(frozen=True)
class Case:
    """One check. `id` is derived from the other fields when left empty."""

    level: str  # one of CASE_LEVELS (levels.py has the plug-in of each)
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
        if self.level in ("layer-model", "tp") and set(self.lengths) != {self.t_max}:
            raise ValueError(f"{self.level} cases run whole sequences: every length must equal t_max")
        if self.level not in KERNEL_LEVELS and (self.q_scale != 1.0 or self.near_cancel):
            raise ValueError("q_scale and near_cancel are kernel-level adversarial inputs")
        if self.level != "kernel" and self.layout != "contiguous":
            raise ValueError("layout is a kernel-level adversarial input (the paged and extend levels "
                             "have their own layouts)")
        self._check_paged_extend()
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
            data = json.loads(text)
        except json.JSONDecodeError as e:
            raise ValueError(f"--case is not valid JSON: {e}") from None
        return cls.from_dict(data)

    def replace(self, **changes) -> Case:
        """A copy with fields changed; the id is re-derived unless given."""
        changes.setdefault("id", "")
        return replace(self, **changes)


# ----------------------------------------------------------------------------- input bundles
class ContractInputs:
    """What every contract's argument bundle (decode, paged decode, extend; DESIGN §4) does
    with its fields: call a backend entry point, map the float tensors, copy. A subclass is
    a dataclass that defines args() and kwargs()."""

    def call(self, fn, **extra):
        """fn(*contract args, **contract kwargs, **extra)."""
        return fn(*self.args(), **self.kwargs(), **extra)

    def map(self, f):
        """Apply f to every float tensor (lengths, page tables, cu_seqlens untouched)."""
        return replace(self, **{fl.name: f(v) for fl in fields(self)
                                if isinstance(v := getattr(self, fl.name), torch.Tensor) and v.is_floating_point()})

    def to(self, dtype: torch.dtype):
        return self.map(lambda t: t.to(dtype))

    def clone(self):
        """A copy with the SAME strides (a strided layout must reach the backend as drawn)."""
        return replace(self, **{fl.name: clone_strided(v) for fl in fields(self)
                                if isinstance(v := getattr(self, fl.name), torch.Tensor)})


@dataclass
class KernelInputs(ContractInputs):
    """The arguments of the decode contract (DESIGN §4), all float tensors at one dtype."""

    q: torch.Tensor  # [B, H, d_h]
    shared_k: torch.Tensor  # [B, T_max, d_h]
    shared_v: torch.Tensor  # [B, T_max, d_h]
    latent_k: torch.Tensor  # [B, T_max, H, r]
    latent_v: torch.Tensor  # [B, T_max, H, r]
    basis_k: torch.Tensor  # [H, d_h, r]
    basis_v: torch.Tensor  # [H, d_h, r]
    lengths: torch.Tensor  # [B] int32
    scale: float  # 1/sqrt(d_h)
    key_scale: torch.Tensor | None = None  # [B, T_max, H] (qk_norm)
    rope: ExactRope | None = None

    def args(self) -> tuple[torch.Tensor, ...]:
        return (self.q, self.shared_k, self.shared_v, self.latent_k, self.latent_v,
                self.basis_k, self.basis_v, self.lengths)

    def kwargs(self) -> dict:
        return {"scale": self.scale, "key_scale": self.key_scale, "rope": self.rope}


@dataclass
class LayerInputs:
    """Arguments of one `layer_step(weights, x_t, cache, positions)`."""

    weights: LRKVWeights
    x_t: torch.Tensor  # [B, d]
    cache: FactoredCache  # lengths = positions (the step appends at slot positions[b])
    positions: torch.Tensor  # [B] int64

    def to(self, dtype: torch.dtype) -> LayerInputs:
        return LayerInputs(self.weights.to(dtype), self.x_t.to(dtype), cast_cache(self.cache, dtype),
                           self.positions.clone())

    def clone(self) -> LayerInputs:
        return LayerInputs(self.weights, self.x_t.clone(), self.cache.clone(), self.positions.clone())


@dataclass
class ModelInputs:
    """A whole sequence for the layer-model level: decode it step by step, compare with the model."""

    weights: LRKVWeights
    x: torch.Tensor  # [B, T, d]
    nan_garbage: bool = True  # how the backend's empty cache is filled

    def to(self, dtype: torch.dtype) -> ModelInputs:
        return ModelInputs(self.weights.to(dtype), self.x.to(dtype), self.nan_garbage)

    def clone(self) -> ModelInputs:
        return ModelInputs(self.weights, self.x.clone(), self.nan_garbage)


def clone_strided(t: torch.Tensor) -> torch.Tensor:
    """A copy of t with t's exact strides, also for non-dense views (torch.clone would densify)."""
    out = torch.empty_strided(t.shape, t.stride(), dtype=t.dtype, device=t.device)
    return out.copy_(t)


def strided_layout(inp: KernelInputs) -> KernelInputs:
    """The same values in the layouts real servers use: shared K and V packed side by side in
    one [B, T, 2, d_h] tensor, latents stored head-major [B, H, T, r] (views, not contiguous)."""
    kv = torch.stack((inp.shared_k, inp.shared_v), dim=2)  # [B, T, 2, d_h]
    head_major = lambda t: t.permute(0, 2, 1, 3).contiguous().permute(0, 2, 1, 3)  # noqa: E731
    return replace(inp, shared_k=kv[:, :, 0], shared_v=kv[:, :, 1], latent_k=head_major(inp.latent_k),
                   latent_v=head_major(inp.latent_v))


def cast_cache(cache: FactoredCache, dtype: torch.dtype) -> FactoredCache:
    c = cache.clone()
    for name, t in c.tensors().items():
        setattr(c, name, t.to(dtype))
    return c


# ----------------------------------------------------------------------------- drawing
def _generator(case: Case, stream: int) -> torch.Generator:
    """Independent streams per purpose, so that e.g. the garbage draw never shifts the data."""
    return torch.Generator().manual_seed(case.seed * 1_000_003 + stream)


def _valid(lengths: torch.Tensor, t_max: int) -> torch.Tensor:
    return torch.arange(t_max)[None, :] < lengths[:, None]  # [B, T]


def _fill_garbage(t: torch.Tensor, valid: torch.Tensor, case: Case, stream: int) -> torch.Tensor:
    """Slots past lengths[b] hold NaN (or large finite noise), never data."""
    m = valid.reshape(*valid.shape, *([1] * (t.dim() - 2)))
    if case.nan_garbage:
        junk = torch.full_like(t, float("nan"))
    else:
        junk = FINITE_GARBAGE * torch.randn(t.shape, generator=_generator(case, stream), dtype=t.dtype)
    return torch.where(m, t, junk)


def _projected_sequence(case: Case) -> tuple[LRKVWeights, torch.Tensor, dict[str, torch.Tensor]]:
    """float64 weights, activations x [B, T_max, d] and every slot's cache entries."""
    spec, B, T = case.spec, case.batch, case.t_max
    weights = init_lrkv_weights(spec, seed=case.seed)
    x = torch.randn(B, T, spec.d_model, generator=_generator(case, 1), dtype=torch.float64)
    if case.shared_prefix:  # a common prompt: the same tokens give the same cache entries
        x[1, :case.shared_prefix] = x[0, :case.shared_prefix]
    entries = project_token(weights, x, torch.arange(T)[None, :].expand(B, T))
    return weights, x, entries


def _near_cancel(case: Case, shared_k, latent_k, basis_k):
    """Make head 0's full key k = s + (private) nearly vanish: large terms that cancel."""
    latent_k = latent_k.clone()
    latent_k[:, :, 0] *= NEAR_CANCEL_GAIN
    priv0 = latent_k[:, :, 0] @ basis_k[0].T  # [B, T, d_h]  z_j B_0^T
    if case.spec.rope == "exact":  # the kernel rotates the private key by slot index
        priv0 = apply_rope(priv0, torch.arange(case.t_max)[None, :], rope_freqs(case.spec.head_dim,
                                                                                 case.spec.rope_theta))
    noise = torch.randn(priv0.shape, generator=_generator(case, 3), dtype=torch.float64)
    rms = priv0.pow(2).mean(-1, keepdim=True).sqrt()
    return -priv0 + NEAR_CANCEL_RESIDUAL * rms * noise, latent_k


def make_kernel_inputs(case: Case) -> KernelInputs:
    """Kernel-level inputs at the case dtype (drawn in float64 from real projections, then rounded)."""
    if case.level != "kernel":
        raise ValueError(f"make_kernel_inputs needs a kernel case, got level {case.level!r}")
    inputs, _ = draw_kernel_inputs(case)
    inputs = inputs.to(case.torch_dtype)
    return strided_layout(inputs) if case.layout == "strided" else inputs


def draw_kernel_inputs(case: Case) -> tuple[KernelInputs, dict[str, torch.Tensor]]:
    """The float64 draw of every kernel-level contract (decode, paged, extend): the contiguous
    cache with garbage past each length, the last token's query, and every slot's entries
    (e['q'] [B, T_max, H, d_h] holds the query of each position, ×q_scale)."""
    weights, _, e = _projected_sequence(case)
    B = case.batch
    lengths = torch.tensor(case.lengths, dtype=torch.int32)
    last = (lengths.long() - 1).clamp(min=0)  # the new token is the last valid slot
    q = e["q"][torch.arange(B), last] * case.q_scale  # [B, H, d_h]
    shared_k, latent_k = e["shared_k"], e["latent_k"]
    if case.near_cancel:
        shared_k, latent_k = _near_cancel(case, shared_k, latent_k, weights.basis_k)
    valid = _valid(lengths, case.t_max)
    cached = {"shared_k": shared_k, "shared_v": e["shared_v"], "latent_k": latent_k, "latent_v": e["latent_v"]}
    if case.spec.qk_norm:
        cached["key_scale"] = e["key_scale"]
    cached = {name: _fill_garbage(t, valid, case, 10 + i) for i, (name, t) in enumerate(cached.items())}
    inputs = KernelInputs(q=q, basis_k=weights.basis_k, basis_v=weights.basis_v, lengths=lengths,
                          scale=case.spec.head_dim ** -0.5, rope=decode_rope(case.spec), **cached)
    return inputs, dict(e, q=e["q"] * case.q_scale)


def make_layer_inputs(case: Case) -> LayerInputs:
    """One decode step: a cache holding lengths[b] − 1 tokens, and token lengths[b] − 1 to append."""
    if case.level != "layer":
        raise ValueError(f"make_layer_inputs needs a layer case, got level {case.level!r}")
    weights, x, e = _projected_sequence(case)
    B = case.batch
    positions = torch.tensor(case.lengths, dtype=torch.int64) - 1  # [B]
    cache = allocate_cache(case.spec, B, case.t_max, torch.float64)
    valid = _valid(positions, case.t_max)
    for i, (name, t) in enumerate(cache.tensors().items()):
        setattr(cache, name, _fill_garbage(e[name], valid, case, 20 + i))
    cache.lengths = positions.to(torch.int32)
    x_t = x[torch.arange(B), positions]  # [B, d]
    return LayerInputs(weights, x_t, cache, positions).to(case.torch_dtype)


def make_model_inputs(case: Case) -> ModelInputs:
    """A whole sequence x [B, T, d] for the layer-model level."""
    if case.level != "layer-model":
        raise ValueError(f"make_model_inputs needs a layer-model case, got level {case.level!r}")
    weights = init_lrkv_weights(case.spec, seed=case.seed)
    x = torch.randn(case.batch, case.t_max, case.spec.d_model, generator=_generator(case, 1), dtype=torch.float64)
    return ModelInputs(weights, x, case.nan_garbage).to(case.torch_dtype)


def empty_cache(case: Case, dtype: torch.dtype) -> FactoredCache:
    """The cache a layer-model run starts from (garbage everywhere, lengths 0)."""
    cache = allocate_cache(case.spec, case.batch, case.t_max, torch.float64)
    valid = torch.zeros(case.batch, case.t_max, dtype=torch.bool)
    for i, (name, t) in enumerate(cache.tensors().items()):
        setattr(cache, name, _fill_garbage(t, valid, case, 30 + i))
    return cast_cache(cache, dtype)


def make_inputs(case: Case):
    """The input bundle of any level."""
    from .levels import get_level

    return get_level(case.level).make_inputs(case)


def case_shapes(case: Case) -> dict:
    s = case.spec
    shapes = {"batch": case.batch, "t_max": case.t_max, "lengths": list(case.lengths), "n_heads": s.n_heads,
              "head_dim": s.head_dim, "rank": s.rank, "d_model": s.d_model}
    if case.page_size:
        shapes["page_size"] = case.page_size
    if case.level == "kernel-extend":
        shapes["n_new"] = list(case.n_new)
    return shapes


from .grids import default_grid, mutant_grid, quick_grid  # noqa: E402  (grid builds on Case)

__all__ = ["Case", "KernelInputs", "LayerInputs", "ModelInputs", "make_kernel_inputs", "make_layer_inputs",
           "make_model_inputs", "make_inputs", "empty_cache", "default_grid", "quick_grid", "mutant_grid",
           "case_shapes", "CASE_LEVELS", "DTYPES"]
