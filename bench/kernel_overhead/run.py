#!/usr/bin/env python3
"""Kernel tracing overhead: oslens record vs `perf record -m 64M` on the same tracepoints, in the
same run, alternating (base, oslens, perf) per round; medians of the programs' own timings.

Programs: a pipe ping-pong between two processes pinned to one CPU (context-switch heavy;
unpinned it would measure cross-CPU wake-ups of an idle vCPU) and 3 M getpid (syscall heavy).
Prints one JSON object: per program the base, oslens and perf medians, the added times, the
ratio oslens_added / perf_added (target <= 0.5), lost records of each tool.

The bystander case (issue 22): the same two programs *not traced*, run alone, beside
`oslens record -- sleep` (default eBPF collector, and OSLENS_KERNEL_MECHANISM=perf) and beside
`perf record -- sleep` on the same tracepoints; their slowdown and the ns added per system call
and per context switch (target: no worse than beside perf record).

usage: run.py [--rounds 3] [--pp 200000] [--gp 3000000] [--events sched,syscalls] [--no-bystander]
"""

import argparse
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OSLENS = ROOT / ".venv" / "bin" / "oslens"

# what oslens opens for --events sched,syscalls; perf gets the same list
TRACEPOINTS = {
    "sched": ["sched:sched_switch", "sched:sched_waking", "task:task_newtask", "sched:sched_process_exec",
              "sched:sched_process_exit", "sched:sched_migrate_task"],
    "syscalls": ["raw_syscalls:sys_enter", "raw_syscalls:sys_exit"],
    "faults": ["exceptions:page_fault_user"],
    "io": ["block:block_rq_issue", "block:block_rq_complete"],
    "irq": ["irq:irq_handler_entry", "irq:irq_handler_exit", "irq:softirq_entry", "irq:softirq_exit"],
}


def build(work: Path) -> dict:
    out = {}
    # the getpid program is the kernel collector tests' own (it prints ELAPSED too)
    sources = {"pingpong": HERE / "pingpong.c", "getpid": ROOT / "tests" / "c" / "kernel_getpid.c"}
    for name, source in sources.items():
        exe = work / name
        subprocess.run(["gcc", "-O2", "-o", str(exe), str(source)], check=True)
        out[name] = exe
    return out


def elapsed(stderr: str) -> float | None:
    m = re.search(r"ELAPSED ([\d.]+)", stderr)
    return float(m.group(1)) if m else None


def run_one(cfg: str, cmd: list[str], work: Path, events: str) -> dict:
    trace = work / "trace"
    shutil.rmtree(trace, ignore_errors=True)
    perf_data = work / "perf.data"
    if perf_data.exists():
        perf_data.unlink()
    if cfg == "base":
        full = cmd
    elif cfg == "oslens":
        full = [str(OSLENS), "record", "--no-import", "--no-preload", "-f", "-o", str(trace), "--events", events, "--", *cmd]
    else:
        evs = [e for s in events.split(",") for e in TRACEPOINTS[s]]
        full = ["perf", "record", "-q", "-m", "64M", "-o", str(perf_data)]
        for e in evs:
            full += ["-e", e]
        full += ["--", *cmd]
    t0 = time.monotonic()
    p = subprocess.run(full, capture_output=True, text=True, timeout=300)
    wall = time.monotonic() - t0
    rec = {"cfg": cfg, "elapsed": elapsed(p.stderr), "wall": round(wall, 4), "rc": p.returncode}
    if cfg == "oslens":
        try:
            k = json.loads((trace / "meta.json").read_text()).get("kernel", {})
            rec["lost"] = k.get("lost")
            rec["records"] = k.get("records")
            rec["tier"] = k.get("tier")
        except (OSError, ValueError):
            pass
    if cfg == "perf":
        m = re.findall(r"[Ll]ost (\d+)", p.stderr)
        rec["lost"] = sum(int(x) for x in m) if m else 0
        rec["bytes"] = perf_data.stat().st_size if perf_data.exists() else None
    if p.returncode != 0:
        rec["stderr"] = p.stderr[-500:]
    return rec


