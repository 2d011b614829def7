"""Vectorised begin/end pairing (regions, function entry/exit) and per-group helpers.

Events come in per-thread order: `g` (the thread index) is non-decreasing and, within a thread,
the array order is the order the thread recorded them. A begin is paired with the end that
closes it as a stack would: first by nesting level over all keys of the thread (one stable sort,
linear time when the keys fit in 16 bits); threads where that pairs different keys (ill-nested
regions such as begin A, begin B, end A) are paired again per key, so each name is a stack of
its own there.
"""

from __future__ import annotations

import numpy as np


def _stable_order(key: np.ndarray) -> np.ndarray:
    """argsort(key, stable); radix sort when the key fits in 16 bits."""
    if len(key) == 0:
        return np.zeros(0, np.int64)
    lo, hi = int(key.min()), int(key.max())
    if hi - lo < 65536:
        return np.argsort((key - lo).astype(np.uint16), kind="stable")
    if hi - lo < 2**31:
        return np.argsort((key - lo).astype(np.int32), kind="stable")
    return np.argsort(key, kind="stable")


def group_starts(sorted_groups: np.ndarray) -> np.ndarray:
    """Boolean mask: True where a new group starts in a sorted group array."""
    n = len(sorted_groups)
    first = np.ones(n, dtype=bool)
    if n > 1:
        first[1:] = sorted_groups[1:] != sorted_groups[:-1]
    return first


def grouped_cumsum(values: np.ndarray, sorted_groups: np.ndarray) -> np.ndarray:
    """Inclusive cumulative sum restarting at each group (groups contiguous)."""
    c = np.cumsum(values, dtype=np.int64)
    if len(c) == 0:
        return c
    first = group_starts(sorted_groups)
    starts = np.flatnonzero(first)
    base = c[starts] - values[starts]
    lengths = np.diff(np.append(starts, len(c)))
    return c - np.repeat(base, lengths)


def _pair_by_level(grp: np.ndarray, is_begin: np.ndarray, key: np.ndarray | None):
    """grp: contiguous group ids in position order. Returns (match, bad_pair) where match[i] is
    the index of the end closing begin i (or -1), and bad_pair marks begins paired with an end
    of another key (when `key` is given)."""
    n = len(grp)
    match = np.full(n, -1, dtype=np.int64)
    bad = np.zeros(n, dtype=bool)
    if n == 0:
        return match, bad
    delta = np.where(is_begin, 1, -1).astype(np.int64)
    cum = grouped_cumsum(delta, grp)
    level = np.where(is_begin, cum, cum + 1)
    # dense group rank, so (rank, level) packs into one small integer
    rank = np.cumsum(group_starts(grp)) - 1
    lmin = int(level.min())
    span = int(level.max()) - lmin + 1
    packed = rank.astype(np.int64) * span + (level - lmin)
    order = _stable_order(packed)
    p = packed[order]
    b = is_begin[order]
    pair = b[:-1] & ~b[1:] & (p[:-1] == p[1:])
    bi = order[:-1][pair]
    ei = order[1:][pair]
    match[bi] = ei
    if key is not None:
        bad[bi] = key[bi] != key[ei]
    return match, bad


def pair_nested(g: np.ndarray, key: np.ndarray, is_begin: np.ndarray):
    """Pairs begins and ends per thread `g` (non-decreasing) by `key` (region id, function
    address). Returns (match, depth): match[i] = index of the end closing begin i, or -1 when
    it never ended; depth[i] = how many regions of its thread were open when begin i began.
    Ends that close nothing have no row of their own; `unmatched_ends` counts them."""
    n = len(g)
    if n == 0:
        z = np.zeros(0, np.int64)
        return z, z, 0
    match, bad = _pair_by_level(g, is_begin, key)
    ends_used = np.zeros(n, dtype=bool)
    ends_used[match[match >= 0]] = True
    irregular_ends = ~is_begin & ~ends_used
    if bad.any() or irregular_ends.any():
        # redo the threads that are not properly nested, one stack per key
        bad_threads = np.unique(np.concatenate([g[bad], g[irregular_ends]]))
        sel = np.flatnonzero(np.isin(g, bad_threads))
        gk = np.stack([g[sel].astype(np.uint64), key[sel].astype(np.uint64)], axis=1)
        _, inv = np.unique(gk, axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        o = np.argsort(inv, kind="stable")
        sub_match, _ = _pair_by_level(inv[o], is_begin[sel][o], None)
        match[sel] = -1
        ends_used[sel] = False
        have = sub_match >= 0
        match[sel[o[have]]] = sel[o[sub_match[have]]]
        ends_used[match[match >= 0]] = True
    # depth: begins open before this one (unclosed ends count for nothing)
    step = np.where(is_begin, 1, np.where(ends_used, -1, 0)).astype(np.int64)
    depth = grouped_cumsum(step, g) - 1
    unmatched_ends = int((~is_begin & ~ends_used).sum())
    return match, depth, unmatched_ends


def next_in_group(grp: np.ndarray) -> np.ndarray:
    """For events sorted by group then position: index of the next event of the same group, or -1."""
    n = len(grp)
    nxt = np.full(n, -1, dtype=np.int64)
    if n > 1:
        same = grp[1:] == grp[:-1]
        idx = np.arange(1, n)
        nxt[:-1] = np.where(same, idx, -1)
    return nxt
