"""The import's third step: the tables built from the chunks read and the clock fitted. The
application tables come from one native pass over the records (app_tables.build_streamed), which
writes the large ones to Parquet as it goes; the kernel tables from the collector's chunks
(kernel_tables, one native pass); `threads` merges both sides; what the trace lost goes to `losses`.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path


from oslens.capture import raw
from oslens.errors import OslensError
from oslens.store import app_tables, attach_tables, faults, kernel_tables as kernel_module, salvage, schema, threads
from oslens.store.import_extensions import compensation_costs
from oslens.store.parquet_options import ROW_GROUP
from oslens.version import __version__


def kernel_tables(trace: Path, kernel_chunks: list, meta: dict, losses: salvage.Losses, step=None, scans=None) -> dict:
    """The kernel tables: the big ones written by the native pass beside the tables (or in $TMPDIR
    when the trace folder cannot be written), as app_tables.WrittenTable; tasks and kernel_lost in
    memory. step(fraction done) follows the pass; scans: the read's kernel scans by path."""
    out: dict = {}
    if kernel_chunks:
        for folder in (trace, Path(tempfile.gettempdir())):
            try:
                out = kernel_module.write_kernel_tables(kernel_chunks, meta, folder, step, scans) or {}
                break
            except OSError as err:
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
    # what `record -p` found running at the attach (empty tables beside any other kernel trace)
    attached = attach_tables.build(trace, meta)
    if kernel_chunks or attached:
        tables.update(attached or attach_tables.empty())
    return tables


def is_kernel_chunk(c: raw.ChunkData) -> bool:
    if c.header is not None:
        return c.header["source"] == raw.SOURCE_KERNEL_CPU
    return c.path.name.startswith("kernel-")


def sync_object_names(trace: Path, chunks: list, scans: dict) -> dict[int, str]:
    """{address: symbol} of the sync objects that are static variables (symbols.name_objects),
    from the addresses the chunks' scans found in their sync records; {} where the processes
    wrote no memory map."""
    if next((trace / "raw").glob("maps-*.txt"), None) is None:
        return {}
    by_pid: dict[int, set] = {}
    for c in chunks:
        keys = app_tables.sync_keys(scans[c.path]) if scans.get(c.path) else None
        if keys:
            by_pid.setdefault(c.pid, set()).update(keys[1::2])
    if not by_pid:
        return {}
    from oslens.store import symbols

    return symbols.name_objects(trace, by_pid)


def build_app(trace: Path, chunks: list, meta: dict, clock, names: dict, scans: dict,
              extensions: bool = False) -> dict:
    """The application tables from one native pass (app_tables.build_streamed), with
    compensation's columns where `extensions` and the figures that extension completes them from."""
    objects = sync_object_names(trace, chunks, scans)
    comp = compensation_costs(meta) if extensions else None
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


# the tables the native pass builds (store/schema.py's application tables but meta, threads and lost)
APP_TABLES = tuple(t for t in schema.APP_SCHEMAS if t not in ("meta", "threads", "lost"))


def build(trace: Path, read, meta: dict, clock, losses: salvage.Losses, progress, extensions: bool,
          build_app=build_app) -> tuple[dict, dict]:
    """(tables, the extensions' context) of the chunks read (chunk_reader.Read): `build_app`
    builds the application tables (the tests give the numpy oracle's)."""
    chunks = read.chunks
    names = raw.name_table(chunks)
    progress.step("building application tables", 45)
    app = build_app(trace, chunks, meta, clock, names, read.scans, extensions)
    progress.step("building kernel tables", 65)
    kernel = kernel_tables(trace, [c for c in chunks if is_kernel_chunk(c)], meta, losses,
                           lambda done: progress.step("building kernel tables", 65 + 5 * done), read.kernel_scans)
    add_losses(losses, app, kernel, chunks, meta)
    tables: dict = {"threads": threads.build(app["threads"], app["extent"], names, meta, kernel.get("tasks"))}
    for name in APP_TABLES:
        written = isinstance(app[name], app_tables.WrittenTable)
        tables[name] = app[name] if written else schema.conform(name, app[name])
    tables.update(kernel)
    context = {"trace": trace, "meta": meta, "chunks": chunks, "clock": clock, "names": names, "losses": losses}
    if "compensation" in app:
        context["compensation"] = app["compensation"]
    return tables, context


def add_losses(losses: salvage.Losses, app: dict, kernel: dict, chunks: list, meta: dict) -> None:
    """What the recorder dropped, the faults that stopped it, the collector's losses and the
    region ends and function exits the pass could not pair, into `losses`."""
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


def store_keys(meta: dict, chunks: list, clock) -> dict:
    """The store's own keys of the `meta` table (docs/trace-schema.md, meta)."""
    return {
        "trace.incomplete": salvage.incomplete_reason(meta),
        "schema_version": schema.SCHEMA_VERSION,
        "store.oslens_version": __version__,
        "store.imported_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "store.records": sum(len(c.records) for c in chunks),
        "store.chunks": len(chunks),
        "clock.fit_pairs": clock.pair_count,
        "clock.ns_per_tick": repr(float(clock.slope)),
    }
