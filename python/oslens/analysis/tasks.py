"""Per-task CPU time (Kohr et al. Table 4): every task that held one of the program's CPUs while
the program ran, with what it is (the program, the idle task, a kernel thread, a daemon, oslens
itself, another process), its CPU time on those CPUs inside the program's window, how many
slices it ran, and how often it took a CPU away from a still-runnable program thread.

oslens_activity: what oslens itself did around and inside the program (the launcher before exec,
the recorder's helper threads, the kernel collector and the `oslens` command), measured from the
same kernel records, so the report can show it once as the cost of tracing.
"""

from __future__ import annotations

import pyarrow as pa

from oslens.analysis import db, program, task_kinds

SCHEMA = {
    "tid": pa.int64(),
    "pid": pa.int64(),
    "comm": pa.string(),
    "kind": pa.string(),
    "description": pa.string(),
    "cpu_ns": pa.int64(),
    "share": pa.float64(),
    "slices": pa.int64(),
    "mean_slice_ns": pa.int64(),
    "preemptions_of_program": pa.int64(),
}


def task_cpu(con) -> pa.Table:
    prog = program.program(con)
    if not prog.window or not prog.cpus or not db.table_exists(con, "cpu_slices"):
        return db.empty_table(SCHEMA)
    lo, hi = prog.window
    cpus = ",".join(str(c) for c in prog.cpus)
    rows = con.execute(
        f"""SELECT tid, any_value(pid), mode(comm),
                   sum(least(end_ns, ?) - greatest(start_ns, ?)) AS cpu_ns, count(*)
            FROM cpu_slices
            WHERE cpu IN ({cpus}) AND end_ns > ? AND start_ns < ?
            GROUP BY tid""",
        [hi, lo, lo, hi],
    ).fetchall()
    pre = preemptions_by_task(con, prog)
    total = (hi - lo) * len(prog.cpus)
    host = program.same_host(con)
    parents = task_kinds.task_parents(con)
    out = []
    for tid, pid, comm, cpu_ns, n in rows:
        tid = int(tid)
        pid = int(pid) if pid is not None else None
        kind, desc = task_kinds.classify_task(tid, pid, comm, prog, host, parents)
        if kind == "program":
            comm = prog.names.get(tid, comm)
        out.append(
            {
                "tid": tid,
                "pid": pid,
                "comm": "idle" if tid == 0 else comm,
                "kind": kind,
                "description": desc,
                "cpu_ns": int(cpu_ns),
                "share": (int(cpu_ns) / total) if total else 0.0,
                "slices": int(n),
                "mean_slice_ns": int(cpu_ns) // int(n) if n else 0,
                "preemptions_of_program": pre.get(tid, 0),
            }
        )
    recorded = sum(r["cpu_ns"] for r in out)
    if total and total - recorded > 0:
        # the collector keeps only the switches that involve the program: who ran between two
        # switches that do not is unknown, and said so rather than left out
        out.append(
            {
                "tid": UNRECORDED_TID,
                "pid": None,
                "comm": "(not recorded)",
                "kind": "unrecorded",
                "description": "CPU time on these CPUs whose task the trace does not show (the kernel collector "
                "keeps only the context switches that involve the program)",
                "cpu_ns": total - recorded,
                "share": (total - recorded) / total,
                "slices": 0,
                "mean_slice_ns": 0,
                "preemptions_of_program": 0,
            }
        )
    out.sort(key=lambda r: (-r["cpu_ns"], r["tid"]))
    return db.from_rows(out, SCHEMA)


UNRECORDED_TID = -1


def preemptions_by_task(con, prog: program.Program | None = None) -> dict[int, int]:
    """How many times each task was switched in right after a program thread left its CPU
    still runnable (prev_state 'R'): the task preempted the program."""
    prog = prog or program.program(con)
    if not prog.tids or not db.table_exists(con, "switches"):
        return {}
    tids = ",".join(str(t) for t in prog.tids)
    rows = con.execute(
        f"""SELECT next_tid, count(*) FROM switches
            WHERE prev_tid IN ({tids}) AND upper(substr(CAST(prev_state AS VARCHAR), 1, 1)) IN ('R', '0')
              AND next_tid NOT IN ({tids})
            GROUP BY next_tid"""
    ).fetchall()
    return {int(t): int(n) for t, n in rows}


