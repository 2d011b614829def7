"""`oslens record -p PID --flight` (issues 31 and 32; docs/flight.md, "Attaching"): the flight
recorder on a program that is already running. tests/c/flight_stall.c, built with oslens.h and
started outside oslens (its instruments dormant), runs 14 s of numbered regions, one slowed by a
100 ms nanosleep at 5 s; it is attached with a 4 MiB ring and the trigger `region:work>95ms`,
then SIGUSR2 and `oslens snapshot DIR` ask for two more snapshots, and --duration detaches it
while it runs on. Every snapshot is held to the program's own log; no assertion is on a timing."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import OSLENS, run_oslens
from oslens.capture import instruments
from test_flight import RING_MB, STAGE_BYTES, THRESHOLD_NS, _du, _flight, _query, _regions_log, _snapshots, _wait_for
from test_kernel_collector import COLLECTOR
from test_attach import _wait_attached

pytestmark = [pytest.mark.skipif(not COLLECTOR.exists(), reason="oslens-collector is not built (run make)"),
              pytest.mark.skipif(os.geteuid() != 0, reason="attaching to kernel tracepoints needs root here")]
SECONDS, STALL_AT, DURATION = 14, 5, 8


def _word(pid: int) -> int:
    """The program's activation word (crates/recorder/src/lib.rs)."""
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        mem.seek(instruments.find(pid)["osl__inactive"])
        return int.from_bytes(mem.read(4), "little")


def _seqs(snapshot: Path) -> list[int]:
    """The region numbers of the snapshot's "seq" events, by name: the program names its events
    (osl_event_name) at its start, while dormant, and the library keeps those names for the
    names chunk an attach opens."""
    rows = _query(snapshot, "SELECT payload FROM app_events WHERE instrument = 'seq' ORDER BY ts")
    return [int.from_bytes(bytes(p), "little") for (p,) in rows]


