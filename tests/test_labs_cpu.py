"""End to end: the CPU and synchronisation labs (7 scheduler weights, 8 mutex fast path, 9 CPU
throttling, 10 the quantum) on this machine's kernel: each quick run, its check against the
reference answers (all right) and with every answer wrong (each fails with its reason); lab 8's
futex counts against strace in the same run; lab 10's sched_rr_timeslice_ms restored at the end
and, after a SIGKILL of `oslens lab run`, by the next oslens command."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import OSLENS, ROOT, run_oslens
from test_labs import ANSWERS, assert_each_wrong_answer_fails

RR = Path("/proc/sys/kernel/sched_rr_timeslice_ms")
root_only = pytest.mark.skipif(os.geteuid() != 0, reason="needs root")


@pytest.fixture
def lab_env(tmp_path):
    """An own journal directory, so recovery here never touches other oslens runs' journals."""
    return dict(os.environ, OSLENS_STATE_DIR=str(tmp_path / "state"))


def _results(out: Path, number: int) -> dict:
    return json.loads((out / f"lab{number:02d}-default-quick" / "results.json").read_text())["results"]


def _run_and_check(number: int, total: int, tmp_path: Path, env: dict, answers_of_run=None) -> tuple[subprocess.CompletedProcess, dict]:
    """The lab's quick run, checked with the reference answers (`answers_of_run(reference, results,
    tmp_path)` writes the answers to questions whose model takes a figure of the run)."""
    out = tmp_path / "traces"
    r = run_oslens("lab", "run", number, "--quick", "-o", out, env=env, cwd=tmp_path)
    answers = ANSWERS / f"{number:02d}-quick.toml"
    if answers_of_run is not None:
        answers = answers_of_run(answers, _results(out, number), tmp_path)
    ok = run_oslens("lab", "check", number, "--answers", answers, "-o", out, env=env, cwd=tmp_path)
    assert ok.stdout.strip().endswith(f"{total} of {total} right"), ok.stdout
    assert_each_wrong_answer_fails(number, answers, out, env, tmp_path)
    assert list((tmp_path / "state").glob("tune-*.json")) == []
    return r, _results(out, number)


def test_lab7_shares_and_every_wrong_answer(tmp_path, lab_env):
    _r, res = _run_and_check(7, 5, tmp_path, lab_env)
    assert res["cpu_s_nice5"][0] > res["cpu_s_nice5"][1] and res["cpu_s_nice10"][0] > res["cpu_s_nice10"][1]


@root_only
@pytest.mark.skipif(not Path("/sys/fs/cgroup/cpu/cgroup.procs").exists() and not Path("/sys/fs/cgroup/cgroup.controllers").exists(),
                    reason="no cpu cgroup controller")
def test_lab9_throttled_and_every_wrong_answer(tmp_path, lab_env):
    r, res = _run_and_check(9, 4, tmp_path, lab_env)
    assert res["throttled_periods"] > 0 and res["throttled_periods"] <= res["periods"]
    assert "restored: cpu_max oslens-" in r.stdout


def _lab8_answers(reference: Path, results: dict, tmp_path: Path) -> Path:
    """The reference answers with the pinned case's figure worked out from this run's critical
    section share h, as the sheet asks (h / (1 + h)): h varies from run to run (0.24-0.82 seen)."""
    from oslens.labs import mutex

    h = results["cs_fraction"]
    text = re.sub(r"(?m)^pinned_contended_per_handover = .*$",
                  f"pinned_contended_per_handover = {mutex.handover_model(h):.3f}", reference.read_text())
    answers = tmp_path / "08-answers.toml"
    answers.write_text(text)
    return answers


def test_lab8_lock_tables_and_futex_calls(tmp_path, lab_env):
    """Every lock operation is seen by the recorder (found free + found taken = the program's own
    count); one thread makes no futex call; two real-time threads on two CPUs make many, two
    pinned to one CPU few."""
    r, res = _run_and_check(8, 5, tmp_path, lab_env, answers_of_run=_lab8_answers)
    for case in ("one", "two", "pinned"):
        x = res[case]
        assert x["free"] + x["contended"] == x["ops"], case
        assert x["futex"] <= x["process_futex"]
    assert res["one"]["futex"] == 0 and res["one"]["contended"] == 0 and res["one"]["workers"] == 1
    # on one CPU the holder cannot unlock between the waiter's try and its wait: a FUTEX_WAIT each at least
    # (on two CPUs the lock may come free in between)
    assert res["pinned"]["futex"] >= res["pinned"]["contended"]
    assert res["pinned"]["contended"] <= res["pinned"]["handovers"] + 1  # only after a preemption inside
    per_op = {case: res[case]["futex"] / res[case]["ops"] for case in ("two", "pinned")}
    assert per_op["two"] > 0.01 and per_op["two"] > 50 * per_op["pinned"], per_op  # many against few
    assert "futex calls per acquisition that found the lock taken" in r.stdout or res["two"]["contended"] == 0


