"""The lrkv pytest plugin (entry point `pytest11`): run the equivalence suite on your backend.

    pytest --lrkv-backend mypkg.kernels:backend -m equivalence
    pytest --lrkv-backend mypkg.kernels:backend --lrkv-grid default -m equivalence

With `--lrkv-backend` (repeatable) the plugin adds lrkv.testing.suite — the case grid and
the hypothesis properties — to the collected tests, parametrized over the given backends.
A test module may instead name its own backends in `LRKV_BACKENDS` and import the suite's
tests (this repository's tests/verify/test_equivalence.py does). Loading the plugin imports
nothing heavy: torch and the harness load only when a suite test is collected.
"""

from __future__ import annotations

from pathlib import Path

import pytest

GRIDS = ("default", "quick", "mutants")
DEFAULT_GRID = "quick"


def pytest_addoption(parser) -> None:
    group = parser.getgroup("lrkv", "lrkv equivalence suite")
    group.addoption("--lrkv-backend", action="append", default=[], metavar="MODULE:ATTR",
                    help="run lrkv's equivalence suite (case grid + hypothesis properties) on this backend: "
                         "a registered name or package.module:attribute (repeatable)")
    group.addoption("--lrkv-grid", choices=GRIDS, default=None,
                    help=f"the case grid test_grid_case runs (default: {DEFAULT_GRID})")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "equivalence: equivalence of decode paths against the float64 oracle")


def _labels(metafunc) -> list[str]:
    own = getattr(metafunc.module, "LRKV_BACKENDS", None)
    if own is not None and not _is_suite(metafunc.module):
        return list(own)
    return list(metafunc.config.getoption("lrkv_backend"))


def _is_suite(module) -> bool:
    return getattr(module, "__name__", "") == "lrkv.testing.suite"


def _grid(metafunc) -> str:
    return (metafunc.config.getoption("lrkv_grid") or getattr(metafunc.module, "LRKV_GRID", None)
            or DEFAULT_GRID)


def pytest_generate_tests(metafunc) -> None:
    if "lrkv_target" not in metafunc.fixturenames:
        return
    labels = _labels(metafunc)
    if "lrkv_case" in metafunc.fixturenames:
        from .check import cases_for
        from .target import resolve

        params = []
        for label in labels:
            try:
                target = resolve(label)
            except (ValueError, TypeError, ImportError):
                params.append(pytest.param(label, None, id=f"{label}-load"))  # the test fails, naming why
                continue
            for p in cases_for(target, _grid(metafunc)):
                params.append(pytest.param(label, *p.values, marks=p.marks, id=f"{label}-{p.id}"))
        metafunc.parametrize(("lrkv_target", "lrkv_case"), params)
    else:
        metafunc.parametrize("lrkv_target", labels, ids=labels)


@pytest.hookimpl(tryfirst=True)  # before the mark plugin deselects by -m / -k
def pytest_collection_modifyitems(session, config, items) -> None:
    """With --lrkv-backend, add the suite's tests."""
    if not config.getoption("lrkv_backend"):
        return
    from . import suite

    path = Path(suite.__file__)
    if any(getattr(i, "path", None) == path for i in items):
        return  # collected already (its path was given on the command line)
    module = pytest.Module.from_parent(session, path=path)
    items.extend(session.genitems(module))

