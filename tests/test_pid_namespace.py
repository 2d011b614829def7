"""The same trace inside a container as outside (issue 30): `oslens record` run in its own PID,
mount and time namespaces (what `docker run --privileged` gives; here `unshare --pid --fork
--mount-proc --time`) records the kernel's events of the program, and the tables speak in the
pids the program sees, the kernel's own kept in `tasks.global_tid`. Each workload is recorded
inside and outside and the counts of what it did (switches, system calls, wakeups) compared.
Root only (the collector's tracepoints and unshare need it); skipped where unshare cannot
make the namespaces."""

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import OSLENS, ROOT, meta

IS_ROOT = os.geteuid() == 0
WATER = ROOT / "workloads" / "water" / "water"
pytestmark = pytest.mark.skipif(not IS_ROOT, reason="kernel tracepoints and unshare need root (CI runs as root)")


def _can(*args) -> bool:
    return shutil.which("unshare") is not None and subprocess.run(
        ["unshare", *args, "true"], capture_output=True, timeout=30).returncode == 0


@pytest.fixture(scope="module")
def container():
    """The unshare options of a container: PID and mount namespaces, and a time namespace whose
    CLOCK_MONOTONIC is a day ahead when this kernel has them."""
    pid = ["--pid", "--fork", "--mount-proc"]
    if not _can(*pid):
        pytest.skip("unshare cannot make a PID namespace here")
    timens = ["--time", "--monotonic", "86400"]
    return pid + timens if _can(*pid, *timens) else pid


