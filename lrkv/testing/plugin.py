"""The lrkv pytest plugin (entry point `pytest11`): run the equivalence suite on your backend.

    pytest --lrkv-backend mypkg.kernels:backend -m equivalence
    pytest --lrkv-backend mypkg.kernels:backend --lrkv-grid default -m equivalence

With `--lrkv-backend` (repeatable) the plugin adds lrkv.testing.suite — the case grid and
the hypothesis properties — to the collected tests, parametrized over the given backends.
A test module may instead name its own backends in `LRKV_BACKENDS` and import the suite's
tests (this repository's tests/verify/test_equivalence.py does). Loading the plugin imports
nothing heavy: torch and the harness load only when a suite test is collected.

A session is never green on nothing: at its end the plugin prints how many cases each
backend (`--lrkv-backend`, or a test module's LRKV_BACKENDS) verified — grid cases and drawn
examples that met the rule — per case level with the features they covered, and fails the
session, naming why, unless `--lrkv-allow-empty` is given, when a backend verified none
(unavailable here, every case skipped or declined, or every test deselected) or, with the
case grid run for it, none at a level it declares (its paged or extend path declined or
skipped throughout).
"""

from __future__ import annotations

import os

from pathlib import Path

import pytest

from .tally import NEEDS, TALLIES, Tally, tally

GRIDS = ("default", "quick", "mutants")
DEFAULT_GRID = "quick"


def pytest_addoption(parser) -> None:
    group = parser.getgroup("lrkv", "lrkv equivalence suite")
    group.addoption("--lrkv-backend", action="append", default=[], metavar="MODULE:ATTR",
                    help="run lrkv's equivalence suite (case grid + hypothesis properties) on this backend: "
                         "a registered name or package.module:attribute (repeatable)")
    group.addoption("--lrkv-grid", choices=GRIDS, default=None,
                    help=f"the case grid test_grid_case runs (default: {DEFAULT_GRID})")
    group.addoption("--lrkv-allow-empty", action="store_true", default=False,
                    help="do not fail the session when a backend verified no case, or none at a level it "
                         "declares (unavailable here, every case skipped or deselected)")
    group.addoption("--lrkv-in-process", action="store_true", default=False,
                    help="call the backend in the pytest process instead of lrkv's worker process (for a "
                         "debugger; a crash or os._exit in the backend then ends the session)")


def pytest_configure(config) -> None:
    config.addinivalue_line("markers", "equivalence: equivalence of decode paths against the float64 oracle")
    TALLIES.append(Tally())
    config._lrkv_tally = TALLIES[-1]
    if config.getoption("lrkv_in_process", False):  # read by lrkv.verify.isolation.default_mode
        os.environ["LRKV_ISOLATION"] = "inprocess"


def pytest_unconfigure(config) -> None:
    t = getattr(config, "_lrkv_tally", None)
    if t is not None and t in TALLIES:
        TALLIES.remove(t)


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


@pytest.hookimpl(trylast=True)
def pytest_collection_finish(session) -> None:
    t = getattr(session.config, "_lrkv_tally", None)
    if t is None:
        return
    for item in session.items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        label = params.get("lrkv_target")
        if isinstance(label, str):
            t.labels[item.nodeid] = label
            case = params.get("lrkv_case")
            if case is not None:  # a grid case: the level rule applies to this label
                t.grid_labels.add(label)
                t.grid_levels[item.nodeid] = NEEDS.get(case.level, case.level)


def pytest_runtest_logreport(report) -> None:
    t = tally()
    if t is None or report.nodeid not in t.labels:
        return
    if report.failed and report.when in ("setup", "call"):
        t.failed.add(report.nodeid)
    if not report.skipped:
        return
    reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
    t.skipped(t.labels[report.nodeid], reason.removeprefix("Skipped: "), t.grid_levels.get(report.nodeid))


