"""The native Parquet writer: every column shape the store writes reads back, in pyarrow and
DuckDB, exactly as pyarrow's own writer stores it (values, nulls, slices, several row groups)."""

from __future__ import annotations

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from oslens.store import importer, native_parquet


def sample(n: int = 5000) -> pa.Table:
    rng = np.random.default_rng(7)
    g = np.repeat(np.arange(4, dtype=np.int32), n // 4 + 1)[:n]
    name_idx = rng.integers(-1, 40, n).astype(np.int32)
    return pa.table({
        "ts": np.cumsum(rng.integers(0, 1000, n)).astype(np.int64),
        "pid": pa.DictionaryArray.from_arrays(pa.array(g), pa.array([10, 11, 12, 13], pa.int64())),
        "value": rng.integers(-2**62, 2**62, n),
        "id": pa.array(rng.integers(0, 2**32, n, dtype=np.uint64).astype(np.uint32)),
        "address": pa.array(rng.integers(0, 2**63, n, dtype=np.uint64) * 2, pa.uint64()),
        "kind": pa.DictionaryArray.from_arrays(pa.array(rng.integers(0, 5, n).astype(np.int8)),
                                               pa.array(["a", "b", "c", "d", "e"])),
        "name": pa.DictionaryArray.from_arrays(pa.array(name_idx, mask=name_idx < 0),
                                               pa.array([f"region {i}" for i in range(40)])),
        "payload": pa.array([bytes([i % 256]) * (i % 11) if i % 7 == 0 else None for i in range(n)], pa.binary()),
        "release_ns": pa.array(np.arange(n, dtype=np.int64), mask=rng.random(n) < 0.3),
        "complete": pa.array(rng.random(n) < 0.5),
        "where": pa.array([f"thread {i % 9}" if i % 5 else None for i in range(n)]),
    })


def test_every_column_reads_back_as_written(tmp_path):
    table = sample().slice(3, 4990)  # an Arrow offset that is not a whole byte
    path = tmp_path / "t.parquet"
    # value: random 64-bit numbers, delta-encoded at the widest bit widths
    assert native_parquet.write(path, table, {"ts", "value"}, {"ts", "pid"}, 1024)  # several row groups
    back = pq.read_table(path)
    assert back.num_rows == table.num_rows
    for name in table.column_names:
        assert back.column(name).to_pylist() == table.column(name).to_pylist(), name
    assert str(back.schema.field("id").type) == "uint32" and str(back.schema.field("address").type) == "uint64"
    assert str(back.schema.field("kind").type) == "string" and str(back.schema.field("pid").type) == "int64"
    assert pq.ParquetFile(path).metadata.num_row_groups == 5


def test_duckdb_reads_the_same_as_from_pyarrows_file(tmp_path):
    table = sample()
    native_parquet.write(tmp_path / "n.parquet", table, {"ts"}, {"ts"}, 2000)
    pq.write_table(table, tmp_path / "p.parquet")
    q = ("SELECT count(*), sum(ts), sum(pid), count(name), min(name), count(payload), sum(octet_length(payload)), "
         "count(release_ns), sum(release_ns), sum(complete::int), max(address), sum(id), count(\"where\") FROM '{}'")
    con = duckdb.connect()
    assert con.sql(q.format(tmp_path / "n.parquet")).fetchall() == con.sql(q.format(tmp_path / "p.parquet")).fetchall()


def test_statistics_bound_each_row_group(tmp_path):
    path = tmp_path / "t.parquet"
    native_parquet.write(path, sample(), {"ts"}, {"ts", "pid"}, 1000)
    meta = pq.ParquetFile(path).metadata
    ts = sample().column("ts").to_numpy()
    for r in range(meta.num_row_groups):
        stats = meta.row_group(r).column(0).statistics
        assert (stats.min, stats.max) == (ts[r * 1000:(r + 1) * 1000].min(), ts[r * 1000:(r + 1) * 1000].max())
        pid = meta.row_group(r).column(1).statistics
        assert pid.min <= 10 and pid.max >= 13


def test_unsupported_columns_are_left_to_pyarrow(tmp_path):
    table = pa.table({"x": pa.array([1.5, 2.5])})
    assert not native_parquet.write(tmp_path / "t.parquet", table, set(), set(), 10)
    assert not (tmp_path / "t.parquet").exists()
    importer.write_table(tmp_path / "t.parquet", table)
    assert pq.read_table(tmp_path / "t.parquet").column("x").to_pylist() == [1.5, 2.5]


def test_an_empty_table_writes_a_readable_file(tmp_path):
    table = sample().slice(0, 0)
    native_parquet.write(tmp_path / "t.parquet", table, {"ts"}, {"ts"}, 10)
    assert pq.read_table(tmp_path / "t.parquet").num_rows == 0
    assert duckdb.sql(f"SELECT count(*) FROM '{tmp_path / 't.parquet'}'").fetchall() == [(0,)]


def test_a_dictionary_index_past_the_dictionary_is_refused(tmp_path):
    bad = pa.DictionaryArray.from_arrays(pa.array([0, 5], pa.int8()), pa.array(["a", "b"]), safe=False)
    with pytest.raises(ValueError):
        native_parquet.write(tmp_path / "t.parquet", pa.table({"k": bad}), set(), set(), 10)
