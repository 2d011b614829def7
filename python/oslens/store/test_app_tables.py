"""Unit tests of the application tables on small hand-written chunks (CLOCK_MONOTONIC records,
so every expected time is the raw value)."""

import json

import numpy as np
import pytest

from oslens import _native
from oslens_testing import _oracle
from oslens.capture import raw
from oslens.store import app_tables, open_trace
from oslens_testing.store import app_tables_oracle

REQ, ACQ, REL, BENTER, BEXIT, CENTER, CEXIT, SIGNAL = 32, 33, 34, 35, 36, 37, 38, 39
FENTRY, FEXIT = 40, 41


def make(tmp_path, threads: dict, names=()):
    """threads: {tid: [(ts, kind, id, a, b), ...]} of process 50."""
    (tmp_path / "raw").mkdir()
    for tid, recs in threads.items():
        _native.write_chunk(str(tmp_path / "raw" / f"app-50-{tid}-0.osl"),
                            {"source": 1, "clock": raw.CLOCK_MONOTONIC_NS, "pid": 50, "tid": tid, "name": f"t{tid}"},
                            [(ts, i, 0, kd, a, b) for ts, kd, i, a, b in recs])
    _native.write_chunk(str(tmp_path / "raw" / "names-50-0.osl"), {"pid": 50, "tid": 0}, [], names=list(names))
    (tmp_path / "meta.json").write_text(json.dumps({"pid": 50}))
    return open_trace(tmp_path, quiet=True)


def rows(con, sql):
    return con.execute(sql).fetchall()


def test_locks_barriers_and_condition_waits(tmp_path):
    L1, L2, B, C = 0x1000, 0x2000, 0x3000, 0x4000
    con = make(tmp_path, {
        51: [(100, REQ, 9, L1, 0), (110, ACQ, 9, L1, 0),          # L1 named "big-lock"
             (120, REQ, 0, L2, 0), (125, ACQ, 0, L2, 0),          # nested L2
             (130, REL, 0, L2, 0), (140, REL, 9, L1, 0),
             (200, BENTER, 0, B, 0), (260, BEXIT, 0, B, 0),
             (300, CENTER, 0, C, 0), (390, CEXIT, 0, C, 0), (395, SIGNAL, 0, C, 0),
             (400, ACQ, 0, L1, 0), (410, REL, 0, L1, 0),          # trylock: no request
             (500, REQ, 0, L2, 0)],                               # never acquired
        52: [(205, BENTER, 0, B, 0)],                             # never left the barrier
    }, names=[(9, 8, 0, "big-lock")])
    got = rows(con, "SELECT kind, object, tid, request_ns, acquire_ns, release_ns FROM sync ORDER BY tid, request_ns")
    assert got == [
        ("mutex", "big-lock", 51, 100, 110, 140),
        ("mutex", "0x2000", 51, 120, 125, 130),
        ("barrier", "0x3000", 51, 200, 260, 260),
        ("cond", "0x4000", 51, 300, 390, None),
        ("mutex", "0x1000", 51, 400, 400, 410),
        ("mutex", "0x2000", 51, 500, None, None),
        ("barrier", "0x3000", 52, 205, None, None),
    ]


def test_locks_released_out_of_order(tmp_path):
    L1, L2 = 0x10, 0x20
    con = make(tmp_path, {51: [(1, ACQ, 0, L1, 0), (2, ACQ, 0, L2, 0), (3, REL, 0, L1, 0), (4, REL, 0, L2, 0)]})
    assert rows(con, "SELECT address, acquire_ns, release_ns FROM sync ORDER BY acquire_ns") == [(0x10, 1, 3), (0x20, 2, 4)]


