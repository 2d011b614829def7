"""Synchronisation summary (Kohr et al. Table 6): for each kind of construct (mutex, barrier,
condition variable, ...) and each object, how many times it was waited for, and the mean,
variance (population) and maximum of the wait (request to acquire), the mean hold time (acquire
to release, where recorded), and how much of the wait coincided with a program thread being
preempted (runnable but off its CPU) - the sign that the wait is caused by the scheduler rather
than by the program's own load balance.

Lock acquisitions counted rather than recorded (the default `--sync contended` counts the
uncontended ones: table lock_counts) are in `count` with a wait of 0, so the count, mean,
variance and maximum are those of every acquisition, as with `--sync all`.

Rows whose object is '(all)' summarise a kind over all its objects, as the paper's table does;
they come first, then every object by total wait, largest first.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from oslens.analysis import db, intervals, program, states

SCHEMA = {
    "kind": pa.string(),
    "object": pa.string(),
    "count": pa.int64(),
    "threads": pa.int64(),
    "wait_total_ns": pa.int64(),
    "wait_mean_ns": pa.float64(),
    "wait_var_ns2": pa.float64(),
    "wait_sd_ns": pa.float64(),
    "wait_max_ns": pa.int64(),
    "hold_mean_ns": pa.float64(),
    "wait_preempted_ns": pa.int64(),
    "preempted_share": pa.float64(),
}


def preempted_union(con, prog=None) -> tuple[np.ndarray, np.ndarray]:
    """When at least one program thread was runnable but off its CPU."""
    prog = prog or program.program(con)
    tls = states.timelines(con, prog)
    ss, ee = [], []
    for tl in tls.values():
        s, e = tl.intervals(states.PREEMPTED)
        ss.append(s)
        ee.append(e)
    if not ss:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    return intervals.merge_intervals(np.concatenate(ss), np.concatenate(ee))


def uncounted_rows(con) -> list[tuple]:
    """(object, tid, count) of the uncontended lock acquisitions counted rather than recorded
    (`--sync contended`, the lock_counts table); their wait is 0 by construction. The object is
    named as the sync rows of the same address name it (by symbol), else by its address."""
    try:
        return con.execute(
            """SELECT coalesce(s.object, c.object), c.tid, sum(c.count)::BIGINT
               FROM lock_counts c LEFT JOIN (SELECT address, any_value(CAST(object AS VARCHAR)) AS object FROM sync
                                            WHERE kind = 'mutex' GROUP BY address) s USING (address)
               GROUP BY ALL""").fetchall()
    except Exception:  # a trace without counters (no application side)
        return []


def sync_summary(con) -> pa.Table:
    counted = uncounted_rows(con)
    if not db.row_count(con, "sync") and not counted:
        return db.empty_table(SCHEMA)
    prog = program.program(con)
    rows = con.execute(
        """SELECT kind, CAST(object AS VARCHAR), tid, request_ns, coalesce(acquire_ns, request_ns), release_ns
           FROM sync WHERE request_ns IS NOT NULL ORDER BY kind, 2, request_ns"""
    ).fetchall()
    kinds = np.array([r[0] for r in rows], dtype=object)
    objs = np.array([r[1] if r[1] is not None else "?" for r in rows], dtype=object)
    tids = np.array([r[2] for r in rows], dtype=np.int64)
    req = np.array([r[3] for r in rows], dtype=np.int64)
    acq = np.array([r[4] for r in rows], dtype=np.int64)
    rel = np.array([r[5] if r[5] is not None else -1 for r in rows], dtype=np.int64)
    wait = np.maximum(acq - req, 0)
    pu_s, pu_e = preempted_union(con, prog)
    pre = intervals.overlap_each(req, np.maximum(acq, req), pu_s, pu_e)
    hold = np.where(rel >= 0, rel - acq, -1)
    # counted acquisitions per mutex object: (number, threads)
    zeros: dict[str, list] = {}
    for obj, tid, n in counted:
        z = zeros.setdefault(obj, [0, set()])
        z[0] += int(n)
        z[1].add(int(tid))

    def summarize(kind, obj, m):
        extra = [zeros[o] for o in zeros if kind == "mutex" and obj in ("(all)", o)]
        n0 = sum(z[0] for z in extra)
        w = wait[m].astype(np.float64)
        n = int(m.sum()) + n0
        h = hold[m]
        h = h[h >= 0]
        tot = int(wait[m].sum())
        p = int(pre[m].sum())
        mean = tot / n
        # a counted acquisition waited 0: it adds to the count and to the squared deviations
        var = (float(((w - mean) ** 2).sum()) + n0 * mean * mean) / n
        return {
            "kind": kind,
            "object": obj,
            "count": n,
            "threads": len(set(tids[m].tolist()).union(*(z[1] for z in extra))),
            "wait_total_ns": tot,
            "wait_mean_ns": mean,
            "wait_var_ns2": var,
            "wait_sd_ns": float(np.sqrt(var)),
            "wait_max_ns": int(wait[m].max()) if m.any() else 0,
            "hold_mean_ns": float(h.mean()) if len(h) else None,
            "wait_preempted_ns": p,
            "preempted_share": (p / tot) if tot else 0.0,
        }

    # each kind's '(all)' row, then every object of every kind by total wait: the ones that
    # matter first, whatever their kind (a report shows the top N)
    totals, obj_rows = [], []
    for kind in sorted(set(kinds.tolist()) | ({"mutex"} if zeros else set())):
        mk = kinds == kind
        totals.append(summarize(kind, "(all)", mk))
        objects = set(objs[mk].tolist()) | (set(zeros) if kind == "mutex" else set())
        obj_rows += [summarize(kind, o, mk & (objs == o)) for o in sorted(objects)]
    obj_rows.sort(key=lambda r: (-r["wait_total_ns"], r["kind"], r["object"]))
    return db.from_rows(totals + obj_rows, SCHEMA)
