"""The kernel-records bench's helpers: the table digests tell a change of Parquet writer from a
change of content, perf stat's output is read, and the growth per record is the slope between the
smallest and the largest trace. Run with `pytest bench/import/test_kernel_records.py`."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).parent))

import kernel_records  # noqa: E402

ROWS = pa.table({"ts": pa.array([30, 10, 20], pa.int64()), "comm": ["a", None, "c"]})


def digests(tmp_path: Path, tables: dict[str, tuple[pa.Table, dict]]) -> dict:
    folder = tmp_path / str(len(list(tmp_path.iterdir())))
    folder.mkdir()
    for name, (table, options) in tables.items():
        pq.write_table(table, folder / f"{name}.parquet", **options)
    return kernel_records.table_digests(folder)


def test_a_different_writer_changes_the_file_hash_only(tmp_path):
    a = digests(tmp_path, {"switches": (ROWS, {"compression": "zstd"}), "meta": (ROWS, {})})
    b = digests(tmp_path, {"switches": (ROWS, {"compression": "none", "row_group_size": 1})})
    assert list(a) == ["switches"]  # meta holds the import's time: never compared
    assert a["switches"]["sha256"] != b["switches"]["sha256"]
    for key in ("rows", "columns", "content_hash", "ordered_hash"):
        assert a["switches"][key] == b["switches"][key], key
    assert a["switches"]["rows"] == 3
    assert a["switches"]["columns"] == "ts BIGINT, comm VARCHAR"


def test_content_changes_and_reordering_are_told_apart(tmp_path):
    base = digests(tmp_path, {"t": (ROWS, {})})["t"]
    reordered = digests(tmp_path, {"t": (ROWS.take([2, 0, 1]), {})})["t"]
    assert reordered["content_hash"] == base["content_hash"]
    assert reordered["ordered_hash"] != base["ordered_hash"]
    changed = digests(tmp_path, {"t": (ROWS.set_column(0, "ts", pa.array([30, 10, 21], pa.int64())), {})})["t"]
    assert changed["content_hash"] != base["content_hash"]
    retyped = digests(tmp_path, {"t": (ROWS.set_column(0, "ts", pa.array([30, 10, 20], pa.int32())), {})})["t"]
    assert retyped["columns"] == "ts INTEGER, comm VARCHAR"
    empty = digests(tmp_path, {"t": (ROWS.slice(0, 0), {})})["t"]
    assert (empty["rows"], empty["content_hash"], empty["ordered_hash"]) == (0, "0", "0")


def test_perf_stat_csv_is_read_and_uncounted_events_left_out():
    text = ("# started on Tue Nov 24 20:12:24 2026\n\n"
            "267511,,raw_syscalls:sys_enter,1062818761,100.00,,\n"
            "267675,,context-switches,1062818761,100.00,,\n"
            "<not supported>,,cycles,0,100.00,,\n")
    assert kernel_records.perf_stat_counts(text) == {"raw_syscalls:sys_enter": 267511, "context-switches": 267675}


def test_growth_is_the_slope_between_the_smallest_and_largest_trace():
    points = [{"kernel_records": 9 * 2**20, "max_rss_mib": 1100.0}, {"kernel_records": 1 * 2**20, "max_rss_mib": 300.0},
              {"kernel_records": 4 * 2**20, "max_rss_mib": 999.0}]
    assert kernel_records.growth_bytes_per_record(points) == 100.0
    assert kernel_records.growth_bytes_per_record(points[:1]) is None
    assert kernel_records.growth_steps(points) == [233.0, 20.2]
    assert kernel_records.bytes_per_record(300.0, 2**20) == 300.0
    assert kernel_records.bytes_per_record(1.0, 0) is None


def test_compare_names_the_tables_whose_values_or_bytes_differ():
    table = {"rows": 3, "columns": "ts BIGINT", "content_hash": "7", "ordered_hash": "8", "sha256": "aa"}
    point = {"trace": "/tmp/x/switch-10", "recorded_at": "T", "kernel_records": 30, "max_rss_mib": 500.0,
             "import_cpu_s": 2.0, "tables": {"switches": table, "wakeups": table, "tasks": table}}
    after = {**point, "max_rss_mib": 200.0, "tables": {
        "switches": {**table, "sha256": "bb"},  # written differently, same values
        "wakeups": {**table, "ordered_hash": "9", "sha256": "bb"},  # same rows, another order
        "tasks": table}}
    got = kernel_records.compare({"by_size": [point]}, {"by_size": [after], "mixed": None})
    assert got == {"switch-10": {"same_recording": True, "max_rss_mib": [500.0, 200.0], "import_cpu_s": [2.0, 2.0],
                                 "values_identical": False,
                                 "tables_differing": {"switches": ["sha256"], "wakeups": ["ordered_hash", "sha256"]}}}
    del after["tables"]["wakeups"]
    got = kernel_records.compare({"by_size": [point]}, {"by_size": [after]})["switch-10"]
    assert got["tables_differing"] == {"switches": ["sha256"], "wakeups": "only before"}
    assert got["values_identical"] is False
    same_values = {**point, "tables": {**point["tables"], "switches": {**table, "sha256": "bb"}}}
    assert kernel_records.compare({"by_size": [point]}, {"by_size": [same_values]})["switch-10"]["values_identical"]
