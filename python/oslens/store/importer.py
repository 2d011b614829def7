"""Importing a trace: raw chunks -> Parquet tables in TRACE/tables/, once.

TRACE/tables/manifest.json records the schema version, the raw files the tables were built from
(name, size, mtime) and per-table row counts; a trace whose manifest is current is not imported
again unless forced. Tables are written to a temporary folder and swapped in whole, so a crash
during import never leaves half a set of tables.
"""

from __future__ import annotations

import collections
import concurrent.futures
import contextlib
import functools
import importlib
import itertools
import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from oslens import _native
from oslens.version import __version__
from oslens.capture import ledger, raw
from oslens.errors import OslensError
from oslens.store.parquet_options import (COMPRESSION, DELTA_COLUMNS, ROW_GROUP, prunes, pyarrow_options,  # noqa: F401 (bench/import)
                                          required_where_full, value_type)
from oslens.store import (app_tables, compensation, faults, held, kernel_tables as kernel_module, native_parquet, salvage,
                          schema, threads)

TABLES_DIR = "tables"
MANIFEST = "manifest.json"
PROGRESS_BYTES = 256 << 20  # show a progress bar when the raw records exceed this
# Modules that may add to or amend the tables after they are built (compensation, symbol
# names): each exposes extend(tables: dict[str, pa.Table], context: dict) -> None. The tables
# written in the native pass are not in memory: compensation's columns are computed in it, and
# symbols only names the functions table, which is built in memory.
EXTENSIONS = ("oslens.store.compensation", "oslens.store.symbols")


def tables_dir(trace: Path) -> Path:
    return Path(trace) / TABLES_DIR


def fingerprint(trace: Path) -> list:
    out = []
    for p in [trace / "meta.json", *raw.chunk_paths(trace)]:
        try:
            st = p.stat()
        except OSError:
            continue
        out.append([p.name, st.st_size, st.st_mtime_ns])
    return out


def read_manifest(trace: Path) -> dict | None:
    try:
        return json.loads((tables_dir(trace) / MANIFEST).read_text())
    except (OSError, ValueError):
        return None


def is_current(trace: Path) -> bool:
    """Whether the tables on disk are those of the trace's raw chunks, whole. A table whose size
    differs from the manifest's is damaged, and the trace is imported again; so is a trace whose
    chunks changed. A trace whose chunks are all gone keeps its tables (nothing to rebuild them
    from: store.damaged_tables tells what is wrong with them)."""
    m = read_manifest(trace)
    if not m or m.get("schema_version") != schema.SCHEMA_VERSION:
        return False
    if damaged_tables(trace, m):
        return False
    if m.get("fingerprint") != fingerprint(trace):
        return chunks_gone(trace, m)
    return True


def chunks_gone(trace: Path, m: dict) -> bool:
    """Whether every raw chunk the manifest's tables were built from is gone (tables copied
    without raw/): importing again would replace them with empty ones."""
    listed = [f[0] for f in m.get("fingerprint") or [] if str(f[0]).endswith(".osl")]
    return bool(listed) and not raw.chunk_paths(trace)


def _table_files(m: dict) -> dict:
    """{table: {"size": bytes, "crc32": ...}} from a manifest; tables of a manifest written
    before sizes were kept carry only their presence."""
    files = m.get("files") or {}
    return {t: files.get(t, {}) for t in m.get("tables", {})}


def damaged_tables(trace: Path, m: dict | None = None, checksums: bool = False) -> dict[str, str]:
    """{table: what is wrong} for the manifest's tables that are missing, of another size than
    written, or (with `checksums`, which reads every table) of another CRC-32."""
    m = m if m is not None else read_manifest(trace)
    out: dict[str, str] = {}
    for name, want in _table_files(m or {}).items():
        path = tables_dir(trace) / f"{name}.parquet"
        try:
            size = path.stat().st_size
        except OSError:
            out[name] = "missing"
            continue
        if "size" in want and size != want["size"]:
            out[name] = f"{size} bytes instead of {want['size']}"
        elif checksums and "crc32" in want and file_crc32(path) != want["crc32"]:
            out[name] = "its CRC-32 is not the one written"
    return out


def table_file(path: Path) -> dict:
    """What the manifest keeps of a table's file to notice damage: its size and CRC-32."""
    return {"size": path.stat().st_size, "crc32": file_crc32(path)}


