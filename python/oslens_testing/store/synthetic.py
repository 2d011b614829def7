"""Synthetic raw traces written with oslens._native.write_chunk: for tests and bench/import.

`write_trace` lays down a trace directory whose every table has a known answer: each thread
repeats one pattern of records (nested regions, a counter, an event with a payload, a timer,
a lock acquisition) on a TSC clock with a known rate; `enclosing_region` puts each thread's
records inside one region open from its first record to its last (a "main" region around a
whole program); `late_timers` makes some timers start after they stop (a start no earlier
record reaches: compensation learns its cost from later records); `sync_waits` adds to each
iteration a lock request never acquired (a failed trylock), a barrier wait and a condition
wait (SYNC_WAITS).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from oslens import _native
from oslens.capture import raw

TSC_PER_NS = 2.5
TSC0, NS0 = 1_000_000_000, 5_000_000_000  # raw TSC and CLOCK_MONOTONIC ns of the origin
OUTER, INNER, ITER_COUNTER, EV, TIMER, LOCK_NAME, MAIN = 0x1111, 0x2222, 3, 4, 5, 6, 0x3333
LOCK_ADDR = 0x7F00_0000_1000
PAYLOAD = b"payload!"  # 8 bytes: kept in the record itself
# one iteration of a thread: (offset in ns from the iteration start, kind, id, a, b)
PATTERN = [
    (0, raw.REGION_BEGIN, OUTER, 0, 0),
    (10, raw.REGION_BEGIN, INNER, 0, 0),
    (20, raw.COUNTER, ITER_COUNTER, None, 1),  # a = iteration number
    (30, raw.EVENT, EV, len(PAYLOAD), int.from_bytes(PAYLOAD, "little")),
    (40, raw.TIMER_START, TIMER, 0, 0),
    (60, raw.TIMER_STOP, TIMER, int(20 * TSC_PER_NS), 0),
    (70, raw.REGION_END, INNER, 0, 0),
    (80, 32, LOCK_NAME, LOCK_ADDR, 0),  # lock request (id: the object's name)
    (85, 33, LOCK_NAME, LOCK_ADDR, 0),  # acquire
    (95, 34, LOCK_NAME, LOCK_ADDR, 0),  # release
    (100, raw.REGION_END, OUTER, 0, 0),
]
# `sync_waits`: after PATTERN, the sync table's rows after the mutex acquisitions
BARRIER_NAME, COND_NAME, TRY_NAME = 7, 8, 9
BARRIER_ADDR, COND_ADDR, TRY_ADDR = 0x7F00_0000_2000, 0x7F00_0000_3000, 0x7F00_0000_4000
SYNC_WAITS = [
    (110, raw.KINDS["lock_request"], TRY_NAME, TRY_ADDR, 0),  # a trylock that failed: never acquired
    (120, raw.KINDS["barrier_enter"], BARRIER_NAME, BARRIER_ADDR, 0),
    (140, raw.KINDS["barrier_exit"], BARRIER_NAME, BARRIER_ADDR, 0),
    (150, raw.KINDS["cond_wait_enter"], COND_NAME, COND_ADDR, 0),
    (180, raw.KINDS["cond_wait_exit"], COND_NAME, COND_ADDR, 0),
]
PERIOD_NS = 200
NAMES = [(OUTER, 5, 0, "outer"), (INNER, 5, 0, "inner"), (ITER_COUNTER, 3, 0, "iterations"), (EV, 6, 0, "ev"),
         (TIMER, 4, 0, "t"), (LOCK_NAME, 8, 0, "the-lock"), (MAIN, 5, 0, "main")]
SYNC_NAMES = [(BARRIER_NAME, 8, 0, "the-barrier"), (COND_NAME, 8, 0, "the-cond"), (TRY_NAME, 8, 0, "the-trylock")]


def tsc(ns):
    return (np.asarray(ns, dtype=np.float64) - NS0) * TSC_PER_NS + TSC0


def pattern(sync_waits: bool = False) -> list:
    """One iteration's records (PATTERN, then SYNC_WAITS with `sync_waits`)."""
    return PATTERN + SYNC_WAITS * sync_waits


def thread_records(t: int, iterations: int, start_ns: int, unnamed_locks: bool = False, first: int = 0,
                   late_timers: tuple = (), sync_waits: bool = False) -> np.ndarray:
    """The records of thread number t's iterations first..first+iterations as a structured array
    (ts, id, cpu, kind, a, b). `late_timers`: (every, ahead_ns) pairs: the timer of every
    every-th iteration (every - 1, 2 every - 1, ...) stops with elapsed -ahead_ns, so it
    starts ahead_ns after it stops (the last pair wins where two pick one iteration).
    `unnamed_locks`: the sync records as the preload library's pthread wrappers write them:
    id 0 (no name), each thread taking one of three locks (LOCK_ADDR + 0x40 * (t % 3)).
    `sync_waits`: see pattern."""
    PATTERN = pattern(sync_waits)  # noqa: N806 (the module's PATTERN, extended)
    k = len(PATTERN)
    n = iterations * k
    rec = np.zeros(n, dtype=[("ts", "<u8"), ("id", "<u4"), ("cpu", "<u2"), ("kind", "u1"), ("a", "<u8"), ("b", "<u8")])
    it = np.repeat(np.arange(first, first + iterations, dtype=np.int64), k)
    off = np.tile(np.array([p[0] for p in PATTERN], dtype=np.int64), iterations)
    ns = start_ns + it * PERIOD_NS + off
    rec["ts"] = np.rint(tsc(ns)).astype(np.uint64)
    rec["id"] = np.tile(np.array([p[2] for p in PATTERN], dtype=np.uint32), iterations)
    rec["cpu"] = t % 2
    rec["kind"] = np.tile(np.array([p[1] for p in PATTERN], dtype=np.uint8), iterations)
    a = np.tile(np.array([0 if p[3] is None else p[3] for p in PATTERN], dtype=np.uint64), iterations)
    counter_pos = [i for i, p in enumerate(PATTERN) if p[3] is None][0]
    a[counter_pos::k] = np.arange(first, first + iterations, dtype=np.uint64)
    rec["a"] = a
    rec["b"] = np.tile(np.array([p[4] for p in PATTERN], dtype=np.uint64), iterations)
    stop_pos = [i for i, p in enumerate(PATTERN) if p[1] == raw.TIMER_STOP][0]
    for every, ahead_ns in late_timers:  # elapsed -ahead_ns: the timer starts ahead_ns after it stops
        its = np.arange(first, first + iterations)
        rec["a"][stop_pos + k * np.flatnonzero(its % every == every - 1)] = np.int64(-ahead_ns * TSC_PER_NS).view(np.uint64)
    if unnamed_locks:
        rec["id"][(rec["kind"] >= 32) & (rec["kind"] <= 38)] = 0
        lock = rec["a"] == LOCK_ADDR
        rec["a"][lock] = LOCK_ADDR + 0x40 * (t % 3)
    return rec


