"""Kernel tables from the kernel collector's per-CPU raw chunks. Called by the store's importer:
`write_kernel_tables(chunks, meta, folder) -> {table name: WrittenTable or pyarrow.Table}`.

The records are laid into a DuckDB database one chunk at a time (kernel_records). DuckDB sorts
them within a memory limit, spilling the rest to `folder`, and streams them back a batch at a
time: numpy pairs what must be paired (a call's entry and exit, a slice's two switches, an I/O's
issue and completion: kernel_pairs), DuckDB sorts those rows into the table's order, and each
batch is completed (pids, comms, names: kernel_rows) and written to Parquet. So the import's
memory does not grow with the kernel records (docs/trace-schema.md, "Import memory"). What grows with the number of tasks, not records (each thread's pid, the comm
history, the `tasks` table) is built in Python (kernel_tasks). kernel_tables_oracle builds the
same tables with numpy over every record, for the tests.

Times are CLOCK_MONOTONIC ns (the collector asks perf for that clock), so they share the
application's time base once its TSC values are converted at import. Rows that tie on time keep
the order of their records (`seq`), as a stable sort does.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from oslens.capture import raw
from oslens.store import kernel_pairs, kernel_records, kernel_rows, memory_budget, parquet_options
from oslens.store.app_tables import WrittenTable
from oslens.store.kernel_fields import (
    COUNTER, EXIT, FAULT, MIGRATE, SAMPLE, SOFTIRQ_NAMES, SWITCH, WAKEUP, dev_name, i64, rw_letters, strings, syscall_name)
from oslens.store.kernel_layout import field_np, field_sql, kind_of, same_layout
from oslens.store.kernel_tasks import SMALL_KINDS, Comms, PidMap, tasks, whole_tasks

# the folder DuckDB works in, inside the trace folder, and the prefix of the tables written
# beside it: followed by the importing pid (importer.remove_stale_files)
SPILL_PREFIX = ".kernel-tables-"
BATCH_ROWS = 1 << 18

# the (kind, tid field, pid field) pairs records name, in the order the oracle reads them (the
# last one wins)
PID_PAIRS = (
    ("task", "tid", "pid"),  # first: any event's own pair wins over the attach's
    ("sched_switch", "prev_tid", "prev_pid"), ("sched_waking", "waker_tid", "waker_pid"), ("sys_enter", "tid", "pid"),
    ("sys_exit", "tid", "pid"), ("fork", "parent_tid", "parent_pid"), ("fork", "child_tid", "child_pid"),
    ("exec", "tid", "pid"), ("exit", "tid", "pid"), ("sample", "tid", "pid"), ("irq_entry", "tid", "pid"),
    ("softirq_entry", "tid", "pid"), ("softirq_exit", "tid", "pid"),
)
# the tids `tasks` has a row for
SEEN_TIDS = (("sched_switch", "prev_tid"), ("sched_switch", "next_tid"), ("fork", "child_tid"), ("fork", "parent_tid"),
             ("exec", "tid"), ("exit", "tid"), ("sys_enter", "tid"), ("sample", "tid"), ("page_fault_user", "tid"),
             ("task", "tid"))

# tables with a row per record of one kind, in time order
ROW_TABLES = {
    "switches": (SWITCH, lambda r, pid_of, comms: kernel_rows.switch_rows(r, pid_of, comms)),
    "wakeups": (WAKEUP, lambda r, pid_of, comms: kernel_rows.wakeup_rows(r, pid_of)),
    "faults": (FAULT, lambda r, pid_of, comms: kernel_rows.fault_rows(r, pid_of)),
    "samples": (SAMPLE, lambda r, pid_of, comms: kernel_rows.sample_rows(r)),
    "kernel_counters": (COUNTER, lambda r, pid_of, comms: kernel_rows.counter_rows(r)),
    "migrations": (MIGRATE, lambda r, pid_of, comms: kernel_rows.migration_rows(r)),
}

# the order of each paired table's rows, from its staging table (kernel_pairs)
PAIRED_ORDER = {
    "cpu_slices": "SELECT * FROM cpu_slices_rows ORDER BY cpu, start_ns, start_inferred, o",
    "syscalls": "SELECT * FROM syscalls_rows ORDER BY coalesce(start_ns, end_ns), grp, tid, seq",
    "block_io": "SELECT * FROM block_io_rows ORDER BY issue_ns, grp, dev, sector, seq",
    "irqs": "SELECT * FROM irqs_rows ORDER BY start_ns, grp, cpu, seq",
}


def _columns(batch: pa.RecordBatch) -> dict:
    return {name: batch.column(i) for i, name in enumerate(batch.schema.names)}


def _slice_rows(b: pa.RecordBatch, pid_of, comms) -> pa.Table:
    c = _columns(b)
    tid, start = c["tid"].to_numpy(), c["start_ns"].to_numpy()
    return pa.table({"tid": c["tid"], "pid": pid_of(tid), "comm": pa.array(comms.at(tid, start), type=pa.string()),
                     "cpu": c["cpu"], "start_ns": c["start_ns"], "end_ns": c["end_ns"],
                     "start_inferred": c["start_inferred"]})


def _syscall_rows(b: pa.RecordBatch, pid_of, comms) -> pa.Table:
    c = _columns(b)
    tid, pid, nr = c["tid"].to_numpy(), c["pid"].to_numpy(), c["nr"].to_numpy()
    pid = np.where(pid <= 0, pid_of(tid), pid)
    return pa.table({"pid": pid, "tid": tid, "nr": nr, "name": strings(nr, syscall_name), "start_ns": c["start_ns"],
                     "end_ns": c["end_ns"], "ret": c["ret"]})


def _block_rows(b: pa.RecordBatch, pid_of, comms) -> pa.Table:
    c = _columns(b)
    words, tid, dev = {"b": c["b"].to_numpy()}, c["tid"].to_numpy(), c["dev"].to_numpy()
    sectors = i64(field_np("block_rq_issue", "sectors", words))
    return pa.table({
        "issue_ns": c["issue_ns"], "complete_ns": c["complete_ns"], "dev": strings(dev, dev_name),
        "sector": c["sector"], "bytes": sectors * 512,
        "rw": strings(i64(field_np("block_rq_issue", "rw", words)), rw_letters), "tid": tid, "pid": pid_of(tid),
        "dev_num": dev,
    })


def _irq_rows(b: pa.RecordBatch, pid_of, comms) -> pa.Table:
    c = _columns(b)
    num, grp = c["num"].to_numpy(), c["grp"].to_numpy()
    names = [comms.irq.get(int(n), str(int(n))) if g == 0 else
             (SOFTIRQ_NAMES[int(n)] if 0 <= int(n) < len(SOFTIRQ_NAMES) else str(int(n))) for n, g in zip(num, grp)]
    return pa.table({
        "cpu": c["cpu"], "tid": c["tid"], "irq": num, "name": pa.array(names, type=pa.string()),
        "kind": pa.array(np.where(grp == 0, "hard", "soft"), type=pa.string()), "start_ns": c["start_ns"], "end_ns": c["end_ns"],
    })


# how each paired table's staged rows are completed
PAIRED_ROWS = {"cpu_slices": _slice_rows, "syscalls": _syscall_rows, "block_io": _block_rows, "irqs": _irq_rows}


def _row_query(kind: int) -> str:
    if kind == WAKEUP:
        return WAKEUP_QUERY
    return f"SELECT ts, cpu, id, a, b FROM k WHERE kind = {kind} ORDER BY ts, seq"


# Each wakeup with the time its task then joined a run queue (sched_wakeup, 0 when not
# recorded): the woken task's next record of the two kinds, when it is an enqueue (a wakeup at
# the same time sorts first).
assert same_layout("sched_waking", "sched_wakeup", "tid")
WAKEUP_QUERY = f"""
    SELECT ts, cpu, id, a, b, enqueue_ts FROM (
        SELECT ts, cpu, id, a, b, kind, seq,
               CASE WHEN lead(kind) OVER w = {kind_of("sched_wakeup")} THEN lead(ts) OVER w ELSE 0 END AS enqueue_ts
        FROM k WHERE kind IN ({WAKEUP}, {kind_of("sched_wakeup")})
        WINDOW w AS (PARTITION BY {field_sql("sched_waking", "tid")} ORDER BY ts, kind, seq))
    WHERE kind = {WAKEUP} ORDER BY ts, seq"""


def _record_columns(b: pa.RecordBatch) -> dict:
    return {name: b.column(i).to_numpy() for i, name in enumerate(b.schema.names)}


def _write(con, sql: str, rows_of, path: Path) -> WrittenTable:
    """The query's rows, a batch at a time through rows_of(batch) -> pyarrow.Table, to Parquet."""
    reader = con.execute(sql).fetch_record_batch(BATCH_ROWS)
    writer, count = None, 0
    try:
        for batch in reader:
            t = rows_of(batch)
            if writer is None:
                writer = pq.ParquetWriter(path, t.schema, **parquet_options.pyarrow_options(t.schema))
            writer.write_table(t, row_group_size=parquet_options.ROW_GROUP)
            count += t.num_rows
        if writer is None:  # no rows: the columns of an empty batch
            t = rows_of(pa.RecordBatch.from_pylist([], schema=reader.schema))
            writer = pq.ParquetWriter(path, t.schema, **parquet_options.pyarrow_options(t.schema))
            writer.write_table(t)
    finally:
        if writer is not None:
            writer.close()
    return WrittenTable(path, count)


