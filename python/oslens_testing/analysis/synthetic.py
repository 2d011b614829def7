"""Synthetic traces for tests: in-memory DuckDB tables with the trace schema
(docs/trace-schema.md), filled with rows whose analyses have known answers."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from oslens.store import compensation, schema

MS = 1_000_000

# The store's own schemas (a test trace has every column a real one has); test rows give the
# leading columns of a table, in the schema's order.
SCHEMAS: dict[str, dict[str, pa.DataType]] = {**schema.SCHEMAS, compensation.TABLE: compensation.COLUMNS}

KERNEL_TABLES = ["switches", "cpu_slices", "wakeups", "syscalls", "faults", "block_io", "samples"]


def make_con(rows: dict[str, list[tuple]], omit: tuple[str, ...] = ()) -> duckdb.DuckDBPyConnection:
    """A connection with every trace table (those in `omit` left out entirely)."""
    con = duckdb.connect(":memory:")
    for name, columns in SCHEMAS.items():
        if name in omit:
            continue
        con.register("_empty", pa.schema(columns).empty_table())
        con.execute(f'CREATE TABLE "{name}" AS SELECT * FROM _empty')
        con.unregister("_empty")
        data = rows.get(name, [])
        if data:
            given = ", ".join(f'"{c}"' for c in list(columns)[: len(data[0])])
            con.executemany(f'INSERT INTO "{name}" ({given}) VALUES ({", ".join("?" * len(data[0]))})', data)
    return con


def switches_from_slices(slices: list[tuple], states: dict[tuple[int, int], str], comms: dict[int, tuple[int, str]]):
    """Switch records implied by per-CPU slices (tid, pid, comm, cpu, start, end), one per
    boundary between consecutive slices of a CPU; `states[(cpu, ts)]` is the previous task's
    state at that switch (default 'S')."""
    out = []
    by_cpu: dict[int, list[tuple]] = {}
    for s in slices:
        by_cpu.setdefault(s[3], []).append(s)
    for cpu, lst in sorted(by_cpu.items()):
        lst.sort(key=lambda s: s[4])
        for a, b in zip(lst, lst[1:]):
            ts = b[4]
            out.append((ts, cpu, a[1], a[0], a[2], states.get((cpu, ts), "S"), b[1], b[0], b[2]))
    return out


def reference_trace(with_kernel: bool = True, calibration_ns: float | None = None):
    """The reference two-thread trace (times in ms):

    main [100] 0-20 on CPU 0: runs 0-3, preempted by arbd [500] 3-5, runs 5-8, waits at barrier
    b0 8-13 (CPU idle), runs 13-16 with a read() syscall 14-15, waits for a disk read 16-18
    (kworker [600] 16-17, idle 17-18), runs 18-20.
    worker [101] 1-20 on CPU 1: runnable 1-2, runs 2-9, preempted by arbd 9-11, runs 11-20; it
    reaches the barrier at 13 (no wait) and waits 15-15.5 on mutex m0 (on-CPU), held to 16.
    """
    t = MS
    rows: dict[str, list[tuple]] = {}
    rows["meta"] = [("hostname", "synthetic-host"), ("schema_version", "1")]
    if calibration_ns is not None:
        rows["meta"].append(("calibration.event_ns", str(calibration_ns)))
    rows["threads"] = [
        (100, 100, "main", None, 0, 20 * t, True),
        (100, 101, "worker", 100, 1 * t, 20 * t, True),
    ]
    rows["regions"] = [
        (100, 100, "main", 0, 20 * t, 20 * t, 0),
        (100, 100, "INITIA", 0, 3 * t, 3 * t, 1),
        (100, 100, "WORK", 5 * t, 16 * t, 11 * t, 1),
        (100, 100, "STEP", 5 * t, 8 * t, 3 * t, 2),
        (100, 100, "STEP", 13 * t, 16 * t, 3 * t, 2),
        (100, 100, "END", 16 * t, 20 * t, 4 * t, 1),
        (100, 101, "MDMAIN", 1 * t, 20 * t, 19 * t, 0),
        (100, 101, "STEP", 2 * t, 9 * t, 7 * t, 1),
        (100, 101, "STEP", 11 * t, 20 * t, 9 * t, 1),
    ]
    ev = []
    for pid, tid, name, b, e, d, depth in rows["regions"]:
        ev.append((b, pid, tid, 0, name, "region_begin", 0, None))
        ev.append((e, pid, tid, 0, name, "region_end", 0, None))
    rows["app_events"] = ev  # 12 events for tid 100, 6 for tid 101
    rows["sync"] = [
        ("barrier", "b0", 100, 100, 8 * t, 13 * t, 13 * t),
        ("barrier", "b0", 100, 101, 13 * t, 13 * t, 13 * t),
        ("mutex", "m0", 100, 101, 15 * t, 15 * t + t // 2, 16 * t),
    ]
    if with_kernel:
        slices = [
            (100, 100, "main", 0, 0, 3 * t),
            (500, 500, "arbd", 0, 3 * t, 5 * t),
            (100, 100, "main", 0, 5 * t, 8 * t),
            (0, 0, "swapper/0", 0, 8 * t, 13 * t),
            (100, 100, "main", 0, 13 * t, 16 * t),
            (600, 600, "kworker/0:1", 0, 16 * t, 17 * t),
            (0, 0, "swapper/0", 0, 17 * t, 18 * t),
            (100, 100, "main", 0, 18 * t, 20 * t),
            (0, 0, "swapper/1", 1, 0, 2 * t),
            (101, 100, "worker", 1, 2 * t, 9 * t),
            (500, 500, "arbd", 1, 9 * t, 11 * t),
            (101, 100, "worker", 1, 11 * t, 20 * t),
        ]
        st = {(0, 3 * t): "R", (0, 13 * t): "R", (0, 16 * t): "D", (0, 18 * t): "R", (1, 2 * t): "R", (1, 9 * t): "R"}
        rows["cpu_slices"] = slices
        rows["switches"] = switches_from_slices(slices, st, {})
        rows["syscalls"] = [(100, 100, 0, "read", 14 * t, 15 * t, 4096)]
        rows["faults"] = [(2 * t, 100, 100, 0x1000, 0x400000, 6), (6 * t, 100, 100, 0x2000, 0x400000, 6),
                          (19 * t, 100, 100, 0x3000, 0x400000, 6)]
        rows["block_io"] = [
            (16 * t, 18 * t, "8:0", 2048, 4096, "R", 100),
            (17 * t, 19 * t, "8:0", 4096, 8192, "WS", 600),
        ]
    return make_con(rows)


def interference_trace(period_ns: int = MS, burst_ns: int = 20_000, duration_ns: int = 200 * MS,
                       noisy_comm: str = "noisy"):
    """One program thread on CPU 0 for `duration_ns`, preempted every `period_ns` by a task
    `noisy_comm` [700] that runs `burst_ns`."""
    rows: dict[str, list[tuple]] = {}
    rows["meta"] = [("hostname", "synthetic-host")]
    rows["threads"] = [(100, 100, "main", None, 0, duration_ns, True)]
    rows["regions"] = [(100, 100, "main", 0, duration_ns, duration_ns, 0)]
    slices = []
    st = {}
    t = 0
    while t < duration_ns:
        run_end = min(t + period_ns - burst_ns, duration_ns)
        slices.append((100, 100, "main", 0, t, run_end))
        if run_end >= duration_ns:
            break
        st[(0, run_end)] = "R"
        slices.append((700, 700, noisy_comm, 0, run_end, run_end + burst_ns))
        t = run_end + burst_ns
    rows["cpu_slices"] = slices
    rows["switches"] = switches_from_slices(slices, st, {})
    return make_con(rows)
