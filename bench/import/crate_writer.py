"""The parquet crate's writer for the comparison in bench/import/compression.py: the tables
written as the store's native writer writes them, through Apache Arrow's Rust `parquet` crate
(crate_writer.rs beside this file, compiled into oslens._native with the `parquet-crate` feature:
`cargo build --release -p oslens-native --features parquet-crate`)."""

from __future__ import annotations

import ctypes
from pathlib import Path

import pyarrow as pa

from oslens import _native
from oslens.store.native_parquet import _one_array


def crate_available() -> bool:
    """Whether oslens._native was built with the `parquet-crate` feature (a comparison build)."""
    return hasattr(_native, "write_parquet_crate")


def _exported(arr: pa.Array) -> tuple:
    """`arr` exported through the Arrow C data interface into two fresh C structs."""
    array, schema = ctypes.create_string_buffer(80), ctypes.create_string_buffer(72)  # ArrowArray, ArrowSchema
    arr._export_to_c(ctypes.addressof(array), ctypes.addressof(schema))
    return array, schema


def write_with_crate(path: Path, table: pa.Table, delta: set, stats: set, group_rows: int) -> None:
    """Writes `table` as native_parquet.write does, through Apache Arrow's `parquet` crate (for comparison)."""
    if any(pa.types.is_dictionary(f.type) for f in table.schema):
        table = table.unify_dictionaries()
    keep, columns = [], []
    for field in table.schema:
        array, schema = _exported(_one_array(table.column(field.name)))
        keep.append((array, schema))
        columns.append((field.name, field.nullable, ctypes.addressof(array), ctypes.addressof(schema)))
    names = set(table.column_names)
    dictionary = [f.name for f in table.schema if pa.types.is_dictionary(f.type)]
    _native.write_parquet_crate(str(path), columns, group_rows, dictionary, sorted(delta & names), sorted(stats & names))