def test_functions_pair_by_address(tmp_path):
    F, G = 0x401000, 0x402000
    con = make(tmp_path, {51: [(10, FENTRY, 0, F, 0x11), (20, FENTRY, 0, G, 0x22), (30, FEXIT, 0, G, 0),
                               (40, FEXIT, 0, F, 0), (50, FENTRY, 0, G, 0x33)]})
    got = rows(con, "SELECT address, call_site, begin_ns, end_ns, depth, complete FROM functions ORDER BY begin_ns")
    assert got[:2] == [(F, 0x11, 10, 40, 0, True), (G, 0x22, 20, 30, 1, True)]
    assert got[2][0] == G and got[2][5] is False and got[2][3] >= 50


def test_counters_timers_pauses_adapt_and_names(tmp_path):
    con = make(tmp_path, {51: [
        (10, raw.COUNTER, 3, 42, 2), (20, raw.TIMER_START, 4, 0, 0), (50, raw.TIMER_STOP, 4, 30, 0),
        (60, raw.PAUSE, 0, 15, 1), (70, raw.ADAPT, 7, 0, 5), (80, raw.CONTROL, 2, 1, 0),
        (90, raw.EVENT, 6, 3, int.from_bytes(b"abc", "little")),
    ]}, names=[(3, 3, 0, "bytes"), (4, 4, 0, "io-time"), (7, 7, 0, "compute"), (2, 2, 0, "io"), (6, 6, 0, "tick")])
    assert rows(con, "SELECT name, value, reason FROM counters") == [("bytes", 42, "asked")]
    assert rows(con, "SELECT name, start_ns, stop_ns, elapsed_ns FROM timers") == [("io-time", 20, 50, 30)]
    assert rows(con, "SELECT start_ns, end_ns, duration_ns, reason FROM pauses") == [(45, 60, 15, "new chunk")]
    assert rows(con, "SELECT ts, phase, error, policy FROM adapt") == [(70, "compute", 0, 5)]
    assert rows(con, "SELECT instrument, kind, value FROM app_events WHERE kind = 'control'") == [("io", "control", 1)]
    assert rows(con, "SELECT instrument, payload FROM app_events WHERE kind = 'event'") == [("tick", b"abc")]


def test_long_payloads_and_unnamed_instruments(tmp_path):
    long = bytes(range(70))
    (tmp_path / "raw").mkdir()
    _native.write_chunk(str(tmp_path / "raw" / "app-50-51-0.osl"),
                        {"source": 1, "clock": raw.CLOCK_MONOTONIC_NS, "pid": 50, "tid": 51},
                        [(1, 5, 0, raw.EVENT, 0, 0), (2, 5, 0, raw.EVENT, 0, 0), (3, 99, 0, raw.REGION_BEGIN, 0, 0)],
                        payloads={0: long, 1: b"xy"})
    con = open_trace(tmp_path, quiet=True)
    assert rows(con, "SELECT payload, value FROM app_events WHERE kind = 'event' ORDER BY ts") == [(long, 70), (b"xy", 2)]
    assert rows(con, "SELECT instrument, id FROM app_events WHERE kind = 'region_begin'") == [(None, 99)]
    assert rows(con, "SELECT name, complete FROM regions") == [(None, False)]


@pytest.mark.parametrize("n_chunks", [1, 12])
def test_chunks_in_sequence_order(tmp_path, n_chunks):
    (tmp_path / "raw").mkdir()
    per = 3
    for seq in range(n_chunks):
        _native.write_chunk(str(tmp_path / "raw" / f"app-50-51-{seq}.osl"),
                            {"source": 1, "clock": raw.CLOCK_MONOTONIC_NS, "pid": 50, "tid": 51, "seq": seq},
                            [(seq * 100 + i, 1, 0, raw.EVENT, 0, 0) for i in range(per)])
    con = open_trace(tmp_path, quiet=True)
    assert [r[0] for r in rows(con, "SELECT ts FROM app_events")] == [s * 100 + i for s in range(n_chunks) for i in range(per)]


