"""Who held the CPUs program threads waited for, and who preempted them: the evidence the
interference, preemption and synchronisation rules rest on."""

from __future__ import annotations

import numpy as np

from oslens.analysis import db, intervals, states

UNRECORDED = -1  # holder key for runnable waits during CPU time the trace does not attribute


def preemption_counts(con, prog) -> dict[int, int]:
    """For each task, how many times it took a CPU from a still-runnable program thread
    (program threads included)."""
    if not db.table_exists(con, "switches") or not prog.tids:
        return {}
    tids = ",".join(str(t) for t in prog.tids)
    rows = con.execute(
        f"""SELECT next_tid, count(*) FROM switches
            WHERE prev_tid IN ({tids}) AND next_tid <> prev_tid
              AND upper(substr(CAST(prev_state AS VARCHAR), 1, 1)) IN ('R', '0')
            GROUP BY next_tid"""
    ).fetchall()
    return {int(t): int(n) for t, n in rows}


def _preempted_waits(con, prog, tids=None, window=None):
    """Every preempted interval of the program threads `tids` (default: all), cut to `window`
    when given, with the CPU it waits for (the one it last ran on) and the thread: four arrays,
    or None when there is none."""
    tls = states.timelines(con, prog)
    w_s, w_e, w_cpu, w_tid = [], [], [], []
    for tid in prog.tids if tids is None else tids:
        tl = tls[tid]
        ps, pe = intervals.merge_intervals(*tl.intervals(states.PREEMPTED))
        if window is not None:
            ps, pe = np.maximum(ps, window[0]), np.minimum(pe, window[1])
            ps, pe = ps[pe > ps], pe[pe > ps]
        if len(ps) == 0 or tl.slice_start is None or len(tl.slice_start) == 0:
            continue
        order = np.argsort(tl.slice_end, kind="stable")
        ends, cpus = tl.slice_end[order], tl.slice_cpu[order]
        before = np.searchsorted(ends, ps, side="right") - 1
        first_cpu = tl.slice_cpu[np.argmin(tl.slice_start)]
        w_s.append(ps)
        w_e.append(pe)
        w_cpu.append(np.where(before >= 0, cpus[np.maximum(before, 0)], first_cpu))
        w_tid.append(np.full(len(ps), tid, np.int64))
    if not w_s:
        return None
    return np.concatenate(w_s), np.concatenate(w_e), np.concatenate(w_cpu), np.concatenate(w_tid)


def _held_on_cpu(con, cpu: int, window, qs, qe, qt) -> dict[int, int]:
    """Time each task ran on `cpu` during the waits [qs, qe) of threads qt (not their own)."""
    lo, hi = window
    t = con.execute(
        "SELECT start_ns, end_ns, tid FROM cpu_slices WHERE cpu = ? AND end_ns > ? AND start_ns < ? ORDER BY start_ns",
        [cpu, lo, hi],
    ).fetch_arrow_table()
    if t.num_rows == 0:
        return {}
    S = t.column(0).to_numpy().astype(np.int64)
    E = t.column(1).to_numpy().astype(np.int64)
    T = t.column(2).to_numpy().astype(np.int64)
    j0 = np.searchsorted(E, qs, side="right")  # first slice ending after the wait starts
    j1 = np.searchsorted(S, qe, side="left")  # first slice starting at or after it ends
    k = np.maximum(j1 - j0, 0)
    total = int(k.sum())
    if total == 0:
        return {}
    q = np.repeat(np.arange(len(qs)), k)
    offs = np.concatenate([[0], np.cumsum(k)[:-1]])
    j = j0[q] + (np.arange(total) - offs[q])
    ov = np.minimum(E[j], qe[q]) - np.maximum(S[j], qs[q])
    keep = (ov > 0) & (T[j] != qt[q])
    tasks, inv = np.unique(T[j][keep], return_inverse=True)
    sums = np.bincount(inv, weights=ov[keep], minlength=len(tasks))
    return {int(task): int(round(v)) for task, v in zip(tasks.tolist(), sums.tolist())}


def runnable_wait_holders(con, prog, tids=None, window=None) -> dict[int, int]:
    """For each task: the time program threads (`tids`, default all) spent runnable, waiting for
    the CPU they last ran on, while that task held it (summed over the waiting threads); only
    inside `window` when given."""
    if not db.table_exists(con, "cpu_slices") or not prog.tids or not prog.window:
        return {}
    waits = _preempted_waits(con, prog, tids, window)
    if waits is None:
        return {}
    w_s, w_e, w_cpu, w_tid = waits
    out: dict[int, int] = {}
    for c in np.unique(w_cpu).tolist():
        m = w_cpu == c
        for task, v in _held_on_cpu(con, c, window or prog.window, w_s[m], w_e[m], w_tid[m]).items():
            out[task] = out.get(task, 0) + v
    # waiting time no recorded slice covers: the CPU ran tasks whose switches were not recorded
    covered = sum(out.values())
    waited = int((w_e - w_s).sum())
    if waited - covered > 0:
        out[UNRECORDED] = waited - covered
    return out


def innermost_region(con, tid: int, t: int) -> str | None:
    if not db.table_exists(con, "regions"):
        return None
    row = con.execute(
        "SELECT name FROM regions WHERE tid = ? AND begin_ns <= ? AND coalesce(end_ns, ?) > ? "
        "ORDER BY depth DESC LIMIT 1",
        [tid, t, t + 1, t],
    ).fetchone()
    return row[0] if row else None


def sync_preemptors(con, prog, kind: str, obj: str, limit: int = 3) -> list[tuple[str, int]]:
    """Tasks that preempted program threads while `obj` was being waited for."""
    if not db.table_exists(con, "switches"):
        return []
    tids = ",".join(str(t) for t in prog.tids)
    rows = con.execute(
        f"""WITH w AS (SELECT DISTINCT request_ns AS lo, coalesce(acquire_ns, request_ns) AS hi FROM sync
                       WHERE kind = ? AND CAST(object AS VARCHAR) = ?)
            SELECT coalesce(any_value(s.next_comm), '?'), s.next_tid, count(DISTINCT s.ts)
            FROM switches s JOIN w ON s.ts >= w.lo AND s.ts < w.hi
            WHERE s.prev_tid IN ({tids}) AND s.next_tid NOT IN ({tids})
              AND upper(substr(CAST(s.prev_state AS VARCHAR), 1, 1)) IN ('R', '0')
            GROUP BY s.next_tid ORDER BY 3 DESC LIMIT ?""",
        [kind, obj, limit],
    ).fetchall()
    return [(f"{c} [{t}]" if t else "idle", int(n)) for c, t, n in rows]