def _small_kinds(con) -> dict[int, np.ndarray]:
    """The records of SMALL_KINDS (a few per task), in time order, as raw records."""
    out = {}
    for kind in SMALL_KINDS:
        cols = con.execute(_row_query(kind)).fetchnumpy()
        r = np.zeros(len(cols["ts"]), dtype=raw.RECORD_DTYPE)
        r["ts"], r["id"], r["cpu"], r["kind"], r["a"], r["b"] = cols["ts"], cols["id"], cols["cpu"], kind, cols["a"], cols["b"]
        out[kind] = r
    return out


def _pid_map(con) -> PidMap:
    # the last pair of each tid in (PID_PAIRS order, time, record order), by an aggregate that
    # holds a row per tid: the three keys packed into one 128-bit number
    pairs = " UNION ALL ".join(f"SELECT {field_sql(k, tid)} AS tid, {field_sql(k, pid)} AS pid, "
                               f"({g}::HUGEINT << 104) + (ts::HUGEINT << 40) + seq AS o "
                               f"FROM k WHERE kind = {kind_of(k)}" for g, (k, tid, pid) in enumerate(PID_PAIRS))
    got = con.execute(f"SELECT tid, arg_max(pid, o) AS pid FROM ({pairs}) WHERE pid > 0 GROUP BY tid").fetchnumpy()
    return PidMap(got["tid"].astype(np.int64), got["pid"].astype(np.int64))


