"""Application tables from the recorder's per-thread chunks: app_events, regions, counters,
timers, sync, functions, pauses, adapt and the application side of threads, built in one native
pass over the records (build_streamed, oslens._native.app_pass) that writes the large tables to
Parquet while it splits the records. The numpy build it is tested against is
oslens_testing.store.app_tables_oracle (tests only).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa

from oslens import _native
from oslens.capture import raw
from oslens.store import held, schema

# Record kinds of the auto-instrumentation (crates/format/src/kinds.rs, through the extension).
LOCK_REQUEST, LOCK_ACQUIRE, LOCK_RELEASE = (raw.KINDS[k] for k in ("lock_request", "lock_acquire", "lock_release"))
BARRIER_ENTER, BARRIER_EXIT = raw.KINDS["barrier_enter"], raw.KINDS["barrier_exit"]
COND_WAIT_ENTER, COND_WAIT_EXIT, COND_SIGNAL = (raw.KINDS[k] for k in ("cond_wait_enter", "cond_wait_exit", "cond_signal"))
FUNC_ENTRY, FUNC_EXIT = raw.FUNC_ENTRY, raw.FUNC_EXIT
SYNC_KINDS = (LOCK_REQUEST, LOCK_ACQUIRE, LOCK_RELEASE, BARRIER_ENTER, BARRIER_EXIT, COND_WAIT_ENTER, COND_WAIT_EXIT,
              COND_SIGNAL)

NAME_ANY = 0  # lookup class for sync objects: an id named in any class
NO_NAME = 255

# Which name class names the `id` of each kind (crates/format NAME_CLASS_OF_KIND); functions are
# named by address (store.symbols) and commands in threads, not through these tables' names.
CLASS_OF_KIND = np.full(256, NO_NAME, dtype=np.uint64)
for _k, _c in _native.NAME_CLASS_OF_KIND.items():
    if _k not in (FUNC_ENTRY, FUNC_EXIT, raw.PROCESS_EXEC):
        CLASS_OF_KIND[_k] = _c
for _k in SYNC_KINDS:
    CLASS_OF_KIND[_k] = NAME_ANY

COUNTER_REASONS = dict(_native.COUNTER_REASONS)  # "lock": uncontended lock acquisitions (lock_counts)
PAUSE_REASONS = dict(_native.PAUSE_REASONS)
KIND_NAMES = [_native.kind_name(k) if k else "empty" for k in range(256)]


@dataclass
class AppThread:
    pid: int
    tid: int
    name: str = ""
    ppid: int = 0
    chunks: list = field(default_factory=list)
    records: int = 0
    dropped_events: int = 0
    fault_dropped: int = 0  # events not kept after a fault stopped the thread's chunk (store/faults.py)
    closed: bool = True


def chunk_order_key(c: raw.ChunkData):
    parts = c.path.stem.split("-")
    seq = c.header["seq"] if c.header else (int(parts[-1]) if parts[-1].isdigit() else 0)
    return (c.pid, c.tid, seq, c.path.name)


def is_app_chunk(c: raw.ChunkData) -> bool:
    if c.header is not None:
        return c.header["source"] == raw.SOURCE_APP_THREAD and c.header["tid"] != 0
    return c.path.name.startswith("app-")


def native_clock(clock: raw.ClockConverter) -> tuple:
    """(r0, n0, slope, intercept) as to_ns_into uses them, for _native.split_records."""
    return int(np.int64(clock.r0)), int(np.int64(clock.n0)), float(clock.slope), float(clock.intercept)


def app_threads(chunks: list[raw.ChunkData]) -> list[AppThread]:
    """The app chunks' threads, in (pid, tid) order, each with its chunks in sequence order."""
    app = sorted((c for c in chunks if is_app_chunk(c)), key=chunk_order_key)
    threads: list[AppThread] = []
    index: dict[tuple[int, int], int] = {}
    for c in app:
        key = (c.pid, c.tid)
        if key not in index:
            index[key] = len(threads)
            threads.append(AppThread(pid=c.pid, tid=c.tid))
        t = threads[index[key]]
        t.chunks.append(c)
        h = c.header
        if h:
            t.name = h.get("name") or t.name
            t.ppid = h.get("ppid") or t.ppid
            t.dropped_events += int(h.get("dropped_events") or 0)
            t.fault_dropped += int(h.get("fault_dropped") or 0)
            t.closed = t.closed and bool(h.get("closed", True))
        else:
            t.closed = False
        t.records += len(c.records)
    return threads