def test_native_record_split_matches_numpy():
    """_oracle.split_records converts the TSC bit for bit as ClockConverter.to_ns does (and the
    tick counts of timers as ticks_to_ns), and looks names up by kind and id."""
    import numpy as np

    from oslens.store import app_tables

    rng = np.random.default_rng(3)
    n = 5000
    rec = np.zeros(n, raw.RECORD_DTYPE)
    rec["ts"] = rng.integers(10**9, 10**15, n, dtype=np.uint64)
    rec["id"] = rng.integers(0, 5, n)
    rec["cpu"] = rng.integers(0, 300, n)
    rec["kind"] = rng.choice(np.array([raw.REGION_BEGIN, raw.TIMER_STOP, raw.PAUSE, raw.COUNTER], np.uint8), n)
    rec["a"] = rng.integers(0, 10**12, n, dtype=np.uint64)
    clock = raw.ClockConverter([(10**9, 5 * 10**9), (10**15 + 12345, 5 * 10**9 + 10**15 // 3 + 77), (10**12, 3 * 10**11)])
    keys = np.array([(raw.REGION_BEGIN << 48) | 1, (raw.COUNTER << 48) | 3], np.uint64)
    vals = np.array([7, 9], np.int32)
    cols = [np.empty(n, t) for t in (np.int64, np.uint8, np.uint32, np.uint16, np.int64, np.int32)]
    counts = _oracle.split_records(*(x.view(np.uint8) for x in (rec, *cols, keys, vals)),
                                   app_tables.native_clock(clock))
    ts, kind, ident, cpu, value, name = cols
    assert np.array_equal(ts, clock.to_ns(rec["ts"]))
    ticks = (rec["kind"] == raw.TIMER_STOP) | (rec["kind"] == raw.PAUSE)
    want = rec["a"].astype(np.int64)
    want[ticks] = clock.ticks_to_ns(want[ticks])
    assert np.array_equal(value, want)
    assert np.array_equal(kind, rec["kind"]) and np.array_equal(ident, rec["id"]) and np.array_equal(cpu, rec["cpu"])
    want_name = np.full(n, -1, np.int32)
    want_name[(rec["kind"] == raw.REGION_BEGIN) & (rec["id"] == 1)] = 7
    want_name[(rec["kind"] == raw.COUNTER) & (rec["id"] == 3)] = 9
    assert np.array_equal(name, want_name)
    assert counts[raw.TIMER_STOP] == int((rec["kind"] == raw.TIMER_STOP).sum())


def test_cpu_numbers_are_kept_as_a_dictionary_of_int64_values():
    import numpy as np
    import pyarrow as pa

    from oslens_testing.store.app_tables_oracle import _small_ints

    small = _small_ints(np.array([3, 0, 3, 7], np.uint16))
    assert pa.types.is_dictionary(small.type) and small.type.value_type == pa.int64()
    assert small.to_pylist() == [3, 0, 3, 7]
    large = _small_ints(np.array([1, 40000], np.uint16))
    assert large.type == pa.int64() and large.to_pylist() == [1, 40000]
    assert _small_ints(np.zeros(0, np.uint16)).to_pylist() == []


def test_payload_offsets_native_and_numpy_agree():
    import numpy as np

    rng = np.random.default_rng(5)
    kind = rng.choice(np.array([raw.EVENT, raw.COUNTER, raw.REGION_BEGIN], np.uint8), 1003)
    is_ev = kind == raw.EVENT
    ev = np.flatnonzero(is_ev)
    lens = rng.integers(0, 9, len(ev)).astype(np.int64)
    offsets, validity = app_tables_oracle._event_offsets(kind, is_ev, ev, lens)
    want = np.zeros(len(kind) + 1, np.int64)
    want[1:][ev] = lens
    assert offsets.tolist() == np.cumsum(want).tolist()
    assert validity.tolist() == np.packbits(is_ev, bitorder="little").tolist()


def test_gathers_into_populated_memory_give_what_numpy_gives():
    values = np.arange(1 << 20, dtype=np.int64) * 3  # 8 MiB: populated
    rows = np.sort(np.random.default_rng(1).integers(0, len(values), 300_000))
    assert np.array_equal(app_tables_oracle.take(values, rows), np.take(values, rows))
    kept = values.copy()
    app_tables_oracle._populate(values)  # backing the pages leaves the contents as they were
    assert np.array_equal(values, kept)


def _nested_trace(path, seed: int, threads: int = 3, per_thread: int = 400):
    """Properly nested begins and ends of every paired kind (regions, functions, locks, barriers,
    condition waits), some never ended; in the second thread one end that closes nothing and
    one that closes another key halfway through."""
    rng = np.random.default_rng(seed)
    (path / "raw").mkdir(parents=True)
    pairs = [(raw.REGION_BEGIN, raw.REGION_END), (FENTRY, FEXIT), (ACQ, REL), (BENTER, BEXIT), (CENTER, CEXIT)]
    for t in range(threads):
        recs, stack = [], []
        for i in range(per_thread):
            if t == 1 and i == per_thread // 2:
                recs.append((3 * i, 1, 0, raw.REGION_END, 0, 0))  # closes nothing
                continue
            if t == 1 and i == per_thread // 2 + 1:
                recs.append((3 * i, 0, 0, ACQ, 0x10, 0))
                recs.append((3 * i + 1, 0, 0, REL, 0x20, 0))  # another lock
                continue
            if stack and rng.random() < 0.45:
                b, e, ident, addr = stack.pop()
                recs.append((3 * i, ident, 0, e, addr, 0))
            else:
                b, e = pairs[int(rng.integers(0, len(pairs)))]
                ident, addr = int(rng.integers(1, 4)), int(rng.choice([0x10, 0x20, 0x30]))
                if b == ACQ and rng.random() < 0.5:
                    recs.append((3 * i - 1, ident, 0, REQ, addr, 0))
                stack.append((b, e, ident, addr))
                recs.append((3 * i, ident, 0, b, addr, 7))
        _native.write_chunk(str(path / "raw" / f"app-50-{51 + t}-0.osl"),
                            {"source": 1, "clock": raw.CLOCK_MONOTONIC_NS, "pid": 50, "tid": 51 + t}, recs)
    _native.write_chunk(str(path / "raw" / "names-50-0.osl"), {"pid": 50, "tid": 0}, [],
                        names=[(1, 5, 0, "r1"), (2, 5, 0, "r2"), (1, 8, 0, "lock1")])
    (path / "meta.json").write_text(json.dumps({"pid": 50, "end_ns": 10**6}))


def _random_trace(path, seed: int, threads: int = 3, per_thread: int = 400, late_unnamed: bool = False,
                  disordered: bool = False):
    """Application chunks with every kind the tables use, in random order: named and unnamed
    ids, short and long event payloads, unclosed regions, locks never released or acquired.
    `disordered`: times that tie and step back within a thread (compensation looks times up
    by the thread's running maximum), and timers that stop before they start."""
    rng = np.random.default_rng(seed)
    (path / "raw").mkdir(parents=True)
    kinds = [raw.EVENT, raw.REGION_BEGIN, raw.REGION_END, raw.COUNTER, raw.TIMER_START, raw.TIMER_STOP, raw.PAUSE,
             raw.ADAPT, raw.CONTROL, REQ, ACQ, REL, BENTER, BEXIT, CENTER, CEXIT, SIGNAL, FENTRY, FEXIT]
    named = [(raw.REGION_BEGIN, 1), (raw.REGION_END, 1), (raw.REGION_BEGIN, 2), (raw.COUNTER, 3), (raw.TIMER_START, 4),
             (raw.TIMER_STOP, 4), (raw.EVENT, 2), (raw.ADAPT, 5), (REQ, 1), (ACQ, 1), (REL, 1)]
    for t in range(threads):
        tid = 51 + t
        recs, payloads = [], {}
        for i in range(per_thread):
            kd, ident = int(rng.choice(kinds)), int(rng.integers(0, 6))
            if late_unnamed and (t < threads - 1 or i < per_thread - 5):  # only the last rows unnamed
                kd, ident = named[int(rng.integers(0, len(named)))]
            a, b = int(rng.choice([0x10, 0x20, 0x30])), int(rng.integers(0, 5))
            if kd == raw.EVENT:
                size = int(rng.integers(0, 20)) if not late_unnamed else 8
                a = size
                if size > 8:
                    payloads[i] = bytes(rng.integers(0, 256, size, dtype=np.uint8))
                else:
                    b = int.from_bytes(bytes(rng.integers(0, 256, size, dtype=np.uint8)), "little")
            ts = 1000 * t + 3 * i + (int(rng.integers(-7, 3)) if disordered else 0)
            if disordered and kd == raw.TIMER_STOP and rng.random() < 0.5:
                a = (1 << 64) - int(rng.integers(1, 12))  # a negative elapsed time: a start after the stop
            recs.append((max(ts, 0), ident, t % 2, kd, a, b))
        for seq, lo in enumerate(range(0, per_thread, 150)):
            part = recs[lo:lo + 150]
            _native.write_chunk(str(path / "raw" / f"app-50-{tid}-{seq}.osl"),
                                {"source": 1, "clock": raw.CLOCK_MONOTONIC_NS, "pid": 50, "tid": tid, "seq": seq,
                                 "closed": t != 1},
                                part, payloads={i - lo: p for i, p in payloads.items() if lo <= i < lo + 150})
    _native.write_chunk(str(path / "raw" / "names-50-0.osl"), {"pid": 50, "tid": 0}, [],
                        names=[(1, 5, 0, "r1"), (2, 5, 0, "r2"), (3, 3, 0, "c3"), (4, 4, 0, "t4"), (1, 8, 0, "lock1"),
                               (2, 6, 0, "ev2"), (5, 7, 0, "phase5")])
    (path / "meta.json").write_text(json.dumps({"pid": 50, "end_ns": 10**6}))


def _odd_trace(path):
    """A thread whose chunk holds its own names (NAME and continuation records among its
    records: a chunk that is decoded, not mapped), a long payload, a thread with an empty
    chunk, and a second process naming the same ids otherwise."""
    (path / "raw").mkdir(parents=True)
    recs = [(10 * i, 1 + i % 3, i % 4, [raw.REGION_BEGIN, raw.COUNTER, raw.EVENT, raw.REGION_END][i % 4],
             20 if i == 2 else 3, 2) for i in range(40)]
    _native.write_chunk(str(path / "raw" / "app-50-51-0.osl"), {"source": 1, "clock": raw.CLOCK_MONOTONIC_NS,
                        "pid": 50, "tid": 51}, recs, names=[(1, 5, 0, "a-rather-long-region-name"), (2, 3, 0, "c")],
                        payloads={2: bytes(range(20))})
    _native.write_chunk(str(path / "raw" / "app-50-52-0.osl"), {"source": 1, "clock": raw.CLOCK_MONOTONIC_NS,
                        "pid": 50, "tid": 52}, [])
    # another process: the same ids, other names
    _native.write_chunk(str(path / "raw" / "app-60-61-0.osl"), {"source": 1, "clock": raw.CLOCK_MONOTONIC_NS,
                        "pid": 60, "tid": 61}, [(5 + r[0], *r[1:]) for r in recs if r[3] != raw.EVENT])
    _native.write_chunk(str(path / "raw" / "names-60-0.osl"), {"pid": 60, "tid": 0}, [],
                        names=[(1, 5, 0, "other"), (3, 3, 0, "c60")])
    (path / "meta.json").write_text(json.dumps({"pid": 50}))


# what a calibration charges: odd fractions, so that rounding the running costs is exercised; it
# names no machine, so it covers the synthetic traces' (store.calibration.refusal)
CALIBRATION = {"schema": "oslens-calibration/1", "measured_at": "test",
               "costs": {src: {"ns": ns, "ci_low": ns - 1.25, "ci_high": ns + 2.5}
                         for src, ns in (("event", 23.37), ("region_begin", 41.913), ("region_end", 17.5),
                                         ("timer_start", 9.0625), ("timer_stop", 12.3), ("counter_record", 31.07),
                                         ("raw", 0.7), ("preload_sync", 55.55))}}


def _unscanned(monkeypatch):
    """The importer's chunk scans without their sync keys (the pass then learns sync's objects
    not named only from its rows)."""
    from oslens.store import chunk_reader

    read = chunk_reader.try_read_chunk

    def unscanned(p):
        path, chunk, scan = read(p)
        return path, chunk, scan and (*scan[:4], None)

    monkeypatch.setattr(chunk_reader, "try_read_chunk", unscanned)


@pytest.mark.parametrize("case", ["random", "random-late-unnamed", "random-disordered", "nested", "odd", "synthetic",
                                  "unnamed-locks", "unnamed-locks-unscanned"])
@pytest.mark.parametrize("row_group", [1 << 22, 64])
@pytest.mark.parametrize("compensation", ["off", "uncalibrated", "calibrated"])
def test_one_pass_builds_the_same_tables(tmp_path, monkeypatch, case, row_group, compensation):
    """build_tables (app_events written in one native pass, the other tables from the rows it
    gathered) gives the same Parquet tables as the tables built in memory (app_tables_oracle): without
    the importer's extensions, and with them (compensation computed in the pass) with and
    without a calibration."""
    import shutil

    import pyarrow.parquet as pq

    from oslens.store import importer, salvage, table_build, table_writer
    from oslens_testing.store import app_tables_oracle, synthetic

    for step in (table_build, table_writer):  # the pass's row groups and the writer's
        monkeypatch.setattr(step, "ROW_GROUP", row_group)
    trace = tmp_path / "t"
    if case == "synthetic":
        synthetic.write_trace(trace, threads=3, iterations=50, chunk_records=70)
    elif case.startswith("unnamed-locks"):  # as the preload library records locks: id 0, no name
        synthetic.write_trace(trace, threads=4, iterations=200, chunk_records=700, unnamed_locks=True)
        if case.endswith("unscanned"):  # scans without their sync keys: sync held to the pass's end
            _unscanned(monkeypatch)
    elif case == "nested":
        _nested_trace(trace, seed=3)
    elif case == "odd":
        _odd_trace(trace)
    else:
        _random_trace(trace, seed=7, late_unnamed=case.endswith("late-unnamed"), disordered=case.endswith("disordered"))
    if compensation != "off":
        cal = tmp_path / "calibration.json"
        if compensation == "calibrated":
            cal.write_text(json.dumps(CALIBRATION))
        monkeypatch.setenv("OSLENS_CALIBRATION", str(cal))
    out = {}
    for stream in (False, True):
        build_app = None if stream else app_tables_oracle.build_app
        tables = importer.build_tables(trace, salvage.Losses(), extensions=compensation != "off", build_app=build_app)
        assert isinstance(tables["app_events"], app_tables.WrittenTable) == stream
        if case != "odd":  # sync too, where it has rows
            assert isinstance(tables["sync"], app_tables.WrittenTable) == stream
        if case in ("random", "random-disordered", "nested"):  # and functions (named after by symbols)
            assert isinstance(tables["functions"], app_tables.WrittenTable) == stream
        if stream and case.startswith("unnamed-locks"):
            sync = tables["sync"]
            assert sync.num_rows == 4 * 200
            if case == "unnamed-locks" and row_group == 64:
                # written a page at a time as each thread ended (one run of the pass): at most a
                # thread's 200 rows and less than a page before them held at once
                assert sync.peak_rows < 200 + 64
            else:  # held to the pass's end (unscanned), or pages of 64 Ki rows
                assert sync.peak_rows == sync.num_rows
        assert not any(k.startswith("store.extension_error") for k in tables["meta"].column("key").to_pylist())
        if compensation != "off":
            assert "compensation" in tables and tables["compensation"].num_rows
        importer.write_tables(trace, tables)
        out[stream] = tmp_path / f"tables-{stream}"
        shutil.copytree(trace / "tables", out[stream])
    assert not list(trace.glob(".*.tmp-*"))  # every table written in the pass was moved into place
    if case.startswith("random"):  # sync rows of several parts (pages straddle them in small row groups)
        sync = pq.read_table(out[True] / "sync.parquet").to_pydict()
        parts = {(k, a is None, r is None) for k, a, r in zip(sync["kind"], sync["acquire_ns"], sync["release_ns"])}
        # acquisitions, requests never acquired, and (but late-unnamed) barrier and condition waits
        want = {("mutex", False, False), ("mutex", True, True)}
        assert want | (set() if case.endswith("late-unnamed") else {("barrier", False, False), ("cond", False, True)}) <= parts
    assert sorted(f.name for f in out[False].glob("*.parquet")) == sorted(f.name for f in out[True].glob("*.parquet"))
    if compensation != "off":
        ev = pq.read_table(out[True] / "app_events.parquet")
        charged = (ev.column("ts").to_numpy() - ev.column("ts_comp_ns").to_numpy()).any()
        assert charged == (compensation == "calibrated" or "pause" in ev.column("kind").to_pylist())
    for f in sorted(out[False].glob("*.parquet")):
        if f.stem == "meta":
            continue
        a, b = pq.read_table(f), pq.read_table(out[True] / f.name)
        assert a.schema == b.schema, f.stem
        assert a.equals(b), f.stem
        fa, fb = pq.ParquetFile(f).metadata, pq.ParquetFile(out[True] / f.name).metadata
        assert fa.num_row_groups == fb.num_row_groups
        for g in range(fa.num_row_groups):
            for c in range(fa.num_columns):
                ca, cb = fa.row_group(g).column(c), fb.row_group(g).column(c)
                assert ca.encodings == cb.encodings, (f.stem, ca.path_in_schema)
                assert ca.statistics == cb.statistics, (f.stem, ca.path_in_schema)
        if f.stem != "meta":  # the same bytes (meta holds the import's time)
            assert f.read_bytes() == (out[True] / f.name).read_bytes(), f.stem


def _sync_waits_trace(path, case: str) -> None:
    """synthetic.write_trace with sync_waits (each iteration a failed trylock, a barrier and a
    condition wait) in chunks that cut iterations, and a thread more, in one chunk, whose
    barrier and condition pairings go bad after its earlier waits went to disk (an exit closing
    another object: the thread is paired again). "unnamed": the objects not named, as the preload
    library writes them; "retry": a request not named of an object then acquired by name
    (the scans promise an object not named that no row holds: the pass runs again)."""
    from oslens_testing.store import synthetic

    unnamed = case != "named"
    synthetic.write_trace(path, threads=3, iterations=150, chunk_records=97, unnamed_locks=unnamed, sync_waits=True)
    recs = synthetic.thread_records(3, 150, synthetic.NS0 + 5000, unnamed, sync_waits=True).tolist()
    last = recs[-1][0]
    other = 0x7F00_0000_5000
    barrier, cond = (0, 0) if unnamed else (synthetic.BARRIER_NAME, synthetic.COND_NAME)
    tail = [(BEXIT, barrier, other), (BENTER, barrier, synthetic.BARRIER_ADDR), (CEXIT, cond, other),
            (BEXIT, barrier, synthetic.BARRIER_ADDR)]
    if case == "retry":
        tail += [(REQ, 0, other + 0x40), (ACQ, synthetic.LOCK_NAME, other + 0x40), (REL, synthetic.LOCK_NAME, other + 0x40)]
    recs += [(last + 10 * (i + 1), ident, 1, kind, addr, 0) for i, (kind, ident, addr) in enumerate(tail)]
    calib = [(int(synthetic.tsc(synthetic.NS0)), synthetic.NS0), (last + 1000, int(synthetic.NS0 + (last + 1000 - synthetic.TSC0) / synthetic.TSC_PER_NS))]
    _native.write_chunk(str(path / "raw" / "app-1000-1003-0.osl"), {"source": raw.SOURCE_APP_THREAD, "clock": raw.CLOCK_TSC,
                        "pid": 1000, "tid": 1003, "seq": 0, "calib": calib, "closed": True}, recs)


def built_both_ways(trace, out_dir, extensions, check=lambda tables: None) -> dict:
    """The trace's tables built by the in-memory oracle, then by the streamed pass (`check` looks
    at the streamed build before it is written), each written and copied to
    out_dir/tables-{False,True}; returns those folders by `streamed`."""
    import shutil

    from oslens.store import importer, salvage

    out = {}
    for stream in (False, True):
        tables = importer.build_tables(trace, salvage.Losses(), extensions=extensions,
                                       build_app=None if stream else app_tables_oracle.build_app)
        if stream:
            check(tables)
        importer.write_tables(trace, tables)
        out[stream] = out_dir / f"tables-{stream}"
        shutil.copytree(trace / "tables", out[stream])
    return out


@pytest.mark.parametrize("case", ["named", "unnamed", "unnamed-unscanned", "retry"])
@pytest.mark.parametrize("compensation", [False, True])
def test_sync_waits_go_to_disk_and_come_back_the_same_table(tmp_path, monkeypatch, case, compensation):
    """Requests never acquired, barrier and condition waits (the sync parts written after every
    mutex acquisition) leave memory as they are finished and are written back after the last
    acquisition: in pages of 64 rows that straddle the parts, the tables are the in-memory
    build's byte for byte, and the sync rows held at once are fewer than one part's rows."""
    from oslens.store import importer, table_build, table_writer

    for step in (table_build, table_writer):  # the pass's row groups and the writer's
        monkeypatch.setattr(step, "ROW_GROUP", 64)
    monkeypatch.setenv("OSLENS_IMPORT_HELD_MB", "0")  # every chunk let go and read again
    if case.endswith("unscanned"):  # scans without their sync keys: acquisitions held to the pass's end
        _unscanned(monkeypatch)
    if compensation:
        cal = tmp_path / "calibration.json"
        cal.write_text(json.dumps(CALIBRATION))
        monkeypatch.setenv("OSLENS_CALIBRATION", str(cal))
    passes = []
    streamed = app_tables.build_streamed

    def spy(*args, **kwargs):
        got = streamed(*args, **kwargs)
        passes.append(got["passes"])
        return got

    monkeypatch.setattr(app_tables, "build_streamed", spy)
    trace = tmp_path / "t"
    _sync_waits_trace(trace, case)

    def check(tables):
        sync = tables["sync"]
        assert isinstance(sync, app_tables.WrittenTable)
        assert sync.num_rows == 4 * 4 * 150 + 1 + (case == "retry")  # 4 threads' 4 parts, the tail's
        acquired = 4 * 150 + (case == "retry")
        # held: the acquisitions (all of them where the scans lack the sync keys, else a
        # chunk's: 150 in the last thread's) and a page of each other part, not those parts'
        # 1,800 rows, nor the last thread's 450
        assert sync.peak_rows < (acquired if case in ("unnamed-unscanned", "retry") else 150 + 64) + 3 * 64
        assert passes == [2 if case == "retry" else 1]

    out = built_both_ways(trace, tmp_path, compensation, check)
    assert not [p.name for p in trace.iterdir() if p.name.startswith(".")]  # no spill left
    import pyarrow.parquet as pq

    sync = pq.read_table(out[True] / "sync.parquet").to_pydict()
    assert {k: sync["kind"].count(k) for k in set(sync["kind"])} == {"mutex": 1200 + (case == "retry"), "barrier": 601,
                                                                      "cond": 600}
    names = sorted(p.name for p in out[False].glob("*.parquet"))
    assert names == sorted(p.name for p in out[True].glob("*.parquet"))
    for name in names:
        if name != "meta.parquet":  # meta holds the import's time
            assert (out[False] / name).read_bytes() == (out[True] / name).read_bytes(), name
