"""What happened just before a flight-recorder snapshot's trigger (docs/flight.md, issue 32): for
the thread the trigger names (every program thread when it names none) and the interval the
condition covered (the slow region or system call; else the last second before the trigger, never
before the snapshot's complete window), where its time went, which tasks held its CPU while it
waited for one, its system calls and the block I/O of that window.

One table, `trigger_window`, a row per fact: `what` is `window` (one row: the interval, the
thread), `state` (time in each state of the breakdown: the off-CPU reasons), `cpu_holder` (time a
task ran on the CPU the thread was waiting for), `syscall` (calls that overlap the window: count,
time inside it) or `io` (block requests issued or completing in it, per direction). Empty for any
trace that is not a snapshot.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa

from oslens.analysis import db, program, states
from oslens.analysis.findings import holders
from oslens.analysis.io_timeline import direction

SCHEMA = {"what": pa.string(), "name": pa.string(), "tid": pa.int64(), "ns": pa.int64(), "count": pa.int64(),
          "bytes": pa.int64()}
LOOKBACK_NS = 1_000_000_000  # a trigger with no interval of its own (a signal, an event) looks back one second


def _int(m: dict, key: str) -> int | None:
    try:
        return int(m[key])
    except (KeyError, TypeError, ValueError):
        return None


def window(m: dict) -> tuple[int, int, int | None] | None:
    """The interval [lo, hi] to explain and the trigger's thread (None: every program thread),
    from the snapshot's meta; None for a trace that is not a snapshot."""
    hi = _int(m, "flight.trigger.t_ns")
    if not m.get("flight.trigger.spec") or hi is None:
        return None
    try:
        complete = json.loads(m.get("flight.complete_window") or "[]")
    except ValueError:
        complete = []
    oldest = complete[0] if len(complete) == 2 and complete[0] is not None else None
    lo = _int(m, "flight.trigger.begin_ns")
    lo = hi - LOOKBACK_NS if lo is None else lo
    return (max(lo, oldest) if oldest is not None else lo), hi, _int(m, "flight.trigger.tid")


def trigger_window(con) -> pa.Table:
    w = window(db.meta(con))
    prog = program.program(con)
    if w is None or not prog.tids:
        return db.empty_table(SCHEMA)
    lo, hi, tid = w
    spec = db.meta(con).get("flight.trigger.spec", "")
    tids = [tid] if tid in prog.tidset else [t for t in prog.tids if t not in prog.own_tids]  # not the recorder's helper
    rows = [{"what": "window", "name": spec, "tid": tid if tid in prog.tidset else None, "ns": hi - lo,
             "count": len(tids)}]
    rows += _states(con, prog, tids, lo, hi)
    rows += _holders(con, prog, tids, lo, hi)
    rows += _syscalls(con, tids, lo, hi)
    rows += _io(con, tids, lo, hi)
    return db.from_rows(rows, SCHEMA)


def _states(con, prog, tids, lo, hi) -> list[dict]:
    tls = states.timelines(con, prog)
    spent = np.zeros(len(states.STATE_NAMES), np.int64)
    for t in tids:
        tl = tls[t]
        cut = np.clip(np.minimum(tl.seg_end, hi) - np.maximum(tl.seg_start, lo), 0, None)
        spent += np.bincount(tl.state.astype(np.int64), weights=cut, minlength=len(spent)).astype(np.int64)
    return [{"what": "state", "name": name, "ns": int(ns)} for name, ns in zip(states.STATE_NAMES, spent.tolist()) if ns]


def _holders(con, prog, tids, lo, hi) -> list[dict]:
    held = holders.runnable_wait_holders(con, prog, tids, (lo, hi))
    names = _comms(con, [t for t in held if t != holders.UNRECORDED])
    out = [{"what": "cpu_holder", "tid": None if t == holders.UNRECORDED else t, "ns": ns,
            "name": "tasks whose switches were not recorded" if t == holders.UNRECORDED else
            ("idle" if t == 0 else f"{names.get(t, '?')} [{t}]")}
           for t, ns in held.items()]
    return sorted(out, key=lambda r: -r["ns"])


def _comms(con, tids: list[int]) -> dict[int, str]:
    if not tids or not db.table_exists(con, "cpu_slices"):
        return {}
    rows = con.execute(f"SELECT tid, any_value(comm) FROM cpu_slices WHERE tid IN ({','.join(map(str, tids))}) GROUP BY tid").fetchall()
    return {int(t): str(c) for t, c in rows}


def _syscalls(con, tids, lo, hi) -> list[dict]:
    if not db.table_exists(con, "syscalls"):
        return []
    rows = con.execute(
        f"""SELECT name, count(*), sum(least(coalesce(end_ns, ?), ?) - greatest(start_ns, ?))
            FROM syscalls WHERE tid IN ({','.join(map(str, tids))}) AND start_ns IS NOT NULL
              AND start_ns < ? AND coalesce(end_ns, ?) > ?
            GROUP BY name ORDER BY 3 DESC, 1""", [hi, hi, lo, hi, hi, lo]).fetchall()
    return [{"what": "syscall", "name": str(n), "count": int(c), "ns": int(ns)} for n, c, ns in rows]


def _io(con, tids, lo, hi) -> list[dict]:
    if not db.table_exists(con, "block_io"):
        return []
    rows = con.execute(
        f"""SELECT rw, bytes, issue_ns, complete_ns FROM block_io WHERE tid IN ({','.join(map(str, tids))})
            AND issue_ns IS NOT NULL AND issue_ns < ? AND coalesce(complete_ns, issue_ns) >= ?""", [hi, lo]).fetchall()
    out: dict[str, dict] = {}
    for rw, nbytes, issue, complete in rows:
        r = out.setdefault(direction(rw), {"what": "io", "name": direction(rw), "count": 0, "bytes": 0, "ns": 0})
        r["count"] += 1
        r["bytes"] += int(nbytes or 0)
        r["ns"] += max(0, min(complete if complete is not None else issue, hi) - max(issue, lo))
    return list(out.values())
