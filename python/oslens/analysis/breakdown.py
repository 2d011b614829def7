"""Execution-time distribution per thread (Kohr et al. Table 3).

Each program thread's life, from its start to its end, is split into computation, system calls,
I/O wait, page-fault handling, woken but not yet on a run queue (wakeup_latency), runnable-but-
waiting (preempted), blocked on synchronisation,
sleeping for other reasons, instrumentation and unknown (see oslens.analysis.states for the
rules). The columns of one row add up to the thread's wall time exactly.

Instrumentation is the recorder's pauses (the `pauses` table: chunk files opened or flushed in
the thread) and its closing of the thread's records as the thread exits (states._recorder_close), whole intervals of the thread's life whatever it did in them (writes, waits for the
disk, preemption), plus an estimate of the CPU cost of recording each event: from the store's
`compensation` table when the trace has one (each record kind's count times its in-vitro cost
measured by `oslens calibrate`), otherwise the number of events the thread recorded times a
per-event cost in the trace's meta (`calibration.event_ns` or an alias). The estimate is taken
out of computation, never out of another state.
"""

from __future__ import annotations

import pyarrow as pa

from oslens.analysis import db, program, states, units

TIME_COLUMNS = [
    "computation_ns",
    "syscalls_ns",
    "io_wait_ns",
    "page_faults_ns",
    "preempted_ns",
    "wakeup_latency_ns",
    "sync_wait_ns",
    "sleeping_ns",
    "instrumentation_ns",
    "unknown_ns",
]

SCHEMA = {
    "pid": pa.int64(),
    "tid": pa.int64(),
    "name": pa.string(),
    "start_ns": pa.int64(),
    "end_ns": pa.int64(),
    "wall_ns": pa.int64(),
    **{c: pa.int64() for c in TIME_COLUMNS},
    "events": pa.int64(),
    "cpu_slices": pa.int64(),
    "migrations": pa.int64(),
    "faults": pa.int64(),
    "syscall_count": pa.int64(),
    "unknown_reason": pa.string(),
}

EVENT_COST_KEYS = [
    "calibration.event_ns",
    "calibration.event_cost_ns",
    "event_cost_ns",
    "recorder.event_cost_ns",
    "calibrate.event_ns",
]


def event_cost_ns(con) -> float | None:
    """The calibrated cost of recording one event, when the trace carries it."""
    m = db.meta(con)
    for k in EVENT_COST_KEYS:
        try:
            v = float(m[k])
        except (KeyError, ValueError):
            continue
        if v >= 0:
            return v
    return None


def _per_tid(con, sql: str) -> dict[int, int]:
    return {int(t): int(v or 0) for t, v in con.execute(sql).fetchall()}


def event_counts(con) -> dict[int, int]:
    """Events each thread recorded (region begin and end count as two)."""
    counts: dict[int, int] = {}
    if db.table_exists(con, "app_events"):
        counts = _per_tid(con, "SELECT tid, count(*) FROM app_events GROUP BY tid")
        kinds = {r[0] for r in con.execute("SELECT DISTINCT kind FROM app_events").fetchall()}
        has_regions = any(k and "region" in str(k) for k in kinds)
    else:
        has_regions = False
    if not has_regions and db.table_exists(con, "regions"):
        for t, n in _per_tid(con, "SELECT tid, 2 * count(*) FROM regions GROUP BY tid").items():
            counts[t] = counts.get(t, 0) + n
    return counts


def pause_ns(con) -> dict[int, int]:
    """Time the recorder itself stopped each thread (the `pauses` table, or app_events of kind
    'pause' whose value is the duration in ns)."""
    if db.table_exists(con, "pauses") and "duration_ns" in db.columns(con, "pauses"):
        return _per_tid(con, "SELECT tid, sum(duration_ns) FROM pauses GROUP BY tid")
    if not db.table_exists(con, "app_events"):
        return {}
    return _per_tid(con, "SELECT tid, sum(value) FROM app_events WHERE kind = 'pause' GROUP BY tid")


def compensation_costs(con) -> tuple[dict[int, int], bool, str | None] | None:
    """What the instrumentation cost each thread according to the store's `compensation` table
    (records × calibrated in-vitro cost per record kind, plus measured pauses): (ns per thread,
    whether anything was charged, why not). None when the trace has no such table."""
    if not db.row_count(con, "compensation"):
        return None
    per = {int(t): int(round(v or 0)) for t, v in con.execute(
        "SELECT tid, sum(cost_ns) FROM compensation GROUP BY tid").fetchall()}
    charged = bool(con.execute(
        "SELECT count(*) FROM compensation WHERE NOT starts_with(coalesce(source, ''), 'not charged')").fetchone()[0])
    why = con.execute(
        "SELECT any_value(source) FROM compensation WHERE starts_with(coalesce(source, ''), 'not charged')").fetchone()[0]
    return per, charged, why


def _count_in_life(con, prog: program.Program, table: str, ts_sql: str) -> dict[int, int]:
    """Rows of `table` per program thread inside the thread's life as the program (the launcher's
    work before exec is oslens's, not the program's)."""
    if not prog.tids or not db.table_exists(con, table):
        return {}
    tids = list(prog.tids)
    rows = con.execute(
        f"""SELECT x.tid, count(*) FROM "{table}" x
            JOIN (SELECT unnest(?::BIGINT[]) AS tid, unnest(?::BIGINT[]) AS lo, unnest(?::BIGINT[]) AS hi) l
              ON x.tid = l.tid AND {ts_sql} >= l.lo AND {ts_sql} <= l.hi
            GROUP BY x.tid""",
        [tids, [prog.start[t] for t in tids], [prog.end[t] for t in tids]],
    ).fetchall()
    return {int(t): int(n) for t, n in rows}


