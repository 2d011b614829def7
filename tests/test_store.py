"""End-to-end tests of the trace store: import of generated traces with known answers, salvage
of damaged traces, `oslens sql`, `oslens export`, and a real program recorded with
`oslens record` and imported."""

import csv
import io
import json
import os
import shutil

import pytest

from conftest import dump, run_oslens
from oslens import store
from oslens.store import perfetto
from oslens_testing.store import synthetic

THREADS, ITERATIONS, CHUNK = 2, 12, 10  # 132 records per thread in 14 chunks (seq 0..13)
PER_THREAD = ITERATIONS * len(synthetic.PATTERN)


@pytest.fixture()
def trace(tmp_path):
    path = tmp_path / "synthetic"
    synthetic.write_trace(path, threads=THREADS, iterations=ITERATIONS, chunk_records=CHUNK)
    return path


def q(con, sql):
    return con.execute(sql).fetchall()


def expected_ns(t, it, offset):
    return synthetic.ns_of(t, it, offset, synthetic.NS0 + 1000 + t * 7)


def import_quietly(path):
    proc = run_oslens("import", path)
    return proc


# ---------------------------------------------------------------- round trip


def test_round_trip_exact_counts_and_timestamps(trace):
    store.import_trace(trace, quiet=True)
    con = store.open_trace(trace)
    assert q(con, "SELECT count(*) FROM app_events") == [(THREADS * PER_THREAD,)]
    # every record's time, exactly (TSC converted through the recorded calibration)
    for t in range(THREADS):
        tid = 1000 + t
        got = [r[0] for r in q(con, f"SELECT ts FROM app_events WHERE tid = {tid} ORDER BY ts")]
        want = sorted(expected_ns(t, it, p[0]) for it in range(ITERATIONS) for p in synthetic.PATTERN)
        assert got == want
    kinds = dict(q(con, "SELECT kind, count(*) FROM app_events GROUP BY 1"))
    assert kinds == {"region_begin": 48, "region_end": 48, "counter": 24, "event": 24, "timer_start": 24,
                     "timer_stop": 24, "lock_request": 24, "lock_acquire": 24, "lock_release": 24}
    assert q(con, "SELECT DISTINCT payload FROM app_events WHERE kind = 'event'") == [(b"payload!",)]
    assert q(con, "SELECT DISTINCT instrument FROM app_events WHERE kind = 'event'") == [("ev",)]

    regions = q(con, "SELECT tid, name, begin_ns, end_ns, duration_ns, depth, complete FROM regions "
                     "ORDER BY tid, begin_ns")
    assert len(regions) == THREADS * ITERATIONS * 2
    want = []
    for t in range(THREADS):
        for it in range(ITERATIONS):
            want.append((1000 + t, "outer", expected_ns(t, it, 0), expected_ns(t, it, 100), 100, 0, True))
            want.append((1000 + t, "inner", expected_ns(t, it, 10), expected_ns(t, it, 70), 60, 1, True))
    assert regions == want

    counters = q(con, "SELECT tid, name, ts, value, reason FROM counters ORDER BY tid, ts")
    assert counters == [(1000 + t, "iterations", expected_ns(t, it, 20), it, "periodic")
                        for t in range(THREADS) for it in range(ITERATIONS)]
    assert q(con, "SELECT DISTINCT name, elapsed_ns FROM timers") == [("t", 20)]
    assert q(con, "SELECT count(*), min(stop_ns - start_ns) FROM timers") == [(24, 20)]

    sync = q(con, "SELECT kind, object, tid, request_ns, acquire_ns, release_ns FROM sync ORDER BY tid, request_ns")
    assert sync == [("mutex", "the-lock", 1000 + t, expected_ns(t, it, 80), expected_ns(t, it, 85),
                     expected_ns(t, it, 95)) for t in range(THREADS) for it in range(ITERATIONS)]

    threads = q(con, "SELECT pid, tid, name, parent_tid, start_ns, end_ns, is_traced FROM threads ORDER BY tid")
    assert threads == [
        (1000, 1000, "main", 1, expected_ns(0, 0, 0), expected_ns(1, ITERATIONS - 1, synthetic.PERIOD_NS - 1), True),
        (1000, 1001, "worker-1", 1000, expected_ns(1, 0, 0), expected_ns(1, ITERATIONS - 1, synthetic.PERIOD_NS - 1),
         True),
    ]
    assert q(con, "SELECT count(*) FROM lost") == [(0,)]
    meta = dict(q(con, "SELECT key, value FROM meta"))
    assert meta["schema_version"] == str(store.SCHEMA_VERSION)
    assert meta["hostname"] == "synthetic"
    # kernel tables exist (empty) with their columns, so queries on them work
    for table in ("switches", "cpu_slices", "syscalls", "block_io", "samples", "wakeups", "faults"):
        assert q(con, f"SELECT count(*) FROM {table}") == [(0,)]
    assert q(con, "SELECT count(*) FROM cpu_slices WHERE tid = 1 AND end_ns > start_ns") == [(0,)]


