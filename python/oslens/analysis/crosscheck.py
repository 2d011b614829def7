"""The built-in cross-check: the trace's own counts for the program against the kernel's
independent figures for the same run (docs/report.md, /work/shared/ground-truth.md).

`oslens record` keeps the rusage of the child it waited for (wait4: voluntary and involuntary
context switches, minor and major faults, user + system CPU time) and /proc/PID/schedstat of its
main thread read just before it was reaped (CPU time and the number of times it ran). The trace
figure is counted over exactly the tasks the kernel's figure covers, so the expected differences
are accounted for rather than tolerated:

- rusage counts every thread of the process, oslens's recorder helper threads included: they are
  counted here too (they are in the trace's threads table, marked traced);
- rusage includes the children the process waited for, not orphaned grandchildren: a process
  whose parent ended before it is left out, with its own children;
- a thread other than the main one is released (its counts added to the process) before its last
  switch, so that switch (state X, dead) is not in rusage; the main thread's (Z) is;
- the launcher's work before exec is the same process: what it did after the collector attached
  (its copy-on-write faults, the exec) is in both figures; what it did before (from the fork until
  it blocked, held) only the kernel saw, and `oslens record` reads it from /proc just before the
  release (`before_release` in meta) and takes it off the kernel's figures;
- rusage also counts page faults the kernel takes on user addresses inside system calls, which
  the user-fault tracepoint does not see: the trace's fault count may only be lower, by those.
- CPU time: a slice whose switch-in was not recorded (cpu_slices.start_inferred) ran for at most
  its window, so the kernel's figure may exceed the trace's by those windows; slices hold the
  tracepoint's own cost at each switch (SWITCH_NS) and the time the hypervisor stole from the
  VM's CPU meanwhile, which the kernel leaves out (bounded by /proc/stat's steal over the run,
  meta `steal`); the kernel charges a task switched in after a
  skipped clock update for the tail of the task before it: from the trace, `clock_lags` bounds
  what the program's threads can have been charged of other tasks' time that way, and
  CPU_SLACK_NS covers what it cannot see. docs/report.md has the measurements against perf's
  sched_stat_runtime.

An attach (`record -p`) has no rusage: its threads' /proc counters, read at the attach and the
detach, are held to the trace's counts between the two readings (`crosscheck_attach`).

`counts_by_thread(con)` reads the trace; `compare(counts, kernel, root_pid)` is the pure part
(tables in, table out); `crosscheck(con)` does both with the figures kept in the trace's meta.
"""

from __future__ import annotations

import json

import pyarrow as pa

from oslens.analysis import db, program, units

TOLERANCE = 0.02  # relative: beyond this a count disagrees
SLACK = 2  # counts: a switch or fault at the attach or the reap may fall on either side

COUNTS_SCHEMA = {
    "pid": pa.int64(),
    "tid": pa.int64(),
    "parent_pid": pa.int64(),
    "end_ns": pa.int64(),
    "voluntary": pa.int64(),
    "involuntary": pa.int64(),
    "faults": pa.int64(),
    "cpu_ns": pa.int64(),
    "slices": pa.int64(),
    "unknown_ns": pa.int64(),
}

SCHEMA = {
    "count": pa.string(),
    "source": pa.string(),
    "trace": pa.float64(),
    "kernel": pa.float64(),
    "difference": pa.float64(),
    "agrees": pa.bool_(),
    "note": pa.string(),
}

# (count, kernel key, trace column, unit, note); CPU time compares in ns
COMPARED = [
    ("voluntary switches", "rusage", "nvcsw", "voluntary", ""),
    ("involuntary switches", "rusage", "nivcsw", "involuntary", ""),
    ("page faults", "rusage", "faults", "faults", "rusage also counts faults taken inside system calls"),
    ("CPU time", "rusage", "cpu_ns", "cpu_ns", "user + system"),
    ("main thread CPU time", "schedstat", "cpu_ns", "cpu_ns", "/proc/PID/schedstat"),
    ("main thread runs", "schedstat", "timeslices", "slices", "/proc/PID/schedstat"),
]
# A slice runs from one sched_switch tracepoint to the next, so it holds the scheduler's own work
# around the switch, which the kernel's CPU time (sum_exec_runtime) leaves out: ~1.2 µs per
# switch measured on this VM (stress-ng --switch, docs/report.md); allowed up to this per switch.
SWITCH_NS = 2_000
# The kernel charges a task from its run queue's last clock update, which the scheduler skips
# right after a wakeup or migration that preempts: the task then pays for the tail of whatever
# ran before it on that CPU (docs/report.md, "A skipped clock update"). `clock_lags` bounds each
# such tail from the trace; this much more is allowed for the ones it cannot see (a wakeup the
# trace does not hold): one tick, 4 ms at this VM's and Debian's CONFIG_HZ=250.
CPU_SLACK_NS = 4_000_000
# Without the kernel's tick period (meta sched_tick_ns) a tail is bounded by the longest tick
# Linux allows (CONFIG_HZ=100); a tick's clock update runs this long after its due time at most
# (10-150 us measured on this VM; perf's sched_stat_runtime at ticks).
LONGEST_TICK_NS = 10_000_000
TICK_LATENCY_NS = 1_000_000


