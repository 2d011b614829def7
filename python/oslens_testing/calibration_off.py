"""A pytest plugin (pyproject.toml: addopts -p oslens_testing.calibration_off) that keeps every
test's imports from measuring a quick calibration unasked: the suite imports hundreds of traces,
and whether each one is compensated must not depend on the machine's cache, nor cost seconds on
a fresh CI machine. A calibration already stored for the machine, or named by
$OSLENS_CALIBRATION, is still used; tests/test_quick_calibration.py clears the variable for its
own runs. Loaded before any conftest, for tests/ and python/oslens alike."""

import os

from oslens.store.calibration import NO_CALIBRATE_ENV

os.environ.setdefault(NO_CALIBRATE_ENV, "1")
