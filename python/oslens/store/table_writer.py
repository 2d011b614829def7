"""The import's last step: the tables written to Parquet in a folder beside TRACE/tables, with
their manifest, and swapped into place whole (a crash never leaves half a set of tables)."""

from __future__ import annotations

import concurrent.futures
import json
import os
import shutil
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from oslens.progress import Progress
from oslens.store import app_tables, native_parquet, schema
from oslens.store.import_memory import keep_freed_memory, no_cyclic_gc
from oslens.store.manifest import MANIFEST, TABLES_DIR, fingerprint, table_file, tables_dir
from oslens.store.parquet_options import (COMPRESSION, DELTA_COLUMNS, ROW_GROUP, prunes, pyarrow_options,
                                          required_where_full, value_type)
from oslens.version import __version__


def write_table(path: Path, table: pa.Table, compression: str = COMPRESSION, level: int | None = None,
                native: bool = True) -> None:
    """Writes one table: with the native writer where it handles every column (the store's own
    tables, LZ4), else with pyarrow (the same encodings and statistics). A table written while
    it was built (app_tables.WrittenTable) is moved into place."""
    if isinstance(table, app_tables.WrittenTable):
        if compression == COMPRESSION and level is None and native:
            table.move_to(path)
            return
        table = table.read()
    table = required_where_full(table)
    stats = {f.name for f in table.schema if pa.types.is_integer(value_type(f.type)) and prunes(f.name)}
    if native and compression == COMPRESSION and native_parquet.write(path, table, DELTA_COLUMNS, stats, ROW_GROUP):
        return
    pq.write_table(table, path, row_group_size=ROW_GROUP, **pyarrow_options(table.schema, compression, level))


def write_tables(trace: Path, tables: dict, progress: Progress | None = None) -> dict:
    with keep_freed_memory(), no_cyclic_gc():  # the writers' page buffers: reused, not faulted in afresh
        return _write_tables(trace, tables, progress)


def _write_tables(trace: Path, tables: dict, progress: Progress | None) -> dict:
    progress = progress or Progress("import", enabled=False)
    final = tables_dir(trace)
    tmp = trace / f".{TABLES_DIR}.tmp-{os.getpid()}"
    if tmp.exists():
        shutil.rmtree(tmp)
    tmp.mkdir()
    names = [n for n in tables if not n.startswith("_")]
    # the biggest table on one thread, the rest on another (Parquet encoding releases the GIL)
    names.sort(key=lambda n: -tables[n].num_rows)
    files: dict[str, dict] = {}

    def write(n: str) -> None:
        path = tmp / f"{n}.parquet"
        write_table(path, tables[n])
        files[n] = table_file(path)  # zlib's CRC releases the GIL

    with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
        futures = {pool.submit(write, names[0]): names[0]} if names else {}
        rest = pool.submit(lambda: [write(n) for n in names[1:]])
        for i, f in enumerate(concurrent.futures.as_completed([*futures, rest])):
            f.result()
            progress.step("writing tables", 70 + 30.0 * (i + 1) / 2)
    rows = {n: tables[n].num_rows for n in names}
    manifest = {
        "schema_version": schema.SCHEMA_VERSION,
        "oslens_version": __version__,
        "imported_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "records": tables.get("_records", 0),
        "tables": rows,
        "files": {n: files[n] for n in names},
        "fingerprint": fingerprint(trace),
    }
    (tmp / MANIFEST).write_text(json.dumps(manifest, indent=1))
    old = trace / f".{TABLES_DIR}.old-{os.getpid()}"
    if final.exists():
        final.rename(old)
    tmp.rename(final)
    if old.exists():
        shutil.rmtree(old, ignore_errors=True)
    return manifest