@pytest.mark.skipif(shutil.which("strace") is None, reason="strace is not installed")
def test_lab8_futex_count_agrees_with_strace(tmp_path):
    """The syscalls table counts the futex calls strace -f -c counts, in the same run."""
    subprocess.run(["make", "-s", "-C", str(ROOT / "workloads" / "labs"), "mutex_ops"], check=True)
    trace, report = tmp_path / "t", tmp_path / "strace.txt"
    run_oslens("record", "--no-preload", "--events", "syscalls", "-f", "-o", trace, "--", "strace", "-f", "-c",
               "-e", "trace=futex", "-o", report, ROOT / "workloads" / "labs" / "mutex_ops", "--threads", "2",
               "--ops", "100000", cwd=tmp_path)
    line = next(x for x in report.read_text().splitlines() if x.split()[-1:] == ["futex"])
    fields = line.split()
    strace_calls = int(fields[3])
    q = run_oslens("sql", trace, "SELECT count(*) AS n FROM syscalls s JOIN tasks t USING (tid) "
                   "WHERE s.name = 'futex' AND t.comm = 'mutex_ops'", "--format", "csv", cwd=tmp_path)
    assert int(q.stdout.strip().splitlines()[-1]) == strace_calls >= 1


@root_only
@pytest.mark.skipif(not RR.exists(), reason="no sched_rr_timeslice_ms")
def test_lab10_quantum_counts_and_restored_timeslice(tmp_path, lab_env):
    before = RR.read_text()
    out = tmp_path / "traces"
    r = run_oslens("lab", "run", "10", "--quick", "-o", out, env=lab_env, cwd=tmp_path)
    assert RR.read_text() == before and "restored: sched_rr_timeslice_ms" in r.stdout
    res = _results(out, 10)
    for pair in res["pairs"]:
        assert pair["policy"] == 2  # SCHED_RR, through the control layer's per-task policy
        assert 0 < pair["handovers"] <= pair["involuntary"] <= pair["sched_nivcsw"]  # the kernel saw each handover
        if pair["perf_switches"] is not None:  # perf counts from the exec, getrusage from the fork
            assert pair["perf_switches"] <= pair["rusage_switches"] <= pair["perf_switches"] + 8
    longest, shortest = res["pairs"][-1], res["pairs"][0]
    assert shortest["handovers"] > 3 * longest["handovers"]
    from oslens.labs import quantum

    if quantum.config_hz() == 250:  # the reference answers are for 4 ms ticks
        ok = run_oslens("lab", "check", "10", "--answers", ANSWERS / "10-quick.toml", "-o", out, env=lab_env, cwd=tmp_path)
        assert ok.stdout.strip().endswith("8 of 8 right"), ok.stdout
    assert_each_wrong_answer_fails(10, ANSWERS / "10-quick.toml", out, lab_env, tmp_path)


@root_only
@pytest.mark.skipif(not RR.exists(), reason="no sched_rr_timeslice_ms")
def test_sigkill_of_lab10_is_repaired_by_the_next_oslens_command(tmp_path, lab_env):
    before = RR.read_text().strip()
    state = tmp_path / "state"
    proc = subprocess.Popen([*OSLENS, "lab", "run", "10", "--quick", "-o", str(tmp_path / "t")], env=lab_env,
                            cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    spinners = []
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not spinners:  # until the spinners run under the new quantum
            if any("sched_rr_timeslice_ms" in j.read_text() for j in state.glob("tune-*.json")):
                spinners = [int(p) for p in subprocess.run(["pgrep", "-f", f"spin --start-ns.*--share {tmp_path}"],
                                                           capture_output=True, text=True).stdout.split()]
            time.sleep(0.02)
        assert spinners, "the lab never started its spinners"
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.communicate()
    assert RR.read_text().strip() != before or before == "10", "SIGKILL leaves the setting until the next oslens run"
    deadline = time.monotonic() + 5
    while any(Path(f"/proc/{p}").exists() for p in spinners) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(Path(f"/proc/{p}").exists() for p in spinners), "the spinners must die with the killed lab"
    nxt = run_oslens("lab", "list", env=lab_env, cwd=tmp_path)
    assert re.search(rf"oslens: restored sched_rr_timeslice_ms to {before} \(left changed by oslens lab run 10 pid "
                     rf"{proc.pid}\)", nxt.stderr), nxt.stderr
    assert RR.read_text().strip() == before
    assert list(state.glob("tune-*.json")) == []
