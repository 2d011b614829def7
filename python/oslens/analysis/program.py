"""Who the traced program is (its processes, threads, names and the window of time it ran),
where the report's time axis starts, and whether the trace was recorded on this machine."""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

from oslens.analysis.db import first_meta_value, columns, meta, row_count, table_exists


@dataclass
class Program:
    """The traced program: its threads and the window of time it ran."""

    pids: list[int]
    tids: list[int]
    names: dict[int, str]
    pid_of: dict[int, int]
    start: dict[int, int]
    end: dict[int, int]
    main_tid: int | None
    window: tuple[int, int] | None
    cpus: list[int] = field(default_factory=list)
    own_tids: set[int] = field(default_factory=set)  # oslens's threads inside the program's processes
    # this recording's own processes outside the program (the `oslens` command, its collector),
    # from meta `oslens_pids`; empty for traces that do not say
    oslens_pids: set[int] = field(default_factory=set)

    @property
    def tidset(self) -> set[int]:
        return set(self.tids)


def _extent_per_tid(con) -> dict[int, tuple[int, int]]:
    """First and last timestamp seen for each thread, over the tables that have it."""
    parts = []
    if table_exists(con, "app_events"):
        parts.append("SELECT tid, min(ts) AS lo, max(ts) AS hi FROM app_events GROUP BY tid")
    if table_exists(con, "regions"):
        parts.append("SELECT tid, min(begin_ns) AS lo, max(coalesce(end_ns, begin_ns)) AS hi FROM regions GROUP BY tid")
    if table_exists(con, "cpu_slices"):
        parts.append("SELECT tid, min(start_ns) AS lo, max(end_ns) AS hi FROM cpu_slices WHERE tid <> 0 GROUP BY tid")
    if table_exists(con, "sync"):
        parts.append(
            "SELECT tid, min(request_ns) AS lo, max(coalesce(release_ns, acquire_ns, request_ns)) AS hi FROM sync GROUP BY tid"
        )
    if not parts:
        return {}
    sql = "SELECT tid, min(lo), max(hi) FROM (" + " UNION ALL ".join(parts) + ") GROUP BY tid"
    return {int(t): (int(a), int(b)) for t, a, b in con.execute(sql).fetchall() if a is not None}


_PROGRAM_CACHE: dict[int, tuple[object, tuple, "Program"]] = {}


def _fingerprint(con) -> tuple:
    return tuple(row_count(con, t) for t in ("threads", "app_events", "regions", "cpu_slices", "sync"))


def program(con) -> Program:
    """Who the program is: the traced threads (threads.is_traced), or, without a threads
    table, every thread that recorded application events. Computed once per connection (and
    again when the tables it reads change size)."""
    fp = _fingerprint(con)
    hit = _PROGRAM_CACHE.get(id(con))
    if hit is not None and hit[0] is con and hit[1] == fp:
        return hit[2]
    prog = _program(con)
    if len(_PROGRAM_CACHE) > 8:
        _PROGRAM_CACHE.clear()
    _PROGRAM_CACHE[id(con)] = (con, fp, prog)
    return prog


def _program(con) -> Program:
    extent = _extent_per_tid(con)
    names: dict[int, str] = {}
    pid_of: dict[int, int] = {}
    start: dict[int, int] = {}
    end: dict[int, int] = {}
    tids: list[int] = []
    own_tids: set[int] = set()
    if row_count(con, "threads"):
        cols = columns(con, "threads")
        traced = "WHERE is_traced" if "is_traced" in cols else ""
        own = "is_oslens" if "is_oslens" in cols else "false"
        exec_ns = "exec_ns" if "exec_ns" in cols else "NULL"
        q = (f"SELECT pid, tid, name, start_ns, end_ns, {own}, {exec_ns} FROM threads {traced} "
             "ORDER BY coalesce(start_ns, 0), tid")
        launched = launched_tid(con)
        for pid, tid, name, s, e, is_own, x in con.execute(q).fetchall():
            tid = int(tid)
            if is_own or (name or "").startswith("oslens"):
                own_tids.add(tid)
            if tid in pid_of or tid in own_tids:
                continue  # oslens's own helper threads inside the program are not the program
            tids.append(tid)
            pid_of[tid] = int(pid) if pid is not None else tid
            names[tid] = name or f"tid {tid}"
            lo, hi = extent.get(tid, (None, None))
            start[tid] = int(s) if s is not None else lo
            end[tid] = int(e) if e is not None else hi
            if tid == launched and x is not None and start[tid] is not None and int(x) > start[tid]:
                # before its exec the process oslens started is oslens's launcher, held until
                # the recorder is ready, then searching PATH (docs/report.md)
                start[tid] = min(int(x), end[tid]) if end[tid] is not None else int(x)
    if not tids:
        pids = {}
        if table_exists(con, "app_events"):
            pids = {int(t): int(p) for p, t in con.execute("SELECT DISTINCT pid, tid FROM app_events").fetchall()}
        elif table_exists(con, "regions"):
            pids = {int(t): int(p) for p, t in con.execute("SELECT DISTINCT pid, tid FROM regions").fetchall()}
        for tid in sorted(pids, key=lambda t: (extent.get(t, (0, 0))[0], t)):
            tids.append(tid)
            pid_of[tid] = pids[tid]
            names[tid] = f"tid {tid}"
            start[tid], end[tid] = extent.get(tid, (None, None))
    # drop threads with no time at all
    tids = [t for t in tids if start.get(t) is not None and end.get(t) is not None]
    pids = sorted({pid_of[t] for t in tids})
    main = None
    for t in tids:
        if t == pid_of[t]:
            main = t
            break
    if main is None and tids:
        main = min(tids, key=lambda t: start[t])
    window = (min(start[t] for t in tids), max(end[t] for t in tids)) if tids else None
    cpus: list[int] = []
    if tids and table_exists(con, "cpu_slices"):
        con_tids = ",".join(str(t) for t in tids)
        cpus = [int(r[0]) for r in con.execute(
            f"SELECT DISTINCT cpu FROM cpu_slices WHERE tid IN ({con_tids}) ORDER BY cpu").fetchall()]
    return Program(pids, tids, names, pid_of, start, end, main, window, cpus, own_tids, recording_pids(con))


def recording_pids(con) -> set[int]:
    """The pids of this recording's `oslens` command and kernel collector (meta `oslens_pids`)."""
    out = set()
    for k, v in meta(con).items():
        if k.startswith("oslens_pids."):
            try:
                out.add(int(v))
            except ValueError:
                continue
    return out


def launched_tid(con) -> int | None:
    """The process `oslens record` started (its main thread), from meta."""
    try:
        return int(meta(con).get("pid") or 0) or None
    except ValueError:
        return None


def trace_origin(con, prog: Program | None = None) -> int:
    """The zero of report time axes: the program's start, else the first event."""
    prog = prog or program(con)
    if prog.window:
        return prog.window[0]
    m = meta(con)
    for k in ("start_ns", "trace.start_ns", "record.start_ns"):
        try:
            return int(m[k])
        except (KeyError, ValueError):
            pass
    return 0


def same_host(con) -> bool:
    m = meta(con)
    host = first_meta_value(m, ["machine.hostname", "hostname", "host", "system.hostname"])
    return bool(host) and host == socket.gethostname() and os.path.isdir("/proc")
