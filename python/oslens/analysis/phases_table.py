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

from oslens.analysis import db, program

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


def _phase_filter(con, tid: int, wall: int, expand: float) -> tuple[str, list]:
    """A SQL condition (and its parameters) selecting a thread's phases among `regions`: the
    regions at its phase level, where a phase covering at least `expand` of the thread's wall
    time and holding regions of its own is replaced by the phases inside it (a parent whose
    computation is wrapped in one region shows that computation's phases). Works in SQL so
    that threads with millions of regions cost a few queries."""
    base = "tid = ? AND end_ns IS NOT NULL"
    thr = int(expand * wall) if wall > 0 else None

    def level(lo, hi, mind):
        win, wp = "", []
        if lo is not None:
            win, wp = " AND begin_ns >= ? AND end_ns <= ?", [lo, hi]
        rows = con.execute(
            f"SELECT depth, count(*) FROM regions WHERE {base} AND depth >= ?{win} GROUP BY depth",
            [tid, mind, *wp],
        ).fetchall()
        d = _choose_depth({int(a): int(n) for a, n in rows})
        if d is None:
            return [], []
        conds, params, excluded = [], [], []
        if thr is not None:
            for b, e in con.execute(
                f"SELECT begin_ns, end_ns FROM regions WHERE {base} AND depth = ?{win} AND end_ns - begin_ns >= ? "
                "ORDER BY begin_ns LIMIT 16",
                [tid, d, *wp, thr],
            ).fetchall():
                c2, p2 = level(int(b), int(e), d + 1)
                if c2:
                    excluded.append(int(b))
                    conds += c2
                    params += p2
        cond = f"(depth = ?{win}" + (f" AND begin_ns NOT IN ({','.join('?' * len(excluded))})" if excluded else "") + ")"
        return [cond] + conds, [d, *wp, *excluded] + params

    conds, params = level(None, None, 0)
    if not conds:
        return "", []
    return f"{base} AND ({' OR '.join(conds)})", [tid, *params]


def thread_phases(con, tid: int, wall: int, expand: float = 0.8, limit: int | None = None):
    """(name, depth, begin, end) of a thread's phases in time order (see _phase_filter)."""
    where, params = _phase_filter(con, tid, wall, expand)
    if not where:
        return []
    lim = f" LIMIT {int(limit)}" if limit is not None else ""
    rows = con.execute(
        f"SELECT name, depth, begin_ns, end_ns FROM regions WHERE {where} ORDER BY begin_ns, depth{lim}", params
    ).fetchall()
    return [(n, int(d), int(b), int(e)) for n, d, b, e in rows]


def _ordered_tids(prog: program.Program) -> list[int]:
    tids = list(prog.tids)
    if prog.main_tid in tids:
        tids.remove(prog.main_tid)
        tids.insert(0, prog.main_tid)
    return tids


def phase_durations(con, limit: int = 200) -> pa.Table:
    if not db.row_count(con, "regions"):
        return db.empty_table(SCHEMA)
    prog = program.program(con)
    t0 = program.trace_origin(con, prog)
    out = []
    for tid in _ordered_tids(prog):
        wall = (prog.end[tid] - prog.start[tid]) or 1
        for name, depth, b, e in thread_phases(con, tid, wall, limit=limit):
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
    return db.from_rows(out, SCHEMA)


def phase_summary(con) -> pa.Table:
    """Phase regions grouped by thread and name (for threads with many repeated phases)."""
    if not db.row_count(con, "regions"):
        return db.empty_table(SUMMARY_SCHEMA)
    prog = program.program(con)
    t0 = program.trace_origin(con, prog)
    out = []
    for tid in _ordered_tids(prog):
        wall = (prog.end[tid] - prog.start[tid]) or 1
        where, params = _phase_filter(con, tid, wall, 0.8)
        if not where:
            continue
        groups = {
            name: (int(n), int(tot), int(b), int(e))
            for name, n, tot, b, e in con.execute(
                f"SELECT name, count(*), sum(end_ns - begin_ns), min(begin_ns), max(end_ns) FROM regions "
                f"WHERE {where} GROUP BY name",
                params,
            ).fetchall()
        }
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
    return db.from_rows(out, SUMMARY_SCHEMA)
