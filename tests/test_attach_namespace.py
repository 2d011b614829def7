"""`oslens record -p` across PID namespaces (issues 30 and 31): a running program inside
`unshare --pid --fork --mount-proc` (a container), built with oslens.h and started outside oslens
so its instruments are dormant, attached from the host by its host pid and from inside by the pid
the container gives it. Its app records carry the container's pids, the kernel the global ones:
the tables must speak in the container's (the kernel's kept in `global_tid`), its app threads join
their kernel threads, and the counts of what it did agree with its own log. Root only; no
assertion is on a timing."""

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import duckdb
import pytest

from conftest import OSLENS, meta
from test_attach import BATCHES, EXTRA, GETPIDS, THREADS, _bounds, _log, _wait_attached
from test_kernel_collector import COLLECTOR

IS_ROOT = os.geteuid() == 0
pytestmark = [pytest.mark.skipif(not COLLECTOR.exists(), reason="oslens-collector is not built (run make)"),
              pytest.mark.skipif(not IS_ROOT, reason="attaching to kernel tracepoints and unshare need root")]
CONTAINER = ["unshare", "--pid", "--fork", "--mount-proc"]
DONE = f"done {THREADS} threads x {BATCHES} batches of {GETPIDS} getpid\n"


@pytest.fixture(scope="module", autouse=True)
def _can_unshare():
    if shutil.which("unshare") is None or subprocess.run([*CONTAINER, "true"], capture_output=True, timeout=30).returncode:
        pytest.skip("unshare cannot make a PID namespace here")


def _clean_env():
    return {k: v for k, v in os.environ.items() if not k.startswith("OSLENS_")}


def _host_pid(unshare_pid: int) -> int:
    """The program unshare --fork started: its only child (pid 1 of the new namespace)."""
    kids = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text().split()
    assert len(kids) == 1, kids
    return int(kids[0])


def _started_sleep(unshare_pid: int) -> int:
    """The host pid of the `sleep` unshare runs, once it has exec'd (unshare forks it once the
    namespaces exist)."""
    for _ in range(500):
        kids = Path(f"/proc/{unshare_pid}/task/{unshare_pid}/children").read_text().split()
        if kids and Path(f"/proc/{kids[0]}/exe").resolve().name == "sleep":
            return int(kids[0])
        time.sleep(0.01)
    raise AssertionError("unshare started no sleep")


def _tables(trace):
    con = duckdb.connect()
    t = Path(trace) / "tables"
    return lambda q: con.execute(q.replace("{t}", str(t))).fetchall()


def _need_ebpf(trace):
    k = meta(trace)["kernel"]
    if k.get("tier") != "kernel tracepoints" or not k.get("mechanism", "").startswith("eBPF"):
        pytest.skip(f"eBPF unavailable: {k.get('reason') or k.get('mechanism')}")
    return k


