"""store.held: chunks whose records were let go after the read are read again by the pass, and
the tables are the same, byte for byte, as when every chunk's records are held."""

from __future__ import annotations

import json
import shutil

import numpy as np
import pytest

from oslens.errors import OslensError
from oslens.store import chunk_reader, importer, salvage, table_build, table_writer
from oslens_testing.store import synthetic
from oslens.store.test_app_tables import _nested_trace, _random_trace, built_both_ways


def _import(trace, tables_copy):
    tables = importer.build_tables(trace, salvage.Losses())
    let_go = tables["_read"]["chunks_let_go"]
    importer.write_tables(trace, tables)
    shutil.copytree(trace / "tables", tables_copy)
    return let_go


@pytest.mark.parametrize("case", ["synthetic", "random-disordered", "nested"])
def test_records_read_again_give_the_same_tables(tmp_path, monkeypatch, case):
    trace = tmp_path / "t"
    if case == "synthetic":  # several mapped chunks per thread, preload-style unnamed locks
        synthetic.write_trace(trace, threads=3, iterations=300, chunk_records=500, unnamed_locks=True)
    elif case == "nested":  # regions out of order: the pass reads a thread's chunks again at its end
        _nested_trace(trace, seed=3)
    else:  # decoded chunks (long payloads), times stepping back
        _random_trace(trace, seed=7, disordered=True)
    # names chunks are always held (their thread ledgers are read before the pass)
    app_chunks = len([p for p in (trace / "raw").glob("*.osl") if not p.name.startswith(("kernel-", "names-"))])
    monkeypatch.setenv("OSLENS_IMPORT_HELD_MB", str(1 << 20))
    assert _import(trace, tmp_path / "held") == 0
    monkeypatch.setenv("OSLENS_IMPORT_HELD_MB", "0")
    assert _import(trace, tmp_path / "let-go") == app_chunks > 0
    held = sorted(p.name for p in (tmp_path / "held").glob("*.parquet"))
    assert held == sorted(p.name for p in (tmp_path / "let-go").glob("*.parquet"))
    for name in held:
        if name != "meta.parquet":  # meta holds the import's time
            assert (tmp_path / "held" / name).read_bytes() == (tmp_path / "let-go" / name).read_bytes(), name


def test_a_chunk_that_shrank_before_the_pass_is_one_clear_error(tmp_path, monkeypatch):
    """A chunk read again with fewer records than first read (rewritten meanwhile) stops the
    import with one line, rather than tables missing rows."""
    trace = tmp_path / "t"
    synthetic.write_trace(trace, threads=2, iterations=100, chunk_records=300)
    monkeypatch.setenv("OSLENS_IMPORT_HELD_MB", "0")
    read_again = chunk_reader.read_again
    monkeypatch.setattr(chunk_reader, "read_again", lambda p: read_again(p)[:-1])
    with pytest.raises(OslensError, match="could not be read again while importing .*when read again"):
        importer.import_trace(trace, quiet=True)
    assert not (trace / "tables").exists()
    assert not list(trace.glob(".*.tmp-*"))


