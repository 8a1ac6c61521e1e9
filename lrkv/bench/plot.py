"""Plot of a result: time and achieved bandwidth versus cache length, one line per family.

matplotlib is an optional extra (`pip install lrkv[plot]`); without it `plot_result`
returns None and says why, and the table and JSON are unaffected.
"""

from __future__ import annotations

from pathlib import Path

from .result import BenchResult

COLORS = {"lrkv": "C3", "lrkv-mat": "C1", "mha": "C0", "gqa": "C2", "mqa": "C9", "mla": "C4", "mlra": "C5"}
LINESTYLES = {"inductor": "-", "triton": "-", "sdpa": "--", "eager": ":"}


def matplotlib_missing() -> str | None:
    """None when matplotlib imports, else the reason."""
    try:
        import matplotlib  # noqa: F401
    except ImportError as e:
        return f"matplotlib is not installed ({e}); install the plot extra: pip install 'lrkv[plot]'"
    return None


def plot_result(result: BenchResult, path: str | Path) -> tuple[Path | None, str]:
    """Write the figure to path; returns (path or None, a message)."""
    missing = matplotlib_missing()
    if missing:
        return None, missing
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    rows = result.ok_rows()
    if not rows:
        return None, "no timed rows to plot"
    panels = sorted({(r.scale, r.batch) for r in rows}, key=lambda p: (p[0], p[1]))
    fig, axes = plt.subplots(len(panels), 2, figsize=(11, 3.4 * len(panels)), squeeze=False)
    for (scale, batch), (ax_t, ax_bw) in zip(panels, axes):
        for (family, backend) in dict.fromkeys((r.family, r.backend) for r in rows):
            pts = sorted((r.seq_len, r.time_s, r.bandwidth) for r in rows
                         if (r.scale, r.batch, r.family, r.backend) == (scale, batch, family, backend))
            if not pts:
                continue
            T, t, bw = zip(*pts)
            style = dict(color=COLORS.get(family, "k"), linestyle=LINESTYLES.get(backend, ":"), marker="o",
                         linewidth=2.2 if family == "lrkv" else 1.2, markersize=3)
            label = family if backend in ("inductor",) else f"{family} ({backend})"
            ax_t.plot(T, [x * 1e3 for x in t], label=label, **style)
            ax_bw.plot(T, [x / 1e9 for x in bw], label=label, **style)
        if result.machine.copy_bandwidth:
            ax_bw.axhline(result.machine.copy_bandwidth / 1e9, color="grey", linestyle=":", linewidth=1,
                          label="copy bandwidth")
        for ax, ylabel in ((ax_t, "time per step (ms)"), (ax_bw, "bytes read / time (GB/s)")):
            ax.set_xscale("log", base=2)
            ax.set_xlabel("cache length T")
            ax.set_ylabel(ylabel)
            ax.set_title(f"{scale}, B={batch}", fontsize=9)
            ax.grid(True, which="both", alpha=0.3)
        ax_t.set_yscale("log")
    axes[0][1].legend(fontsize=7, loc="best")
    fig.suptitle(f"lrkv bench — {result.machine.label()}", fontsize=9)
    fig.tight_layout()
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path, f"plot written to {path}"