@contextlib.contextmanager
def _database(folder: Path):
    """A DuckDB database in a new folder inside `folder`, where it also spills, removed whatever
    happens. A file, not an in-memory database: the latter's sorts ran out of its memory limit at
    48 M records (bench/import, kernel_records)."""
    spill = Path(tempfile.mkdtemp(prefix=f"{SPILL_PREFIX}{os.getpid()}-", dir=folder))
    con = duckdb.connect(str(spill / "records.duckdb"))
    try:
        # insertion order stays preserved: the batches come in the queries' ORDER BY
        # DuckDB's share of the import's memory (memory_budget: less under a cgroup's cap); past it,
        # its sorts and tables spill to `folder`
        con.execute(f"SET memory_limit = '{memory_budget.kernel_sort_limit()}'; SET temp_directory = '{spill}'; PRAGMA disable_checkpoint_on_shutdown")
        yield con, spill
    finally:
        con.close()
        shutil.rmtree(spill, ignore_errors=True)


def write_kernel_tables(chunks: list, meta: dict, folder: Path) -> dict:
    """The kernel tables of a trace from its kernel chunks (source = SOURCE_KERNEL_CPU): the big
    ones written to Parquet files in `folder` (WrittenTable), `tasks` and `kernel_lost` in memory."""
    meta = meta or {}
    with _database(folder) as (con, spill):
        loaded = kernel_records.load(con, chunks)
        pid_of, comms, small = _pid_map(con), Comms(loaded.names), _small_kinds(con)
        out = {}
        for name, (kind, rows) in ROW_TABLES.items():
            out[name] = _write(con, _row_query(kind), lambda b, rows=rows: rows(_record_columns(b), pid_of, comms),
                               Path(folder) / f".{name}-{spill.name}.parquet")
        exit_at = dict(con.execute(f"SELECT {field_sql('exit', 'tid')}, max(ts) FROM k WHERE kind = {EXIT} GROUP BY id").fetchall())
        kernel_pairs.stage(con, "cpu_slices_rows", kernel_pairs.SLICE_COLUMNS,
                           kernel_pairs.slice_rows(con, whole_tasks(small, meta)))
        kernel_pairs.stage(con, "syscalls_rows", kernel_pairs.CALL_COLUMNS, kernel_pairs.call_rows(con, exit_at))
        kernel_pairs.stage(con, "block_io_rows", kernel_pairs.BLOCK_COLUMNS, kernel_pairs.block_rows(con))
        kernel_pairs.stage(con, "irqs_rows", kernel_pairs.IRQ_COLUMNS, kernel_pairs.irq_rows(con))
        for name, rows in PAIRED_ROWS.items():
            out[name] = _write(con, PAIRED_ORDER[name], lambda b, rows=rows: rows(b, pid_of, comms),
                               Path(folder) / f".{name}-{spill.name}.parquet")
            con.execute(f"DROP TABLE {name}_rows")
        seen = " UNION ".join(f"SELECT {field_sql(k, tid)} AS tid FROM k WHERE kind = {kind_of(k)}" for k, tid in SEEN_TIDS)
        seen_tids = con.execute(f"SELECT DISTINCT tid FROM ({seen})").fetchnumpy()["tid"].astype(np.int64)
        last_seen = con.execute("SELECT coalesce(max(ts), 0) FROM k").fetchone()[0]
        out["tasks"] = tasks(small, seen_tids, int(last_seen), pid_of, comms, meta)
        out["kernel_lost"] = kernel_records.kernel_lost(loaded.lost_rows)
    return out


def build_kernel_tables(chunks: list, meta: dict, folder: Path | None = None) -> dict[str, pa.Table]:
    """write_kernel_tables with every table read back into memory (tests, small traces)."""
    with tempfile.TemporaryDirectory(dir=folder) as tmp:
        out = write_kernel_tables(chunks, meta, Path(tmp))
        return {n: (t.read() if isinstance(t, WrittenTable) else t) for n, t in out.items()}
