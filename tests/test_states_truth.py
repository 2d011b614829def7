"""The time breakdown's waits against the kernel's own accounting of the same thread, on a real
program (workloads/phases: 4 KiB writes + fdatasync, 1 ms nanosleeps, a compute loop):

- I/O wait against delay accounting's block I/O delay (/proc/PID/stat field 42 with
  kernel.task_delayacct = 1, in 10 ms ticks): both start when the thread leaves its CPU in
  io_schedule (oslens's at any switch in D, so it may be a little larger). oslens's ends at sched_waking (as Perfetto's thread states do), the kernel's at the
  enqueue, which on this VM can come tens of µs later (an IPI to the woken thread's CPU).
- runnable time (`preempted`) against schedstat's run_delay: every wait for a CPU, after a
  preemption or after a wakeup. oslens's starts at sched_waking, the kernel's at the enqueue, so
  oslens's is the larger, by that wake-up latency, which the I/O wait's lower bound allows for.

Delay accounting can count more than the thread was ever off a CPU after a switch in D: in one CI
run it said 850 ms where the switches add up to 533 ms, and its CPU time, run_delay and blkio
delay together exceeded the thread's wall time by 389 ms (the start and end of each delay are
read on different CPUs' clocks). So the lower bound is taken from the smaller of the two.

Before the breakdown split the time after a wakeup off the wait, a thread woken from fdatasync
that waited for a CPU had that counted as I/O wait: 1,394 ms of I/O wait against the kernel's
1,010 ms, and 75 ms runnable against its 543 ms (docs/report.md)."""

import json
from pathlib import Path

import pytest

from conftest import ROOT, run_oslens

WORKLOAD = ROOT / "workloads" / "phases" / "phases"
DELAYACCT = Path("/proc/sys/kernel/task_delayacct")
TICK_NS = 10_000_000


@pytest.fixture(scope="module")
def recorded(tmp_path_factory):
    if not WORKLOAD.exists():
        pytest.skip("workloads/phases is not built (make build)")
    if not DELAYACCT.exists():
        pytest.skip("this kernel has no delay accounting (kernel.task_delayacct)")
    d = tmp_path_factory.mktemp("states_truth")
    before = DELAYACCT.read_text().strip()
    try:
        DELAYACCT.write_text("1")
        run_oslens("record", "-o", d / "trace", "--", WORKLOAD, "--script", "io:800,sleep:400,compute:200", "--dir", d)
    finally:
        DELAYACCT.write_text(before)
    meta = json.loads((d / "trace" / "meta.json").read_text())
    report = json.loads(run_oslens("report", d / "trace", "--json").stdout)
    table = report["tables"]["breakdown"]
    rows = [dict(zip(table["columns"], r)) for r in table["rows"]]
    main = next(r for r in rows if r["tid"] == meta["pid"])
    main["d_off_cpu_ns"] = _off_cpu_after_d(d / "trace", meta["pid"])
    return meta["schedstat"], main


def _off_cpu_after_d(trace, tid: int) -> int:
    """The thread's time from each switch off a CPU in D to its next slice, from the raw tables."""
    sql = f"""WITH s AS (SELECT end_ns, lead(start_ns) OVER (ORDER BY start_ns) AS next_ns FROM cpu_slices WHERE tid = {tid})
              SELECT coalesce(sum(next_ns - end_ns), 0) AS ns FROM s
              WHERE EXISTS (SELECT 1 FROM switches w WHERE w.prev_tid = {tid} AND w.ts = s.end_ns AND w.prev_state LIKE 'D%')"""
    return int(json.loads(run_oslens("sql", trace, sql, "--format", "json").stdout)[0]["ns"])


def test_io_wait_matches_the_kernels_block_io_delay(recorded):
    kernel, main = recorded
    blkio = kernel["blkio_delay_ns"]
    assert blkio >= 20 * TICK_NS, kernel  # the workload waits on its disk for a good part of 0.8 s
    # not above the kernel's, but for D waits outside io_schedule (up to 6% over in 10 loaded runs;
    # the bug this guards against was 38% over); short of it by at most the wake-up latency
    wake_latency = max(0, main["preempted_ns"] - kernel["run_delay_ns"])
    assert main["io_wait_ns"] <= 1.15 * blkio + TICK_NS, (main, kernel)
    assert main["io_wait_ns"] + wake_latency >= 0.9 * min(blkio, main["d_off_cpu_ns"]) - TICK_NS, (main, kernel)


def test_runnable_time_covers_the_kernels_run_delay(recorded):
    kernel, main = recorded
    # (the bug this guards against had it at 14% of run_delay; the launcher's own wait before
    # exec is in the kernel's figure only)
    assert main["preempted_ns"] >= 0.9 * kernel["run_delay_ns"] - 1_000_000, (main, kernel)