def record(trace: Path, argv, prefix=()):
    proc = subprocess.run([*prefix, *OSLENS, "record", "-f", "-o", str(trace), "--", *map(str, argv)],
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, f"record failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
    return proc


def both(tmp_path, container, argv):
    """The program recorded outside and inside the container: {where: (trace, record's output)}."""
    out = {}
    for where, prefix in (("outside", ()), ("inside", ["unshare", *container])):
        trace = tmp_path / where
        out[where] = (trace, record(trace, argv, prefix))
        k = meta(trace).get("kernel", {})
        if k.get("tier") != "kernel tracepoints":
            pytest.skip(f"kernel tracepoints unavailable {where}: {k.get('reason')}")
    return out


def sql(trace, query):
    from oslens import store

    con = store.open_trace(trace, quiet=True)
    try:
        return con.execute(query).fetchall()
    finally:
        con.close()


def close(a: int, b: int, rel=0.01):
    assert abs(a - b) <= rel * max(a, b), (a, b)


def program_counts(trace) -> dict:
    """What the program's threads did, counted from the kernel tables."""
    prog = "SELECT tid FROM threads WHERE is_traced AND NOT is_oslens"
    q = {
        "switches": f"SELECT count(*) FROM switches WHERE prev_tid IN ({prog})",
        "sleeps": f"SELECT count(*) FROM switches WHERE prev_tid IN ({prog}) AND prev_state = 'S'",
        "syscalls": f"SELECT count(*) FROM syscalls WHERE tid IN ({prog})",
        "wakeups": f"SELECT count(*) FROM wakeups WHERE tid IN ({prog})",
    }
    return {k: sql(trace, v)[0][0] for k, v in q.items()}


def switch_ins_not_emitted(trace, tids) -> int:
    """Switch-ins of `tids` the kernel did not emit (a thread's switch out that follows its switch
    out). On this VM a CPU running the VM agent's thread (`tokio-rt-worker`, a thread of pid 1)
    emits nothing until it leaves: not the agent's switch out (so not the next thread's switch
    in), nor the wakeups its timer interrupts make meanwhile (issue 30)."""
    ids = ", ".join(map(str, tids))
    return sql(trace, f"""
        WITH e AS (SELECT ts, prev_tid AS tid, 0 AS is_in FROM switches WHERE prev_tid IN ({ids})
                   UNION ALL SELECT ts, next_tid, 1 FROM switches WHERE next_tid IN ({ids})),
        o AS (SELECT is_in, lag(is_in) OVER (PARTITION BY tid ORDER BY ts, is_in DESC) AS before FROM e)
        SELECT count(*) FROM o WHERE is_in = 0 AND before = 0""")[0][0]


def check_agrees(proc):
    lines = [ln for ln in proc.stderr.splitlines() if "cross-check" in ln]
    assert len(lines) == 1 and "agrees" in lines[0] and "disagrees" not in lines[0], proc.stderr


def test_a_pipe_ping_pong_inside_a_pid_namespace_counts_as_outside_in_the_pids_it_sees(compile_c, tmp_path, container):
    n = 2000
    prog = compile_c("kernel_pingpong.c")
    cpu = max(os.sched_getaffinity(0))  # one CPU for both, so each round trip is two sleeps
    runs = both(tmp_path, container, [prog, n, cpu])
    counts = {}
    for where, (trace, proc) in runs.items():
        parent, child = map(int, proc.stdout.split("pids", 1)[1].split()[:2])
        # the tables name the two processes by the pids they printed (inside: the namespace's)
        pids = {r[0] for r in sql(trace, "SELECT DISTINCT prev_pid FROM switches WHERE prev_comm LIKE 'kernel_pingpong%'")}
        assert pids == {parent, child}, (where, pids, parent, child)
        counts[where] = c = program_counts(trace)
        # each round trip: two writes and two reads, and the CPU handed over twice (blocked in a
        # read or preempted by the task it woke, as the scheduler decides: only the sum is fixed)
        assert c["syscalls"] >= 4 * n and c["switches"] >= 2 * n, (where, c)
        check_agrees(proc)
    for k in ("syscalls", "switches"):
        close(counts["inside"][k], counts["outside"][k])
    m = meta(runs["inside"][0])["kernel"]
    assert m["pid_namespace"] > 0 and "pid_namespace" not in meta(runs["outside"][0])["kernel"]
    # the kernel's own ids are kept: the program's tasks have global tids other than their own
    glob = sql(runs["inside"][0], "SELECT tid, global_tid FROM tasks WHERE is_traced")
    assert glob and all(g is not None and g != t for t, g in glob), glob
    assert [r for r in sql(runs["outside"][0], "SELECT count(*) FROM tasks WHERE global_tid IS DISTINCT FROM tid")] == [(0,)]


def test_a_fixed_number_of_sleeps_gives_the_same_switches_wakeups_and_calls_inside(compile_c, tmp_path, container):
    n = 2000
    prog = compile_c("kernel_sleeps.c")
    runs = both(tmp_path, container, [prog, n])
    counts, names = {}, {}
    for where, (trace, proc) in runs.items():
        tids = set(map(int, proc.stdout.split("tids", 1)[1].split()[:2]))
        names[where] = sql(trace, "SELECT name FROM threads WHERE is_traced AND NOT is_oslens ORDER BY name")
        assert {r[0] for r in sql(trace, "SELECT tid FROM threads WHERE is_traced AND NOT is_oslens")} == tids, where
        counts[where] = c = program_counts(trace)
        # each sleep is one switch out asleep, one wakeup and one call (a few wakeups can go
        # unrecorded either way: a timer's wakeup that interrupts another eBPF program on its CPU
        # is skipped by the kernel's recursion guard)
        # (and now and then a sleep's timer fires before its task left the CPU: no switch then)
        # (the kernel's count of the wakeup program's skipped runs, for every task, bounds the
        # first; on this VM the second happens too: see unwoken_sleeps)
        skipped = meta(trace)["kernel"].get("skipped_by_kernel", {}).get("sched_wakeup", 0)
        assert 0.99 * 2 * n <= c["sleeps"] <= 2 * n + 5, (where, c)
        # a wakeup goes missing with the kernel's own gaps: at most one per thread per gap
        gaps = switch_ins_not_emitted(trace, tids)
        assert 0.99 * 2 * n - skipped - len(tids) * gaps <= c["wakeups"] <= 2 * n + 5, (where, c, skipped, gaps)
        calls = sql(trace, "SELECT count(*) FROM syscalls WHERE name LIKE '%nanosleep' AND tid IN "
                           "(SELECT tid FROM threads WHERE is_traced AND NOT is_oslens)")
        assert calls == [(2 * n,)], (where, calls)
        check_agrees(proc)
    # the sleeps are the program's (all switches and system calls also count preemptions and
    # futex waits, which vary with the machine's load)
    close(counts["inside"]["sleeps"], counts["outside"]["sleeps"])
    assert names["inside"] == names["outside"], names


def test_getpid_returns_the_pid_the_tables_name(compile_c, tmp_path, container):
    n = 20_000
    prog = compile_c("kernel_getpid.c")
    runs = both(tmp_path, container, [prog, n])
    for where, (trace, proc) in runs.items():
        pid = meta(trace)["pid"]
        rows = sql(trace, f"SELECT count(*), min(ret), max(ret) FROM syscalls WHERE pid = {pid} AND name = 'getpid'")
        assert rows == [(n, pid, pid)], (where, rows)
        check_agrees(proc)


def test_a_third_party_program_switches_as_many_times_inside(tmp_path, container):
    if not shutil.which("stress-ng"):
        pytest.skip("stress-ng is not installed (scripts/setup.sh installs it)")
    runs = both(tmp_path, container, ["stress-ng", "--switch", "1", "--switch-ops", "4000", "-q"])
    calls, switches = {}, {}
    for where, (trace, proc) in runs.items():
        # how often its two processes hand the CPU over is the scheduler's choice, run to run: the
        # cross-check holds the switches to the kernel's own counts exactly, and the messages are fixed
        check_agrees(proc)
        c = program_counts(trace)
        assert c["sleeps"] >= 4000, (where, c)
        switches[where] = c["switches"]
        calls[where] = dict(sql(trace, "SELECT name, count(*) FROM syscalls WHERE name IN ('read', 'write') AND tid IN "
                                       "(SELECT tid FROM threads WHERE is_traced AND NOT is_oslens) GROUP BY 1"))
        assert calls[where]["write"] >= 4000 and calls[where]["read"] >= 4000, (where, calls[where])
    for k in ("read", "write"):
        close(calls["inside"][k], calls["outside"][k])
    # how many switches the messages take depends on where the scheduler put the two processes and
    # on other load (a CI run under load differed by over 1%), so each run's switches are held to the
    # kernel's own counts by the cross-check above, not to the other run's
    assert switches["inside"] >= 4000 and switches["outside"] >= 4000, switches
    names = {w: sorted(r[0] for r in sql(t, "SELECT name FROM threads WHERE is_traced AND NOT is_oslens"))
             for w, (t, _p) in runs.items()}
    assert names["inside"] == names["outside"], names


@pytest.mark.skipif(not WATER.exists(), reason="workloads/water is not built (run make)")
def test_water_inside_a_container_has_its_kernel_events_and_the_same_threads(tmp_path, container):
    runs = both(tmp_path, container, [WATER, "--threads", "2", "--steps", "2", "--quiet"])
    for where, (trace, proc) in runs.items():
        check_agrees(proc)
        rows = sql(trace, """SELECT t.name, count(s.tid) FROM threads t LEFT JOIN cpu_slices s ON s.tid = t.tid
                             WHERE t.is_traced AND NOT t.is_oslens GROUP BY t.name ORDER BY t.name""")
        assert [r[0] for r in rows] == ["water child 1", "water parent"], (where, rows)
        assert all(c > 0 for _n, c in rows), (where, rows)
        # the application's records and the kernel's share one timeline: each thread's first
        # application record falls inside its life as the kernel saw it
        late = sql(trace, """SELECT count(*) FROM threads t JOIN (SELECT tid, min(ts) AS ts FROM app_events GROUP BY tid) a
                             USING (tid) WHERE t.is_traced AND NOT t.is_oslens AND (a.ts < t.start_ns OR a.ts > t.end_ns)""")
        assert late == [(0,)], where


def test_perf_alone_inside_a_pid_namespace_says_why_it_falls_back(compile_c, tmp_path, container):
    # perf's raw fields hold the kernel's pids and its headers the namespace's: without eBPF the
    # tracepoint tier is refused with the reason, and the counters (opened by the namespace's pid) kept
    prog = compile_c("kernel_getpid.c")
    env = dict(os.environ, OSLENS_KERNEL_MECHANISM="perf")
    proc = subprocess.run(["unshare", *container, *OSLENS, "record", "-f", "--no-import", "-o", str(tmp_path / "t"),
                           "--", str(prog), "1000"], capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stderr
    k = meta(tmp_path / "t")["kernel"]
    assert k["tier"] == "per-process software counters", k
    assert "inside a PID namespace the kernel tracepoints need eBPF" in k["reason"], k["reason"]
