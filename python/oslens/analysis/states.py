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
              woken (sched_waking) since it left, not yet on a run queue (sched_wakeup)
                                               -> wakeup_latency
              woken and on a run queue, waiting for a CPU -> preempted (runnable)
              left it in 'D' (uninterruptible), or its own block I/O is in flight -> io_wait
              inside a synchronisation wait    -> sync_wait
              otherwise (sleep, poll, pipe...) -> sleeping
Without scheduling records a thread's time is sync_wait inside synchronisation waits, syscalls
inside system calls, and unknown elsewhere.

Every interval ends where its evidence ends, never at the thread's end: a block request with no
completion counts only through the 'D' state of the switch that left the CPU; a system call
whose exit was not recorded covers nothing (the thread's on-CPU time from its entry to its next
system call is unknown); a synchronisation wait whose acquire was not recorded is a wait only
while the thread is off-CPU asleep, and only up to the thread's next record (or, when its
recorder dropped events, up to the loss: the wait's own request). Unknown time carries its reason
(UNKNOWN_REASONS).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oslens.analysis import db, intervals, program
from oslens.store.kernel_fields import STATE_LETTERS, STATE_PREEMPTED

COMPUTATION, SYSCALLS, IO_WAIT, PAGE_FAULTS, PREEMPTED, SYNC_WAIT, SLEEPING, UNKNOWN, INSTRUMENTATION, WAKEUP_LATENCY = \
    range(10)
STATE_NAMES = ["computation", "syscalls", "io_wait", "page_faults", "preempted", "sync_wait", "sleeping", "unknown",
               "instrumentation", "wakeup_latency"]

# why a segment is unknown (Timeline.why), 0 when it is not
NO_SCHED, NO_SWITCH_STATE, SYSCALL_EXIT_LOST, ACQUIRE_LOST, NO_SLICES, SWITCH_IN_LOST, SWITCH_IN_NOT_EMITTED = \
    1, 2, 3, 4, 5, 6, 7
UNKNOWN_REASONS = {
    NO_SCHED: "no scheduling events",
    NO_SLICES: "no CPU slice of this thread was recorded",
    NO_SWITCH_STATE: "left its CPU with no switch record saying in which state",
    SYSCALL_EXIT_LOST: "on a CPU after a system call whose exit was not recorded",
    ACQUIRE_LOST: "on a CPU inside a lock wait whose acquire was not recorded",
    SWITCH_IN_LOST: "on a CPU for part of this time: the switch onto it was not recorded",
    SWITCH_IN_NOT_EMITTED: "on a CPU for part of this time: the kernel emitted no switch onto it (its own stream "
                           "lacks it; the collector lost nothing)",
}


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
    why: np.ndarray | None = None  # per segment: UNKNOWN_REASONS key when state is UNKNOWN, else 0
    lost_acquires: int = 0  # lock waits whose acquire was not recorded because the recorder dropped events

    def total(self, code: int) -> int:
        m = self.state == code
        return int((self.seg_end[m] - self.seg_start[m]).sum())

    def unknown_reasons(self) -> dict[str, int]:
        """ns of unknown time per reason."""
        if self.why is None:
            return {}
        out = {}
        for code, text in UNKNOWN_REASONS.items():
            m = (self.state == UNKNOWN) & (self.why == code)
            if m.any():
                out[text] = int((self.seg_end[m] - self.seg_start[m]).sum())
        return out

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
        bit = {letter: b for b, letter in STATE_LETTERS}
        if v & bit["S"]:
            return "S"
        if v & bit["D"]:
            return "D"
        if v & STATE_PREEMPTED:  # preempted while running
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
    cols = db.columns(con, "faults")
    if "end_ns" in cols:
        return "SELECT ts, end_ns FROM faults WHERE tid = ? AND end_ns IS NOT NULL"
    if "duration_ns" in cols:
        return "SELECT ts, ts + duration_ns FROM faults WHERE tid = ? AND duration_ns IS NOT NULL"
    return None


