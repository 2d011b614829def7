"""Context-switch pattern over time per CPU and cumulative context switches per CPU (Kohr et al.
Figures 12, 13 and 16).

All three tables cover the program's CPUs (those its threads ran on) during the program's window,
with times relative to the program's start:
  switch_timeline:  per CPU and time bin, the switches (all, involuntary = the previous task was
                    still runnable, and those into or out of a program thread), and the cumulative
                    count of switches on that CPU at the end of the bin;
  cpu_occupancy:    per CPU, time bin and kind of task (program, idle, kernel thread, daemon,
                    oslens, other process), the time that kind held the CPU - who ran where;
  switch_summary:   per CPU, the totals.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from oslens.analysis import db, intervals, program, task_kinds

TIMELINE_SCHEMA = {
    "cpu": pa.int64(),
    "bin": pa.int64(),
    "bin_start_ns": pa.int64(),
    "bin_end_ns": pa.int64(),
    "switches": pa.int64(),
    "involuntary": pa.int64(),
    "program_switches": pa.int64(),
    "cumulative": pa.int64(),
}

OCCUPANCY_SCHEMA = {
    "cpu": pa.int64(),
    "bin": pa.int64(),
    "bin_start_ns": pa.int64(),
    "kind": pa.string(),
    "ns": pa.int64(),
}

SUMMARY_SCHEMA = {
    "cpu": pa.int64(),
    "switches": pa.int64(),
    "involuntary": pa.int64(),
    "voluntary": pa.int64(),
    "into_program": pa.int64(),
    "out_of_program": pa.int64(),
    "per_second": pa.float64(),
}

KINDS = ["program", "idle", "kernel thread", "daemon", "oslens", "other process"]


def _switch_arrays(con, prog):
    lo, hi = prog.window
    cpus = ",".join(str(c) for c in prog.cpus)
    tids = ",".join(str(t) for t in prog.tids) or "NULL"
    t = con.execute(
        f"""SELECT cpu, ts,
                   (upper(substr(CAST(prev_state AS VARCHAR), 1, 1)) IN ('R', '0') AND prev_tid <> 0)::INTEGER AS invol,
                   (prev_tid IN ({tids}) OR next_tid IN ({tids}))::INTEGER AS prog
            FROM switches WHERE cpu IN ({cpus}) AND ts >= ? AND ts <= ? ORDER BY cpu, ts""",
        [lo, hi],
    ).fetch_arrow_table()
    col = lambda i, dt: t.column(i).fill_null(0).to_numpy().astype(dt)  # noqa: E731
    return col(0, np.int64), col(1, np.int64), col(2, bool), col(3, bool)


def _edges(window, bins):
    lo, hi = window
    return np.linspace(lo, max(hi, lo + 1), bins + 1).round().astype(np.int64)


def switch_timeline(con, bins: int = 100) -> pa.Table:
    prog = program.program(con)
    if not prog.window or not prog.cpus or not db.row_count(con, "switches"):
        return db.empty_table(TIMELINE_SCHEMA)
    t0 = prog.window[0]
    edges = _edges(prog.window, bins)
    cpu, ts, invol, progm = _switch_arrays(con, prog)
    out = []
    for c in prog.cpus:
        m = cpu == c
        idx = np.clip(np.searchsorted(edges, ts[m], side="right") - 1, 0, bins - 1)
        n = np.bincount(idx, minlength=bins)
        ni = np.bincount(idx, weights=invol[m], minlength=bins).astype(np.int64)
        npg = np.bincount(idx, weights=progm[m], minlength=bins).astype(np.int64)
        cum = np.cumsum(n)
        for b in range(bins):
            out.append(
                {
                    "cpu": c,
                    "bin": b,
                    "bin_start_ns": int(edges[b] - t0),
                    "bin_end_ns": int(edges[b + 1] - t0),
                    "switches": int(n[b]),
                    "involuntary": int(ni[b]),
                    "program_switches": int(npg[b]),
                    "cumulative": int(cum[b]),
                }
            )
    return db.from_rows(out, TIMELINE_SCHEMA)


def switch_summary(con) -> pa.Table:
    prog = program.program(con)
    if not prog.window or not prog.cpus or not db.row_count(con, "switches"):
        return db.empty_table(SUMMARY_SCHEMA)
    lo, hi = prog.window
    cpus = ",".join(str(c) for c in prog.cpus)
    tids = ",".join(str(t) for t in prog.tids) or "NULL"
    secs = max(hi - lo, 1) / 1e9
    out = []
    for c, n, inv, into, outof in con.execute(
        f"""SELECT cpu, count(*),
                   count(*) FILTER (WHERE upper(substr(CAST(prev_state AS VARCHAR), 1, 1)) IN ('R', '0') AND prev_tid <> 0),
                   count(*) FILTER (WHERE next_tid IN ({tids})),
                   count(*) FILTER (WHERE prev_tid IN ({tids}))
            FROM switches WHERE cpu IN ({cpus}) AND ts >= ? AND ts <= ? GROUP BY cpu ORDER BY cpu""",
        [lo, hi],
    ).fetchall():
        out.append(
            {
                "cpu": int(c),
                "switches": int(n),
                "involuntary": int(inv),
                "voluntary": int(n) - int(inv),
                "into_program": int(into),
                "out_of_program": int(outof),
                "per_second": int(n) / secs,
            }
        )
    return db.from_rows(out, SUMMARY_SCHEMA)


def cpu_occupancy(con, bins: int = 400) -> pa.Table:
    prog = program.program(con)
    if not prog.window or not prog.cpus or not db.row_count(con, "cpu_slices"):
        return db.empty_table(OCCUPANCY_SCHEMA)
    lo, hi = prog.window
    t0 = lo
    edges = _edges(prog.window, bins)
    cpus = ",".join(str(c) for c in prog.cpus)
    host = program.same_host(con)
    parents = task_kinds.task_parents(con)
    where = f"cpu IN ({cpus}) AND end_ns > {int(lo)} AND start_ns < {int(hi)}"
    # what each task is: classified once per distinct task, then joined back in SQL
    distinct = con.execute(f"SELECT DISTINCT tid, pid, comm FROM cpu_slices WHERE {where}").fetchall()
    kind_of = {}
    for tid, pid, comm in distinct:
        k = task_kinds.classify_task(int(tid), None if pid is None else int(pid), comm, prog, host, parents)[0]
        kind_of[(tid, pid, comm)] = KINDS.index(k) if k in KINDS else KINDS.index("other process")
    mapping = pa.table({
        "tid": pa.array([k[0] for k in kind_of], pa.int64()),
        "pid": pa.array([k[1] for k in kind_of], pa.int64()),
        "comm": pa.array([k[2] for k in kind_of], pa.string()),
        "kind": pa.array(list(kind_of.values()), pa.int64()),
    })
    con.register("_oslens_task_kinds", mapping)
    try:
        t = con.execute(
            f"""SELECT s.cpu, k.kind, greatest(s.start_ns, {int(lo)}) AS s, least(s.end_ns, {int(hi)}) AS e
                FROM cpu_slices s JOIN _oslens_task_kinds k
                  ON s.tid = k.tid AND s.pid IS NOT DISTINCT FROM k.pid AND s.comm IS NOT DISTINCT FROM k.comm
                WHERE s.cpu IN ({cpus}) AND s.end_ns > {int(lo)} AND s.start_ns < {int(hi)}"""
        ).fetch_arrow_table()
    finally:
        con.unregister("_oslens_task_kinds")
    a_cpu = t.column(0).to_numpy().astype(np.int64)
    a_kind = t.column(1).to_numpy().astype(np.int64)
    a_s = t.column(2).to_numpy().astype(np.int64)
    a_e = t.column(3).to_numpy().astype(np.int64)
    per = {}
    for c in prog.cpus:
        mc = a_cpu == c
        for ki, k in enumerate(KINDS):
            m = mc & (a_kind == ki)
            if m.any():
                per[(c, k)] = (a_s[m], a_e[m])
    out = []
    for c in prog.cpus:
        for k in KINDS:
            if (c, k) not in per:
                continue
            s, e = intervals.merge_intervals(per[(c, k)][0], per[(c, k)][1])
            occ = intervals.overlap_each(edges[:-1], edges[1:], s, e)
            for b in np.flatnonzero(occ):
                out.append({"cpu": c, "bin": int(b), "bin_start_ns": int(edges[b] - t0), "kind": k, "ns": int(occ[b])})
    return db.from_rows(out, OCCUPANCY_SCHEMA)