def test_import_is_done_once_and_redone_when_the_schema_changes(trace):
    first = import_quietly(trace)
    assert "imported" in first.stderr
    again = import_quietly(trace)
    assert again.stderr == ""  # current: nothing to do
    manifest = json.loads((trace / "tables" / "manifest.json").read_text())
    assert manifest["schema_version"] == store.SCHEMA_VERSION
    manifest["schema_version"] = -1
    (trace / "tables" / "manifest.json").write_text(json.dumps(manifest))
    assert "imported" in import_quietly(trace).stderr
    assert "imported" in run_oslens("import", "--force", trace).stderr


def test_an_import_killed_before_its_end_leaves_nothing_the_next_one_keeps(trace):
    """What an import writes while it runs carries its pid; the next import removes those of a
    pid that no longer runs (SIGKILL, a crash), and leaves a running import's alone."""
    import subprocess

    dead = subprocess.Popen(["true"])
    dead.wait()
    live = subprocess.Popen(["sleep", "60"])
    try:
        made = {}
        for pid in (dead.pid, live.pid):
            spill = trace / f".kernel-tables-{pid}-x1"
            spill.mkdir()
            (spill / "records.duckdb").write_bytes(b"x" * 100)
            made[pid] = [spill, trace / f".tables.tmp-{pid}"] + [trace / n for n in (
                f".switches-.kernel-tables-{pid}-x1.parquet", f".app_events.tmp-{pid}.parquet",
                f".regions.tmp-{pid}.parquet", f".functions.tmp-{pid}-named.parquet")]
            made[pid][1].mkdir()
            for p in made[pid][2:]:
                p.write_bytes(b"x")
        assert "imported" in import_quietly(trace).stderr
        assert not [p for p in made[dead.pid] if p.exists()]
        assert all(p.exists() for p in made[live.pid])
    finally:
        live.kill()
        live.wait()


def test_open_imports_on_first_use(trace):
    import oslens

    assert not (trace / "tables").exists()
    con = oslens.open(trace)
    assert q(con, "SELECT count(*) FROM regions") == [(THREADS * ITERATIONS * 2,)]
    assert (trace / "tables" / "regions.parquet").is_file()


# ---------------------------------------------------------------- damage


def chunk(trace, tid, seq):
    return trace / "raw" / f"app-1000-{tid}-{seq}.osl"


def lost_rows(con):
    return q(con, "SELECT source, \"where\", count, reason FROM lost WHERE source = 'damage'")


def warnings(proc):
    return [line for line in proc.stderr.splitlines() if "warning" in line]


def test_truncated_chunk_keeps_the_intact_prefix(trace):
    c = chunk(trace, 1001, 3)
    data = c.read_bytes()
    c.write_bytes(data[: 4096 + 4 * 32 + 11])  # 4 of its 10 records survive
    proc = import_quietly(trace)
    assert len(warnings(proc)) == 1 and "damaged" in warnings(proc)[0]
    con = store.open_trace(trace)
    assert q(con, "SELECT count(*) FROM app_events") == [(THREADS * PER_THREAD - 6,)]
    rows = lost_rows(con)
    assert [(r[1], r[2]) for r in rows] == [("raw/app-1000-1001-3.osl", 6)]
    assert rows[0][3].startswith("truncated")


