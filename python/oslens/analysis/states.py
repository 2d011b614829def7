"""Per-thread state timelines: every nanosecond of each program thread's life is put in exactly one
state, from the kernel's scheduling records (when the thread held a CPU, and the state it left the
CPU in), its system calls, block I/O, page faults (when they have durations) and synchronisation
waits. The time breakdown (Kohr et al. Table 3) sums these; the synchronisation summary and the
findings use them to tell preemption from blocking.

Rules, in order, for each instant of a thread's life [start, end):
  on a CPU:   in a page fault with a duration  -> page_faults
              inside a lock/barrier/condition wait -> sync_wait
              inside a system call             -> syscalls
              otherwise                        -> computation
  off a CPU:  left it runnable ('R', preempted, or not yet run) -> preempted
              left it in 'D' (uninterruptible), or its own block I/O is in flight -> io_wait
              inside a synchronisation wait    -> sync_wait
              otherwise (sleep, poll, pipe...) -> sleeping
Without scheduling records a thread's time is sync_wait inside synchronisation waits, syscalls
inside system calls, and unknown elsewhere.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oslens.analysis import common

COMPUTATION, SYSCALLS, IO_WAIT, PAGE_FAULTS, PREEMPTED, SYNC_WAIT, SLEEPING, UNKNOWN = range(8)
STATE_NAMES = ["computation", "syscalls", "io_wait", "page_faults", "preempted", "sync_wait", "sleeping", "unknown"]


@dataclass
class Timeline:
    tid: int
    start: int
    end: int
    seg_start: np.ndarray  # int64
    seg_end: np.ndarray  # int64
    state: np.ndarray  # int8 codes
    has_sched: bool
    n_slices: int
    n_migrations: int
    slice_start: np.ndarray | None = None  # the thread's CPU slices (clipped to its life), by start
    slice_end: np.ndarray | None = None
    slice_cpu: np.ndarray | None = None

    def total(self, code: int) -> int:
        m = self.state == code
        return int((self.seg_end[m] - self.seg_start[m]).sum())

    def intervals(self, code: int) -> tuple[np.ndarray, np.ndarray]:
        m = self.state == code
        return self.seg_start[m], self.seg_end[m]


def normalize_state(value) -> str | None:
    """prev_state as a letter: 'R' runnable (preempted), 'S', 'D', ... ; None when unknown."""
    if value is None:
        return None
    if isinstance(value, (int, np.integer)):
        v = int(value)
        if v == 0:
            return "R"
        if v & 1:
            return "S"
        if v & 2:
            return "D"
        if v & 0x100:  # TASK_REPORT_MAX: preempted while running
            return "R"
        return "S"
    s = str(value).strip()
    if not s:
        return None
    s = s.upper()
    if s in ("RUNNING", "RUNNABLE", "PREEMPTED"):
        return "R"
    if s in ("SLEEPING", "INTERRUPTIBLE"):
        return "S"
    if s in ("DISK", "UNINTERRUPTIBLE"):
        return "D"
    return s[0]


def _intervals(con, sql: str, params) -> tuple[np.ndarray, np.ndarray]:
    t = con.execute(sql, params).fetch_arrow_table()
    if t.num_rows == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return t.column(0).to_numpy().astype(np.int64), t.column(1).to_numpy().astype(np.int64)


# switches.prev_state (a letter such as 'R', 'R+', 'S', 'D', or a number) as a code:
# 0 unknown, 1 runnable (preempted), 2 uninterruptible (disk), 3 sleeping or any other wait
STATE_CODE_SQL = """(CASE WHEN {col} IS NULL OR CAST({col} AS VARCHAR) = '' THEN 0
      WHEN upper(substr(CAST({col} AS VARCHAR), 1, 1)) IN ('R', '0') THEN 1
      WHEN upper(substr(CAST({col} AS VARCHAR), 1, 1)) IN ('D', '2') THEN 2
      ELSE 3 END)"""


def _fault_duration_sql(con) -> str | None:
    cols = common.columns(con, "faults")
    if "end_ns" in cols:
        return "SELECT ts, end_ns FROM faults WHERE tid = ? AND end_ns IS NOT NULL"
    if "duration_ns" in cols:
        return "SELECT ts, ts + duration_ns FROM faults WHERE tid = ? AND duration_ns IS NOT NULL"
    return None


def thread_timeline(con, tid: int, start: int, end: int, trace_has_sched: bool) -> Timeline:
    empty = np.zeros(0, np.int64)
    # CPU slices and the state each ended in, as a code: 0 unknown, 1 runnable, 2 disk, 3 sleeping
    sl_s, sl_e, sl_cpu, sl_code = empty, empty, empty, np.zeros(0, np.int8)
    if common.table_exists(con, "cpu_slices"):
        if common.table_exists(con, "switches"):
            sql = f"""SELECT s.start_ns, s.end_ns, s.cpu, any_value({STATE_CODE_SQL.format(col="w.prev_state")}) AS code
                   FROM cpu_slices s LEFT JOIN switches w
                     ON w.prev_tid = s.tid AND w.ts = s.end_ns AND w.cpu = s.cpu
                   WHERE s.tid = ? AND s.end_ns > ? AND s.start_ns < ?
                   GROUP BY s.start_ns, s.end_ns, s.cpu ORDER BY s.start_ns"""
        else:
            sql = """SELECT start_ns, end_ns, cpu, 0 AS code FROM cpu_slices
                     WHERE tid = ? AND end_ns > ? AND start_ns < ? ORDER BY start_ns"""
        t = con.execute(sql, [tid, start, end]).fetch_arrow_table()
        if t.num_rows:
            sl_s = t.column(0).to_numpy().astype(np.int64)
            sl_e = t.column(1).to_numpy().astype(np.int64)
            sl_cpu = t.column(2).fill_null(-1).to_numpy().astype(np.int64)
            sl_code = t.column(3).fill_null(0).to_numpy().astype(np.int8)
    n_slices = len(sl_s)
    n_migr = int((sl_cpu[1:] != sl_cpu[:-1]).sum()) if n_slices > 1 else 0
    sl_s = np.clip(sl_s, start, end)
    sl_e = np.clip(sl_e, start, end)

    sys_s, sys_e = empty, empty
    if common.table_exists(con, "syscalls"):
        sys_s, sys_e = _intervals(
            con, "SELECT start_ns, coalesce(end_ns, ?) FROM syscalls WHERE tid = ? AND start_ns < ?", [end, tid, end]
        )
    sync_s, sync_e = empty, empty
    if common.table_exists(con, "sync"):
        sync_s, sync_e = _intervals(
            con,
            "SELECT request_ns, coalesce(acquire_ns, release_ns, ?) FROM sync WHERE tid = ? AND request_ns IS NOT NULL",
            [end, tid],
        )
    io_s, io_e = empty, empty
    if common.table_exists(con, "block_io"):
        io_s, io_e = _intervals(
            con,
            "SELECT issue_ns, coalesce(complete_ns, ?) FROM block_io WHERE tid = ? AND issue_ns IS NOT NULL",
            [end, tid],
        )
    pf_s, pf_e = empty, empty
    fsql = _fault_duration_sql(con) if common.table_exists(con, "faults") else None
    if fsql:
        pf_s, pf_e = _intervals(con, fsql, [tid])

    bounds = np.concatenate([[start, end], sl_s, sl_e, sys_s, sys_e, sync_s, sync_e, io_s, io_e, pf_s, pf_e])
    bounds = np.unique(np.clip(bounds, start, end))
    seg_s, seg_e = bounds[:-1], bounds[1:]
    if len(seg_s) == 0:
        return Timeline(tid, start, end, seg_s, seg_e, np.zeros(0, np.int8), bool(n_slices), n_slices, n_migr,
                        sl_s, sl_e, sl_cpu)

    in_sys = common.point_in(seg_s, *common.merge_intervals(sys_s, sys_e))
    in_sync = common.point_in(seg_s, *common.merge_intervals(sync_s, sync_e))
    in_io = common.point_in(seg_s, *common.merge_intervals(io_s, io_e))
    in_pf = common.point_in(seg_s, *common.merge_intervals(pf_s, pf_e))
    state = np.full(len(seg_s), UNKNOWN, np.int8)

    if n_slices:
        ms, me = common.merge_intervals(sl_s, sl_e)
        on = common.point_in(seg_s, ms, me)
        # on a CPU
        state[on] = COMPUTATION
        state[on & in_sys] = SYSCALLS
        state[on & in_sync] = SYNC_WAIT
        state[on & in_pf] = PAGE_FAULTS
        # off a CPU: the state the thread left its last CPU in
        order = np.argsort(sl_e, kind="stable")
        ends_sorted = sl_e[order]
        codes = sl_code[order]
        prev = np.searchsorted(ends_sorted, seg_s, side="right") - 1
        leave = np.where(prev >= 0, codes[np.maximum(prev, 0)], 1)  # before the first slice: runnable
        off = ~on
        # 0 unknown, 1 runnable, 2 disk, 3 sleeping
        state[off & (leave == 1)] = PREEMPTED
        state[off & (leave == 2)] = IO_WAIT
        sleepish = off & ((leave == 3) | (leave == 0))
        state[sleepish & in_io] = IO_WAIT
        state[sleepish & ~in_io & in_sync] = SYNC_WAIT
        state[sleepish & ~in_io & ~in_sync & (leave == 3)] = SLEEPING
        # leave == 0 (no switch record) and no other clue stays unknown
    elif not trace_has_sched:
        state[in_sys] = SYSCALLS
        state[in_sync] = SYNC_WAIT
    return Timeline(tid, start, end, seg_s, seg_e, state, bool(n_slices), n_slices, n_migr, sl_s, sl_e, sl_cpu)


_CACHE: dict[int, tuple[object, dict]] = {}


def timelines(con, prog: common.Program | None = None) -> dict[int, Timeline]:
    """Timelines of every program thread, computed once per connection."""
    key = id(con)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is con:
        return hit[1]
    prog = prog or common.program(con)
    has_sched = common.row_count(con, "cpu_slices") > 0
    out = {}
    for tid in prog.tids:
        out[tid] = thread_timeline(con, tid, prog.start[tid], prog.end[tid], has_sched)
    if len(_CACHE) > 8:
        _CACHE.clear()
    _CACHE[key] = (con, out)
    return out
