"""Hypothesis profiles of the boundary property tests.

``ci`` (default): a fixed number of examples per test, derandomized (the same examples every
run, so CI is reproducible and its cost fixed). ``long``: many more, randomized; run it on
demand to look for new failures::

    HYPOTHESIS_PROFILE=long pytest -p no:randomly -n 0 tests/boundary
"""

import os

from hypothesis import HealthCheck, settings

_COMMON = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.function_scoped_fixture]}
settings.register_profile("ci", max_examples=200, derandomize=True, print_blob=True, **_COMMON)
settings.register_profile("long", max_examples=5000, **_COMMON)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))