def _long_thread_trace(path, per_thread: int = 3000, chunk: int = 100):
    """Two threads of many chunks each whose rows the pass writes as their records go by: nested
    regions (inside one region open to the thread's end, as a "main" region around a whole
    program is), functions (inside one call open to the thread's end), locks (some requested first), counters, timers of long and negative elapsed times
    and pauses, at times that tie and step back; regions left open when each thread ends, and
    in the second thread, late, an end that closes another region and a return from another
    function (their pairings done again from its records after most of their rows were written)."""
    from oslens import _native
    from oslens.capture import raw
    from oslens.store.test_app_tables import ACQ, REL, REQ

    rng = np.random.default_rng(11)
    (path / "raw").mkdir(parents=True)
    for t in range(2):
        recs, stack, timers = [], [], []
        for i in range(per_thread):
            ts = 10 * i + int(rng.integers(-25, 3))  # steps back up to 2.5 records
            if t == 1 and i == per_thread * 9 // 10:
                recs.append((ts, 9, 0, raw.REGION_END, 0, 0))  # closes another region
                continue
            if t == 1 and i == per_thread * 9 // 10 + 1:
                recs.append((ts, 0, 0, raw.FUNC_EXIT, 0x999, 0))  # returns from another function
                continue
            roll = rng.random()
            if i == 0:  # a call open to the thread's end, as main's is
                recs.append((ts, 0, 0, raw.FUNC_ENTRY, 0x500, 0x1234))
            elif i == 1:  # a region open to the thread's end, around the whole program
                recs.append((ts, 5, 0, raw.REGION_BEGIN, 0, 0))
            elif i > per_thread - 20:  # the thread ends inside nested regions
                recs.append((ts, 1 + i % 2, 0, raw.REGION_BEGIN, 0, 0))
            elif stack and roll < 0.3:
                kind, ident, addr = stack.pop()
                recs.append((ts, ident, 0, {raw.REGION_BEGIN: raw.REGION_END, raw.FUNC_ENTRY: raw.FUNC_EXIT}.get(kind, REL), addr, 0))
            elif roll < 0.55 and len(stack) < 6:
                pick = rng.random()
                kind = raw.REGION_BEGIN if pick < 0.5 else raw.FUNC_ENTRY if pick < 0.8 else ACQ
                ident, addr = int(rng.integers(1, 3)), 0x40 + 0x10 * int(rng.integers(0, 3))
                if kind == ACQ and rng.random() < 0.5:
                    recs.append((ts - 1, ident, 0, REQ, addr, 0))
                stack.append((kind, ident, addr))
                recs.append((ts, ident, 0, kind, addr, 0x1234 if kind == raw.FUNC_ENTRY else 0))  # b: a call site
            elif roll < 0.7:
                recs.append((ts, 3, 0, raw.COUNTER, i, 1))
            elif roll < 0.85:  # elapsed back to the thread's start, or negative (a start after the stop)
                elapsed = int(rng.integers(0, 10 * i + 1)) if rng.random() < 0.8 else (1 << 64) - 7
                recs.append((ts, 4, 0, raw.TIMER_STOP, elapsed, 0))
            else:
                recs.append((ts, 0, 0, raw.PAUSE, int(rng.integers(0, 40)), 0))
        for seq, lo in enumerate(range(0, len(recs), chunk)):
            _native.write_chunk(str(path / "raw" / f"app-60-{61 + t}-{seq}.osl"),
                                {"source": 1, "clock": raw.CLOCK_MONOTONIC_NS, "pid": 60, "tid": 61 + t, "seq": seq},
                                [(max(r[0], 0), *r[1:]) for r in recs[lo:lo + chunk]])
    _native.write_chunk(str(path / "raw" / "names-60-0.osl"), {"pid": 60, "tid": 0}, [],
                        names=[(5, 5, 0, "main"), (1, 5, 0, "r1"), (2, 5, 0, "r2"), (3, 3, 0, "c3"), (4, 4, 0, "t4"), (1, 8, 0, "lock1"),
                               (2, 8, 0, "lock2")])
    (path / "meta.json").write_text(json.dumps({"pid": 60, "end_ns": 10**6}))


def _page_by_page(tmp_path, monkeypatch):
    """Imports from here on with a calibration, pages of 64 rows, every chunk let go and
    compensation's breakpoints kept for the latest two only: every streamed table's rows cross
    pages, chunks and the window."""
    from oslens.store.test_app_tables import CALIBRATION

    cal = tmp_path / "calibration.json"
    cal.write_text(json.dumps(CALIBRATION))
    monkeypatch.setenv("OSLENS_CALIBRATION", str(cal))
    for step in (table_build, table_writer):  # the pass's row groups and the writer's
        monkeypatch.setattr(step, "ROW_GROUP", 64)
    monkeypatch.setenv("OSLENS_IMPORT_HELD_MB", "0")
    monkeypatch.setenv("OSLENS_IMPORT_COMP_WINDOW", "2")


