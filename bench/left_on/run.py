#!/usr/bin/env python3
"""What oslens costs when left on (issue 32's target): a program that records little (an event
every 10 ms, asleep in between) recorded for --seconds; oslens's own processes' CPU time and
wake-ups, and the program's preemptions, read from /proc (not from oslens's own trace), beside the
same program run bare. Target: oslens's processes use <= 0.1% of a CPU and preempt the program's
threads <= 10 times a second.

usage: run.py [--seconds 60] [--out FILE] [--oslens PATH]
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OSLENS = ROOT / ".venv" / "bin" / "oslens"
TICKS = os.sysconf("SC_CLK_TCK")


def build(work: Path) -> Path:
    exe = work / "quiet"
    inc, lib = ROOT / ".venv" / "include", ROOT / ".venv" / "lib"
    subprocess.run(["cc", "-O2", f"-I{inc}", str(HERE / "quiet.c"), f"-L{lib}", f"-Wl,-rpath,{lib}", "-loslens",
                    "-o", str(exe)], check=True)
    return exe


def threads_of(pid: int) -> list[Path]:
    try:
        return list(Path(f"/proc/{pid}/task").iterdir())
    except FileNotFoundError:
        return []


def sample(t: Path) -> dict:
    """One thread's CPU seconds and context switches (voluntary: it slept; involuntary: preempted)."""
    try:
        stat = (t / "stat").read_text().rsplit(")", 1)[1].split()
        status = dict(line.split(":\t", 1) for line in (t / "status").read_text().splitlines() if ":\t" in line)
    except (FileNotFoundError, ProcessLookupError):
        return {}
    return {"comm": (t / "comm").read_text().strip() if (t / "comm").exists() else "",
            "cpu_s": (int(stat[11]) + int(stat[12])) / TICKS,
            "voluntary": int(status["voluntary_ctxt_switches"]), "involuntary": int(status["nonvoluntary_ctxt_switches"])}


def oslens_pids(root: int, program: int) -> list[int]:
    """The recording's own processes: `oslens record` and its descendants but the program (the
    VM is shared: other oslens runs are not ours)."""
    parent = {}
    for p in Path("/proc").iterdir():
        if p.name.isdigit():
            try:
                parent[int(p.name)] = int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                pass
    mine, grew = {root}, True
    while grew:
        more = {c for c, pp in parent.items() if pp in mine and c not in mine and c != program}
        grew = bool(more)
        mine |= more
    return sorted(mine - {program}) if root != program else []


def totals(pids: list[int], program: int) -> dict:
    own = {"cpu_s": 0.0, "wakeups": 0}
    prog = {"cpu_s": 0.0, "involuntary": 0, "helper_cpu_s": 0.0, "helper_wakeups": 0}
    for pid in pids:
        for t in threads_of(pid):
            s = sample(t)
            if s:
                own["cpu_s"] += s["cpu_s"]
                own["wakeups"] += s["voluntary"] + s["involuntary"]
    for t in threads_of(program):
        s = sample(t)
        if not s:
            continue
        if s["comm"].startswith("oslens"):  # the recorder's helper thread, inside the program
            prog["helper_cpu_s"] += s["cpu_s"]
            prog["helper_wakeups"] += s["voluntary"] + s["involuntary"]
        else:
            prog["cpu_s"] += s["cpu_s"]
            prog["involuntary"] += s["involuntary"]
    return {"own": own, "program": prog}


def program_pid(exe: Path, deadline: float) -> int:
    while time.monotonic() < deadline:
        for p in Path("/proc").iterdir():
            if p.name.isdigit():
                try:
                    if os.readlink(p / "exe") == str(exe):
                        return int(p.name)
                except OSError:
                    pass
        time.sleep(0.05)
    raise SystemExit("run.py: the program did not start")


def measure(cmd: list[str], exe: Path, seconds: int) -> dict:
    """Samples 1 s after the start and 1 s before the end, so start-up and import are left out."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    pid = program_pid(exe, time.monotonic() + 30)
    time.sleep(1)
    pids = oslens_pids(proc.pid, pid)
    a, t0 = totals(pids, pid), time.monotonic()
    time.sleep(seconds - 2)
    b, t1 = totals(pids, pid), time.monotonic()
    proc.wait()
    span = t1 - t0
    return {
        "span_s": round(span, 3),
        "oslens_processes": len(pids),
        "oslens_cpu_percent": round(100 * (b["own"]["cpu_s"] - a["own"]["cpu_s"]) / span, 4),
        "oslens_wakeups_per_s": round((b["own"]["wakeups"] - a["own"]["wakeups"]) / span, 2),
        "helper_thread_cpu_percent": round(100 * (b["program"]["helper_cpu_s"] - a["program"]["helper_cpu_s"]) / span, 4),
        "helper_thread_wakeups_per_s": round((b["program"]["helper_wakeups"] - a["program"]["helper_wakeups"]) / span, 2),
        "program_preempted_per_s": round((b["program"]["involuntary"] - a["program"]["involuntary"]) / span, 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=int, default=60)
    ap.add_argument("--out", type=Path)
    ap.add_argument("--oslens", type=Path, default=OSLENS, help="the oslens to measure (another build, to compare)")
    args = ap.parse_args()
    if args.seconds < 5:
        sys.exit("run.py: --seconds must be at least 5")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        exe = build(work)
        bare = measure([str(exe), str(args.seconds)], exe, args.seconds)
        rec = measure([str(args.oslens), "record", "--no-import", "-o", str(work / "t"), "--", str(exe), str(args.seconds)],
                      exe, args.seconds)
    result = {"what": "oslens left on: a program with an event every 10 ms, /proc samples", "seconds": args.seconds,
              "bare": {"program_preempted_per_s": bare["program_preempted_per_s"]}, "recorded": rec,
              "targets": {"oslens_cpu_percent": 0.1, "preemptions_per_s": 10}}
    text = json.dumps(result, indent=2)
    print(text)
    if args.out:
        args.out.write_text(text + "\n")


if __name__ == "__main__":
    main()
