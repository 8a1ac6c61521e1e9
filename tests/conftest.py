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