def file_crc32(path: Path) -> int:
    import zlib

    crc = 0
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            crc = zlib.crc32(block, crc)
    return crc


# ---------------------------------------------------------------- meta


def _flatten(prefix: str, value, out: dict) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            _flatten(f"{prefix}.{k}" if prefix else str(k), v, out)
    elif isinstance(value, (list, tuple)):
        out[prefix] = json.dumps(value)
    elif value is None:
        out[prefix] = None
    elif isinstance(value, bool):
        out[prefix] = "true" if value else "false"
    else:
        out[prefix] = str(value)


def meta_table(meta: dict, extra: dict) -> pa.Table:
    flat: dict = {}
    _flatten("", {k: v for k, v in meta.items() if k not in ("threads", "damage")}, flat)
    machine = meta.get("machine") or {}
    if machine.get("hostname"):
        flat.setdefault("hostname", str(machine["hostname"]))
    for k, v in extra.items():
        flat[k] = None if v is None else str(v)
    keys = sorted(flat)
    return pa.table({"key": pa.array(keys, pa.string()), "value": pa.array([flat[k] for k in keys], pa.string())})


# ---------------------------------------------------------------- kernel tables


def kernel_tables(trace: Path, kernel_chunks: list, meta: dict, losses: salvage.Losses) -> dict:
    """The kernel tables: the big ones written by DuckDB beside the tables (or in $TMPDIR when the
    trace folder cannot be written), as app_tables.WrittenTable; tasks and kernel_lost in memory."""
    out: dict = {}
    if kernel_chunks:
        for folder in (trace, Path(tempfile.gettempdir())):
            try:
                out = kernel_module.write_kernel_tables(kernel_chunks, meta, folder) or {}
                break
            except (OSError, duckdb.IOException) as err:
                if folder != trace:
                    losses.add("damage", "kernel chunks", sum(len(c.records) for c in kernel_chunks),
                               f"kernel tables could not be built ({type(err).__name__}: {err})")
            except Exception as err:  # the rest of the trace still imports
                losses.add("damage", "kernel chunks", sum(len(c.records) for c in kernel_chunks),
                           f"kernel tables could not be built ({type(err).__name__}: {err})")
                break
    tables = {name: (out[name] if isinstance(out.get(name), app_tables.WrittenTable) else schema.conform(name, out.get(name)))
              for name in schema.KERNEL_SCHEMAS}
    for name, table in out.items():  # further tables the collector's module defines (irqs, ...)
        if name not in tables and name not in schema.APP_SCHEMAS:
            tables[name] = table
    return tables


def is_kernel_chunk(c: raw.ChunkData) -> bool:
    if c.header is not None:
        return c.header["source"] == raw.SOURCE_KERNEL_CPU
    return c.path.name.startswith("kernel-")


# ---------------------------------------------------------------- building


class _Progress:
    """A rich progress bar on stderr for long imports; silent otherwise."""

    def __init__(self, total_bytes: int, enabled: bool):
        self.bar = None
        if enabled and total_bytes >= PROGRESS_BYTES:
            from rich.console import Console
            from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

            self.bar = Progress(TextColumn("import {task.description}"), BarColumn(), TimeElapsedColumn(),
                                console=Console(stderr=True), transient=True)
            self.bar.start()
            self.task = self.bar.add_task("reading", total=100)

    def step(self, what: str, done: float) -> None:
        if self.bar:
            self.bar.update(self.task, description=what, completed=done)

    def close(self) -> None:
        if self.bar:
            self.bar.stop()


def _committed_bytes(paths: list[Path]) -> int:
    total = 0
    for p in paths:
        try:
            total += min(p.stat().st_blocks * 512, p.stat().st_size)
        except OSError:
            pass
    return total


@contextlib.contextmanager
def no_hugepage_advice():
    """numpy asks for transparent huge pages on large arrays; where THP defragments on demand
    (defrag = madvise) every such allocation can stall in compaction (docs/trace-schema.md, the
    import's memory settings). The import allocates many large temporaries, so it goes without."""
    setter = getattr(getattr(getattr(np, "_core", None), "multiarray", None), "_set_madvise_hugepage", None)
    if setter is None:
        yield
        return
    previous = setter(False)
    try:
        yield
    finally:
        setter(previous)


