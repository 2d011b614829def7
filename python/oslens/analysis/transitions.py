"""The context-switch transition matrix (Kohr et al. Figure 17): who switched to whom, how often.

Every row of `switches` counts once, so the matrix sums to the number of switches in the trace.
Tasks are labelled by name and thread id (program threads by their trace names, the idle task of
every CPU as 'idle'); beyond the `top` tasks most involved in switches the rest are folded into
'(other tasks)'.
"""

from __future__ import annotations

import pyarrow as pa

from oslens.analysis import db, program, task_kinds

SCHEMA = {
    "prev_task": pa.string(),
    "next_task": pa.string(),
    "prev_kind": pa.string(),
    "next_kind": pa.string(),
    "count": pa.int64(),
}

OTHER = "(other tasks)"


def _labels(con, prog) -> dict[int, tuple[str, str]]:
    host = program.same_host(con)
    parents = task_kinds.task_parents(con)
    rows = con.execute(
        """SELECT tid, any_value(pid), mode(comm) FROM (
               SELECT prev_tid AS tid, prev_pid AS pid, prev_comm AS comm FROM switches
               UNION ALL SELECT next_tid, next_pid, next_comm FROM switches) GROUP BY tid"""
    ).fetchall()
    out = {}
    for tid, pid, comm in rows:
        tid = int(tid)
        kind, _ = task_kinds.classify_task(tid, None if pid is None else int(pid), comm, prog, host, parents)
        if tid == 0:
            label = "idle"
        elif kind == "program":
            label = f"{prog.names.get(tid, comm)} [{tid}]"
        else:
            label = f"{comm or '?'} [{tid}]"
        out[tid] = (label, kind)
    return out


def transition_matrix(con, top: int = 12) -> pa.Table:
    """Long form: one row per (previous task, next task) pair with its count."""
    if not db.row_count(con, "switches"):
        return db.empty_table(SCHEMA)
    prog = program.program(con)
    labels = _labels(con, prog)
    pairs = con.execute("SELECT prev_tid, next_tid, count(*) FROM switches GROUP BY 1, 2").fetchall()
    involvement: dict[int, int] = {}
    for p, n, c in pairs:
        involvement[int(p)] = involvement.get(int(p), 0) + int(c)
        involvement[int(n)] = involvement.get(int(n), 0) + int(c)
    # the program's threads and idle always keep their own rows
    keep = {t for t in involvement if labels[t][1] in ("program", "idle")}
    others = [t for t in sorted(involvement, key=lambda t: (-involvement[t], t)) if t not in keep]
    keep.update(others[:top])

    def lab(t):
        t = int(t)
        return labels[t] if t in keep else (OTHER, "other")

    agg: dict[tuple, int] = {}
    for p, n, c in pairs:
        lp, kp = lab(p)
        ln, kn = lab(n)
        agg[(lp, ln, kp, kn)] = agg.get((lp, ln, kp, kn), 0) + int(c)
    out = [
        {"prev_task": k[0], "next_task": k[1], "prev_kind": k[2], "next_kind": k[3], "count": v}
        for k, v in sorted(agg.items(), key=lambda kv: (-kv[1], kv[0]))
    ]
    return db.from_rows(out, SCHEMA)


def as_matrix(table: pa.Table) -> tuple[list[str], list[list[int]]]:
    """The long form as (task labels, square matrix[prev][next])."""
    rows = table.to_pylist()
    totals: dict[str, int] = {}
    for r in rows:
        totals[r["prev_task"]] = totals.get(r["prev_task"], 0) + r["count"]
        totals[r["next_task"]] = totals.get(r["next_task"], 0) + r["count"]
    labels = sorted(totals, key=lambda x: (x == OTHER, -totals[x], x))
    pos = {lab: i for i, lab in enumerate(labels)}
    m = [[0] * len(labels) for _ in labels]
    for r in rows:
        m[pos[r["prev_task"]]][pos[r["next_task"]]] += r["count"]
    return labels, m