def tracer_beside(cfg: str, work: Path, events: str) -> subprocess.Popen | None:
    """Starts a tracer of another program (`sleep`) for the bystander case: oslens record (its
    default eBPF collector, or OSLENS_KERNEL_MECHANISM=perf) or perf record on the same
    tracepoints; returns once it is attached."""
    if cfg == "alone":
        return None
    trace = work / "beside"
    shutil.rmtree(trace, ignore_errors=True)
    env = dict(os.environ)
    if cfg == "beside_perf_record":
        cmd = ["perf", "record", "-q", "-m", "64M", "-o", str(work / "beside.data")]
        for e in (e for s in events.split(",") for e in TRACEPOINTS[s]):
            cmd += ["-e", e]
        cmd += ["--", "sleep", "600"]
    else:
        if cfg == "beside_oslens_perf_mechanism":
            env["OSLENS_KERNEL_MECHANISM"] = "perf"
        cmd = [str(OSLENS), "record", "--no-import", "--no-preload", "-f", "-o", str(trace), "--events", events, "--", "sleep", "600"]
    p = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=env, start_new_session=True)
    deadline = time.monotonic() + 30
    # attached: oslens's kernel chunks exist (the program is released only after that); perf
    # has written its header
    while time.monotonic() < deadline:
        ready = any((trace / "raw").glob("kernel-*.osl")) if cfg != "beside_perf_record" else (work / "beside.data").exists()
        if ready:
            break
        time.sleep(0.05)
    time.sleep(0.5)
    return p


def stop_tracer(p: subprocess.Popen | None) -> None:
    if p is None:
        return
    os.killpg(p.pid, 2)
    try:
        p.wait(timeout=60)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        p.wait()


BYSTANDER_CFGS = ["alone", "beside_oslens", "beside_oslens_perf_mechanism", "beside_perf_record"]