def thread_timeline(con, tid: int, start: int, end: int, trace_has_sched: bool) -> Timeline:
    empty = np.zeros(0, np.int64)
    # CPU slices and the state each ended in, as a code: 0 unknown, 1 runnable, 2 disk, 3 sleeping
    sl_s, sl_e, sl_cpu, sl_code = empty, empty, empty, np.zeros(0, np.int8)
    sl_inferred = np.zeros(0, bool)
    if db.table_exists(con, "cpu_slices"):
        # a slice whose start was not recorded spans the window it may have started in (unknown)
        inferred = "s.start_inferred" if "start_inferred" in db.columns(con, "cpu_slices") else "false"
        if db.table_exists(con, "switches"):
            sql = f"""SELECT s.start_ns, s.end_ns, s.cpu, any_value({STATE_CODE_SQL.format(col="w.prev_state")}) AS code,
                          bool_or(coalesce({inferred}, false))
                   FROM cpu_slices s LEFT JOIN switches w
                     ON w.prev_tid = s.tid AND w.ts = s.end_ns AND w.cpu = s.cpu
                   WHERE s.tid = ? AND s.end_ns > ? AND s.start_ns < ?
                   GROUP BY s.start_ns, s.end_ns, s.cpu ORDER BY s.start_ns"""
        else:
            sql = f"""SELECT start_ns, end_ns, cpu, 0 AS code, coalesce({inferred}, false) FROM cpu_slices s
                     WHERE tid = ? AND end_ns > ? AND start_ns < ? ORDER BY start_ns"""
        t = con.execute(sql, [tid, start, end]).fetch_arrow_table()
        if t.num_rows:
            sl_s = t.column(0).to_numpy().astype(np.int64)
            sl_e = t.column(1).to_numpy().astype(np.int64)
            sl_cpu = t.column(2).fill_null(-1).to_numpy().astype(np.int64)
            sl_code = t.column(3).fill_null(0).to_numpy().astype(np.int8)
            sl_inferred = t.column(4).fill_null(False).to_numpy(zero_copy_only=False).astype(bool)
    n_slices = len(sl_s)
    n_migr = int((sl_cpu[1:] != sl_cpu[:-1]).sum()) if n_slices > 1 else 0
    sl_s, sl_e, sl_cpu, sl_code, sl_inferred = _bound_by_evidence(con, tid, sl_s, sl_e, sl_cpu, sl_code, sl_inferred)
    sl_s = np.clip(sl_s, start, end)
    sl_e = np.clip(sl_e, start, end)

    sys_s, sys_e, open_sys_s, open_sys_e = _syscall_intervals(con, tid, end)
    sync_s, sync_e, open_sync_s, open_sync_e, lost_acq = _sync_intervals(con, tid, end)
    io_s, io_e = empty, empty
    if db.table_exists(con, "block_io"):
        # only completed requests: an unanswered one is I/O wait through the 'D' state alone
        io_s, io_e = _intervals(
            con,
            "SELECT issue_ns, complete_ns FROM block_io WHERE tid = ? AND issue_ns IS NOT NULL AND complete_ns IS NOT NULL",
            [tid],
        )
    pf_s, pf_e = empty, empty
    fsql = _fault_duration_sql(con) if db.table_exists(con, "faults") else None
    if fsql:
        pf_s, pf_e = _intervals(con, fsql, [tid])

    # the recorder's own pauses (chunk opened or flushed in the thread): oslens's time, whatever
    # the thread did meanwhile (its writes, their waits, its preemption)
    pz_s, pz_e = _intervals(con, "SELECT start_ns, end_ns FROM pauses WHERE tid = ? AND end_ns > start_ns", [tid]) \
        if "end_ns" in db.columns(con, "pauses") else (empty, empty)
    cs, ce = _recorder_close(con, tid, end)
    pz_s, pz_e = np.append(pz_s, cs), np.append(pz_e, ce)
    wake, enqueue = _wakeups(con, tid, start, end)
    bounds = np.concatenate([[start, end], sl_s, sl_e, sys_s, sys_e, sync_s, sync_e, io_s, io_e, pf_s, pf_e,
                             open_sys_s, open_sys_e, open_sync_s, open_sync_e, pz_s, pz_e, wake, enqueue])
    bounds = np.unique(np.clip(bounds, start, end))
    seg_s, seg_e = bounds[:-1], bounds[1:]
    if len(seg_s) == 0:
        return Timeline(tid, start, end, seg_s, seg_e, np.zeros(0, np.int8), bool(n_slices), n_slices, n_migr,
                        sl_s, sl_e, sl_cpu, np.zeros(0, np.int8), lost_acq)

    in_sys = intervals.point_in(seg_s, *intervals.merge_intervals(sys_s, sys_e))
    in_sync = intervals.point_in(seg_s, *intervals.merge_intervals(sync_s, sync_e))
    in_io = intervals.point_in(seg_s, *intervals.merge_intervals(io_s, io_e))
    in_pf = intervals.point_in(seg_s, *intervals.merge_intervals(pf_s, pf_e))
    in_open_sys = intervals.point_in(seg_s, *intervals.merge_intervals(open_sys_s, open_sys_e)) & ~in_sys
    in_open_sync = intervals.point_in(seg_s, *intervals.merge_intervals(open_sync_s, open_sync_e)) & ~in_sync
    state = np.full(len(seg_s), UNKNOWN, np.int8)
    why = np.zeros(len(seg_s), np.int8)

    if n_slices:
        ms, me = intervals.merge_intervals(sl_s[~sl_inferred], sl_e[~sl_inferred])
        on = intervals.point_in(seg_s, ms, me)
        # on a CPU
        state[on] = COMPUTATION
        state[on & in_open_sys] = UNKNOWN
        why[on & in_open_sys] = SYSCALL_EXIT_LOST
        state[on & in_sys] = SYSCALLS
        state[on & in_open_sync & ~in_sys] = UNKNOWN
        why[on & in_open_sync & ~in_sys] = ACQUIRE_LOST
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
        state[sleepish & ~in_io & (in_sync | in_open_sync)] = SYNC_WAIT
        state[sleepish & ~in_io & ~in_sync & ~in_open_sync & (leave == 3)] = SLEEPING
        # woken since it left its CPU: runnable, waiting for one (the kernel's run_delay, not its
        # I/O or sleep: delay accounting ends a task's blkio wait at the wakeup too)
        if len(wake):
            last_wake = np.searchsorted(wake, seg_s, side="right") - 1
            woken = off & (prev >= 0) & (last_wake >= 0) & (wake[np.maximum(last_wake, 0)] >= ends_sorted[np.maximum(prev, 0)])
            state[woken] = PREEMPTED
            # until it joins a run queue it is not yet waiting for a CPU (sched_wakeup)
            state[woken & (seg_s < enqueue[np.maximum(last_wake, 0)])] = WAKEUP_LATENCY
        # leave == 0 (no switch record) and no other clue stays unknown
        why[(state == UNKNOWN) & (why == 0)] = NO_SWITCH_STATE
        maybe_on = ~on & intervals.point_in(seg_s, *intervals.merge_intervals(sl_s[sl_inferred], sl_e[sl_inferred]))
        state[maybe_on], why[maybe_on] = UNKNOWN, SWITCH_IN_LOST if _kernel_lost_any(con) else SWITCH_IN_NOT_EMITTED
    else:
        if not trace_has_sched:
            state[in_sys] = SYSCALLS
            state[in_sync] = SYNC_WAIT
        why[state == UNKNOWN] = NO_SLICES if trace_has_sched else NO_SCHED
    paused = intervals.point_in(seg_s, *intervals.merge_intervals(pz_s, pz_e))
    state[paused], why[paused] = INSTRUMENTATION, 0
    return Timeline(tid, start, end, seg_s, seg_e, state, bool(n_slices), n_slices, n_migr, sl_s, sl_e, sl_cpu,
                    why, lost_acq)


