#!/usr/bin/env python3
"""What starting a process or a thread costs under oslens: the added wall and CPU time per
process for N fork + exec of /bin/true, and per thread for N pthread_create/join pairs whose
thread records nothing and records one event, bare, under `oslens record --no-kernel`, under
`oslens record` with kernel events, under `perf record` on the same tracepoints, and with only
the libraries preloaded (not tracing), alternating in one run. Also the trace's disk use per
process (allocated blocks and apparent size of raw/).

Prints one JSON object; the figures are the programs' own timings (spawn.c), so neither tool's
own start-up is in them. Targets (issue 22): a process that records nothing adds at most its
own bare time (<= 2x bare), a thread that records nothing <= 20 us, <= 64 KiB of disk per
process.

With `--before DIR` (the liboslens.so of an earlier build, and its liboslens_preload.so if that
build preloaded the wrappers as a second library, as before issue 31), the same run also times
`libs_only_before` and `oslens_no_kernel_before` (`oslens record --no-preload` with those
libraries preloaded by hand), so an earlier build against this one is a ratio within one run.

usage: run.py [--rounds 3] [--procs 1000] [--threads 1000] [--events sched,syscalls] [--quick]
              [--cases process,thread] [--configs bare,libs_only,...] [--before DIR]
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
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OSLENS = ROOT / ".venv" / "bin" / "oslens"
sys.path.insert(0, str(HERE.parent / "kernel_overhead"))
from run import leaving_tracefs_as_found, under_tool  # noqa: E402  (the same tool commands as there)

CFGS = ["bare", "libs_only", "oslens_no_kernel", "oslens_no_kernel_no_spares", "oslens_kernel", "perf"]
BEFORE_CFGS = ["libs_only_before", "oslens_no_kernel_before"]
# the libraries of an earlier build (--before): the second only before the wrappers were folded into liboslens
BEFORE_LIBS = ("liboslens.so", "liboslens_preload.so")


def build(work: Path) -> Path:
    flags = subprocess.run([str(OSLENS), "flags", "--cflags", "--libs"], capture_output=True, text=True, check=True).stdout.split()
    exe = work / "spawn"
    subprocess.run(["gcc", "-O2", "-o", str(exe), str(HERE / "spawn.c"), *flags, "-lpthread"], check=True)
    return exe


def library_env(before: Path | None = None) -> dict:
    """The environment with only the recorder (which holds the wrappers) preloaded, not tracing:
    what loading and relocating it costs a process; with `before`, that build's two libraries."""
    libs = [before / n for n in BEFORE_LIBS if (before / n).is_file()] if before else [ROOT / ".venv" / "lib" / "liboslens.so"]
    env = dict(os.environ)
    env.pop("OSLENS_TRACE", None)
    env["LD_PRELOAD"] = " ".join(map(str, libs))
    return env


def disk(raw: Path) -> tuple[int, int, int]:
    """(allocated bytes, apparent bytes, files) under raw/."""
    alloc = apparent = files = 0
    for f in raw.glob("*"):
        st = f.stat()
        alloc += st.st_blocks * 512
        apparent += st.st_size
        files += 1
    return alloc, apparent, files


def run_one(cfg: str, cmd: list[str], work: Path, events: str, before: Path | None = None) -> dict:
    trace = work / "trace"
    shutil.rmtree(trace, ignore_errors=True)
    env = None
    if cfg in ("bare", "libs_only", "libs_only_before"):
        full = cmd
        env = None if cfg == "bare" else library_env(before if cfg == "libs_only_before" else None)
    elif cfg == "oslens_no_kernel_before":  # the old two libraries, preloaded by hand into a traced run
        full = under_tool("oslens_no_kernel", cmd, trace, work / "perf.data", events)
        full.insert(full.index("record") + 1, "--no-preload")
        env = library_env(before)
    elif cfg == "oslens_no_kernel_no_spares":  # the same without the pool of spare chunk files
        full = under_tool("oslens_no_kernel", cmd, trace, work / "perf.data", events)
        env = {**os.environ, "OSLENS_SPARE_FILES": "0"}
    else:
        full = under_tool(cfg, cmd, trace, work / "perf.data", events)
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    p = subprocess.run(full, capture_output=True, text=True, timeout=600, env=env)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    m = re.search(r"ELAPSED ([\d.]+) CPU ([\d.]+)", p.stderr)
    pair = re.search(r"PAIR_MEDIAN ([\d.]+)", p.stderr)
    rec = {"cfg": cfg, "rc": p.returncode, "wall": float(m.group(1)) if m else None, "cpu": float(m.group(2)) if m else None,
           "pair_median": float(pair.group(1)) if pair else None,
           # every process's CPU, the tool's own included (the spare-file pool's thread is the session's)
           "cpu_all": after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime}
    if cfg.startswith("oslens") and (trace / "raw").is_dir():
        rec["disk_alloc"], rec["disk_apparent"], rec["files"] = disk(trace / "raw")
        lost = re.search(r"\((\d+) events lost", p.stderr)
        rec["lost"] = int(lost.group(1)) if lost else 0
    if p.returncode != 0 or m is None:
        rec["stderr"] = p.stderr[-500:]
    return rec


