"""Invariants of the time breakdown on real third-party programs (docs/report.md, section 1;
/work/shared/ground-truth.md): each thread's columns add up to its wall time; I/O wait never
exceeds the time in uninterruptible sleep plus the time with the thread's own completed requests
in flight; syscall time never exceeds its recorded enter->exit pairs; a sleeper sleeps, a compute
loop computes; oslens's own threads and launcher are never the program. Each program runs a
fraction of a second; the bounds are computed here from the raw tables, not by the analysis."""

import bisect
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import run_oslens

SIGNAL_PY = """
import os, signal, time
got = []
signal.signal(signal.SIGUSR1, lambda s, f: got.append(s))
os.kill(os.getpid(), signal.SIGUSR1)
t = time.time()
while time.time() - t < 0.05:
    pass
assert got == [signal.SIGUSR1]
"""

FSYNC_PY = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
for _ in range(8):
    os.write(fd, b"x" * 65536)
    os.fsync(fd)
os.close(fd)
"""

JAVA = """
public class Spin {
  public static void main(String[] a) throws Exception {
    Thread[] ts = new Thread[2];
    for (int i = 0; i < 2; i++) {
      ts[i] = new Thread(() -> { long s = 0; for (int k = 0; k < 20000000; k++) s += k; if (s == 42) System.out.print(""); }, "spin-" + i);
      ts[i].start();
    }
    for (Thread t : ts) t.join();
  }
}
"""

GO = """
package main

import "sync"

