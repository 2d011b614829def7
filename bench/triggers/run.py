#!/usr/bin/env python3
"""The flight recorder's trigger watcher (issue 32, capture/triggers.py): its CPU per poll with
nothing new, and per million records read, by kind of spec.

Records two programs once (tests/c/recorder_cases.c `threads 2 N`: 4 application records per
iteration; tests/c/kernel_pingpong.c M: pipe round trips, mostly kernel switch, wakeup and system
call records), then for each spec runs a fresh Watcher's first poll over the finished chunks
(every record read once) and 500 polls with nothing new, timing the process's CPU
(time.process_time). Records counted from the chunk headers (`committed`).

Prints one JSON object. Root (kernel tracepoints). One run on whatever machine it is.

usage: run.py [--app-iterations 250000] [--round-trips 100000]
"""

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OSLENS = ROOT / ".venv" / "bin" / "oslens"
sys.path.insert(0, str(ROOT / "python"))

from oslens import _native  # noqa: E402
from oslens.capture import triggers  # noqa: E402

APP_SPECS = ["region:nothing>1ms", "region:step>10s", "timer:event-timer>10s", "counter:iterations>1e12",
             "event:payload-event"]
KERNEL_SPECS = ["syscall:fsync>10ms", "syscall:read>10s", "offcpu>10s", "runq>10s", "region:x>1ms and offcpu>1ms"]


def build(work: Path) -> tuple[Path, Path]:
    flags = subprocess.run([str(OSLENS), "flags", "--cflags", "--libs"], capture_output=True, text=True, check=True).stdout.split()
    rc, pp = work / "recorder_cases", work / "kernel_pingpong"
    subprocess.run(["gcc", "-O2", "-o", str(rc), str(ROOT / "tests/c/recorder_cases.c"), *flags, "-lpthread"], check=True)
    subprocess.run(["gcc", "-O2", "-o", str(pp), str(ROOT / "tests/c/kernel_pingpong.c"), "-lpthread"], check=True)
    return rc, pp


def record(trace: Path, *cmd) -> dict:
    subprocess.run([str(OSLENS), "record", "--no-import", "-f", "-o", str(trace), "--", *map(str, cmd)],
                   capture_output=True, text=True, check=True)
    counts = {"app": 0, "kernel": 0}
    for p in (trace / "raw").glob("*.osl"):
        h = _native.read_chunk(str(p))["header"]
        counts["kernel" if p.name.startswith("kernel-") else "app"] += h["committed"] if h else 0
    return counts


def measure(raw: Path, spec: str, records: int, idle_polls: int = 500) -> dict:
    w = triggers.Watcher(raw, [triggers.parse(spec)])
    t = time.process_time()
    fired = w.poll()
    first = time.process_time() - t
    idle = []
    for _ in range(idle_polls):
        t = time.process_time_ns()
        w.poll()
        idle.append(time.process_time_ns() - t)
    w.close()
    return {"spec": spec, "records": records, "fired": len(fired), "first_poll_cpu_s": round(first, 4),
            "cpu_s_per_million_records": round(first / records * 1e6, 4),
            "idle_poll_cpu_us_median": round(statistics.median(idle) / 1e3, 1), "chunks": len(list(raw.glob("*.osl")))}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--app-iterations", type=int, default=250000)
    ap.add_argument("--round-trips", type=int, default=100000)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        rc, pp = build(work)
        app = record(work / "A", rc, "threads", 2, a.app_iterations)
        kern = record(work / "K", pp, a.round_trips)
        out = {"app_trace_records": app, "kernel_trace_records": kern,
               "app": [measure(work / "A" / "raw", s, app["app"]) for s in APP_SPECS],
               "kernel": [measure(work / "K" / "raw", s, kern["kernel"]) for s in KERNEL_SPECS]}
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
