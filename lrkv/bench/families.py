"""What the benchmark compares: one row family per decode path, at a paper scale.

Row families (all at the scale's H and d_h = 128, DESIGN §3 names):
  lrkv      factored LRKV decode, Eqs. 6–7, rank r of Table 7
  lrkv-mat  LRKV decode rebuilding K_h, V_h from the same factored cache
  mha       dense, n_kv = H                   (the baseline every ratio is taken against)
  gqa       dense, n_kv of Table 7
  gqa-eq    dense, n_kv chosen so the cache is LRKV's size (`equal_bytes_kv_heads`): the
            fair peer at equal bytes (a GPU target, lrkv.bench.targets)
  gqa-eq8   dense, n_kv chosen so its 16-bit cache is the size of LRKV's fp8 cache (half
            LRKV's 16-bit bytes): SDPA beside the `triton-fp8` row
  mqa       dense, n_kv = 1
  mla       absorbed MLA, d_c of Table 7 (the paper's simplified form: no rope channel)
  mlra      absorbed MLRA-4 of the public code (4 latent heads x 128 + a 64-wide k_pe)

Each family knows its spec, how to draw kernel-level inputs, its compiled step (the
time-major formulation of `lrkv.bench.steps`), the float64 reference it must agree with
(also the "einsum" formulation, compiled, for the profile comparison), and the bytes one
step must read: the cache payload of the spec's accounting plus the weights the step
touches (LRKV's bases, MLA/MLRA's absorbed up-projections).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..reference import dense, mla, mlra
from ..reference import lrkv as lrkv_ref
from ..spec import (MLRA4, AttentionSpec, PaperScale, cache_elements, cache_ratio, decode_bytes, dtype_bytes,
                    fp8_scale_bytes)
from .steps import dense_step, factored_step, materialized_step, mla_step, mlra_step

# Names of the tensors whose dim 1 is the cache length T (marked dynamic when compiling).
CACHE_TENSORS = frozenset({"shared_k", "shared_v", "latent_k", "latent_v", "k", "v", "latent", "k_rope"})


@dataclass(frozen=True)
class BenchFamily:
    name: str  # row label
    spec_family: str  # AttentionSpec.family it instantiates
    arg_names: tuple[str, ...]  # positional inputs of `step` (then scale)
    step: Callable  # the benchmark formulation (time-major, no validation)
    reference: Callable  # the reference kernel (einsum formulation), called with check=False
    description: str

    def spec(self, scale: PaperScale) -> AttentionSpec:
        if self.spec_family == "mlra":
            return scale.spec("mlra", **MLRA4)
        if self.name in ("gqa-eq", "gqa-eq8"):
            share = 0.5 if self.name == "gqa-eq8" else 1.0  # an fp8 element is half a 16-bit one
            return scale.spec("gqa", n_kv_heads=equal_bytes_kv_heads(scale.spec("lrkv"), share)[0])
        return scale.spec(self.spec_family)


def equal_bytes_kv_heads(lrkv: AttentionSpec, share: float = 1.0) -> tuple[int, float]:
    """(n_kv, GQA cache bytes / LRKV cache bytes) for the GQA whose cache is nearest LRKV's
    (× share: 0.5 for LRKV's fp8 cache against GQA at 16 bits).

    LRKV caches 2·d_h + 2·H·r elements per token (Eq. 8), GQA 2·n_kv·d_h; n_kv must divide
    H, so the divisor nearest in bytes is taken (ties: the smaller cache). At 2.5B (H=18,
    r=55) that is n_kv = 9 (1.031x LRKV's bytes); at 6.3B (H=32, r=54) n_kv = 16 (1.103x).
    """
    H, d_h = lrkv.n_heads, lrkv.head_dim
    target = share * cache_elements(lrkv, include_key_scale=False)  # 2·d_h + 2·H·r
    n_kv = min((n for n in range(1, H + 1) if H % n == 0), key=lambda n: (abs(2 * n * d_h - target), n))
    return n_kv, 2 * n_kv * d_h / target


_LRKV_ARGS = ("q", "shared_k", "shared_v", "latent_k", "latent_v", "basis_k", "basis_v", "lengths")
_LATENT_ARGS = ("q", "latent", "k_rope", "w_uk", "w_uv", "lengths")

FAMILIES: dict[str, BenchFamily] = {
    f.name: f
    for f in (
        BenchFamily("lrkv", "lrkv", _LRKV_ARGS, factored_step, lrkv_ref.decode_attention,
                    "LRKV factored (Eqs. 6-7)"),
        BenchFamily("lrkv-mat", "lrkv", _LRKV_ARGS, materialized_step, lrkv_ref.materialized_decode_attention,
                    "LRKV, K_h/V_h rebuilt from the factored cache"),
        BenchFamily("mha", "mha", ("q", "k", "v", "lengths"), dense_step, dense.decode_attention, "MHA"),
        BenchFamily("gqa", "gqa", ("q", "k", "v", "lengths"), dense_step, dense.decode_attention, "GQA"),
        BenchFamily("gqa-eq", "gqa", ("q", "k", "v", "lengths"), dense_step, dense.decode_attention,
                    "GQA with LRKV's cache bytes"),
        BenchFamily("gqa-eq8", "gqa", ("q", "k", "v", "lengths"), dense_step, dense.decode_attention,
                    "GQA with LRKV's fp8 cache bytes at 16 bits"),
        BenchFamily("mqa", "mqa", ("q", "k", "v", "lengths"), dense_step, dense.decode_attention, "MQA"),
        BenchFamily("mla", "mla", _LATENT_ARGS, mla_step, mla.absorbed_decode_attention, "MLA absorbed"),
        BenchFamily("mlra", "mlra", _LATENT_ARGS, mlra_step, mlra.absorbed_decode_attention,
                    "MLRA-4 absorbed"),
    )
}
BASELINE = "mha"


# ----------------------------------------------------------------------------- inputs
def make_inputs(
    spec: AttentionSpec, batch: int, t_max: int, *, dtype: torch.dtype = torch.float32,
    device: str | torch.device = "cpu", seed: int = 0, lengths: list[int] | None = None,
) -> dict[str, torch.Tensor | None]:
    """Kernel-level inputs of spec's family, O(1) logits, full caches unless lengths say otherwise.

    Drawn in float32 on the device (then cast) so that a 128K cache does not pass through
    float64; seeded, so every family at a shape sees the same kind of data.
    """
    g = torch.Generator(device=device).manual_seed(seed)
    H, d_h = spec.n_heads, spec.head_dim

    def rn(*shape, std=1.0):
        return (torch.randn(*shape, generator=g, device=device, dtype=torch.float32) * std).to(dtype)

    lens = torch.tensor(lengths if lengths is not None else [t_max] * batch, dtype=torch.int32, device=device)
    out: dict[str, torch.Tensor | None] = {"lengths": lens}
    if spec.family == "lrkv":
        r = spec.rank
        out.update(
            q=rn(batch, H, d_h), shared_k=rn(batch, t_max, d_h), shared_v=rn(batch, t_max, d_h),
            latent_k=rn(batch, t_max, H, r), latent_v=rn(batch, t_max, H, r),
            basis_k=rn(H, d_h, r, std=r**-0.5), basis_v=rn(H, d_h, r, std=r**-0.5),
        )
    elif spec.family in ("mha", "gqa", "mqa"):
        n = spec.n_kv_heads
        out.update(q=rn(batch, H, d_h), k=rn(batch, t_max, n, d_h), v=rn(batch, t_max, n, d_h))
    elif spec.family == "mla":
        c, dr = spec.latent_dim, spec.rope_dim
        out.update(
            q=rn(batch, H, d_h + dr), latent=rn(batch, t_max, c), k_rope=rn(batch, t_max, dr) if dr else None,
            w_uk=rn(H, c, d_h, std=c**-0.5), w_uv=rn(H, c, d_h, std=c**-0.5),
        )
    elif spec.family == "mlra":
        L, c, dr, nb = spec.n_latent_heads, spec.latent_dim, spec.rope_dim, spec.n_branches
        out.update(
            q=rn(batch, H, d_h + dr), latent=rn(batch, t_max, L, c), k_rope=rn(batch, t_max, dr) if dr else None,
            w_uk=rn(nb, H, c, d_h, std=c**-0.5), w_uv=rn(nb, H, c, d_h, std=c**-0.5),
        )
    else:  # pragma: no cover - FAMILIES covers every spec family
        raise ValueError(f"no bench inputs for family {spec.family!r}")
    return out


def step_args(family: BenchFamily, inputs: dict) -> tuple:
    """Positional arguments of family.step / family.reference (without scale)."""
    return tuple(inputs[n] for n in family.arg_names)


def reference_step(family: BenchFamily) -> Callable:
    """The reference kernel with the step's signature (validation off: timed code validates nothing)."""
    return functools.partial(_call_reference, family.reference)


def _call_reference(fn, *args):
    *tensors, scale = args
    return fn(*tensors, scale=scale, check=False)


# ----------------------------------------------------------------------------- bytes
def weight_elements(spec: AttentionSpec) -> int:
    """Weight elements one decode step reads besides the cache (per layer)."""
    H, d_h = spec.n_heads, spec.head_dim
    if spec.family == "lrkv":
        return 2 * H * d_h * spec.rank  # basis_k, basis_v
    if spec.family == "mla":
        return 2 * H * spec.latent_dim * d_h  # W_UK, W_UV (absorbed)
    if spec.family == "mlra":
        return 2 * spec.n_branches * H * spec.latent_dim * d_h
    return 0


def read_bytes(spec: AttentionSpec, batch: int, seq_len: int, dtype, cache=None) -> dict[str, int]:
    """Bytes one step must read: cache payload (spec accounting, Eq. 8 for lrkv) + weights.

    cache: (fp8 format, granularity) of a row whose LRKV cache is stored in fp8 — one byte per
    element plus its float32 scales (`fp8_scale_bytes`); None: the cache at `dtype`. The query
    (B·H·d_h elements) is left out: under 0.1% of any row in the grids.
    """
    if cache is not None:
        payload = decode_bytes(spec, seq_len, "fp8", batch=batch) + fp8_scale_bytes(spec, cache[1],
                                                                                  tokens=batch * seq_len)
    else:
        payload = decode_bytes(spec, seq_len, dtype, batch=batch)
    weights = weight_elements(spec) * dtype_bytes(dtype)
    return {"payload": payload, "weights": weights, "total": payload + weights}


def payload_ratio(spec: AttentionSpec) -> float:
    """The cache payload as a fraction of MHA's at the same H, d_h (Eq. 9 for lrkv)."""
    return float(cache_ratio(spec))


def temporaries_bytes(family: BenchFamily, spec: AttentionSpec, batch: int, seq_len: int, dtype) -> int:
    """Memory a step allocates while it runs, beyond its inputs (for the memory budget).

    lrkv-mat builds R_h B_h^T and then K_h = S + R_h B_h^T (and the same for V): four
    MHA-sized [B, T, H, d_h] tensors at the peak. The other steps' temporaries are O(B·T·H).
    """
    if family.name == "lrkv-mat":
        return 4 * batch * seq_len * spec.n_heads * spec.head_dim * dtype_bytes(dtype)
    return 0