func main() {
	var wg sync.WaitGroup
	for g := 0; g < 3; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			s := 0
			for i := 0; i < 20000000; i++ {
				s += i ^ g
			}
			_ = s
		}(g)
	}
	wg.Wait()
}
"""

NODE = "setTimeout(() => { require('fs').writeFileSync(process.argv[1], 'x'.repeat(4096)); }, 100);"

BASH_CHAIN = "x=$(/bin/echo hi); ( : ); /bin/true; sleep 0.3"


def _need(*tools):
    for t in tools:
        if shutil.which(t) is None:
            pytest.skip(f"{t} is not installed (add it to scripts/setup.sh)")


def _program(name, tmp: Path):
    """(argv, extra record options) for each program, built in tmp where needed."""
    if name == "sleeper":
        return ["sleep", "0.3"], []
    if name == "join_waiter":
        _need("sysbench")
        return ["sysbench", "cpu", "--threads=2", "--time=1", "run"], []
    if name == "signal":
        (tmp / "sig.py").write_text(SIGNAL_PY)
        return ["/usr/bin/python3", str(tmp / "sig.py")], []
    if name == "fork_exec":
        return ["bash", "-c", BASH_CHAIN], []
    if name == "fsync":
        (tmp / "w.py").write_text(FSYNC_PY)
        return ["/usr/bin/python3", str(tmp / "w.py"), str(tmp / "out.bin")], []
    if name == "locks_tiny_buffer":
        _need("sysbench")
        return ["sysbench", "mutex", "--threads=2", "--mutex-num=1", "--mutex-locks=20000", "--mutex-loops=0", "run"], \
            ["--buffer-mb", "1", "--sync", "all"]  # fills the buffer with every acquisition
    if name == "launcher":
        return ["sh", "-c", "exit 7"], []
    if name == "time_child":
        return ["/usr/bin/time", "-f", "%w %c %R %F", "-o", str(tmp / "rusage"), "sleep", "0.2"], []
    if name == "jvm":
        _need("java", "javac")
        (tmp / "Spin.java").write_text(JAVA)
        subprocess.run(["javac", "-d", str(tmp), str(tmp / "Spin.java")], check=True)
        return ["java", "-Xint", "-cp", str(tmp), "Spin"], []
    if name == "node":
        if shutil.which("node") is None:
            print("node skipped: nodejs is not installed")
            pytest.skip("node is not installed (apt-get install nodejs)")
        return ["node", "-e", NODE, str(tmp / "node.out")], []
    if name == "go":
        _need("go")
        (tmp / "main.go").write_text(GO)
        # the default build cache keeps this a second's work after the first build on a machine
        r = subprocess.run(["go", "build", "-o", str(tmp / "spin"), str(tmp / "main.go")], capture_output=True, text=True,
                           cwd=tmp, env={**os.environ, "GO111MODULE": "off"})
        assert r.returncode == 0, r.stderr
        return [str(tmp / "spin")], []
    raise KeyError(name)


PROGRAMS = ["sleeper", "join_waiter", "signal", "fork_exec", "fsync", "locks_tiny_buffer", "launcher", "time_child",
            "jvm", "node", "go"]
_TRACES: dict = {}


def _trace(name, tmp_path_factory):
    if name not in _TRACES:
        tmp = tmp_path_factory.mktemp(name)
        argv, opts = _program(name, tmp)
        trace = tmp / "trace"
        r = run_oslens("record", *opts, "-o", trace, "--", *argv, check=False, timeout=300)
        assert r.returncode == (7 if name == "launcher" else 0), r.stderr[-2000:]
        from oslens.analysis import db
        from oslens.store import open_trace
        con = open_trace(trace, quiet=True)
        if not db.kernel_status(con)["scheduling"]:
            pytest.skip("the kernel collector recorded no scheduling events (needs root)")
        _TRACES[name] = (trace, con, tmp)
    return _TRACES[name]


@pytest.fixture(params=PROGRAMS)
def traced(request, tmp_path_factory):
    return request.param, *_trace(request.param, tmp_path_factory)


@pytest.fixture
def named(tmp_path_factory):
    return lambda name: _trace(name, tmp_path_factory)


def _breakdown(con):
    from oslens.analysis import breakdown
    return {r["tid"]: r for r in breakdown.time_breakdown(con).to_pylist()}


def _union_within(intervals, lo, hi) -> int:
    """Length of the union of [s, e) intervals clipped to [lo, hi)."""
    total, cur_s, cur_e = 0, None, None
    for s, e in sorted((max(s, lo), min(e, hi)) for s, e in intervals):
        if e <= s:
            continue
        if cur_e is None or s > cur_e:
            total += (cur_e - cur_s) if cur_e is not None else 0
            cur_s, cur_e = s, e
        else:
            cur_e = max(cur_e, e)
    return total + ((cur_e - cur_s) if cur_e is not None else 0)


def _d_and_inflight(con, tid, lo, hi):
    """Off-CPU spans after a switch out in D, plus the thread's completed requests in flight."""
    outs = con.execute("SELECT ts, CAST(prev_state AS VARCHAR) FROM switches WHERE prev_tid = ? ORDER BY ts", [tid]).fetchall()
    ins = [r[0] for r in con.execute("SELECT ts FROM switches WHERE next_tid = ? ORDER BY ts", [tid]).fetchall()]
    spans = []
    for ts, st in outs:
        if (st or "").startswith("D"):
            i = bisect.bisect_right(ins, ts)
            spans.append((ts, ins[i] if i < len(ins) else hi))
    spans += con.execute("SELECT issue_ns, complete_ns FROM block_io WHERE tid = ? AND complete_ns IS NOT NULL",
                         [tid]).fetchall()
    return _union_within(spans, lo, hi)


