"""How the store writes its Parquet tables: codec, row group size, which columns are delta- or
dictionary-encoded and which carry statistics. Shared by the importer's writer and the kernel
tables, which DuckDB orders and pyarrow writes a batch at a time (oslens.store.kernel_tables)."""

from __future__ import annotations

import pyarrow as pa

from oslens.store import schema

COMPRESSION = "lz4"  # bench/import/compression.py compares the codecs (time and size)
ROW_GROUP = 1 << 22
# compensation's columns stored delta-encoded, as the times they compensate are
# (schema.DELTA_COLUMNS; the native pass writes them so: app_rows/derived.rs comp_cols, sync_table.rs)
COMPENSATED_DELTA = frozenset({"ts_comp_ns", "begin_comp_ns", "start_comp_ns", "request_comp_ns", "end_comp_ns", "stop_comp_ns",
                               "acquire_comp_ns", "release_comp_ns"})
DELTA_COLUMNS = schema.DELTA_COLUMNS | COMPENSATED_DELTA


def value_type(t: pa.DataType) -> pa.DataType:
    return t.value_type if pa.types.is_dictionary(t) else t


def prunes(column: str) -> bool:
    return column in ("ts", "pid", "tid", "cpu") or column.endswith("_ns") or column.endswith("_tid")


def required_where_full(table: pa.Table) -> pa.Table:
    """`table` with the columns that hold no null marked not nullable: Parquet stores them as
    REQUIRED, without definition levels (a sixth of the time of encoding an int64 column). The
    values and types are unchanged; an engine reading them back sees the same columns."""
    fields = [f.with_nullable(False) if f.nullable and table.column(i).null_count == 0 else f
              for i, f in enumerate(table.schema)]
    return table if fields == list(table.schema) else table.cast(pa.schema(fields, metadata=table.schema.metadata))


def pyarrow_options(table_schema: pa.Schema, compression: str = COMPRESSION, level: int | None = None) -> dict:
    """pyarrow.parquet's writer options for a table: the encodings and statistics the native
    writer (native_parquet) uses (the row group size, ROW_GROUP, goes to each write)."""
    names = table_schema.names
    dict_cols = [c for c in names if c in schema.DICTIONARY_COLUMNS]
    delta = {c: "DELTA_BINARY_PACKED" for c in names
             if c in DELTA_COLUMNS and pa.types.is_integer(table_schema.field(c).type)}
    # min/max statistics where they prune row groups: times and thread ids (rows are ordered by
    # thread and time); computing them for string and binary columns costs as much as encoding
    # them, and for other numbers (values, ids, addresses) they prune nothing
    stats = sorted(f.name for f in table_schema if pa.types.is_integer(value_type(f.type)) and prunes(f.name))
    return {"compression": compression, "compression_level": level, "use_dictionary": dict_cols or False,
            "write_statistics": stats or False, "column_encoding": delta or None}
