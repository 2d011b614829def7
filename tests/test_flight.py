"""The flight recorder (docs/flight.md): `oslens record --flight` keeps a bounded ring of every
thread and CPU, and a trigger saves the last window as a normal trace directory. One recording of
tests/c/flight_stall.c (8 s of numbered regions, one of them slowed by a 100 ms nanosleep at 3 s)
with a 4 MiB ring, the trigger `region:work>95ms` (on this shared 2-CPU VM a region is now and
then preempted for 50-60 ms, which would rightly fire a 50 ms trigger: every region snapshot is
held to the program's own log of slow regions), and later an `oslens snapshot DIR`."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import OSLENS, run_oslens

RING_MB = 4
STAGE_BYTES = 512 << 10  # an open app chunk's staging ring (crates/recorder/src/stage.rs)


def _wait_for(path: Path, timeout: float, proc=None) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if path.exists() and json.loads(path.read_text()).get("flight", {}).get("complete"):
            return True
        if proc is not None and proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def _du(path: Path) -> int:
    out = subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else 0


@pytest.fixture(scope="module")
def flight(compile_c, tmp_path_factory):
    prog = compile_c("flight_stall.c")
    d = tmp_path_factory.mktemp("flight")
    trace, log, mark = d / "t", d / "log", d / "mark"
    proc = subprocess.Popen([*OSLENS, "record", "--flight", "--ring-mb", str(RING_MB), "--trigger", "region:work>95ms",
                             "-o", trace, "--", prog, log, "8", "3", mark], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    samples = []
    first = trace / "snapshot-001" / "meta.json"
    asked = False
    while proc.poll() is None:
        samples.append(_du(trace / "raw"))
        if not asked and first.exists() and _wait_for(first, 5, proc):
            time.sleep(1.5)  # a second trigger well after the first snapshot
            run_oslens("snapshot", trace)
            asked = True
        time.sleep(0.05)
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    return {"trace": trace, "log": log, "du": samples, "stderr": err, "asked": asked}


def _regions_log(log: Path) -> tuple[dict[int, tuple[int, int]], int]:
    regions, stall = {}, None
    for line in log.read_text().splitlines():
        parts = line.split()
        if parts[0] == "stall":
            stall = int(parts[1])
        else:
            regions[int(parts[0])] = (int(parts[1]), int(parts[2]))
    return regions, stall


def _query(trace: Path, sql: str):
    from oslens import store

    con = store.open_trace(trace, quiet=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def _seqs(snapshot: Path) -> list[int]:
    rows = _query(snapshot, "SELECT payload FROM app_events WHERE instrument = 'seq' ORDER BY ts")
    return [int.from_bytes(bytes(p), "little") for (p,) in rows]


def _flight(snapshot: Path) -> dict:
    return json.loads((snapshot / "meta.json").read_text())["flight"]


THRESHOLD_NS = 95_000_000


def _snapshots(trace: Path) -> list[Path]:
    return sorted(trace.glob("snapshot-*"))


def _stall_snapshot(flight) -> Path:
    """The snapshot the stall triggered: the trigger's region holds the stalled region's number."""
    _, stall = _regions_log(flight["log"])
    found = [s for s in _snapshots(flight["trace"]) if _flight(s)["trigger"]["spec"].startswith("region:") and stall in _seqs(s)]
    assert len(found) == 1
    return found[0]


def test_one_snapshot_per_slow_region_and_one_for_the_request(flight):
    """The stall gives one snapshot; on a loaded machine a region preempted for as long gives its
    own, so the count is held to the program's own log of its regions' durations."""
    trace = flight["trace"]
    assert flight["asked"]
    snaps = _snapshots(trace)
    specs = [_flight(s)["trigger"]["spec"] for s in snaps]
    assert specs.count("SIGUSR2") == 1
    assert specs.count("region:work>95ms") == len(snaps) - 1 >= 1
    main = json.loads((trace / "meta.json").read_text())["flight"]
    assert main["ignored_triggers"] == [] and len(main["snapshots"]) == len(snaps)
    assert sum(o["records"] for o in main["overwritten"]) > 0  # the ring went round
    assert f"{len(snaps)} snapshots" in flight["stderr"]


def test_region_snapshots_match_the_programs_own_log_of_slow_regions(flight):
    specs = [_flight(s)["trigger"]["spec"] for s in _snapshots(flight["trace"])]
    regions, _ = _regions_log(flight["log"])
    slow = lambda margin: sum(1 for b, e in regions.values() if e - b > THRESHOLD_NS + margin)
    assert slow(500_000) <= specs.count("region:work>95ms") <= slow(-500_000)


def test_the_snapshot_holds_the_slow_region_and_the_sleep_that_made_it_slow(flight):
    snap = _stall_snapshot(flight)
    _, stall = _regions_log(flight["log"])
    slow = _query(snap, "SELECT tid, begin_ns, end_ns FROM regions WHERE name = 'work' AND duration_ns >= 100000000")
    sleeps = [_query(snap, f"SELECT end_ns - start_ns FROM syscalls WHERE tid = {tid} AND name LIKE '%nanosleep%' "
                           f"AND start_ns >= {begin} AND end_ns <= {end}") for tid, begin, end in slow]
    assert [s for s in sleeps if s] and all(d >= 100_000_000 for s in sleeps for (d,) in s)
    assert sum(len(s) for s in sleeps) == 1  # the program sleeps once


def test_every_record_inside_the_complete_window_is_there(flight):
    regions, _ = _regions_log(flight["log"])
    for snap in _snapshots(flight["trace"]):
        f = _flight(snap)
        start, cut = f["complete_window"]
        assert start is not None and start < cut  # the ring overwrote older records: the window is published
        seqs = _seqs(snap)
        assert seqs == list(range(seqs[0], seqs[-1] + 1))  # no hole
        # the program's own clock and the trace's agree within far less than a millisecond
        inside = [i for i, (b, e) in regions.items() if b >= start + 1_000_000 and e <= cut - 1_000_000]
        assert set(inside) <= set(seqs)
        assert len([i for i in seqs if i in set(inside)]) == len(inside)
        assert inside or cut - start < 3_000_000  # only a window cut right after the previous snapshot is empty


def test_consecutive_snapshots_do_not_repeat_records(flight):
    seqs = [_seqs(s) for s in _snapshots(flight["trace"])]
    for one, two in zip(seqs, seqs[1:]):
        assert one and two and max(one) < min(two)
    last = _snapshots(flight["trace"])[-1]
    assert _flight(last)["earlier_snapshots"] == [s.name for s in _snapshots(flight["trace"])[:-1]]


def test_the_raw_folder_stays_within_the_ring(flight):
    streams = 1 + os.cpu_count()  # the program's one thread and each CPU's collector stream
    chunk = (RING_MB << 20) // 4
    # per stream: the ring, one chunk opened before the loop's next pass, an open chunk's staging
    # ring; plus names chunks and notes
    bound = streams * ((RING_MB << 20) + chunk + STAGE_BYTES) + (1 << 20)
    assert max(flight["du"]) <= bound, (max(flight["du"]), bound)
    assert len(flight["du"]) > 20


def test_a_snapshot_is_a_normal_trace_and_its_report_opens_with_the_trigger(flight):
    snap = _stall_snapshot(flight)
    out = run_oslens("report", snap).stdout
    head = out[:out.index("program pid")]
    assert f"snapshot {int(snap.name[-3:])}: region:work>95ms fired at" in head and "complete window" in head
    html = (snap / "report.html").read_text()
    assert "region:work&gt;95ms fired at" in html or "region:work>95ms fired at" in html
    lost = _query(snap, "SELECT count(*) FROM lost WHERE reason LIKE 'chunk missing%'")
    assert lost == [(0,)]  # overwritten chunks are not called lost
    run_oslens("export", "--chrome", flight["trace"] / "s1.json", snap)
    assert json.loads((flight["trace"] / "s1.json").read_text())


def test_sigkill_of_oslens_leaves_salvageable_traces(compile_c, tmp_path):
    prog = compile_c("flight_stall.c")
    trace = tmp_path / "t"
    proc = subprocess.Popen([*OSLENS, "record", "--flight", "--ring-mb", str(RING_MB), "--trigger", "region:work>95ms",
                             "-o", trace, "--", prog, tmp_path / "log", "5", "1"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert _wait_for(trace / "snapshot-001" / "meta.json", 30, proc)
    program = json.loads((trace / "meta.json").read_text())["pid"]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    while Path(f"/proc/{program}").exists():  # the program runs on without oslens, to its end
        time.sleep(0.1)
    # nobody trims the ring any more: the thread itself keeps at most 8 chunks (thread.rs ROTATE_KEEP)
    chunks = sorted(int(p.stem.rsplit("-", 1)[1]) for p in (trace / "raw").glob(f"app-{program}-{program}-*.osl"))
    assert chunks[-1] >= 12 and len(chunks) <= 8, chunks
    run_oslens("import", trace)
    run_oslens("import", trace / "snapshot-001")
    assert _query(trace / "snapshot-001", "SELECT count(*) FROM regions WHERE duration_ns >= 95000000") >= [(1,)]


def test_with_overlap_a_snapshot_repeats_what_the_previous_one_holds(compile_c, tmp_path):
    prog = compile_c("flight_stall.c")
    trace = tmp_path / "t"
    proc = subprocess.Popen([*OSLENS, "record", "--flight", "--ring-mb", "16", "--overlap", "--no-import", "-o", trace,
                             "--", prog, tmp_path / "log", "4", "1000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    while not (trace / "flight.pid").exists() and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(1.5)
    for n in (1, 2):
        proc.send_signal(signal.SIGUSR2)
        assert _wait_for(trace / f"snapshot-00{n}" / "meta.json", 10, proc)
        time.sleep(0.3)  # well inside the ring's few seconds
    assert proc.wait() == 0
    for n in (1, 2):
        run_oslens("import", trace / f"snapshot-00{n}")
    one, two = (_seqs(trace / f"snapshot-00{n}") for n in (1, 2))
    assert min(two) <= max(one) < max(two)
    assert _flight(trace / "snapshot-002")["overlap"] is True


def test_a_program_dying_of_a_signal_is_a_trigger(tmp_path):
    trace = tmp_path / "t"
    p = run_oslens("record", "--flight", "--ring-mb", "4", "-o", trace, "--", "sh", "-c", "kill -SEGV $$", check=False)
    assert p.returncode == 128 + signal.SIGSEGV
    assert _flight(trace / "snapshot-001")["trigger"]["spec"] == "exit:SIGSEGV"
    run_oslens("import", trace / "snapshot-001")


@pytest.mark.parametrize("args, says", [
    (["--window", "5s"], "--window is a flight-recorder option: add --flight"),
    (["--flight", "--ring-mb", "2"], "--ring-mb must be at least 4"),
    (["--flight", "--on-full", "drop"], "--on-full cannot be combined with --flight"),
    (["--flight", "--trigger", "region:work>>5"], "--trigger 'region:work>>5'"),
    (["--flight", "--after", "soon"], "argument --after: must be a duration"),
])
def test_bad_flight_flags_are_one_line_errors(tmp_path, args, says):
    p = run_oslens("record", *args, "-o", tmp_path / "t", "--", "true", check=False)
    assert p.returncode == 2 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_snapshot_of_a_directory_without_a_flight_recording_is_a_one_line_error(tmp_path):
    p = run_oslens("snapshot", tmp_path, check=False)
    assert p.returncode == 2 and "no flight recording is running there" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
