"""Durations of the program's phases (Kohr et al. Table 5): for each program thread, its regions at
its phase level, in time order, with begin and end relative to the program's start.

A thread's phase level is the shallowest region depth holding more than one region; a thread whose
code is wrapped in one region (`main`, `MDMAIN`) is described by the regions inside it. Threads
with more than `limit` phase regions keep the first ones and the summary counts the rest.
"""

from __future__ import annotations

import pyarrow as pa

from oslens.analysis import common

SCHEMA = {
    "tid": pa.int64(),
    "thread": pa.string(),
    "name": pa.string(),
    "depth": pa.int64(),
    "begin_ns": pa.int64(),
    "end_ns": pa.int64(),
    "duration_ns": pa.int64(),
    "share": pa.float64(),
}

SUMMARY_SCHEMA = {
    "tid": pa.int64(),
    "thread": pa.string(),
    "name": pa.string(),
    "count": pa.int64(),
    "total_ns": pa.int64(),
    "mean_ns": pa.int64(),
    "first_begin_ns": pa.int64(),
    "last_end_ns": pa.int64(),
}


def phase_depth(con, tid: int) -> int | None:
    rows = con.execute(
        "SELECT depth, count(*) FROM regions WHERE tid = ? AND end_ns IS NOT NULL GROUP BY depth ORDER BY depth",
        [tid],
    ).fetchall()
    if not rows:
        return None
    counts = dict((int(d), int(n)) for d, n in rows)
    depths = sorted(counts)
    for d in depths:
        if counts[d] > 1:
            return d
        if d + 1 not in counts:
            return d
    return depths[-1]


def _ordered_tids(prog: common.Program) -> list[int]:
    tids = list(prog.tids)
    if prog.main_tid in tids:
        tids.remove(prog.main_tid)
        tids.insert(0, prog.main_tid)
    return tids


def phase_durations(con, limit: int = 200) -> pa.Table:
    if not common.row_count(con, "regions"):
        return common.empty_table(SCHEMA)
    prog = common.program(con)
    t0 = common.trace_origin(con, prog)
    out = []
    for tid in _ordered_tids(prog):
        d = phase_depth(con, tid)
        if d is None:
            continue
        wall = (prog.end[tid] - prog.start[tid]) or 1
        rows = con.execute(
            "SELECT name, depth, begin_ns, end_ns, end_ns - begin_ns FROM regions "
            "WHERE tid = ? AND depth = ? AND end_ns IS NOT NULL ORDER BY begin_ns LIMIT ?",
            [tid, d, limit],
        ).fetchall()
        for name, depth, b, e, dur in rows:
            out.append(
                {
                    "tid": tid,
                    "thread": prog.names[tid],
                    "name": name,
                    "depth": int(depth),
                    "begin_ns": int(b) - t0,
                    "end_ns": int(e) - t0,
                    "duration_ns": int(dur),
                    "share": int(dur) / wall,
                }
            )
    return common.from_rows(out, SCHEMA)


def phase_summary(con) -> pa.Table:
    """Phase regions grouped by thread and name (for threads with many repeated phases)."""
    if not common.row_count(con, "regions"):
        return common.empty_table(SUMMARY_SCHEMA)
    prog = common.program(con)
    t0 = common.trace_origin(con, prog)
    out = []
    for tid in _ordered_tids(prog):
        d = phase_depth(con, tid)
        if d is None:
            continue
        for name, n, tot, b, e in con.execute(
            "SELECT name, count(*), sum(end_ns - begin_ns), min(begin_ns), max(end_ns) FROM regions "
            "WHERE tid = ? AND depth = ? AND end_ns IS NOT NULL GROUP BY name ORDER BY min(begin_ns)",
            [tid, d],
        ).fetchall():
            out.append(
                {
                    "tid": tid,
                    "thread": prog.names[tid],
                    "name": name,
                    "count": int(n),
                    "total_ns": int(tot),
                    "mean_ns": int(tot) // int(n),
                    "first_begin_ns": int(b) - t0,
                    "last_end_ns": int(e) - t0,
                }
            )
    return common.from_rows(out, SUMMARY_SCHEMA)
