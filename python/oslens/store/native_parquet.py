"""Writing a table with the native Parquet writer (oslens._native.write_parquet): the column
shapes the store builds, encoded in one pass from the Arrow buffers, without copies.

Encodings: integers PLAIN (DELTA_BINARY_PACKED where asked: times), dictionary columns
RLE_DICTIONARY with their Arrow dictionary as the dictionary page, booleans and byte arrays
PLAIN, definition levels only for columns that hold a null; every page LZ4_RAW. Statistics
(min/max, null count) where asked. The file carries no Arrow schema: dictionary columns read
back as their value type (string), as every engine reads them anyway.

`write` returns False, writing nothing, for a table with a column it does not handle (the
caller then writes it with pyarrow).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa

from oslens import _native

BOOLEAN, INT32, INT64, BYTE_ARRAY = 0, 1, 2, 6
UTF8, UINT_32, UINT_64 = 0, 13, 14


def _u8(buf: pa.Buffer | None):
    """A buffer as the writer takes it (unsigned bytes, no copy)."""
    return None if buf is None else np.frombuffer(buf, dtype=np.uint8)


def _one_array(col) -> pa.Array:
    if isinstance(col, pa.ChunkedArray):
        return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()
    return col


def plain_dictionary(d: pa.Array):
    """(physical, converted, PLAIN bytes) of dictionary values, or None."""
    if d.null_count:
        return None
    if pa.types.is_string(d.type) or pa.types.is_binary(d.type):
        values = [v.encode() if isinstance(v, str) else v for v in d.to_pylist()]
        plain = b"".join(len(v).to_bytes(4, "little") + v for v in values)
        return BYTE_ARRAY, (UTF8 if pa.types.is_string(d.type) else None), plain
    if pa.types.is_int64(d.type):
        return INT64, None, np.asarray(d.to_numpy(zero_copy_only=False), dtype="<i8").tobytes()
    return None


def _plain(t: pa.DataType):
    """(physical, converted, width) of a non-dictionary type, or None."""
    if pa.types.is_int64(t):
        return INT64, None, 8
    if pa.types.is_uint64(t):
        return INT64, UINT_64, 8
    if pa.types.is_int32(t):
        return INT32, None, 4
    if pa.types.is_uint32(t):
        return INT32, UINT_32, 4
    if pa.types.is_boolean(t):
        return BOOLEAN, None, 0
    if pa.types.is_string(t) or pa.types.is_binary(t):
        return BYTE_ARRAY, (UTF8 if pa.types.is_string(t) else None), 4
    if pa.types.is_large_string(t) or pa.types.is_large_binary(t):
        return BYTE_ARRAY, (UTF8 if pa.types.is_large_string(t) else None), 8
    return None


def column_spec(name: str, arr: pa.Array, delta: bool, stats: bool) -> dict | None:
    """The description _native.write_parquet takes for one column, or None if unsupported."""
    is_dict = pa.types.is_dictionary(arr.type)
    body = arr.indices if is_dict else arr
    bufs = body.buffers()
    validity = bufs[0] if arr.null_count else None
    if (arr.null_count and validity is None) or len(bufs) < 2 or bufs[1] is None:
        return None
    spec = {"name": name, "offset": body.offset, "validity": _u8(validity), "values": _u8(bufs[1]), "delta": False,
            "stats": False, "data": None}
    if is_dict:
        got = plain_dictionary(arr.dictionary)
        if got is None or not pa.types.is_integer(body.type):
            return None
        physical, converted, plain = got
        return {**spec, "physical": physical, "converted": converted, "width": body.type.bit_width // 8,
                "dict_count": len(arr.dictionary), "dict_plain": plain, "stats": stats and physical == INT64}
    got = _plain(arr.type)
    if got is None:
        return None
    physical, converted, width = got
    if physical == BYTE_ARRAY:
        if len(bufs) < 3:
            return None
        spec["data"] = _u8(bufs[2]) if bufs[2] is not None else np.zeros(0, np.uint8)
    plain_int64 = physical == INT64 and converted is None
    return {**spec, "physical": physical, "converted": converted, "width": width,
            "delta": delta and plain_int64, "stats": stats and plain_int64}


def write(path: Path, table: pa.Table, delta: set, stats: set, group_rows: int) -> bool:
    """Writes `table` to `path` natively; False (nothing written) if a column is unsupported."""
    if any(pa.types.is_dictionary(f.type) for f in table.schema):
        table = table.unify_dictionaries()
    specs = []
    for name in table.column_names:
        arr = _one_array(table.column(name))
        spec = column_spec(name, arr, name in delta, name in stats)
        if spec is None:
            return False
        specs.append(spec)
    _native.write_parquet(str(path), table.num_rows, specs, group_rows)
    return True


def stream_columns(table: pa.Table, delta: set, stats: set, nullable: set) -> list[dict]:
    """The column descriptions _native.ParquetStream takes for `table` (a slice of a table
    written a page at a time): as `write` gives them, but every column in `nullable` carries a
    validity bitmap, also where this slice holds no null (every page of a column stored
    OPTIONAL has definition levels; the bits after the rows are clear, as Arrow leaves them:
    the writer copies a last page's padding bits). Raises ValueError for a column the writer does not handle."""
    specs = []
    for name in table.column_names:
        arr = _one_array(table.column(name))
        spec = column_spec(name, arr, name in delta, name in stats)
        if spec is None:
            raise ValueError(f"native_parquet: column {name} ({arr.type}) cannot be written natively")
        if name in nullable and spec["validity"] is None:  # set for the rows, clear before and after
            valid = np.zeros(spec["offset"] + len(arr), bool)
            valid[spec["offset"]:] = True
            spec["validity"] = np.packbits(valid, bitorder="little")
        specs.append(spec)
    return specs