@pytest.mark.parametrize("extensions", [True, False])
def test_rows_written_as_the_records_go_by_are_the_tables_built_in_memory(tmp_path, monkeypatch, extensions):
    """With every chunk let go, compensation's breakpoints kept for the latest two only (older
    times' costs added up again from the records) and pages of 64 rows, the pass writes regions,
    functions and sync a page at a time while each thread's records go by, and its tables are those the
    in-memory build makes, byte for byte."""
    import pyarrow.parquet as pq

    from oslens.store import app_tables

    trace = tmp_path / "t"
    _long_thread_trace(trace)
    _page_by_page(tmp_path, monkeypatch)

    def check(tables):
        regions, functions, sync = tables["regions"], tables["functions"], tables["sync"]
        assert all(isinstance(t, app_tables.WrittenTable) for t in (regions, functions, sync))
        # held: a chunk's rows and less than a page before them, not a thread's (the second
        # thread's rows after its late bad end are held to its end), though the first
        # region of each thread is open to its end: the rows behind it are written before
        # it ends, and patched when the table is moved into place
        assert regions.num_rows > 700 and regions.peak_rows < regions.num_rows // 6
        assert regions.patches is not None and regions.patches.num_rows >= 2
        # functions too, though the first call of each thread is open to its end (main's):
        # the rows behind it are written before it ends, and patched
        assert functions.num_rows > 400 and functions.peak_rows < functions.num_rows // 4
        assert (functions.patches is not None) == (not extensions)  # else patched when symbols named them
        assert sync.num_rows > 300 and sync.peak_rows < sync.num_rows // 3

    out = built_both_ways(trace, tmp_path, extensions, check)
    names = sorted(p.name for p in out[False].glob("*.parquet"))
    assert names == sorted(p.name for p in out[True].glob("*.parquet"))
    regions = pq.read_table(out[True] / "regions.parquet").to_pydict()
    assert regions["complete"].count(False) >= 19  # left open when the threads ended
    outer = [i for i, n in enumerate(regions["name"]) if n == "main"]
    assert len(outer) == 2 and not any(regions["complete"][i] for i in outer)  # ended with their threads
    for i in outer:  # each ends last of its thread's regions
        tid = regions["tid"][i]
        assert regions["end_ns"][i] == max(e for e, t in zip(regions["end_ns"], regions["tid"]) if t == tid)
    functions = pq.read_table(out[True] / "functions.parquet").to_pydict()
    assert functions["complete"].count(False) >= 2 and ("begin_comp_ns" in functions) == extensions
    outer = [i for i, a in enumerate(functions["address"]) if a == 0x500]
    assert len(outer) == 2 and not any(functions["complete"][i] for i in outer)  # ended with their threads
    for name in names:
        if name != "meta.parquet":  # meta holds the import's time
            assert (out[False] / name).read_bytes() == (out[True] / name).read_bytes(), name


def test_a_region_around_the_whole_program_holds_no_rows_to_its_end(tmp_path, monkeypatch):
    """synthetic's enclosing region (a "main" region around each thread's records, ended by its
    last record): the pass writes the rows behind it as the records go by, not when it ends, and
    gives it its end; the tables are the in-memory build's, byte for byte."""
    import pyarrow.parquet as pq

    from oslens.store import app_tables

    trace = tmp_path / "t"
    spec = synthetic.write_trace(trace, threads=2, iterations=300, chunk_records=256, enclosing_region=True)
    assert spec["records"] == 2 * (300 * len(synthetic.PATTERN) + 2)
    for step in (table_build, table_writer):  # the pass's row groups and the writer's
        monkeypatch.setattr(step, "ROW_GROUP", 64)
    monkeypatch.setenv("OSLENS_IMPORT_HELD_MB", "0")

    def check(tables):
        regions = tables["regions"]
        assert isinstance(regions, app_tables.WrittenTable) and regions.num_rows == 2 * (2 * 300 + 1)
        assert regions.peak_rows < regions.num_rows // 8
        assert regions.patches.column("row").to_pylist() == [0, 601]  # each thread's main, written early

    out = built_both_ways(trace, tmp_path, False, check)
    assert (out[False] / "regions.parquet").read_bytes() == (out[True] / "regions.parquet").read_bytes()
    got = pq.read_table(trace / "tables" / "regions.parquet").to_pydict()
    main = [i for i, n in enumerate(got["name"]) if n == "main"]
    assert main == [0, 601]
    for t, i in enumerate(main):
        start = spec["starts"][spec["pid"] + t]
        assert got["begin_ns"][i] == synthetic.ns_of(t, 0, 0, start)
        assert got["end_ns"][i] == synthetic.ns_of(t, 299, synthetic.PERIOD_NS - 1, start)
        assert got["duration_ns"][i] == got["end_ns"][i] - got["begin_ns"][i]
        assert got["complete"][i] and got["depth"][i] == 0
    assert set(got["depth"][1:601]) == {1, 2}  # outer and inner, inside main