KINDS_OF_CLASS: dict[int, list[int]] = {}
for _k in range(256):
    if CLASS_OF_KIND[_k] != NO_NAME:
        KINDS_OF_CLASS.setdefault(int(CLASS_OF_KIND[_k]), []).append(_k)


class NameLookup:
    """Each record's (kind, id) -> an index into one dictionary of names, per process: the
    tables (keys kind << 48 | id, sorted) the native pass looks the records' names up in."""

    def __init__(self, names: dict[int, dict[tuple[int, int], str]]):
        self.values: list[str] = []
        where: dict[str, int] = {}
        self.per_pid: dict[int, tuple[pa.Array, pa.Array]] = {}
        for pid, table in names.items():
            entries: dict[int, int] = {}
            for (cls, ident), name in table.items():
                if name not in where:
                    where[name] = len(self.values)
                    self.values.append(name)
                for k in KINDS_OF_CLASS.get(int(cls), []):
                    entries[(k << 48) | int(ident)] = where[name]
                for k in KINDS_OF_CLASS[NAME_ANY]:
                    key = (k << 48) | int(ident)
                    if key not in entries:
                        entries[key] = where[name]
            keys = sorted(entries)
            self.per_pid[pid] = (pa.array(keys, pa.uint64()), pa.array([entries[k] for k in keys], pa.int32()))
        self.empty = (np.zeros(0, np.uint64), np.zeros(0, np.int32))

    def native_table(self, pid: int) -> tuple[np.ndarray, np.ndarray]:
        """(keys uint64, name indices int32) of a process, for _native.split_records."""
        if pid not in self.per_pid:
            return self.empty
        keys, vals = self.per_pid[pid]
        return (np.ascontiguousarray(keys.to_numpy(zero_copy_only=False), dtype=np.uint64),
                np.ascontiguousarray(vals.to_numpy(zero_copy_only=False), dtype=np.int32))

    def dictionary(self) -> pa.Array:
        return pa.array(self.values, type=pa.string())


def _dict_array(indices: np.ndarray, dictionary: pa.Array) -> pa.DictionaryArray:
    mask = indices < 0
    idx = pa.array(indices, type=pa.int32(), mask=mask if mask.any() else None)
    return pa.DictionaryArray.from_arrays(idx, dictionary, safe=False)  # indices from NameLookup: in range


def _small_dict(codes: np.ndarray, labels: dict[int, str], default=None) -> pa.DictionaryArray:
    """A dictionary column from small integer codes and their labels (unknown codes -> str(code))."""
    if len(codes) == 0:
        return pa.DictionaryArray.from_arrays(pa.array([], pa.int32()), pa.array([], pa.string()))
    uniq = np.unique(codes)
    names = [labels.get(int(u), default if default is not None else str(int(u))) for u in uniq]
    idx = np.searchsorted(uniq, codes).astype(np.int32)
    return pa.DictionaryArray.from_arrays(pa.array(idx), pa.array(names, pa.string()))


def _indexed(g: np.ndarray, values: np.ndarray, typ=pa.int64()) -> pa.DictionaryArray:
    """A per-record column that only depends on the thread: thread index -> value, encoded."""
    return pa.DictionaryArray.from_arrays(pa.array(g, pa.int32()), pa.array(values, typ), safe=False)  # g < len(values)


KIND_LABELS = pa.array([n if n not in ("unknown",) else f"kind{k}" for k, n in enumerate(KIND_NAMES)], pa.string())


