"""The parquet crate's comparison writer (crate_writer.py) stores what the native writer stores;
run with `pytest bench/import/test_crate_writer.py` on a build with the `parquet-crate` feature."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest

sys.path.insert(0, str(Path(__file__).parent))

import crate_writer  # noqa: E402
from oslens.store import parquet_options  # noqa: E402
from oslens.store.test_native_parquet import sample  # noqa: E402


@pytest.mark.skipif(not crate_writer.crate_available(), reason="oslens._native built without parquet-crate")
def test_the_parquet_crate_comparison_writes_the_same_values(tmp_path):
    table = parquet_options.required_where_full(sample())
    path = tmp_path / "crate.parquet"
    crate_writer.write_with_crate(path, table, {"ts", "value"}, {"ts"}, 1024)
    back = pq.read_table(path)
    for name in table.column_names:
        assert back.column(name).to_pylist() == table.column(name).to_pylist(), name
    assert pq.ParquetFile(path).metadata.num_row_groups == 5