def _check_trace(trace, log, ns_tids: set[int], host_tids: set[int] | None, names: set[str]):
    """What every namespace attach must give: the program's pids as it sees them, its kernel
    counts within what its log allows over the window, its app events on its kernel threads."""
    k = _need_ebpf(trace)
    m = meta(trace)
    q = _tables(trace)
    pid = m["pid"]
    assert k["pid_namespace"] > 0 and pid in ns_tids, (k, pid, ns_tids)
    lo = q("SELECT min(ts) FROM '{t}/attach_processes.parquet'")[0][0]
    hi = m["attach"]["detach_ns"]
    batches, sleeps, _ = _log(log)
    assert {b[0] for b in batches} <= ns_tids  # the program logs the tids it sees
    # the system calls and sleeps of its threads, named by the namespace's tids
    got = q(f"SELECT count(*) FROM '{{t}}/syscalls.parquet' WHERE pid = {pid} AND name = 'getpid' AND start_ns BETWEEN {lo} AND {hi}")[0][0]
    inside, touching = _bounds(batches, lo, hi, GETPIDS)
    # the woken recorder asks getpid once per thread it starts on and once for the process's names
    # (crates/recorder: thread.rs, names.rs)
    assert inside > 0 and inside <= got <= touching + THREADS + 1, (inside, got, touching)
    # its sleeps: switches out asleep inside its nanosleep calls (the woken recorder may also block
    # once in a thread's first call, on a futex)
    slept = q(f"""SELECT count(*) FROM '{{t}}/switches.parquet' s JOIN '{{t}}/syscalls.parquet' c
                  ON c.tid = s.prev_tid AND s.ts BETWEEN c.start_ns AND c.end_ns
                  WHERE s.prev_pid = {pid} AND s.prev_state = 'S' AND s.prev_tid <> {pid} AND c.name LIKE '%nanosleep'
                  AND s.ts BETWEEN {lo} AND {hi}""")[0][0]
    inside, touching = _bounds(sleeps, lo, hi, 1)
    assert inside > 0 and inside <= slept <= touching, (inside, slept, touching)
    # the same thread rows for app and kernel: every thread known to both, under one tid
    rows = q(f"SELECT tid, name, source, app_records > 0 FROM '{{t}}/threads.parquet' WHERE pid = {pid} AND NOT is_oslens ORDER BY tid")
    assert {r[0] for r in rows} == ns_tids, rows
    # named as an attach outside a namespace names them: by their comm
    assert {r[1] for r in rows} == set(names), (rows, names)
    workers = [r for r in rows if r[0] != pid]
    assert len(workers) == THREADS and all(r[2] == "app+kernel" and r[3] for r in workers), rows
    # the app events: one per batch begun while the instruments were awake, each on a traced kernel thread
    woken, asleep = m["attach"]["instruments_woken_ns"], m["attach"]["instruments_asleep_ns"]
    events = q("SELECT count(*) FROM '{t}/app_events.parquet' WHERE id = 7")[0][0]
    inside = sum(1 for _, t0, _ in batches if woken[1] <= t0 <= asleep[0])
    touching = sum(1 for _, t0, _ in batches if woken[0] <= t0 <= asleep[1])
    # a batch begun just before the wake (or the sleep) may record its event just after it: one per
    # thread at each edge
    assert inside > 0 and inside - 2 * THREADS <= events <= touching + 2 * THREADS, (inside, events, touching)
    orphans = q("SELECT count(*) FROM '{t}/app_events.parquet' e WHERE e.id = 7 AND e.tid NOT IN "
                "(SELECT tid FROM '{t}/tasks.parquet' WHERE is_traced)")[0][0]
    assert orphans == 0
    # the kernel's own ids are kept beside them
    # (the woken recorder may start its helper thread in the process: oslens's own, left out)
    glob = dict(q(f"SELECT tid, global_tid FROM '{{t}}/tasks.parquet' WHERE pid = {pid} AND NOT is_oslens"))
    assert set(glob) == ns_tids and all(g is not None and g != t for t, g in glob.items()), glob
    if host_tids is not None:
        assert set(glob.values()) == host_tids, (glob, host_tids)
    dumped = q("SELECT tid, global_tid FROM '{t}/attach_threads.parquet'")
    assert {r[0] for r in dumped} == ns_tids, dumped
    if host_tids is not None:
        assert {r[1] for r in dumped} == host_tids and all(glob[t] == g for t, g in dumped), dumped
    return q, pid


