"""The resource vector: what the OS did for the program in each interval.

Fractions of the program's thread time (every thread alive in the interval, from the state
timelines of oslens.analysis.states): on a CPU in user code, in the kernel (system calls, page
faults with durations), runnable but not running, blocked on I/O, sleeping, waiting on a lock,
barrier or condition. Rates per second: system calls, page faults, I/O bytes (block requests
issued; without block records, bytes returned by read/write system calls), context switches
away from the program's threads, wakeups of them. Rates are log-scaled and standardised over the
run (z-scores with a floor on the spread, so a rate that barely moves is not blown up to noise),
then divided by their number, so the rates together weigh about as much as the fractions."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from oslens.analysis import db, states
from oslens.phases import binning

FRACTIONS = ["user", "system", "runnable", "io_wait", "sleeping", "sync_wait"]
RATES = ["syscalls", "faults", "io_bytes", "switches", "wakeups"]
# states.STATE_NAMES code -> fraction column (page faults with durations count as system time)
_STATE_TO_FRACTION = {
    states.COMPUTATION: "user",
    states.SYSCALLS: "system",
    states.PAGE_FAULTS: "system",
    states.PREEMPTED: "runnable",
    states.WAKEUP_LATENCY: "runnable",
    states.IO_WAIT: "io_wait",
    states.SLEEPING: "sleeping",
    states.SYNC_WAIT: "sync_wait",
}
RATE_SPREAD_FLOOR = 0.5  # in natural-log units: a factor of 1.6
_CHILD_WAITS = ("wait4", "waitid")
_IO_SYSCALLS = ("read", "write", "pread64", "pwrite64", "readv", "writev", "preadv", "pwritev", "preadv2", "pwritev2")


@dataclass
class ResourceVector:
    matrix: np.ndarray  # intervals x (fractions + rates), scaled for distances
    fractions: np.ndarray  # intervals x FRACTIONS, raw (0..1)
    rates: np.ndarray  # intervals x RATES, raw (per second)
    known: np.ndarray  # share of thread time whose state is known, per interval
    names: list[str]


def has_scheduling(con) -> bool:
    return db.table_exists(con, "cpu_slices") and db.row_count(con, "cpu_slices") > 0


def _child_waits(con, tids: list[int], edges: np.ndarray) -> np.ndarray:
    """Thread time spent waiting for a child process (wait4, waitid) in each interval."""
    found = _points(con, "syscalls", "start_ns", "tid", tids, extra=f"AND name IN ({','.join(repr(n) for n in _CHILD_WAITS)})",
                    weight=f"coalesce(end_ns, {int(edges[-1])})")
    if found is None:
        return np.zeros(len(edges) - 1)
    s, e = (np.asarray(a, dtype=np.int64) for a in found)
    return binning.overlap(s, e, edges)


def _fractions(con, prog, edges: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    lines = states.timelines(con, prog)
    alive = np.zeros(len(edges) - 1)
    out = np.zeros((len(edges) - 1, len(FRACTIONS)))
    for tl in lines.values():
        alive += overlap_one(tl.start, tl.end, edges)
        for code, name in _STATE_TO_FRACTION.items():
            s, e = tl.intervals(code)
            if len(s):  # one thread's segments are in time order: no sort needed
                out[:, FRACTIONS.index(name)] += binning.overlap(s, e, edges, presorted=True)
    # A parent waiting for its child (a shell, make, time) is not part of the phase: that wait
    # counts neither as thread time nor as sleep.
    waits = np.minimum(_child_waits(con, list(prog.tids), edges), out[:, FRACTIONS.index("sleeping")])
    out[:, FRACTIONS.index("sleeping")] -= waits
    alive -= waits
    out /= np.where(alive > 0, alive, 1.0)[:, None]
    return out, np.clip(out.sum(axis=1), 0.0, 1.0)


def overlap_one(start: int, end: int, edges: np.ndarray) -> np.ndarray:
    return np.clip(np.minimum(edges[1:], end) - np.maximum(edges[:-1], start), 0, None).astype(np.float64)


def _points(con, table: str, ts_col: str, tid_col: str, tids: list[int], extra: str = "", weight: str | None = None):
    if not (db.table_exists(con, table) and db.row_count(con, table)):
        return None
    tid_list = ",".join(str(int(t)) for t in tids) or "NULL"
    w = f", {weight}" if weight else ""
    res = con.execute(f"SELECT {ts_col}{w} FROM {table} WHERE {tid_col} IN ({tid_list}) AND {ts_col} IS NOT NULL {extra}").fetchnumpy()
    cols = list(res.values())
    return cols[0], (cols[1] if weight else None)


def _rates(con, tids: list[int], edges: np.ndarray) -> np.ndarray:
    dt_s = np.diff(edges).astype(np.float64) / 1e9
    out = np.zeros((len(edges) - 1, len(RATES)))

    def put(name, found):
        if found is not None:
            pts, w = found
            out[:, RATES.index(name)] = binning.counts(pts, edges, None if w is None else np.nan_to_num(np.asarray(w, dtype=np.float64))) / dt_s

    put("syscalls", _points(con, "syscalls", "start_ns", "tid", tids))
    put("faults", _points(con, "faults", "ts", "tid", tids))
    io = _points(con, "block_io", "issue_ns", "tid", tids, weight="bytes")
    if io is None:
        names = ",".join(f"'{n}'" for n in _IO_SYSCALLS)
        io = _points(con, "syscalls", "end_ns", "tid", tids, extra=f"AND name IN ({names}) AND ret > 0", weight="ret")
    put("io_bytes", io)
    put("switches", _points(con, "switches", "ts", "prev_tid", tids))
    put("wakeups", _points(con, "wakeups", "ts", "tid", tids))
    return out


def standardise_rates(rates: np.ndarray) -> np.ndarray:
    logs = np.log1p(np.maximum(rates, 0.0))
    spread = np.maximum(logs.std(axis=0), RATE_SPREAD_FLOOR)
    return (logs - logs.mean(axis=0)) / spread / rates.shape[1]


WHILE_NOT_RUNNABLE = ["user", "system", "io_wait", "sleeping", "sync_wait"]


def without_runnable(fractions: np.ndarray) -> np.ndarray:
    """The shares of WHILE_NOT_RUNNABLE in the thread time that was not spent waiting for a CPU
    (an interval that never ran counts as all user). Time runnable but not running, after a
    preemption or after a wakeup, measures the host's other load, not the program's phase: an I/O
    phase on a loaded host waits for a CPU after each fdatasync, and stays an I/O phase."""
    f = np.atleast_2d(fractions)
    runnable = f[:, FRACTIONS.index("runnable")]
    rest = 1.0 - runnable
    out = f[:, [FRACTIONS.index(n) for n in WHILE_NOT_RUNNABLE]] / np.where(rest > 1e-9, rest, 1.0)[:, None]
    out[rest <= 1e-9] = [1.0, 0.0, 0.0, 0.0, 0.0]
    return out.reshape(-1) if np.ndim(fractions) == 1 else out


def demand(fractions: np.ndarray) -> np.ndarray:
    """(user, system) CPU demand of each interval: its on-CPU shares of the time it was not
    waiting for a CPU (without_runnable)."""
    return without_runnable(fractions)[:, :2]


def resource_vector(con, prog, edges: np.ndarray) -> ResourceVector | None:
    """The resource vector of each interval, or None without the kernel's scheduling records."""
    if not has_scheduling(con):
        return None
    fractions, known = _fractions(con, prog, edges)
    rates = _rates(con, list(prog.tids), edges)
    matrix = np.hstack([without_runnable(fractions), standardise_rates(rates)])
    names = ["user demand", "system demand", "io_wait", "sleeping", "sync_wait"] + [f"log {r}/s" for r in RATES]
    return ResourceVector(matrix, fractions, rates, known, names)
