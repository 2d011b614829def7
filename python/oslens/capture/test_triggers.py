"""The flight recorder's triggers: the spec language (every form, bad specs' one-line messages)
and the watcher over a real recording of tests/c/trigger_target.c, replayed as it grew
(oslens_testing.capture.replay) and polled in steps."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from oslens.capture import triggers
from oslens.capture.trigger_spec import Cond

ROOT = Path(__file__).resolve().parents[3]
OSLENS = ROOT / ".venv" / "bin" / "oslens"
MS = 1_000_000


# -- the language -------------------------------------------------------------------------

@pytest.mark.parametrize("spec, first, within", [
    ("region:work>50ms", Cond("region", "work", 50 * MS), ()),
    ("timer:phase>1.5s", Cond("timer", "phase", 1_500_000_000), ()),
    ("event:checkpoint", Cond("event", "checkpoint", None), ()),
    ("counter:items>5", Cond("counter", "items", 5.0), ()),
    ("counter:items>-2.5", Cond("counter", "items", -2.5), ()),
    ("counter:bytes>1e9", Cond("counter", "bytes", 1e9), ()),
    ("syscall:fsync>20ms", Cond("syscall", "fsync", 20 * MS), ()),
    ("runq>5ms", Cond("runq", "", 5 * MS), ()),
    ("offcpu>250us", Cond("offcpu", "", 250_000), ()),
    ("offcpu > 100 ns", Cond("offcpu", "", 100), ()),
    ("region:request>50ms and offcpu>20ms", Cond("region", "request", 50 * MS), (Cond("offcpu", "", 20 * MS),)),
    ("region:X>50ms AND runq>10ms and offcpu>1ms", Cond("region", "X", 50 * MS),
     (Cond("runq", "", 10 * MS), Cond("offcpu", "", MS))),
    ("syscall:clock_nanosleep>20ms and offcpu>10ms", Cond("syscall", "clock_nanosleep", 20 * MS), (Cond("offcpu", "", 10 * MS),)),
    ("region:db query>2ms", Cond("region", "db query", 2 * MS), ()),
])
def test_every_form_parses(spec, first, within):
    t = triggers.parse(spec)
    assert (t.first, t.within) == (first, within)
    assert t.spec == " ".join(spec.split())


@pytest.mark.parametrize("spec, message", [
    ("", "empty trigger (forms: region:NAME>DUR, timer:NAME>DUR, syscall:NAME>DUR, event:NAME, counter:NAME>VALUE, "
         "runq>DUR, offcpu>DUR)"),
    ("region:work>50", "trigger 'region:work>50': '50' is not a duration (a number and one of ns, us, ms, s: '50ms')"),
    ("region:work>50min", "trigger 'region:work>50min': '50min' is not a duration (a number and one of ns, us, ms, s: '50ms')"),
    ("region:work", "trigger 'region:work': 'region:work' needs a name and a threshold ('region:NAME>50ms')"),
    ("region:>5ms", "trigger 'region:>5ms': 'region:>5ms' needs a name and a threshold ('region:NAME>50ms')"),
    ("counter:items>many", "trigger 'counter:items>many': counter threshold 'many' is not a number"),
    ("counter:items", "trigger 'counter:items': 'counter:items' needs a name and a threshold ('counter:NAME>100')"),
    ("event:", "trigger 'event:': 'event:NAME' takes a name and no threshold"),
    ("event:x>5ms", "trigger 'event:x>5ms': 'event:NAME' takes a name and no threshold"),
    ("syscall:fsynk>20ms", "trigger 'syscall:fsynk>20ms': unknown system call 'fsynk' (x86_64 names, as in 'man 2 syscalls')"),
    ("runq", "trigger 'runq': 'runq' needs a threshold ('runq>5ms')"),
    ("idle>5ms", "trigger 'idle>5ms': unknown condition 'idle>5ms' (forms: region:NAME>DUR, timer:NAME>DUR, "
                 "syscall:NAME>DUR, event:NAME, counter:NAME>VALUE, runq>DUR, offcpu>DUR)"),
    ("lock:m>5ms", "trigger 'lock:m>5ms': unknown condition 'lock:m>5ms' (forms: region:NAME>DUR, timer:NAME>DUR, "
                   "syscall:NAME>DUR, event:NAME, counter:NAME>VALUE, runq>DUR, offcpu>DUR)"),
    ("offcpu>5ms and region:x>1ms", "trigger 'offcpu>5ms and region:x>1ms': 'and' joins one region, timer or syscall "
                                    "condition, first, with runq or offcpu conditions on its thread inside it"),
    ("event:a and offcpu>1ms", "trigger 'event:a and offcpu>1ms': 'and' joins one region, timer or syscall "
                               "condition, first, with runq or offcpu conditions on its thread inside it"),
    ("region:a>1ms and region:b>1ms", "trigger 'region:a>1ms and region:b>1ms': 'and' joins one region, timer or "
                                      "syscall condition, first, with runq or offcpu conditions on its thread inside it"),
])
def test_bad_specs_say_what_is_wrong_in_one_line(spec, message):
    with pytest.raises(ValueError) as err:
        triggers.parse(spec)
    assert str(err.value) == message
    assert "\n" not in str(err.value)


# -- the watcher on a real recording ------------------------------------------------------

SPECS = ["region:work>50ms", "region:fast>0ns", "timer:phase>50ms", "event:checkpoint", "counter:items>5",
         "syscall:clock_nanosleep>20ms", "syscall:fsync>0ns", "region:work>50ms and offcpu>40ms",
         "syscall:clock_nanosleep>20ms and offcpu>20ms", "timer:phase>50ms and offcpu>40ms"]
DETAIL = re.compile(r"(\w+) (\S+) (?:took|ran) ([\d.]+) ms on tid (\d+)(?:, ([\d.]+) ms of it off CPU)?$")


def _oslens(*args, **kw):
    return subprocess.run([str(OSLENS), *map(str, args)], capture_output=True, text=True, check=True, **kw)


@pytest.fixture(scope="module")
def target(tmp_path_factory):
    """tests/c/trigger_target.c built against liboslens."""
    if shutil.which("gcc") is None:
        pytest.skip("no gcc")
    out = tmp_path_factory.mktemp("trig") / "trigger_target"
    flags = _oslens("flags", "--cflags").stdout.split() + _oslens("flags", "--libs").stdout.split()
    subprocess.run(["gcc", "-O2", "-o", str(out), str(ROOT / "tests/c/trigger_target.c"), *flags, "-lpthread"], check=True)
    return out


def _record(target, trace: Path, *args, prefix=()):
    proc = subprocess.run([*prefix, str(OSLENS), "record", "--no-import", "-o", str(trace), "--", str(target), *args],
                          capture_output=True, text=True, check=True)
    tids = [int(x) for x in re.search(r"tids (\d+) (\d+)", proc.stdout).groups()]
    if not list((trace / "raw").glob("kernel-*.osl")):
        pytest.skip("no kernel records here (the kernel collector needs tracepoints): " + proc.stderr.strip())
    return tids


@pytest.fixture(scope="module")
def basic(target, tmp_path_factory):
    """trigger_target basic recorded; (trace, main tid, second tid, the imported copy's tables)."""
    base = tmp_path_factory.mktemp("basic")
    trace = base / "T"
    main, other = _record(target, trace, "basic", base / "fsync.dat")
    shutil.copytree(trace, base / "imported")
    _oslens("import", base / "imported")
    return trace, main, other, base / "imported" / "tables"


def _query(tables: Path, sql: str):
    import duckdb

    con = duckdb.connect()
    for name in ("regions", "cpu_slices", "switches"):
        con.execute(f"create view {name} as select * from '{tables / name}.parquet'")
    return con.execute(sql).fetchall()


def _off_cpu(tables: Path, tid: int, begin: int, end: int) -> int:
    """ns thread `tid` was off CPU inside [begin, end], by the import's cpu_slices (the oracle)."""
    on = _query(tables, f"select coalesce(sum(least(end_ns, {end}) - greatest(start_ns, {begin})), 0) from cpu_slices "
                        f"where tid = {tid} and end_ns > {begin} and start_ns < {end}")[0][0]
    return end - begin - on


def _waiting(tables: Path, tid: int, begin: int, end: int) -> int:
    """ns thread `tid` waited for a CPU inside [begin, end], by the import's switches (the oracle):
    from each switch that left it runnable (prev_state R) to the next switch back onto it."""
    rows = _query(tables, f"select ts, prev_tid = {tid} and prev_state like 'R%' from switches "
                          f"where (prev_tid = {tid} or next_tid = {tid}) order by ts")
    total, left = 0, None
    for ts, preempted in rows:
        if preempted:
            left = ts
        elif left is not None:
            total += max(0, min(ts, end) - max(left, begin))
            left = None
    return total


def _words(f) -> str:
    return re.sub(r"[\d.]+ ms", "N ms", f.detail)


def _numbers_agree(f, g) -> bool:
    """The ms figures of two details agree to 0.1 ms (durations from clock lines fitted through
    different pairs, a live watcher's and a finished recording's, may round apart)."""
    a, b = (re.findall(r"([\d.]+) ms", x.detail) for x in (f, g))
    return len(a) == len(b) and all(abs(float(x) - float(y)) <= 0.11 for x, y in zip(a, b))


def _by_spec(fired):
    out = {}
    for f in fired:
        out.setdefault(f.spec, []).append(f)
    return out


def test_the_watcher_fires_each_condition_with_the_imports_numbers(basic):
    trace, main, other, tables = basic
    w = triggers.Watcher(trace / "raw", [triggers.parse(s) for s in SPECS])
    fired = w.poll()
    assert [f.t_ns for f in fired] == sorted(f.t_ns for f in fired)
    assert w.poll() == []  # nothing new: nothing fired again
    assert w.late == 0
    w.close()
    got = _by_spec(fired)
    regions = _query(tables, "select tid, begin_ns, end_ns, duration_ns from regions where name = 'work' order by end_ns")
    assert [(r[0]) for r in regions] == [main, main, other]
    work = got.pop("region:work>50ms")
    assert [int(DETAIL.match(f.detail).group(4)) for f in work] == [main, main, other]
    for f, (tid, begin, end, took) in zip(work, regions):
        # the online clock (one line through the headers' and the watcher's own pairs) against the import's fit
        assert abs(f.t_ns - end) < 50_000, (f, end)
        assert f.detail == f"region work took {took / 1e6:.1f} ms on tid {tid}" or \
            abs(float(DETAIL.match(f.detail).group(3)) - took / 1e6) <= 0.1
    joint = got.pop("region:work>50ms and offcpu>40ms")
    # the oracle: each region's time off CPU by the import's cpu_slices; the joint trigger fires on
    # the sleeping regions, and on the computing one only when the machine's load kept it off CPU
    off = [_off_cpu(tables, tid, b, e) for tid, b, e, _ in regions]
    assert off[0] > 100 * MS and off[2] > 60 * MS
    assert [f.t_ns for f in joint] == [f.t_ns for f, o in zip(work, off) if o > 40 * MS]
    for f, o in zip([f for f, o in zip(work, off) if o > 40 * MS], [o for o in off if o > 40 * MS]):
        assert abs(float(DETAIL.match(joint[[g.t_ns for g in joint].index(f.t_ns)].detail).group(5)) - o / 1e6) <= 0.2
    assert [DETAIL.match(f.detail).group(1, 2, 4) for f in got.pop("region:fast>0ns")] == [("region", "fast", str(main))] * 5
    phase = got.pop("timer:phase>50ms")
    assert len(phase) == 1
    assert [f.detail for f in got.pop("event:checkpoint")] == [f"event checkpoint on tid {main}"] * 3
    assert [f.detail for f in got.pop("counter:items>5")] == [f"counter items reached 6 (over 5) on tid {main}"]
    sleeps = got.pop("syscall:clock_nanosleep>20ms")
    assert [int(DETAIL.match(f.detail).group(4)) for f in sleeps] == [main, main, main, other]
    # a sleep lasts at least what it asked for (120, 60, 30 and 70 ms)
    assert all(float(DETAIL.match(f.detail).group(3)) >= ms for f, ms in zip(sleeps, (120, 60, 30, 70)))
    assert [f.detail.split(" took")[0] for f in got.pop("syscall:fsync>0ns")] == ["syscall fsync"]
    # a sleep is off CPU at least as long as it asked for: each of the four, and the timer's
    slept = got.pop("syscall:clock_nanosleep>20ms and offcpu>20ms")
    assert [(f.t_ns, f.detail.split(",")[0]) for f in slept] == [(f.t_ns, f.detail) for f in sleeps]
    assert [f.detail.split(",")[0] for f in got.pop("timer:phase>50ms and offcpu>40ms")] == \
        [f"timer phase ran {DETAIL.match(f.detail).group(3)} ms on tid {main}" for f in phase]
    assert got == {}


def test_polling_in_steps_fires_the_same_once_each_when_it_happens(basic, tmp_path):
    from oslens_testing.capture.replay import Replay

    trace, main, other, _ = basic
    specs = [triggers.parse(s) for s in SPECS]
    whole = triggers.Watcher(trace / "raw", specs).poll()
    dst = tmp_path / "raw"
    # armed before the recording's folder exists; no lag: the replayed records are all older than
    # any lag already, by however long ago the fixture recorded them
    w = triggers.Watcher(dst, specs, kernel_lag_ns=0)
    assert w.poll() == []
    replay = Replay(trace / "raw", dst)
    first, last = replay.span()
    step = 7 * MS  # well under every slow region: each one's begin and end land in different polls
    cuts = list(range(first - step, last + 2 * step, step))
    seen = []
    for k, cut in enumerate(cuts):
        replay.at(cut)
        seen += [(k, f) for f in w.poll()]
    replay.finish()
    seen += [(len(cuts), f) for f in w.poll()]
    assert [(f.spec, _words(f)) for _, f in seen] == [(f.spec, _words(f)) for f in whole]
    for (k, f), g in zip(seen, whole):
        assert abs(f.t_ns - g.t_ns) < 10_000 and _numbers_agree(f, g)
        # fired at the first poll that could see it (the replay's clock and the watcher's agree to well under 1 ms)
        assert cuts[k - 1] - MS < f.t_ns <= cuts[min(k, len(cuts) - 1)] + MS, (k, f)
    slow = [f for _, f in seen if f.spec == "region:work>50ms"]
    assert len(slow) == 3


@pytest.fixture(scope="module")
def hogged(target, tmp_path_factory):
    """trigger_target hog, alone on one CPU under SCHED_FIFO (it sets both itself: `chrt` and
    `taskset` would exec it in place, and the watcher does not follow an exec'd image's chunks):
    region "slow" computing 150 ms, then region "slow" computing 20 ms while a SCHED_FIFO thread
    above it on its CPU holds the CPU for 80 ms. No normal task can preempt either (the fair
    deadline server waits for ~950 ms of starvation, RT throttling allows 950 ms a second: both
    far beyond these 250 ms); (trace, main tid, hog tid, the imported copy's tables)."""
    if __import__("os").geteuid() != 0:
        pytest.skip("not root: SCHED_FIFO needs CAP_SYS_NICE")
    cpu = str(sorted(__import__("os").sched_getaffinity(0))[-1])
    base = tmp_path_factory.mktemp("hog")
    trace = base / "T"
    main, hog = _record(target, trace, "hog", cpu)
    shutil.copytree(trace, base / "I")
    _oslens("import", base / "I")
    return trace, main, hog, base / "I" / "tables"


HOG_SPECS = ["region:slow>60ms", "region:slow>60ms and runq>30ms", "region:slow>60ms and offcpu>30ms"]


def test_a_joint_trigger_fires_on_the_region_a_cpu_hog_slowed_and_not_on_the_one_computing_longer(hogged):
    trace, main, hog, tables = hogged
    got = _by_spec(triggers.Watcher(trace / "raw", [triggers.parse(s) for s in HOG_SPECS]).poll())
    regions = _query(tables, "select tid, begin_ns, end_ns, duration_ns from regions where name = 'slow' order by begin_ns")
    assert [r[0] for r in regions] == [main, main] and all(took > 60 * MS for *_, took in regions)
    (_, b1, e1, _), (_, b2, e2, _) = regions
    # the oracle: the import's time waiting for a CPU and off it; the computing region never waited
    # (nothing may preempt it), the hogged one waited the hog's 80 ms (wall time, less a little
    # the hog itself may be held up by interrupts)
    assert _waiting(tables, main, b1, e1) < 2 * MS and _off_cpu(tables, main, b1, e1) < 2 * MS
    waited = _waiting(tables, main, b2, e2)
    assert 75 * MS < waited <= _off_cpu(tables, main, b2, e2) < 85 * MS
    assert [abs(f.t_ns - e) < 50_000 for f, e in zip(got.pop("region:slow>60ms"), (e1, e2))] == [True, True]
    runq = got.pop("region:slow>60ms and runq>30ms")
    assert len(runq) == 1 and abs(runq[0].t_ns - e2) < 50_000
    m = re.match(r"region slow took ([\d.]+) ms on tid (\d+), ([\d.]+) ms of it waiting for a CPU$", runq[0].detail)
    assert m and int(m.group(2)) == main and abs(float(m.group(3)) - waited / 1e6) <= 0.2, runq[0].detail
    off = got.pop("region:slow>60ms and offcpu>30ms")
    assert [(f.t_ns, int(DETAIL.match(f.detail).group(4))) for f in off] == [(runq[0].t_ns, main)]
    assert abs(float(DETAIL.match(off[0].detail).group(5)) - _off_cpu(tables, main, b2, e2) / 1e6) <= 0.2
    assert got == {}


def test_a_program_started_through_env_fires_as_it_does_alone(target, tmp_path):
    """`env` execs the program in place (same pid and tid; the chunk of the image that exec'd away
    is never closed, and ends with its exec marker): the import finds its 3 slow regions."""
    trace = tmp_path / "T"
    _oslens("record", "--no-import", "-o", trace, "--", "env", target, "basic")
    assert len(triggers.Watcher(trace / "raw", [triggers.parse("region:work>50ms")]).poll()) == 3


def test_watching_a_live_recording_fires_what_the_finished_one_holds(target, tmp_path):
    """The watcher polling every 20 ms while `oslens record` runs (records still in the threads'
    staging rings, chunks still open) fires what a poll of the finished chunks fires."""
    import time

    trace = tmp_path / "T"
    specs = [triggers.parse(s) for s in SPECS]
    w = triggers.Watcher(trace / "raw", specs)
    proc = subprocess.Popen([str(OSLENS), "record", "--no-import", "-o", str(trace), "--", str(target), "basic",
                             tmp_path / "fsync.dat"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    live, polls = [], 0
    while proc.poll() is None:
        live += w.poll()
        polls += 1
        time.sleep(0.02)
    out, err = proc.communicate()
    assert proc.returncode == 0, err
    live += w.poll()  # the recording's end: every kernel record taken
    if not list((trace / "raw").glob("kernel-*.osl")):
        pytest.skip("no kernel records here: " + err.strip())
    after = triggers.Watcher(trace / "raw", specs).poll()
    assert polls > 10
    if w.late:  # kernel records the collector delivered later than the lag (a loaded machine): app specs only
        live, after = ([f for f in x if triggers.parse(f.spec).first.kind in ("region", "timer", "event", "counter")
                        and not triggers.parse(f.spec).within] for x in (live, after))
    key = lambda f: (f.spec, _words(f), f.t_ns)  # noqa: E731
    live, after = sorted(live, key=key), sorted(after, key=key)
    assert [key(f)[:2] for f in live] == [key(f)[:2] for f in after]
    assert [(f, g) for f, g in zip(live, after) if not (abs(f.t_ns - g.t_ns) < 50_000 and _numbers_agree(f, g))] == []


def test_the_numpy_pairing_of_switches_agrees_with_one_record_at_a_time(tmp_path):
    """trigger_sched.Sched, fed a switch-heavy recording in uneven batches, finds exactly the
    off-CPU intervals (left, back, runnable from) the record-by-record oracle finds in one go."""
    import numpy as np

    from oslens.capture import raw
    from oslens.capture.trigger_sched import Sched
    from oslens_testing.capture.sched_oracle import SchedOracle

    exe = tmp_path / "kernel_pingpong"
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(ROOT / "tests/c/kernel_pingpong.c")], check=True)
    trace = tmp_path / "T"
    _oslens("record", "--no-import", "-o", trace, "--", exe, 5000)
    chunks = [raw.read_chunk(p) for p in sorted((trace / "raw").glob("kernel-*.osl"))]
    if not chunks:
        pytest.skip("no kernel records here")
    r = np.concatenate([c.records for c in chunks])
    r = r[np.argsort(r["ts"], kind="stable")]
    oracle = SchedOracle(set(), True)
    r = r[oracle.keep(r)]
    want = sorted((tid, left, back, ready) for what, tid, left, back, ready in oracle.feed(r) if what == "offcpu")
    sched, got, at = Sched(set(), True), [], 0
    for size in [1, 2, 997, 13, 5000, 3] * (len(r) // 6000 + 1):
        got += [tuple(x) for x in sched.feed(r[at:at + size])[0].tolist()]
        at += size
    assert len(want) > 9_000  # two processes switching on each round trip (the VM agent can hide a few)
    assert sorted(got) == want
    tid, left, back = want[len(want) // 2][:3]
    assert sched.within(tid, left, back) == oracle.within(tid, left, back)


# -- the tail of a chunk being written ----------------------------------------------------

def test_a_chunk_tail_reads_records_still_in_the_staging_ring_once_each(tmp_path):
    """_native.ChunkTail: committed records laid over by the ring's FULL and WRITING slots, each
    returned once; a slot that fails its check is read again, and skipped as damage the third time."""
    import numpy as np

    from oslens import _native
    from oslens.capture import raw

    off, states = dict(_native.TAIL_HEADER_OFFSETS), dict(_native.TAIL_STAGE_STATES)
    src = tmp_path / "src.osl"
    _native.write_chunk(str(src), {}, [(1000 + i, 7, 0, raw.EVENT, 0, i) for i in range(14)])
    rec = [src.read_bytes()[_native.HEADER_SIZE + 32 * i:_native.HEADER_SIZE + 32 * (i + 1)] for i in range(14)]
    path, capacity, per_slot = tmp_path / "app.osl", 64, 8
    _native.write_chunk(str(path), {"capacity": capacity, "closed": False}, [(1000 + i, 7, 0, raw.EVENT, 0, i) for i in range(3)])
    ring = _native.HEADER_SIZE + capacity * 32

    def put(at: int, data: bytes):
        with open(path, "r+b") as f:
            f.seek(at)
            f.write(data)

    def word(at: int, value: int, size: int = 8):
        put(at, value.to_bytes(size, "little"))

    def slot(j: int, state: str, start: int, length: int = 0):
        d = off["descriptors"] + j * off["descriptor_size"]
        word(d, states[state], 4)
        word(d + 8, start)
        word(d + 16, length)

    word(off["stage_slots"], 2, 4)
    word(off["stage_slot_records"], per_slot, 4)
    put(ring, b"".join(rec[3:7]))                  # slot 0: positions 3..6, full, not yet copied out
    slot(0, "full", 3, 4)
    put(ring + per_slot * 32, b"".join(rec[7:10]))  # slot 1: positions 7.., being written
    slot(1, "writing", 7)
    word(off["committed"], 10)
    tail = _native.ChunkTail(str(path))
    values = lambda b: np.frombuffer(b, dtype=raw.RECORD_DTYPE)["b"].tolist()  # noqa: E731
    assert values(tail.read()) == list(range(10))
    assert values(tail.read()) == []
    put(ring + per_slot * 32 + 3 * 32, rec[10])
    word(off["committed"], 11)
    assert values(tail.read()) == [10]
    word(off["committed"], 12)                     # position 11 committed, its bytes not there (torn)
    assert [values(tail.read()) for _ in range(3)] == [[], [], []] and tail.damaged == 1
    put(ring + per_slot * 32 + 5 * 32, rec[12])
    word(off["committed"], 13)
    assert values(tail.read()) == [12] and tail.seen == 13 and tail.header()["committed"] == 13


def test_a_threads_next_chunk_waits_until_the_one_before_it_is_closed_and_read(tmp_path):
    """A flight recording rotates a thread's full chunk into the next: a region whose end is in
    the next chunk's records pairs with its own begin, even when the next chunk is listed while
    the previous one still has records to read (read first, they paired with a later begin)."""
    from oslens import _native
    from oslens.capture import raw

    off = dict(_native.TAIL_HEADER_OFFSETS)
    region = lambda kind, ms: (ms * MS, 5, 0, kind, 0, 0)  # noqa: E731
    _native.write_chunk(str(tmp_path / "names-1-0.osl"), {"pid": 1, "tid": 0, "closed": False}, [],
                        names=[(5, raw.CLASS_ID["region"], 0, "work")])
    _native.write_chunk(str(tmp_path / "app-1-1-0.osl"), {"pid": 1, "tid": 1, "closed": False, "committed": 1},
                        [region(raw.REGION_BEGIN, 1), region(raw.REGION_END, 2)])
    _native.write_chunk(str(tmp_path / "app-1-1-1.osl"), {"pid": 1, "tid": 1, "closed": False, "committed": 1},
                        [region(raw.REGION_BEGIN, 3), region(raw.REGION_END, 100)])

    def header(name: str, committed: int, closed: int):
        with open(tmp_path / name, "r+b") as f:
            f.seek(off["committed"])
            f.write(committed.to_bytes(8, "little"))
            f.seek(off["closed"])
            f.write(closed.to_bytes(4, "little"))

    w = triggers.Watcher(tmp_path, [triggers.parse("region:work>50ms"), triggers.parse("region:work>0ns")])
    assert w.poll() == []  # chunk 0's begin read, chunk 1 not: chunk 0 is still open
    header("app-1-1-0.osl", 2, 1)
    assert [(f.spec, f.detail) for f in w.poll()] == [("region:work>0ns", "region work took 1.0 ms on tid 1")]
    header("app-1-1-1.osl", 2, 0)
    assert [(f.t_ns, f.spec, f.detail) for f in w.poll()] == [
        (100 * MS, "region:work>50ms", "region work took 97.0 ms on tid 1"),
        (100 * MS, "region:work>0ns", "region work took 97.0 ms on tid 1")]
