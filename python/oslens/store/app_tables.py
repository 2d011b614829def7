"""Application tables from the recorder's per-thread chunks: app_events, regions, counters,
timers, sync, functions, pauses, adapt and the application side of threads.

Everything here is vectorised over all records of all threads at once: the records of every
thread are laid end to end (thread by thread, chunk by chunk in sequence order), so a thread's
records are one contiguous, time-ordered run and per-thread work is grouped numpy arithmetic.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from oslens import _native
from oslens.capture import raw
from oslens.store import held, pairing, schema

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


@dataclass
class Columns:
    """All application records, end to end; per-record arrays share one index."""

    ts: np.ndarray  # int64 CLOCK_MONOTONIC ns
    kind: np.ndarray  # uint8
    ident: np.ndarray  # uint32
    cpu: np.ndarray  # uint16
    value: np.ndarray  # int64: a, with raw clock ticks (timer stop, pause) converted to ns
    b: "RecordWord"  # uint64, gathered from the chunks on demand
    name: np.ndarray  # int32 index into the names dictionary, -1 where unnamed
    name_parts: list  # the same as pyarrow Int32 arrays with nulls, one per chunk
    g: np.ndarray  # int32 thread index
    payloads: dict  # global record index -> bytes (payloads longer than 8 bytes)
    counts: np.ndarray  # records per kind

    @property
    def a(self) -> np.ndarray:
        """The raw `a` word (equal to value except for converted ticks)."""
        return self.value.view(np.uint64)


def chunk_order_key(c: raw.ChunkData):
    parts = c.path.stem.split("-")
    seq = c.header["seq"] if c.header else (int(parts[-1]) if parts[-1].isdigit() else 0)
    return (c.pid, c.tid, seq, c.path.name)


def is_app_chunk(c: raw.ChunkData) -> bool:
    if c.header is not None:
        return c.header["source"] == raw.SOURCE_APP_THREAD and c.header["tid"] != 0
    return c.path.name.startswith("app-")


class RecordWord:
    """One 64-bit word of every record, read from the chunks only at the rows asked for (most
    kinds never need `b`, so it is not copied out for all records)."""

    def __init__(self, parts: list, starts: list, word: int):
        self.parts = parts  # (n, 4) uint64 views of each chunk's records
        self.starts = np.array(starts, dtype=np.int64)
        self.word = word

    def __getitem__(self, rows):
        scalar = np.isscalar(rows)
        rows = np.atleast_1d(np.asarray(rows, dtype=np.int64))
        out = fresh(len(rows), np.uint64)
        if len(rows) and (len(rows) == 1 or bool((rows[1:] >= rows[:-1]).all())):
            # sorted rows (what flatnonzero gives): one slice of them per chunk
            bounds = np.searchsorted(rows, self.starts).tolist() + [len(rows)]
            for c in range(len(self.parts)):
                lo, hi = bounds[c], bounds[c + 1]
                if hi > lo:
                    out[lo:hi] = self.parts[c][rows[lo:hi] - self.starts[c], self.word]
        elif len(rows):
            which = np.searchsorted(self.starts, rows, side="right") - 1
            for c in np.unique(which).tolist():
                sel = which == c
                out[sel] = self.parts[c][rows[sel] - self.starts[c], self.word]
        return out[0] if scalar else out


class _Scratch:
    """Reused temporaries (a fresh large array costs page faults on every use)."""

    def __init__(self):
        self.f = np.empty(0, np.float64)
        self.w = np.empty(0, np.uint64)

    def floats(self, n):
        if len(self.f) < n:
            self.f = np.empty(n, np.float64)
        return self.f[:n]

    def words(self, n):
        if len(self.w) < n:
            self.w = np.empty(n, np.uint64)
        return self.w[:n]


def to_ns_into(out: np.ndarray, raw_ts: np.ndarray, clock: raw.ClockConverter, scratch: _Scratch) -> None:
    """clock.to_ns(raw_ts) written into `out` (the same arithmetic, fewer temporaries)."""
    np.subtract(raw_ts.view(np.int64), np.int64(clock.r0), out=out)
    f = scratch.floats(len(out))
    np.multiply(out, clock.slope, out=f)
    f += clock.intercept
    np.rint(f, out=f)
    out[:] = f
    out += np.int64(clock.n0)


def native_clock(clock: raw.ClockConverter) -> tuple:
    """(r0, n0, slope, intercept) as to_ns_into uses them, for _native.split_records."""
    return int(np.int64(clock.r0)), int(np.int64(clock.n0)), float(clock.slope), float(clock.intercept)


POPULATE_BYTES = 1 << 20  # smaller arrays mostly reuse memory the process already touched


def _populate(*arrays: np.ndarray) -> None:
    """Backs fresh arrays' memory in one kernel call each rather than a page fault per 4 KiB
    on first touch (docs/trace-schema.md, the import's memory settings)."""
    for a in arrays:
        if a.nbytes >= POPULATE_BYTES:
            _native.populate(a.view(np.uint8))


def fresh(n: int, dtype) -> np.ndarray:
    """np.empty(n, dtype), its memory backed up front (see _populate)."""
    out = np.empty(n, dtype)
    _populate(out)
    return out


def take(values: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """np.take(values, rows) into a populated array, for `rows` in range (np.take: a third of
    the time of fancy indexing for these gathers from every record; mode "clip" writes into
    `out` directly, where "raise" would gather into a temporary and copy)."""
    return np.take(values, rows, out=fresh(len(rows), values.dtype), mode="clip")


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


def collect(chunks: list[raw.ChunkData], clock: raw.ClockConverter, app_clock_tsc: bool, lookup: "NameLookup"):
    """Lays the app chunks' records end to end, one column per field. Returns (threads, Columns)."""
    threads = app_threads(chunks)
    # chunks were sorted by (pid, tid, seq), so threads appear in that order and are contiguous
    total = sum(t.records for t in threads)
    ts = np.empty(total, np.int64)
    kind = np.empty(total, np.uint8)
    ident = np.empty(total, np.uint32)
    cpu = np.empty(total, np.uint16)
    value = np.empty(total, np.int64)
    b_parts, b_starts = [], []
    name = np.empty(total, np.int32)
    _populate(ts, kind, ident, cpu, value, name)
    name_parts: list = []  # not kept any more: `name` holds the indices (-1: unnamed)
    counts = np.zeros(256, np.int64)
    payloads = {}
    pos = 0
    for t in threads:
        for c in t.chunks:
            r = c.records
            n = len(r)
            if n == 0:
                continue
            s, e = pos, pos + n
            w = r.view(np.uint64).reshape(n, 4)
            tsc = raw.chunk_clock(c) == raw.CLOCK_TSC if c.header else app_clock_tsc
            # one pass in Rust: every field into its column, the TSC converted to ns, the names
            # looked up and the kinds counted
            nk, nv = lookup.native_table(t.pid)
            got = _native.split_records(*(x.view(np.uint8) for x in (r, ts[s:e], kind[s:e], ident[s:e], cpu[s:e],
                                                                       value[s:e], name[s:e], nk, nv)),
                                        native_clock(clock) if tsc else None)
            counts += np.array(got, dtype=np.int64)
            b_parts.append(w)
            b_starts.append(s)
            for i, p in c.payloads.items():
                payloads[s + int(i)] = p
            pos = e
    lengths = [t.records for t in threads]
    g = fresh(total, np.int32)
    for i, (lo, hi) in enumerate(zip(np.cumsum([0, *lengths[:-1]]).tolist(), np.cumsum(lengths).tolist())):
        g[lo:hi] = i
    b = RecordWord(b_parts, b_starts, 3)
    return threads, Columns(ts, kind, ident, cpu, value, b, name, name_parts, g, payloads, counts)


KIND_ID_MASK = np.uint64(0x00FF_0000_FFFF_FFFF)  # kind << 48 | id, out of a record's second word
KINDS_OF_CLASS: dict[int, list[int]] = {}
for _k in range(256):
    if CLASS_OF_KIND[_k] != NO_NAME:
        KINDS_OF_CLASS.setdefault(int(CLASS_OF_KIND[_k]), []).append(_k)


class NameLookup:
    """Resolves each record's (kind, id) to an index into one dictionary of names, per process,
    with one hash lookup per record (pyarrow's index_in)."""

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

    def lookup(self, pid: int, w1: np.ndarray) -> pa.Array:
        """Int32 dictionary indices (null where the program named nothing) for records' word 1."""
        if pid not in self.per_pid or len(w1) == 0:
            return pa.nulls(len(w1), pa.int32())
        keys, vals = self.per_pid[pid]
        pos = pc.index_in(pa.array(w1 & KIND_ID_MASK), value_set=keys)
        return pc.take(vals, pos)

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


def _payload_array(kind: np.ndarray, a: np.ndarray, b: np.ndarray, payloads: dict) -> pa.Array:
    """EVENT payloads: the first 8 bytes live in `b`, longer ones in `payloads` (keyed by record
    index); null for other kinds."""
    n = len(kind)
    is_ev = kind == raw.EVENT
    ev = np.flatnonzero(is_ev)
    if len(ev) == 0:
        return pa.nulls(n, pa.binary())
    lens = a[ev].astype(np.int64)
    is_long = lens > 8
    # the short payloads, in row order: the first `len` bytes of b
    short_lens = np.where(is_long, 0, lens)
    bv = np.ascontiguousarray(b[ev]).view(np.uint8).reshape(-1, 8)
    if (short_lens == 8).all():
        data = bv.reshape(-1)
    else:
        data = bv[np.arange(8)[None, :] < short_lens[:, None]]
    if is_long.any():
        ends = np.cumsum(short_lens)
        pieces, prev = [], 0
        for j in np.flatnonzero(is_long).tolist():
            cut = int(ends[j])
            pieces.append(data[prev:cut])
            p = payloads.get(int(ev[j])) or int(b[ev[j]]).to_bytes(8, "little")
            p = p[: int(lens[j])]
            lens[j] = len(p)
            pieces.append(np.frombuffer(p, dtype=np.uint8))
            prev = cut
        pieces.append(data[prev:])
        data = np.concatenate(pieces)
    offsets, validity = _event_offsets(kind, is_ev, ev, lens)
    typ = pa.binary() if offsets.dtype == np.int32 else pa.large_binary()
    return pa.Array.from_buffers(typ, n, [pa.py_buffer(validity), pa.py_buffer(offsets), pa.py_buffer(data)])


def _event_offsets(kind: np.ndarray, is_ev: np.ndarray, ev: np.ndarray, lens: np.ndarray):
    """Offsets (int32 unless the payloads reach 2 GiB) and validity bitmap of the payload
    column: one native pass, or numpy for int64 offsets (the same result)."""
    n = len(kind)
    small = int(lens.sum()) < 2**31
    if small:
        offsets, validity = np.empty(n + 1, np.int32), np.empty((n + 7) // 8, np.uint8)
        u8 = np.uint8
        _native.event_offsets(np.ascontiguousarray(kind).view(u8), np.ascontiguousarray(lens, dtype=np.int64).view(u8),
               offsets.view(u8), validity)
        return offsets, validity
    offsets = np.zeros(n + 1, dtype=np.int32 if small else np.int64)
    offsets[1:][ev] = lens
    np.cumsum(offsets[1:], out=offsets[1:])
    return offsets, np.packbits(is_ev, bitorder="little")


def _small_ints(values: np.ndarray) -> pa.Array:
    """An int64 column of small non-negative numbers (CPU numbers, uint16) as a dictionary of
    0..max: two bytes a row in memory instead of eight, and written as bit-packed indices."""
    top = int(values.max()) if len(values) else 0
    if top >= 2**15:
        return pa.array(values.astype(np.int64))
    return pa.DictionaryArray.from_arrays(pa.array(values.view(np.int16)), pa.array(np.arange(top + 1, dtype=np.int64)),
                                          safe=False)  # every value is at most top


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


def build(chunks: list[raw.ChunkData], meta: dict, clock: raw.ClockConverter, names: dict,
          object_names: dict | None = None) -> dict:
    """Returns {"threads": [AppThread], "extent": (start, end) per thread, table name: pa.Table}.
    `object_names`: {address: name} of sync objects the program did not name (symbols.name_objects)."""
    app_tsc = any(c.header and c.header["source"] == raw.SOURCE_APP_THREAD and c.header["clock"] == raw.CLOCK_TSC
                  for c in chunks)
    lookup = NameLookup(names)
    threads, col = collect(chunks, clock, app_tsc, lookup)
    n = len(col.ts)
    t_pid = np.array([t.pid for t in threads], dtype=np.int64)
    t_tid = np.array([t.tid for t in threads], dtype=np.int64)
    kind, counts, value, name_idx = col.kind, col.counts, col.value, col.name
    dictionary = lookup.dictionary()

    # thread extent: first and last record of each thread, and the chunks' calibration pairs
    extent_start = np.full(len(threads), np.iinfo(np.int64).max, dtype=np.int64)
    extent_end = np.full(len(threads), np.iinfo(np.int64).min, dtype=np.int64)
    if n:
        starts = np.flatnonzero(pairing.group_starts(col.g))
        extent_start[col.g[starts]] = np.minimum.reduceat(col.ts, starts)
        extent_end[col.g[starts]] = np.maximum.reduceat(col.ts, starts)
    last_record = extent_end.copy()  # before the chunks' calibration pairs widen it (sync.wait_censored)
    _chunk_extent(threads, extent_start, extent_end, meta)

    out: dict = {"threads": threads, "extent": (extent_start, extent_end)}

    # ------------------------------------------------------------ app_events: every record
    # (CLOCK_PAIR records included: value = the CLOCK_MONOTONIC ns read with the raw clock)
    events = pa.table({
        "ts": col.ts,
        # per thread: the thread index into its pid and tid (run-length encoded when written)
        "pid": _indexed(col.g, t_pid), "tid": _indexed(col.g, t_tid),
        "cpu": _small_ints(col.cpu),
        "instrument": _dict_array(name_idx, dictionary),
        "kind": pa.DictionaryArray.from_arrays(pa.array(kind.view(np.int8) if not counts[128:].any()
                                                        else kind.astype(np.int16)), KIND_LABELS, safe=False),
        "value": value,
        "payload": _payload_array(kind, col.a, col.b, col.payloads),
        "id": col.ident,
    })
    drop = counts[raw.NAME] + counts[raw.CONT] + counts[0]
    if drop:
        events = events.filter(pa.array((kind != raw.NAME) & (kind != raw.CONT) & (kind != 0)))
    out["app_events"] = events

    # ------------------------------------------------------------ regions and functions
    out["regions"], out["unmatched_region_ends"] = _nested(col, kind, t_pid, t_tid, name_idx, dictionary,
                                                           extent_end, raw.REGION_BEGIN, raw.REGION_END, "regions")
    out["functions"], out["unmatched_function_exits"] = _nested(col, kind, t_pid, t_tid, name_idx, dictionary,
                                                                extent_end, FUNC_ENTRY, FUNC_EXIT, "functions")

    # ------------------------------------------------------------ counters, timers, pauses, adapt
    def rows_of(k):
        if not counts[k]:
            return np.zeros(0, np.int64)
        return np.flatnonzero(kind == k)

    def who(rows):
        g = take(col.g, rows)
        return {"pid": _indexed(g, t_pid), "tid": _indexed(g, t_tid)}

    # np.take: a third of the time of fancy indexing for these gathers from every record
    ci = rows_of(raw.COUNTER)
    out["counters"] = pa.table({
        "ts": take(col.ts, ci), **who(ci), "name": _dict_array(take(name_idx, ci), dictionary),
        "value": take(value, ci), "reason": _small_dict(col.b[ci], COUNTER_REASONS),
    })
    ti = rows_of(raw.TIMER_STOP)
    stop, elapsed = take(col.ts, ti), take(value, ti)
    out["timers"] = pa.table({
        **who(ti), "name": _dict_array(take(name_idx, ti), dictionary),
        "start_ns": stop - elapsed, "stop_ns": stop, "elapsed_ns": elapsed,
    })
    pi = rows_of(raw.PAUSE)
    end, paused = take(col.ts, pi), take(value, pi)
    out["pauses"] = pa.table({
        **who(pi), "start_ns": end - paused, "end_ns": end, "duration_ns": paused,
        "reason": _small_dict(col.b[pi], PAUSE_REASONS),
    })
    ai = rows_of(raw.ADAPT)
    out["adapt"] = pa.table({
        "ts": take(col.ts, ai), **who(ai), "phase": _dict_array(take(name_idx, ai), dictionary),
        "error": take(col.a, ai).view(np.int64), "policy": col.b[ai].view(np.int64),
    })
    out["sync"] = _sync(col, kind, counts, t_pid, t_tid, name_idx, dictionary, last_record, object_names)
    return out


def _nested(col: Columns, kind, t_pid, t_tid, name_idx, dictionary, thread_end, begin_kind, end_kind, table):
    if not (col.counts[begin_kind] or col.counts[end_kind]):
        return schema.empty(table), 0
    key = col.ident if table == "regions" else col.a
    bi, ei, depth, unmatched_ends = pairing.pair_kinds(kind, col.g, key, begin_kind, end_kind,
                                                        int(col.counts[begin_kind]))
    complete = ei >= 0
    bg = take(col.g, bi)
    begin_ns = take(col.ts, bi)
    end_ns = take(col.ts, np.maximum(ei, 0))
    if not complete.all():
        end_ns = np.where(complete, end_ns, np.maximum(thread_end[bg], begin_ns))
    # regions: pid/tid as the thread index into its pid/tid (see app_events); functions keep
    # plain columns for the symbols extension
    if table == "regions":
        cols = {"pid": _indexed(bg, t_pid), "tid": _indexed(bg, t_tid)}
    else:
        cols = {"pid": t_pid[bg], "tid": t_tid[bg]}
    if table == "regions":
        cols.update({
            "name": _dict_array(take(name_idx, bi), dictionary), "begin_ns": begin_ns, "end_ns": end_ns,
            "duration_ns": end_ns - begin_ns, "depth": depth, "complete": complete,
            "id": take(col.ident, bi),
        })
    else:
        cols.update({
            "address": take(col.a, bi), "call_site": col.b[bi], "name": pa.nulls(len(bi), pa.string()),
            "begin_ns": begin_ns, "end_ns": end_ns, "duration_ns": end_ns - begin_ns, "depth": depth,
            "complete": complete,
        })
    return pa.table(cols), unmatched_ends


def _sync(col: Columns, kind, counts, t_pid, t_tid, name_idx, dictionary, last_record, object_names=None) -> pa.Table:
    """One row per lock acquisition (and per request that never acquired), per barrier wait and
    per condition-variable wait. A thread is blocked between its request and its acquisition,
    so the request is the thread's sync record right before the acquisition; acquisitions and
    releases, barrier entries and exits, wait entries and exits are paired per thread and
    object like regions (a stack per object where locks are not released in nesting order).
    Everything runs over all records (pairing skips other kinds): no copy of the sync records."""
    if not counts[LOCK_REQUEST:COND_WAIT_EXIT + 1].any():
        return schema.empty("sync")
    parts = []

    def paired(begin_kind, end_kind):
        """Rows of the `begin_kind` records, whether their end came, and the end's time."""
        begins, ends, _depth, _lost = pairing.pair_kinds(kind, col.g, col.a, begin_kind, end_kind, int(counts[begin_kind]))
        return begins, ends >= 0, take(col.ts, np.maximum(ends, 0))

    def part(i, rec, request, acquire, acquire_ok, release, release_ok):
        none, no = np.zeros(len(rec), np.int64), np.zeros(len(rec), bool)
        parts.append((i, take(col.g, rec), take(name_idx, rec), take(col.a, rec), request,
                      none if acquire is None else acquire, no if acquire_ok is None else acquire_ok,
                      none if release is None else release, no if release_ok is None else release_ok))

    if counts[LOCK_ACQUIRE] or counts[LOCK_REQUEST]:
        request, stuck = pairing.lock_requests(kind, col.g, col.a, col.ts, int(counts[LOCK_ACQUIRE]),
                                               int(counts[LOCK_REQUEST]))
        acq, released, release = paired(LOCK_ACQUIRE, LOCK_RELEASE)
        part(0, acq, request, take(col.ts, acq), np.ones(len(acq), bool), release, released)
        part(1, stuck, take(col.ts, stuck), None, None, None, None)
    for i, (enter, exit_) in ((2, (BARRIER_ENTER, BARRIER_EXIT)), (3, (COND_WAIT_ENTER, COND_WAIT_EXIT))):
        if counts[enter]:
            begins, done, left = paired(enter, exit_)
            part(i, begins, take(col.ts, begins), left, done, *((left, done) if i == 2 else (None, None)))
    return _sync_table(parts, t_pid, t_tid, dictionary, last_record, object_names)


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
    its file and row count. importer.write_tables moves the file into place; read() gives the
    rows as an Arrow table for a consumer that needs them in memory. The file is removed when
    the object goes away unless it was moved."""

    def __init__(self, path, num_rows: int, peak_rows: int | None = None):
        import weakref
        from pathlib import Path

        self.path = Path(path)
        self.num_rows = int(num_rows)
        self.peak_rows = num_rows if peak_rows is None else int(peak_rows)  # the most rows the pass held at once
        self._cleanup = weakref.finalize(self, _remove, str(self.path))

    def move_to(self, dest) -> None:
        import os

        os.replace(self.path, dest)
        self.path = dest
        self._cleanup.detach()

    def read(self) -> pa.Table:
        import pyarrow.parquet as pq

        return pq.read_table(self.path)


def _remove(path: str) -> None:
    import os

    try:
        os.unlink(path)
    except OSError:
        pass


def _buf(got: dict, key: str, dtype) -> np.ndarray:
    return np.frombuffer(got[key], dtype=dtype)


STREAMED = (("regions", raw.REGION_BEGIN), ("counters", raw.COUNTER), ("timers", raw.TIMER_STOP),
            ("pauses", raw.PAUSE), ("adapt", raw.ADAPT))  # derived tables the pass can write, and their kind


def _reasons(codes: list, labels: dict) -> tuple:
    """(codes, count, PLAIN labels) of a reason column's dictionary, as _small_dict makes it."""
    from oslens.store import native_parquet

    names = pa.array([labels.get(int(c), str(int(c))) for c in codes], pa.string())
    return [int(c) for c in codes], len(codes), native_parquet._plain_dictionary(names)[2]


def _sync_keys(scan):
    """A scan's sync keys (scan_records' fifth item), else None."""
    return scan[4] if len(scan) > 4 else None


def build_streamed(chunks: list[raw.ChunkData], meta: dict, clock: raw.ClockConverter, names: dict, events_path,
                   row_group: int, scans: dict | None = None, costs: list | None = None,
                   object_names: dict | None = None) -> dict:
    """build's result from one native pass over the records (oslens._native.app_pass):
    app_events is written to `events_path` row group by row group while the records are split
    (a WrittenTable stands in for it), the other tables are built from the rows the pass
    gathered. The same tables, rows and values as build; raises OSError when the file cannot
    be written. `scans`: {chunk path: _native.scan_records(its records)} where the readers took
    it; with every chunk's, regions, counters, timers, pauses, adapt and sync are written in the
    pass too (next to events_path), a page at a time, and stand in the result as WrittenTables.
    Sync's mutex acquisitions are written as threads end where its object dictionary is known
    before the pass: where every scan has its sync keys (the (name key, address) pairs of its
    sync records: the pass finds the objects not named from them, as it names the records),
    or while every sync object is named; else when the pass is done. The result's
    "passes" says how many times the pass ran.

    `costs`: per record kind, what one record cost (ns; oslens.store.compensation.cost_table):
    app_events, regions, counters, timers and sync then get compensation's columns in the pass
    (each time less the cost of its thread's earlier records), and the result's "compensation"
    holds what that extension needs for the rest: the compensated times of the tables built in
    memory (functions, and those not streamed), each thread's records per kind and pauses' sum."""
    app_tsc = any(c.header and c.header["source"] == raw.SOURCE_APP_THREAD and c.header["clock"] == raw.CLOCK_TSC
                  for c in chunks)
    lookup = NameLookup(names)
    threads = app_threads(chunks)
    t_pid = np.array([t.pid for t in threads], dtype=np.int64)
    t_tid = np.array([t.tid for t in threads], dtype=np.int64)
    dictionary = lookup.dictionary()
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
                        {int(k): bytes(v) for k, v in c.payloads.items()}, scan and (scan[0], scan[2], _sync_keys(scan))))
    # the derived tables written in the pass: those with rows, where every chunk was scanned
    # (their row counts and reasons are known before it)
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
    end_ns = meta.get("end_ns")
    low = int(np.iinfo(np.int64).min)
    thread_end = []
    for t in threads:
        closing = [int(c.header["calib"][1][1]) for c in t.chunks if c.header and c.header["calib"][1][1]]
        thread_end.append((max(closing) if closing else low, int(end_ns) if (not t.closed and end_ns) else low))
    from oslens.store import native_parquet

    def plain(arr: pa.Array) -> tuple:
        return len(arr), native_parquet._plain_dictionary(arr)[2]

    dicts = [(len(threads), t_pid.astype("<i8").tobytes()), (len(threads), t_tid.astype("<i8").tobytes()),
             plain(dictionary), plain(KIND_LABELS)]
    try:
        got = _native.app_pass(ins, len(threads), native_clock(clock), dicts, str(events_path), int(row_group),
                               streams, reasons, thread_end,
                               None if costs is None else [float(c) for c in costs], object_names or None)
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
    peaks = {"regions": got["regions.peak"], "sync": got["sync.peak"]}  # the most rows held at once
    out.update({table: WrittenTable(p, got["sync.rows"] if table == "sync" else rows[table], peaks.get(table))
                for table, p in streams.items()})
    out["passes"] = int(got["passes"])
    if costs is not None:
        # the compensated times of the tables built here, keyed by the time they compensate
        done = {table: dict(zip(times, (_buf(got, f"{table}.comp{i}", np.int64) for i in range(len(times)))))
                for table, times in (("regions", ("begin_ns", "end_ns")), ("functions", ("begin_ns", "end_ns")),
                                     ("counters", ("ts",)), ("timers", ("start_ns", "stop_ns")))
                if table not in streams}
        if "sync" not in streams:
            sync = [i for i in range(4) if len(_buf(got, f"sync{i}.g", np.int32))]
            done["sync"] = {c: np.concatenate([_buf(got, f"sync{i}.comp{j}", np.int64) for i in sync] or [np.zeros(0, np.int64)])
                            for j, c in enumerate(("request_ns", "acquire_ns", "release_ns"))}
        out["compensation"] = {
            "columns": done, "pid": t_pid, "tid": t_tid,
            "kinds": _buf(got, "comp.kinds", np.uint64).reshape(len(threads), 256),
            "pause_ns": _buf(got, "comp.pause_ns", np.int64), "labels": KIND_LABELS.to_pylist(),
        }

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
    return out
