"""The unit tests beside the code: imports never measure a quick calibration unasked (the same
default as tests/conftest.py, which says why)."""

import os

from oslens.store.calibration import NO_CALIBRATE_ENV

os.environ.setdefault(NO_CALIBRATE_ENV, "1")