def _chunk_extent(threads: list[AppThread], extent_start: np.ndarray, extent_end: np.ndarray, meta: dict) -> None:
    """Widens each thread's extent (first and last record) to its chunks' calibration pairs, and
    to the program's exit for a thread whose chunk was never closed."""
    end_ns = meta.get("end_ns")
    for i, t in enumerate(threads):
        # the calibration pairs in chunk headers: taken when the thread's chunk opened / closed
        for c in t.chunks:
            if c.header:
                (_, ns0), (_, ns1) = c.header["calib"]
                if ns0:
                    extent_start[i] = min(int(extent_start[i]), int(ns0))
                if ns1:
                    extent_end[i] = max(int(extent_end[i]), int(ns1))
        if not t.closed and end_ns and extent_end[i] != np.iinfo(np.int64).min:
            extent_end[i] = max(int(extent_end[i]), int(end_ns))


SYNC_LABELS = ("mutex", "mutex", "barrier", "cond")  # the kind of each part of the sync table


def _sync_table(parts: list, t_pid, t_tid, dictionary, last_record: np.ndarray, object_names: dict | None = None) -> pa.Table:
    """The sync table from its parts, in order: (part number (SYNC_LABELS), thread indices, name
    indices, addresses, request, acquire, acquire valid, release, release valid). One piece
    with one dictionary per column over all its rows (kind: the labels present; object: the
    names, then the unnamed objects' addresses sorted), as the importer's pass writes it
    (app_rows/sync_table.rs SyncWriter::finish), whatever parts hold rows. `last_record`: each thread's latest
    record time, for wait_censored (a wait with no end that is its thread's last record)."""
    parts = [p for p in parts if len(p[1])]
    if not parts:
        return schema.empty("sync")
    labels = list(dict.fromkeys(SYNC_LABELS[p[0]] for p in parts))
    kinds = np.concatenate([np.full(len(p[1]), labels.index(SYNC_LABELS[p[0]]), np.int32) for p in parts])

    def cat(j):
        return np.concatenate([p[j] for p in parts])

    g, addr, request = cat(1), cat(3), cat(4)
    return pa.table({
        "kind": pa.DictionaryArray.from_arrays(pa.array(kinds), pa.array(labels, pa.string())),
        "object": _object_names(cat(2), addr, dictionary, object_names), "pid": _indexed(g, t_pid), "tid": _indexed(g, t_tid),
        "request_ns": request, "acquire_ns": _masked(cat(5), cat(6)), "release_ns": _masked(cat(7), cat(8)),
        "address": addr, "wait_censored": ~cat(6).astype(bool) & (request >= last_record[g]),
    })


def _masked(values: np.ndarray, ok: np.ndarray | None) -> pa.Array:
    """int64 values, null where not ok (None: all valid)."""
    if ok is None or ok.all():
        return pa.array(values, pa.int64())
    return pa.array(values, pa.int64(), mask=~ok)


def _object_names(name_idx: np.ndarray, addr: np.ndarray, dictionary: pa.Array, object_names: dict | None = None) -> pa.Array:
    """The object's name where the program named it, else its symbol (object_names), else its
    address in hex."""
    unnamed = name_idx < 0
    uniq, inv = np.unique(addr[unnamed], return_inverse=True)
    known = object_names or {}
    hexes = pa.array([known.get(int(a)) or f"0x{int(a):x}" for a in uniq.tolist()], pa.string())
    idx = name_idx.copy()
    idx[unnamed] = len(dictionary) + inv.reshape(-1)
    return pa.DictionaryArray.from_arrays(pa.array(idx), pa.concat_arrays([dictionary, hexes]))


# ---------------------------------------------------------------- one native pass


