"""Roofline of one decode step: where LRKV is bandwidth-bound and where its arithmetic matters.

Per sequence and layer, at H heads of width d_h, rank r, cache length T, b bytes/element:

  MHA    bytes 2·H·d_h·T·b            FLOPs 4·H·d_h·T                 intensity 2/b FLOP/B
  LRKV   bytes 2·(d_h + H·r)·T·b      FLOPs 4·H·(d_h + r)·T + 4·H·r·d_h
         (+ the bases, 2·H·d_h·r·b, once per step)

so relative to MHA the bytes are ρ = 1/H + r/d_h (Eq. 9) and the arithmetic is
α = 1 + r/d_h + r/T (`decode_arithmetic_ratio`): LRKV's intensity is α/ρ times MHA's —
about 3x at the paper's ranks. It stays bandwidth-bound while that intensity is below the
machine balance P/BW, i.e. while the kernel sustains at least (intensity x BW) FLOP/s.

Two places where the extra arithmetic shows:
  * small T: the r/T term and the bases' bytes are per-step constants; they matter when
    B·T is within ~20x of H·d_h·r/(d_h + H·r) tokens (about 2K at H=18, r=55);
  * an unfused implementation: the shared block's contractions carry MHA's whole
    arithmetic (the "1" in α) on 1/H of the bytes. Run as separate GEMMs (as inductor does
    on CPU) they do not overlap the latent stream, and the step costs
        t_LRKV / t_MHA ≈ ρ + 2·BW / (b·P_gemm)
    which is the CPU target's problem: 1.15·ρ needs P_gemm ≥ 2·BW/(0.15·ρ·b).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..spec import AttentionSpec, PaperScale, decode_macs, dtype_bytes
from .families import FAMILIES, payload_ratio, read_bytes


@dataclass(frozen=True)
class Roof:
    name: str
    bandwidth: float  # bytes/s (copy bandwidth, read + write counted)
    peak_flops: float  # FLOP/s
    dtype: str  # the cache/compute dtype the roof is for
    source: str  # where the numbers come from

    @property
    def balance(self) -> float:
        """FLOP per byte at the ridge point."""
        return self.peak_flops / self.bandwidth


# The H200 the speed targets are stated for: 4.3 TB/s measured copy bandwidth, ~790 TFLOP/s dense bf16.
H200_TENSOR = Roof("H200, bf16 tensor cores", 4.3e12, 790e12, "bfloat16",
                   "copy bandwidth measured on an H200 (log not committed); dense bf16 tensor-core peak")
# A one-query decode is a matrix-VECTOR product per head: without head grouping it cannot
# use tensor cores, so the CUDA-core FP32 peak (GH100 datasheet, 67 TFLOP/s) is its roof.
H200_SIMT = Roof("H200, CUDA cores (no tensor cores)", 4.3e12, 67e12, "bfloat16",
                 "copy bandwidth measured on an H200 (log not committed); GH100 FP32 non-tensor peak (datasheet)")


def step_flops(spec: AttentionSpec, seq_len: int, batch: int = 1) -> int:
    """FLOPs of one decode step (2 per multiply-add of `decode_macs`)."""
    return 2 * batch * decode_macs(spec, seq_len)


def intensity(spec: AttentionSpec, seq_len: int, batch: int, dtype) -> float:
    """FLOP per byte read (payload + weights)."""
    return step_flops(spec, seq_len, batch) / read_bytes(spec, batch, seq_len, dtype)["total"]


def roofline_time(spec: AttentionSpec, seq_len: int, batch: int, roof: Roof) -> tuple[float, str]:
    """max(bytes/BW, FLOPs/P) and which side binds."""
    t_mem = read_bytes(spec, batch, seq_len, roof.dtype)["total"] / roof.bandwidth
    t_cmp = step_flops(spec, seq_len, batch) / roof.peak_flops
    return (t_mem, "memory") if t_mem >= t_cmp else (t_cmp, "compute")


def unfused_ratio(payload_ratio: float, roof: Roof) -> float:
    """t_LRKV/t_MHA when the shared block's GEMMs (MHA's FLOPs) run after, not under, the stream."""
    b = dtype_bytes(roof.dtype)
    return payload_ratio + 2 * roof.bandwidth / (b * roof.peak_flops)


@dataclass(frozen=True)
class RooflineRow:
    roof: str
    scale: str
    family: str
    seq_len: int
    batch: int
    intensity: float  # FLOP/B
    balance: float  # FLOP/B at the ridge
    bound: str  # "memory" | "compute"
    time_s: float  # the roofline's lower bound
    vs_mha: float  # that bound over MHA's
    min_flops_for_bw_bound: float  # FLOP/s a kernel must sustain to stay bandwidth-bound


def roofline_rows(roof: Roof, scales: list[PaperScale], seq_lens: list[int], batch: int = 8,
                  families: tuple[str, ...] = tuple(FAMILIES)) -> list[RooflineRow]:
    rows = []
    for sc in scales:
        mha_spec = FAMILIES["mha"].spec(sc)
        for T in seq_lens:
            t_mha, _ = roofline_time(mha_spec, T, batch, roof)
            for name in families:
                if name == "lrkv-mat":
                    continue  # not a cache layout: same bytes as lrkv, more arithmetic by construction
                spec = FAMILIES[name].spec(sc)
                t, bound = roofline_time(spec, T, batch, roof)
                i = intensity(spec, T, batch, roof.dtype)
                rows.append(RooflineRow(roof.name, sc.label, name, T, batch, i, roof.balance, bound, t,
                                        t / t_mha, i * roof.bandwidth))
    return rows


def small_t_threshold(spec: AttentionSpec, fraction: float = 0.05) -> int:
    """B·T below which the bases (read once per step) exceed `fraction` of the LRKV step's bytes."""
    H, d_h, r = spec.n_heads, spec.head_dim, spec.rank
    return int(H * d_h * r / (fraction * (d_h + H * r)))