def test_each_thread_adds_up_io_and_syscalls_are_bounded_and_oslens_is_apart(traced):
    from oslens.analysis import program
    name, trace, con, _tmp = traced
    prog = program.program(con)
    bd = _breakdown(con)
    assert bd, f"{name}: no program threads"
    from oslens.analysis.breakdown import TIME_COLUMNS
    own = {t for (t,) in con.execute("SELECT tid FROM threads WHERE is_oslens OR starts_with(name, 'oslens')").fetchall()}
    for tid, r in bd.items():
        lo, hi = prog.start[tid], prog.end[tid]
        assert sum(r[c] for c in TIME_COLUMNS) == r["wall_ns"] == hi - lo, (name, r)
        assert r["io_wait_ns"] <= _d_and_inflight(con, tid, lo, hi), (name, r)
        paired = con.execute("SELECT coalesce(sum(least(end_ns, ?) - greatest(start_ns, ?)), 0) FROM syscalls "
                             "WHERE tid = ? AND end_ns > ? AND start_ns < ?", [hi, lo, tid, lo, hi]).fetchone()[0]
        assert r["syscalls_ns"] <= paired, (name, r)
        assert not r["name"].startswith("oslens") and tid not in own, (name, r)
    # the built-in cross-check: every count, CPU time included, within 2% of the kernel's
    # (analysis/crosscheck.py says which differences are accounted for, and by how much: for CPU
    # time the 4 ms slack and the kernel's skipped clock updates bounded from the trace, which
    # made the Go program's sysmon thread fall ~3-7 ms short of rusage under load, docs/report.md)
    from oslens.analysis import crosscheck
    assert crosscheck.TOLERANCE == 0.02 and crosscheck.CPU_SLACK_NS == 4_000_000
    rows = crosscheck.crosscheck(con).to_pylist()
    assert {r["count"] for r in rows} >= {"CPU time", "voluntary switches", "involuntary switches"}, (name, rows)
    line = crosscheck.summary_line(crosscheck.crosscheck(con))
    assert all(r["agrees"] for r in rows), (name, line, [r["note"] for r in rows if not r["agrees"]])
    # nothing of a lost record runs to a thread's end: the syscalls table has no nr -1 rows and no
    # fork children's returns
    assert con.execute("SELECT count(*) FROM syscalls WHERE nr = -1").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM syscalls WHERE start_ns IS NULL AND name IN ('clone', 'clone3', 'fork', 'vfork') "
                       "AND ret = 0").fetchone()[0] == 0


def test_a_sleeper_sleeps_and_a_join_waiter_is_not_waiting_for_io(named):
    _trace, con, _ = named("sleeper")
    (r,) = _breakdown(con).values()
    assert r["sleeping_ns"] > r["wall_ns"] / 2, r
    _trace, con, _ = named("join_waiter")
    bd = _breakdown(con)
    main = bd[min(bd)]
    assert main["sleeping_ns"] > main["wall_ns"] / 2, main  # in pthread_join: not I/O (the 'D' bound is checked above)
    workers = [r for t, r in bd.items() if t != min(bd)]
    assert len(workers) == 2
    for w in workers:  # a compute loop computes most of the time it is not waiting for a CPU
        assert w["computation_ns"] > 0.5 * (w["wall_ns"] - w["preempted_ns"]), w


def test_no_program_thread_waits_uninterruptibly_in_the_recorders_descriptor_move(named):
    """The recorder moves each chunk file's descriptor above 511 (fcntl F_DUPFD): growing a
    descriptor table that threads share waits an RCU grace period in D state (11-28 ms here),
    which sysbench's threads showed as I/O wait until the table was grown at load."""
    _trace, con, _ = named("join_waiter")
    waits = con.execute("SELECT count(*) FROM switches s JOIN syscalls y ON y.tid = s.prev_tid "
                        "AND s.ts BETWEEN y.start_ns AND y.end_ns JOIN threads t ON t.tid = s.prev_tid "
                        "WHERE NOT t.is_oslens AND starts_with(CAST(s.prev_state AS VARCHAR), 'D') "
                        "AND y.name = 'fcntl'").fetchone()[0]
    assert waits == 0


def test_a_signal_handlers_sigreturn_is_one_short_call(named):
    _trace, con, _ = named("signal")
    bd = _breakdown(con)
    (main,) = [r for r in bd.values() if r["name"] == "python3"]
    sr = con.execute("SELECT start_ns, end_ns FROM syscalls WHERE tid = ? AND name = 'rt_sigreturn'", [main["tid"]]).fetchall()
    assert len(sr) == 1 and sr[0][1] is not None
    assert main["computation_ns"] > main["syscalls_ns"], main  # the 50 ms loop is computation