def _kernel_lost_any(con) -> bool:
    """Whether the collector lost records (then a missing switch may be its loss, not the kernel's)."""
    if not db.table_exists(con, "kernel_lost"):
        return False
    return bool(con.execute("SELECT coalesce(sum(count), 0) > 0 FROM kernel_lost").fetchone()[0])


# what only a running thread writes: (table, time column, CPU column or None)
EVIDENCE = (("app_events", "ts", "cpu"), ("faults", "ts", "cpu"), ("irqs", "start_ns", "cpu"), ("samples", "ts", "cpu"),
            ("syscalls", "start_ns", None), ("syscalls", "end_ns", None))


def _bound_by_evidence(con, tid: int, sl_s, sl_e, sl_cpu, sl_code, sl_inferred):
    """A slice whose switch-in is missing (start_inferred) is certain from the thread's first
    record inside its window on that CPU (an application record, a page fault, an interrupt or
    IP sample that caught it, a system call's entry or exit: it was running then, and it left the CPU only at the slice's end, which has a
    record): the slice is split there, the certain part no longer inferred."""
    if not sl_inferred.any():
        return sl_s, sl_e, sl_cpu, sl_code, sl_inferred
    parts = [f"SELECT {t} AS ts, {c if c else 'NULL'} AS cpu FROM {n} WHERE tid = $tid AND {t} IS NOT NULL"
             for n, t, c in EVIDENCE if db.table_exists(con, n) and {t, c or t} <= set(db.columns(con, n))]
    if not parts:
        return sl_s, sl_e, sl_cpu, sl_code, sl_inferred
    idx = np.nonzero(sl_inferred)[0]
    rows = con.execute(
        f"""SELECT w.i, min(e.ts) FROM (SELECT unnest($s) AS s, unnest($e) AS e, unnest($c) AS c,
                                               unnest($i) AS i) w
            JOIN ({" UNION ALL ".join(parts)}) e ON e.ts > w.s AND e.ts < w.e AND (e.cpu IS NULL OR e.cpu = w.c)
            GROUP BY w.i""",
        {"tid": tid, "s": sl_s[idx].tolist(), "e": sl_e[idx].tolist(), "c": sl_cpu[idx].tolist(), "i": idx.tolist()},
    ).fetchall()
    if not rows:
        return sl_s, sl_e, sl_cpu, sl_code, sl_inferred
    i = np.array([r[0] for r in rows], np.int64)
    first = np.array([r[1] for r in rows], np.int64)
    # the certain tail [first, end) keeps the slice's end state; the window before it stays inferred
    tail_s, tail_e, tail_cpu, tail_code = first, sl_e[i], sl_cpu[i], sl_code[i]
    sl_e = sl_e.copy()
    sl_e[i] = first
    sl_code = sl_code.copy()
    sl_code[i] = 0
    s = np.concatenate([sl_s, tail_s])
    order = np.argsort(s, kind="stable")
    return (s[order], np.concatenate([sl_e, tail_e])[order], np.concatenate([sl_cpu, tail_cpu])[order],
            np.concatenate([sl_code, tail_code])[order], np.concatenate([sl_inferred, np.zeros(len(i), bool)])[order])


