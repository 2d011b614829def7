#!/usr/bin/env python3
"""`oslens record -p` (issue 31): how long attaching takes, and what attaching costs the program.

1. Attach time: a program with 10, 100 and 1,000 sleeping threads; `oslens record -p PID
   --duration 0.3s`; the collector's start to READY (every thread seeded: the eBPF bitmap, or
   perf events per thread and CPU) and the state dump, from meta.json (target: under 1 s for
   1,000 threads).
2. Added cost against `perf record -p` on the same tracepoints: one program making getpid calls
   in batches of 1,000 (it logs each batch's end), with windows of --window seconds bare,
   attached by oslens and attached by perf, alternating; the batch rate in each window from the
   program's own log; added cost = bare rate / traced rate - 1, and the ratio oslens / perf.
   Where the cost goes, per tool (the worker thread's /proc schedstat and sched, sampled every
   20 ms, cut at each window): CPU time per batch (tracing paid in the program's own context) and the
   share of the span it waited runnable for a CPU, with its involuntary switches per second
   (the tracer's process competing for the CPUs).

Prints one JSON object. Root (kernel tracepoints). Figures are one run on whatever machine it is:
rerun on a quiet one before quoting them.

usage: run.py [--threads 10,100,1000] [--window 2] [--rounds 1] [--mechanism auto|perf|ebpf]
"""

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OSLENS = ROOT / ".venv" / "bin" / "oslens"
EVENTS = "sched,syscalls"
# what oslens opens for --events sched,syscalls (bench/kernel_overhead uses the same list)
TRACEPOINTS = ["sched:sched_switch", "sched:sched_waking", "task:task_newtask", "sched:sched_process_exec",
               "sched:sched_process_exit", "sched:sched_migrate_task", "raw_syscalls:sys_enter", "raw_syscalls:sys_exit"]


def start_spin(exe: Path, threads: int, workers: int, seconds: float, log: Path) -> subprocess.Popen:
    p = subprocess.Popen([str(exe), str(threads), str(workers), str(seconds), str(log)], stdout=subprocess.PIPE, text=True)
    assert p.stdout.readline().strip() == "ready"
    return p


def attach(pid: int, trace: Path, duration: float, env: dict) -> tuple[dict, float]:
    t0 = time.monotonic()
    r = subprocess.run([str(OSLENS), "record", "-p", str(pid), "--duration", f"{duration}s", "--no-import", "-f",
                        "-o", str(trace), "--events", EVENTS], capture_output=True, text=True, env=env, timeout=600)
    if r.returncode != 0:
        raise SystemExit(f"oslens record -p failed: {r.stderr}")
    return json.loads((trace / "meta.json").read_text()), time.monotonic() - t0


def attach_times(exe: Path, work: Path, counts: list[int], env: dict) -> list[dict]:
    out = []
    for n in counts:
        p = start_spin(exe, n, 0, 600, work / "sleepers.log")
        try:
            m, wall = attach(p.pid, work / f"attach-{n}", 0.3, env)
        finally:
            p.kill()
            p.wait()
        a, k = m["attach"], m.get("kernel", {})
        out.append({"threads": n + 1, "collector_ready_s": round(a["collector_ns"] / 1e9, 4),
                    "state_dump_s": round(a["state_dump_ns"] / 1e9, 4), "record_wall_s": round(wall, 3),
                    "threads_seeded": a.get("threads"), "mechanism": k.get("mechanism"), "tier": k.get("tier")})
    return out


def rate(ends: list[int], lo: int, hi: int) -> float:
    return sum(1 for t in ends if lo <= t <= hi) / ((hi - lo) / 1e9)


def perf_window(pid: int, work: Path, window: float) -> tuple[int, int, str]:
    cmd = ["perf", "record", "-q", "-m", "64M", "-o", str(work / "perf.data"), "-p", str(pid)]
    for e in TRACEPOINTS:
        cmd += ["-e", e]
    t0 = time.monotonic_ns()
    r = subprocess.run([*cmd, "--", "sleep", str(window)], capture_output=True, text=True, timeout=600)
    # perf attaches within milliseconds of starting: the first half second is left out
    return t0 + 500_000_000, t0 + int(window * 1e9), r.stderr[-300:]


