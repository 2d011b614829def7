"""What the kernel tables need per task, built from data that grows with the number of tasks, not
of records: the pid of each thread, the comm history, and the `tasks` table from the forks, execs
and exits (a few records per task). Used by oslens.store.kernel_tables and its oracle.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from oslens.store.kernel_fields import (
    EXEC, EXIT, FORK, NAME_EXEC, NAME_IRQ, NAME_TASK, PIDNS_OUTSIDE, TASK_IDS, TRACED, i64, nullable, table_of)
from oslens.store.kernel_layout import field_np

# the kinds `tasks` reads in full (a few records per task)
SMALL_KINDS = (FORK, EXEC, EXIT, TRACED, TASK_IDS)


class PidMap:
    """tid -> pid from (tid, pid) pairs given in the order of their records (the last one wins)."""

    def __init__(self, tids: np.ndarray, pids: np.ndarray):
        keep = pids > 0
        t, p = i64(tids)[keep], i64(pids)[keep]
        # last occurrence per tid: unique over the reversed arrays
        self.keys, first = np.unique(t[::-1], return_index=True)
        self.vals = p[::-1][first]

    def __call__(self, tids: np.ndarray) -> np.ndarray:
        tids = i64(tids)
        out = np.full(len(tids), -1, dtype=np.int64)
        if len(self.keys):
            idx = np.clip(np.searchsorted(self.keys, tids), 0, len(self.keys) - 1)
            hit = self.keys[idx] == tids
            out[hit] = self.vals[idx[hit]]
        out[tids == 0] = 0
        return out


class Comms:
    """The comm of a task at a time, from NAME_TASK records (written whenever it changes)."""

    def __init__(self, names: list):
        """names: (ts, id, class, text) of every NAME record, in record order."""
        rows = [(ts, i, n) for ts, i, cls, n in names if cls == NAME_TASK]
        rows.sort(key=lambda x: (x[1], x[0]))
        self.ts = np.array([r[0] for r in rows], dtype=np.int64)
        self.tid = np.array([r[1] for r in rows], dtype=np.int64)
        self.text = np.array([r[2] for r in rows] or [""], dtype=object)
        self.sorted_ts = np.sort(self.ts)
        n = len(self.ts) + 1
        self.n = n
        self.keys = self.tid * n + np.searchsorted(self.sorted_ts, self.ts, side="right")
        # first comm per tid, for times before the first NAME
        self.first_tid, first_idx = np.unique(self.tid, return_index=True)
        self.first_idx = first_idx
        exe = [(i, n) for _ts, i, cls, n in names if cls == NAME_EXEC]
        self.exe = dict(exe)
        self.irq = {i: n for _ts, i, cls, n in names if cls == NAME_IRQ}

    def at(self, tids: np.ndarray, ts: np.ndarray) -> np.ndarray:
        tids, ts = i64(tids), i64(ts)
        out = np.full(len(tids), "", dtype=object)
        if len(self.ts) == 0 or len(tids) == 0:
            out[tids == 0] = "<idle>"
            return out
        q = tids * self.n + np.searchsorted(self.sorted_ts, ts, side="right")
        idx = np.searchsorted(self.keys, q, side="right") - 1
        ok = (idx >= 0) & (self.tid[np.clip(idx, 0, None)] == tids)
        out[ok] = self.text[idx[ok]]
        # before the first NAME of a task: its first comm
        miss = ~ok
        if miss.any():
            j = np.clip(np.searchsorted(self.first_tid, tids[miss]), 0, len(self.first_tid) - 1)
            hit = self.first_tid[j] == tids[miss]
            vals = np.full(hit.shape, "", dtype=object)
            vals[hit] = self.text[self.first_idx[j[hit]]]
            out[miss] = vals
        out[tids == 0] = "<idle>"
        return out

    def longest(self, tids: np.ndarray, lo: np.ndarray, hi: np.ndarray):
        """Per task: the comm it held longest within [lo, hi] (renames and exec followed; '' when
        no name was recorded) and whether it ever changed its name."""
        n = len(tids)
        best = np.full(n, "", dtype=object)
        renamed = np.zeros(n, bool)
        if len(self.ts) == 0 or n == 0:
            return best, renamed
        # rows are sorted by (tid, ts): one run per task
        starts = np.searchsorted(self.tid, tids, side="left")
        stops = np.searchsorted(self.tid, tids, side="right")
        for j in np.nonzero(stops > starts)[0]:
            a, b = int(starts[j]), int(stops[j])
            texts = self.text[a:b]
            renamed[j] = len(set(texts)) > 1
            if b - a == 1:
                best[j] = texts[0]
                continue
            ts = np.clip(self.ts[a:b], lo[j], hi[j])
            ts[0] = lo[j] if lo[j] > np.iinfo(np.int64).min else ts[0]
            held = np.diff(np.append(ts, hi[j]))
            total: dict[str, int] = {}
            for x, h in zip(texts, held.tolist()):
                total[x] = total.get(x, 0) + max(h, 0)
            best[j] = max(reversed(list(total)), key=lambda x: total[x])  # ties: the later name
        return best, renamed

    def last(self, tids: np.ndarray) -> np.ndarray:
        return self.at(tids, np.full(len(tids), np.iinfo(np.int64).max // 2, dtype=np.int64))


def root_of(small: dict, meta) -> int:
    """The traced program's first task: from the collector's TRACED record, else meta's pid."""
    traced_rec = small[TRACED]
    return int(field_np("traced_root", "root_pid", traced_rec)[0]) if len(traced_rec) else int(meta.get("pid") or 0)