def bystander(exe: dict, args, work: Path, have_perf: bool) -> dict:
    """What an untraced program pays while oslens (or perf) records another one: its own
    timings alone and beside each tracer, alternating, medians; the per-syscall and
    per-switch cost added."""
    cpu = (os.cpu_count() or 1) - 1
    programs = {"getpid": ([str(exe["getpid"]), str(args.gp)], args.gp),
                "pingpong_pinned": ([str(exe["pingpong"]), str(args.pp), str(cpu)], args.pp)}
    cfgs = [c for c in BYSTANDER_CFGS if have_perf or c != "beside_perf_record"]
    runs = {name: {c: [] for c in cfgs} for name in programs}
    cpus = {name: {c: [] for c in cfgs} for name in programs}
    for r in range(args.rounds):
        order = cfgs[r % len(cfgs):] + cfgs[: r % len(cfgs)]
        for cfg in order:
            tracer = tracer_beside(cfg, work, args.events)
            try:
                for name, (cmd, _) in programs.items():
                    before = resource.getrusage(resource.RUSAGE_CHILDREN)
                    p = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
                    after = resource.getrusage(resource.RUSAGE_CHILDREN)
                    # its CPU time (the tracer, not yet waited for, is not in it): steadier than
                    # wall time on a loaded host
                    cpu_s = after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime
                    t = elapsed(p.stderr)
                    print(json.dumps({"bystander": name, "cfg": cfg, "round": r, "elapsed": t, "cpu": cpu_s}), file=sys.stderr, flush=True)
                    if t is not None:
                        runs[name][cfg].append(t)
                        cpus[name][cfg].append(cpu_s)
            finally:
                stop_tracer(tracer)
    out = {}
    for name, (_, n) in programs.items():
        med = {c: statistics.median(v) if v else None for c, v in runs[name].items()}
        cpu_med = {c: statistics.median(v) if v else None for c, v in cpus[name].items()}
        entry = {"median_s": med, "cpu_median_s": cpu_med, "runs": runs[name], "cpu_runs": cpus[name]}
        # getpid: one system call (two tracepoint hits) per call; ping-pong: two context
        # switches per round trip
        unit, per = ("per_syscall", n) if name == "getpid" else ("per_switch", 2 * n)
        for what, m in (("wall", med), ("cpu", cpu_med)):
            alone = m.get("alone")
            if alone:
                entry[f"{what}_slowdown"] = {c: round(v / alone, 3) for c, v in m.items() if v and c != "alone"}
                entry[f"{what}_ns_added_{unit}"] = {c: round((v - alone) / per * 1e9, 1) for c, v in m.items() if v and c != "alone"}
        out[name] = entry
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--pp", type=int, default=200_000, help="ping-pong round trips")
    ap.add_argument("--gp", type=int, default=3_000_000, help="getpid calls")
    ap.add_argument("--events", default="sched,syscalls")
    ap.add_argument("--no-bystander", action="store_true", help="skip the bystander case")
    args = ap.parse_args()
    if os.geteuid() != 0:
        print(json.dumps({"error": "run as root: both tools need kernel tracepoints"}))
        return 2
    have_perf = shutil.which("perf") is not None
    work = Path(tempfile.mkdtemp(prefix="oslens-kbench-"))
    try:
        exe = build(work)
        cpu = (os.cpu_count() or 1) - 1
        programs = {
            "pingpong_pinned": [str(exe["pingpong"]), str(args.pp), str(cpu)],
            "getpid": [str(exe["getpid"]), str(args.gp)],
        }
        cfgs = ["base", "oslens"] + (["perf"] if have_perf else [])
        runs = {p: [] for p in programs}
        for r in range(args.rounds):
            for pname, cmd in programs.items():
                order = cfgs[r % len(cfgs):] + cfgs[: r % len(cfgs)]
                for cfg in order:
                    rec = run_one(cfg, cmd, work, args.events)
                    rec["round"] = r
                    runs[pname].append(rec)
                    print(json.dumps({"program": pname, **rec}), file=sys.stderr, flush=True)
        result = {
            "benchmark": "kernel_overhead",
            "events": args.events,
            "perf": "perf record -m 64M -e <same tracepoints>" if have_perf else "perf not installed",
            "rounds": args.rounds,
            "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release},
            "programs": {},
        }
        for pname, rs in runs.items():
            med = {}
            for cfg in cfgs:
                vals = [x["elapsed"] for x in rs if x["cfg"] == cfg and x["elapsed"] is not None and x["rc"] == 0]
                med[cfg] = statistics.median(vals) if vals else None
            entry = {"median_s": med, "runs": rs}
            if med.get("base") and med.get("oslens"):
                entry["oslens_added_s"] = round(med["oslens"] - med["base"], 4)
                entry["oslens_slowdown"] = round(med["oslens"] / med["base"], 3)
            if med.get("base") and med.get("perf"):
                entry["perf_added_s"] = round(med["perf"] - med["base"], 4)
                entry["perf_slowdown"] = round(med["perf"] / med["base"], 3)
            if entry.get("perf_added_s"):
                entry["added_ratio_oslens_over_perf"] = round(entry["oslens_added_s"] / entry["perf_added_s"], 3)
                entry["meets_target_half_of_perf"] = entry["added_ratio_oslens_over_perf"] <= 0.5
            entry["oslens_lost"] = [x.get("lost") for x in rs if x["cfg"] == "oslens"]
            entry["perf_lost"] = [x.get("lost") for x in rs if x["cfg"] == "perf"]
            result["programs"][pname] = entry
        if not args.no_bystander:
            result["bystander"] = bystander(exe, args, work, have_perf)
        print(json.dumps(result, indent=2))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


def under_tool(cfg: str, cmd: list[str], trace: Path, perf_data: Path, events: str) -> list[str]:
    """`cmd` under `oslens record` ("oslens": with kernel events `events`, "oslens_no_kernel":
    without) or under `perf record` on the same tracepoints ("perf"). (bench/process_start
    uses it too.)"""
    if cfg.startswith("oslens"):
        kernel = ["--no-kernel"] if cfg == "oslens_no_kernel" else ["--events", events]
        return [str(OSLENS), "record", "--no-import", "-f", "-o", str(trace), *kernel, "--", *cmd]
    full = ["perf", "record", "-q", "-m", "64M", "-o", str(perf_data)]
    for e in (e for s in events.split(",") for e in TRACEPOINTS[s]):
        full += ["-e", e]
    return full + ["--", *cmd]


def leaving_tracefs_as_found(run_main) -> int:
    """`perf record` mounts tracefs at /sys/kernel/tracing when it is not; unmount it again.
    (bench/process_start uses it too.)"""
    tracefs = "/sys/kernel/tracing"
    was_mounted = os.path.ismount(tracefs)
    try:
        return run_main()
    finally:
        if not was_mounted and os.path.ismount(tracefs):
            subprocess.run(["umount", tracefs], check=False)


if __name__ == "__main__":
    sys.exit(leaving_tracefs_as_found(main))