def test_timers_starting_after_they_stop_are_not_held_to_their_threads_end(tmp_path, monkeypatch):
    """Timers whose start lies after every earlier record of their thread (their compensated start
    is the cost before the first later record that reaches it): the rows leave as that record goes
    by, and those whose start no record reaches for two pages are written with a patch, so a
    thread's timers are never held to its end; the table is the in-memory build's, byte for byte,
    with a compensation window of two breakpoints (old times added up again from the records)."""
    import pyarrow.parquet as pq

    from oslens.store import app_tables

    trace = tmp_path / "t"
    # every 7th timer starts 3 iterations after it stops (reached 3 iterations later), every 50th
    # after its thread's last record (reached by none: known at the thread's end)
    late = ((7, 3 * synthetic.PERIOD_NS), (50, 10**9))
    spec = synthetic.write_trace(trace, threads=2, iterations=600, chunk_records=256, late_timers=late)
    _page_by_page(tmp_path, monkeypatch)

    def check(tables):
        timers = tables["timers"]
        assert isinstance(timers, app_tables.WrittenTable) and timers.num_rows == 2 * 600
        assert timers.peak_rows <= 2 * 64  # two pages at most, not a thread's 600 rows
        # each thread's timers starting after its end were written before it ended (but
        # those in its last two pages) and patched; of the 170 reached 3 iterations later,
        # only those held when two pages filled up
        patched = set(timers.patches.column("row").to_pylist())
        assert {600 * t + it for t in range(2) for it in range(49, 400, 50)} <= patched
        assert patched <= {600 * t + it for t in range(2) for it in range(600) if it % 50 == 49 or it % 7 == 6}
        assert len(patched) < 2 * 12 + 170 // 10

    out = built_both_ways(trace, tmp_path, True, check)
    assert (out[False] / "timers.parquet").read_bytes() == (out[True] / "timers.parquet").read_bytes()
    got = pq.read_table(trace / "tables" / "timers.parquet").to_pydict()
    for t in range(2):
        start_ns = spec["starts"][spec["pid"] + t]
        rows = [i for i, tid in enumerate(got["tid"]) if tid == spec["pid"] + t]
        for it, i in enumerate(rows):
            ahead = 10**9 if it % 50 == 49 else 3 * synthetic.PERIOD_NS if it % 7 == 6 else -20
            assert got["stop_ns"][i] == synthetic.ns_of(t, it, 60, start_ns)
            # (the TSC span in ns through the fitted clock: exact to a millionth)
            assert got["start_ns"][i] - got["stop_ns"][i] == -got["elapsed_ns"][i]
            assert abs(got["start_ns"][i] - got["stop_ns"][i] - ahead) <= abs(ahead) // 10**6 + 1
            # compensated: the start less the cost of the records before the first that reaches it
            assert got["start_comp_ns"][i] < got["start_ns"][i]
            assert got["elapsed_comp_ns"][i] == got["stop_comp_ns"][i] - got["start_comp_ns"][i]