def tree_of(small: dict, root: int) -> set[int]:
    """The root and every task forked from it, recursively (the tree the collector follows)."""
    forks = small[FORK]
    members = {root}
    for parent, kid in zip(i64(field_np("fork", "parent_tid", forks)).tolist(), field_np("fork", "child_tid", forks).tolist()):  # forks are few
        if parent in members:
            members.add(kid)
    return members


def whole_tasks(small: dict, meta) -> set[int] | None:
    """The tasks whose every switch the collector keeps: all of them system-wide, else the tree."""
    if (meta.get("settings") or {}).get("system_wide"):
        return None
    root = root_of(small, meta)
    return tree_of(small, root) if root else set()


def tasks(small: dict, seen_tids: np.ndarray, last_seen: int, pid_of, comms: Comms, meta: dict) -> pa.Table:
    """One row per task: `seen_tids` are the tids named by any switch (either side), fork (either
    side), exec, exit, syscall entry, sample or fault; `small` the FORK, EXEC, EXIT and TRACED
    records in time order; `last_seen` the time of the trace's last kernel record."""
    forks, execs, exits = small[FORK], small[EXEC], small[EXIT]
    traced_rec = small[TRACED]
    root = root_of(small, meta)
    root_ts = int(traced_rec["ts"][0]) if len(traced_rec) else None
    tids = np.unique(i64(seen_tids))
    if root:
        tids = np.union1d(tids, [root])
    tids = tids[tids > 0]
    n = len(tids)
    start = np.zeros(n, np.int64)
    start_ok = np.zeros(n, bool)
    end = np.zeros(n, np.int64)
    end_ok = np.zeros(n, bool)
    parent_tid = np.zeros(n, np.int64)
    parent_pid = np.zeros(n, np.int64)
    parent_ok = np.zeros(n, bool)
    child = field_np("fork", "child_tid", forks)
    idx = np.searchsorted(tids, child)
    start[idx], start_ok[idx] = i64(forks["ts"]), True
    parent_tid[idx], parent_pid[idx], parent_ok[idx] = i64(field_np("fork", "parent_tid", forks)), field_np("fork", "parent_pid", forks), True
    idx = np.searchsorted(tids, i64(field_np("exit", "tid", exits)))
    end[idx], end_ok[idx] = i64(exits["ts"]), True
    traced = np.zeros(n, bool)
    if root:
        r = np.searchsorted(tids, root)
        traced[r] = True
        if root_ts is not None and not start_ok[r]:
            start[r], start_ok[r] = root_ts, True
        traced = np.isin(tids, np.fromiter(tree_of(small, root), dtype=np.int64))
    exe = np.array([comms.exe.get(int(t), "") for t in tids], dtype=object) if comms.exe else np.full(n, "", dtype=object)
    pid = pid_of(tids)
    exec_ns, exec_ok = _exec_times(execs, tids, first=True)
    last_exec, last_exec_ok = _exec_times(execs, tids, first=False)
    # a process that exec'd is named by what it became (the launcher's `oslens` hold, a shell's
    # fork before it runs a command)
    lo = np.where(last_exec_ok, last_exec, np.where(start_ok, start, np.iinfo(np.int64).min))
    hi = np.where(end_ok, end, last_seen)
    main_comm, renamed = comms.longest(tids, lo, hi)
    last_comm = comms.last(tids)
    main_comm = np.where(main_comm == "", last_comm, main_comm)
    # oslens's own tasks end their lives under its names (the process oslens launches is called
    # `oslens` only until its exec)
    named_oslens = np.array([str(c).startswith("oslens") for c in last_comm], bool)
    own = named_oslens | _killed_by_exec_unnamed(tids, pid, end, end_ok, renamed, execs)
    return table_of({
        "pid": pid, "tid": tids, "comm": pa.array(comms.last(tids), type=pa.string()),
        "parent_pid": nullable(parent_pid, parent_ok), "parent_tid": nullable(parent_tid, parent_ok),
        "start_ns": nullable(start, start_ok), "end_ns": nullable(end, end_ok), "is_traced": traced,
        "exe": pa.array(exe, type=pa.string()),
        "main_comm": pa.array(main_comm, type=pa.string()),
        "exec_ns": nullable(exec_ns, exec_ok),
        "is_oslens": own,
        "global_tid": _global_tids(small, tids, meta),
    })


