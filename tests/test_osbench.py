"""End-to-end tests of `oslens bench`: the real C benchmarks, run with --quick.

They assert behaviour, never speed: every benchmark yields a figure with median >= min and an
interval that holds the median; the relations that hold on any machine hold; comparisons work;
errors are one line with an exit code; and kernel.sched_rr_timeslice_ms is back at its original
value after the time-slice benchmark however it ends (normally, SIGINT, SIGTERM, SIGKILL)."""

import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
RR = Path("/proc/sys/kernel/sched_rr_timeslice_ms")
IS_ROOT = os.geteuid() == 0


def oslens(*args, env=None, **kw):
    return subprocess.run([sys.executable, "-m", "oslens.cli", *args], capture_output=True, text=True,
                          env=env, timeout=kw.pop("timeout", 120), **kw)


@pytest.fixture(scope="session", autouse=True)
def built():
    if not (ROOT / "osbench" / "build" / "osb_calls").exists():
        subprocess.run(["make", "-s", "-C", str(ROOT / "osbench")], check=True)


@pytest.fixture(scope="session")
def state_env(tmp_path_factory):
    return dict(os.environ, OSLENS_STATE_DIR=str(tmp_path_factory.mktemp("state")))


@pytest.fixture(scope="session")
def quick_run(tmp_path_factory, state_env):
    out = tmp_path_factory.mktemp("bench") / "quick.json"
    p = oslens("bench", "--quick", "--json", str(out), env=state_env, timeout=170)
    return p, json.loads(out.read_text()) if out.exists() else None


BENCH_RR_VALUES = {"4", "20"}  # the values the timeslice.rr.* benchmarks set


@pytest.fixture(autouse=True)
def rr_timeslice_guard():
    """Whatever a test does, the sysctl ends as it began: if a value only the benchmark sets is
    left behind, put the original back and fail. (A different value means another tool on this
    machine changed it; that is not ours to undo.)"""
    before = RR.read_text() if RR.exists() else None
    yield
    if before is not None and RR.read_text() != before and RR.read_text().strip() in BENCH_RR_VALUES:
        RR.write_text(before)
        pytest.fail(f"kernel.sched_rr_timeslice_ms was left changed (restored to {before.strip()})")


def by_name(doc):
    return {r["name"]: r for r in doc["results"]}


def test_quick_run_succeeds_and_writes_the_schema(quick_run):
    p, doc = quick_run
    assert p.returncode == 0, p.stderr
    assert doc["schema"] == "oslens.bench/1"
    for key in ("kernel", "cpu_model", "cpus_online", "clocksource", "virtualized"):
        assert key in doc["machine"]
    assert "kernel.sched_rr_timeslice_ms" in doc["settings"]
    assert doc["run"]["quick"] is True
    assert "calls.syscall_getpid" in p.stdout  # the table went to the terminal


def test_every_benchmark_gives_a_sane_figure(quick_run):
    _, doc = quick_run
    groups_ok = set()
    for r in doc["results"]:
        if r["status"] == "skipped" or (r["status"] == "unresolved" and r.get("derived_from")):
            assert r["reason"]
            continue
        assert r["status"] == "ok", (r["name"], r.get("reason"))
        groups_ok.add(r["group"])
        if r.get("derived_from"):  # solved from two runs: single solutions may be negative
            assert r["ci_low_ns"] > 0 and r["ci_low_ns"] <= r["median_ns"] <= r["ci_high_ns"]
            continue
        assert r["min_ns"] > 0
        assert r["median_ns"] >= r["min_ns"]
        assert r["ci_low_ns"] <= r["median_ns"] <= r["ci_high_ns"]
        assert len(r["samples_ns"]) == r["n"] >= 5
        assert isinstance(r["notes"], list) and isinstance(r["noisy"], bool)
        for key in ("steal_fraction", "cpu_pressure"):
            assert key in r["machine_noise"]
    assert {"calls", "timeslice", "ctx", "fault", "malloc", "file", "copy"} <= groups_ok


