"""The thread ledger: threads that never had a chunk of their own, read back as chunks.

Under the preload every thread records its start, but a thread gets its chunk file only at its
first record of its own; until then its start, and its end if it records nothing, are records
in its process's names chunk (docs/recorder.md, "Start-up"): THREAD_START (id = tid, a =
creator's tid, b = pthread_t), then a NAME of class thread (its name at the end) and THREAD_END
(id = tid, a = CLOCK_MONOTONIC ns read with its timestamp, b = how it ended). Each entry becomes
one chunk here, as the thread's own chunk would have been: a THREAD_START record and, when the
entry ended, a clock pair, with the end's calibration pair and name in its header (a thread still
running at the end is named as its creator, whose name it inherited). Entries whose
thread went on to record (THREAD_END_OWN_CHUNK) are left out: their chunk holds their start.

The ledger also holds the process markers (PROCESS_FORK, PROCESS_EXEC, PROCESS_EXIT) of a main
thread that has no chunk: a fork()ed child that execs or exits and records nothing else. Its
first marker follows a CLOCK_PAIR with id = its tid (the process's pid: only a main thread's
markers go there), the pair its chunk would have opened at; a THREAD_END with that id voids them
(b = THREAD_END_OWN_CHUNK: the thread made its chunk after all, which holds them) or ends them
(b = THREAD_END_NOTHING, after a NAME: the process exited, with that name; a = CLOCK_MONOTONIC
ns). They become the one chunk the thread had before: its markers, opened at that pair and, when
the process exited, its closing clock pair; never closed (the recorder leaves the exiting
thread's chunk open for later exit handlers)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from oslens import _native
from oslens.capture import raw

THREAD_START = raw.KINDS["thread_start"]
THREAD_END = raw.KINDS["thread_end"]
THREAD_END_OWN_CHUNK = _native.THREAD_END_OWN_CHUNK
MARKER_KINDS = tuple(raw.KINDS[k] for k in ("process_fork", "process_exec", "process_exit"))  # a main thread's, with no chunk
KINDS = (THREAD_START, THREAD_END, *MARKER_KINDS)  # the ledger's own kinds in a names chunk
_NAME_THREAD = raw.CLASS_ID["thread"]


def is_names_chunk(c: raw.ChunkData) -> bool:
    if c.header is not None:
        return c.header["source"] == raw.SOURCE_APP_THREAD and c.header["tid"] == 0
    return c.path.name.startswith("names-")


def is_ledger_record(kind: int, ident: int) -> bool:
    """Whether a record of a names chunk is the ledger's (read back as other chunks' records):
    its kinds, and the CLOCK_PAIR that opens a main thread's markers (id = tid; the chunk's own
    closing pair has id 0)."""
    return kind in KINDS or (kind == raw.CLOCK_PAIR and ident != 0)


def _records(rows: list[tuple]) -> np.ndarray:
    """(ts, id, cpu, kind, a, b) rows as raw records, each with its check byte."""
    out = np.zeros(len(rows), raw.RECORD_DTYPE)
    for i, (ts, ident, cpu, kind, a, b) in enumerate(rows):
        out[i] = (ts, ident, cpu, kind, 0, a, b)
    body = out.view(np.uint8).reshape(len(rows), raw.RECORD_DTYPE.itemsize)
    out["check"] = np.bitwise_xor.reduce(body, axis=1) ^ 0xA5
    return out


def entries(names_chunk: raw.ChunkData) -> list[dict]:
    """The ledger entries of one names chunk, in the order they started: {tid, start (the
    THREAD_START record), end (the THREAD_END record or None: the thread was still running when
    the process ended or was killed), name (at its end, or None)}; without the void ones."""
    recs = names_chunk.records
    if not len(recs):
        return []
    kinds = recs["kind"]
    wanted = np.flatnonzero((kinds == THREAD_START) | (kinds == THREAD_END) | (kinds == raw.NAME))
    if not (kinds[wanted] == THREAD_START).any():
        return []
    name_at = np.cumsum(kinds == raw.NAME) - 1  # index into names_chunk.names of each NAME record
    open_: dict[int, dict] = {}
    last_name: dict[int, str] = {}
    out: list[dict] = []
    for i in wanted.tolist():
        k, tid = int(kinds[i]), int(recs["id"][i])
        if k == raw.NAME:
            ident, cls, _manager, name = names_chunk.names[name_at[i]]
            if cls == _NAME_THREAD:
                last_name[ident] = name
        elif k == THREAD_START:
            open_[tid] = {"tid": tid, "start": recs[i], "end": None, "name": None}
            out.append(open_[tid])
        else:
            e = open_.pop(tid, None)
            if e is None:
                continue
            if int(recs["b"][i]) == THREAD_END_OWN_CHUNK:
                e["void"] = True
            else:
                e["end"], e["name"] = recs[i], last_name.pop(tid, None)
    return [e for e in out if not e.get("void")]


def markers(names_chunk: raw.ChunkData) -> dict | None:
    """The main thread's markers in one names chunk: {tid, pair (raw, ns), records (the
    PROCESS_* rows), end (the THREAD_END record, or None: an exec or a kill ended the image),
    name (the thread's at the end, else when the first marker was written)}, or None (none, or
    voided)."""
    recs = names_chunk.records
    if not len(recs):
        return None
    kinds = recs["kind"]
    opens = np.flatnonzero((kinds == raw.CLOCK_PAIR) & (recs["id"] != 0))
    if not len(opens):
        return None
    first = int(opens[0])
    tid = int(recs["id"][first])
    ends = np.flatnonzero((kinds == THREAD_END) & (recs["id"] == tid))
    ends = ends[ends > first]
    if len(ends) and int(recs["b"][ends[0]]) == THREAD_END_OWN_CHUNK:
        return None
    last = int(ends[0]) if len(ends) else len(recs)
    got = np.flatnonzero(np.isin(kinds, MARKER_KINDS))
    name_at = np.cumsum(kinds == raw.NAME) - 1  # index into names_chunk.names of each NAME record
    thread_names = [names_chunk.names[name_at[i]][3] for i in np.flatnonzero(kinds[:last] == raw.NAME)
                    if tuple(names_chunk.names[name_at[i]][:2]) == (tid, _NAME_THREAD)]
    return {"tid": tid, "pair": (int(recs["ts"][first]), int(recs["a"][first])), "records": recs[got[(got > first) & (got < last)]],
            "end": recs[last] if len(ends) else None, "name": thread_names[-1] if thread_names else ""}


def _marker_chunk(nc: raw.ChunkData, m: dict, seq: int) -> raw.ChunkData:
    """The chunk a main thread's markers had before the ledger took them (see the module)."""
    tid, end = m["tid"], m["end"]
    rows = [(int(r["ts"]), int(r["id"]), int(r["cpu"]), int(r["kind"]), int(r["a"]), int(r["b"])) for r in m["records"]]
    calib_end = (0, 0)
    if end is not None:  # the exiting process's closing pair, as its chunk had it
        calib_end = (int(end["ts"]), int(end["a"]))
        rows.append((calib_end[0], 0, int(end["cpu"]), raw.CLOCK_PAIR, calib_end[1], 0))
    header = dict(nc.header or {"source": raw.SOURCE_APP_THREAD, "clock": raw.CLOCK_TSC, "ppid": 0, "cpu": 0})
    header.update(pid=nc.pid, tid=tid, name=m["name"], calib=[m["pair"], calib_end], closed=False, seq=seq,
                  capacity=len(rows), committed=len(rows), dropped_events=0, dropped_bytes=0, suppressed_events=0,
                  fault_errno=0, fault_ns=0, fault_dropped=0, fault_reason="no fault")
    return raw.ChunkData(path=Path(f"{nc.path}#markers-{tid}"), header=header, records=_records(rows), names=[], payloads={})