def _global_tids(small: dict, tids: np.ndarray, meta: dict) -> pa.Array:
    """Each task's tid as the kernel numbers it: its own outside a PID namespace; inside one, from
    the collector's TASK_IDS records (the traced tree) or the encoding of a task the namespace
    cannot see (kernel.rs, PIDNS_OUTSIDE); NULL for the namespace's other tasks."""
    if not (meta.get("kernel") or {}).get("pid_namespace"):
        return pa.array(tids, type=pa.int64())
    out, ok = np.zeros(len(tids), np.int64), tids >= PIDNS_OUTSIDE
    out[ok] = tids[ok] - PIDNS_OUTSIDE
    ids = small[TASK_IDS]
    for t, g in zip(field_np("task_ids", "tid", ids).tolist(), field_np("task_ids", "global_tid", ids).tolist()):  # a few per task
        j = np.searchsorted(tids, t)
        if j < len(tids) and tids[j] == t:
            out[j], ok[j] = g, True
    return nullable(out, ok)


# exec kills a process's other threads before it completes: a thread that exits this long before
# its process's exec record died of it
EXEC_KILL_WINDOW_NS = 50_000_000


def _exec_times(execs, tids: np.ndarray, first: bool):
    """Each task's first (or last) successful exec (sched_process_exec), if seen."""
    out, ok = np.zeros(len(tids), np.int64), np.zeros(len(tids), bool)
    e_tid, e_ts = i64(field_np("exec", "tid", execs)), i64(execs["ts"])
    for t, ts in sorted(zip(e_tid.tolist(), e_ts.tolist()), key=lambda x: -x[1] if first else x[1]):  # execs are few
        j = np.searchsorted(tids, t)
        if j < len(tids) and tids[j] == t:
            out[j], ok[j] = ts, True
    return out, ok


def _killed_by_exec_unnamed(tids, pid, end, end_ok, renamed, execs) -> np.ndarray:
    """Threads that their process's exec killed before they ever changed their inherited name:
    a non-main thread that exited just before its process exec'd. In a traced process these are
    the recorder's helper threads caught before they named themselves (the store's `threads`
    keeps the flag only for threads that recorded no application events)."""
    out = np.zeros(len(tids), bool)
    if len(execs) == 0:
        return out
    exec_by_pid: dict[int, list[int]] = {}
    for t, a, ts in zip(i64(field_np("exec", "tid", execs)).tolist(), field_np("exec", "pid", execs).tolist(), i64(execs["ts"]).tolist()):
        exec_by_pid.setdefault(a if a > 0 else t, []).append(ts)
    for j in np.nonzero(end_ok & (tids != pid) & ~renamed)[0]:
        if any(0 <= x - end[j] <= EXEC_KILL_WINDOW_NS for x in exec_by_pid.get(int(pid[j]), ())):
            out[j] = True
    return out


