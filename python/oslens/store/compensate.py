"""Perturbation compensation: each application record's time minus the cost of the
instrumentation that ran before it on the same thread, minus the recorder's own pauses.

Model (Kohr et al. 1994, section 5): a record of kind k costs C_k (the in-vitro figure from
the calibration); a `pause` record costs exactly its measured duration (a chunk opened or
flushed while the thread waited). For record i of a thread, in recording order,

    ts_comp[i] = ts[i] - sum(cost[j] for j < i on the same thread)

and any other time t of that thread (a region's end at the thread's end, a timer's start) is
compensated with the cost of the records strictly before t. A duration between two compensated
times therefore loses the cost of its first record and of every record inside it.

Pure numpy over arrays; oslens.store.compensation applies it to the imported tables.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass
class ThreadCosts:
    """Per-thread cumulative cost, for looking up any time of the thread."""

    keys: dict  # (pid, tid) -> (start, end) rows in the record arrays
    ts: np.ndarray  # record times, recording order (monotone envelope per thread, for search)
    before: np.ndarray  # cost of the thread's records before each record (ns, float)
    total: dict  # (pid, tid) -> total cost of the thread (ns)

    def at(self, pid: np.ndarray, tid: np.ndarray, t: np.ndarray) -> np.ndarray:
        """Cost (ns, float) of each thread's records strictly before time t."""
        out = np.zeros(len(t), dtype=np.float64)
        if len(t) == 0:
            return out
        pid = np.asarray(pid, dtype=np.int64)
        tid = np.asarray(tid, dtype=np.int64)
        t = np.asarray(t, dtype=np.int64)
        key = thread_key(pid, tid)
        if (key == key[0]).all():  # one thread (the common case): no grouping needed
            keys, order, bounds = key[:1], np.arange(len(t)), np.array([0, len(t)])
        else:
            keys, inverse = np.unique(key, return_inverse=True)
            inverse = inverse.reshape(-1)
            order = np.argsort(inverse, kind="stable")
            bounds = np.concatenate([[0], np.cumsum(np.bincount(inverse, minlength=len(keys)))])
        for g, k in enumerate(keys.tolist()):
            p, q = k >> 32, k & 0xFFFF_FFFF
            span = self.keys.get((p, q))
            if span is None:
                continue
            rows = order[bounds[g]:bounds[g + 1]]
            s, e = span
            idx = np.searchsorted(self.ts[s:e], t[rows], side="left")
            inside = idx < (e - s)
            vals = np.full(len(rows), self.total[(p, q)], dtype=np.float64)
            vals[inside] = self.before[s + idx[inside]]
            out[rows] = vals
        return out

    def compensate(self, pid, tid, t) -> np.ndarray:
        t = np.asarray(t, dtype=np.int64)
        return t - np.rint(self.at(pid, tid, t)).astype(np.int64)


def thread_key(pid: np.ndarray, tid: np.ndarray) -> np.ndarray:
    """One int64 per (pid, tid): Linux ids are below 2^22 (pid_max), so pid << 32 | tid is exact."""
    return (np.asarray(pid, dtype=np.int64) << 32) | np.asarray(tid, dtype=np.int64)


def thread_order(pid: np.ndarray, tid: np.ndarray) -> np.ndarray | None:
    """None when each thread's records are already contiguous (the importer lays them out so),
    else a stable order that makes them so (recording order kept inside a thread)."""
    n = len(pid)
    if n == 0:
        return None
    change = np.flatnonzero((pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])) + 1
    runs = len(change) + 1
    if runs == 1 or runs == len(np.unique(thread_key(pid[np.r_[0, change]], tid[np.r_[0, change]]))):
        return None
    return np.lexsort((tid, pid))


def cumulative(pid: np.ndarray, tid: np.ndarray, ts: np.ndarray, cost: np.ndarray) -> ThreadCosts:
    """ThreadCosts for records whose threads are contiguous and in recording order. Each thread's
    costs are summed in order from 0 (one addition per record, as the importer's native pass
    does: the same floats, so the same rounded times)."""
    n = len(ts)
    cost = np.asarray(cost, dtype=np.float64)
    if n == 0:
        return ThreadCosts({}, ts.astype(np.int64), np.zeros(0), {})
    starts = np.concatenate([[0], np.flatnonzero((pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])) + 1])
    ends = np.concatenate([starts[1:], [n]])
    before = np.empty(n, dtype=np.float64)
    env = np.empty(n, dtype=np.int64)
    keys, total = {}, {}
    for s, e in zip(starts.tolist(), ends.tolist()):
        key = (int(pid[s]), int(tid[s]))
        keys[key] = (s, e)
        cum = np.cumsum(cost[s:e])  # sequential: cum[i] = cum[i - 1] + cost[i]
        before[s] = 0.0
        before[s + 1:e] = cum[:-1]
        total[key] = float(cum[-1])
        np.maximum.accumulate(ts[s:e], out=env[s:e])
    return ThreadCosts(keys, env, before, total)


def record_ts_comp(ts: np.ndarray, costs: ThreadCosts) -> np.ndarray:
    """Compensated times of the records themselves (exact: by position, not by time)."""
    return np.asarray(ts, dtype=np.int64) - np.rint(costs.before).astype(np.int64)
