"""Interval algebra on numpy arrays of [start, end) nanoseconds: union, membership, overlap."""

from __future__ import annotations

import numpy as np


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of [start, end) intervals, sorted and disjoint."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if len(starts) == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    out_s = s[idx]
    out_e = np.maximum.reduceat(e, idx)
    return out_s, out_e


def point_in(points: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each point, whether it lies inside one of the disjoint sorted intervals [s, e)."""
    if len(starts) == 0:
        return np.zeros(len(points), dtype=bool)
    i = np.searchsorted(starts, points, side="right") - 1
    ok = i >= 0
    res = np.zeros(len(points), dtype=bool)
    res[ok] = points[ok] < ends[i[ok]]
    return res


def overlap_total(a_s, a_e, b_s, b_e) -> int:
    """Total length of the intersection of two unions of intervals."""
    a_s, a_e = merge_intervals(a_s, a_e)
    b_s, b_e = merge_intervals(b_s, b_e)
    if len(a_s) == 0 or len(b_s) == 0:
        return 0
    return int(overlap_each(a_s, a_e, b_s, b_e).sum())


def overlap_each(q_s, q_e, b_s, b_e) -> np.ndarray:
    """For each query interval [q_s, q_e), its overlap with the disjoint sorted intervals
    [b_s, b_e), in O((n + m) log m) with prefix sums."""
    q_s = np.asarray(q_s, dtype=np.int64)
    q_e = np.asarray(q_e, dtype=np.int64)
    if len(b_s) == 0 or len(q_s) == 0:
        return np.zeros(len(q_s), dtype=np.int64)
    lens = b_e - b_s
    cum = np.concatenate([[0], np.cumsum(lens)])

    def covered_before(t):
        # length of the union that lies before time t
        i = np.searchsorted(b_s, t, side="right")  # intervals starting at or before t
        full = cum[np.maximum(i - 1, 0)]
        last = np.where(i > 0, np.clip(t - b_s[np.maximum(i - 1, 0)], 0, lens[np.maximum(i - 1, 0)]), 0)
        return np.where(i > 0, full + last, 0)

    return np.maximum(covered_before(q_e) - covered_before(q_s), 0)
