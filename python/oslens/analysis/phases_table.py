"""Durations of the program's phases (Kohr et al. Table 5): for each program thread, its regions at
its phase level, in time order, with begin and end relative to the program's start.

A thread's phase level is the shallowest region depth holding more than one region; a thread whose
code is wrapped in one region (`main`, `MDMAIN`) is described by the regions inside it, and a phase
that covers 80% or more of the thread's life is replaced by the phases inside it (water's parent:
CNSTNT, SYSCNS, INITIA, FORK, then SETUP and the STEPs inside WorkStart/MDMAIN, then JOIN).
Threads with more than `limit` phase regions keep the first ones; the summary counts them all.
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


def _choose_depth(counts: dict[int, int]) -> int | None:
    depths = sorted(counts)
    if not depths:
        return None
    for d in depths:
        if counts[d] > 1:
            return d
        if d + 1 not in counts:
            return d
    return depths[-1]


def phase_depth(con, tid: int) -> int | None:
    rows = con.execute(
        "SELECT depth, count(*) FROM regions WHERE tid = ? AND end_ns IS NOT NULL GROUP BY depth ORDER BY depth",
        [tid],
    ).fetchall()
    return _choose_depth({int(d): int(n) for d, n in rows})


def thread_phases(con, tid: int, wall: int, expand: float = 0.8) -> list[tuple[str, int, int, int]]:
    """(name, depth, begin, end) of a thread's phases: the regions at its phase level, where a
    phase covering at least `expand` of the thread's wall time is replaced by the phases inside
    it (a parent whose computation is wrapped in one region shows that computation's phases)."""
    regs = con.execute(
        "SELECT name, depth, begin_ns, end_ns FROM regions WHERE tid = ? AND end_ns IS NOT NULL ORDER BY begin_ns, depth",
        [tid],
    ).fetchall()
    regs = [(n, int(d), int(b), int(e)) for n, d, b, e in regs]

    def level(items):
        counts: dict[int, int] = {}
        for r in items:
            counts[r[1]] = counts.get(r[1], 0) + 1
        d = _choose_depth(counts)
        out = []
        for r in (r for r in items if r[1] == d):
            # only a dominant phase is looked into (at most one per level), so this stays linear
            inner = ([x for x in items if x[1] > d and x[2] >= r[2] and x[3] <= r[3]]
                     if wall > 0 and (r[3] - r[2]) >= expand * wall else [])
            if inner:
                out.extend(level(inner))
            else:
                out.append(r)
        return out

    return level(regs) if regs else []


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
        wall = (prog.end[tid] - prog.start[tid]) or 1
        for name, depth, b, e in thread_phases(con, tid, wall)[:limit]:
            out.append(
                {
                    "tid": tid,
                    "thread": prog.names[tid],
                    "name": name,
                    "depth": depth,
                    "begin_ns": b - t0,
                    "end_ns": e - t0,
                    "duration_ns": e - b,
                    "share": (e - b) / wall,
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
        wall = (prog.end[tid] - prog.start[tid]) or 1
        groups: dict[str, list[int]] = {}
        for name, _, b, e in thread_phases(con, tid, wall):
            g = groups.setdefault(name, [0, 0, b, e])
            g[0] += 1
            g[1] += e - b
            g[2] = min(g[2], b)
            g[3] = max(g[3], e)
        for name, (n, tot, b, e) in sorted(groups.items(), key=lambda kv: kv[1][2]):
            out.append(
                {
                    "tid": tid,
                    "thread": prog.names[tid],
                    "name": name,
                    "count": n,
                    "total_ns": tot,
                    "mean_ns": tot // n,
                    "first_begin_ns": b - t0,
                    "last_end_ns": e - t0,
                }
            )
    return common.from_rows(out, SUMMARY_SCHEMA)