def summary(roofs: list[Roof], scales: list[PaperScale], seq_lens: list[int], batch: int = 8) -> dict:
    """Everything the note says, as data (stored in the bench JSON)."""
    out = {"roofs": [asdict(r) | {"balance": r.balance} for r in roofs], "rows": [], "lrkv": []}
    for roof in roofs:
        out["rows"] += [asdict(r) for r in roofline_rows(roof, scales, seq_lens, batch)]
        for sc in scales:
            spec = FAMILIES["lrkv"].spec(sc)
            rho = payload_ratio(spec)
            big_t = max(seq_lens)
            i = intensity(spec, big_t, batch, roof.dtype)
            out["lrkv"].append(dict(
                roof=roof.name, scale=sc.label, H=spec.n_heads, d_h=spec.head_dim, r=spec.rank,
                payload_ratio=rho, intensity=i, balance=roof.balance, headroom=roof.balance / i,
                min_flops_for_bw_bound=i * roof.bandwidth,
                unfused_ratio=unfused_ratio(rho, roof), target_ratio=1.15 * rho,
                gemm_flops_for_target=2 * roof.bandwidth / (0.15 * rho * dtype_bytes(roof.dtype)),
                small_t_tokens=small_t_threshold(spec),
            ))
    return out


def render(summary_data: dict) -> str:
    """The roofline note as plain text (printed by `lrkv bench --roofline`, quoted in docs/bench.md)."""
    lines = []
    for roof in summary_data["roofs"]:
        lines.append(f"{roof['name']}: BW {roof['bandwidth'] / 1e9:,.1f} GB/s, peak {roof['peak_flops'] / 1e12:,.3g} "
                     f"TFLOP/s ({roof['dtype']}), balance {roof['balance']:.3g} FLOP/B  [{roof['source']}]")
        for d in (d for d in summary_data["lrkv"] if d["roof"] == roof["name"]):
            bound = "bandwidth-bound" if d["intensity"] < d["balance"] else "COMPUTE-bound"
            lines.append(
                f"  LRKV {d['scale']} (H={d['H']}, r={d['r']}): intensity {d['intensity']:.2f} FLOP/B -> {bound} "
                f"({d['headroom']:.1f}x headroom); stays so while the kernel sustains "
                f">= {d['min_flops_for_bw_bound'] / 1e12:.3g} TFLOP/s"
            )
            lines.append(
                f"    unfused (shared-block GEMMs after the latent stream): t/t_MHA ~ {d['unfused_ratio']:.3f} "
                f"vs payload {d['payload_ratio']:.3f} (target 1.15x = {d['target_ratio']:.3f} needs GEMM "
                f">= {d['gemm_flops_for_target'] / 1e12:.3g} TFLOP/s)"
            )
            lines.append("    per-step constants (bases, r/T) exceed 5% of the bytes below "
                         f"B*T ~ {d['small_t_tokens']} tokens")
        peers = [r for r in summary_data["rows"] if r["roof"] == roof["name"] and r["family"] != "lrkv"]
        for scale in dict.fromkeys(r["scale"] for r in peers):
            big = max(r["seq_len"] for r in peers if r["scale"] == scale)
            cells = [f"{r['family']} {r['intensity']:.3g}{'' if r['bound'] == 'memory' else ' (COMPUTE)'}"
                     for r in peers if r["scale"] == scale and r["seq_len"] == big]
            lines.append(f"  peers {scale}, T={big}: FLOP/B " + ", ".join(cells))
    return "\n".join(lines)


def machine_roof(machine, dtype: str) -> Roof | None:
    """The roof of the machine a run measured (copy bandwidth, large-GEMM peak), if it did."""
    if not machine.copy_bandwidth or not machine.peak_flops:
        return None
    return Roof(f"this machine: {machine.name}", machine.copy_bandwidth, machine.peak_flops, dtype,
                f"measured in the run: {machine.threads} thread(s), copy + {machine.flops_dtype} GEMM")