class WrittenTable:
    """A table already written to Parquet while it was built (app_events, by build_streamed):
    its file, row count and row group size (`group_rows`: a rewrite, symbols.extend's, keeps
    it). importer.write_tables moves the file into place; read() gives the rows as an Arrow
    table for a consumer that needs them in memory. The file is removed when the object goes
    away unless it was moved."""

    def __init__(self, path, num_rows: int, peak_rows: int | None = None, group_rows: int | None = None,
                 patches: pa.Table | None = None, threads: tuple | None = None):
        import weakref
        from pathlib import Path

        self.path = Path(path)
        self.num_rows = int(num_rows)
        self.peak_rows = num_rows if peak_rows is None else int(peak_rows)  # the most rows the pass held at once
        self.group_rows = group_rows
        # rows written before their values were final (regions and functions behind one still
        # open): `row` and the final values of the columns it names, sorted by row; read(),
        # move_to() and rewrite() give the rows patched
        self.patches = patches if patches is not None and patches.num_rows else None
        # (pids, tids) of the import's threads where the file's pid, tid and name columns are
        # dictionary-encoded over them and the names (regions'): a rewrite keeps them so
        self.threads = threads
        self._cleanup = weakref.finalize(self, _remove, str(self.path))

    def move_to(self, dest) -> None:
        import os

        if self.patches is not None:  # written again with its rows patched
            rewrite(self, Path(dest), self.patch)
            _remove(str(self.path))
        else:
            os.replace(self.path, dest)
        self.path = dest
        self._cleanup.detach()

    def read(self) -> pa.Table:
        import pyarrow.parquet as pq

        return self.patch(pq.read_table(self.path), 0)

    def patch(self, t: pa.Table, first: int) -> pa.Table:
        """`t`, the table's rows from row `first` on, with their patches applied."""
        if self.patches is None:
            return t
        rows = self.patches.column("row").to_numpy()
        lo, hi = np.searchsorted(rows, [first, first + t.num_rows])
        if lo == hi:
            return t
        at = rows[lo:hi] - first
        for name in self.patches.column_names[1:]:
            if name in t.column_names:
                i = t.column_names.index(name)
                values = t.column(i).to_numpy().copy()
                values[at] = self.patches.column(name).to_numpy(zero_copy_only=False)[lo:hi]
                t = t.set_column(i, t.schema.field(i), pa.array(values, t.schema.field(i).type))
        return t


BATCH_ROWS = 1 << 16  # rows read at a time where a WrittenTable is written again


def rewrite(f: WrittenTable, out: Path, transform) -> int:
    """Writes `f`'s rows again into `out`, a batch at a time (never whole): transform(rows,
    index of the first) gives each batch's rows to write. The pages, row groups and encodings
    are those importer.write_table gives the whole table: the columns that hold a null stored
    OPTIONAL, the others REQUIRED, decided by the first rows written, and the file written
    again where a later batch holds a null in a column so far without. Returns the rows written."""
    nullable: set | None = None
    try:
        while True:
            rows, again = _rewrite_once(f, out, transform, nullable)
            if again is None:
                return rows
            nullable = again
    except BaseException:
        _remove(str(out))
        raise


def _rewrite_once(f: WrittenTable, out: Path, transform, nullable: set | None) -> tuple[int, set | None]:
    """One rewrite: (rows written, None), or (0, the nullable columns to write again with) where
    a batch holds a null in a column written REQUIRED."""
    import pyarrow.parquet as pq

    from oslens.store import native_parquet, parquet_options

    stream = _native.ParquetStream(str(out), f.group_rows or parquet_options.ROW_GROUP)
    pending, rows, first, delta, stats = None, 0, 0, parquet_options.DELTA_COLUMNS, set()
    read_dictionary = ["name"] if f.threads is not None else None
    for batch in pq.ParquetFile(f.path, read_dictionary=read_dictionary).iter_batches(batch_size=BATCH_ROWS):
        t = transform(_thread_dictionaries(pa.Table.from_batches([batch]), f.threads), first)
        first += batch.num_rows
        if pending is None:  # the first batch: the statistics' columns, and a template for the footer
            stats = {c.name for c in t.schema if pa.types.is_integer(parquet_options.value_type(c.type))
                     and parquet_options.prunes(c.name)}
            pending = t.slice(0, 0)
        if not t.num_rows:
            continue
        nulls = {c for c in t.column_names if t.column(c).null_count}
        if nullable is None:
            nullable = nulls
        elif not nulls <= nullable:
            return 0, nullable | nulls
        pending = pa.concat_tables([pending, t])
        n = stream.write(pending.num_rows, native_parquet.stream_columns(pending, delta, stats, nullable))
        rows += n
        pending = pending.slice(n)
    nullable = nullable or set()
    rows += stream.write(pending.num_rows, native_parquet.stream_columns(pending, delta, stats, nullable), last=True)
    stream.finish(native_parquet.stream_columns(pending.slice(0, 0), delta, stats, nullable))
    return rows, None


