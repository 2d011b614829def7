"""End to end: the labs' variants on this machine's kernel. Lab 1 with swap on zram (quick run,
its check with the reference answers and every answer wrong, and the swap, the zram device and
the cgroup restored at the end, on SIGINT and SIGTERM, and after SIGKILL by the next oslens
command); its preflight on a fake machine without zram; lab 10 with EEVDF per-task slices."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import OSLENS, run_oslens
from test_labs import ANSWERS, assert_each_wrong_answer_fails

ZRAM0 = Path("/sys/block/zram0")


def _zram_free() -> bool:
    if os.geteuid() != 0 or not ZRAM0.exists() or not Path("/sys/fs/cgroup/memory/cgroup.procs").exists():
        return False
    from oslens.control import zram

    return zram.missing(Path("/")) is None and zram.free_device(Path("/")).name == "zram0"


needs_zram = pytest.mark.skipif(not _zram_free(), reason="needs root, a memory cgroup (v1) and a free zram0")


@pytest.fixture
def lab_env(tmp_path):
    """An own journal directory, so recovery here never touches other oslens runs' journals."""
    return dict(os.environ, OSLENS_STATE_DIR=str(tmp_path / "state"))


def _zram_state() -> tuple:
    swaps = [line.split()[0] for line in Path("/proc/swaps").read_text().splitlines()[1:]]
    return (swaps, (ZRAM0 / "disksize").read_text().strip(), (ZRAM0 / "comp_algorithm").read_text().strip())


def _oslens_cgroups() -> list[Path]:
    return [p for p in Path("/sys/fs/cgroup/memory").rglob("oslens-*") if p.is_dir()]


@needs_zram
def test_lab1_zram_swaps_instead_of_killing_and_restores(tmp_path, lab_env):
    before = _zram_state()
    out = tmp_path / "traces"
    r = run_oslens("lab", "run", "1", "--variant", "zram", "--quick", "-o", out, env=lab_env, cwd=tmp_path)
    assert "restored: zram_compressor comp_algorithm, zram zram0, swap zram0, memory_max oslens-" in r.stdout \
        or "restored: zram zram0, swap zram0, memory_max oslens-" in r.stdout
    assert _zram_state() == before and "/dev/zram0" not in before[0]
    assert list((tmp_path / "state").glob("tune-*.json")) == []
    res = json.loads((out / "lab01-zram-quick" / "results.json").read_text())["results"]
    assert res["exit"] == 0 and res["oom_kills"] == 0  # lab 3's program died here without swap
    # the walks read every page back: one major fault per page, and each was a swap-in
    assert res["row_majflt"] >= 4883 and res["row_pswpin"] >= res["row_majflt"]
    assert res["cgroup_pgmajfault"] >= res["fill_majflt"] + res["row_majflt"] + res["col_majflt"]
    if res["fill_trace_faults"] is not None:  # the trace saw each fault of the phases on the matrix
        assert res["fill_trace_faults"] == 4883  # each page zero-filled once
        for phase in ("row", "col"):  # rusage adds the program's few faults off the matrix
            assert res[f"{phase}_trace_faults"] <= res[f"{phase}_majflt"] <= res[f"{phase}_trace_faults"] + 3
    ok = run_oslens("lab", "check", "1", "--answers", ANSWERS / "01-zram-quick.toml", "-o", out, env=lab_env,
                    cwd=tmp_path)
    assert ok.stdout.strip().endswith("7 of 7 right"), ok.stdout
    assert_each_wrong_answer_fails(1, ANSWERS / "01-zram-quick.toml", out, lab_env, tmp_path, variant="zram")