def _wakeups(con, tid: int, start: int, end: int) -> tuple[np.ndarray, np.ndarray]:
    """When the thread was woken (sched_waking), sorted, and when each wakeup put it on a run
    queue (sched_wakeup; the wakeup's own time when not recorded); empty without a wakeups table."""
    if not db.table_exists(con, "wakeups"):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    enq = "coalesce(enqueue_ts_ns, ts)" if "enqueue_ts_ns" in db.columns(con, "wakeups") else "ts"
    t = con.execute(f"SELECT ts, {enq} AS enq FROM wakeups WHERE tid = ? AND ts > ? AND ts < ? ORDER BY ts",
                    [tid, start, end]).fetchnumpy()
    return t["ts"].astype(np.int64), t["enq"].astype(np.int64)


def _recorder_close(con, tid: int, end: int) -> tuple[np.ndarray, np.ndarray]:
    """The recorder closing the thread's chunk as it exits (flushing its records, truncating the
    file): from the close's clock_pair, the thread's last record, to its exit system call (or its
    end). Empty when the thread's records do not end that way (docs/recorder.md)."""
    empty = np.zeros(0, np.int64)
    if not db.table_exists(con, "app_events"):
        return empty, empty
    row = con.execute("SELECT arg_max(kind, ts), max(ts) FROM app_events WHERE tid = ?", [tid]).fetchone()
    if not row or row[0] != "clock_pair" or row[1] is None or row[1] >= end:
        return empty, empty
    stop = end
    if db.table_exists(con, "syscalls"):
        ex = con.execute("SELECT min(start_ns) FROM syscalls WHERE tid = ? AND name IN ('exit', 'exit_group') "
                         "AND start_ns > ?", [tid, row[1]]).fetchone()[0]
        stop = min(int(ex), end) if ex is not None else end
    return np.array([row[1]], np.int64), np.array([stop], np.int64)


