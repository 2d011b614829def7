"""A flight-recorder snapshot's report opens with what the trigger's thread did just before it
(analysis/trigger_window.py, issue 32): tests/c/flight_stall.c for 3 s, one region slowed by a
100 ms nanosleep at 1.5 s, the trigger `region:work>95ms`, then `oslens snapshot` (a trigger
naming no thread). Each figure is held to the trace's own tables and the program's own log."""

import json
import subprocess
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from conftest import OSLENS, run_oslens

MS = 1_000_000


def _query(trace: Path, sql: str, params=None):
    from oslens import store

    con = store.open_trace(trace, quiet=True)
    try:
        return con.execute(sql, params or []).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def recording(compile_c, tmp_path_factory):
    prog = compile_c("flight_stall.c")
    d = tmp_path_factory.mktemp("flight_report")
    trace, log, mark = d / "t", d / "log", d / "mark"
    proc = subprocess.Popen([*OSLENS, "record", "--flight", "--ring-mb", "4", "--trigger", "region:work>95ms", "-o", trace,
                             "--", prog, log, "4", "1.5", mark], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    asked = False
    while proc.poll() is None:
        if not asked and mark.exists():
            run_oslens("snapshot", trace)
            asked = True
        time.sleep(0.05)
    _, err = proc.communicate()
    assert proc.returncode == 0 and asked, err
    stall = next(int(line.split()[1]) for line in log.read_text().splitlines() if line.startswith("stall"))
    begin, end = next(tuple(map(int, line.split()[1:])) for line in log.read_text().splitlines()
                      if line.split()[0] == str(stall))
    snaps = {}
    for s in sorted(trace.glob("snapshot-*")):
        t = json.loads((s / "meta.json").read_text())["flight"]["trigger"]
        if t["spec"] == "SIGUSR2" or (t["spec"].startswith("region:") and abs(t["begin_ns"] - begin) < MS):
            snaps[t["spec"]] = (s, t)
    assert set(snaps) == {"region:work>95ms", "SIGUSR2"}, err
    return snaps, (begin, end)


def _window_table(snap: Path) -> list[dict]:
    out = run_oslens("report", snap).stdout
    assert out.index("Before the trigger") < out.index("Findings")
    return pq.read_table(snap / "analysis" / "report_trigger_window.parquet").to_pylist()


def _off_cpu_ns(snap: Path, tid: int, lo: int, hi: int) -> int:
    """The thread's time off a CPU in [lo, hi], from its CPU slices (the oracle for the states' sum)."""
    (on,) = _query(snap, "SELECT coalesce(sum(least(end_ns, ?) - greatest(start_ns, ?)), 0) FROM cpu_slices "
                         "WHERE tid = ? AND end_ns > ? AND start_ns < ?", [hi, lo, tid, lo, hi])[0]
    return (hi - lo) - int(on)


def test_a_slow_regions_snapshot_explains_the_region_with_its_sleep(recording):
    (snap, trig), (begin, end) = recording[0]["region:work>95ms"], recording[1]
    rows = _window_table(snap)
    window = [r for r in rows if r["what"] == "window"]
    assert window == [{"what": "window", "name": "region:work>95ms", "tid": trig["tid"], "ns": trig["t_ns"] - trig["begin_ns"],
                       "count": 1, "bytes": None}]
    # the trigger's interval is the region's, as the program timed it itself
    assert abs(window[0]["ns"] - (end - begin)) < MS
    lo, hi = trig["begin_ns"], trig["t_ns"]
    states = {r["name"]: r["ns"] for r in rows if r["what"] == "state"}
    assert sum(states.values()) == hi - lo  # every nanosecond of the window in exactly one state
    off = sum(states.get(s, 0) for s in ("sleeping", "preempted", "wakeup_latency", "io_wait", "sync_wait"))
    assert abs(off - _off_cpu_ns(snap, trig["tid"], lo, hi)) < 50_000
    assert states["sleeping"] > 0
    # the tasks that held its CPU account for exactly its time waiting for one
    assert sum(r["ns"] for r in rows if r["what"] == "cpu_holder") == states.get("preempted", 0)
    calls = {r["name"]: r for r in rows if r["what"] == "syscall"}
    assert calls["clock_nanosleep"]["count"] == 1 and calls["clock_nanosleep"]["ns"] >= 100 * MS
    (n,) = _query(snap, "SELECT count(*) FROM syscalls WHERE tid = ? AND start_ns < ? AND end_ns > ?", [trig["tid"], hi, lo])[0]
    assert sum(r["count"] for r in calls.values()) == n


def test_a_snapshot_asked_for_looks_at_every_thread_for_the_last_second(recording):
    snap, trig = recording[0]["SIGUSR2"]
    rows = _window_table(snap)
    window = [r for r in rows if r["what"] == "window"]
    assert "tid" not in trig
    meta = json.loads((snap / "meta.json").read_text())["flight"]
    lo = max(trig["t_ns"] - 1_000_000_000, meta["complete_window"][0] or 0)
    assert window == [{"what": "window", "name": "SIGUSR2", "tid": None, "ns": trig["t_ns"] - lo, "count": 1, "bytes": None}], \
        (window, _query(snap, "SELECT tid, name, is_oslens FROM threads WHERE is_traced"))
    states = {r["name"]: r["ns"] for r in rows if r["what"] == "state"}
    # the program's one thread, from the window's start to its end in the snapshot (the threads
    # table's: its last record, which a thread inside the recorder at T, rotating a chunk, made
    # before T): each of its nanoseconds once
    (start, end) = _query(snap, "SELECT start_ns, end_ns FROM threads WHERE is_traced AND NOT is_oslens")[0]
    assert sum(states.values()) == min(trig["t_ns"], end) - max(lo, start), (rows, trig, meta["complete_window"], start, end)
    assert states["computation"] > 0


def test_a_trace_that_is_no_snapshot_has_no_trigger_section(recording):
    snap, _ = recording[0]["SIGUSR2"]
    out = run_oslens("report", snap.parent).stdout
    assert "Before the trigger" not in out
    assert pq.read_table(snap.parent / "analysis" / "report_trigger_window.parquet").num_rows == 0