def test_attach_from_the_host_into_a_container(compile_c, tmp_path):
    prog = compile_c("attach_target.c", "-DATTACH_EVENTS")
    log = tmp_path / "program.log"
    box = subprocess.Popen([*CONTAINER, str(prog), str(THREADS), str(BATCHES), str(log)], stdout=subprocess.PIPE, text=True,
                           env=_clean_env())
    try:
        assert box.stdout.readline() == "ready 1\n"  # pid 1 of its namespace
        host = _host_pid(box.pid)
        host_tids = {int(t) for t in os.listdir(f"/proc/{host}/task")}
        names = {Path(f"/proc/{host}/task/{t}/comm").read_text().strip() for t in host_tids}
        trace = tmp_path / "t"
        rec = subprocess.Popen([*OSLENS, "record", "-p", str(host), "-f", "-o", str(trace), "--events", "sched,syscalls"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait_attached(rec)
        time.sleep(1.0)
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=180)
        assert rec.returncode == 0 and "stay dormant" not in err, err
        out, _ = box.communicate(timeout=120)
    finally:
        if box.poll() is None:
            box.kill()
    assert box.returncode == 0 and out == DONE
    ns_tids = {1} | {b[0] for b in _log(log)[0]}
    assert len(ns_tids) == THREADS + 1
    q, pid = _check_trace(trace, log, ns_tids, host_tids, names)
    assert pid == 1 and meta(trace)["attach"]["pids"] == [host]
    assert q("SELECT pid, global_pid FROM '{t}/attach_processes.parquet'") == [(1, host)]


def test_attach_from_inside_the_container(compile_c, tmp_path):
    prog = compile_c("attach_target.c", "-DATTACH_EVENTS")
    log, out, trace = tmp_path / "program.log", tmp_path / "program.out", tmp_path / "t"
    # inside: the program in the background, then oslens attached to it by the pid the shell saw
    script = (f"{prog} {THREADS} {BATCHES} {log} > {out} & p=$!; "
              f"until grep -q ready {out}; do sleep 0.02; done; "
              f"{' '.join(OSLENS)} record -p $p --duration 1s -f -o {trace} --events sched,syscalls; rc=$?; "
              "wait $p && exit $rc")
    proc = subprocess.run([*CONTAINER, "sh", "-c", script], capture_output=True, text=True, timeout=300, env=_clean_env())
    assert proc.returncode == 0, proc.stderr
    assert "stay dormant" not in proc.stderr and "detached (duration)" in proc.stderr, proc.stderr
    lines = out.read_text().splitlines()
    pid = int(lines[0].split()[1])
    assert pid == 2 and lines[1] + "\n" == DONE  # the shell is 1
    ns_tids = {pid} | {b[0] for b in _log(log)[0]}
    _check_trace(trace, log, ns_tids, None, {Path(prog).name[:15]})
    # the collector learnt the kernel's tids of the threads already running from its task iterator
    assert meta(trace)["attach"]["pids"] == [pid]


# A third-party program attached while it waits, then released: `perf stat -p` (enabled through its
# control fifo before the release, so it counts from the same point) and oslens follow it through
# its exec and forks to its end. Run by `sh` inside the container or outside it.
THIRD_PARTY = """set -e
cd "$1"
mkfifo go ctl ack
sh -c 'read x < go; exec stress-ng --switch 1 --switch-ops 20000 -q' & p=$!
perf stat -e sched:sched_switch,raw_syscalls:sys_enter -x, -o perf.txt --delay=-1 --control fifo:ctl,ack -p $p & perf=$!
exec 7>ctl 8<ack
echo enable >&7; read a <&8
"$2" record -p $p -f -o trace --events sched,syscalls > record.log 2>&1 & rec=$!
until grep -q "attached to" record.log; do sleep 0.02; done
echo go > go
wait $rec
wait $perf
"""


def _perf_counts(path: Path) -> dict:
    """perf stat -x, output: {event: count}."""
    out = {}
    for line in path.read_text().splitlines():
        f = line.split(",")
        if len(f) > 2 and f[0].isdigit():
            out[f[2]] = int(f[0])
    return out


@pytest.mark.parametrize("where", ["inside", "outside"])
def test_a_third_party_program_attached_counts_as_perf_stat(tmp_path, where):
    if not shutil.which("stress-ng") or not shutil.which("perf"):
        pytest.skip("stress-ng and perf are needed (scripts/setup.sh installs them)")
    (tmp_path / "run.sh").write_text(THIRD_PARTY)
    prefix = CONTAINER if where == "inside" else []
    proc = subprocess.run([*prefix, "sh", str(tmp_path / "run.sh"), str(tmp_path), OSLENS[0]], capture_output=True, text=True,
                          timeout=300, env=_clean_env())
    perf = _perf_counts(tmp_path / "perf.txt") if (tmp_path / "perf.txt").exists() else {}
    if proc.returncode != 0 and not perf:
        pytest.skip(f"perf stat could not count the tracepoints here: {proc.stderr.strip()[-300:]}")
    log = (tmp_path / "record.log").read_text()
    assert proc.returncode == 0 and "detached (exit)" in log, (proc.stderr, log)
    trace = tmp_path / "trace"
    k = _need_ebpf(trace)
    assert bool(k.get("pid_namespace")) == (where == "inside"), k
    q = _tables(trace)
    prog = "SELECT tid FROM '{t}/threads.parquet' WHERE is_traced AND NOT is_oslens"
    switches = q(f"SELECT count(*) FROM '{{t}}/switches.parquet' WHERE prev_tid IN ({prog})")[0][0]
    calls = q(f"SELECT count(*) FROM '{{t}}/syscalls.parquet' WHERE tid IN ({prog})")[0][0]
    # perf stat counts sched_switch where it fires, in the task leaving the CPU: the program's
    # switch-outs. 20,000 round trips make 40,000 calls or more; how many of them block (a switch)
    # is the scheduler's choice (on two idle CPUs a reader finds data waiting now and then).
    for ours, theirs, least in ((switches, perf["sched:sched_switch"], 20_000), (calls, perf["raw_syscalls:sys_enter"], 40_000)):
        assert theirs >= least and abs(ours - theirs) <= 0.01 * theirs, (where, ours, theirs)
    names = sorted(r[0] for r in q("SELECT name FROM '{t}/threads.parquet' WHERE is_traced AND NOT is_oslens"))
    assert names == ["stress-ng", "stress-ng-switc", "stress-ng-switc"], names


def test_a_child_and_a_thread_created_after_an_attach_from_the_host_keep_the_containers_pids(compile_c, tmp_path):
    prog = compile_c("attach_target.c")
    log = tmp_path / "program.log"
    box = subprocess.Popen([*CONTAINER, str(prog), str(THREADS), str(BATCHES), str(log)], stdout=subprocess.PIPE, text=True)
    try:
        assert box.stdout.readline() == "ready 1\n"
        host = _host_pid(box.pid)
        trace = tmp_path / "t"
        rec = subprocess.Popen([*OSLENS, "record", "-p", str(host), "-f", "-o", str(trace), "--events", "sched,syscalls"],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait_attached(rec)
        os.kill(host, signal.SIGUSR1)
        out, _ = box.communicate(timeout=120)
        _, err = rec.communicate(timeout=180)  # the program's exit ends the recording
    finally:
        if box.poll() is None:
            box.kill()
    assert rec.returncode == 0 and "detached (exit)" in err, err
    assert box.returncode == 0 and out.startswith("done")
    _need_ebpf(trace)
    _, _, extra = _log(log)
    q = _tables(trace)
    for who in ("child", "thread"):
        # the fork program names it as the container does and writes its kernel ids (task_ids)
        n = q(f"SELECT count(*) FROM '{{t}}/syscalls.parquet' WHERE tid = {extra[who]} AND name = 'getpid'")[0][0]
        assert n == EXTRA, (who, n)
        row = q(f"SELECT is_traced, alive_at_attach, parent_tid, global_tid FROM '{{t}}/tasks.parquet' WHERE tid = {extra[who]}")
        assert row and row[0][:3] == (True, False, 1) and row[0][3] not in (None, extra[who]), (who, row)


def test_a_program_in_another_time_namespace_is_refused_from_the_host_in_one_line(tmp_path):
    probe = subprocess.run([*CONTAINER, "--time", "--monotonic", "86400", "true"], capture_output=True, timeout=30)
    if probe.returncode:
        pytest.skip("this kernel has no time namespaces")
    box = subprocess.Popen([*CONTAINER, "--time", "--monotonic", "86400", "sleep", "60"])
    try:
        host = _started_sleep(box.pid)
        proc = subprocess.run([*OSLENS, "record", "-p", str(host), "-o", str(tmp_path / "t")], capture_output=True, text=True,
                              timeout=60)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and "time namespace" in lines[0] and "nsenter" in lines[0], proc.stderr
        assert not (tmp_path / "t").exists() and box.poll() is None
    finally:
        box.kill()
        box.wait()


def test_perf_alone_for_a_container_from_the_host_says_why_not(compile_c, tmp_path):
    box = subprocess.Popen([*CONTAINER, str(compile_c("attach_target.c")), "1", "3000", str(tmp_path / "log")],
                           stdout=subprocess.PIPE, text=True)
    try:
        assert box.stdout.readline() == "ready 1\n"
        env = dict(os.environ, OSLENS_KERNEL_MECHANISM="perf")
        proc = subprocess.run([*OSLENS, "record", "-p", str(_host_pid(box.pid)), "--duration", "200ms", "--no-import", "-f",
                               "-o", str(tmp_path / "t")], capture_output=True, text=True, timeout=120, env=env)
    finally:
        box.kill()
        box.wait()
    assert proc.returncode == 0, proc.stderr
    k = meta(tmp_path / "t")["kernel"]
    assert k["tier"] != "kernel tracepoints" and "for a process in a PID namespace the kernel tracepoints need eBPF" in k["reason"], k


def test_processes_of_different_pid_namespaces_are_refused_together_in_one_line(tmp_path):
    box = subprocess.Popen([*CONTAINER, "sleep", "60"])
    mine = subprocess.Popen(["sleep", "60"])
    try:
        host = _started_sleep(box.pid)
        proc = subprocess.run([*OSLENS, "record", "-p", f"{host},{mine.pid}", "-o", str(tmp_path / "t")], capture_output=True,
                              text=True, timeout=60)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and "different PID namespaces" in lines[0], proc.stderr
        assert box.poll() is None and mine.poll() is None
    finally:
        for p in (box, mine):
            p.kill()
            p.wait()


def test_samples_from_the_host_name_the_containers_pids(compile_c, tmp_path):
    """perf numbers samples as the collector's namespace does (the host's): they are turned into
    the container's pids as every other record is."""
    prog = compile_c("kernel_getpid.c")
    box = subprocess.Popen([*CONTAINER, "--kill-child", str(prog), "200000000"], env=_clean_env())
    try:
        for _ in range(500):
            kids = Path(f"/proc/{box.pid}/task/{box.pid}/children").read_text().split()
            if kids and Path(f"/proc/{kids[0]}/exe").resolve() == Path(prog).resolve():
                break
            time.sleep(0.01)
        host = _host_pid(box.pid)
        trace = tmp_path / "t"
        rec = subprocess.Popen([*OSLENS, "record", "-p", str(host), "-f", "-o", str(trace), "--events", "sched",
                                "--sample", "499"], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        _wait_attached(rec)
        time.sleep(1.0)
        rec.send_signal(signal.SIGINT)
        _, err = rec.communicate(timeout=180)
        assert rec.returncode == 0, err
    finally:
        box.kill()
        box.wait(timeout=60)
    _need_ebpf(trace)
    q = _tables(trace)
    samples = q("SELECT pid, tid, count(*) FROM '{t}/samples.parquet' GROUP BY ALL")
    assert samples and all((pid, tid) == (1, 1) for pid, tid, _ in samples), (samples, host)
    assert sum(n for *_, n in samples) >= 20  # ~500 a second of a busy program, whatever the load
