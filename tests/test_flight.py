"""The flight recorder (docs/flight.md): `oslens record --flight` keeps a bounded ring of every
thread and CPU, and a trigger saves the last window as a normal trace directory. One recording of
tests/c/flight_stall.c (60 s of numbered regions, 4,000 a second so it costs a few % of a CPU,
two of them slowed by a 100 ms nanosleep at 20 s and 30 s) with a 4 MiB ring, the trigger
`region:work>95ms` (on this shared 2-CPU VM a region is now and then preempted for 50-60 ms,
which would rightly fire a 50 ms trigger: every region snapshot is held to the program's own log
of slow regions), and an `oslens snapshot DIR` at 45 s; `du` of raw/ and the memory of the
recording's processes (/proc) sampled throughout. It runs in the background while the short
tests, first in this file, run (the module takes about 70 s)."""

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from conftest import OSLENS, run_oslens
from oslens_testing.capture import memory_watch

RING_MB = 4
STAGE_BYTES = 512 << 10  # an open app chunk's staging ring (crates/recorder/src/stage.rs)
SECONDS, STALLS, ASK_AT = 60, (20, 30), 45  # the run, its stalls and the `oslens snapshot`, in s from its start
RATE = 4000  # regions a second, 23 records each: the ring goes round about every 1.5 s


def _complete(meta: Path) -> bool:
    try:
        return bool(json.loads(meta.read_text()).get("flight", {}).get("complete"))
    except (OSError, ValueError):
        return False  # not there yet


def _wait_for(path: Path, timeout: float, proc=None) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if _complete(path):
            return True
        if proc is not None and proc.poll() is not None:
            return False
        time.sleep(0.05)
    return False


def _du(path: Path) -> int:
    out = subprocess.run(["du", "-s", "--block-size=1", str(path)], capture_output=True, text=True).stdout.split()
    return int(out[0]) if out else 0