def counts_by_thread(con) -> pa.Table:
    """Per traced thread: voluntary and involuntary switches (a dead non-main thread's last
    switch left out, as rusage does), user page faults, CPU time and slices."""
    if not db.row_count(con, "threads") or not db.table_exists(con, "switches"):
        return db.empty_table(COUNTS_SCHEMA)
    traced = "WHERE is_traced" if "is_traced" in db.columns(con, "threads") else ""
    faults = ("(SELECT tid, count(*) AS n FROM faults GROUP BY tid)" if db.table_exists(con, "faults")
              else "(SELECT NULL::BIGINT AS tid, 0 AS n WHERE false)")
    inferred = "start_inferred" if "start_inferred" in db.columns(con, "cpu_slices") else "false"
    slices = (f"""(SELECT tid, sum(end_ns - start_ns) FILTER (WHERE NOT coalesce({inferred}, false)) AS ns,
                          sum(end_ns - start_ns) FILTER (WHERE coalesce({inferred}, false)) AS unknown_ns,
                          count(*) AS n FROM cpu_slices GROUP BY tid)"""
              if db.table_exists(con, "cpu_slices")
              else "(SELECT NULL::BIGINT AS tid, 0 AS ns, 0 AS unknown_ns, 0 AS n WHERE false)")
    return con.execute(f"""
        WITH t AS (SELECT DISTINCT pid, tid, parent_tid, end_ns FROM threads {traced}),
             pp AS (SELECT tid, any_value(pid) AS pid FROM threads GROUP BY tid),
             sw AS (SELECT prev_tid AS tid,
                           count(*) FILTER (WHERE upper(substr(CAST(prev_state AS VARCHAR), 1, 1)) IN ('R', '0'))
                             AS involuntary,
                           count(*) FILTER (WHERE upper(substr(CAST(prev_state AS VARCHAR), 1, 1)) NOT IN ('R', '0', 'X'))
                             AS voluntary_not_dead,
                           count(*) FILTER (WHERE upper(substr(CAST(prev_state AS VARCHAR), 1, 1)) = 'X') AS dead
                    FROM switches WHERE prev_tid <> next_tid GROUP BY prev_tid)
        SELECT t.pid, t.tid, pp.pid AS parent_pid, t.end_ns,
               coalesce(sw.voluntary_not_dead, 0) + CASE WHEN t.tid = t.pid THEN coalesce(sw.dead, 0) ELSE 0 END,
               coalesce(sw.involuntary, 0), coalesce(f.n, 0), coalesce(s.ns, 0), coalesce(s.n, 0),
               coalesce(s.unknown_ns, 0)
        FROM t LEFT JOIN pp ON pp.tid = t.parent_tid LEFT JOIN sw ON sw.tid = t.tid
          LEFT JOIN {faults} f ON f.tid = t.tid LEFT JOIN {slices} s ON s.tid = t.tid
        ORDER BY t.pid, t.tid""").fetch_arrow_table().rename_columns(list(COUNTS_SCHEMA))