def time_breakdown(con) -> pa.Table:
    prog = program.program(con)
    tls = states.timelines(con, prog)
    cost = event_cost_ns(con)
    events = event_counts(con)
    pauses = pause_ns(con)
    pause_spans = db.row_count(con, "pauses") > 0 and "end_ns" in db.columns(con, "pauses")
    comp = compensation_costs(con)
    faults = _count_in_life(con, prog, "faults", "ts")
    sysn = _count_in_life(con, prog, "syscalls", "coalesce(end_ns, start_ns)")
    out = []
    for tid in prog.tids:
        tl = tls[tid]
        row = {
            "pid": prog.pid_of[tid],
            "tid": tid,
            "name": prog.names[tid],
            "start_ns": tl.start,
            "end_ns": tl.end,
            "wall_ns": tl.end - tl.start,
        }
        for code, name in enumerate(states.STATE_NAMES):
            row[f"{name}_ns"] = tl.total(code)
        # the recorder's pauses are intervals of the timeline already (states.INSTRUMENTATION);
        # what is left is the cost of recording each event, an estimate of CPU time
        paused = pauses.get(tid, 0) if pause_spans else 0  # in the timeline, not charged twice
        if comp is not None:
            instr = max(comp[0].get(tid, 0) - paused, 0)
        else:
            instr = pauses.get(tid, 0) - paused + (int(round(events.get(tid, 0) * cost)) if cost is not None else 0)
        # recording runs on the CPU: it comes out of computation (or, without scheduling
        # records, out of the unknown time)
        pool = "computation_ns" if tl.has_sched else "unknown_ns"
        instr = max(0, min(instr, row[pool]))
        row[pool] -= instr
        row["instrumentation_ns"] += instr
        row["events"] = events.get(tid, 0)
        row["cpu_slices"] = tl.n_slices
        row["migrations"] = tl.n_migrations
        row["faults"] = faults.get(tid, 0)
        row["syscall_count"] = sysn.get(tid, 0)
        reasons = tl.unknown_reasons()
        row["unknown_reason"] = "; ".join(f"{why} {units.fmt_ns(ns)}" for why, ns in reasons.items()) or None
        out.append(row)
    return db.from_rows(out, SCHEMA)


def calibration_used(meta: dict[str, str]) -> str:
    """Which calibration the import compensated with (meta's compensation.*), in a sentence; ""
    when meta does not say (a table made without an import)."""
    if not meta.get("compensation.calibration"):
        return ""
    where = f"{meta['compensation.calibration']}, measured {meta.get('compensation.measured_at') or '?'}"
    if meta.get("compensation.kind") == "quick":
        return (f"Compensated with a quick calibration ({where}; its intervals are wider); "
                "`oslens calibrate` for a full one.")
    return f"Compensated with the full calibration ({where})."


def notes(con) -> list[str]:
    """What the reader should know about how the breakdown was computed for this trace."""
    n = []
    st = db.kernel_status(con)
    if not st["scheduling"]:
        n.append(
            f"Without scheduling events computation, preemption and sleeping cannot be told apart: "
            f"that time is 'unknown' ({st['reason']})."
        )
    comp = compensation_costs(con)
    if comp is not None:
        if comp[1]:
            n.append((
                "Instrumentation is the recorder's pauses and its closing of each thread's records as the thread "
                "exits (measured intervals), plus an estimate: each thread's records × the in-vitro cost of each "
                "record kind measured by `oslens calibrate` on this machine (the `compensation` table). "
                + calibration_used(db.meta(con))
            ).strip())
        else:
            why = (comp[2] or "").removeprefix("not charged:").strip()
            n.append(f"The CPU cost of recording each event is not estimated ({why or 'no calibration'}); it is counted "
                     "as computation (the recorder's pauses and closes, measured, are instrumentation).")
    elif event_cost_ns(con) is None:
        n.append(
            "Instrumentation is not estimated: the trace has no calibrated per-event cost "
            "(run `oslens calibrate` before recording); it is counted as computation."
        )
    else:
        n.append(f"Instrumentation is an estimate: events × {event_cost_ns(con):.1f} ns (calibrated per-event cost).")
    tls = states.timelines(con)
    unknown: dict[str, int] = {}
    for tl in tls.values():
        for why, ns in tl.unknown_reasons().items():
            unknown[why] = unknown.get(why, 0) + ns
    if unknown:
        n.append("Unknown time, by reason: " + "; ".join(
            f"{why} {units.fmt_ns(ns)}" for why, ns in sorted(unknown.items(), key=lambda x: -x[1])) + ".")
    lost = sum(tl.lost_acquires for tl in tls.values())
    if lost:
        n.append(f"{lost} lock wait(s) lost their acquire when the recorder's buffer was full: each ends at the loss "
                 "(its request), not at the thread's end.")
    if db.table_exists(con, "faults") and states._fault_duration_sql(con) is None and db.row_count(con, "faults"):
        n.append("Page faults carry no durations in this trace: their handling time is counted as computation.")
    return n