@pytest.fixture(scope="module")
def attached(compile_c, tmp_path_factory):
    prog = compile_c("flight_stall.c")
    d = tmp_path_factory.mktemp("flight_attach")
    trace, log = d / "t", d / "log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OSLENS_")}
    program = subprocess.Popen([str(prog), str(log), str(SECONDS), str(STALL_AT)], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True, env=env)
    time.sleep(0.3)  # past its start-up: the attach finds it running
    assert _word(program.pid) == instruments.NOT_TRACING  # dormant
    rec = subprocess.Popen([*OSLENS, "record", "-p", str(program.pid), "--flight", "--ring-mb", str(RING_MB),
                            "--trigger", "region:work>95ms", "--duration", f"{DURATION}s", "--events", "sched,syscalls",
                            "--no-import", "-o", trace], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _wait_attached(rec)
    samples, asked = [], []
    first = trace / "snapshot-001" / "meta.json"
    while rec.poll() is None:
        samples.append(_du(trace / "raw"))
        if not asked and first.exists() and _wait_for(first, 5, rec):
            time.sleep(0.5)
            rec.send_signal(signal.SIGUSR2)
            asked.append("SIGUSR2")
        elif asked == ["SIGUSR2"] and len(_snapshots(trace)) >= 2 and _wait_for(_snapshots(trace)[-1] / "meta.json", 5, rec):
            time.sleep(0.5)
            run_oslens("snapshot", trace)
            asked.append("snapshot")
        time.sleep(0.05)
    _, err = rec.communicate()
    running_after = program.poll() is None
    word_after = _word(program.pid) if running_after else None
    out, perr = program.communicate(timeout=60)
    return {"trace": trace, "log": log, "du": samples, "stderr": err, "asked": asked, "rc": rec.returncode,
            "program": (program.returncode, out, perr), "running_after": running_after, "word_after": word_after}


def _meta(trace: Path) -> dict:
    return json.loads((trace / "meta.json").read_text())


def test_the_attach_detaches_after_its_duration_and_the_program_runs_on_dormant(attached):
    assert attached["rc"] == 0, attached["stderr"]
    assert attached["running_after"] and attached["word_after"] == instruments.NOT_TRACING
    assert attached["program"] == (0, "", "")  # its output is what it is without oslens
    regions, stall = _regions_log(attached["log"])
    detach = _meta(attached["trace"])["attach"]["detach_ns"]
    assert stall is not None and max(e for _, e in regions.values()) > detach  # it went on after the detach
    assert sorted(regions) == list(range(len(regions)))
    assert not (attached["trace"] / ".attach-lock").exists() and not (attached["trace"] / "flight.pid").exists()


def test_the_stall_sigusr2_and_oslens_snapshot_each_give_a_snapshot(attached):
    assert attached["asked"] == ["SIGUSR2", "snapshot"]
    specs = [_flight(s)["trigger"]["spec"] for s in _snapshots(attached["trace"])]
    assert specs.count("SIGUSR2") == 2  # `oslens snapshot DIR` sends SIGUSR2 to the recording
    # a region preempted as long as the stall on this shared VM fires too: held to the log
    regions, stall = _regions_log(attached["log"])
    woken = _meta(attached["trace"])["attach"]["instruments_woken_ns"][1]
    slow = lambda margin: sum(1 for b, e in regions.values() if b >= woken and e - b > THRESHOLD_NS + margin)
    assert 1 <= slow(500_000) <= specs.count("region:work>95ms") <= slow(-500_000)
    stalled = [s for s in _snapshots(attached["trace"]) if _flight(s)["trigger"]["spec"].startswith("region:") and stall in _seqs(s)]
    assert len(stalled) == 1
    main = _meta(attached["trace"])["flight"]
    assert len(main["snapshots"]) == len(specs) and sum(o["records"] for o in main["overwritten"]) > 0
    assert f"{len(specs)} snapshots" in attached["stderr"]


def test_every_snapshot_holds_its_window_exactly(attached):
    regions, _ = _regions_log(attached["log"])
    earlier = -1
    for snap in _snapshots(attached["trace"]):
        start, cut = _flight(snap)["complete_window"]
        assert start is not None and start < cut
        seqs = _seqs(snap)
        assert seqs == list(range(seqs[0], seqs[-1] + 1)) and seqs[0] > earlier  # no hole, no repeat
        earlier = seqs[-1]
        # every region the program logged inside the window (1 ms in from either end) is there once
        inside = [i for i, (b, e) in regions.items() if b >= start + 1_000_000 and e <= cut - 1_000_000]
        assert inside and set(inside) <= set(seqs)
        app = _query(snap, "SELECT count(*) FROM regions WHERE name = 'work'")[0][0]
        assert app >= len(inside)


def test_the_stall_snapshot_holds_the_sleep_that_made_it_slow(attached):
    _, stall = _regions_log(attached["log"])
    snap = next(s for s in _snapshots(attached["trace"]) if _flight(s)["trigger"]["spec"].startswith("region:") and stall in _seqs(s))
    slow = _query(snap, "SELECT tid, begin_ns, end_ns FROM regions WHERE name = 'work' AND duration_ns >= 100000000")
    sleeps = [d for tid, b, e in slow for (d,) in _query(snap, f"SELECT end_ns - start_ns FROM syscalls WHERE tid = {tid} "
                                                             f"AND name LIKE '%nanosleep%' AND start_ns >= {b} AND end_ns <= {e}")]
    assert len(sleeps) == 1 and sleeps[0] >= 100_000_000
    # the state dump at the attach comes with every snapshot: the threads it found, named
    threads = _query(snap, "SELECT count(*), count(name) FROM attach_threads")
    assert threads[0][0] >= 1 and threads[0][0] == threads[0][1], threads


def test_the_raw_folder_stays_within_the_ring(attached):
    streams = 1 + os.cpu_count()  # the program's one thread and each CPU's collector stream
    chunk = (RING_MB << 20) // 4
    bound = streams * ((RING_MB << 20) + chunk + STAGE_BYTES) + (1 << 20)
    assert len(attached["du"]) > 20 and max(attached["du"]) <= bound, (max(attached["du"]), bound)
    settings = _meta(attached["trace"])["settings"]
    assert settings["on_full"] == "rotate" and settings["kernel_chunk_records"] == chunk // 32


def test_sigkill_of_oslens_leaves_the_program_running_dormant_and_the_next_attach_works(compile_c, tmp_path):
    prog = compile_c("flight_stall.c")
    env = {k: v for k, v in os.environ.items() if not k.startswith("OSLENS_")}
    program = subprocess.Popen([str(prog), str(tmp_path / "log"), "8", "1000"], env=env)
    try:
        time.sleep(0.3)
        killed = tmp_path / "killed"
        rec = subprocess.Popen([*OSLENS, "record", "-p", str(program.pid), "--flight", "--ring-mb", str(RING_MB), "--no-import",
                                "-o", killed], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait_attached(rec)
        end = time.monotonic() + 30
        while _word(program.pid) != 0 and time.monotonic() < end:
            time.sleep(0.02)
        assert _word(program.pid) == 0, "never woken"
        time.sleep(1.0)  # the 4 MiB ring goes round
        rec.kill()
        rec.wait()
        # the library's helper sees the attacher's lock gone and puts the instruments to sleep
        while _word(program.pid) != instruments.NOT_TRACING and time.monotonic() < end:
            time.sleep(0.02)
        assert _word(program.pid) == instruments.NOT_TRACING and program.poll() is None
        again = tmp_path / "again"
        run_oslens("record", "-p", str(program.pid), "--duration", "0.5s", "--events", "sched", "--no-import", "-o", again)
        assert program.wait(timeout=60) == 0
    finally:
        if program.poll() is None:
            program.kill()
    # the killed attach's chunks rotated (several sequence numbers), the next attach's did not
    seqs = lambda t: sorted(int(p.stem.rsplit("-", 1)[1]) for p in (t / "raw").glob(f"app-{program.pid}-*.osl"))
    assert seqs(killed)[-1] >= 2 and seqs(again) == [0]
    run_oslens("import", killed)