def clock_lags(con, tick_ns: int | None) -> pa.Table:
    """Per thread and the process it took the CPU from: the most the kernel can have charged the
    thread of that process's time through a skipped clock update (docs/report.md).

    A wakeup that preempts makes the scheduler skip the run queue's next clock update, so the task
    switched in is charged from the wakeup, while the task it preempts went on running (under
    PREEMPT_NONE until its next preemption point: 0.57 ms seen). That can only happen when the
    thread is the first task that CPU switches to after its wakeup: the task it takes the CPU from
    woke it there (waker on the same CPU) or was on the CPU since before the wakeup. The tick also
    updates the clock, and ticks fall on multiples of `tick_ns` in CLOCK_MONOTONIC (the trace's
    clock), so a tail starts no earlier than the last tick due TICK_LATENCY_NS before the switch."""
    schema = {"tid": pa.int64(), "pid": pa.int64(), "from_pid": pa.int64(), "lag_ns": pa.int64()}
    if not (db.table_exists(con, "switches") and db.table_exists(con, "wakeups")):
        return db.empty_table(schema)
    ready = "SELECT tid, ts, cpu AS at_cpu, waker_tid FROM wakeups"
    if db.table_exists(con, "migrations"):
        ready += " UNION ALL SELECT tid, ts, dest_cpu, NULL FROM migrations"
    if tick_ns:
        start = f"greatest(r.ts, (i.ts - {TICK_LATENCY_NS}) // {int(tick_ns)} * {int(tick_ns)})"
    else:
        start = f"greatest(r.ts, i.ts - {LONGEST_TICK_NS})"
    return con.execute(f"""
        WITH sw AS (SELECT ts, cpu, prev_tid, prev_pid, next_tid, next_pid,
                           lag(ts) OVER w AS before, lag(next_tid) OVER w AS before_next
                    FROM switches WINDOW w AS (PARTITION BY cpu ORDER BY ts)),
             i AS (SELECT * FROM sw WHERE next_tid <> 0 AND prev_tid <> next_tid AND before IS NOT NULL),
             offs AS (SELECT prev_tid AS tid, ts FROM switches),
             r AS ({ready}),
             lags AS (SELECT i.next_tid AS tid, i.next_pid AS pid, i.prev_pid AS from_pid,
                             i.ts - {start} AS lag_ns
                      FROM i ASOF JOIN r ON r.tid = i.next_tid AND r.ts <= i.ts
                        ASOF LEFT JOIN offs o ON o.tid = i.next_tid AND o.ts < i.ts
                      WHERE r.ts >= i.before AND (o.ts IS NULL OR r.ts >= o.ts)
                        AND ((r.waker_tid = i.prev_tid AND r.at_cpu = i.cpu) OR i.before_next = i.prev_tid))
        SELECT tid, any_value(pid), from_pid, sum(greatest(lag_ns, 0))::BIGINT FROM lags
        GROUP BY tid, from_pid ORDER BY tid, from_pid""").fetch_arrow_table().rename_columns(list(schema))


def rusage_population(counts: pa.Table, root_pid: int) -> tuple[set[int], list[int]]:
    """The processes wait4's rusage of `root_pid` covers (it and, recursively, the children that
    ended before their parent, so were waited for) and the orphans left out."""
    rows = counts.to_pylist()
    parent: dict[int, int | None] = {}
    end: dict[int, int] = {}
    for r in rows:
        if r["tid"] == r["pid"]:
            parent[r["pid"]] = r["parent_pid"]
        if r["end_ns"] is not None:
            end[r["pid"]] = max(end.get(r["pid"], r["end_ns"]), r["end_ns"])
    keep, orphans = {root_pid}, []
    changed = True
    while changed:
        changed = False
        for pid, par in parent.items():
            if pid in keep or par not in keep or par == pid:
                continue
            if pid in end and par in end and end[pid] > end[par]:
                if pid not in orphans:
                    orphans.append(pid)
                continue
            keep.add(pid)
            changed = True
    return keep, sorted(orphans)


def _kernel_figures(kernel: dict) -> dict[str, dict]:
    """The kernel's figures less what the held child did before the collector attached."""
    ru = kernel.get("rusage") or {}
    pre = kernel.get("before_release") or {}
    out: dict[str, dict] = {"rusage": {}, "schedstat": {}}
    if ru:
        out["rusage"] = {"nvcsw": ru.get("nvcsw", 0) - pre.get("nvcsw", 0),
                         "nivcsw": ru.get("nivcsw", 0) - pre.get("nivcsw", 0),
                         "faults": ru.get("minflt", 0) + ru.get("majflt", 0) - pre.get("minflt", 0) - pre.get("majflt", 0),
                         "cpu_ns": ru.get("utime_ns", 0) + ru.get("stime_ns", 0) - pre.get("cpu_ns", 0)}
    ss = kernel.get("schedstat") or {}
    if ss:
        out["schedstat"] = {"cpu_ns": ss.get("cpu_ns", 0) - pre.get("cpu_ns", 0),
                            "timeslices": ss.get("timeslices", 0) - pre.get("timeslices", 0)}
    return out