def _why_skipped(skips) -> str:
    n = sum(skips.values())
    return f"{n} skipped: " + "; ".join(f"{r} ({c})" for r, c in skips.most_common(3))


def _empty(config) -> dict[str, str]:
    """Backend label -> why it verified nothing, or nothing at a level it declares (with the
    case grid run for it), for each such label: --lrkv-backend's and a test file's LRKV_BACKENDS."""
    t = getattr(config, "_lrkv_tally", None)
    if t is None or config.getoption("collectonly", False):
        return {}
    out = {}
    for label in dict.fromkeys([*config.getoption("lrkv_backend"), *t.labels.values()]):
        if not t.verified[label]:
            if label in t.unavailable:
                out[label] = f"unavailable here: {t.unavailable[label]}"
            else:
                out[label] = _why_none(t.failures(label), t.skips.get(label), "no suite test ran for it (deselected)")
            continue
        missing = t.unverified_levels(label)
        if missing:  # the backend declares the level; the grid ran; no case of it met the rule
            out[label] = "; ".join(f"level {lv}: " + _why_none(t.failures(label, lv), t.level_skips.get((label, lv)),
                                                               "no case of it ran (deselected)") for lv in missing)
    return out


def _why_none(failed: int, skips, none_ran: str) -> str:
    """Why nothing was verified: the tests that ran and failed, the skips, or that none ran."""
    parts = [f"{failed} ran and failed"] if failed else []
    if skips:
        parts.append(_why_skipped(skips))
    return "; ".join(parts) or none_ran


def _levels_line(t, label: str) -> str:
    """' — kernel 30 (features 14/48), kernel-paged 9 (features 15/52), server properties 1': cases
    and features per case level, then the checks of no case level; the parts add up to the total."""
    from ..verify.features import level_features

    levels = t.levels.get(label) or {}
    parts = [f"{lv} {n} (features {len(t.features[label][lv])}/{len(level_features(lv))})"
             for lv, n in sorted(levels.items())]
    if t.spanning(label):
        parts.append(f"server properties {t.spanning(label)}")
    return " — " + ", ".join(parts) if parts else ""


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node, error) -> None:
    """pytest-xdist controller: a worker's tally joins the session's (the workers ran the tests)."""
    t = getattr(node.config, "_lrkv_tally", None)
    data = (getattr(node, "workeroutput", None) or {}).get("lrkv_tally")
    if t is not None and data:
        t.merge(data)


def pytest_sessionfinish(session, exitstatus) -> None:
    t = getattr(session.config, "_lrkv_tally", None)
    if t is not None and hasattr(session.config, "workeroutput"):  # a pytest-xdist worker: its
        session.config.workeroutput["lrkv_tally"] = t.export()  # controller judges the whole session
        return
    if session.config.getoption("lrkv_allow_empty"):
        return
    if _empty(session.config) and exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    t = getattr(config, "_lrkv_tally", None)
    labels = list(dict.fromkeys([*config.getoption("lrkv_backend"), *(t.labels.values() if t else ())]))
    if t is None or config.getoption("collectonly", False) or not (labels or t.verified):
        return
    terminalreporter.write_sep("=", "lrkv")
    for label in dict.fromkeys([*labels, *t.verified]):
        terminalreporter.write_line(f"lrkv: {label}: {t.verified[label]} cases verified{_levels_line(t, label)}")
    allow = config.getoption("lrkv_allow_empty")
    for label, why in _empty(config).items():
        what = "verified no case" if not t.verified[label] else "verified no case at a level it declares"
        if allow:
            terminalreporter.write_line(f"lrkv: {label} {what} ({why}); accepted by --lrkv-allow-empty",
                                        yellow=True)
        else:
            terminalreporter.write_line(f"lrkv: FAILED: {label} {what}: {why} (a run that verified nothing "
                                        "is not a pass; --lrkv-allow-empty accepts it)", red=True, bold=True)

