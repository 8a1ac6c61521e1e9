"""The Triton kernels' tests (lrkv/kernels), with one preamble for every module here:

- the directory is skipped where Triton is not installed;
- every test is marked `triton` (`pytest -m triton` selects them; modules add their own
  `equivalence` / `gpu` marks);
- every module runs with the kernels live — `lrkv.kernels.testing.kernel_context()`: natively
  on a GPU, else in Triton's interpreter, restored afterwards so that tests elsewhere still see
  the fallback — unless it is marked `own_kernel_mode` (it picks the mode itself, test by test).
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("triton")

from lrkv.kernels.testing import kernel_context  # noqa: E402

HERE = Path(__file__).resolve().parent


def pytest_configure(config):
    config.addinivalue_line("markers", "own_kernel_mode: a kernel test module that chooses interpreter, GPU or "
                                       "fallback itself (no module-wide kernel_context)")


@pytest.hookimpl(tryfirst=True)  # before `-m` deselects anything
def pytest_collection_modifyitems(config, items):
    for item in items:
        if HERE in Path(item.path).resolve().parents:
            item.add_marker(pytest.mark.triton)


@pytest.fixture(autouse=True)
def _cuda_context_survives(request):
    """Natively, a kernel's illegal memory access is reported at the next synchronisation and
    leaves the CUDA context unusable: every later test in the process would fail for it. So each
    test ends with a synchronisation; if it raises, this test is the one that broke the context —
    under pytest-xdist the worker exits (xdist names this test as the crash and starts a fresh
    worker for the rest), else the session stops here."""
    yield
    import os

    import torch

    if not torch.cuda.is_available() or not torch.cuda.is_initialized():
        return
    try:
        torch.cuda.synchronize()
    except Exception as e:  # noqa: BLE001 - any CUDA error here is sticky
        msg = f"CUDA context lost during {request.node.nodeid}: {type(e).__name__}: {e}"
        print(msg, flush=True)
        if os.environ.get("PYTEST_XDIST_WORKER"):
            log = os.environ.get("LRKV_FAILURE_LOG")
            if log:
                with open(log, "a") as f:
                    f.write(f"==== {request.node.nodeid} (worker exit)\n{msg}\n\n")
            os._exit(3)
        pytest.exit(msg, returncode=3)


@pytest.fixture(autouse=True, scope="module")
def _kernels_live(request):
    if request.node.get_closest_marker("own_kernel_mode"):
        yield
        return
    with kernel_context():
        yield