def worker_sched(pid: int) -> tuple[int, int, int]:
    """The worker thread's (run ns, runnable-wait ns, involuntary switches) from /proc."""
    tid = max(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    run, wait, _ = (int(v) for v in Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split())
    sched = Path(f"/proc/{pid}/task/{tid}/sched").read_text()
    invol = next(int(line.split(":")[1]) for line in sched.splitlines() if line.startswith("nr_involuntary_switches"))
    return run, wait, invol


class SchedSampler(threading.Thread):
    """Reads the worker's schedstat every 20 ms with its instant, so each window's share can be
    cut out afterwards (an oslens window's edges are known only from its meta.json)."""

    def __init__(self, pid: int):
        super().__init__(daemon=True)
        self.pid, self.samples, self.done = pid, [], threading.Event()

    def run(self) -> None:
        while not self.done.wait(0.02):
            try:
                self.samples.append((time.monotonic_ns(), *worker_sched(self.pid)))
            except (OSError, ValueError):
                return

    def between(self, lo: int, hi: int) -> tuple[int, tuple, tuple] | None:
        inside = [s for s in self.samples if lo <= s[0] <= hi]
        return (inside[-1][0] - inside[0][0], inside[0][1:], inside[-1][1:]) if len(inside) >= 2 else None


def cost_split(windows: list[tuple], sampler: SchedSampler, ends: list[int]) -> dict:
    """Per tool, inside its windows: the worker's CPU µs per batch (tracing paid in its own
    context), the share of the time it waited runnable for a CPU, involuntary switches per second."""
    acc: dict[str, list[float]] = {}
    for tool, lo, hi, _ in windows:
        cut = sampler.between(lo, hi)
        if cut is None:
            continue
        span, s0, s1 = cut
        t0 = next(s[0] for s in sampler.samples if s[0] >= lo)
        n = sum(1 for t in ends if t0 <= t <= t0 + span)
        a = acc.setdefault(tool, [0, 0, 0, 0, 0])
        for i, v in enumerate((n, s1[0] - s0[0], s1[1] - s0[1], s1[2] - s0[2], span)):
            a[i] += v
    return {t: {"cpu_us_per_batch": round(a[1] / a[0] / 1e3, 2) if a[0] else None, "wait_share": round(a[2] / a[4], 3),
                "involuntary_per_s": round(a[3] / (a[4] / 1e9), 1)} for t, a in acc.items()}


def overhead(exe: Path, work: Path, window: float, rounds: int, env: dict) -> dict:
    gap = 1.5  # each tool's start and end stay outside the windows
    total = 3600  # ended by SIGTERM after the last window
    log = work / "spin.log"
    p = start_spin(exe, 0, 1, total, log)
    windows = []
    sampler = SchedSampler(p.pid)
    sampler.start()
    for _ in range(rounds):
        for tool in ("bare", "oslens", "bare", "perf"):
            time.sleep(gap)
            if tool == "bare":
                t0 = time.monotonic_ns()
                time.sleep(window)
                windows.append((tool, t0, time.monotonic_ns(), ""))
            elif tool == "oslens":
                m, _ = attach(p.pid, work / "overhead", window, env)
                windows.append((tool, m["attach"]["ts_ns"], m["attach"]["detach_ns"], str(m.get("kernel", {}).get("lost"))))
            else:
                windows.append((tool, *perf_window(p.pid, work, window)))
    sampler.done.set()
    sampler.join()
    p.terminate()
    p.wait(timeout=60)
    ends = [int(line.split()[1]) for line in log.read_text().splitlines()]
    rates: dict[str, list[float]] = {}
    for tool, lo, hi, _ in windows:
        rates.setdefault(tool, []).append(rate(ends, lo, hi))
    med = {t: statistics.median(v) for t, v in rates.items()}
    added = {t: med["bare"] / med[t] - 1 if med[t] else float("nan") for t in ("oslens", "perf")}
    return {"batches_per_s": {t: round(v, 1) for t, v in med.items()},
            "added": {t: round(v, 4) for t, v in added.items()},
            "oslens_added_over_perf_added": round(added["oslens"] / added["perf"], 3) if added["perf"] > 0 else None,
            "where": cost_split(windows, sampler, ends), "program_batches": len(ends), "program_span_s": round((ends[-1] - ends[0]) / 1e9, 3) if ends else 0,
            "windows": [{"tool": t, "from_s": round((lo - ends[0]) / 1e9, 3) if ends else None, "s": round((hi - lo) / 1e9, 3),
                         "note": n} for t, lo, hi, n in windows]}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--threads", default="10,100,1000")
    ap.add_argument("--window", type=float, default=2.0)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--mechanism", choices=["auto", "perf", "ebpf"], default="auto")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print("bench/attach needs root (kernel tracepoints)", file=sys.stderr)
        return 1
    env = dict(os.environ)
    if args.mechanism != "auto":
        env["OSLENS_KERNEL_MECHANISM"] = args.mechanism
    with tempfile.TemporaryDirectory(prefix="oslens-bench-attach-") as tmp:
        work = Path(tmp)
        exe = work / "spin"
        subprocess.run(["gcc", "-O2", "-o", str(exe), str(HERE / "spin.c"), "-lpthread"], check=True)
        out = {"load_before": os.getloadavg()[0], "mechanism": args.mechanism,
               "attach": attach_times(exe, work, [int(n) for n in args.threads.split(",")], env),
               "overhead_vs_perf": overhead(exe, work, args.window, args.rounds, env),
               "load_after": os.getloadavg()[0]}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)
    sys.exit(main())
