"""A predicted GPU time for each Triton bench row, beside the measured one (docs/kernels.md,
"Memory traffic"): no measurement goes into it but the run's copy bandwidth.

  1. bytes: the traffic model of `lrkv.bench.traffic.predict` (loads + stores) for the row's
     shape and the launch the kernel picked (`BenchRow.launch`);
  2. occupancy: blocks per SM of the compiled kernel (`lrkv.kernels.occupancy`: registers,
     warps, shared memory), and the bandwidth a program sees, copy bandwidth × min(1,
     occupancy / FULL_OCCUPANCY) / resident programs;
  3. time: waves × the bytes of one program at that bandwidth, waves = ⌈programs / (SMs ×
     blocks per SM)⌉ (a partial last wave costs a whole one).

The compiled kernel's numbers come from the running Triton's compile report
(`ci/logs/compile-check-sm90-triton<version>.json`) when it holds the launch's variant and is
of this kernel source, else from compiling it now (`lrkv.kernels.occupancy.compiled_usage`,
ptxas only: no GPU needed); a row whose variant cannot be compiled gets no prediction and
says why.
"""

from __future__ import annotations

from dataclasses import fields
from types import SimpleNamespace

from ..kernels.occupancy import SM_MAX_WARPS, compiled_usage
from ..kernels.occupancy import occupancy as sm90_occupancy

H200_SMS = 132
# The occupancy at which a streaming kernel keeps enough loads in flight to reach the copy
# bandwidth: a rule of thumb (half the warps), not fitted to any run; below it the bandwidth
# falls in proportion (Little's law: bytes in flight ∝ resident warps).
FULL_OCCUPANCY = 0.5
VARIANT_OF_BACKEND = {"triton": "contiguous", "triton-paged": "paged", "triton-rope": "rope", "triton-fp8": "fp8"}


def waves(programs: int, n_sms: int, blocks: int) -> int:
    """Whole waves: ⌈programs / (SMs × blocks per SM)⌉."""
    return -(-programs // (n_sms * blocks))


def predict_time(bytes_moved: int, copy_bandwidth: float, programs: int, registers: int, num_warps: int,
                 n_sms: int = H200_SMS, shared: int = 0) -> dict:
    """Seconds for a launch moving `bytes_moved` (bytes/s of the copy bandwidth) as the module
    doc says, with the terms it is made of."""
    if bytes_moved < 0 or copy_bandwidth <= 0 or programs < 1 or registers < 1 or num_warps < 1 or n_sms < 1:
        raise ValueError("bytes >= 0, copy bandwidth > 0, programs, registers, warps and SMs >= 1")
    blocks = sm90_occupancy(registers, num_warps, shared).blocks_per_sm
    if blocks == 0:
        raise ValueError(f"{registers} registers x {num_warps} warps do not fit one SM")
    occupancy = blocks * num_warps / SM_MAX_WARPS
    bandwidth = copy_bandwidth * min(1.0, occupancy / FULL_OCCUPANCY)
    resident = n_sms * blocks
    w = waves(programs, n_sms, blocks)
    seconds = w * (bytes_moved / programs) / (bandwidth / resident)
    return dict(seconds=seconds, bytes=bytes_moved, programs=programs, registers=registers, num_warps=num_warps,
                blocks_per_sm=blocks, occupancy=occupancy, bandwidth=bandwidth, waves=w, n_sms=n_sms)


# ----------------------------------------------------------------------------- a bench row
def row_shape(row):
    """The traffic model's Shape of a bench row: B full sequences of T slots."""
    from ..spec import preset
    from .traffic import FP8_GRANULARITY, Shape

    spec = preset(row.scale).spec("lrkv")
    variant = VARIANT_OF_BACKEND[row.backend]
    return Shape(spec.n_heads, spec.head_dim, spec.rank, (row.seq_len,) * row.batch, (row.seq_len,) * row.batch,
                 cache_bytes=1 if variant == "fp8" else 2, rope_exact=variant == "rope", paged=variant == "paged",
                 fp8_granularity=FP8_GRANULARITY if variant == "fp8" else "")


def row_variant(row):
    """The compile_check Variant of a bench row's launch."""
    from ..kernels.occupancy import Variant
    from ..spec import preset

    spec = preset(row.scale).spec("lrkv")
    variant = VARIANT_OF_BACKEND[row.backend]
    cfg = SimpleNamespace(**row.launch)
    kw = dict(rope_exact=variant == "rope", paged=variant == "paged")
    if variant == "fp8":
        from .backends import FP8_GRANULARITY

        kw.update(fp8="e4m3", fp8_granularity=FP8_GRANULARITY)
    return Variant.from_launch(cfg, r=spec.rank, d_h=spec.head_dim, dtype=row.dtype, **kw)


def predict_row(row, copy_bandwidth: float, *, n_sms: int = H200_SMS, usage=None) -> dict:
    """The prediction of one Triton row (predict_time's terms, plus the registers' source);
    {'why': ...} when there is none. usage: Variant -> (the compiled kernel's numbers or
    None, source); default `lrkv.kernels.occupancy.compiled_usage`."""
    from .traffic import predict

    usage = usage or compiled_usage
    if row.backend not in VARIANT_OF_BACKEND or not row.launch:
        return {"why": "not a Triton row with a launch shape"}
    if not copy_bandwidth:
        return {"why": "no copy bandwidth measured"}
    compiled, source = usage(row_variant(row))
    if compiled is None or "reg" not in compiled:
        return {"why": source}
    cfg = SimpleNamespace(**row.launch)
    moved = predict(row_shape(row), cfg)["moved"]
    programs = row.batch * cfg.n_groups * cfg.num_splits
    return dict(predict_time(moved, copy_bandwidth, programs, compiled["reg"], cfg.num_warps, n_sms,
                             compiled.get("shared", 0)), registers_from=source)


def add_predictions(result, *, n_sms: int | None = None) -> None:
    """Fill `predicted_s` and `prediction` of every timed GPU Triton row that has none."""
    names = {f.name for f in fields(result.rows[0])} if result.rows else set()
    if "predicted_s" not in names:
        return
    if n_sms is None:
        n_sms = H200_SMS
        try:
            import torch

            if torch.cuda.is_available():
                n_sms = torch.cuda.get_device_properties(0).multi_processor_count
        except Exception:  # noqa: BLE001
            pass
    for row in result.rows:
        if row.device != "cuda" or row.status != "ok" or row.predicted_s is not None or not row.launch:
            continue
        if row.backend not in VARIANT_OF_BACKEND:
            continue
        row.prediction = predict_row(row, result.machine.copy_bandwidth or 0.0, n_sms=n_sms)
        row.predicted_s = row.prediction.get("seconds")
