"""The trace tables: names, columns and types (docs/trace-schema.md describes every column).

SCHEMA_VERSION is stored in the trace (tables/manifest.json and the `meta` table under
`schema_version`); a trace imported under another version is imported again on first use.
Columns may be added without a version change only at the end of a table; renaming or
retyping a column bumps the version.
"""

from __future__ import annotations

import pyarrow as pa

SCHEMA_VERSION = 1

I64, I32, U64, STR, BOOL, BIN, F64 = pa.int64(), pa.int32(), pa.uint64(), pa.string(), pa.bool_(), pa.binary(), pa.float64()

# Tables built by the store from application chunks (and the trace's meta.json).
APP_SCHEMAS: dict[str, dict[str, pa.DataType]] = {
    "meta": {"key": STR, "value": STR},
    "threads": {
        "pid": I64, "tid": I64, "name": STR, "parent_tid": I64, "start_ns": I64, "end_ns": I64, "is_traced": BOOL,
        "source": STR, "app_records": I64, "lost_events": I64, "exec_ns": I64, "is_oslens": BOOL,
    },
    "app_events": {
        "ts": I64, "pid": I64, "tid": I64, "cpu": I64, "instrument": STR, "kind": STR, "value": I64, "payload": BIN,
        "id": pa.uint32(),
    },
    "regions": {
        "pid": I64, "tid": I64, "name": STR, "begin_ns": I64, "end_ns": I64, "duration_ns": I64, "depth": I64,
        "complete": BOOL, "id": pa.uint32(),
    },
    "counters": {"ts": I64, "pid": I64, "tid": I64, "name": STR, "value": I64, "reason": STR},
    "timers": {"pid": I64, "tid": I64, "name": STR, "start_ns": I64, "stop_ns": I64, "elapsed_ns": I64},
    "sync": {
        "kind": STR, "object": STR, "pid": I64, "tid": I64, "request_ns": I64, "acquire_ns": I64, "release_ns": I64,
        "address": U64, "wait_censored": BOOL,
    },
    "functions": {
        "pid": I64, "tid": I64, "address": U64, "call_site": U64, "name": STR, "begin_ns": I64, "end_ns": I64,
        "duration_ns": I64, "depth": I64, "complete": BOOL,
    },
    "pauses": {"pid": I64, "tid": I64, "start_ns": I64, "end_ns": I64, "duration_ns": I64, "reason": STR},
    "adapt": {"ts": I64, "pid": I64, "tid": I64, "phase": STR, "error": I64, "policy": I64},
    "lost": {"source": STR, "where": STR, "count": I64, "reason": STR},
}

# Tables built by oslens.store.kernel_tables (the kernel collector's module). Without it, or
# without kernel chunks, they exist empty with these columns so SQL and analyses still work.
KERNEL_SCHEMAS: dict[str, dict[str, pa.DataType]] = {
    "switches": {
        "ts": I64, "cpu": I64, "prev_pid": I64, "prev_tid": I64, "prev_comm": STR, "prev_state": STR,
        "next_pid": I64, "next_tid": I64, "next_comm": STR,
    },
    "cpu_slices": {"tid": I64, "pid": I64, "comm": STR, "cpu": I64, "start_ns": I64, "end_ns": I64, "start_inferred": BOOL},
    "wakeups": {"ts": I64, "cpu": I64, "tid": I64, "target_cpu": I64, "waker_tid": I64, "enqueue_ts_ns": I64},
    "syscalls": {"pid": I64, "tid": I64, "nr": I64, "name": STR, "start_ns": I64, "end_ns": I64, "ret": I64},
    "faults": {"ts": I64, "pid": I64, "tid": I64, "address": U64, "ip": U64, "error_code": I64},
    "block_io": {
        "issue_ns": I64, "complete_ns": I64, "dev": STR, "sector": I64, "bytes": I64, "rw": STR, "tid": I64,
    },
    "samples": {"ts": I64, "pid": I64, "tid": I64, "cpu": I64, "ip": U64, "in_kernel": BOOL},
    "tasks": {"pid": I64, "tid": I64, "comm": STR, "parent_tid": I64, "start_ns": I64, "end_ns": I64},
    "kernel_lost": {"source": STR, "where": STR, "count": I64},
}

SCHEMAS: dict[str, dict[str, pa.DataType]] = {**APP_SCHEMAS, **KERNEL_SCHEMAS}
TABLES = list(SCHEMAS)

# Columns whose values repeat a lot: dictionary-encoded in Parquet.
DICTIONARY_COLUMNS = {
    "instrument", "kind", "name", "comm", "prev_comm", "next_comm", "prev_state", "reason",
    "source", "rw", "dev", "object", "phase",
}


# Columns that grow steadily (times): delta-encoded in Parquet (half the write time of plain
# encoding, and a fraction of the size).
DELTA_COLUMNS = {"ts", "begin_ns", "start_ns", "request_ns", "issue_ns"}


def arrow_schema(name: str) -> pa.Schema:
    return pa.schema([pa.field(col, typ) for col, typ in SCHEMAS[name].items()])


def empty(name: str) -> pa.Table:
    return arrow_schema(name).empty_table()


def conform(name: str, table: pa.Table | None) -> pa.Table:
    """`table` with the agreed columns of `name` first, in order and cast to their types (missing
    ones filled with nulls); columns the builder added are kept after them."""
    schema = SCHEMAS[name]
    if table is None:
        return empty(name)
    n = table.num_rows
    cols, fields = [], []
    for col, typ in schema.items():
        if col in table.column_names:
            arr = table.column(col)
            if pa.types.is_dictionary(arr.type):
                # keep dictionary encoding (cheap to write, read back as the value type)
                if arr.type.value_type != typ:
                    arr = arr.cast(arr.type.value_type).cast(typ, safe=False)
            elif arr.type != typ:
                arr = arr.cast(typ, safe=False)
        else:
            arr = pa.nulls(n, type=typ)
        cols.append(arr)
        fields.append(pa.field(col, arr.type))
    for col in table.column_names:
        if col not in schema:
            arr = table.column(col)
            cols.append(arr)
            fields.append(pa.field(col, arr.type))
    return pa.table(cols, schema=pa.schema(fields))