def _wait_for_swap_on(state: Path, proc: subprocess.Popen) -> None:
    """Until the run has turned swap on on zram0 and made its cgroup (both journaled)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and proc.poll() is None:
        kinds = set()
        for j in state.glob("tune-*.json"):
            try:
                kinds |= {e["kind"] for e in json.loads(j.read_text())["entries"]}
            except (OSError, ValueError, KeyError):
                continue
        if {"swap", "cgroup"} <= kinds and "/dev/zram0" in Path("/proc/swaps").read_text():
            return
        time.sleep(0.01)
    raise AssertionError(f"the lab never turned swap on (exit {proc.poll()})")


@needs_zram
@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGKILL])
def test_lab1_zram_is_undone_after_a_signal(tmp_path, lab_env, signum):
    """The full size (swap set up first, then seconds of work), interrupted as soon as swap is on:
    SIGINT and SIGTERM restore before exiting; after SIGKILL the next oslens command does."""
    before = _zram_state()
    state = tmp_path / "state"
    proc = subprocess.Popen([*OSLENS, "lab", "run", "1", "--variant", "zram", "--no-record", "-o", str(tmp_path / "t")],
                            env=lab_env, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        _wait_for_swap_on(state, proc)
        cgroups = _oslens_cgroups()
    finally:
        proc.send_signal(signum)
        _out, err = proc.communicate()
    if signum == signal.SIGKILL:
        assert "/dev/zram0" in Path("/proc/swaps").read_text(), "SIGKILL leaves swap on until the next oslens run"
        nxt = run_oslens("lab", "list", env=lab_env, cwd=tmp_path)
        assert f"oslens: turned off swap on /dev/zram0 (left by oslens lab run 1 pid {proc.pid})" in nxt.stderr
        assert f"oslens: reset /dev/zram0 to disksize 0 (left by oslens lab run 1 pid {proc.pid})" in nxt.stderr
    else:
        assert proc.returncode == 128 + signum and f"interrupted by signal {signum}" in err
    assert _zram_state() == before
    assert not any(cg.exists() for cg in cgroups if f"oslens-{proc.pid}" in cg.name)
    assert list(state.glob("tune-*.json")) == []


def test_lab1_zram_preflight_on_a_machine_without_zram(tmp_path):
    """A fake machine (OSLENS_SYSROOT: a /proc and /sys tree the test writes; the real zram0 is not
    looked at): the variant cannot run and says why, and nothing is changed."""
    from oslens_testing.control import fakesys

    root = fakesys.make(tmp_path / "root")
    (root / "proc/meminfo").write_text("MemTotal: 24000000 kB\nSwapTotal: 0 kB\n")
    env = dict(os.environ, OSLENS_SYSROOT=str(root), OSLENS_STATE_DIR=str(tmp_path / "state"))
    r = run_oslens("lab", "preflight", "1", "--variant", "zram", env=env, cwd=tmp_path, check=False)
    assert r.returncode == 1
    assert "MISSING zram-swap" in r.stdout.replace("  ", " ").replace("  ", " ")
    assert r.stderr.startswith("lab 1 --variant zram cannot run here: no zram device (/sys/block/zram*)")
    run = run_oslens("lab", "run", "1", "--variant", "zram", "--quick", "-o", tmp_path / "t", env=env, cwd=tmp_path,
                     check=False)
    assert run.returncode == 1 and "oslens: lab 1 needs zram-swap: no zram device" in run.stderr
    assert "cannot run on this machine (see above; nothing was changed)" in run.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_lab10_eevdf_slices_and_every_wrong_answer(tmp_path, lab_env):
    from oslens.labs import quantum

    out = tmp_path / "traces"
    r = run_oslens("lab", "run", "10", "--variant", "eevdf", "--quick", "-o", out, env=lab_env, cwd=tmp_path)
    assert "restored: cpu_max oslens-" in r.stdout
    assert list((tmp_path / "state").glob("tune-*.json")) == []
    res = json.loads((out / "lab10-eevdf-quick" / "results.json").read_text())["results"]
    for pair in res["pairs"]:
        assert pair["policy"] == 0  # SCHED_OTHER, through the control layer's per-task policy
        assert pair["kept_ms"] == [pair["slice_us"] / 1000] * 2  # se.slice as asked, both spinners
        assert 0 < pair["handovers"] <= pair["involuntary"] <= pair["sched_nivcsw"]
    if quantum.config_hz() == 250:  # the reference answers are for 4 ms ticks
        ok = run_oslens("lab", "check", "10", "--answers", ANSWERS / "10-eevdf-quick.toml", "-o", out, env=lab_env,
                        cwd=tmp_path)
        assert ok.stdout.strip().endswith("8 of 8 right"), ok.stdout
    assert_each_wrong_answer_fails(10, ANSWERS / "10-eevdf-quick.toml", out, lab_env, tmp_path, variant="eevdf")
