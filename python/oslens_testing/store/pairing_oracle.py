"""The numpy pairing the native pass is tested against (test oracle only: the store pairs in Rust,
oslens_testing.store.pairing). Same contract as pairing.pair_nested and pairing.lock_requests.

A begin is paired with the end that closes it as a stack would: first by nesting level over all
keys of the thread (one stable sort, linear time when the keys fit in 16 bits); threads where
that pairs different keys (ill-nested regions such as begin A, begin B, end A) are paired again
per key, so each name is a stack of its own there.
"""

from __future__ import annotations

import numpy as np

from oslens_testing.store.pairing import COND_WAIT_EXIT, LOCK_ACQUIRE, LOCK_REQUEST, group_starts


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


def grouped_cumsum(values: np.ndarray, sorted_groups: np.ndarray, dtype=np.int64) -> np.ndarray:
    """Inclusive cumulative sum restarting at each group (groups contiguous)."""
    c = np.cumsum(values, dtype=dtype)
    if len(c) == 0:
        return c
    starts = np.flatnonzero(group_starts(sorted_groups))
    if len(starts) == 1:
        return c
    base = c[starts] - values[starts]
    ends = np.append(starts[1:], len(c))
    for s, e, b in zip(starts.tolist(), ends.tolist(), base.tolist()):  # per group, not per record
        if b:
            c[s:e] -= b
    return c


def _pair_by_level(grp: np.ndarray, is_begin: np.ndarray, key: np.ndarray | None):
    """grp: contiguous group ids in position order. Returns (bi, ei, bad): begin i = bi[k] is
    closed by end ei[k]; bad[k] when that end has another key (when `key` is given).

    Within a group, the begins entering nesting level L and the ends leaving it alternate in
    position order; each begin pairs with the end right after it at its level. Shallow nesting
    (the usual case) is paired one level at a time in sequential passes; deep nesting by one
    stable sort on (group, level)."""
    n = len(grp)
    if n == 0:
        z = np.zeros(0, np.int64)
        return z, z, np.zeros(0, bool)
    delta = is_begin.view(np.int8) * np.int8(2) - np.int8(1)  # +1 begin, -1 end
    level = grouped_cumsum(delta, grp, np.int32 if n < 2**31 else np.int64)
    level += ~is_begin  # an end leaves the level it closes (the level before it)
    lmin, lmax = int(level.min()), int(level.max())
    pieces = []
    if lmax - lmin < 32:
        for lv in range(lmin, lmax + 1):
            at = np.flatnonzero(level == lv)
            if len(at) < 2:
                continue
            b = is_begin[at]
            pair = b[:-1] & ~b[1:]
            g_at = grp[at]
            pair &= g_at[:-1] == g_at[1:]
            bad = None
            if key is not None:
                k_at = key[at]
                bad = (k_at[:-1] != k_at[1:])[pair]
            pieces.append((at[:-1][pair], at[1:][pair], bad))
    else:
        rank = np.cumsum(group_starts(grp)) - 1
        span = lmax - lmin + 1
        packed = rank.astype(np.int64) * span + (level - lmin)
        order = _stable_order(packed)
        p = packed[order]
        b = is_begin[order]
        pair = b[:-1] & ~b[1:] & (p[:-1] == p[1:])
        bi, ei = order[:-1][pair], order[1:][pair]
        pieces.append((bi, ei, key[bi] != key[ei] if key is not None else None))
    if not pieces:
        z = np.zeros(0, np.int64)
        return z, z, np.zeros(0, bool)
    bi = np.concatenate([p[0] for p in pieces])
    ei = np.concatenate([p[1] for p in pieces])
    bad = np.concatenate([p[2] for p in pieces]) if key is not None else np.zeros(len(bi), bool)
    return bi, ei, bad


def pair_nested_numpy(g: np.ndarray, key: np.ndarray, is_begin: np.ndarray):
    """Pairs begins and ends per thread `g` (non-decreasing) by `key` (region id, function
    address). Returns (match, depth, unmatched_ends): match[i] = index of the end closing begin
    i, or -1 when it never ended; depth[i] = how many regions of its thread were open when begin
    i began; unmatched_ends = ends that close nothing (they get no row)."""
    n = len(g)
    if n == 0:
        z = np.zeros(0, np.int64)
        return z, z, 0
    bi, ei, bad = _pair_by_level(g, is_begin, key)
    n_ends = n - int(np.count_nonzero(is_begin))
    if bad.any() or len(ei) != n_ends:
        # redo the threads that are not properly nested, one stack per key
        ends_used = np.zeros(n, dtype=bool)
        ends_used[ei] = True
        irregular_ends = ~is_begin & ~ends_used
        bad_threads = np.unique(np.concatenate([g[bi[bad]], g[irregular_ends]]))
        keep = ~np.isin(g[bi], bad_threads)
        bi, ei = bi[keep], ei[keep]
        sel = np.flatnonzero(np.isin(g, bad_threads))
        gk = np.stack([g[sel].astype(np.uint64), key[sel].astype(np.uint64)], axis=1)
        _, inv = np.unique(gk, axis=0, return_inverse=True)
        inv = inv.reshape(-1)
        o = np.argsort(inv, kind="stable")
        sbi, sei, _ = _pair_by_level(inv[o], is_begin[sel][o], None)
        bi = np.concatenate([bi, sel[o[sbi]]])
        ei = np.concatenate([ei, sel[o[sei]]])
    match = np.full(n, -1, dtype=np.int64)
    match[bi] = ei
    # depth: begins open before this one (ends that close nothing count for nothing)
    step = is_begin.view(np.int8).copy()
    step[ei] = -1
    depth = grouped_cumsum(step, g) - 1
    unmatched_ends = n_ends - len(ei)
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


def lock_requests_numpy(kind, g, addr, ts):
    """lock_requests with numpy (the same result)."""
    idx = np.flatnonzero((kind >= LOCK_REQUEST) & (kind <= COND_WAIT_EXIT))
    k, gs, a = kind[idx], g[idx], addr[idx]
    acq = np.flatnonzero(k == LOCK_ACQUIRE)
    prev = np.maximum(acq - 1, 0)
    asked = (acq > 0) & (k[prev] == LOCK_REQUEST) & (gs[prev] == gs[acq]) & (a[prev] == a[acq])
    request = np.where(asked, ts[idx[prev]], ts[idx[acq]]) if len(acq) else np.zeros(0, np.int64)
    req = np.flatnonzero(k == LOCK_REQUEST)
    nxt = np.minimum(req + 1, len(k) - 1)
    followed = (req + 1 < len(k)) & (k[nxt] == LOCK_ACQUIRE) & (gs[nxt] == gs[req]) & (a[nxt] == a[req])
    return request.astype(np.int64), idx[req[~followed]].astype(np.int64)
