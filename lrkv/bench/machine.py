"""The machine a benchmark ran on, and the two numbers its roofline needs, measured in the run.

Absolute times mean nothing without the machine, so every result carries a `Machine`:
CPU model (from /proc/cpuinfo) or GPU name, core count, the threads torch used, the ISA
torch dispatches to, torch/triton versions, and two measurements taken in the same run:

  copy_bandwidth  bytes moved per second by a large device copy, read + write counted
                  (the convention of the H200's 4.3 TB/s); buffers far larger than the
                  last-level cache, so this is memory, not cache, bandwidth
  peak_flops      a large square GEMM at the benchmark dtype: what the compute units
                  sustain when they are fed, the roof of the roofline
"""

from __future__ import annotations

import os
import platform
from dataclasses import asdict, dataclass

import torch

COPY_BYTES_CPU = 256 * 2**20  # per buffer; 8x a 32 MiB L3
COPY_BYTES_GPU = 1 * 2**30  # per buffer; 20x an H200's 50 MiB L2
GEMM_N = {"cpu": 1024, "cuda": 8192}


@dataclass(frozen=True)
class Machine:
    device: str  # "cpu" | "cuda"
    name: str  # CPU model name or GPU name
    cores: int  # logical CPUs this process may run on
    threads: int  # torch intra-op threads used for the timings
    isa: str  # what torch dispatches CPU kernels to (AVX512, AVX2, ...)
    llc_bytes: int | None  # last-level cache size (CPU), None if unknown
    memory_bytes: int | None  # RAM (CPU) or device memory (GPU)
    torch: str
    triton: str | None
    python: str
    platform: str
    copy_bandwidth: float | None = None  # bytes/s, read + write, measured in the run
    peak_flops: float | None = None  # FLOP/s of a large GEMM at the bench dtype, measured in the run
    flops_dtype: str | None = None

    def label(self) -> str:
        """One line for a table caption or a plot title."""
        bits = [self.name]
        if self.device == "cpu":
            plural = "s" if self.threads != 1 else ""
            bits.append(f"{self.cores} cores ({self.threads} thread{plural} used), {self.isa}")
        bits.append(f"torch {self.torch}")
        if self.copy_bandwidth:
            bits.append(f"copy {self.copy_bandwidth / 1e9:.1f} GB/s")
        return ", ".join(bits)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict) -> Machine:
        return cls(**data)


def cpu_model() -> str:
    """The 'model name' line of /proc/cpuinfo (family/model added when the name is generic)."""
    fields: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if ":" in line:
                    key, _, value = line.partition(":")
                    fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    name = fields.get("model name") or platform.processor() or platform.machine() or "unknown CPU"
    if len(name.split()) <= 2 and "cpu family" in fields:  # VMs often report just "AMD EPYC"
        name += f" (family {fields['cpu family']}, model {fields.get('model', '?')})"
    return name


def _llc_bytes() -> int | None:
    """Size of the highest cache level of cpu0, from sysfs."""
    base = "/sys/devices/system/cpu/cpu0/cache"
    best = None
    try:
        for entry in sorted(e for e in os.listdir(base) if e.startswith("index")):
            path = os.path.join(base, entry)
            with open(os.path.join(path, "level")) as f:
                level = int(f.read())
            with open(os.path.join(path, "size")) as f:
                text = f.read().strip()
            mult = {"K": 2**10, "M": 2**20, "G": 2**30}.get(text[-1:], 1)
            size = int(text.rstrip("KMG")) * mult
            if best is None or level > best[0]:
                best = (level, size)
    except (OSError, ValueError):
        return None
    return best[1] if best else None


def _mem_bytes() -> int | None:
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def available_memory(device: str) -> int | None:
    """Bytes a benchmark may still allocate (MemAvailable, or free device memory)."""
    if device == "cuda":
        free, _ = torch.cuda.mem_get_info()
        return int(free)
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return None


def _triton_version() -> str | None:
    try:
        import triton
    except Exception:  # noqa: BLE001 — a broken install is "no triton" here
        return None
    return getattr(triton, "__version__", "unknown")


def describe_machine(device: str = "cpu", *, threads: int | None = None) -> Machine:
    """The machine, without measurements (see `measure`)."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        cores = os.cpu_count() or 1
    if device == "cuda":
        name = torch.cuda.get_device_name()
        mem = torch.cuda.get_device_properties(0).total_memory
        llc = None
    else:
        name, mem, llc = cpu_model(), _mem_bytes(), _llc_bytes()
    return Machine(
        device=device, name=name, cores=cores, threads=threads or torch.get_num_threads(),
        isa=torch.backends.cpu.get_cpu_capability(), llc_bytes=llc, memory_bytes=mem,
        torch=torch.__version__, triton=_triton_version(), python=platform.python_version(),
        platform=platform.platform(),
    )


def measure_copy_bandwidth(device: str = "cpu", nbytes: int | None = None, repeats: int = 5) -> float:
    """Best-of-`repeats` bytes/s of dst.copy_(src), read + write counted."""
    import time

    nbytes = nbytes or (COPY_BYTES_GPU if device == "cuda" else COPY_BYTES_CPU)
    src = torch.empty(nbytes // 4, dtype=torch.float32, device=device).fill_(1.0)
    dst = torch.empty_like(src)
    dst.copy_(src)  # fault the pages in
    best = float("inf")
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            dst.copy_(src)
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) * 1e-3)
        else:
            t0 = time.perf_counter()
            dst.copy_(src)
            best = min(best, time.perf_counter() - t0)
    return 2 * nbytes / best


def measure_gemm_flops(device: str = "cpu", dtype: torch.dtype = torch.float32, n: int | None = None,
                       repeats: int = 3) -> float:
    """Best-of-`repeats` FLOP/s of an n x n x n GEMM at dtype."""
    import time

    n = n or GEMM_N.get(device, 1024)
    a = torch.randn(n, n, device=device).to(dtype)
    b = torch.randn(n, n, device=device).to(dtype)
    a @ b  # warm up (library init, thread pool)
    best = float("inf")
    for _ in range(repeats):
        if device == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            a @ b
            end.record()
            end.synchronize()
            best = min(best, start.elapsed_time(end) * 1e-3)
        else:
            t0 = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t0)
    return 2 * n**3 / best


def measure(machine: Machine, dtype: torch.dtype = torch.float32) -> Machine:
    """The machine with copy bandwidth and GEMM peak measured now (a few seconds)."""
    from dataclasses import replace

    return replace(
        machine, copy_bandwidth=measure_copy_bandwidth(machine.device),
        peak_flops=measure_gemm_flops(machine.device, dtype), flops_dtype=str(dtype).removeprefix("torch."),
    )