def _thread_dictionaries(t: pa.Table, threads: tuple | None) -> pa.Table:
    """`t` with its pid and tid columns dictionary-encoded over the import's threads, as the pass
    wrote them (their index: the thread's, found from its (pid, tid): app_threads orders and
    keys threads by it); `t` as it is where `threads` is None."""
    if threads is None or "pid" not in t.column_names:
        return t
    t_pid, t_tid = (np.asarray(a, dtype=np.int64) for a in threads)
    keys = (t_pid << 32) | t_tid
    pid, tid = (t.column(c).to_numpy() for c in ("pid", "tid"))
    g = pa.array(np.searchsorted(keys, (pid << 32) | tid).astype(np.int32))
    for name, values in (("pid", t_pid), ("tid", t_tid)):
        i = t.column_names.index(name)
        t = t.set_column(i, t.schema.field(i).with_type(pa.dictionary(pa.int32(), pa.int64())),
                         pa.DictionaryArray.from_arrays(g, pa.array(values)))
    return t


def _remove(path: str) -> None:
    import os

    try:
        os.unlink(path)
    except OSError:
        pass


def _buf(got: dict, key: str, dtype) -> np.ndarray:
    return np.frombuffer(got[key], dtype=dtype)


STREAMED = (("regions", raw.REGION_BEGIN), ("functions", FUNC_ENTRY), ("counters", raw.COUNTER), ("timers", raw.TIMER_STOP),
            ("pauses", raw.PAUSE), ("adapt", raw.ADAPT))  # derived tables the pass can write, and the kind of their rows


def _reasons(codes: list, labels: dict) -> tuple:
    """(codes, count, PLAIN labels) of a reason column's dictionary, as _small_dict makes it."""
    from oslens.store import native_parquet

    names = pa.array([labels.get(int(c), str(int(c))) for c in codes], pa.string())
    return [int(c) for c in codes], len(codes), native_parquet.plain_dictionary(names)[2]


def sync_keys(scan):
    """A scan's sync keys (scan_records' fifth item), else None."""
    return scan[4] if len(scan) > 4 else None


def declared_columns(tables: list[str], compensated: bool) -> dict[str, list[tuple[str, str]]]:
    """{table: [(column, Arrow type)]} as store/schema.py declares them, for the native pass to
    name its columns by (with compensation's where it computes them)."""
    return {t: [(c, str(typ)) for c, typ in schema.columns(t, extensions=compensated).items()] for t in tables}