def thread_chunks(chunks: list[raw.ChunkData]) -> list[raw.ChunkData]:
    """One chunk per ledger entry of the trace's names chunks. An entry that never ended whose
    thread has a chunk of its own is left out (the process was killed after that chunk was made
    and before the entry was voided)."""
    names = [c for c in chunks if is_names_chunk(c)]
    if not names:
        return []
    own = [c for c in chunks if not is_names_chunk(c)]
    opened: dict[tuple, list] = {}  # (pid, tid) -> [(opening raw clock, seq)] of its own chunks
    for c in own:
        if c.header:
            opened.setdefault((c.pid, c.tid), []).append(((c.header.get("calib") or [(0, 0)])[0][0], c.header.get("seq", 0)))
    return from_names(names, {(c.pid, c.tid) for c in own}, opened)


def _seq_among(opened: list, at: int) -> int:
    """The sequence number that puts a marker chunk opened at `at` among the thread's own chunks
    in time order (app_tables.chunk_order_key; a tie sorts it after the own chunk by its path):
    an exec'd image's chunk of the same pid and tid comes after the markers of the image before."""
    before = [seq for start, seq in opened if start and start <= at]
    return max(before) if before else -1


def from_names(names: list[raw.ChunkData], have: set, opened: dict | None = None) -> list[raw.ChunkData]:
    """thread_chunks of these names chunks, given the (pid, tid) of every other chunk (and, to
    order marker chunks among them, when each opened: thread_chunks)."""
    out = []
    for nc in names:
        m = markers(nc)
        if m is not None:
            out.append(_marker_chunk(nc, m, _seq_among((opened or {}).get((nc.pid, m["tid"]), []), m["pair"][0])))
        # a thread still running at the end has the name it was started with: its creator's
        thread_names = {ident: name for ident, cls, _manager, name in nc.names if cls == _NAME_THREAD}
        seq: dict[int, int] = {}
        for e in entries(nc):
            tid, start, end = e["tid"], e["start"], e["end"]
            if end is None and (nc.pid, tid) in have:
                continue
            rows = [(int(start["ts"]), 0, int(start["cpu"]), THREAD_START, int(start["a"]), int(start["b"]))]
            calib_end = (0, 0)
            if end is not None:
                calib_end = (int(end["ts"]), int(end["a"]))
                rows.append((calib_end[0], 0, int(end["cpu"]), raw.CLOCK_PAIR, calib_end[1], 0))
            header = dict(nc.header or {"source": raw.SOURCE_APP_THREAD, "clock": raw.CLOCK_TSC, "ppid": 0, "cpu": 0})
            k = seq[tid] = seq.get(tid, -1) + 1
            name = e["name"] if end is not None else thread_names.get(int(start["a"]))
            header.update(pid=nc.pid, tid=tid, name=name or "", calib=[(0, 0), calib_end], closed=end is not None,
                          seq=k, capacity=len(rows), committed=len(rows), dropped_events=0, dropped_bytes=0,
                          suppressed_events=0, fault_errno=0, fault_ns=0, fault_dropped=0, fault_reason="no fault")
            # named after the names chunk it comes from, which is the file it is read from
            out.append(raw.ChunkData(path=Path(f"{nc.path}#thread-{tid}-{k}"), header=header, records=_records(rows),
                                     names=[], payloads={}))
    return out
