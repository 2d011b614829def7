"""Importing a trace: raw chunks -> Parquet tables in TRACE/tables/, once, as a pipeline of
steps, each a module:

1. chunk_reader: read every raw chunk, scanning each while in cache;
2. clock_fit: fit the TSC -> CLOCK_MONOTONIC line through the trace's calibration pairs;
3. table_build: build the tables (the native pass for the application's, kernel_tables for the
   collector's, threads, losses);
4. import_extensions: compensation and symbols complete them;
5. table_writer: write them beside TRACE/tables and swap them into place, with the manifest
   (manifest: whether the tables are current, damaged, or left half-written by a killed import).

import_memory holds the memory settings the steps run under, progress the progress bar.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import pyarrow as pa

from oslens.capture import raw
from oslens.errors import OslensError
from oslens.progress import Progress
from oslens.store import chunk_reader, clock_fit, import_extensions, salvage, table_build
from oslens.store.import_memory import keep_freed_memory, no_cyclic_gc, no_hugepage_advice, release_freed_memory
from oslens.store.meta_table import meta_table
from oslens.store.table_writer import write_tables

# the entry points commands, tests and benchmarks call through the importer
from oslens.store.chunk_reader import read_chunk  # noqa: F401
from oslens.store.clock_fit import clock_for  # noqa: F401
from oslens.store.manifest import (MANIFEST, check_rebuildable, damaged_tables, fingerprint, is_current,  # noqa: F401
                                   read_manifest, remove_stale_files, table_file, tables_dir, verify_tables)
from oslens.store.table_build import sync_object_names  # noqa: F401
from oslens.store.table_writer import write_table  # noqa: F401

PROGRESS_BYTES = 256 << 20  # a progress bar when the raw records exceed this (a smaller import is over first)


def build_tables(trace: Path, losses: salvage.Losses, progress: Progress | None = None,
                 extensions: bool = True, build_app=None) -> dict[str, pa.Table]:
    """The tables of a trace (steps 1 to 4). The application tables are built in one native
    pass over the records (table_build.build_app) that writes app_events and the large derived
    tables to Parquet while it builds them: each stands in the result as an
    app_tables.WrittenTable that write_tables moves into place (never laid out whole in memory).
    `build_app`: what builds them instead (the tests give app_tables_oracle.build_app, the numpy
    build the pass is compared with)."""
    with no_hugepage_advice(), keep_freed_memory(), no_cyclic_gc():
        return _build_tables(trace, losses, progress or Progress("import", enabled=False), extensions,
                             build_app or table_build.build_app)


def _build_tables(trace: Path, losses: salvage.Losses, progress: Progress, extensions: bool, build_app):
    t0 = time.perf_counter()
    try:
        meta = raw.read_meta(trace)
    except OslensError as err:
        meta = {}
        losses.add("damage", "meta.json", None, f"meta.json unreadable, imported without it ({err})")
    read = chunk_reader.read_chunks(trace, meta, losses, progress)
    clock = clock_fit.clock_for(read.chunks, meta, read.scans)
    tables, context = table_build.build(trace, read, meta, clock, losses, progress, extensions, build_app)
    extra = table_build.store_keys(meta, read.chunks, clock)
    took = import_extensions.run(tables, context, extra) if extensions else {}
    extra.update({f"store.extension_s.{k}": f"{v:.3f}" for k, v in took.items()})
    tables["lost"] = losses.table()
    tables["meta"] = meta_table(meta, extra)
    tables["_records"] = extra["store.records"]  # type: ignore[assignment]
    tables["_build_s"] = time.perf_counter() - t0  # type: ignore[assignment]
    tables["_extension_s"] = took  # type: ignore[assignment]
    tables["_read"] = {"wall_s": read.wall_s, "cpu_s": read.cpu_s, "chunks_let_go": read.chunks_let_go}  # type: ignore[assignment]
    return tables


def _meta_or_empty(trace: Path) -> dict:
    try:
        return raw.read_meta(trace)
    except OslensError:
        return {}


def import_trace(trace, force: bool = False, quiet: bool = False, damaged: dict | None = None) -> Path:
    """Imports TRACE's raw chunks into TRACE/tables/*.parquet (unless already current).
    Returns the tables folder. Damage is salvaged, recorded in `lost` and reported in one
    warning line on stderr; a directory that is not a trace raises OslensError (exit 2)."""
    trace = raw.require_trace_dir(trace)
    if not force and is_current(trace):
        return tables_dir(trace)
    check_rebuildable(trace, damaged)
    remove_stale_files(trace)
    t0 = time.perf_counter()
    paths = raw.chunk_paths(trace)
    progress = Progress("import", total=100, enabled=not quiet and committed_bytes(paths) >= PROGRESS_BYTES)
    losses = salvage.Losses()
    try:
        tables = build_tables(trace, losses, progress)
        try:
            manifest = write_tables(trace, tables, progress)
        except OSError as err:
            raise OslensError(f"cannot write the tables into {trace} ({err.strerror or err}); "
                              "copy the trace somewhere writable, or use oslens.store.open_trace which "
                              "keeps them in memory", 1) from err
    finally:
        progress.close()
    del tables
    release_freed_memory()
    salvage.warn(trace, losses)
    incomplete = salvage.incomplete_reason(_meta_or_empty(trace))
    if incomplete:
        print(f"oslens: warning: {trace} is incomplete: {incomplete} (meta.json has no exit status: oslens "
              "record was killed); times and counts cover only what was written until then", file=sys.stderr)
    if not quiet:
        dt = time.perf_counter() - t0
        n = manifest["records"]
        print(f"oslens: imported {n:,} records into {len(manifest['tables'])} tables in {dt:.2f} s "
              f"-> {tables_dir(trace)}", file=sys.stderr)
    return tables_dir(trace)


def committed_bytes(paths: list[Path]) -> int:
    """The bytes the raw files hold on disk (a chunk is a sparse file: its size overstates it)."""
    total = 0
    for p in paths:
        try:
            total += min(p.stat().st_blocks * 512, p.stat().st_size)
        except OSError:
            pass
    return total
