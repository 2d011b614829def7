"""The `threads` table: every thread the trace knows, from the recorder's chunks (the program's
threads) merged with the kernel collector's `tasks` (every task seen, with fork and exit times).

is_traced is true for the traced process tree: processes that recorded application events, the
process `oslens record` started, and every task whose parent chain leads to one of them.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from oslens.capture import raw
from oslens.store import schema

NAME_THREAD = raw.CLASS_ID["thread"]


def _col(table: pa.Table, *names):
    for n in names:
        if n in table.column_names:
            return table.column(n).to_pylist()
    return [None] * table.num_rows


def build(app_threads, extent, names: dict, meta: dict, tasks: pa.Table | None) -> pa.Table:
    start, end = extent
    imin, imax = np.iinfo(np.int64).max, np.iinfo(np.int64).min
    meta_names = {(t.get("pid"), t.get("tid")): t.get("name") for t in meta.get("threads") or [] if isinstance(t, dict)}
    rows: dict[int, dict] = {}
    for i, t in enumerate(app_threads):
        name = t.name or names.get(t.pid, {}).get((NAME_THREAD, t.tid)) or meta_names.get((t.pid, t.tid)) or ""
        if t.tid == t.pid:
            parent = t.ppid or None
        else:
            parent = t.pid
        rows[t.tid] = {
            "pid": t.pid, "tid": t.tid, "name": name, "parent_tid": parent,
            "start_ns": None if start[i] == imax else int(start[i]),
            "end_ns": None if end[i] == imin else int(end[i]),
            "is_traced": True, "source": "app", "app_records": t.records, "lost_events": t.dropped_events + t.fault_dropped,
            "exec_ns": None, "is_oslens": False,
        }
    # A main thread exists before the threads it starts and (as far as the recorder can tell)
    # until the last of them ends: its chunk may open late, at its first event.
    by_pid: dict[int, list] = {}
    for r in rows.values():
        by_pid.setdefault(r["pid"], []).append(r)
    for r in list(rows.values()):
        if r["tid"] == r["pid"]:
            mates = by_pid[r["pid"]]
            starts = [o["start_ns"] for o in mates if o["start_ns"] is not None]
            ends = [o["end_ns"] for o in mates if o["end_ns"] is not None]
            if starts:
                r["start_ns"] = min(starts)
            if ends:
                r["end_ns"] = max(ends)
    traced_pids = {t.pid for t in app_threads}
    if meta.get("pid"):
        traced_pids.add(int(meta["pid"]))
    if tasks is not None and tasks.num_rows:
        k_pid = _col(tasks, "pid", "tgid")
        k_tid = _col(tasks, "tid")
        k_comm = _col(tasks, "main_comm", "comm", "name")
        k_exec = _col(tasks, "exec_ns")
        k_own = _col(tasks, "is_oslens")
        k_parent = _col(tasks, "parent_tid", "parent", "ppid")
        k_start = _col(tasks, "start_ns", "start")
        k_end = _col(tasks, "end_ns", "end")
        k_traced = _col(tasks, "is_traced")
        for pid, traced in zip(k_pid, k_traced):
            if traced and pid is not None:
                traced_pids.add(pid)
        pid_of = {}
        parent_of = {}
        for pid, tid, comm, parent, s, e, x, own in zip(k_pid, k_tid, k_comm, k_parent, k_start, k_end, k_exec, k_own):
            if tid is None:
                continue
            pid_of[tid] = pid if pid is not None else tid
            if parent is not None:
                parent_of[tid] = parent
            r = rows.get(tid)
            if r is None:
                # a task no kernel record in this trace named (a flight snapshot's) may be named by its process's names chunk
                named = comm or names.get(pid, {}).get((NAME_THREAD, tid)) or ""
                rows[tid] = {
                    "pid": pid if pid is not None else tid, "tid": tid, "name": named, "parent_tid": parent,
                    "start_ns": s, "end_ns": e, "is_traced": False, "source": "kernel", "app_records": 0,
                    "lost_events": 0, "exec_ns": x, "is_oslens": bool(own),
                }
            else:
                r["source"] = "app+kernel"
                # the kernel's name is the one the thread held longest (renames and exec followed);
                # the recorder's chunk header only knows the name at the thread's first event
                # (the recorder's own name is kept where it is the untruncated form of the kernel's)
                if comm and not (len(r["name"]) > 15 and r["name"][:15] == comm):
                    r["name"] = comm
                r["exec_ns"] = x
                r["is_oslens"] = bool(own)
                if parent is not None:
                    r["parent_tid"] = parent
                # the kernel's fork and exit times are the thread's life; a chunk's own bounds
                # (a forked child's inherited or unclosed chunk) are not
                if s is not None:
                    r["start_ns"] = s
                if e is not None:
                    r["end_ns"] = e
        # the traced tree: follow parents until a traced process (bounded walk, cycles safe)
        changed = True
        while changed:
            changed = False
            for tid, r in rows.items():
                if r["pid"] in traced_pids or tid == 0:
                    continue
                parent = parent_of.get(tid)
                if parent and parent != tid and (pid_of.get(parent, parent) in traced_pids):
                    traced_pids.add(r["pid"])
                    changed = True
        for r in rows.values():
            r["is_traced"] = r["pid"] in traced_pids and r["tid"] != 0
    for r in rows.values():
        # a thread that recorded application events is the program's, whatever the kernel guessed
        r["is_oslens"] = (bool(r.get("is_oslens")) and not r["app_records"]) or (r["name"] or "").startswith("oslens")
    ordered = sorted(rows.values(), key=lambda r: (r["start_ns"] is None, r["start_ns"] or 0, r["tid"]))
    cols = {c: [r.get(c) for r in ordered] for c in schema.SCHEMAS["threads"]}
    return schema.conform("threads", pa.table({c: pa.array(v, schema.SCHEMAS["threads"][c]) for c, v in cols.items()}))