def summarise(runs: list[dict], n: int) -> dict:
    out = {}
    for cfg in CFGS + BEFORE_CFGS:
        rs = [r for r in runs if r["cfg"] == cfg and r["wall"] is not None and r["rc"] == 0]
        if not rs:
            continue
        out[cfg] = {"wall_median_s": statistics.median(r["wall"] for r in rs), "wall_min_s": min(r["wall"] for r in rs),
                    "cpu_median_s": statistics.median(r["cpu"] for r in rs),
                    "cpu_all_median_s": statistics.median(r["cpu_all"] for r in rs)}
        if rs[0].get("pair_median") is not None:  # threads: the median pair of each run, median over runs
            out[cfg]["pair_median_us"] = round(statistics.median(r["pair_median"] for r in rs) * 1e6, 1)
        if "disk_alloc" in rs[0]:
            out[cfg]["disk_alloc_per_unit_kib"] = round(statistics.median(r["disk_alloc"] for r in rs) / n / 1024, 2)
            out[cfg]["disk_apparent_per_unit_kib"] = round(statistics.median(r["disk_apparent"] for r in rs) / n / 1024, 2)
            out[cfg]["files"] = rs[0]["files"]
            out[cfg]["lost"] = max(r["lost"] for r in rs)
    bare = out.get("bare")
    for cfg, s in out.items():
        if bare and cfg != "bare":
            s["added_wall_us_per_unit"] = round((s["wall_median_s"] - bare["wall_median_s"]) / n * 1e6, 1)
            s["added_wall_us_per_unit_min"] = round((s["wall_min_s"] - bare["wall_min_s"]) / n * 1e6, 1)
            s["added_cpu_us_per_unit"] = round((s["cpu_median_s"] - bare["cpu_median_s"]) / n * 1e6, 1)
            s["added_cpu_all_us_per_unit"] = round((s["cpu_all_median_s"] - bare["cpu_all_median_s"]) / n * 1e6, 1)
            s["wall_ratio_to_bare"] = round(s["wall_median_s"] / bare["wall_median_s"], 2)
            if "pair_median_us" in s and "pair_median_us" in bare:
                s["added_pair_median_us"] = round(s["pair_median_us"] - bare["pair_median_us"], 1)
    if bare:
        bare["wall_us_per_unit"] = round(bare["wall_median_s"] / n * 1e6, 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--procs", type=int, default=1000)
    ap.add_argument("--threads", type=int, default=1000)
    ap.add_argument("--events", default="sched,syscalls")
    ap.add_argument("--quick", action="store_true", help="1 round of 200 processes and 200 threads")
    ap.add_argument("--cases", default="process,thread", help="which cases: process, thread (comma-separated)")
    ap.add_argument("--configs", help="only these configurations (comma-separated; e.g. leave out the kernel ones while other tracing runs)")
    ap.add_argument("--before", type=Path, help="folder with liboslens.so (and liboslens_preload.so) of an earlier build")
    args = ap.parse_args()
    if args.before and not (args.before / BEFORE_LIBS[0]).is_file():
        print(f"run.py: --before {args.before} has no {BEFORE_LIBS[0]}", file=sys.stderr)
        return 2
    if args.quick:
        args.rounds, args.procs, args.threads = 1, 200, 200
    have_perf = shutil.which("perf") is not None and os.geteuid() == 0
    cfgs = [c for c in CFGS if have_perf or c not in ("perf", "oslens_kernel")] + (BEFORE_CFGS if args.before else [])
    if args.configs:
        cfgs = [c for c in cfgs if c in args.configs.split(",")]
    work = Path(tempfile.mkdtemp(prefix="oslens-startbench-"))
    try:
        exe = build(work)
        cases = {"process_fork_exec_true": (["fork", args.procs], args.procs),
                 "thread_records_nothing": (["thread", args.threads], args.threads),
                 "thread_records_one_event": (["thread1", args.threads], args.threads)}
        wanted = set(args.cases.split(","))
        cases = {c: v for c, v in cases.items() if c.split("_")[0] in wanted}
        runs = {c: [] for c in cases}
        for r in range(args.rounds):
            for case, (argv, _) in cases.items():
                order = cfgs[r % len(cfgs):] + cfgs[: r % len(cfgs)]
                for cfg in order:
                    rec = run_one(cfg, [str(exe), *map(str, argv)], work, args.events, args.before)
                    runs[case].append({"round": r, **rec})
                    print(json.dumps({"case": case, "round": r, **rec}), file=sys.stderr, flush=True)
        result = {
            "benchmark": "process_start",
            "rounds": args.rounds,
            "kernel_events": args.events,
            "before": str(args.before) if args.before else None,
            "perf": "perf record -m 64M -e <the same tracepoints>" if have_perf else "not run (no perf, or not root)",
            "load_average": os.getloadavg(),
            "machine": {"cpus": os.cpu_count(), "kernel": os.uname().release},
            "cases": {c: summarise(rs, n) for c, (_, n) in cases.items() for rs in [runs[c]]},
            "runs": runs,
        }
        print(json.dumps(result, indent=2))
        return 0
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(leaving_tracefs_as_found(main))
