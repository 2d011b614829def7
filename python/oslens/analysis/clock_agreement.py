"""Do the application's clock and the kernel collector's agree here? (`oslens doctor`, issue 33)

A probe records an event, makes one system call and records another, many times. Each pair of
events brackets its call on the application's clock (TSC converted at import), the call's
sys_enter and sys_exit are stamped by the kernel (CLOCK_MONOTONIC): an offset d of the kernel's
clock from the application's must satisfy exit - after <= d <= enter - before for every call, so
the intersection over all calls bounds it, measured, with no model of either clock.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa


def clock_agreement(con, before: str, after: str, syscall: str = "getpid") -> pa.Table:
    """One row: calls paired, calls inside their brackets, the offset's bounds (ns; None when the
    calls disagree, i.e. no single offset fits) and its median estimate."""
    ev = con.execute("SELECT tid, instrument, ts FROM app_events WHERE kind = 'event' AND instrument IN (?, ?) "
                     "ORDER BY tid, ts", [before, after]).fetchnumpy()
    calls = con.execute("SELECT tid, start_ns, end_ns FROM syscalls WHERE name = ? AND end_ns IS NOT NULL "
                        "ORDER BY tid, start_ns", [syscall]).fetchnumpy()
    lows, highs, mids = [], [], []
    for tid in np.unique(ev["tid"]):
        mine = ev["tid"] == tid
        names, ts = ev["instrument"][mine], ev["ts"][mine].astype(np.int64)
        starts = np.flatnonzero((names[:-1] == before) & (names[1:] == after))
        b, a = ts[starts], ts[starts + 1]
        own = calls["tid"] == tid
        enter, leave = calls["start_ns"][own].astype(np.int64), calls["end_ns"][own].astype(np.int64)
        if not len(b) or not len(enter):
            continue
        # each bracket's call: the one whose middle is nearest the bracket's middle
        centre, call_centre = (a + b) / 2, (enter + leave) / 2
        i = _nearest(call_centre, centre)
        lows.append(leave[i] - a)
        highs.append(enter[i] - b)
        mids.append(call_centre[i] - centre)
    if not lows:
        return pa.table({"calls": [0], "inside": [0], "offset_low_ns": pa.nulls(1, pa.int64()),
                         "offset_high_ns": pa.nulls(1, pa.int64()), "offset_median_ns": pa.nulls(1, pa.float64())})
    low, high, mid = np.concatenate(lows), np.concatenate(highs), np.concatenate(mids)
    lo, hi = int(low.max()), int(high.min())
    return pa.table({"calls": [len(low)], "inside": [int(((low <= 0) & (high >= 0)).sum())],
                     "offset_low_ns": pa.array([lo if lo <= hi else None], pa.int64()),
                     "offset_high_ns": pa.array([hi if lo <= hi else None], pa.int64()),
                     "offset_median_ns": [float(np.median(mid))]})


def _nearest(values: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """For each target, the index of the nearest of the sorted `values`."""
    if len(values) == 1:
        return np.zeros(len(targets), dtype=np.int64)
    j = np.clip(np.searchsorted(values, targets), 1, len(values) - 1)
    return np.where(np.abs(values[j - 1] - targets) < np.abs(values[j] - targets), j - 1, j)