def build_streamed(chunks: list[raw.ChunkData], meta: dict, clock: raw.ClockConverter, names: dict, events_path,
                   row_group: int, scans: dict | None = None, costs: list | None = None,
                   object_names: dict | None = None) -> dict:
    """build's result from one native pass over the records (oslens._native.app_pass):
    app_events is written to `events_path` row group by row group while the records are split
    (a WrittenTable stands in for it), the other tables are built from the rows the pass
    gathered. The same tables, rows and values as build; raises OSError when the file cannot
    be written. `scans`: {chunk path: _native.scan_records(its records)} where the readers took
    it; with every chunk's, regions, functions, counters, timers, pauses, adapt and sync are written in the
    pass too (next to events_path), a page at a time, and stand in the result as WrittenTables.
    Sync's mutex acquisitions are written as threads end where its object dictionary is known
    before the pass: where every scan has its sync keys (the (name key, address) pairs of its
    sync records: the pass finds the objects not named from them, as it names the records),
    or while every sync object is named; else when the pass is done. The result's
    "passes" says how many times the pass ran.

    `costs`: per record kind, what one record cost (ns; oslens.store.compensation.cost_table):
    app_events, regions, functions, counters, timers and sync then get compensation's columns in the pass
    (each time less the cost of its thread's earlier records), and the result's "compensation"
    holds what that extension needs for the rest: the compensated times of the tables built in
    memory (those not streamed), each thread's records per kind and pauses' sum."""
    app_tsc = any(c.header and c.header["source"] == raw.SOURCE_APP_THREAD and c.header["clock"] == raw.CLOCK_TSC
                  for c in chunks)
    lookup = NameLookup(names)
    threads = app_threads(chunks)
    t_pid = np.array([t.pid for t in threads], dtype=np.int64)
    t_tid = np.array([t.tid for t in threads], dtype=np.int64)
    dictionary = lookup.dictionary()
    ins = _pass_inputs(threads, lookup, scans, app_tsc)
    streams, reasons, rows = _streamed_tables(threads, scans, events_path)
    thread_end = _thread_ends(threads, meta)
    from oslens.store import native_parquet

    def plain(arr: pa.Array) -> tuple:
        return len(arr), native_parquet.plain_dictionary(arr)[2]

    dicts = [(len(threads), t_pid.astype("<i8").tobytes()), (len(threads), t_tid.astype("<i8").tobytes()),
             plain(dictionary), plain(KIND_LABELS)]
    try:
        got = _native.app_pass(ins, len(threads), native_clock(clock), dicts, str(events_path), int(row_group),
                               streams, reasons, thread_end,
                               None if costs is None else [float(c) for c in costs], object_names or None,
                               declared_columns(["app_events", *streams], costs is not None))
    except BaseException:
        for p in streams.values():
            _remove(p)
        raise
    counts = np.array(got["counts"], dtype=np.int64)
    extent_start = _buf(got, "extent.min", np.int64).copy()
    extent_end = _buf(got, "extent.max", np.int64).copy()
    last_record = extent_end.copy()  # before the chunks' calibration pairs widen it (sync.wait_censored)
    _chunk_extent(threads, extent_start, extent_end, meta)
    out: dict = {"threads": threads, "extent": (extent_start, extent_end),
                 "app_events": WrittenTable(events_path, got["rows"])}
    peaks = {t: got[f"{t}.peak"] for t in ("regions", "functions", "sync", "timers")}  # the most rows held at once
    patches = {t: _late_rows(got, t, costs is not None) for t in ("regions", "functions")}
    patches["timers"] = _timer_patches(got)
    # regions' and timers' pid, tid and name are dictionary-encoded over the threads and names
    out.update({table: WrittenTable(p, got["sync.rows"] if table == "sync" else rows[table], peaks.get(table), row_group,
                                    patches.get(table), (t_pid, t_tid) if table in ("regions", "timers") else None)
                for table, p in streams.items()})
    out["passes"] = int(got["passes"])
    if costs is not None:
        out["compensation"] = _compensation_figures(got, streams, t_pid, t_tid)
    _derived_tables(out, got, streams, counts, t_pid, t_tid, dictionary, extent_end, last_record, object_names)
    return out


def _timer_patches(got: dict) -> pa.Table:
    """The patches of the timers rows the pass wrote before their compensated start was known
    (a start after every earlier record of the thread, reached by no record for two pages:
    app_rows/derived.rs Timers::writable): each row and its compensated start and elapsed."""
    return pa.table({"row": _buf(got, "timers.patch_row", np.int64),
                     "start_comp_ns": _buf(got, "timers.patch_comp_start", np.int64),
                     "elapsed_comp_ns": _buf(got, "timers.patch_comp_elapsed", np.int64)})


def _late_rows(got: dict, table: str, comp: bool) -> pa.Table:
    """The patches of the regions or functions rows the pass wrote before their region or call
    ended (app_rows/nesting.rs Late): each row and its final end, duration, completeness (and
    compensated end and duration)."""
    cols = {"row": _buf(got, f"{table}.late_row", np.int64), "end_ns": _buf(got, f"{table}.late_end", np.int64),
            "duration_ns": _buf(got, f"{table}.late_duration", np.int64),
            "complete": _buf(got, f"{table}.late_complete", np.uint8).view(bool)}
    if comp:
        cols.update({"end_comp_ns": _buf(got, f"{table}.late_comp_end", np.int64),
                     "duration_comp_ns": _buf(got, f"{table}.late_comp_duration", np.int64)})
    return pa.table(cols)