class _LongRun:
    """The 60 s recording, started at once; a thread samples `du` of raw/ every 0.1 s and asks for
    a snapshot at ASK_AT, another imports each snapshot once complete (while the run goes on, so
    the tests that read them wait less), memory_watch samples the processes every 0.5 s."""

    def __init__(self, prog: Path, d: Path):
        self.trace, self.log = d / "t", d / "log"
        env = dict(os.environ, FLIGHT_RATE=str(RATE), FLIGHT_SPIN="100")
        stalls = ",".join(map(str, STALLS))
        self.proc = subprocess.Popen([*OSLENS, "record", "--flight", "--ring-mb", str(RING_MB), "--trigger", "region:work>95ms",
                                      "-o", self.trace, "--", prog, self.log, str(SECONDS), stalls, d / "mark"],
                                     stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
        self.memory = memory_watch.Sampler(self.proc.pid, self.trace)
        self.du, self.asked, self.result, self.imported = [], None, None, set()
        self.threads = [threading.Thread(target=f, daemon=True) for f in (self._watch, self._import)]
        for t in self.threads:
            t.start()

    def _watch(self) -> None:
        start = time.monotonic()
        while self.proc.poll() is None:
            self.du.append(_du(self.trace / "raw"))
            if self.asked is None and time.monotonic() - start >= ASK_AT:
                self.asked = run_oslens("snapshot", self.trace, check=False)
            time.sleep(0.1)

    def _import(self) -> None:
        while True:
            running = self.proc.poll() is None
            for snap in _snapshots(self.trace):
                if snap.name not in self.imported and _complete(snap / "meta.json"):
                    run_oslens("import", snap, check=False)
                    self.imported.add(snap.name)
            if not running:
                return
            time.sleep(0.5)

    def wait(self) -> dict:
        if self.result is None:
            out, err = self.proc.communicate()
            for t in self.threads:
                t.join()
            self.result = {"trace": self.trace, "log": self.log, "du": self.du, "stderr": err, "rc": self.proc.returncode,
                           "asked": self.asked, "memory": self.memory.stop()}
        return self.result


@pytest.fixture(scope="module")
def flight_started(compile_c, tmp_path_factory):
    """The long recording, running; the short tests that ask for it run meanwhile."""
    run = _LongRun(compile_c("flight_stall.c"), tmp_path_factory.mktemp("flight"))
    yield run
    run.wait()  # never left running


@pytest.fixture(scope="module")
def flight(flight_started):
    r = flight_started.wait()
    assert r["rc"] == 0, r["stderr"]
    return r


def _regions_and_stalls(log: Path) -> tuple[dict[int, tuple[int, int]], list[int]]:
    """The program's log: each region's (begin, end) by number, and the stalled regions' numbers."""
    regions, stalls = {}, []
    for line in log.read_text().splitlines():
        parts = line.split()
        if parts[0] == "stall":
            stalls.append(int(parts[1]))
        else:
            regions[int(parts[0])] = (int(parts[1]), int(parts[2]))
    return regions, stalls


def _regions_log(log: Path) -> tuple[dict[int, tuple[int, int]], int | None]:
    """The regions and the first stall (tests/test_flight_attach.py stalls once)."""
    regions, stalls = _regions_and_stalls(log)
    return regions, (stalls[0] if stalls else None)


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


def _stall_snapshots(flight) -> list[Path]:
    """Per stall, the snapshot it triggered: the trigger's region holds the stalled region's number."""
    _, stalls = _regions_and_stalls(flight["log"])
    assert len(stalls) == len(STALLS)
    out = []
    for stall in stalls:
        found = [s for s in _snapshots(flight["trace"]) if _flight(s)["trigger"]["spec"].startswith("region:") and stall in _seqs(s)]
        assert len(found) == 1, (stall, found)
        out += found
    return out


# -- short recordings, run while the long one goes on -------------------------------------------

def test_sigkill_of_oslens_leaves_salvageable_traces(flight_started, compile_c, tmp_path):
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


def _kill_during_a_snapshot(proc, victim: int, trace: Path) -> Path:
    """SIGUSR2 to `oslens record` (proc), then SIGKILL to `victim` as soon as the snapshot holds
    its first app chunk and its meta.json says it has not ended; asked again (a snapshot that
    ended first is not what this is about) up to 5 times. The snapshot killed in."""
    for n in range(1, 6):
        snap = trace / f"snapshot-{n:03d}"
        proc.send_signal(signal.SIGUSR2)
        end = time.monotonic() + 10
        while time.monotonic() < end:
            if not any((snap / "raw").glob("app-*.osl")):
                continue
            try:
                complete = json.loads((snap / "meta.json").read_text())["flight"]["complete"]
            except (OSError, ValueError):
                continue  # being replaced
            if not complete:
                os.kill(victim, signal.SIGKILL)
                return snap
            break
        time.sleep(0.3)
    pytest.fail("5 snapshots each ended before the SIGKILL: none was killed during")


@pytest.mark.parametrize("victim", ["oslens", "program"])
def test_sigkill_during_a_snapshot_leaves_it_readable_and_salvageable(flight_started, compile_c, tmp_path, victim):
    """A 32 MiB ring of a program recording some 2 M records a second: a snapshot copies an open
    chunk of up to 8 MiB, time enough to be killed in. Killing oslens leaves the snapshot incomplete: it imports,
    its regions and events are named (the names are copied first), and its numbered regions run
    without a hole, each in the program's own log. Killing the program lets oslens end the
    snapshot, and its death is a trigger of its own."""
    prog = compile_c("flight_stall.c")
    trace, log = tmp_path / "t", tmp_path / "log"
    proc = subprocess.Popen([*OSLENS, "record", "--flight", "--ring-mb", "32", "--no-import", "-o", trace, "--", prog, log,
                             "2.5", "1000"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=dict(os.environ, FLIGHT_SPIN="100"))
    while not (trace / "flight.pid").exists() and proc.poll() is None:
        time.sleep(0.05)
    time.sleep(1.0)  # the ring goes round (in about 0.5 s)
    program = json.loads((trace / "meta.json").read_text())["pid"]
    snap = _kill_during_a_snapshot(proc, proc.pid if victim == "oslens" else program, trace)
    rc = proc.wait()
    if victim == "oslens":
        assert rc == -signal.SIGKILL and _flight(snap)["complete"] is False
        while Path(f"/proc/{program}").exists():  # it runs on to its end and writes its log
            time.sleep(0.1)
    else:
        assert rc == 128 + signal.SIGKILL and _flight(snap)["complete"] is True
        assert _flight(trace / f"snapshot-{int(snap.name[-3:]) + 1:03d}")["trigger"]["spec"] == "exit:SIGKILL"
    run_oslens("import", snap)
    seqs = _seqs(snap)
    assert len(seqs) > 10_000 and seqs == list(range(seqs[0], seqs[-1] + 1))
    assert _query(snap, "SELECT count(*) FROM regions WHERE name = 'work'")[0][0] >= len(seqs) - 1  # named
    if victim == "oslens":  # regions are numbered from 0: each is in the log if the last one is
        with open(log) as f:
            assert seqs[-1] < sum(1 for line in f if not line.startswith("stall"))


def test_with_overlap_a_snapshot_repeats_what_the_previous_one_holds(flight_started, compile_c, tmp_path):
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


def test_a_program_dying_of_a_signal_is_a_trigger(flight_started, tmp_path):
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
def test_bad_flight_flags_are_one_line_errors(flight_started, tmp_path, args, says):
    p = run_oslens("record", *args, "-o", tmp_path / "t", "--", "true", check=False)
    assert p.returncode == 2 and says in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


def test_snapshot_of_a_directory_without_a_flight_recording_is_a_one_line_error(flight_started, tmp_path):
    p = run_oslens("snapshot", tmp_path, check=False)
    assert p.returncode == 2 and "no flight recording is running there" in p.stderr
    assert len(p.stderr.strip().splitlines()) == 1


def test_a_snapshot_is_a_normal_trace_and_its_report_opens_with_the_trigger(flight_started):
    """On the long recording's first snapshot (a region's: the first stall's, or one preempted as
    long), while the recording goes on."""
    snap = flight_started.trace / "snapshot-001"
    end = time.monotonic() + STALLS[0] + 30
    while snap.name not in flight_started.imported and time.monotonic() < end:  # imported by the run's thread
        time.sleep(0.1)
    assert snap.name in flight_started.imported
    assert _flight(snap)["trigger"]["spec"] == "region:work>95ms"
    out = run_oslens("report", snap).stdout
    head = out[:out.index("program pid")]
    assert f"snapshot {int(snap.name[-3:])}: region:work>95ms fired at" in head and "complete window" in head
    html = (snap / "report.html").read_text()
    assert "region:work&gt;95ms fired at" in html or "region:work>95ms fired at" in html
    lost = _query(snap, "SELECT count(*) FROM lost WHERE reason LIKE 'chunk missing%'")
    assert lost == [(0,)]  # overwritten chunks are not called lost
    run_oslens("export", "--chrome", snap.parent.parent / "s1.json", snap)
    assert json.loads((snap.parent.parent / "s1.json").read_text())


# -- the long recording -------------------------------------------------------------------------

def test_one_snapshot_per_slow_region_and_one_for_the_request(flight):
    """Each stall gives one snapshot; on a loaded machine a region preempted for as long gives its
    own, so the count is held to the program's own log of its regions' durations."""
    trace = flight["trace"]
    assert flight["asked"] is not None and flight["asked"].returncode == 0, flight["asked"]
    snaps = _snapshots(trace)
    specs = [_flight(s)["trigger"]["spec"] for s in snaps]
    assert specs.count("SIGUSR2") == 1
    assert specs.count("region:work>95ms") == len(snaps) - 1 >= len(STALLS)
    main = json.loads((trace / "meta.json").read_text())["flight"]
    assert main["ignored_triggers"] == [] and len(main["snapshots"]) == len(snaps)
    assert sum(o["records"] for o in main["overwritten"]) > 0  # the ring went round
    assert f"{len(snaps)} snapshots" in flight["stderr"]


def test_region_snapshots_match_the_programs_own_log_of_slow_regions(flight):
    specs = [_flight(s)["trigger"]["spec"] for s in _snapshots(flight["trace"])]
    regions, _ = _regions_log(flight["log"])
    slow = lambda margin: sum(1 for b, e in regions.values() if e - b > THRESHOLD_NS + margin)  # noqa: E731
    assert slow(500_000) <= specs.count("region:work>95ms") <= slow(-500_000)


def test_each_stall_snapshot_holds_its_slow_region_and_the_sleep_that_made_it_slow(flight):
    _, stalls = _regions_and_stalls(flight["log"])
    for snap, stall in zip(_stall_snapshots(flight), stalls):
        slow = _query(snap, "SELECT tid, begin_ns, end_ns FROM regions WHERE name = 'work' AND duration_ns >= 100000000")
        sleeps = [_query(snap, f"SELECT end_ns - start_ns FROM syscalls WHERE tid = {tid} AND name LIKE '%nanosleep%' "
                               f"AND start_ns >= {begin} AND end_ns <= {end}") for tid, begin, end in slow]
        assert [s for s in sleeps if s] and all(d >= 100_000_000 for s in sleeps for (d,) in s)
        assert sum(len(s) for s in sleeps) == 1  # the program sleeps once in each stalled region
        assert _flight(snap)["trigger"]["detail"].endswith(f" ms on tid {slow[0][0]}")


def test_the_second_stall_gives_a_second_snapshot_without_the_first_ones_records(flight):
    one, two = _stall_snapshots(flight)
    _, (first, second) = _regions_and_stalls(flight["log"])
    assert two.name > one.name and first not in _seqs(two) and second not in _seqs(one)
    assert set(_seqs(one)).isdisjoint(_seqs(two))
    # the kernel's records too: no context switch (a CPU and an instant) is in both
    switches = [set(_query(s, "SELECT cpu, ts FROM switches")) for s in (one, two)]
    assert all(switches) and switches[0].isdisjoint(switches[1])


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
    assert len(flight["du"]) > 20 * SECONDS // 10


MIB = 1024  # KiB, as /proc gives them
RECORD_ALLOWANCE = 64 * MIB  # `oslens record`: the interpreter, numpy and the modules it imports (38 MiB here)
COLLECTOR_ALLOWANCE = 32 * MIB  # the collector: its binary, heap and the block tracepoints' perf rings' touched pages
# the late half against the early one: the interpreter's allocator keeps freed arenas, the chunk
# pages a thread maps move with its staging ring
GROWTH = {"record": 4 * MIB, "collector": 1 * MIB, "chunks": 256}


def test_peak_memory_of_the_recording_stays_within_the_bound_and_does_not_grow(flight):
    """The processes' own figures (/proc/PID/status, smaps) every 0.5 s: after 40 s none is above
    its bound, and the largest from 40 s to the end is no larger than from 20 s to 40 s, whatever
    the load (the ring went round some 40 times)."""
    samples = [s for s in flight["memory"] if s["record"] and s["collector"] and s.get("program", {}).get("chunks") is not None]
    kernel = json.loads((flight["trace"] / "meta.json").read_text())["kernel"]
    streams = 1 + kernel["cpus"]
    bpf = 1 << (kernel["ring_mib"] * kernel["cpus"] - 1).bit_length()  # the collector's BPF ring, MiB (setup.rs)
    figures = {  # KiB of each sample, and its bound
        # at most every stream's ring read or copied at once (it reads chunks to count what is overwritten)
        "record": (lambda s: s["record"]["VmRSS"], RECORD_ALLOWANCE + streams * RING_MB * MIB),
        # its own kernel buffers (--ring-mib per CPU, not the flight ring): the BPF ring's data pages are mapped twice
        "collector": (lambda s: s["collector"]["VmRSS"], 2 * bpf * MIB + COLLECTOR_ALLOWANCE),
        "chunks": (lambda s: s["program"]["chunks"], RING_MB * MIB // 4 + STAGE_BYTES // 1024 + 1 * MIB),  # + names chunk
    }
    late, early = [s for s in samples if s["t"] > 40], [s for s in samples if 20 <= s["t"] <= 40]
    assert len(late) > 20 and len(early) > 20, [s["t"] for s in samples]
    for name, (kib, bound) in figures.items():
        assert max(map(kib, late)) <= bound, (name, max(map(kib, late)), bound)
    anon = lambda s: s["collector"]["VmRSS"] - s["collector"]["RssFile"]  # noqa: E731  (its BPF ring is file-backed)
    for name, kib in (("record", figures["record"][0]), ("collector", anon), ("chunks", figures["chunks"][0])):
        assert max(map(kib, late)) <= max(map(kib, early)) + GROWTH[name], (name, max(map(kib, early)), max(map(kib, late)))
    assert max(s["record"]["VmHWM"] for s in late) <= RECORD_ALLOWANCE + streams * RING_MB * MIB