def read_chunk(path: Path) -> raw.ChunkData:
    """raw.read_chunk, with the records left in the buffer Rust decoded them into (no copy)."""
    got = _native.read_chunk_records(str(path))
    return raw.ChunkData(
        path=path,
        header=got["header"],
        records=np.frombuffer(got["records"], dtype=raw.RECORD_DTYPE),
        names=got["names"],
        payloads=dict(got["payloads"]),
        damage=[{"file": path.name, "reason": r, "offset": o, "records_lost": n} for r, o, n in got["damage"]],
    )


def _try_read_chunk(path: Path):
    """(path, chunk or OSError, scan): scan is _native.scan_records' (records per kind,
    CLOCK_PAIR (ts, a) pairs, largest CPU number, (counter reasons, pause reasons), the
    (name key, address) pairs of its sync records laid flat or None), taken here while the
    records are in cache (None without it)."""
    try:
        chunk = read_chunk(path)
    except OSError as err:
        return path, err, None
    if not len(chunk.records):
        return path, chunk, None
    return path, chunk, _native.scan_records(chunk.records.view(np.uint8))


def _read_again(path: Path) -> np.ndarray:
    """A chunk's records read again when the pass reaches it (store.held)."""
    return read_chunk(path).records


def _read_in_order(paths: list[Path], workers: int = 2):
    """_try_read_chunk of each path, in order: `workers` at a time (the Rust reader releases the
    GIL), and no more than one chunk read ahead of each worker, so chunks whose records are let go
    (store.held) are not all in memory at once waiting to be taken."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=workers) as pool:
        ahead = collections.deque()
        todo = iter(paths)
        for p in itertools.islice(todo, workers + 1):
            ahead.append(pool.submit(_try_read_chunk, p))
        while ahead:
            got = ahead.popleft().result()
            nxt = next(todo, None)
            if nxt is not None:
                ahead.append(pool.submit(_try_read_chunk, nxt))
            yield got


def clock_for(chunks: list[raw.ChunkData], meta: dict, scans: dict) -> raw.ClockConverter:
    """raw.clock_for (the same pairs in the same order) with each chunk's CLOCK_PAIR records
    from its scan where there is one, rather than a second pass over every record."""
    if not all(c.path in scans for c in chunks):
        return raw.clock_for(chunks, meta)
    pairs = [tuple(p) for p in meta.get("clock_pairs", [])]
    for c in chunks:
        if c.header and c.header["clock"] == raw.CLOCK_TSC:
            pairs.extend(tuple(p) for p in c.header["calib"])
        if c.header is None or c.header["clock"] == raw.CLOCK_TSC:
            pairs.extend(scans[c.path][1])
    return raw.ClockConverter(pairs)


_M_TRIM_THRESHOLD, _M_MMAP_MAX = -1, -4  # glibc mallopt parameters
_GLIBC_DEFAULTS = {_M_TRIM_THRESHOLD: 128 * 1024, _M_MMAP_MAX: 65536}


def _libc_mallopt():
    try:
        import ctypes

        libc = ctypes.CDLL(None)
        return libc.mallopt if hasattr(libc, "mallopt") and hasattr(libc, "gnu_get_libc_version") else None
    except (OSError, AttributeError):
        return None


@contextlib.contextmanager
def keep_freed_memory():
    """The import allocates and frees many arrays of hundreds of MB. glibc serves each from a
    fresh mmap and unmaps it when freed, so every one costs a page fault per 4 KiB on first
    touch, a large share of the import's CPU time (docs/trace-schema.md, the import's memory
    settings). While importing, large blocks come from the heap and
    freed memory stays with the process for the next array (glibc only; restored after)."""
    mallopt = _libc_mallopt()
    if mallopt is None:
        yield
        return
    ok = mallopt(_M_MMAP_MAX, 0) and mallopt(_M_TRIM_THRESHOLD, 1 << 30)
    try:
        yield
    finally:
        if ok:
            mallopt(_M_MMAP_MAX, _GLIBC_DEFAULTS[_M_MMAP_MAX])
            mallopt(_M_TRIM_THRESHOLD, _GLIBC_DEFAULTS[_M_TRIM_THRESHOLD])


@contextlib.contextmanager
def no_cyclic_gc():
    """Python's cycle collector off while importing: the import makes few cycles but many
    container objects (chunk headers, names, payloads), and each collection they set off walks
    every object the process holds (measured: 1.5 % of the bench's import, none of it freeing
    anything the import made). Collected as usual afterwards."""
    import gc

    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def release_freed_memory() -> None:
    """Gives the memory the import freed back to the system (what keep_freed_memory kept)."""
    try:
        import ctypes

        trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
        if trim is not None:
            trim(0)
    except OSError:
        pass


def build_tables(trace: Path, losses: salvage.Losses, progress: _Progress | None = None,
                 extensions: bool = True, build_app=None) -> dict[str, pa.Table]:
    """The tables of a trace. The application tables are built in one native pass over the
    records (_build_app) that writes app_events and the large derived tables to Parquet while it
    builds them: each stands in the result as an app_tables.WrittenTable that write_tables moves
    into place (never laid out whole in memory). `build_app`: what builds them instead (the tests
    give app_tables_oracle.build_app, the numpy build the pass is compared with)."""
    with no_hugepage_advice(), keep_freed_memory(), no_cyclic_gc():
        return _build_tables(trace, losses, progress, extensions, build_app or _build_app)


def _compensation_costs(meta: dict) -> tuple | None:
    """(calibration, why none, per-kind cost table) for the one pass where the compensation
    extension runs, else None."""
    if "oslens.store.compensation" not in EXTENSIONS:
        return None
    cal, why = compensation.find_calibration(meta)
    return cal, why, compensation.cost_table(cal, app_tables.KIND_LABELS.to_pylist())


def sync_object_names(trace: Path, chunks: list, scans: dict) -> dict[int, str]:
    """{address: symbol} of the sync objects that are static variables (symbols.name_objects),
    from the addresses the chunks' scans found in their sync records; {} where the processes
    wrote no memory map."""
    if next((trace / "raw").glob("maps-*.txt"), None) is None:
        return {}
    by_pid: dict[int, set] = {}
    for c in chunks:
        keys = app_tables._sync_keys(scans[c.path]) if scans.get(c.path) else None
        if keys:
            by_pid.setdefault(c.pid, set()).update(keys[1::2])
    if not by_pid:
        return {}
    from oslens.store import symbols

    return symbols.name_objects(trace, by_pid)


def _build_app(trace: Path, chunks: list, meta: dict, clock, names: dict, scans: dict,
               extensions: bool = False) -> dict:
    objects = sync_object_names(trace, chunks, scans)
    comp = _compensation_costs(meta) if extensions else None
    scanned = {p: s for p, s in scans.items() if s[0] is not None}
    # the pass's files go beside the tables, so that write_tables only renames them; a trace
    # folder that cannot be written gets them in the temporary folder ($TMPDIR)
    for folder in (trace, Path(tempfile.gettempdir())):
        path = folder / f".app_events.tmp-{os.getpid()}.parquet"
        try:
            out = app_tables.build_streamed(chunks, meta, clock, names, path, ROW_GROUP, scanned,
                                            costs=comp[2] if comp else None, object_names=objects)
            break
        except OSError as err:
            with contextlib.suppress(OSError):
                path.unlink()
            if "reading a chunk again: " in str(err):  # held.LetGo's read failed (py_app_pass.rs says so)
                why = str(err).split("reading a chunk again: ", 1)[1].removeprefix("OSError: ")
                raise OslensError(f"{trace}: a raw chunk could not be read again while importing ({why}); "
                                  "is a recording still writing to it?", 1) from err
            if folder != trace:
                raise OslensError(f"{trace}: cannot import it: neither the trace folder nor {folder} "
                                  f"can be written ({err.strerror or err})", 1) from err
    if comp:  # what the compensation extension takes from the pass
        out["compensation"].update({"cal": comp[0], "why": comp[1]})
    return out


def _build_tables(trace: Path, losses: salvage.Losses, progress: _Progress | None, extensions: bool, build_app):
    progress = progress or _Progress(0, False)
    t0 = time.perf_counter()
    try:
        meta = raw.read_meta(trace)
    except OslensError as err:
        meta = {}
        losses.add("damage", "meta.json", None, f"meta.json unreadable, imported without it ({err})")
    paths = raw.chunk_paths(trace)
    chunks, scans = [], {}
    read_w, read_c = time.perf_counter(), time.process_time()
    # records held past the read only up to a budget where the pass can read them again
    holder = held.Holder()
    for i, (p, got, scan) in enumerate(_read_in_order(paths)):
        if isinstance(got, OSError):
            losses.add("damage", f"raw/{p.name}", None, f"chunk unreadable ({got})")
        else:
            chunks.append(got)
            if scan is not None or not len(got.records):
                scans[got.path] = scan or (None, [], 0, (None, None))
            # names chunks are kept: their thread ledgers are read before the pass
            holder.take(got, functools.partial(_read_again, p), ledger.is_names_chunk(got))
        progress.step("reading chunks", 40.0 * (i + 1) / max(len(paths), 1))
    for c in ledger.thread_chunks(chunks):  # threads that recorded nothing of their own
        chunks.append(c)
        scans[c.path] = _native.scan_records(c.records.view(np.uint8))
    read_w, read_c = time.perf_counter() - read_w, time.process_time() - read_c
    salvage.missing_chunks(losses, trace, [p.name for p in paths], meta)
    for c in chunks:
        salvage.chunk_damage(losses, c)
    clock = clock_for(chunks, meta, scans)
    names = raw.name_table(chunks)
    progress.step("building application tables", 45)
    app = build_app(trace, chunks, meta, clock, names, scans, extensions)
    progress.step("building kernel tables", 65)
    kernel = kernel_tables(trace, [c for c in chunks if is_kernel_chunk(c)], meta, losses)
    for t in app["threads"]:
        if t.dropped_events:
            losses.add("app", f"thread {t.tid} ({t.name or '?'}) of process {t.pid}", t.dropped_events,
                       "buffer full: events dropped by the recorder")
    faults.add_losses(losses, chunks, meta)
    kl = kernel.get("kernel_lost")
    if kl is not None and kl.num_rows:
        for r in kl.to_pylist():
            if r.get("count"):
                losses.add("kernel", str(r.get("where") or r.get("source") or "kernel"), r["count"],
                           str(r.get("source") or "kernel collector lost records"))
    if app["unmatched_region_ends"]:
        losses.add("app", "regions", 0, f"{app['unmatched_region_ends']} region end(s) with no begin were ignored")
    if app["unmatched_function_exits"]:
        losses.add("app", "functions", 0,
                   f"{app['unmatched_function_exits']} function exit(s) with no entry were ignored")
    tables: dict[str, pa.Table] = {}
    tables["threads"] = threads.build(app["threads"], app["extent"], names, meta, kernel.get("tasks"))
    for name in ("app_events", "regions", "counters", "timers", "sync", "functions", "pauses", "adapt"):
        written = isinstance(app[name], app_tables.WrittenTable)
        tables[name] = app[name] if written else schema.conform(name, app[name])
    tables.update(kernel)
    events = sum(len(c.records) for c in chunks)
    extra = {
        "trace.incomplete": salvage.incomplete_reason(meta),
        "schema_version": schema.SCHEMA_VERSION,
        "store.oslens_version": __version__,
        "store.imported_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "store.records": events,
        "store.chunks": len(chunks),
        "clock.fit_pairs": clock.pair_count,
        "clock.ns_per_tick": repr(float(clock.slope)),
    }
    context = {"trace": trace, "meta": meta, "chunks": chunks, "clock": clock, "names": names, "losses": losses}
    if "compensation" in app:
        context["compensation"] = app["compensation"]
    ext_s = {}
    for modname in EXTENSIONS if extensions else ():
        mod = importlib.import_module(modname)
        short = modname.rsplit(".", 1)[-1]
        t_ext = time.perf_counter()
        before = dict(tables)
        try:
            mod.extend(tables, context)
        except Exception as err:  # an extension's failure must not cost the trace its tables
            tables.clear()
            tables.update(before)
            extra[f"store.extension_error.{short}"] = f"{type(err).__name__}: {err}"
            print(f"oslens: warning: the {short} step of the import failed ({type(err).__name__}: {err}); "
                  "the tables are imported without it", file=sys.stderr)
        ext_s[short] = time.perf_counter() - t_ext
    extra.update({f"store.extension_s.{k}": f"{v:.3f}" for k, v in ext_s.items()})
    tables["lost"] = losses.table()
    tables["meta"] = meta_table(meta, extra)
    tables["_records"] = events  # type: ignore[assignment]
    tables["_build_s"] = time.perf_counter() - t0  # type: ignore[assignment]
    tables["_extension_s"] = ext_s  # type: ignore[assignment]
    tables["_read"] = {"wall_s": read_w, "cpu_s": read_c, "chunks_let_go": holder.let_go}  # type: ignore[assignment]
    return tables


# ---------------------------------------------------------------- writing


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


def write_tables(trace: Path, tables: dict, progress: _Progress | None = None) -> dict:
    with keep_freed_memory(), no_cyclic_gc():  # the writers' page buffers: reused, not faulted in afresh
        return _write_tables(trace, tables, progress)


def _write_tables(trace: Path, tables: dict, progress: _Progress | None) -> dict:
    progress = progress or _Progress(0, False)
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


def _meta_or_empty(trace: Path) -> dict:
    try:
        return raw.read_meta(trace)
    except OslensError:
        return {}


def _rebuildable(trace: Path, damaged: dict | None = None) -> None:
    """Says why the tables are built again when some were damaged; refuses when the raw chunks
    they came from are gone (an empty import would replace what is left of them)."""
    m = read_manifest(trace)
    if damaged is None:
        damaged = damaged_tables(trace, m) if m else {}
    if not damaged:
        return
    t, why = next(iter(damaged.items()))
    more = f" (and {len(damaged) - 1} more table(s))" if len(damaged) > 1 else ""
    if chunks_gone(trace, m):
        raise OslensError(f"{trace}/tables/{t}.parquet is damaged ({why}){more} and the raw chunks it was built from "
                          "are gone; restore raw/ (or the tables) from a copy of the trace", 3)
    print(f"oslens: warning: {trace}/tables/{t}.parquet is damaged ({why}){more}; importing the trace again "
          "from its raw chunks", file=sys.stderr)


def verify_tables(trace: Path) -> dict[str, str]:
    """`oslens import` on a trace already imported: every table's size and CRC-32 against the
    manifest ({table: what is wrong}; empty when all are whole)."""
    m = read_manifest(trace)
    return damaged_tables(trace, m, checksums=True) if m else {}


# what an import writes in the trace folder while it runs, named by its pid: the pass's tables
# (.app_events.tmp-PID.parquet, .regions..., .functions.tmp-PID-named.parquet: app_tables,
# symbols), the tables folder being written, the kernel tables' folder and files
# (kernel_tables.SPILL_PREFIX)
# (not .tables.old-PID: killed between its two renames, it holds the only tables)
STALE_PATTERNS = (".*.tmp-*.parquet", f".{TABLES_DIR}.tmp-*", f"{kernel_module.SPILL_PREFIX}*",
                  f".*-{kernel_module.SPILL_PREFIX}*.parquet")


def remove_stale_files(trace: Path) -> list[Path]:
    """Removes what an import killed before its end left in the trace folder (SIGKILL, a crash):
    the files and folders of STALE_PATTERNS whose pid is not a running process. Returns them."""
    gone = []
    for pattern in STALE_PATTERNS:
        for p in trace.glob(pattern):
            pid = _pid_in_name(p.name)
            if pid is None or pid == os.getpid() or Path(f"/proc/{pid}").exists():
                continue
            with contextlib.suppress(OSError):
                shutil.rmtree(p) if p.is_dir() else p.unlink()
                gone.append(p)
    return gone


def _pid_in_name(name: str) -> int | None:
    """The pid in an import's temporary name: the digits after 'tmp-' or the spill prefix."""
    import re

    m = re.search(r"(?:tmp-|kernel-tables-)(\d+)", name)
    return int(m.group(1)) if m else None


def import_trace(trace, force: bool = False, quiet: bool = False, damaged: dict | None = None) -> Path:
    """Imports TRACE's raw chunks into TRACE/tables/*.parquet (unless already current).
    Returns the tables folder. Damage is salvaged, recorded in `lost` and reported in one
    warning line on stderr; a directory that is not a trace raises OslensError (exit 2)."""
    trace = raw.require_trace_dir(trace)
    if not force and is_current(trace):
        return tables_dir(trace)
    _rebuildable(trace, damaged)
    remove_stale_files(trace)
    t0 = time.perf_counter()
    paths = raw.chunk_paths(trace)
    progress = _Progress(_committed_bytes(paths), enabled=not quiet and sys.stderr.isatty())
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
