"""The intervals: a wall-clock grid over the program's life, chosen so there are at least
MIN_INTERVALS of them and, where the trace has IP samples, about MIN_SAMPLES samples in each."""

from __future__ import annotations

import re

import numpy as np

from oslens.errors import OslensError

# At least 100 intervals: a phase must last segment.MIN_STRETCH (4) intervals to count, and boundaries are
# scored within one interval; with 50 (the floor) the 300 ms phases of bench/phases/truth.py
# vanished and the run-to-run ARI fell to 0.77, with 100 it was 0.93 (docs/phases.md).
MIN_INTERVALS = 100
MIN_SAMPLES = 10  # samples per interval on average, so a code vector is more than noise (it is
# scaled by CPU demand, so a thin sample still points at the right functions)
MAX_INTERVALS = 2000  # the automatic choice; --interval may ask for more
LIMIT_INTERVALS = 200_000  # beyond this an explicit --interval is a mistake (memory)
NICE = (1, 2, 5)

_UNITS = {"ns": 1, "us": 1_000, "ms": 1_000_000, "s": 1_000_000_000}


def parse_interval(text: str) -> int:
    """'10ms', '500us', '0.5s', '2000000' (ns) -> nanoseconds."""
    m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ns|us|ms|s)?\s*", text or "")
    if not m:
        raise OslensError(f"--interval {text!r}: give a duration such as 10ms, 500us or 0.2s", 2)
    ns = int(round(float(m.group(1)) * _UNITS[m.group(2) or "ns"]))
    if ns < 1000:
        raise OslensError(f"--interval {text!r}: intervals shorter than 1us are not supported", 2)
    return ns


def _nice(ns: float, up: bool) -> int:
    """The 1-2-5 series value at or above (up) or at or below ns."""
    ns = max(float(ns), 1000.0)
    exp = int(np.floor(np.log10(ns)))
    cands = sorted(m * 10 ** e for e in (exp - 1, exp, exp + 1) for m in NICE)
    if up:
        return int(next(c for c in cands if c >= ns - 1e-6))
    return int(max(c for c in cands if c <= ns + 1e-6))


def choose_interval(wall_ns: int, n_samples: int) -> int:
    """The automatic interval length (ns) for a run of wall_ns with n_samples IP samples."""
    lo = max(1_000_000.0, wall_ns / MAX_INTERVALS)
    if n_samples:
        lo = max(lo, MIN_SAMPLES * wall_ns / n_samples)
    dt = _nice(lo, up=True)
    if wall_ns / dt < MIN_INTERVALS:
        dt = _nice(wall_ns / MIN_INTERVALS, up=False)
    return dt


def edges(start_ns: int, end_ns: int, dt: int) -> np.ndarray:
    """Interval boundaries from start, every dt; the last interval is kept when at least half full."""
    wall = end_ns - start_ns
    n = wall // dt + (1 if wall % dt >= dt // 2 else 0)
    n = max(int(n), 1)
    if n > LIMIT_INTERVALS:
        raise OslensError(f"an interval of {dt} ns cuts this run into {n} intervals (at most {LIMIT_INTERVALS}); "
                          "choose a longer --interval", 2)
    return start_ns + dt * np.arange(n + 1, dtype=np.int64)