def test_relations_that_hold_on_any_machine(quick_run):
    _, doc = quick_run
    r = by_name(doc)
    assert r["calls.syscall_getpid"]["median_ns"] > r["calls.function"]["median_ns"]
    assert r["file.read.direct.uncached"]["median_ns"] > r["file.read.direct.cached"]["median_ns"]
    assert r["file.read.indirect.uncached"]["median_ns"] > r["file.read.indirect.cached"]["median_ns"]
    assert r["copy.rw_8k.disk"]["median_ns"] > r["copy.rw_8k.cached"]["median_ns"]
    if IS_ROOT:
        assert r["timeslice.rr.4ms"]["status"] == "ok"
        assert r["timeslice.rr.4ms"]["extra"]["switches"] > r["timeslice.rr.20ms"]["extra"]["switches"]


def test_compare_a_result_with_itself(quick_run, tmp_path, state_env):
    _, doc = quick_run
    a = tmp_path / "a.json"
    a.write_text(json.dumps(doc))
    for args in (["bench", "--compare", str(a), str(a)], ["bench", "compare", str(a), str(a)]):
        p = oslens(*args, "--json", str(tmp_path / "cmp.json"), env=state_env)
        assert p.returncode == 0, p.stderr
        assert "no significant difference" in p.stdout
        cmp = json.loads((tmp_path / "cmp.json").read_text())
        assert cmp["rows"] and all(row["verdict"] == "no significant difference" for row in cmp["rows"])
        assert all(row["ratio"] == 1.0 and row["ratio_low"] <= 1.0 <= row["ratio_high"] for row in cmp["rows"])


def test_compare_reports_ratios_and_significance(quick_run, tmp_path, state_env):
    _, doc = quick_run
    slow = json.loads(json.dumps(doc))
    for r in slow["results"]:
        if r["status"] == "ok":
            r["samples_ns"] = [v * 2 for v in r["samples_ns"]]
            for k in ("median_ns", "min_ns", "ci_low_ns", "ci_high_ns"):
                r[k] *= 2
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps(doc))
    b.write_text(json.dumps(slow))
    p = oslens("bench", "--compare", str(a), str(b), "--json", str(tmp_path / "cmp.json"), env=state_env)
    assert p.returncode == 0, p.stderr
    cmp = json.loads((tmp_path / "cmp.json").read_text())
    for row in cmp["rows"]:
        assert row["ratio"] == pytest.approx(2.0)
        assert row["ratio_low"] <= row["ratio"] <= row["ratio_high"]
    assert "B slower" in p.stdout


def test_unknown_benchmark_is_one_line_and_exit_2(state_env):
    p = oslens("bench", "--only", "calls.function,no.such.bench", env=state_env)
    assert p.returncode == 2
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1 and "unknown benchmark 'no.such.bench'" in lines[0] and "--list" in lines[0]


def test_bad_compare_file_is_one_line(tmp_path, state_env):
    bad = tmp_path / "bad.json"
    bad.write_text("not json")
    p = oslens("bench", "compare", str(bad), str(bad), env=state_env)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1


def test_list_names_every_group(state_env):
    p = oslens("bench", "--list", env=state_env)
    assert p.returncode == 0
    for group in ("calls.", "timeslice.", "ctx.", "fault.", "malloc.", "file.", "copy."):
        assert group in p.stdout


def _osb_processes():
    """Live (not zombie) benchmark processes."""
    found = []
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                status = Path(f"/proc/{pid}/status").read_text()
            except OSError:
                continue
            fields = dict(line.split(":\t", 1) for line in status.splitlines() if ":\t" in line)
            if fields.get("Name", "").startswith("osb_") and not fields.get("State", "").startswith(("Z", "X")):
                found.append(int(pid))
    return found