def stolen_at_most(kernel: dict, cpus) -> int:
    """The most time the hypervisor can have stolen from the run on `cpus` (None: every CPU):
    /proc/stat counts steal in whole ticks, so a CPU's share is below (ticks gained + 1) ticks."""
    steal = kernel.get("steal") or {}
    tick = steal.get("tick_ns")
    if not tick:
        return 0
    names = [k for k in steal if k.startswith("cpu")]
    if cpus is not None:
        names = [k for k in names if k[3:].isdigit() and int(k[3:]) in set(cpus)]
    return sum((max(steal[k], 0) + 1) * tick for k in names)


def _agrees(name: str, trace: float, kernel: float, switches: int, unknown: float = 0, stolen: float = 0,
            lagged: float = 0) -> bool:
    diff = trace - kernel
    if name == "page faults" and diff < 0:  # the tracepoint sees user-mode faults only
        return True
    if "CPU" in name:
        if diff < 0:  # a slice whose switch-in was lost ran for at most its window (cpu_slices.start_inferred);
            # the kernel charged at most `lagged` of other tasks' time through skipped clock updates
            diff = min(diff + unknown + lagged, 0)
        else:  # the trace's slices also hold the scheduler's switch time and what the hypervisor stole
            diff = max(diff - SWITCH_NS * switches - stolen, 0)
    slack = CPU_SLACK_NS if "CPU" in name else SLACK
    return abs(diff) <= max(TOLERANCE * abs(kernel), slack)


def lagged_into(lags: pa.Table | None, keep: set[int], tids=None) -> int:
    """What the kernel can have charged the threads of `keep` (only `tids`, if given) of time
    that tasks outside `keep` ran (clock_lags)."""
    if lags is None:
        return 0
    return sum(r["lag_ns"] for r in lags.to_pylist()
               if r["pid"] in keep and r["from_pid"] not in keep and (tids is None or r["tid"] in tids))


def compare(counts: pa.Table, kernel: dict, root_pid: int, cpus=None, lags: pa.Table | None = None) -> pa.Table:
    """One row per compared count: the trace's figure over rusage's population, the kernel's,
    their difference (trace - kernel) and whether they agree. `lags` (clock_lags) bounds what the
    kernel charged the program of other tasks' time."""
    figures = _kernel_figures(kernel)
    keep, orphans = rusage_population(counts, root_pid)
    rows = [r for r in counts.to_pylist() if r["pid"] in keep]
    main = [r for r in rows if r["tid"] == root_pid]
    switches = sum(r["voluntary"] + r["involuntary"] for r in rows)
    out = []
    for name, source, key, col, note in COMPARED:
        k = figures[source].get(key)
        if k is None:
            continue
        over = main if source == "schedstat" else rows
        t = float(sum(r[col] or 0 for r in over))
        if name == "CPU time" and t > k and switches:
            note = f"{note}; the trace's slices hold {(t - k) / switches:,.0f} ns of switching per switch"
        if source == "rusage" and orphans:
            note = "; ".join(x for x in (note, f"{len(orphans)} orphaned process(es) left out") if x)
        unknown = float(sum(r.get("unknown_ns") or 0 for r in over)) if "CPU" in name else 0.0
        if unknown:
            note = f"{note}; {unknown / 1e6:,.1f} ms in slices whose switch-in was not recorded, at most"
        stolen = float(stolen_at_most(kernel, cpus)) if "CPU" in name else 0.0
        if stolen and t > k:
            note = f"{note}; the hypervisor stole up to {stolen / 1e6:,.0f} ms, which the kernel's CPU time leaves out"
        lagged = float(lagged_into(lags, keep, {root_pid} if source == "schedstat" else None)) if "CPU" in name else 0.0
        if lagged and t < k:
            note = (f"{note}; the kernel may have charged it {lagged / 1e6:,.1f} ms that other tasks ran "
                    "(skipped clock updates after wakeups)")
        out.append({"count": name, "source": source, "trace": t, "kernel": float(k), "difference": t - float(k),
                    "agrees": _agrees(name, t, float(k), switches, unknown, stolen, lagged), "note": note})
    return db.from_rows(out, SCHEMA)


