"""What an exported engine is: one frozen config, serialised into the manifest, and the flat
tensor signature the engine is called with.

A config fixes everything the compiled graph bakes in — the spec (H, d_h, r, RoPE mode,
QK-norm), the level, the dtype, the softmax scale, where the weights live — and the
ranges of the two dynamic dims: the batch B and the cache length T_max (shared by every
cache tensor). A call outside those ranges is rejected in Python before the engine runs.

The signature: compiled engines take positional tensors only, with two dynamic dims — "B"
(batch) and "T" (cache length T_max) — and everything else static. A data-dependent check cannot live
inside an exported graph, so `check_call` does them in Python first: a cache longer than
the exported range, a position past the cache, a length past T_max, a wrong dtype — each
becomes a ValueError/TypeError naming the problem instead of an engine crash or a silent
out-of-range read.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ..checks import check_bool, check_choice, check_float, check_int
from ..reference.cache import FactoredCache
from ..reference.contract import validate_decode_inputs
from ..reference.fp8 import PARTS
from ..spec import AttentionSpec, as_dtype, dtype_name

ENGINES = ("onnx", "aoti", "tensorrt")
LEVELS = ("kernel", "layer")
WEIGHT_MODES = ("inputs", "embedded")
DEFAULT_OPSET = 18  # decomposed ops only: what TensorRT's ONNX parser and every ORT build take
NATIVE_OPSET = 23  # first opset with Attention / RMSNormalization
MAX_LENGTH = 2**31 - 1  # lengths and batch indices reach the engine as int32


def kernel_spec(spec: AttentionSpec) -> AttentionSpec:
    """The part of a spec the kernel level depends on: H, d_h, r, exact RoPE's theta, key_scale.

    d_model, norm_eps and the latent/aligned RoPE modes only change how the cache was filled,
    not the decode math, so kernel engines of such specs are one and the same engine.
    """
    rope = {"rope": "exact", "rope_theta": spec.rope_theta} if spec.rope == "exact" else {}
    return AttentionSpec.lrkv(spec.n_heads, spec.head_dim, spec.rank, qk_norm=spec.qk_norm, **rope)


@dataclass(frozen=True)
class ExportConfig:
    spec: AttentionSpec  # the LRKV layer; the kernel level uses H, d_h, r, rope, qk_norm
    level: str = "layer"  # "kernel" (decode_attention) or "layer" (layer_step)
    dtype: str = "float32"  # engine dtype: float32 | float64
    t_min: int = 1  # smallest cache length T_max accepted
    t_max: int = 256  # largest cache length T_max accepted (the finite Dim maximum)
    b_max: int = 16  # batch range is [1, b_max]
    weights: str = "inputs"  # layer level: "inputs" (engine arguments) | "embedded" (constants)
    scale: float | None = None  # kernel softmax scale; None = 1/sqrt(d_h) (never 1/sqrt(r))
    opset: int = DEFAULT_OPSET  # ONNX only
    external_data: bool = False  # ONNX only: embedded weights in a side file instead of the model

    def __post_init__(self) -> None:
        # Kinds first (lrkv.checks: a float t_max or a string external_data is refused, not
        # coerced), then the rules between fields.
        if not isinstance(self.spec, AttentionSpec):
            raise TypeError(f"spec must be an AttentionSpec, got {type(self.spec).__name__}")
        if self.spec.family != "lrkv":
            raise ValueError(f"export needs an lrkv spec, got family {self.spec.family!r}")
        if self.spec.rank < 1:
            raise ValueError("export needs rank >= 1 (a rank-0 LRKV layer is plain MQA; export that instead)")
        check_choice("level", self.level, LEVELS)
        check_int("t_min", self.t_min, minimum=1, maximum=MAX_LENGTH)
        # torch.export specialises a dim whose example is 0 or 1, so the example T is >= 2.
        check_int("t_max", self.t_max, minimum=2, maximum=MAX_LENGTH)
        check_int("b_max", self.b_max, minimum=1, maximum=MAX_LENGTH)
        check_choice("weights", self.weights, WEIGHT_MODES)
        if self.scale is not None:
            check_float("scale", self.scale, minimum=0.0, exclusive_minimum=True)
        check_int("opset", self.opset, minimum=18)  # torch.onnx's dynamo exporter starts at 18
        check_bool("external_data", self.external_data)
        if self.level == "kernel":
            object.__setattr__(self, "spec", kernel_spec(self.spec))
        if as_dtype(self.dtype) not in (torch.float32, torch.float64):
            raise ValueError(f"dtype must be float32 or float64, got {self.dtype!r}")
        object.__setattr__(self, "dtype", dtype_name(self.dtype))
        if self.t_min > self.t_max:
            raise ValueError(f"t_min must be <= t_max, got t_min={self.t_min}, t_max={self.t_max}")
        if self.level == "kernel" and self.weights != "inputs":
            raise ValueError("weights must be 'inputs' at the kernel level (it has no projection weights)")

    @property
    def torch_dtype(self) -> torch.dtype:
        return as_dtype(self.dtype)

    @property
    def softmax_scale(self) -> float:
        return self.spec.head_dim**-0.5 if self.scale is None else float(self.scale)

    @property
    def example_t(self) -> int:
        """The T of the export example: inside the range and >= 2 (no 0/1 specialisation)."""
        return max(2, min(self.t_min + 1, self.t_max))

    @property
    def example_b(self) -> int:
        return 2 if self.b_max >= 2 else 1

    def replace(self, **changes) -> ExportConfig:
        return dataclasses.replace(self, **changes)

    def key(self) -> str:
        """A stable id for caching built engines."""
        d = self.to_dict()
        return "|".join(f"{k}={d[k]}" for k in sorted(d))

    def to_dict(self) -> dict:
        d = dataclasses.asdict(self)
        d["spec"] = self.spec.to_dict()
        return d

    @classmethod
    def from_dict(cls, data: dict) -> ExportConfig:
        if not isinstance(data, dict) or not isinstance(data.get("spec"), dict):
            raise ValueError("config must be an object with a 'spec' object")
        names = {f.name for f in dataclasses.fields(cls)}
        if unknown := set(data) - names:
            raise ValueError(f"unknown ExportConfig fields: {sorted(unknown)}")
        data = dict(data)
        data["spec"] = AttentionSpec.from_dict(data["spec"])
        return cls(**data)


# ----------------------------------------------------------------------------- the signature
@dataclass(frozen=True)
class TensorSig:
    name: str
    shape: tuple  # ints are static; "B" / "T" are the dynamic dims
    dtype: str  # "float" (the engine dtype), "int32" or "float64" (RoPE frequencies)

    def torch_dtype(self, engine_dtype: torch.dtype) -> torch.dtype:
        return {"float": engine_dtype, "int32": torch.int32, "float64": torch.float64}[self.dtype]

    def concrete(self, B: int, T: int) -> tuple[int, ...]:
        return tuple({"B": B, "T": T}.get(s, s) for s in self.shape)


def weight_sigs(config: ExportConfig) -> list[TensorSig]:
    """LRKVWeights fields the layer step reads, with shapes (DESIGN §3)."""
    s = config.spec
    d, H, d_h, r = s.d_model, s.n_heads, s.head_dim, s.rank
    sigs = [
        TensorSig("w_q", (d, H, d_h), "float"), TensorSig("w_shared_k", (d, d_h), "float"),
        TensorSig("w_shared_v", (d, d_h), "float"), TensorSig("u_k", (H, d, r), "float"),
        TensorSig("u_v", (H, d, r), "float"), TensorSig("basis_k", (H, d_h, r), "float"),
        TensorSig("basis_v", (H, d_h, r), "float"), TensorSig("w_o", (H, d_h, d), "float"),
    ]
    if s.qk_norm:
        sigs += [TensorSig("q_gain", (H, d_h), "float"), TensorSig("k_gain", (H, d_h), "float")]
    if s.rope in ("latent", "aligned"):
        sigs.append(TensorSig("latent_freqs", (H, r // 2), "float64"))  # angles stay float64
    return sigs


def cache_sigs(config: ExportConfig) -> list[TensorSig]:
    s = config.spec
    H, d_h, r = s.n_heads, s.head_dim, s.rank
    sigs = [
        TensorSig("shared_k", ("B", "T", d_h), "float"), TensorSig("shared_v", ("B", "T", d_h), "float"),
        TensorSig("latent_k", ("B", "T", H, r), "float"), TensorSig("latent_v", ("B", "T", H, r), "float"),
    ]
    if s.qk_norm:
        sigs.append(TensorSig("key_scale", ("B", "T", H), "float"))
    return sigs


def input_sigs(config: ExportConfig) -> list[TensorSig]:
    s = config.spec
    H, d_h, r = s.n_heads, s.head_dim, s.rank
    if config.level == "kernel":
        sigs = [TensorSig("q", ("B", H, d_h), "float")] + cache_sigs(config)[:4]
        sigs += [TensorSig("basis_k", (H, d_h, r), "float"), TensorSig("basis_v", (H, d_h, r), "float"),
                 TensorSig("lengths", ("B",), "int32")]
        if s.qk_norm:
            sigs.append(TensorSig("key_scale", ("B", "T", H), "float"))
        return sigs
    sigs = [TensorSig("x_t", ("B", s.d_model), "float"), TensorSig("positions", ("B",), "int32")]
    sigs += cache_sigs(config)
    if config.weights == "inputs":
        sigs += weight_sigs(config)
    return sigs


def output_sigs(config: ExportConfig) -> list[TensorSig]:
    s = config.spec
    if config.level == "kernel":
        return [TensorSig("out", ("B", s.n_heads, s.head_dim), "float"), TensorSig("lse", ("B", s.n_heads), "float")]
    # Output names must differ from input names in ONNX: the updated cache is "new_<name>".
    return [TensorSig("y", ("B", s.d_model), "float")] + [
        TensorSig("new_" + c.name, c.shape, c.dtype) for c in cache_sigs(config)]


def dynamic_ranges(config: ExportConfig) -> dict[str, dict[str, int]]:
    """The manifest's record of what the engine accepts."""
    return {"B": {"min": 1, "max": config.b_max}, "T_max": {"min": config.t_min, "max": config.t_max}}


