"""Exporting a trace's timeline for existing viewers: Perfetto's protobuf trace format (opens in
ui.perfetto.dev) or Chrome's JSON trace event format (chrome://tracing, Perfetto too).

Tracks written, from the tables (never from raw files):
  per process        a process track; per thread a thread track with its regions as nested slices
  per thread         child tracks "syscalls", "functions", "sync waits", "oslens pauses"
                     (each a slice per syscall / call / wait / recorder pause)
  per CPU            "CPU n": a slice for each time a task held the CPU (cpu_slices)
  per counter        a counter track (pid, counter name) with every recorded value
  per block device   "I/O dev": a slice per request from issue to completion, in as many lanes
                     as requests overlap
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import numpy as np

from oslens.store import perfetto

CPU_PID = 2_000_000_001  # pseudo process ids for the Chrome format
IO_PID = 2_000_000_002


@dataclass
class SliceTrack:
    name: str
    kind: str  # "thread", "child", "cpu", "io"
    pid: int | None = None
    tid: int | None = None
    parent: "SliceTrack | None" = None
    begin: list = field(default_factory=list)
    end: list = field(default_factory=list)
    label: list = field(default_factory=list)
    depth: list = field(default_factory=list)
    category: str = ""
    uuid: int = 0

    def add(self, b, e, label, depth=0):
        self.begin.append(int(b))
        self.end.append(int(max(e, b)))
        self.label.append(str(label))
        self.depth.append(int(depth))


@dataclass
class CounterTrack:
    pid: int
    name: str
    ts: list = field(default_factory=list)
    value: list = field(default_factory=list)
    uuid: int = 0


@dataclass
class Timeline:
    processes: dict = field(default_factory=dict)  # pid -> name
    threads: dict = field(default_factory=dict)  # tid -> SliceTrack (kind thread)
    children: list = field(default_factory=list)
    cpus: dict = field(default_factory=dict)
    io: list = field(default_factory=list)
    counters: list = field(default_factory=list)

    def slice_tracks(self):
        return [*self.threads.values(), *self.children, *self.cpus.values(), *self.io]


def _has(con, table):
    return bool(con.execute("SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [table]).fetchone()[0])


def _rows(con, table, sql):
    return con.execute(sql).fetchall() if _has(con, table) else []


def timeline(con) -> Timeline:
    tl = Timeline()
    names = {}
    for pid, tid, name, traced in _rows(con, "threads", "SELECT pid, tid, name, is_traced FROM threads ORDER BY tid"):
        names[tid] = (pid, name or "")
        if traced:
            tl.processes.setdefault(pid, "")
            if tid == pid:
                tl.processes[pid] = name or ""

    def thread(pid, tid):
        t = tl.threads.get(tid)
        if t is None:
            pid = pid if pid is not None else names.get(tid, (tid, ""))[0]
            tl.processes.setdefault(pid, names.get(pid, (pid, ""))[1])
            t = SliceTrack(names.get(tid, (pid, ""))[1] or f"thread {tid}", "thread", pid, tid, category="region")
            tl.threads[tid] = t
        return t

    for pid, tid, _name, traced in _rows(con, "threads", "SELECT pid, tid, name, is_traced FROM threads ORDER BY tid"):
        if traced:
            thread(pid, tid)
    children: dict = {}

    def child(pid, tid, name, category):
        key = (tid, name)
        if key not in children:
            parent = thread(pid, tid)
            children[key] = SliceTrack(name, "child", parent.pid, tid, parent=parent, category=category)
            tl.children.append(children[key])
        return children[key]

    for pid, tid, name, b, e, depth in _rows(
            con, "regions", "SELECT pid, tid, name, begin_ns, end_ns, depth FROM regions ORDER BY tid, begin_ns, depth"):
        thread(pid, tid).add(b, e, name or "?", depth)
    for pid, tid, name, nr, b, e in _rows(
            con, "syscalls",
            "SELECT pid, tid, name, nr, start_ns, end_ns FROM syscalls WHERE start_ns IS NOT NULL AND end_ns IS NOT NULL "
            "ORDER BY tid, start_ns"):
        child(pid, tid, "syscalls", "syscall").add(b, e, name or f"syscall {nr}")
    for pid, tid, name, addr, b, e, depth in _rows(
            con, "functions",
            "SELECT pid, tid, name, address, begin_ns, end_ns, depth FROM functions ORDER BY tid, begin_ns, depth"):
        child(pid, tid, "functions", "function").add(b, e, name or f"0x{addr:x}", depth)
    for pid, tid, kind, obj, b, e in _rows(
            con, "sync",
            "SELECT pid, tid, kind, object, request_ns, acquire_ns FROM sync WHERE acquire_ns > request_ns "
            "ORDER BY tid, request_ns"):
        child(pid, tid, "sync waits", "sync").add(b, e, f"{kind} {obj}")
    for pid, tid, b, e, reason in _rows(
            con, "pauses", "SELECT pid, tid, start_ns, end_ns, reason FROM pauses ORDER BY tid, start_ns"):
        child(pid, tid, "oslens pauses", "oslens").add(b, e, f"oslens pause ({reason})")
    for cpu, tid, comm, b, e in _rows(
            con, "cpu_slices",
            "SELECT cpu, tid, comm, start_ns, end_ns FROM cpu_slices WHERE tid <> 0 AND end_ns IS NOT NULL "
            "ORDER BY cpu, start_ns"):
        t = tl.cpus.get(cpu)
        if t is None:
            t = tl.cpus[cpu] = SliceTrack(f"CPU {cpu}", "cpu", CPU_PID, int(cpu), category="sched")
        t.add(b, e, f"{comm or '?'} [{tid}]")
    # block I/O: a lane per overlapping request, per device
    lanes: dict = {}
    for dev, b, e, rw, nbytes, tid in _rows(
            con, "block_io",
            "SELECT dev, issue_ns, complete_ns, rw, bytes, tid FROM block_io WHERE issue_ns IS NOT NULL "
            "ORDER BY dev, issue_ns"):
        e = e if e is not None else b
        dev_lanes = lanes.setdefault(dev, [])
        for lane in dev_lanes:
            if lane.end[-1] <= b:
                break
        else:
            lane = SliceTrack(f"I/O {dev}" + (f" #{len(dev_lanes) + 1}" if dev_lanes else ""), "io", IO_PID,
                              len(tl.io), category="io")
            dev_lanes.append(lane)
            tl.io.append(lane)
        lane.add(b, e, f"{rw or '?'} {nbytes} B" + (f" (tid {tid})" if tid else ""))
    cur = None
    for pid, name, ts, value in _rows(con, "counters",
                                      "SELECT pid, name, ts, value FROM counters WHERE reason IS DISTINCT FROM 'lock' ORDER BY pid, name, ts"):
        if cur is None or (cur.pid, cur.name) != (pid, name):
            cur = CounterTrack(pid, name or "?")
            tl.counters.append(cur)
            tl.processes.setdefault(pid, names.get(pid, (pid, ""))[1])
        cur.ts.append(int(ts))
        cur.value.append(int(value))
    return tl


def _ordered_events(track: SliceTrack):
    """(ts, is_begin, index) of a track's slices in an order that nests: at equal times ends come
    before begins, outer begins before inner ones, inner ends before outer ones."""
    n = len(track.begin)
    if not n:
        return []
    b = np.array(track.begin, np.int64)
    e = np.array(track.end, np.int64)
    d = np.array(track.depth, np.int64)
    idx = np.arange(n)
    ts = np.concatenate([b, e])
    is_begin = np.concatenate([np.ones(n, bool), np.zeros(n, bool)])
    tie = np.concatenate([d, -d])
    # an end at the same instant as its own begin must follow it: ends of zero-length slices
    # sort after begins by their own position
    zero = np.concatenate([np.zeros(n, bool), b == e])
    order = np.lexsort((np.concatenate([idx, idx]), tie, np.where(zero, 2, is_begin.astype(np.int64)), ts))
    both = np.concatenate([idx, idx])
    return list(zip(ts[order].tolist(), is_begin[order].tolist(), both[order].tolist()))


def write_perfetto(con, path) -> dict:
    tl = timeline(con)
    uuid = iter(range(1, 1 << 62))
    proc_uuid = {}
    counts = {"tracks": 0, "slices": 0, "counter_values": 0}
    with open(path, "wb") as out:
        for pid, name in sorted(tl.processes.items()):
            proc_uuid[pid] = next(uuid)
            out.write(perfetto.track_descriptor(proc_uuid[pid], process=(pid, name)))
            counts["tracks"] += 1
        for t in tl.threads.values():
            t.uuid = next(uuid)
            out.write(perfetto.track_descriptor(t.uuid, thread=(t.pid, t.tid, t.name)))
        for t in tl.children:
            t.uuid = next(uuid)
            out.write(perfetto.track_descriptor(t.uuid, name=t.name, parent=t.parent.uuid))
        for group, tracks in (("CPUs", list(tl.cpus.values())), ("block I/O", tl.io)):
            if tracks:
                g = next(uuid)
                out.write(perfetto.track_descriptor(g, name=group))
                for t in tracks:
                    t.uuid = next(uuid)
                    out.write(perfetto.track_descriptor(t.uuid, name=t.name, parent=g))
        for c in tl.counters:
            c.uuid = next(uuid)
            out.write(perfetto.track_descriptor(c.uuid, name=c.name, parent=proc_uuid.get(c.pid), counter=True))
        counts["tracks"] += len(tl.threads) + len(tl.children) + len(tl.cpus) + len(tl.io) + len(tl.counters)
        w = perfetto.EventWriter(out)
        for t in tl.slice_tracks():
            for ts, is_begin, i in _ordered_events(t):
                if is_begin:
                    w.begin(ts, t.uuid, t.label[i], t.category)
                    counts["slices"] += 1
                else:
                    w.end(ts, t.uuid)
        for c in tl.counters:
            for ts, v in zip(c.ts, c.value):
                w.counter(ts, c.uuid, v)
                counts["counter_values"] += 1
    return counts


def write_chrome(con, path) -> dict:
    tl = timeline(con)
    counts = {"tracks": 0, "slices": 0, "counter_values": 0}
    with open(path, "w") as out:
        out.write('{"displayTimeUnit":"ns","traceEvents":[\n')
        first = True

        def emit(ev):
            nonlocal first
            out.write(("" if first else ",\n") + json.dumps(ev, separators=(",", ":")))
            first = False

        for pid, name in sorted(tl.processes.items()):
            emit({"ph": "M", "name": "process_name", "pid": pid, "tid": 0, "args": {"name": name or f"pid {pid}"}})
        if tl.cpus:
            emit({"ph": "M", "name": "process_name", "pid": CPU_PID, "tid": 0, "args": {"name": "CPUs"}})
        if tl.io:
            emit({"ph": "M", "name": "process_name", "pid": IO_PID, "tid": 0, "args": {"name": "block I/O"}})
        # child tracks become pseudo threads of their process (Chrome has no nested tracks)
        next_tid = [1_000_000_000]
        for t in tl.children:
            next_tid[0] += 1
            t.tid_alias = next_tid[0]
        for t in tl.slice_tracks():
            tid = getattr(t, "tid_alias", t.tid)
            label = t.name if t.kind != "child" else f"{t.parent.name} [{t.tid}] {t.name}"
            emit({"ph": "M", "name": "thread_name", "pid": t.pid, "tid": tid, "args": {"name": label}})
            counts["tracks"] += 1
            for i in range(len(t.begin)):
                emit({"ph": "X", "name": t.label[i], "cat": t.category or t.kind, "pid": t.pid, "tid": tid,
                      "ts": t.begin[i] / 1000.0, "dur": (t.end[i] - t.begin[i]) / 1000.0})
                counts["slices"] += 1
        for c in tl.counters:
            counts["tracks"] += 1
            for ts, v in zip(c.ts, c.value):
                emit({"ph": "C", "name": c.name, "pid": c.pid, "tid": 0, "ts": ts / 1000.0, "args": {c.name: v}})
                counts["counter_values"] += 1
        out.write("\n]}\n")
    return counts