def test_region_whose_end_was_lost_ends_with_its_thread(trace):
    last = chunk(trace, 1001, PER_THREAD // CHUNK)  # the thread's last 2 records: release, outer end
    last.write_bytes(last.read_bytes()[: 4096 + 32])
    import_quietly(trace)
    con = store.open_trace(trace)
    rows = q(con, "SELECT r.name, r.begin_ns, r.end_ns, t.end_ns FROM regions r JOIN threads t USING (tid) "
                  "WHERE NOT r.complete")
    assert rows == [("outer", expected_ns(1, ITERATIONS - 1, 0), rows[0][3], rows[0][3])]
    assert q(con, "SELECT count(*) FROM regions WHERE complete") == [(THREADS * ITERATIONS * 2 - 1,)]


def test_flipped_bytes_lose_one_record(trace):
    c = chunk(trace, 1000, 5)
    data = bytearray(c.read_bytes())
    data[4096 + 2 * 32 + 20] ^= 0x5A
    c.write_bytes(bytes(data))
    proc = import_quietly(trace)
    assert len(warnings(proc)) == 1
    con = store.open_trace(trace)
    assert q(con, "SELECT count(*) FROM app_events") == [(THREADS * PER_THREAD - 1,)]
    assert [(r[1], r[2]) for r in lost_rows(con)] == [("raw/app-1000-1000-5.osl", 1)]


def test_missing_chunk_is_counted_from_meta(trace):
    chunk(trace, 1001, 7).unlink()
    proc = import_quietly(trace)
    assert len(warnings(proc)) == 1 and "app-1000-1001-7.osl" in warnings(proc)[0]
    con = store.open_trace(trace)
    assert q(con, "SELECT count(*) FROM app_events") == [(THREADS * PER_THREAD - CHUNK,)]
    rows = lost_rows(con)
    assert [(r[1], r[2]) for r in rows] == [("raw/app-1000-1001-7.osl", CHUNK)]
    assert "missing" in rows[0][3]


def test_missing_chunk_without_meta_is_found_by_its_sequence_gap(trace):
    (trace / "meta.json").unlink()
    chunk(trace, 1000, 2).unlink()
    import_quietly(trace)
    con = store.open_trace(trace)
    rows = lost_rows(con)
    assert [(r[1], r[2]) for r in rows] == [("raw/app-1000-1000-2.osl", None)]


def test_corrupt_meta_json(trace):
    (trace / "meta.json").write_text('{"command": ["x"], "pid": 10')
    proc = import_quietly(trace)
    assert len(warnings(proc)) == 1 and "meta.json" in warnings(proc)[0]
    con = store.open_trace(trace)
    # the raw chunks carry everything that matters: clock pairs in their headers, names, threads
    assert q(con, "SELECT count(*) FROM app_events") == [(THREADS * PER_THREAD,)]
    assert q(con, "SELECT min(ts) FROM app_events") == [(expected_ns(0, 0, 0),)]
    assert q(con, "SELECT count(*) FROM threads") == [(THREADS,)]
    assert [r[1] for r in lost_rows(con)] == ["meta.json"]


def test_garbage_chunk_and_unreadable_header(trace):
    (trace / "raw" / "app-1000-1000-99.osl").write_bytes(b"garbage" * 20)
    proc = import_quietly(trace)
    assert len(warnings(proc)) == 1
    con = store.open_trace(trace)
    assert q(con, "SELECT count(*) FROM app_events") == [(THREADS * PER_THREAD,)]


@pytest.mark.parametrize("command", [["import"], ["sql", None, "SELECT 1"], ["export", None, "--chrome", "x.json"]])
def test_not_a_trace_is_one_line_error_exit_2(tmp_path, command):
    (tmp_path / "d").mkdir()
    args = [str(tmp_path / "d") if a is None else a for a in command]
    if args == ["import"]:
        args.append(str(tmp_path / "d"))
    proc = run_oslens(*args, check=False, cwd=tmp_path)
    assert proc.returncode == 2
    assert len(proc.stderr.strip().splitlines()) == 1
    assert "not an oslens trace" in proc.stderr


def test_unwritable_trace_is_imported_in_memory(trace, monkeypatch):
    from oslens.store import importer

    def refuse(*_a, **_k):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(importer, "write_tables", refuse)
    con = store.open_trace(trace, quiet=True)
    assert q(con, "SELECT count(*) FROM regions") == [(THREADS * ITERATIONS * 2,)]
    assert not (trace / "tables").exists()


# ---------------------------------------------------------------- oslens sql


def test_sql_formats(trace):
    out = run_oslens("sql", trace, "SELECT name, count(*) AS n FROM regions GROUP BY 1 ORDER BY 1", "--format", "csv")
    assert list(csv.reader(io.StringIO(out.stdout))) == [["name", "n"], ["inner", "24"], ["outer", "24"]]
    out = run_oslens("sql", trace, "SELECT name, count(*) AS n FROM regions GROUP BY 1 ORDER BY 1", "--format", "json")
    assert json.loads(out.stdout) == [{"name": "inner", "n": 24}, {"name": "outer", "n": 24}]
    out = run_oslens("sql", trace, "SELECT payload FROM app_events WHERE kind = 'event' LIMIT 1", "-f", "json")
    assert json.loads(out.stdout) == [{"payload": b"payload!".hex()}]
    out = run_oslens("sql", trace, "SELECT name, count(*) AS n FROM regions GROUP BY 1 ORDER BY 1")
    assert "inner" in out.stdout and "outer" in out.stdout and "(2 rows)" in out.stdout
    tables = run_oslens("sql", trace, "--tables", "-f", "csv").stdout
    assert "regions,48" in tables and "switches,0" in tables
    bad = run_oslens("sql", trace, "SELECT nope FROM regions", check=False)
    assert bad.returncode == 1 and len(bad.stderr.strip().splitlines()) == 1


def test_sql_shows_the_columns_that_fit_the_terminal_and_names_the_rest(trace):
    """A wide result is not squeezed into one-character columns: the leading columns that fit are
    shown whole and the line after the table names the others (issue 33); a pipe gets them all."""
    query = "SELECT tid, name, begin_ns, end_ns, duration_ns, depth, complete FROM regions ORDER BY begin_ns LIMIT 10"
    env = {**os.environ, "COLUMNS": "60"}
    out = run_oslens("sql", trace, query, env=env).stdout
    lines = out.splitlines()
    assert all(len(line) <= 60 for line in lines), out
    header = lines[1]
    assert "tid" in header and "name" in header and "complete" not in header
    note = out.split("columns not shown", 1)
    assert len(note) == 2 and "complete" in note[1], out
    piped = run_oslens("sql", trace, query, env={k: v for k, v in os.environ.items() if k != "COLUMNS"}).stdout
    assert "complete" in piped.splitlines()[1] and "not shown" not in piped


def test_sql_uses_the_newest_trace_by_default(tmp_path):
    synthetic.write_trace(tmp_path / "traces" / "a", threads=1, iterations=3)
    out = run_oslens("sql", "SELECT count(*) AS n FROM regions", "-f", "csv", cwd=tmp_path)
    assert out.stdout.splitlines() == ["n", "6"]


# ---------------------------------------------------------------- export


def test_perfetto_export_parses_back_with_the_expected_tracks(trace, tmp_path):
    out = tmp_path / "t.pftrace"
    run_oslens("export", trace, "--perfetto", out)
    packets = perfetto.decode_trace(out.read_bytes())
    tracks = [p["track"] for p in packets if "track" in p]
    threads = {t["thread"]["tid"]: t for t in tracks if "thread" in t}
    assert set(threads) == {1000, 1001}
    assert threads[1001]["thread"]["name"] == "worker-1"
    assert any(t.get("process", {}).get("pid") == 1000 for t in tracks)
    counters = [t for t in tracks if t.get("counter")]
    assert [c["name"] for c in counters] == ["iterations"]
    sync_tracks = {t["uuid"] for t in tracks if t.get("name") == "sync waits"}
    assert len(sync_tracks) == 2
    events = [p for p in packets if "event" in p]
    assert all(p["seq"] == 1 for p in events) and events[0]["flags"] == 1
    per_track: dict = {}
    for p in events:
        per_track.setdefault(p["event"]["track"], []).append(p)
    for tid, t in threads.items():
        evs = per_track[t["uuid"]]
        begins = [p for p in evs if p["event"]["type"] == perfetto.SLICE_BEGIN]
        ends = [p for p in evs if p["event"]["type"] == perfetto.SLICE_END]
        assert len(begins) == len(ends) == ITERATIONS * 2
        # properly nested: depth never negative, back to zero at the end
        depth = 0
        for p in evs:
            depth += 1 if p["event"]["type"] == perfetto.SLICE_BEGIN else -1
            assert depth >= 0
        assert depth == 0
        assert begins[0]["timestamp"] == expected_ns(tid - 1000, 0, 0)
        assert [p["event"]["name"] for p in begins[:2]] == ["outer", "inner"]
    values = [p["event"]["counter"] for p in per_track[counters[0]["uuid"]]]
    assert sorted(values) == sorted(list(range(ITERATIONS)) * THREADS)


def test_chrome_export_loads_with_the_expected_tracks(trace, tmp_path):
    out = tmp_path / "t.json"
    run_oslens("export", trace, "--chrome", out)
    doc = json.loads(out.read_text())
    evs = doc["traceEvents"]
    names = {(e["pid"], e["tid"]): e["args"]["name"] for e in evs if e["ph"] == "M" and e["name"] == "thread_name"}
    assert names[(1000, 1000)] == "main" and names[(1000, 1001)] == "worker-1"
    slices = [e for e in evs if e["ph"] == "X" and e["cat"] == "region"]
    assert len(slices) == THREADS * ITERATIONS * 2
    outer = [e for e in slices if e["name"] == "outer" and e["tid"] == 1000][0]
    assert outer["ts"] == expected_ns(0, 0, 0) / 1000 and outer["dur"] == 0.1
    assert len([e for e in evs if e["ph"] == "C"]) == THREADS * ITERATIONS


def test_export_needs_a_format(trace):
    proc = run_oslens("export", trace, check=False)
    assert proc.returncode == 2 and "--perfetto" in proc.stderr


# ---------------------------------------------------------------- a real recorded program


@pytest.fixture(scope="module")
def cases(compile_c):
    return compile_c("recorder_cases.c")


def record(tmp_path, program, *args, env=None, extra=()):
    trace = tmp_path / "trace"
    proc = run_oslens("record", "--no-kernel", "-f", "-o", trace, *extra, "--", program, *args, env=env)
    return trace, proc


def test_recorded_program_is_imported_after_recording(tmp_path, cases):
    trace, proc = record(tmp_path, cases, "threads", 3, 50)
    assert (trace / "tables" / "manifest.json").is_file()  # oslens record imported it
    con = store.open_trace(trace)
    assert q(con, "SELECT name, count(*), min(depth), max(depth), bool_and(complete) FROM regions GROUP BY 1") == [
        ("step", 150, 0, 0, True)]
    assert q(con, "SELECT count(*) FROM app_events WHERE kind = 'event' AND instrument = 'payload-event' "
                  "AND payload = '0123456789abcdefghi\\x00'::BLOB") == [(150,)]
    assert q(con, "SELECT count(*), min(elapsed_ns) >= 0 FROM timers WHERE name = 'event-timer'") == [(150, True)]
    workers = q(con, "SELECT name FROM threads WHERE tid <> pid ORDER BY name")
    assert workers == [("worker-0",), ("worker-1",), ("worker-2",)]
    # the store's times are dump's times (one clock conversion), event for event
    dumped = sorted(r["ts"] for r in dump(trace) if r["kind"] == "event")
    assert [r[0] for r in q(con, "SELECT ts FROM app_events WHERE kind = 'event' ORDER BY ts")] == dumped
    # per-thread order is time order, and every region lies inside its thread's lifetime
    assert q(con, """SELECT count(*) FROM regions r JOIN threads t USING (tid)
                     WHERE r.begin_ns < t.start_ns OR r.end_ns > t.end_ns""") == [(0,)]
    last: dict = {}
    for tid, ts in q(con, "SELECT tid, ts FROM app_events"):  # stored order: per thread, as recorded
        assert ts >= last.get(tid, 0)
        last[tid] = ts


def test_recorded_nesting_and_durations(tmp_path, cases):
    trace, _ = record(tmp_path, cases, "nested")
    con = store.open_trace(trace)
    rows = q(con, "SELECT name, depth, duration_ns FROM regions ORDER BY begin_ns")
    assert [(r[0], r[1]) for r in rows] == [("outer", 0), ("inner", 1), ("inner", 1), ("inner", 1)]
    assert all(r[2] >= 1_000_000 for r in rows[1:])  # usleep(1000) inside each
    assert rows[0][2] >= sum(r[2] for r in rows[1:])


def test_recorded_drops_are_in_lost_and_pauses_in_pauses(tmp_path, cases):
    env = dict(os.environ, OSLENS_BUFFER_RECORDS="100")
    trace, _ = record(tmp_path, cases, "flood", 250, env=env)
    con = store.open_trace(trace)
    dropped = json.loads((trace / "meta.json").read_text())["lost_events"]
    assert dropped >= 150  # the program's 250 events into 100 slots (the recorder may use a slot itself)
    assert q(con, "SELECT source, sum(count) FROM lost GROUP BY 1") == [("app", dropped)]
    assert q(con, "SELECT sum(lost_events) FROM threads") == [(dropped,)]
    trace2 = tmp_path / "blocking"
    shutil.rmtree(trace, ignore_errors=True)
    run_oslens("record", "--no-kernel", "-f", "-o", trace2, "--on-full", "block", "--", cases, "flood", 250, env=env)
    con = store.open_trace(trace2)
    assert q(con, "SELECT count(*), bool_and(duration_ns >= 0), bool_and(end_ns - start_ns = duration_ns) "
                  "FROM pauses") == [(2, True, True)]
    payloads = [int.from_bytes(r[0], "little") for r in
                q(con, "SELECT payload FROM app_events WHERE kind = 'event' ORDER BY ts")]
    assert payloads == list(range(250))


def test_record_no_import_then_import(tmp_path, cases):
    trace = tmp_path / "t"
    run_oslens("record", "--no-kernel", "--no-import", "-o", trace, "--", cases, "threads", 1, 5)
    assert not (trace / "tables").exists()
    proc = run_oslens("import", trace)
    assert "imported" in proc.stderr and (trace / "tables" / "regions.parquet").is_file()


def test_app_and_kernel_events_share_one_time_axis(tmp_path, cases):
    """On a real program recorded with the kernel collector: every application record of a
    thread falls inside a time when the kernel says that thread held a CPU (records are written
    by running code), and the threads table merges both sides."""
    trace = tmp_path / "k"
    run_oslens("record", "-f", "-o", trace, "--", cases, "threads", 2, 200)
    con = store.open_trace(trace)
    if q(con, "SELECT count(*) FROM cpu_slices") == [(0,)]:
        pytest.skip("the kernel collector recorded nothing here (no privilege or not built)")
    slack = 50_000  # ns: clock fit error and the collector's switch timestamps
    outside = q(con, f"""SELECT count(*) FROM app_events e WHERE e.kind <> 'clock_pair' AND NOT EXISTS (
                         SELECT 1 FROM cpu_slices s WHERE s.tid = e.tid
                         AND e.ts BETWEEN s.start_ns - {slack} AND s.end_ns + {slack})""")
    assert outside == [(0,)]
    assert q(con, "SELECT count(*) FROM threads WHERE source = 'app+kernel'") == [(3,)]
    assert q(con, "SELECT bool_and(is_traced) FROM threads WHERE source <> 'kernel'") == [(True,)]
    # ordered merge of both sides on one axis: a worker's first region begins after the kernel
    # saw that worker first run
    first = q(con, """SELECT min(r.begin_ns) >= min(s.start_ns) - 50000 FROM regions r
                      JOIN cpu_slices s USING (tid) GROUP BY tid""")
    assert first and all(ok for (ok,) in first)


def test_a_failing_importer_extension_costs_only_its_own_columns(trace, monkeypatch, capsys):
    from oslens.store import import_extensions

    def broken(tables, context):
        tables["regions"] = None  # half-done work must not survive
        raise RuntimeError("boom")

    monkeypatch.setattr(import_extensions, "EXTENSIONS", (("oslens_test_broken_ext", broken),))
    store.import_trace(trace, quiet=True)
    err = capsys.readouterr().err
    assert err.count("warning") == 1 and "boom" in err
    con = store.open_trace(trace)
    assert q(con, "SELECT count(*) FROM regions") == [(THREADS * ITERATIONS * 2,)]
    assert q(con, "SELECT value FROM meta WHERE key = 'store.extension_error.oslens_test_broken_ext'") == [
        ("RuntimeError: boom",)]
