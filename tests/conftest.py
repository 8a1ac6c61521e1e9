"""pytest configuration shared by every test module.

Hypothesis profiles (lrkv.verify.strategies): `ci` (derandomized, bounded) by default,
`dev` for longer random runs:  HYPOTHESIS_PROFILE=dev pytest -m equivalence
"""

from lrkv.verify.strategies import load_profile, register_profiles

register_profiles()
load_profile()