def ns_of(t: int, iteration: int, offset: int, start_ns: int) -> int:
    """The CLOCK_MONOTONIC time the importer must give a record (exact: the rate is exact)."""
    return start_ns + iteration * PERIOD_NS + offset


def write_trace(path, threads: int = 2, iterations: int = 10, chunk_records: int = 1 << 20, pid: int = 1000,
                meta_extra: dict | None = None, unnamed_locks: bool = False, enclosing_region: bool = False,
                late_timers: tuple = (), sync_waits: bool = False) -> dict:
    """Writes a trace directory; returns what the importer must find. `unnamed_locks`,
    `late_timers` and `sync_waits`: see thread_records. `enclosing_region`: a region MAIN begun
    before each thread's first record (same time) and ended after its last (PERIOD_NS - 1 after
    its last iteration's start)."""
    path = Path(path)
    (path / "raw").mkdir(parents=True, exist_ok=True)
    starts = {}
    meta_threads = []
    end_ns = NS0
    calib_pair = (int(tsc(NS0)), NS0)
    for t in range(threads):
        tid = pid + t
        start_ns = NS0 + 1000 + t * 7
        starts[tid] = start_ns
        seq, k = 0, len(pattern(sync_waits))
        # a chunk's records at a time: a thread of 200 M records is never laid out whole
        for s in range(0, max(iterations * k, 1), chunk_records):
            lo, hi = s // k, min(iterations, -(-(s + chunk_records) // k))
            part = thread_records(t, hi - lo, start_ns, unnamed_locks, first=lo, late_timers=late_timers,
                                  sync_waits=sync_waits)[s - lo * k:s - lo * k + chunk_records]
            if enclosing_region:
                part = _enclosed(part, t, start_ns, iterations, s == 0, s + chunk_records >= iterations * k)
            name = f"app-{pid}-{tid}-{seq}.osl"
            first_ns, last_ns = (ns_of(t, 0, 0, start_ns), ns_of(t, iterations - 1, PERIOD_NS - 1, start_ns))
            header = {"source": raw.SOURCE_APP_THREAD, "clock": raw.CLOCK_TSC, "pid": pid, "tid": tid,
                      "ppid": 1, "seq": seq, "name": "main" if t == 0 else f"worker-{t}",
                      "calib": [(int(tsc(first_ns)), first_ns), (int(tsc(last_ns)), last_ns)], "closed": True}
            n = _native.write_chunk(str(path / "raw" / name), header, part.tolist())
            meta_threads.append({"pid": pid, "tid": tid, "name": header["name"], "chunk": name, "records": int(n),
                                 "dropped_events": 0})
            seq += 1
        end_ns = max(end_ns, ns_of(t, iterations - 1, PERIOD_NS - 1, start_ns))
    _native.write_chunk(str(path / "raw" / f"names-{pid}-0.osl"),
                        {"source": raw.SOURCE_APP_THREAD, "clock": raw.CLOCK_TSC, "pid": pid, "tid": 0,
                         "calib": [calib_pair, (int(tsc(end_ns)), end_ns)]}, [], names=NAMES + SYNC_NAMES * sync_waits)
    meta = {"command": ["synthetic"], "pid": pid, "start_ns": NS0, "end_ns": end_ns + 1,
            "clock_pairs": [list(calib_pair), [int(tsc(end_ns)), end_ns]], "machine": {"hostname": "synthetic"},
            "threads": meta_threads, "damage": []}
    meta.update(meta_extra or {})
    (path / "meta.json").write_text(json.dumps(meta))
    return {"threads": threads, "iterations": iterations, "pid": pid, "starts": starts,
            "records": threads * (iterations * len(pattern(sync_waits)) + 2 * enclosing_region)}


def _enclosed(part: np.ndarray, t: int, start_ns: int, iterations: int, first: bool, last: bool) -> np.ndarray:
    """A chunk's records with the enclosing region's begin before them (the thread's first chunk)
    and its end after them (its last)."""
    extra = np.zeros(2, dtype=part.dtype)
    extra["kind"], extra["id"], extra["cpu"] = raw.REGION_BEGIN, MAIN, t % 2
    extra["ts"][0] = np.rint(tsc(ns_of(t, 0, 0, start_ns)))
    extra["kind"][1], extra["ts"][1] = raw.REGION_END, np.rint(tsc(ns_of(t, iterations - 1, PERIOD_NS - 1, start_ns)))
    return np.concatenate([extra[:1]] * first + [part] + [extra[1:]] * last)