def kernel_from_meta(m: dict[str, str]) -> dict:
    """The kernel's figures kept by `oslens record`, from the flattened meta table."""
    out: dict = {}
    for part in ("rusage", "schedstat", "before_release", "steal"):
        vals = {k[len(part) + 1:]: v for k, v in m.items() if k.startswith(part + ".")}
        fig = {}
        for k, v in vals.items():
            try:
                fig[k] = int(float(v))
            except (TypeError, ValueError):
                continue
        if fig:
            out[part] = fig
    return out


# (count, source, counter in /proc, trace column) of an attach: deltas between two readings
ATTACH_COMPARED = [
    ("voluntary switches", "/proc status", "voluntary", "voluntary"),
    ("involuntary switches", "/proc status", "involuntary", "involuntary"),
    ("CPU time", "/proc schedstat", "cpu_ns", "cpu_ns"),
    ("runs", "/proc schedstat", "runs", "switches"),
]


def attach_readings(m: dict[str, str]) -> tuple[list[dict], list[dict]] | None:
    """The two readings `record -p` kept (capture/attach.py kernel_counts), or None."""
    try:
        return (json.loads(m["attach.kernel_counts.at_attach"]), json.loads(m["attach.kernel_counts.at_detach"]))
    except (KeyError, TypeError, ValueError):
        return None


def window_counts(con, windows: dict[int, tuple[int, int]]) -> dict[int, dict]:
    """Per thread, the trace's switches and on-CPU time between its two readings (slices cut at
    them; the part of slices whose switch-in was not recorded kept apart, as unknown_ns)."""
    if not windows or not db.table_exists(con, "switches"):
        return {}
    con.execute("CREATE OR REPLACE TEMP TABLE xc_win (tid BIGINT, lo BIGINT, hi BIGINT)")
    con.executemany("INSERT INTO xc_win VALUES (?, ?, ?)", [(t, lo, hi) for t, (lo, hi) in windows.items()])
    state = "upper(substr(CAST(s.prev_state AS VARCHAR), 1, 1))"
    out = {t: {"voluntary": 0, "involuntary": 0, "cpu_ns": 0, "unknown_ns": 0, "switches": 0} for t in windows}
    for tid, vol, invol in con.execute(f"""
            SELECT w.tid, count(*) FILTER (WHERE {state} NOT IN ('R', '0')), count(*) FILTER (WHERE {state} IN ('R', '0'))
            FROM switches s JOIN xc_win w ON s.prev_tid = w.tid AND s.ts > w.lo AND s.ts <= w.hi
            WHERE s.prev_tid <> s.next_tid GROUP BY w.tid""").fetchall():
        out[tid].update(voluntary=vol, involuntary=invol, switches=vol + invol)
    if db.table_exists(con, "cpu_slices"):
        inferred = "coalesce(c.start_inferred, false)" if "start_inferred" in db.columns(con, "cpu_slices") else "false"
        cut = "greatest(least(c.end_ns, w.hi) - greatest(c.start_ns, w.lo), 0)"
        for tid, ns, unknown in con.execute(f"""
                SELECT w.tid, coalesce(sum({cut}) FILTER (WHERE NOT {inferred}), 0),
                       coalesce(sum({cut}) FILTER (WHERE {inferred}), 0)
                FROM cpu_slices c JOIN xc_win w ON c.tid = w.tid GROUP BY w.tid""").fetchall():
            out[tid].update(cpu_ns=int(ns), unknown_ns=int(unknown))
    con.execute("DROP TABLE xc_win")
    return out