def _pass_inputs(threads: list[AppThread], lookup: NameLookup, scans: dict | None, app_tsc: bool) -> list:
    """The pass's input per chunk with records: (its records, thread index, TSC clock or not, the
    process's name table, payloads, what the reader's scan found)."""
    tables: dict[int, tuple] = {}
    ins = []
    for i, t in enumerate(threads):
        if t.pid not in tables:
            tables[t.pid] = tuple(x.view(np.uint8) for x in lookup.native_table(t.pid))
        for c in t.chunks:
            if len(c.records) == 0:
                continue
            tsc = raw.chunk_clock(c) == raw.CLOCK_TSC if c.header else app_tsc
            scan = (scans or {}).get(c.path)
            ins.append((held.pass_input(c.records), i, bool(tsc), *tables[t.pid],
                        {int(k): bytes(v) for k, v in c.payloads.items()}, scan and (scan[0], scan[2], sync_keys(scan))))
    return ins


def _streamed_tables(threads: list[AppThread], scans: dict | None, events_path) -> tuple[dict, tuple | None, dict]:
    """(table -> its file, beside events_path; the counters' and pauses' reasons; table -> rows)
    of the derived tables written in the pass: those with rows, where every chunk was scanned
    (their row counts and reasons are known before it)."""
    streams, reasons, rows = {}, None, {}
    app = [c for t in threads for c in t.chunks if len(c.records)]
    if scans is not None and all(c.path in scans for c in app):
        total = np.zeros(256, np.int64)
        counter_codes, pause_codes = set(), set()
        for c in app:
            sc = scans[c.path]
            total += np.array(sc[0], dtype=np.int64)
            for codes, seen in zip(sc[3], (counter_codes, pause_codes)):
                if codes is None or seen is None:
                    continue
                seen.update(codes)
            if sc[3][0] is None:
                counter_codes = None
            if sc[3][1] is None:
                pause_codes = None

        def beside(table):  # the table's file next to app_events'
            return str(Path(events_path).with_name(Path(events_path).name.replace("app_events", table)))

        for table, kind in STREAMED:
            if total[kind] and not (table == "counters" and counter_codes is None) \
                    and not (table == "pauses" and pause_codes is None):
                streams[table] = beside(table)
                rows[table] = int(total[kind])
        if total[[LOCK_REQUEST, LOCK_ACQUIRE, BARRIER_ENTER, COND_WAIT_ENTER]].any():  # sync has rows
            streams["sync"] = beside("sync")
        reasons = (_reasons(sorted(counter_codes or ()), COUNTER_REASONS), _reasons(sorted(pause_codes or ()), PAUSE_REASONS))
    return streams, reasons, rows


def _thread_ends(threads: list[AppThread], meta: dict) -> list[tuple[int, int]]:
    """Per thread: (its chunks' latest closing time, the program's exit where the thread's chunk
    was never closed), the lowest int64 where unknown."""
    end_ns = meta.get("end_ns")
    low = int(np.iinfo(np.int64).min)
    thread_end = []
    for t in threads:
        closing = [int(c.header["calib"][1][1]) for c in t.chunks if c.header and c.header["calib"][1][1]]
        thread_end.append((max(closing) if closing else low, int(end_ns) if (not t.closed and end_ns) else low))
    return thread_end


def _compensation_figures(got: dict, streams: dict, t_pid: np.ndarray, t_tid: np.ndarray) -> dict:
    """What the compensation extension needs from the pass: the compensated times of the tables
    built here, keyed by the time they compensate, each thread's records per kind and pauses' sum."""
    done = {table: dict(zip(times, (_buf(got, f"{table}.comp{i}", np.int64) for i in range(len(times)))))
            for table, times in (("regions", ("begin_ns", "end_ns")), ("functions", ("begin_ns", "end_ns")),
                                 ("counters", ("ts",)), ("timers", ("start_ns", "stop_ns")))
            if table not in streams}
    if "sync" not in streams:
        sync = [i for i in range(4) if len(_buf(got, f"sync{i}.g", np.int32))]
        done["sync"] = {c: np.concatenate([_buf(got, f"sync{i}.comp{j}", np.int64) for i in sync] or [np.zeros(0, np.int64)])
                        for j, c in enumerate(("request_ns", "acquire_ns", "release_ns"))}
    return {
        "columns": done, "pid": t_pid, "tid": t_tid,
        "kinds": _buf(got, "comp.kinds", np.uint64).reshape(len(t_pid), 256),
        "pause_ns": _buf(got, "comp.pause_ns", np.int64), "labels": KIND_LABELS.to_pylist(),
    }


