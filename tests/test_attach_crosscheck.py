"""The cross-check of `oslens record -p` (issues 30, 31): the trace's switches, runs and CPU time
of the attached threads over the attach window against the deltas of their /proc counters read at
the attach and at the detach (analysis/crosscheck.py crosscheck_attach). A planted disagreement
(a reading edited in a copy of the trace) must be named. No assertion is on a timing."""

import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import OSLENS, meta, run_oslens
from oslens import store
from oslens.analysis import crosscheck
from oslens.store import meta_update
from test_attach import COLLECTOR, _attach, _need, _start, _wait_attached

IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not (COLLECTOR.exists() and IS_ROOT),
                                reason="needs the built oslens-collector (make) and root, to attach to tracepoints")
AGREES = "cross-check: agrees with the kernel (trace / /proc status, /proc schedstat)"


def _reading(tid, ts, vol, invol, cpu, runs, pid=10):
    return {"tid": tid, "pid": pid, "ts": ts, "voluntary": vol, "involuntary": invol, "cpu_ns": cpu, "wait_ns": 0, "runs": runs}


def test_compare_attach_leaves_out_threads_with_one_reading_and_says_so():
    before = [_reading(10, 0, 5, 1, 1_000_000, 6), _reading(11, 0, 0, 0, 0, 0)]  # 11 ends during the attach
    after = [_reading(10, 100, 105, 3, 51_000_000, 108), _reading(12, 100, 40, 0, 9_000_000, 40)]  # 12 is new
    trace = {t: {"voluntary": 100, "involuntary": 2, "cpu_ns": 50_000_000, "unknown_ns": 0, "switches": 102}
             for t in (10, 11, 12)}
    rows = {r["count"]: r for r in crosscheck.compare_attach(before, after, trace).to_pylist()}
    assert [(r["trace"], r["kernel"], r["agrees"]) for r in rows.values()] == [
        (100.0, 100.0, True), (2.0, 2.0, True), (50e6, 50e6, True), (102.0, 102.0, True)]
    assert rows["runs"]["note"] == ("1 threads read at the attach and the detach; "
                                    "2 thread(s) created or ended during the attach left out (one reading)")
    assert crosscheck.compare_attach(before, [], trace).num_rows == 0  # all ended before the detach: no line
    trace[10]["voluntary"] = 90  # beyond 2% and the slack of 2 per thread
    table = crosscheck.compare_attach(before, after, trace)
    assert crosscheck.summary_line(table).startswith(
        "DISAGREES with the kernel in 1 of 4 counts (trace / /proc status, /proc schedstat): voluntary switches 90 vs 100")


def test_compare_attach_allows_the_cpu_time_the_hypervisor_stole_and_says_so():
    """The trace's slices hold stolen time, /proc's CPU time does not (capture/steal.py): 300 ms
    more in the trace disagrees, unless up to 300 ms were stolen over the attach."""
    before = [_reading(10, 0, 5, 1, 1_000_000, 6)]
    after = [_reading(10, 100, 105, 3, 951_000_000, 108)]
    trace = {10: {"voluntary": 100, "involuntary": 2, "cpu_ns": 1_250_000_000, "unknown_ns": 0, "switches": 102}}
    cpu = lambda t: next(r for r in t.to_pylist() if r["count"] == "CPU time")
    assert not cpu(crosscheck.compare_attach(before, after, trace))["agrees"]
    stolen = crosscheck.stolen_at_most({"steal": {"cpu0": 29, "cpu1": 0, "tick_ns": 10_000_000}}, None)
    assert stolen == 310_000_000  # whole ticks: below (gained + 1) per CPU
    row = cpu(crosscheck.compare_attach(before, after, trace, stolen=stolen))
    assert row["agrees"] and "the hypervisor stole up to 310 ms" in row["note"]


def _checked(trace):
    con = store.open_trace(trace, quiet=True)
    try:
        return crosscheck.crosscheck(con)
    finally:
        con.close()


@needs_root
def test_attach_crosscheck_agrees_and_names_a_planted_disagreement(compile_c, tmp_path):
    program, _log = _start(compile_c, tmp_path)
    trace = tmp_path / "t"
    rec = _attach(program.pid, trace)
    _wait_attached(rec)
    time.sleep(1.0)
    rec.send_signal(signal.SIGINT)
    _, err = rec.communicate(timeout=120)
    program.communicate(timeout=120)
    assert rec.returncode == 0, err
    _need(trace, None)
    assert AGREES in err, err
    m = meta(trace)
    assert m["crosscheck"]["agrees"] is True
    counts = m["attach"]["kernel_counts"]
    assert len(counts["at_attach"]) == len(counts["at_detach"]) == 4  # the main thread and 3 workers
    # planted: one thread's detach reading says it switched 500 more times than the trace saw
    copy = tmp_path / "planted"
    shutil.copytree(trace, copy)
    attach = json.loads((copy / "meta.json").read_text())["attach"]
    attach["kernel_counts"]["at_detach"][1]["voluntary"] += 500
    meta_update.add(copy, "attach", attach)
    line = crosscheck.summary_line(_checked(copy))
    assert line.startswith("DISAGREES with the kernel in 1 of 4 counts (trace / /proc status, /proc schedstat): "
                           "voluntary switches "), line
    report = run_oslens("report", str(copy))
    assert "DISAGREES with the kernel" in report.stdout, report.stdout


def _tree(root: int) -> list[int]:
    """root and its descendants (from /proc's parent pids)."""
    parent = {}
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                stat = (d / "stat").read_text()
            except OSError:
                continue
            parent[int(d.name)] = int(stat[stat.rindex(")") + 2:].split()[1])
    out, grew = [root], True
    while grew:
        new = [p for p, pp in parent.items() if pp in out and p not in out]
        out += new
        grew = bool(new)
    return out


@needs_root
@pytest.mark.parametrize("container", [False, True], ids=["host", "pid_namespace"])
def test_attach_crosscheck_agrees_on_stress_ng_switch(tmp_path, container):
    """A third-party program, attached from the host; also inside a PID namespace (issue 30),
    where the readings name threads by the namespace's tids, as the trace does."""
    if not shutil.which("stress-ng") or (container and not shutil.which("unshare")):
        pytest.skip("stress-ng and unshare are needed (scripts/setup.sh installs them)")
    cmd = ["stress-ng", "--switch", "1", "--timeout", "60", "-q"]
    stress = subprocess.Popen(["unshare", "--pid", "--fork", "--mount-proc", *cmd] if container else cmd)
    try:
        pids = []
        for _ in range(100):  # its stressor and the child it switches with are up
            pids = [p for p in _tree(stress.pid) if _comm(p).startswith("stress-ng")]
            if len(pids) >= 3:
                break
            time.sleep(0.05)
        trace = tmp_path / "s"
        rec = subprocess.run([*OSLENS, "record", "-p", ",".join(map(str, pids)), "--duration", "1s", "-f",
                              "-o", str(trace), "--events", "sched"], capture_output=True, text=True, timeout=180)
    finally:
        for p in reversed(_tree(stress.pid)):  # stress-ng ends its stressors on SIGINT; unshare waits for it
            if _comm(p) == "stress-ng":
                os.kill(p, signal.SIGINT)
        stress.wait(timeout=60)
    assert rec.returncode == 0, rec.stderr
    _need(trace, None)
    assert AGREES in rec.stderr, rec.stderr
    readings = meta(trace)["attach"]["kernel_counts"]["at_detach"]
    assert len(readings) == 3 and (not container or sorted(r["tid"] for r in readings) == [1, 2, 3]), readings


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