def test_subshells_end_when_the_kernel_says(named):
    _trace, con, _ = named("fork_exec")
    bd = _breakdown(con)
    rows = con.execute("SELECT t.tid, t.end_ns, k.end_ns FROM threads t JOIN tasks k USING (tid) WHERE t.is_traced "
                       "AND k.end_ns IS NOT NULL").fetchall()
    assert rows
    for tid, end, kernel_end in rows:
        assert end == kernel_end
    root = min(bd)
    for tid, r in bd.items():
        if tid != root:  # $(...), ( : ), /bin/true: milliseconds (plus waits for a CPU), not the 300 ms sleep after them
            assert r["wall_ns"] - r["preempted_ns"] < bd[root]["wall_ns"] / 3, r


def test_a_lock_wait_never_exceeds_the_recorded_waits_when_the_buffer_fills(named):
    _trace, con, _ = named("locks_tiny_buffer")
    assert con.execute("SELECT sum(lost_events) FROM threads WHERE is_traced").fetchone()[0] > 0, "the buffer never filled"
    for tid, r in _breakdown(con).items():
        closed = con.execute("SELECT coalesce(sum(coalesce(acquire_ns, release_ns) - request_ns), 0) FROM sync WHERE tid = ? "
                             "AND coalesce(acquire_ns, release_ns) IS NOT NULL", [tid]).fetchone()[0]
        # open waits with a later record of the thread end there; the rest end at the loss
        open_ = con.execute("""SELECT coalesce(sum(n.ts - s.request_ns), 0) FROM
                (SELECT request_ns FROM sync WHERE tid = ? AND acquire_ns IS NULL AND release_ns IS NULL) s
                ASOF JOIN (SELECT ts FROM app_events WHERE tid = ?) n ON n.ts > s.request_ns""", [tid, tid]).fetchone()[0]
        assert r["sync_wait_ns"] <= closed + open_, r


def test_the_launcher_is_oslens_and_not_the_program(named):
    from oslens.analysis import tasks
    _trace, con, _ = named("launcher")
    (r,) = _breakdown(con).values()
    exec_ns = con.execute("SELECT exec_ns FROM threads WHERE tid = ?", [r["tid"]]).fetchone()[0]
    assert r["start_ns"] == exec_ns
    own = tasks.oslens_activity(con).to_pylist()
    launcher = [o for o in own if o["what"] == tasks.LAUNCHER]
    assert len(launcher) == 1 and launcher[0]["end_ns"] == exec_ns and launcher[0]["syscalls"] >= 1
    # the PATH search's failed execve calls are the launcher's; the program has only the one that worked
    failed = con.execute("SELECT count(*) FROM syscalls WHERE tid = ? AND name = 'execve' AND ret < 0 AND end_ns >= ?",
                         [r["tid"], exec_ns]).fetchone()[0]
    assert failed == 0


def test_names_follow_exec_and_renames(named):
    _trace, con, _ = named("time_child")
    names = sorted(r["name"] for r in _breakdown(con).values())
    assert names == ["sleep", "time"], names
    _trace, con, _ = named("jvm")
    names = {r["name"] for r in _breakdown(con).values()}
    assert {"GC Thread#0", "spin-0", "spin-1"} <= names, names
    assert "VM Thread" in names


def test_the_childs_rusage_agrees_with_the_trace(named):
    """GNU time's rusage of its child (voluntary, involuntary switches: every thread of the
    process, the recorder's helper included) against the trace's switches of that process. A
    thread's last switch, as dead (X), comes after the kernel folded its counts into the process."""
    _trace, con, tmp = named("time_child")
    voluntary, involuntary, _minor, _major = map(int, (tmp / "rusage").read_text().split()[-4:])
    (child,) = [r for r in _breakdown(con).values() if r["name"] == "sleep"]
    vol, invol = con.execute(
        """SELECT count(*) FILTER (WHERE NOT starts_with(CAST(prev_state AS VARCHAR), 'R')
                                    AND NOT starts_with(CAST(prev_state AS VARCHAR), 'X')),
                  count(*) FILTER (WHERE starts_with(CAST(prev_state AS VARCHAR), 'R'))
           FROM switches WHERE prev_tid IN (SELECT tid FROM threads WHERE pid = ?)""", [child["pid"]]).fetchone()
    assert (vol, invol) == (voluntary, involuntary)