def _derived_tables(out: dict, got: dict, streams: dict, counts: np.ndarray, t_pid, t_tid, dictionary: pa.Array,
                    extent_end: np.ndarray, last_record: np.ndarray, object_names: dict | None) -> None:
    """The derived tables not written in the pass, into `out`, from the rows it gathered."""

    def who(g):
        return {"pid": _indexed(g, t_pid), "tid": _indexed(g, t_tid)}

    def col(table, name, dtype=np.int64):
        return _buf(got, f"{table}.{name}", dtype)

    for table, begin_kind, end_kind in (("regions", raw.REGION_BEGIN, raw.REGION_END),
                                        ("functions", FUNC_ENTRY, FUNC_EXIT)):
        out[f"unmatched_{'region_ends' if table == 'regions' else 'function_exits'}"] = int(got[f"{table}.unmatched"])
        if table in streams:
            continue
        if not (counts[begin_kind] or counts[end_kind]):
            out[table] = schema.empty(table)
            continue
        g = col(table, "g", np.int32)
        begin_ns, end_ns, duration = col(table, "begin_ns"), col(table, "end_ns"), col(table, "duration_ns")
        complete = col(table, "complete", np.uint8).view(bool)
        if not complete.all():  # an unclosed one ends when its thread ended
            end_ns = np.where(complete, end_ns, np.maximum(extent_end[g], begin_ns))
            duration = end_ns - begin_ns
        if table == "regions":
            cols = {**who(g), "name": _dict_array(col(table, "name", np.int32), dictionary), "begin_ns": begin_ns,
                    "end_ns": end_ns, "duration_ns": duration, "depth": col(table, "depth"), "complete": complete,
                    "id": col(table, "key", np.uint64).astype(np.uint32)}
        else:
            cols = {"pid": t_pid[g], "tid": t_tid[g], "address": col(table, "key", np.uint64),
                    "call_site": col(table, "b", np.uint64), "name": pa.nulls(len(g), pa.string()),
                    "begin_ns": begin_ns, "end_ns": end_ns, "duration_ns": duration, "depth": col(table, "depth"),
                    "complete": complete}
        out[table] = pa.table(cols)

    g = col("counters", "g", np.int32)
    out["counters"] = out.get("counters") or pa.table({
        "ts": col("counters", "ts"), **who(g), "name": _dict_array(col("counters", "name", np.int32), dictionary),
        "value": col("counters", "value"), "reason": _small_dict(col("counters", "reason", np.uint64), COUNTER_REASONS),
    })
    g = col("timers", "g", np.int32)
    out["timers"] = out.get("timers") or pa.table({
        **who(g), "name": _dict_array(col("timers", "name", np.int32), dictionary),
        "start_ns": col("timers", "start_ns"), "stop_ns": col("timers", "stop_ns"),
        "elapsed_ns": col("timers", "elapsed_ns"),
    })
    g = col("pauses", "g", np.int32)
    out["pauses"] = out.get("pauses") or pa.table({
        **who(g), "start_ns": col("pauses", "start_ns"), "end_ns": col("pauses", "end_ns"),
        "duration_ns": col("pauses", "duration_ns"), "reason": _small_dict(col("pauses", "reason", np.uint64), PAUSE_REASONS),
    })
    g = col("adapt", "g", np.int32)
    out["adapt"] = out.get("adapt") or pa.table({
        "ts": col("adapt", "ts"), **who(g), "phase": _dict_array(col("adapt", "name", np.int32), dictionary),
        "error": col("adapt", "error"), "policy": col("adapt", "policy"),
    })

    if "sync" not in out:
        out["sync"] = _sync_table([(i, col(f"sync{i}", "g", np.int32), col(f"sync{i}", "name", np.int32),
                                    col(f"sync{i}", "address", np.uint64), col(f"sync{i}", "request_ns"),
                                    col(f"sync{i}", "acquire_ns"), col(f"sync{i}", "acquire_ok", np.uint8).view(bool),
                                    col(f"sync{i}", "release_ns"), col(f"sync{i}", "release_ok", np.uint8).view(bool))
                                   for i in range(4)], t_pid, t_tid, dictionary, last_record, object_names)
