"""lrkv.testing — verify your own decode backend from your own test suite (DESIGN §2).

    from lrkv.testing import check_backend, cases_for, check_case, properties

    def test_my_kernel():
        check_backend("mypkg.kernels:backend", grid="quick")   # raises with replay commands

    @pytest.mark.parametrize("case", cases_for(backend, "quick"))
    def test_case(case):
        check_case(backend, case)

or, without writing tests: `pytest --lrkv-backend mypkg.kernels:backend -m equivalence`
(the plugin, lrkv.testing.plugin). `lrkv init` writes a starter project that does both.
"""

from __future__ import annotations

import importlib

# name -> submodule; loaded on first use, so that the pytest plugin (lrkv.testing.plugin)
# costs nothing in test runs that do not use it
_EXPORTS = {"check_backend": "check", "check_case": "check", "cases_for": "check", "grid_cases": "check",
            "NotVerified": "check", "check_server_properties": "check",
            "Report": "report_view", "Target": "target", "resolve": "target", "properties": None}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'lrkv.testing' has no attribute {name!r}")
    sub = _EXPORTS[name]
    if sub is None:
        return importlib.import_module(f"{__name__}.{name}")
    return getattr(importlib.import_module(f"{__name__}.{sub}"), name)
