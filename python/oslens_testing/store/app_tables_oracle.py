"""The numpy build of the application tables that the importer's native pass is tested against
(test oracle only: the store builds them in one native pass, oslens.store.app_tables.build_streamed).

build gives what build_streamed gives, table for table and row for row, from every record in
memory: the records of every thread are laid end to end (thread by thread, chunk by chunk in
sequence order), so a thread's records are one contiguous, time-ordered run and per-thread work
is grouped numpy arithmetic. build_app and build_tables plug it into the importer in place of the
pass (python/oslens/store/test_app_tables.py compares the Parquet files byte for byte).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from oslens import _native
from oslens_testing import _oracle
from oslens.capture import raw
from oslens.errors import OslensError
from oslens.store import held, schema
from oslens_testing.store import pairing
from oslens.store.app_tables import (BARRIER_ENTER, BARRIER_EXIT, COND_WAIT_ENTER, COND_WAIT_EXIT, COUNTER_REASONS,
                                     FUNC_ENTRY, FUNC_EXIT, KIND_LABELS, LOCK_ACQUIRE, LOCK_RELEASE, LOCK_REQUEST,
                                     PAUSE_REASONS, NameLookup, _chunk_extent, _dict_array, _indexed, _small_dict,
                                     _sync_table, app_threads, native_clock)


def build_tables(trace, losses, extensions: bool = True) -> dict:
    """importer.build_tables with the application tables built here, in memory."""
    from oslens.store import importer

    return importer.build_tables(trace, losses, extensions=extensions, build_app=build_app)


def _read_all(chunks: list) -> None:
    """Every chunk's records in memory again (this build holds them all; the pass lets them go)."""
    for c in chunks:
        if isinstance(c.records, held.LetGo):
            c.records = c.records.read()


def build_app(trace, chunks: list, meta: dict, clock, names: dict, scans: dict, extensions: bool = False) -> dict:
    """table_build.build_app's result from build, every table in memory; with `extensions`
    compensation_oracle computes what the pass gives the compensation extension."""
    from oslens.store import import_extensions, importer
    from oslens_testing.store import compensation_oracle

    objects = importer.sync_object_names(trace, chunks, scans)
    try:
        _read_all(chunks)
    except OSError as err:
        raise OslensError(f"{trace}: a raw chunk could not be read again while importing ({err})", 1) from err
    out = build(chunks, meta, clock, names, objects)
    comp = import_extensions.compensation_costs(meta) if extensions else None
    if comp:
        out["compensation"] = {**compensation_oracle.pass_result(out, comp[0], KIND_LABELS.to_pylist()),
                               "cal": comp[0], "why": comp[1]}
    return out


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
            got = _oracle.split_records(*(x.view(np.uint8) for x in (r, ts[s:e], kind[s:e], ident[s:e], cpu[s:e],
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
        _oracle.event_offsets(np.ascontiguousarray(kind).view(u8), np.ascontiguousarray(lens, dtype=np.int64).view(u8),
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