def compare_attach(before: list[dict], after: list[dict], trace: dict[int, dict], lagged: int = 0,
                   stolen: int = 0) -> pa.Table:
    """The trace's counts over each thread's window against the deltas of its two readings, over
    the threads read at both (a thread created or ended during the attach has one reading: left
    out, and said). Each thread is read at its own instant, so the count slack is per thread."""
    first = {r["tid"]: r for r in before}
    both = [(first[r["tid"]], r) for r in after if r["tid"] in first and r["tid"] in trace]
    if not both:  # every attached process ended before the detach: nothing was read twice
        return db.empty_table(SCHEMA)
    left_out = len(set(first) ^ {r["tid"] for r in after})
    switches = sum(trace[b["tid"]]["switches"] for b, _ in both)
    out = []
    for name, source, key, col in ATTACH_COMPARED:
        k = float(sum(a[key] - b[key] for b, a in both))
        t = float(sum(trace[b["tid"]][col] for b, _ in both))
        notes = [f"{len(both)} threads read at the attach and the detach"]
        if left_out:
            notes.append(f"{left_out} thread(s) created or ended during the attach left out (one reading)")
        unknown = float(sum(trace[b["tid"]]["unknown_ns"] for b, _ in both)) if "CPU" in name else 0.0
        if unknown:
            notes.append(f"{unknown / 1e6:,.1f} ms in slices whose switch-in was not recorded, at most")
        lag = float(lagged) if "CPU" in name else 0.0
        if lag and t < k:
            notes.append(f"the kernel may have charged them {lag / 1e6:,.1f} ms that other tasks ran "
                         "(skipped clock updates after wakeups)")
        steal = float(stolen) if "CPU" in name else 0.0
        if steal and t > k:
            notes.append(f"the hypervisor stole up to {steal / 1e6:,.0f} ms, which the kernel's CPU time leaves out")
        agrees = _agrees(name, t, k, switches, unknown, steal, lag) if "CPU" in name else \
            abs(t - k) <= max(TOLERANCE * abs(k), SLACK * max(len(both), 1))
        out.append({"count": name, "source": source, "trace": t, "kernel": k, "difference": t - k,
                    "agrees": agrees, "note": "; ".join(notes)})
    return db.from_rows(out, SCHEMA)


def crosscheck_attach(con, m: dict[str, str]) -> pa.Table:
    """The comparison for an attach (`record -p`): empty without both readings or sched events."""
    readings = attach_readings(m)
    if not readings or not db.kernel_status(con)["scheduling"]:
        return db.empty_table(SCHEMA)
    before, after = readings
    first = {r["tid"]: r["ts"] for r in before}
    windows = {r["tid"]: (first[r["tid"]], r["ts"]) for r in after if r["tid"] in first}
    tick = m.get("sched_tick_ns")
    lags = clock_lags(con, int(tick) if tick and tick.isdigit() else None)
    pids = {r["pid"] for r in before}
    stolen = stolen_at_most(kernel_from_meta(m), program.program(con).cpus or None)
    return compare_attach(before, after, window_counts(con, windows), lagged_into(lags, pids, set(windows)), stolen)


def crosscheck(con) -> pa.Table:
    """The comparison for a trace whose meta keeps the kernel's figures (empty otherwise)."""
    m = db.meta(con)
    if "attach.kernel_counts.at_attach" in m:
        return crosscheck_attach(con, m)
    kernel = kernel_from_meta(m)
    try:
        root = int(m["pid"])
    except (KeyError, ValueError):
        return db.empty_table(SCHEMA)
    if not kernel or not db.kernel_status(con)["scheduling"]:
        return db.empty_table(SCHEMA)
    tick = m.get("sched_tick_ns")
    lags = clock_lags(con, int(tick) if tick and tick.isdigit() else None)
    return compare(counts_by_thread(con), kernel, root, program.program(con).cpus or None, lags)


def _fmt(name: str, v: float) -> str:
    return units.fmt_ns(v) if "CPU" in name else f"{int(v):,}"


def _pair(r: dict) -> str:
    name, t, k = r["count"], r["trace"], r["kernel"]
    if "CPU" in name:
        return f"{name} {t / 1e6:,.1f} ms / {k / 1e6:,.1f} ms"
    sign = "=" if t == k else ("≤" if name == "page faults" and t < k else "vs")
    return f"{name} {int(t):,} {sign} {int(k):,}"


def summary_line(table: pa.Table) -> str | None:
    """One line: trace / kernel for each count, and which disagree."""
    rows = table.to_pylist()
    if not rows:
        return None
    bad = [r for r in rows if not r["agrees"]]
    pairs = ", ".join(_pair(r) for r in (bad or rows))
    sources = ", ".join(dict.fromkeys(r["source"] for r in rows))
    if not bad:
        return f"agrees with the kernel (trace / {sources}): {pairs}"
    return (f"DISAGREES with the kernel in {len(bad)} of {len(rows)} counts (trace / {sources}): {pairs}; "
            "the trace may have missed events")


def to_meta(table: pa.Table) -> dict:
    """What `oslens record` keeps in meta.json (flattened into the meta table as crosscheck.*)."""
    rows = table.to_pylist()
    return {"line": summary_line(table), "agrees": all(r["agrees"] for r in rows),
            "rows": json.dumps(rows)}
