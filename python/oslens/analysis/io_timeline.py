"""I/O durations over time, read versus write (Kohr et al. Figure 14).

`io_requests`: one row per block request (issue and completion relative to the program's start,
duration, bytes, read/write/flush/discard, whether a program thread issued it, and how long a
program thread was waiting off-CPU in I/O while it was in flight - the part on the program's
critical path). `io_summary`: the same per direction.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from oslens.analysis import db, intervals, program, states

REQ_SCHEMA = {
    "issue_ns": pa.int64(),
    "complete_ns": pa.int64(),
    "duration_ns": pa.int64(),
    "rw": pa.string(),
    "bytes": pa.int64(),
    "dev": pa.string(),
    "sector": pa.int64(),
    "tid": pa.int64(),
    "by_program": pa.bool_(),
    "program_waiting_ns": pa.int64(),
}

SUMMARY_SCHEMA = {
    "rw": pa.string(),
    "requests": pa.int64(),
    "completed": pa.int64(),
    "bytes": pa.int64(),
    "total_ns": pa.int64(),
    "mean_ns": pa.float64(),
    "max_ns": pa.int64(),
    "by_program": pa.int64(),
    "program_waiting_ns": pa.int64(),
}


def direction(rw) -> str:
    """Linux rwbs flags (or a word) as read / write / flush / discard / other."""
    if rw is None:
        return "other"
    s = str(rw).strip().upper()
    if s in ("READ", "R", "0"):
        return "read"
    if s in ("WRITE", "W", "1"):
        return "write"
    if "D" in s and "W" not in s and "R" not in s:
        return "discard"
    if "R" in s:
        return "read"
    if "W" in s:
        return "write"
    if "F" in s:
        return "flush"
    return "other"


def io_requests(con) -> pa.Table:
    if not db.row_count(con, "block_io"):
        return db.empty_table(REQ_SCHEMA)
    prog = program.program(con)
    t0 = program.trace_origin(con, prog)
    rows = con.execute(
        "SELECT issue_ns, complete_ns, rw, bytes, CAST(dev AS VARCHAR), sector, tid FROM block_io "
        "WHERE issue_ns IS NOT NULL ORDER BY issue_ns"
    ).fetchall()
    # when a program thread was waiting for I/O
    tls = states.timelines(con, prog)
    ws, we = [], []
    for tl in tls.values():
        s, e = tl.intervals(states.IO_WAIT)
        ws.append(s)
        we.append(e)
    w_s, w_e = intervals.merge_intervals(np.concatenate(ws) if ws else np.zeros(0), np.concatenate(we) if we else np.zeros(0))
    iss = np.array([r[0] for r in rows], np.int64)
    comp = np.array([r[1] if r[1] is not None else r[0] for r in rows], np.int64)
    waiting = intervals.overlap_each(iss, comp, w_s, w_e)
    out = []
    for i, (issue, complete, rw, nbytes, dev, sector, tid) in enumerate(rows):
        out.append(
            {
                "issue_ns": int(issue) - t0,
                "complete_ns": None if complete is None else int(complete) - t0,
                "duration_ns": None if complete is None else int(complete) - int(issue),
                "rw": direction(rw),
                "bytes": None if nbytes is None else int(nbytes),
                "dev": dev,
                "sector": None if sector is None else int(sector),
                "tid": None if tid is None else int(tid),
                "by_program": tid is not None and int(tid) in prog.tidset,
                "program_waiting_ns": int(waiting[i]),
            }
        )
    return db.from_rows(out, REQ_SCHEMA)


def io_summary(con, requests: pa.Table | None = None) -> pa.Table:
    req = requests if requests is not None else io_requests(con)
    if req.num_rows == 0:
        return db.empty_table(SUMMARY_SCHEMA)
    rw = np.array(req.column("rw").to_pylist(), dtype=object)
    # a request without a completion record has no duration: unknown, not zero (this VM's disk
    # fires almost no block_rq_complete)
    dur_list = req.column("duration_ns").to_pylist()
    done = np.array([d is not None for d in dur_list], bool)
    dur = np.array([d if d is not None else 0 for d in dur_list], np.int64)
    nbytes = np.array([b or 0 for b in req.column("bytes").to_pylist()], np.int64)
    byp = np.array(req.column("by_program").to_pylist(), bool)
    wait = np.array(req.column("program_waiting_ns").to_pylist(), np.int64)
    out = []
    for d in ["read", "write", "flush", "discard", "other"]:
        m = rw == d
        if not m.any():
            continue
        out.append(
            {
                "rw": d,
                "requests": int(m.sum()),
                "completed": int((m & done).sum()),
                "bytes": int(nbytes[m].sum()),
                "total_ns": int(dur[m & done].sum()) if (m & done).any() else None,
                "mean_ns": float(dur[m & done].mean()) if (m & done).any() else None,
                "max_ns": int(dur[m & done].max()) if (m & done).any() else None,
                "by_program": int(byp[m].sum()),
                "program_waiting_ns": int(wait[m].sum()),
            }
        )
    return db.from_rows(out, SUMMARY_SCHEMA)
