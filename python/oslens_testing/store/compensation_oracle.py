"""The numpy compensation that the importer's native pass is tested against (test oracle only:
the store computes compensation in one place, the pass: crates/native/src/app_rows/compensation.rs,
through oslens.store.app_tables.build_streamed; oslens.store.compensation completes the tables).

Model (Kohr et al. 1994, section 5; docs/calibration.md): a record of kind k costs C_k (the
in-vitro figure from the calibration); a `pause` record costs exactly its measured duration (a
chunk opened or flushed while the thread waited). For record i of a thread, in recording order,

    ts_comp[i] = ts[i] - sum(cost[j] for j < i on the same thread)

and any other time t of that thread (a region's end at the thread's end, a timer's start) is
compensated with the cost of the records strictly before t. A duration between two compensated
times therefore loses the cost of its first record and of every record inside it.

build applies it to tables in memory; pass_result gives what the pass gives the compensation
extension, so that app_tables_oracle.build_app can stand in for the pass in the importer.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from oslens.store import calibration
from oslens.store.compensation import COLUMNS, TABLE, _amend, _np, _summary_rows


def _kind_codes(col) -> tuple[np.ndarray, list[str]]:
    if isinstance(col, pa.ChunkedArray):
        col = col.combine_chunks() if col.num_chunks != 1 else col.chunk(0)
    if not pa.types.is_dictionary(col.type):
        col = pc.dictionary_encode(col)
    return col.indices.to_numpy(zero_copy_only=False).astype(np.int64), col.dictionary.to_pylist()


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


def _record_costs(ev: pa.Table, cal: dict | None):
    """(pid, tid, kind codes, their labels, cost per record, which are pauses, ThreadCosts,
    ts_comp_ns) of app_events."""
    pid, tid = _np(ev.column("pid")), _np(ev.column("tid"))
    ts = _np(ev.column("ts"))
    value = _np(ev.column("value"))
    codes, labels = _kind_codes(ev.column("kind"))
    per_kind = calibration.record_costs(cal) if cal else {}
    lut = np.zeros(max(len(labels), 1), dtype=np.float64)
    for i, name in enumerate(labels):
        if name in per_kind:
            lut[i] = per_kind[name][0]
    is_pause = np.zeros(max(len(labels), 1), dtype=bool)
    if "pause" in labels:
        is_pause[labels.index("pause")] = True
    cost = lut[codes] if len(codes) else np.zeros(0)
    pauses = is_pause[codes] if len(codes) else np.zeros(0, bool)
    cost[pauses] = np.maximum(value[pauses], 0)

    order = thread_order(pid, tid)
    if order is not None:  # not expected from the importer; keep the thread's recorded order
        pid_o, tid_o, ts_o, cost_o = pid[order], tid[order], ts[order], cost[order]
    else:
        pid_o, tid_o, ts_o, cost_o = pid, tid, ts, cost
    costs = cumulative(pid_o, tid_o, ts_o, cost_o)
    ts_comp_o = record_ts_comp(ts_o, costs)
    if order is not None:
        ts_comp = np.empty_like(ts_comp_o)
        ts_comp[order] = ts_comp_o
    else:
        ts_comp = ts_comp_o
    return pid, tid, codes, labels, cost, pauses, costs, ts_comp


def build(tables: dict, cal: dict | None, why: str = "") -> dict:
    """compensation.build over tables in memory: {table name: amended or new table}."""
    ev = tables.get("app_events")
    out: dict = {}
    if ev is None:
        return out
    pid, tid, codes, labels, cost, pauses, costs, ts_comp = _record_costs(ev, cal)
    out["app_events"] = ev.append_column("ts_comp_ns", pa.array(ts_comp, pa.int64()))
    _amend(tables, out, lambda name, c, p, q, raw: costs.compensate(p, q, raw))
    per_kind = calibration.record_costs(cal) if cal else {}
    out[TABLE] = summary(pid, tid, codes, labels, cost, pauses, per_kind, cal, why)
    return out


def pass_result(app: dict, cal: dict | None, labels: list[str]) -> dict:
    """What app_tables.build_streamed with costs gives the compensation extension, from the
    application tables in memory (`app`, app_tables_oracle.build's result, whose app_events
    gains ts_comp_ns here): each thread's records per kind (kind codes index `labels`), its
    pauses' sum, and the compensated times of the other tables, keyed by the time they compensate."""
    ev = app["app_events"]
    pid, tid, codes, names, cost, pauses, costs, ts_comp = _record_costs(ev, cal)
    app["app_events"] = ev.append_column("ts_comp_ns", pa.array(ts_comp, pa.int64()))
    t_pid = np.array([t.pid for t in app["threads"]], np.int64)
    t_tid = np.array([t.tid for t in app["threads"]], np.int64)
    thread = {(p, q): g for g, (p, q) in enumerate(zip(t_pid.tolist(), t_tid.tolist()))}
    g = np.array([thread[k] for k in zip(pid.tolist(), tid.tolist())], np.int64)
    kind = np.array([labels.index(n) for n in names], np.int64)[codes] if len(codes) else np.zeros(0, np.int64)
    kinds = np.zeros((len(t_pid), 256), np.uint64)
    np.add.at(kinds, (g, kind), 1)
    pause_ns = np.zeros(len(t_pid), np.float64)
    np.add.at(pause_ns, g[pauses], cost[pauses])
    columns: dict = {}

    def compensated(name, c, p, q, raw):
        columns.setdefault(name, {})[c] = costs.compensate(p, q, raw)
        return columns[name][c]

    _amend(app, {}, compensated)
    return {"columns": columns, "pid": t_pid, "tid": t_tid, "kinds": kinds,
            "pause_ns": pause_ns.astype(np.int64), "labels": labels}


def summary(pid, tid, codes, labels, cost, pauses, per_kind, cal, why) -> pa.Table:
    rows = {k: [] for k in COLUMNS}
    if len(codes):
        # (run of one thread's records, kind) -> one bin; runs of the same thread are merged below
        starts = np.concatenate([[0], np.flatnonzero((pid[1:] != pid[:-1]) | (tid[1:] != tid[:-1])) + 1])
        run = np.repeat(np.arange(len(starts)), np.diff(np.concatenate([starts, [len(pid)]])))
        width = len(labels)
        bins = run * width + codes
        counts_all = np.bincount(bins, minlength=len(starts) * width)
        totals_all = np.bincount(bins, weights=cost, minlength=len(starts) * width)
        merged: dict = {}
        for b in np.flatnonzero(counts_all).tolist():
            r, c = divmod(b, width)
            k = (int(pid[starts[r]]), int(tid[starts[r]]), c)
            n0, c0 = merged.get(k, (0, 0.0))
            merged[k] = (n0 + int(counts_all[b]), c0 + float(totals_all[b]))
        return _summary_rows(merged, labels, per_kind, cal, why)
    return pa.table({k: pa.array(v, COLUMNS[k]) for k, v in rows.items()})