def _no_new_osb_processes(before, wait_s=3.0):
    deadline = time.monotonic() + wait_s
    while set(_osb_processes()) - before:
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _start_rr_and_wait_for_change(state_env, original):
    # SIGINT at its default in the child: a suite started in the background (`make test &` in a
    # script) inherits it ignored, and Python then keeps it ignored instead of raising
    # KeyboardInterrupt, so the SIGINT case would run to its end
    p = subprocess.Popen([sys.executable, "-m", "oslens.cli", "bench", "--quick", "--only", "timeslice.rr"],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=state_env,
                         preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    deadline = time.monotonic() + 30
    while RR.read_text() == original:
        if p.poll() is not None or time.monotonic() > deadline:
            p.kill()
            pytest.fail("the time-slice benchmark never changed sched_rr_timeslice_ms")
        time.sleep(0.005)
    time.sleep(0.05)
    return p


@pytest.mark.skipif(not IS_ROOT, reason="changing kernel.sched_rr_timeslice_ms needs root")
@pytest.mark.parametrize("sig,code", [(signal.SIGTERM, 128 + signal.SIGTERM), (signal.SIGINT, 130)])
def test_timeslice_restores_the_sysctl_when_interrupted(state_env, sig, code):
    original = RR.read_text()
    before = set(_osb_processes())
    p = _start_rr_and_wait_for_change(state_env, original)
    p.send_signal(sig)
    out, err = p.communicate(timeout=30)
    assert p.returncode == code, err
    assert RR.read_text() == original
    assert not (Path(state_env["OSLENS_STATE_DIR"]) / "bench-sysctl-journal.json").exists()
    assert _no_new_osb_processes(before), "benchmark processes were left running"


@pytest.mark.skipif(not IS_ROOT, reason="changing kernel.sched_rr_timeslice_ms needs root")
def test_timeslice_setting_is_restored_by_the_next_run_after_a_crash(state_env):
    original = RR.read_text()
    before = set(_osb_processes())
    p = _start_rr_and_wait_for_change(state_env, original)
    p.kill()  # no handler runs: only the journal can save us
    p.wait()
    # the C programs die with their parent (PR_SET_PDEATHSIG), so nothing keeps running
    assert _no_new_osb_processes(before), "benchmark processes outlived a SIGKILLed oslens"
    journal = Path(state_env["OSLENS_STATE_DIR"]) / "bench-sysctl-journal.json"
    try:
        assert journal.exists()
        assert json.loads(journal.read_text())["sysctl"]["kernel.sched_rr_timeslice_ms"] == original.strip()
        q = oslens("bench", "--quick", "--only", "calls.loop", env=state_env)
        assert q.returncode == 0, q.stderr
        assert "restored kernel.sched_rr_timeslice_ms to " + original.strip() in q.stderr
        assert RR.read_text() == original
        assert not journal.exists()
    finally:
        if RR.read_text() != original and RR.read_text().strip() in BENCH_RR_VALUES:
            RR.write_text(original)


@pytest.mark.skipif(not IS_ROOT or not shutil.which("setpriv"), reason="needs root and setpriv to become nobody")
def test_unprivileged_run_skips_privileged_parts_with_the_reason():
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1",
           "OSLENS_OSBENCH_DIR": str(ROOT / "osbench" / "build")}
    p = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups",
                        sys.executable, "-m", "oslens.cli", "bench", "--quick",
                        "--only", "timeslice.rr.4ms,file.open.uncached,calls.function,timeslice.eevdf.100us"],
                       capture_output=True, text=True, env=env, cwd="/", timeout=120)
    assert p.returncode == 0, p.stderr
    assert "skipped timeslice.rr.4ms: needs root" in p.stderr
    assert "skipped file.open.uncached: needs root" in p.stderr
    assert "calls.function" in p.stdout


@pytest.mark.skipif(importlib.util.find_spec("oslens.commands.tune") is None, reason="needs 'oslens tune' (control layer)")
def test_under_a_plan_runs_the_suite_through_tune(tmp_path, state_env):
    plan = tmp_path / "plan.toml"
    plan.write_text('[phase.default]\nclass = "batch"\nnice = 5\n')
    out = tmp_path / "under.json"
    p = oslens("bench", "--quick", "--only", "calls.function", "--under", str(plan), "--json", str(out), env=state_env)
    assert p.returncode == 0, p.stderr
    doc = json.loads(out.read_text())
    assert doc["run"]["under"] == str(plan.resolve())
    assert doc["settings"]["runner_sched_policy"] == "batch" and doc["settings"]["runner_nice"] == 5
    assert by_name(doc)["calls.function"]["status"] == "ok"


def test_under_a_missing_plan_is_one_line(state_env):
    p = oslens("bench", "--quick", "--under", "/nonexistent/plan.toml", env=state_env)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1 and "plan" in p.stderr
