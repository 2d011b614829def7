"""Time and counts per interval: how long a set of segments overlaps each interval, and how many
points fall in each. Both are O((n + k) log n) with sorted arrays, so a segment spanning many
intervals costs no more than a short one."""

from __future__ import annotations

import numpy as np


def _integral(starts: np.ndarray, ends: np.ndarray, at: np.ndarray, presorted: bool) -> np.ndarray:
    """sum over segments of their overlap with (-inf, t], for each t in `at`."""
    s = starts.astype(np.float64)
    e = ends.astype(np.float64)
    if not presorted:
        s, e = np.sort(s), np.sort(e)
    cs = np.concatenate([[0.0], np.cumsum(s)])
    ce = np.concatenate([[0.0], np.cumsum(e)])
    t = at.astype(np.float64)
    ns = np.searchsorted(s, t, side="left")
    ne = np.searchsorted(e, t, side="left")
    return (ns * t - cs[ns]) - (ne * t - ce[ne])


def overlap(starts, ends, edges: np.ndarray, presorted: bool = False) -> np.ndarray:
    """ns of [starts, ends) segments inside each interval [edges[k], edges[k+1]). presorted:
    starts and ends are each in ascending order already (one thread's timeline)."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    if len(starts) == 0:
        return np.zeros(len(edges) - 1)
    keep = ends > starts
    cum = _integral(starts[keep], ends[keep], edges, presorted)
    return np.maximum(np.diff(cum), 0.0)


def counts(points, edges: np.ndarray, weights=None) -> np.ndarray:
    """How many points (or the sum of their weights) fall in each interval."""
    points = np.asarray(points, dtype=np.int64)
    idx = np.searchsorted(edges, points, side="right") - 1
    ok = (idx >= 0) & (idx < len(edges) - 1)
    w = None if weights is None else np.asarray(weights, dtype=np.float64)[ok]
    return np.bincount(idx[ok], weights=w, minlength=len(edges) - 1).astype(np.float64)
