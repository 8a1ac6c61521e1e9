"""pytest configuration shared by every test module.

Hypothesis profiles (lrkv.verify.strategies): `ci` (derandomized, bounded) by default,
`dev` for longer random runs:  HYPOTHESIS_PROFILE=dev pytest -m equivalence
"""

from lrkv.verify.strategies import load_profile, register_profiles

register_profiles()
load_profile()

# The equivalence suite runs through lrkv's own pytest plugin, as in a user's repository
# (installed, the plugin loads from its pytest11 entry point under this same name).
pytest_plugins = ["lrkv.testing.plugin"]


# LRKV_FAILURE_LOG=path: each failure's traceback is appended there the moment it is reported
# (on the xdist controller, once), so a run killed at its time limit — ci/gpu-check's steps run
# under `timeout` — still says why every test that failed before the kill failed.
def pytest_runtest_logreport(report):
    import os

    path = os.environ.get("LRKV_FAILURE_LOG")
    if path and report.failed and "PYTEST_XDIST_WORKER" not in os.environ:
        with open(path, "a") as f:
            f.write(f"==== {report.nodeid} ({report.when})\n{report.longreprtext}\n\n")
