"""Begin/end pairing (regions, function entry/exit, lock requests), one linear pass in Rust
(oslens_testing._oracle, apart from the native pass's own pairing); oslens_testing.store.pairing_oracle is the numpy version the tests hold it to.

Events come in per-thread order: `g` (the thread index) is non-decreasing and, within a thread,
the array order is the order the thread recorded them. A begin is paired with the end that
closes it as a stack would; where regions are ill-nested (begin A, begin B, end A) each name
is a stack of its own.
"""

from __future__ import annotations

import numpy as np

from oslens import _native
from oslens_testing import _oracle

LOCK_REQUEST, LOCK_ACQUIRE, COND_WAIT_EXIT = (_native.KINDS[k] for k in ("lock_request", "lock_acquire", "cond_wait_exit"))


def group_starts(sorted_groups: np.ndarray) -> np.ndarray:
    """Boolean mask: True where a new group starts in a sorted group array."""
    n = len(sorted_groups)
    first = np.ones(n, dtype=bool)
    if n > 1:
        first[1:] = sorted_groups[1:] != sorted_groups[:-1]
    return first


def pair_nested(g: np.ndarray, key: np.ndarray, is_begin: np.ndarray):
    """Pairs begins and ends per thread `g` (non-decreasing) by `key` (region id, function
    address). Returns (match, depth, unmatched_ends): match[i] = index of the end closing begin
    i, or -1 when it never ended; depth[i] = how many regions of its thread were open when begin
    i began; unmatched_ends = ends that close nothing (they get no row).

    One linear pass in Rust (oslens._oracle.pair_nested); pairing_oracle.pair_nested_numpy gives
    the same result."""
    n = len(g)
    if n == 0:
        z = np.zeros(0, np.int64)
        return z, z, 0
    u8 = np.uint8
    g32 = np.ascontiguousarray(g, dtype=np.int32)
    k64 = np.ascontiguousarray(key).astype(np.uint64, copy=False)
    b8 = np.ascontiguousarray(is_begin, dtype=bool)
    match = np.empty(n, np.int64)
    depth = np.empty(n, np.int64)
    unmatched = _oracle.pair_nested(g32.view(u8), k64.view(u8), b8.view(u8), match.view(u8), depth.view(u8))
    return match, depth, int(unmatched)


def pair_kinds(kind: np.ndarray, g: np.ndarray, key: np.ndarray, begin_kind: int, end_kind: int, n_begins: int):
    """pair_nested over the records of two kinds (begin_kind, end_kind) among all records, in one
    pass without selecting them first. kind, g (non-decreasing) and key have one entry per
    record; n_begins is how many begin_kind records there are. Returns (begins, ends, depth,
    unmatched_ends): for each begin_kind record in order its row, the row of the end that
    closes it (-1: never closed) and its depth."""
    key = np.ascontiguousarray(key)
    if key.dtype.itemsize not in (4, 8) or key.dtype.kind not in "ui" or len(kind) == 0:
        idx = np.flatnonzero((kind == begin_kind) | (kind == end_kind))
        is_begin = kind[idx] == begin_kind
        match, depth, unmatched = pair_nested(g[idx], key[idx], is_begin)
        bsel = np.flatnonzero(is_begin)
        m = match[bsel]
        return idx[bsel], np.where(m >= 0, idx[np.maximum(m, 0)], -1), depth[bsel], unmatched
    u8 = np.uint8
    begins = np.empty(n_begins, np.int64)
    ends = np.empty(n_begins, np.int64)
    depth = np.empty(n_begins, np.int64)
    unmatched = _oracle.pair_kinds(np.ascontiguousarray(kind, dtype=np.uint8).view(u8),
                                   np.ascontiguousarray(g, dtype=np.int32).view(u8), key.view(u8), key.dtype.itemsize,
                                   int(begin_kind), int(end_kind), begins.view(u8), ends.view(u8), depth.view(u8))
    return begins, ends, depth, int(unmatched)


def lock_requests(kind: np.ndarray, g: np.ndarray, addr: np.ndarray, ts: np.ndarray, n_acquires: int,
                  n_requests: int):
    """When each lock acquisition was asked for, over all records (kind, g non-decreasing, addr =
    the `a` word, ts): among the sync records (kinds LOCK_REQUEST..COND_WAIT_EXIT) an acquisition
    right after a request of the same thread and object was asked for then, else at its own
    time. Returns (request: one time per LOCK_ACQUIRE record in order, stuck: rows of the
    requests no acquisition follows so). One pass in Rust (pairing_oracle.lock_requests_numpy is the
    same in numpy)."""
    if len(kind) == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    u8 = np.uint8
    request = np.empty(n_acquires, np.int64)
    stuck = np.empty(n_requests, np.int64)
    n_stuck = _oracle.lock_requests(np.ascontiguousarray(kind, dtype=np.uint8).view(u8),
                                    np.ascontiguousarray(g, dtype=np.int32).view(u8),
                                    np.ascontiguousarray(addr).astype(np.uint64, copy=False).view(u8),
                                    np.ascontiguousarray(ts, dtype=np.int64).view(u8), request.view(u8), stuck.view(u8))
    return request, stuck[:n_stuck]
