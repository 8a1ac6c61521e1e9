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


@pytest.fixture(autouse=True, scope="module")
def _kernels_live(request):
    if request.node.get_closest_marker("own_kernel_mode"):
        yield
        return
    with kernel_context():
        yield