OWN_SCHEMA = {
    "what": pa.string(),
    "pid": pa.int64(),
    "tid": pa.int64(),
    "comm": pa.string(),
    "start_ns": pa.int64(),
    "end_ns": pa.int64(),
    "cpu_ns": pa.int64(),
    "syscalls": pa.int64(),
    "faults": pa.int64(),
}

LAUNCHER = "launcher before exec"
HELPER = "recorder helper thread"
COLLECTOR = "kernel collector"
COMMAND = "oslens command"


def oslens_activity(con) -> pa.Table:
    """oslens's own work in the trace, one row per task and role: `launcher before exec` (the
    process oslens started, from its start until its exec: held until the recorder is ready, then
    PATH search), `recorder helper thread` (inside the program's processes), `kernel collector`
    and `oslens command` (the recording process itself: the launched process's parent; other
    oslens runs on the machine are not listed), each with its CPU time, system calls and page
    faults over that span. None of it is in the program's tables (program.program)."""
    if not db.row_count(con, "threads"):
        return db.empty_table(OWN_SCHEMA)
    prog = program.program(con)
    cols = db.columns(con, "threads")
    own = "is_oslens" if "is_oslens" in cols else "starts_with(coalesce(name, ''), 'oslens')"
    exec_ns = "exec_ns" if "exec_ns" in cols else "NULL"
    spans: list[tuple[str, int, int, str, int, int]] = []
    launched = program.launched_tid(con)
    rows = con.execute(
        f"SELECT pid, tid, name, start_ns, end_ns, {own}, is_traced, {exec_ns}, parent_tid FROM threads").fetchall()
    # this recording's `oslens` command is the launched process's parent, its collector that
    # command's child: other oslens runs on the machine are other processes
    command = next((int(r[8]) for r in rows if r[1] == launched and r[8] is not None), None)
    for pid, tid, name, s, e, is_own, traced, x, parent in rows:
        if s is None and e is None:
            lo, hi = prog.window or (None, None)
        else:
            lo, hi = s, e
        if tid == launched and s is not None:
            stop = x if x is not None else (prog.start.get(tid) if tid in prog.start else e)
            if stop is not None and stop > s:
                spans.append((LAUNCHER, pid, tid, name, s, stop))
        if not is_own or lo is None or hi is None:
            continue
        if traced:
            what = HELPER
        elif command is not None and pid == command:
            what = COMMAND
        elif command is not None and parent is not None and parent == command and (name or "").startswith("oslens-collect"):
            what = COLLECTOR
        else:
            continue
        spans.append((what, pid, tid, name, lo, hi))
    out = [{"what": w, "pid": p, "tid": t, "comm": n, "start_ns": lo, "end_ns": hi,
            "cpu_ns": _sum_in(con, "cpu_slices", "least(end_ns, {hi}) - greatest(start_ns, {lo})",
                              "end_ns > {lo} AND start_ns < {hi}", t, lo, hi),
            "syscalls": _sum_in(con, "syscalls", "1", "coalesce(end_ns, start_ns) >= {lo} AND coalesce(end_ns, start_ns) < {hi}",
                                t, lo, hi),
            "faults": _sum_in(con, "faults", "1", "ts >= {lo} AND ts < {hi}", t, lo, hi)}
           for w, p, t, n, lo, hi in spans]
    out.sort(key=lambda r: ([LAUNCHER, HELPER, COLLECTOR, COMMAND].index(r["what"]), r["start_ns"] or 0, r["tid"]))
    return db.from_rows(out, OWN_SCHEMA)


def _sum_in(con, table: str, value: str, where: str, tid: int, lo: int, hi: int) -> int:
    if not db.table_exists(con, table):
        return 0
    sql = f'SELECT sum({value}) FROM "{table}" WHERE tid = ? AND ' + where
    row = con.execute(sql.format(lo=int(lo), hi=int(hi)), [tid]).fetchone()
    return int(row[0] or 0)
