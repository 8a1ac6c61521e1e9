"""Backends for the `tp` level's fault tests (tests/distributed/test_tp_hang.py). Spawned ranks
unpickle them by class, so they live in an importable module, as a user's backend would."""

from __future__ import annotations

import os
import signal
import time

from lrkv.verify.builtin_backends import ReferenceBackend


class HangingDecode(ReferenceBackend):
    """The reference whose decode never returns, on every rank (a kernel stuck in a loop).
    stamp: a file each rank appends the time its decode began and its pid to (travels in the pickle)."""

    name = "hanging-decode"

    def __init__(self, stamp: str | None = None):
        super().__init__()
        self.stamp = stamp

    def decode_attention(self, *args, **kw):
        if self.stamp:
            with open(self.stamp, "a") as f:
                f.write(f"{time.time()!r} {os.getpid()}\n")
        signal.signal(signal.SIGINT, signal.SIG_IGN)  # as a kernel stuck in C would: SIGINT does not end it
        time.sleep(10**6)


def _load_forever():
    time.sleep(10**6)


class SlowToLoad(ReferenceBackend):
    """A backend whose unpickling on a rank never ends (an import that hangs): the ranks never start."""

    name = "slow-to-load"

    def __reduce__(self):
        return _load_forever, ()


# `lrkv verify --backend tests.test_helpers.tp_backends:hanging_decode` in a subprocess: the stamp from its environment
hanging_decode = HangingDecode(os.environ.get("LRKV_TEST_TP_STAMP"))