def _dims_of(sigs: list[TensorSig], tensors: list[torch.Tensor]) -> dict[str, int]:
    """Read B and T off the tensors, insisting every tensor agrees."""
    seen: dict[str, tuple[int, str]] = {}
    for sig, t in zip(sigs, tensors):
        if t.dim() != len(sig.shape):
            raise ValueError(f"{sig.name} must have {len(sig.shape)} dims {list(sig.shape)}, got {list(t.shape)}")
        for i, (want, got) in enumerate(zip(sig.shape, t.shape)):
            if isinstance(want, int):
                if got != want:
                    raise ValueError(f"{sig.name} must have shape {list(sig.shape)}, got {list(t.shape)} "
                                     f"(dim {i} is fixed at {want} in this engine)")
            elif want in seen and seen[want][0] != got:
                raise ValueError(f"{sig.name} has {want}={got} but {seen[want][1]} has {want}={seen[want][0]}")
            else:
                seen.setdefault(want, (got, sig.name))
    return {k: v[0] for k, v in seen.items()}


def check_call(config: ExportConfig, tensors: dict[str, torch.Tensor]) -> tuple[list[torch.Tensor], dict[str, int]]:
    """Validate named inputs against the engine; return them flat, in engine order, and {B, T}.

    Raises ValueError for any shape, range, position or length the engine was not built
    for, TypeError for a dtype it was not built for. Nothing is cast silently except the
    int dtype of lengths/positions (int64 -> int32), which is exact in range.
    """
    sigs = input_sigs(config)
    missing = [s.name for s in sigs if tensors.get(s.name) is None]
    if missing:
        raise ValueError(f"missing engine inputs: {missing}")
    flat = []
    for sig in sigs:
        t = tensors[sig.name]
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{sig.name} must be a torch.Tensor, got {type(t).__name__}")
        want = sig.torch_dtype(config.torch_dtype)
        if sig.dtype == "int32":
            if t.dtype not in (torch.int32, torch.int64):
                raise TypeError(f"{sig.name} must be int32 or int64, got {t.dtype}")
            t = t.to(torch.int32)
        elif t.dtype != want:
            raise TypeError(f"{sig.name} has dtype {t.dtype}, but this engine was exported for {want}")
        flat.append(t.contiguous())
    dims = _dims_of(sigs, flat)
    B, T = dims["B"], dims["T"]
    if not (1 <= B <= config.b_max):
        raise ValueError(f"batch B={B} is outside the exported range [1, {config.b_max}]; "
                         f"re-export with a larger --b-max")
    if not (config.t_min <= T <= config.t_max):
        raise ValueError(f"cache length T_max={T} is outside the exported range [{config.t_min}, {config.t_max}] "
                         f"of this engine; re-export with --t-max covering it")
    named = dict(zip([s.name for s in sigs], flat))
    if config.level == "kernel":
        # The decode contract's own checks (lengths in [0, T], finite valid slots, ...).
        cache = FactoredCache(*(named[p] for p in PARTS), named["lengths"], named.get("key_scale"))
        validate_decode_inputs(named["q"], cache, named["basis_k"], named["basis_v"], scale=config.softmax_scale)
    else:
        pos = named["positions"]
        if B and (int(pos.min()) < 0 or int(pos.max()) >= T):
            raise ValueError(f"positions must lie in [0, T_max={T}) (the slot being appended), "
                             f"got min {int(pos.min())}, max {int(pos.max())}")
        if not torch.isfinite(named["x_t"]).all():
            raise ValueError("x_t contains NaN or Inf")
    return flat, {"B": B, "T": T}
