"""A timed callable with its inputs bound, replayed from a CUDA graph where one can be captured."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch


@dataclass
class Prepared:
    call: Callable[[], object]  # the timed callable, inputs bound
    note: str = ""  # how it runs (e.g. "cuda graph")


def graphed(fn: Callable[[], object]) -> Callable[[], object]:
    """fn captured in a CUDA graph; replaying it excludes Python and launch overhead."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        for _ in range(2):
            fn()  # compile, autotune and warm up outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        fn()
    return graph.replay


def finish(fn: Callable[[], object], device: str) -> Prepared:
    if device != "cuda":
        return Prepared(fn)
    try:
        return Prepared(graphed(fn), "cuda graph")
    except Exception as e:  # noqa: BLE001 — capture can fail for many reasons; time eagerly then
        torch.cuda.synchronize()
        return Prepared(fn, f"eager launch (graph capture failed: {type(e).__name__})")
