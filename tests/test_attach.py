"""`oslens record -p PID` end to end (issue 31): attaching to a program that is already running.
The program (tests/c/attach_target.c) logs when each of its batches of getpid calls ran and when
it slept; the trace's counts over its own window must lie within what that log allows, the
program must run on unchanged, children and threads it creates after the attach are followed,
a killed oslens leaves nothing switched on, and another user's process is refused in one line.
Run as root, on both collector mechanisms; no assertion is on a timing."""

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
import pytest

from conftest import OSLENS, meta, run_oslens
from oslens.capture import instruments, raw
from test_kernel_collector import COLLECTOR, _collector_pids, _perf_fds, _tracing_state, _wait_for

IS_ROOT = os.geteuid() == 0
pytestmark = [pytest.mark.skipif(not COLLECTOR.exists(), reason="oslens-collector is not built (run make)"),
              pytest.mark.skipif(not IS_ROOT, reason="attaching to kernel tracepoints needs root here")]
THREADS, BATCHES, GETPIDS, EXTRA = 3, 2500, 50, 1000


def _start(compile_c, tmp_path, batches=BATCHES):
    prog = compile_c("attach_target.c")
    log = tmp_path / "program.log"
    p = subprocess.Popen([str(prog), str(THREADS), str(batches), str(log)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().startswith("ready")
    return p, log


def _attach(pid, trace, *options, mechanism=None):
    env = dict(os.environ, **({"OSLENS_KERNEL_MECHANISM": mechanism} if mechanism else {}))
    return subprocess.Popen([*OSLENS, "record", "-p", str(pid), "-f", "-o", str(trace), "--events", "sched,syscalls", *options],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)


def _wait_attached(rec):
    lines = []
    while True:
        line = rec.stderr.readline()
        assert line, "".join(lines)
        lines.append(line)
        if "attached to" in line:
            return lines


def _attached(compile_c, tmp_path, mechanism):
    """The program started, and `oslens record -p` attached to it."""
    program, log = _start(compile_c, tmp_path)
    trace = tmp_path / "t"
    rec = _attach(program.pid, trace, mechanism=mechanism)
    _wait_attached(rec)
    return program, log, trace, rec


def _need(trace, mechanism):
    """Skips, with the reason, when the collector could not use this mechanism here."""
    k = meta(trace)["kernel"]
    if k.get("tier") != "kernel tracepoints" or (mechanism == "ebpf" and not k.get("mechanism", "").startswith("eBPF")):
        pytest.skip(f"{mechanism} unavailable: {k.get('reason') or k.get('mechanism')}")


def _gone(pid):
    """The process has exited (a zombie waiting for init to reap it holds no descriptors)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return stat[stat.rindex(")") + 2] == "Z" and not list(Path(f"/proc/{pid}/fd").glob("*"))


def _log(path):
    batches, sleeps, extra = [], [], {}
    for line in Path(path).read_text().splitlines():
        kind, *rest = line.split()
        if kind == "batch":  # tid t0 t1 (tid t0 from the Python program)
            batches.append(tuple(map(int, rest)))
        elif kind == "sleep":
            sleeps.append(tuple(map(int, rest)))
        else:
            extra[kind] = int(rest[0])
    return batches, sleeps, extra


def _bounds(spans, lo, hi, per_span):
    """What the trace must hold over [lo, hi]: every span inside it, at most every span touching it."""
    inside = sum(per_span for _, a, b in spans if lo <= a and b <= hi)
    touching = sum(per_span for _, a, b in spans if b >= lo and a <= hi)
    return inside, touching


@pytest.mark.parametrize("mechanism", ["ebpf", "perf"])
def test_attach_counts_agree_with_the_programs_log(compile_c, tmp_path, mechanism):
    program, log, trace, rec = _attached(compile_c, tmp_path, mechanism)
    time.sleep(1.0)
    rec.send_signal(signal.SIGINT)  # Ctrl-C detaches
    _, err = rec.communicate(timeout=120)
    assert rec.returncode == 0, err
    out, _ = program.communicate(timeout=120)
    assert program.returncode == 0 and out == f"done {THREADS} threads x {BATCHES} batches of {GETPIDS} getpid\n"
    _need(trace, mechanism)
    assert "detached (SIGINT)" in err, err
    con = duckdb.connect()
    t = Path(trace) / "tables"
    lo = con.execute(f"SELECT min(ts) FROM '{t}/attach_processes.parquet'").fetchone()[0]
    hi = meta(trace)["attach"]["detach_ns"]
    batches, sleeps, _ = _log(log)
    got = con.execute(f"SELECT count(*) FROM '{t}/syscalls.parquet' WHERE pid = {program.pid} AND name = 'getpid' "
                      f"AND start_ns BETWEEN {lo} AND {hi}").fetchone()[0]
    inside, touching = _bounds(batches, lo, hi, GETPIDS)
    assert inside > 0 and inside <= got <= touching, (inside, got, touching)
    assert abs(got - inside) <= 0.01 * inside + THREADS * 2 * GETPIDS
    slept = con.execute(f"SELECT count(*) FROM '{t}/switches.parquet' WHERE prev_pid = {program.pid} AND prev_state = 'S' "
                        f"AND prev_tid IN (SELECT DISTINCT tid FROM '{t}/syscalls.parquet' WHERE name = 'getpid') "
                        f"AND ts BETWEEN {lo} AND {hi}").fetchone()[0]
    inside, touching = _bounds(sleeps, lo, hi, 1)
    assert inside > 0 and inside <= slept <= touching, (inside, slept, touching)
    # threads alive at the attach start there, flagged, and are in the state dump
    tasks = con.execute(f"SELECT tid, start_ns, alive_at_attach, is_traced FROM '{t}/tasks.parquet' WHERE pid = {program.pid}").fetchall()
    dumped = {r[0] for r in con.execute(f"SELECT tid FROM '{t}/attach_threads.parquet'").fetchall()}
    assert len(dumped) == THREADS + 1
    for tid, start, alive, traced in tasks:
        assert traced and alive == (tid in dumped) and (not alive or start >= lo - 10**9)
    report = run_oslens("report", trace).stdout
    assert f"attached to running pid {program.pid}: {THREADS + 1} thread(s) already running" in report, report


@pytest.mark.parametrize("mechanism", ["ebpf", "perf"])
def test_a_child_and_a_thread_created_after_the_attach_are_followed(compile_c, tmp_path, mechanism):
    program, log, trace, rec = _attached(compile_c, tmp_path, mechanism)
    program.send_signal(signal.SIGUSR1)
    out, _ = program.communicate(timeout=120)
    _, err = rec.communicate(timeout=120)  # the program's exit ends the recording
    assert rec.returncode == 0 and "detached (exit)" in err, err
    assert program.returncode == 0 and out.startswith("done")
    _need(trace, mechanism)
    _, _, extra = _log(log)
    con = duckdb.connect()
    t = Path(trace) / "tables"
    for who in ("child", "thread"):
        n = con.execute(f"SELECT count(*) FROM '{t}/syscalls.parquet' WHERE tid = {extra[who]} AND name = 'getpid'").fetchone()[0]
        assert n == EXTRA, (who, n)
        row = con.execute(f"SELECT is_traced, alive_at_attach, parent_tid FROM '{t}/tasks.parquet' WHERE tid = {extra[who]}").fetchone()
        assert row[0] and not row[1] and row[2] == program.pid, (who, row)


def test_sigkill_of_oslens_leaves_the_program_running_and_nothing_on(compile_c, tmp_path):
    program, _ = _start(compile_c, tmp_path)
    before = _tracing_state()
    trace = tmp_path / "t"
    rec = _attach(program.pid, trace)
    try:
        _wait_attached(rec)
        collectors = _collector_pids(trace)
        assert collectors and (_perf_fds(collectors[0]) > 0 or meta(trace)["kernel"].get("mechanism", "").startswith("eBPF"))
        rec.kill()
        rec.wait()
        assert _wait_for(lambda: not _collector_pids(trace)), "the collector outlived oslens"
        assert program.poll() is None, "the program died with oslens"
    finally:
        if rec.poll() is None:
            rec.kill()
    out, _ = program.communicate(timeout=120)
    assert program.returncode == 0 and out == f"done {THREADS} threads x {BATCHES} batches of {GETPIDS} getpid\n"
    assert _tracing_state() == before
    assert all(_gone(c) for c in collectors)


def test_another_users_process_is_refused_in_one_line(tmp_path, request):
    probe = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *OSLENS, "--help"],
                           capture_output=True, text=True)
    if probe.returncode != 0:
        pytest.skip("the nobody user cannot run .venv/bin/oslens here")
    work = Path(tempfile.mkdtemp(prefix="oslens-attach-", dir="/tmp"))
    request.addfinalizer(lambda: shutil.rmtree(work, ignore_errors=True))
    os.chmod(work, 0o777)
    root_sleep = subprocess.Popen(["sleep", "60"])
    nobody_sleep = subprocess.Popen(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "sleep", "60"])
    try:
        proc = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *OSLENS, "record", "-p",
                               str(root_sleep.pid), "-o", str(work / "t")], capture_output=True, text=True, timeout=60, cwd=work)
        assert proc.returncode != 0
        lines = proc.stderr.strip().splitlines()
        assert len(lines) == 1 and f"cannot attach to {root_sleep.pid}" in lines[0] and "oslens doctor" in lines[0], proc.stderr
        assert root_sleep.poll() is None  # untouched
        # its own process: no refusal (whatever tier it then gets)
        own = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *OSLENS, "record", "-p",
                              str(nobody_sleep.pid), "--duration", "300ms", "--no-import", "-o", str(work / "own")],
                             capture_output=True, text=True, timeout=60, cwd=work)
        assert own.returncode == 0 and "cannot attach" not in own.stderr, own.stderr
        assert nobody_sleep.poll() is None
    finally:
        root_sleep.kill()
        nobody_sleep.kill()


def _start_dormant(compile_c, tmp_path, batches=BATCHES):
    """attach_target built with its instruments, started outside `oslens record`."""
    prog = compile_c("attach_target.c", "-DATTACH_EVENTS")
    log = tmp_path / "program.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OSLENS_")}
    program = subprocess.Popen([str(prog), str(THREADS), str(batches), str(log)], stdout=subprocess.PIPE, text=True, env=env)
    assert program.stdout.readline().startswith("ready")
    return program, log


def _attach_for_a_second(pid, trace):
    rec = _attach(pid, trace)
    _wait_attached(rec)
    time.sleep(1.0)
    rec.send_signal(signal.SIGINT)
    _, err = rec.communicate(timeout=120)
    assert rec.returncode == 0 and "stay dormant" not in err, err


def _window_events(trace, log):
    """(batches recorded as events, batches logged inside the window, batches touching it) as
    {(tid, batch)}; checks the chunks, read after the program's end, hold what was imported."""
    con = duckdb.connect()
    rows = con.execute(f"SELECT tid, payload FROM '{trace}/tables/app_events.parquet' WHERE id = 7").fetchall()
    got = {(tid, int.from_bytes(payload, "little")) for tid, payload in rows}
    assert len(got) == len(rows)
    chunks = [raw.read_chunk(p) for p in sorted((trace / "raw").glob("app-*.osl"))]
    assert chunks and sum(int(((c.records["kind"] == raw.EVENT) & (c.records["id"] == 7)).sum()) for c in chunks) == len(rows)
    m = meta(trace)["attach"]
    woken, asleep = m["instruments_woken_ns"], m["instruments_asleep_ns"]
    batches, _, _ = _log(log)
    number, inside, touching = {}, set(), set()
    for tid, t, _ in batches:
        b = number[tid] = number.get(tid, -1) + 1
        if woken[1] <= t <= asleep[0]:
            inside.add((tid, b))
        if woken[0] <= t <= asleep[1]:
            touching.add((tid, b))
    return got, inside, touching


def _assert_window(got, inside, touching):
    # a call under way when the word changed may fall either side: one per thread
    assert inside and len(inside - got) <= THREADS and len(got - touching) <= THREADS, (len(inside), len(got), len(touching))


def _counter_values(trace):
    con = duckdb.connect()
    return [v for (v,) in con.execute(f"SELECT value FROM '{trace}/tables/counters.parquet' WHERE name = 'batches' ORDER BY ts").fetchall()]


def test_dormant_instruments_record_only_while_attached(compile_c, tmp_path):
    program, log = _start_dormant(compile_c, tmp_path)
    trace = tmp_path / "t"
    _attach_for_a_second(program.pid, trace)
    out, _ = program.communicate(timeout=120)
    assert program.returncode == 0 and out == f"done {THREADS} threads x {BATCHES} batches of {GETPIDS} getpid\n"
    _assert_window(*_window_events(trace, log))
    assert not (trace / ".attach-lock").exists()


def test_a_second_attach_wakes_the_instruments_again(compile_c, tmp_path):
    """Attach, detach, attach again: each trace holds exactly its window's events, the first
    trace's chunks are closed, and the counter carries its value from the first window."""
    program, log = _start_dormant(compile_c, tmp_path, batches=4 * BATCHES)
    traces = [tmp_path / "t1", tmp_path / "t2"]
    for trace in traces:
        _attach_for_a_second(program.pid, trace)
    out, _ = program.communicate(timeout=120)
    assert program.returncode == 0 and out == f"done {THREADS} threads x {4 * BATCHES} batches of {GETPIDS} getpid\n"
    windows = [_window_events(trace, log) for trace in traces]
    for window in windows:
        _assert_window(*window)
    assert not windows[0][0] & windows[1][0]
    # the first trace's thread chunks were closed when their threads moved to the second
    assert all(raw.read_chunk(p).header["closed"] for p in (traces[0] / "raw").glob("app-*.osl"))
    # each window starts with the counter's value so far: what the windows before it counted (a
    # thread may count once between the wake and that record, and once either side of a detach)
    first, second = _counter_values(traces[0]), _counter_values(traces[1])
    assert first[0] <= THREADS and abs(second[0] - len(windows[0][0])) <= 2 * THREADS, (first[:3], second[:3], len(windows[0][0]))


def _word(pid):
    """The program's activation word (crates/recorder/src/lib.rs), read as the attach finds it."""
    with open(f"/proc/{pid}/mem", "rb", buffering=0) as mem:
        mem.seek(instruments.find(pid)["osl__inactive"])
        return int.from_bytes(mem.read(4), "little")


def test_a_killed_attacher_leaves_the_instruments_dormant_and_the_next_attach_works(compile_c, tmp_path):
    program, log = _start_dormant(compile_c, tmp_path, batches=4 * BATCHES)
    killed, trace = tmp_path / "killed", tmp_path / "t"
    rec = _attach(program.pid, killed)
    try:
        _wait_attached(rec)
        assert _wait_for(lambda: _word(program.pid) == 0), "never woken"
        time.sleep(0.3)
        rec.kill()
        rec.wait()
        # the library's helper sees the attacher's lock gone and puts the instruments to sleep
        assert _wait_for(lambda: _word(program.pid) == instruments.NOT_TRACING), _word(program.pid)
        asleep = time.monotonic_ns()
        assert _wait_for(lambda: not _collector_pids(killed)), "the collector outlived oslens"
    finally:
        if rec.poll() is None:
            rec.kill()
    assert program.poll() is None, "the program died with oslens"
    _attach_for_a_second(program.pid, trace)
    out, _ = program.communicate(timeout=120)
    assert program.returncode == 0 and out == f"done {THREADS} threads x {4 * BATCHES} batches of {GETPIDS} getpid\n"
    _assert_window(*_window_events(trace, log))
    # the killed attach's trace holds no event of a batch begun after the word went dormant
    batches, _, _ = _log(log)
    started = {}
    for tid, t, _ in batches:
        started.setdefault(tid, []).append(t)
    chunks = [raw.read_chunk(p) for p in (killed / "raw").glob("app-*.osl")]
    events = [(c.header["tid"], int(b)) for c in chunks for b in c.records["b"][(c.records["kind"] == raw.EVENT) & (c.records["id"] == 7)]]
    assert events and sum(started[tid][b] > asleep for tid, b in events) == 0


@pytest.fixture(scope="module")
def python_attached_twice(tmp_path_factory):
    """python/oslens_testing/attach_target.py started outside `oslens record` (checked dormant),
    attached twice: (its log, the two traces)."""
    tmp_path = tmp_path_factory.mktemp("python_attach")
    log, batches = tmp_path / "program.log", 4 * BATCHES
    env = {k: v for k, v in os.environ.items() if not k.startswith("OSLENS_")}
    program = subprocess.Popen([sys.executable, "-m", "oslens_testing.attach_target", str(THREADS), str(batches), str(log)],
                               stdout=subprocess.PIPE, text=True, env=env)
    assert program.stdout.readline().startswith("ready")
    assert instruments.find(program.pid) and _word(program.pid) == instruments.NOT_TRACING  # dormant
    traces = [tmp_path / "t1", tmp_path / "t2"]
    for trace in traces:
        _attach_for_a_second(program.pid, trace)
    out, _ = program.communicate(timeout=120)
    assert program.returncode == 0 and out.endswith(f"done {THREADS} threads x {batches} batches\n"), out
    return log, traces


def test_a_python_programs_dormant_regions_are_woken_by_an_attach(python_attached_twice):
    """oslens.instrument in a Python program started outside `oslens record`: dormant, then its
    regions of each attached window (attached twice) in that window's trace, named there, as its
    own log has them."""
    log, traces = python_attached_twice
    logged, _, _ = _log(log)
    for trace in traces:
        con = duckdb.connect()
        got = dict(con.execute(f"SELECT tid, count(*) FROM '{trace}/tables/regions.parquet' WHERE name = 'batch' GROUP BY tid").fetchall())
        m = meta(trace)["attach"]
        woken, asleep = m["instruments_woken_ns"], m["instruments_asleep_ns"]
        for tid in {tid for tid, _ in logged} | set(got):
            starts = [t for who, t in logged if who == tid]
            inside = sum(woken[1] <= t <= asleep[0] for t in starts)
            touching = sum(woken[0] <= t <= asleep[1] for t in starts)
            # a region under way when the word changed may fall either side
            assert inside > 0 and inside - 1 <= got.get(tid, 0) <= touching + 1, (trace.name, tid, inside, got.get(tid), touching)


def test_a_python_event_name_is_named_in_every_attached_trace(python_attached_twice):
    """oslens.event("batch_done") caches its name's id per names epoch: every attach session's
    trace names it again, from its first event on, for every thread that recorded one."""
    _, traces = python_attached_twice
    for trace in traces:
        con = duckdb.connect()
        rows = con.execute(f"SELECT tid, coalesce(instrument, '?'), count(*) FROM '{trace}/tables/app_events.parquet' "
                           "WHERE kind = 'event' GROUP BY ALL").fetchall()
        assert {name for _, name, _ in rows} == {"batch_done"}, (trace.name, rows)
        assert len({tid for tid, _, _ in rows}) == THREADS, (trace.name, rows)