def _next_after(con, table: str, column: str, tid: int, starts: np.ndarray, default: np.ndarray) -> np.ndarray:
    """For each start, the thread's first `column` value in `table` strictly after it, else default."""
    if len(starts) == 0:
        return default
    rows = con.execute(
        f"""SELECT o.i, x.v FROM (SELECT unnest(?::BIGINT[]) AS r, generate_subscripts(?::BIGINT[], 1) AS i) o
            ASOF LEFT JOIN (SELECT {column} AS v FROM {table} WHERE tid = ? AND {column} IS NOT NULL) x ON x.v > o.r""",
        [starts.tolist(), starts.tolist(), tid],
    ).fetchall()
    out = default.copy()
    for i, v in rows:
        if v is not None:
            out[int(i) - 1] = int(v)
    return out


def _syscall_intervals(con, tid: int, end: int):
    """Completed system calls, and calls whose exit was not recorded, each open one up to the
    thread's next system call (or its end): inside those only the on-CPU time is in doubt."""
    empty = np.zeros(0, np.int64)
    if not db.table_exists(con, "syscalls"):
        return empty, empty, empty, empty
    s, e = _intervals(con, "SELECT start_ns, end_ns FROM syscalls WHERE tid = ? AND start_ns < ? AND end_ns IS NOT NULL "
                           "ORDER BY start_ns", [tid, end])
    os_, _ = _intervals(con, "SELECT start_ns, start_ns FROM syscalls WHERE tid = ? AND start_ns < ? AND end_ns IS NULL "
                             "ORDER BY start_ns", [tid, end])
    oe = _next_after(con, "syscalls", "start_ns", tid, os_, np.full(len(os_), end, np.int64))
    return s, e, os_, oe


def _sync_intervals(con, tid: int, end: int):
    """Completed synchronisation waits, and waits whose acquire was not recorded. An open wait
    lasts until the thread's next application record; when it has none and the thread's recorder
    dropped events, the acquire was lost with them and the wait ends at its own request (the
    loss); otherwise the thread ended waiting. Returns (starts, ends, open starts, open ends,
    how many waits lost their acquire)."""
    empty = np.zeros(0, np.int64)
    if not db.table_exists(con, "sync"):
        return empty, empty, empty, empty, 0
    s, e = _intervals(con, "SELECT request_ns, coalesce(acquire_ns, release_ns) FROM sync WHERE tid = ? "
                           "AND request_ns IS NOT NULL AND coalesce(acquire_ns, release_ns) IS NOT NULL", [tid])
    os_, _ = _intervals(con, "SELECT request_ns, request_ns FROM sync WHERE tid = ? AND request_ns IS NOT NULL "
                             "AND acquire_ns IS NULL AND release_ns IS NULL ORDER BY request_ns", [tid])
    if len(os_) == 0:
        return s, e, os_, os_, 0
    dropped = _dropped_events(con, tid) > 0
    none = np.full(len(os_), -1, np.int64)
    nxt = none
    if db.table_exists(con, "app_events"):
        nxt = _next_after(con, "app_events", "ts", tid, os_, none)
    lost = (nxt < 0) & dropped
    oe = np.where(nxt >= 0, nxt, np.where(lost, os_, end))
    return s, e, os_, oe, int(lost.sum())


def _dropped_events(con, tid: int) -> int:
    if "lost_events" not in db.columns(con, "threads"):
        return 0
    row = con.execute("SELECT sum(lost_events) FROM threads WHERE tid = ?", [tid]).fetchone()
    return int(row[0] or 0) if row else 0


_CACHE: dict[int, tuple[object, dict, object]] = {}


def timelines(con, prog: program.Program | None = None) -> dict[int, Timeline]:
    """Timelines of every program thread, computed once per connection and program (the
    program is computed again when its tables change size: program.program)."""
    key = id(con)
    prog = prog or program.program(con)
    hit = _CACHE.get(key)
    if hit is not None and hit[0] is con and hit[2] is prog:
        return hit[1]
    has_sched = db.row_count(con, "cpu_slices") > 0
    out = {}
    for tid in prog.tids:
        out[tid] = thread_timeline(con, tid, prog.start[tid], prog.end[tid], has_sched)
    if len(_CACHE) > 8:
        _CACHE.clear()
    _CACHE[key] = (con, out, prog)
    return out
