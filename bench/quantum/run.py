#!/usr/bin/env python3
"""Krintz & Wolski's quantum experiment (Table 1) on Linux: a CPU-bound Fibonacci and a
LINPACK-style LU (workloads/fib, workloads/lu) share one CPU with a competing CPU hog, under
the default policy and under a long EEVDF slice / SCHED_BATCH.

Settings (program policy / hog policy; both pinned to the same CPU):
  alone           program alone, default policy (no hog): the reference for CPU time
  alone_slice100  program alone with a 100 ms slice: the paper's own setting (one program on a
                  quiet machine); its only competitors are whatever else wakes on that CPU
  default         SCHED_OTHER, kernel slice      / SCHED_OTHER, kernel slice
  slice100        SCHED_OTHER, 100 ms slice      / default
  batch           SCHED_BATCH, kernel slice      / default
  batch_slice100  SCHED_BATCH, 100 ms slice      / default
  slice100_both   SCHED_OTHER, 100 ms slice      / SCHED_OTHER, 100 ms slice (a long quantum
                  for every task on the CPU, like the paper's modified kernel quantum)
  tune            `oslens tune --plan examples/plans/quantum.toml -- PROGRAM --adapt`: the
                  program sets its own 100 ms slice with osl_adapt("compute") / default
                  (left out when oslens is not installed, or with --no-tune)

The slice and class are set with sched_setattr by a small launcher (launch.c) and the CPU
with sched_setaffinity; the hog (hog.c), started 50 ms before the program in this session (so
in the same autogroup) and killed after it, is a register-only loop (--hog cache: it walks a
buffer the size of one CPU's L2, so every switch back costs the program refills). Both are
compiled into a temporary directory. Each program reports its own compute phase (--stats):
wall and thread CPU time, voluntary and involuntary context switches (getrusage
RUSAGE_THREAD) and the slice and class in force (/proc/thread-self/sched se.slice,
sched_getscheduler), so the settings are checked, not assumed. Repetitions alternate: every
repetition runs every setting (in a rotated order) for both programs, and each ratio is taken
against the default measured in the same repetition (and, in ratio_to_alone, against the
program alone); the JSON gives the median and the min/max of those per-repetition ratios.

hog_share is the hog's CPU share from the program's launch to its exit (for `tune` that
includes oslens's own start-up, when the hog has the CPU to itself). Each run also records
what else used that CPU meanwhile (background_share: /proc/stat busy time less the hog's and
the program's, 10 ms resolution) and the hypervisor's steal time, since other tasks waking on
the CPU also preempt the program and count as its context switches. docs/experiments.md
has the figures and what they mean.

Prints one JSON object on stdout (progress on stderr unless --json).

    .venv/bin/python bench/quantum/run.py [--quick] [--reps R] [--cpu N] [--hog spin|cache] [--no-tune] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
VENV = ROOT / ".venv"
PLAN = ROOT / "examples" / "plans" / "quantum.toml"
SLICE_US = 100_000  # the longest per-task slice the kernel accepts (100 ms)

# name -> (program class, program slice us, hog class, hog slice us); hog None: no hog
SETTINGS = {
    "alone": ("other", 0, None, None),
    "alone_slice100": ("other", SLICE_US, None, None),
    "default": ("other", 0, "other", 0),
    "slice100": ("other", SLICE_US, "other", 0),
    "batch": ("batch", 0, "other", 0),
    "batch_slice100": ("batch", SLICE_US, "other", 0),
    "slice100_both": ("other", SLICE_US, "other", SLICE_US),
    "tune": ("other", 0, "other", 0),  # the program adapts itself under `oslens tune`
}
POLICY_NAMES = {0: "other", 1: "fifo", 2: "rr", 3: "batch", 5: "idle", 6: "deadline", 7: "ext"}


class Terminated(Exception):
    pass


def _on_term(signum, frame):
    raise Terminated(f"signal {signum}")


def build_tools(work: Path) -> tuple[Path, Path]:
    hog, launch = work / "hog", work / "launch"
    subprocess.run(["gcc", "-O2", "-o", str(hog), str(HERE / "hog.c")], check=True)
    subprocess.run(["gcc", "-O2", "-o", str(launch), str(HERE / "launch.c")], check=True)
    return hog, launch


def build_workloads() -> None:
    for name in ("fib", "lu"):
        subprocess.run(["make", "-s", "-C", str(ROOT / "workloads" / name), f"OSLENS_PREFIX={VENV}"],
                       check=True, stdout=subprocess.DEVNULL)


def proc_counts(pid: int) -> dict:
    """The hog's CPU time (ns) and context switches so far."""
    out = {}
    with open(f"/proc/{pid}/schedstat") as f:
        out["cpu_ns"] = int(f.read().split()[0])
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("voluntary_ctxt_switches:"):
                out["nvcsw"] = int(line.split()[1])
            elif line.startswith("nonvoluntary_ctxt_switches:"):
                out["nivcsw"] = int(line.split()[1])
    return out


TICKS = os.sysconf("SC_CLK_TCK")


def read_autogroup(pid: int | str) -> str | None:
    try:
        return Path(f"/proc/{pid}/autogroup").read_text().split()[0]
    except (OSError, IndexError):
        return None  # no CONFIG_SCHED_AUTOGROUP


def cpu_ticks(cpu: int) -> dict:
    """Busy (neither idle nor iowait nor steal) and steal time of one CPU, in clock ticks."""
    with open("/proc/stat") as f:
        for line in f:
            if line.startswith(f"cpu{cpu} "):
                v = [int(x) for x in line.split()[1:]]
                idle, iowait, steal = v[3], v[4], v[7] if len(v) > 7 else 0
                # guest time is already part of user time
                return {"busy": sum(v[:8]) - idle - iowait - steal, "steal": steal}
    raise RuntimeError(f"cpu{cpu} is not in /proc/stat")


def proc_slice(pid: int) -> int | None:
    with open(f"/proc/{pid}/sched") as f:
        for line in f:
            if line.startswith("se.slice"):
                return int(line.split(":")[1])
    return None


def l2_cache_kb(cpu: int) -> int:
    """The size of `cpu`'s level-2 cache (KiB); 1024 when sysfs does not say."""
    base = Path(f"/sys/devices/system/cpu/cpu{cpu}/cache")
    for idx in sorted(base.glob("index*")):
        try:
            if (idx / "level").read_text().strip() == "2":
                size = (idx / "size").read_text().strip()
                return int(size[:-1]) * (1024 if size.endswith("M") else 1) if size[-1] in "KM" else int(size) // 1024
        except OSError:
            continue
    return 1024


def parse_stats(stderr: str) -> dict:
    for line in stderr.splitlines():
        if line.startswith("stats "):
            d = dict(kv.split("=", 1) for kv in line.split()[1:])
            return {k: int(v) for k, v in d.items()}
    raise RuntimeError(f"no stats line in the program's stderr: {stderr!r}")


class Runner:
    def __init__(self, hog: Path, launch: Path, cpu: int, oslens: Path | None, hog_args: list[str]):
        self.hog, self.launch, self.cpu, self.oslens = hog, launch, cpu, oslens
        self.hog_args = hog_args
        self.work = hog.parent
        self.hog_proc: subprocess.Popen | None = None
        self.hog_autogroup: str | None = None

    def start_hog(self, cls: str, slice_us: int) -> None:
        self.hog_proc = subprocess.Popen([str(self.launch), str(self.cpu), cls, str(slice_us), str(self.hog), *self.hog_args],
                                         process_group=0)  # same session, so the same autogroup as the program
        time.sleep(0.05)  # let it reach its loop (and the launcher its exec)
        if self.hog_proc.poll() is not None:
            raise RuntimeError(f"the hog exited at once (status {self.hog_proc.returncode})")
        # With autogroup on, tasks of different sessions compete as groups first; the hog stays
        # in our session (the program's too), so the two compete as tasks on one runqueue.
        self.hog_autogroup = read_autogroup(self.hog_proc.pid)

    def stop_hog(self) -> None:
        p, self.hog_proc = self.hog_proc, None
        if p is None:
            return
        try:
            os.killpg(p.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        p.wait()

    def measure(self, setting: str, prog: list[str]) -> dict:
        cls, slice_us, hog_cls, hog_slice_us = SETTINGS[setting]
        cmd = [str(self.launch), str(self.cpu), cls, str(slice_us), *prog, "--stats"]
        if setting == "tune":
            cmd = [str(self.oslens), "tune", "--plan", str(PLAN), "-q", "--", *cmd, "--adapt"]
        try:
            hog0 = hog_slice = None
            if hog_cls is not None:
                self.start_hog(hog_cls, hog_slice_us)
                hog_slice = proc_slice(self.hog_proc.pid)
                hog0 = proc_counts(self.hog_proc.pid)
            out_path, err_path = self.work / "out", self.work / "err"
            with open(out_path, "w") as out, open(err_path, "w") as err:
                cpu0 = cpu_ticks(self.cpu)
                w0 = time.monotonic()
                child = subprocess.Popen(cmd, stdout=out, stderr=err)
                _, status, ru = os.wait4(child.pid, 0)
                outer_wall = time.monotonic() - w0
                cpu1 = cpu_ticks(self.cpu)
                child.returncode = os.waitstatus_to_exitcode(status)
            hog1 = proc_counts(self.hog_proc.pid) if hog_cls is not None else None
        finally:
            self.stop_hog()
        stdout, stderr = out_path.read_text(), err_path.read_text()
        if child.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {child.returncode}: {stderr.strip()}")
        st = parse_stats(stderr)
        wall, cpu = st["wall_ns"] / 1e9, st["cpu_ns"] / 1e9
        switches = st["nvcsw"] + st["nivcsw"]
        r = {
            "wall_s": wall,
            "cpu_s": cpu,
            "share": cpu / wall if wall > 0 else None,
            "nvcsw": st["nvcsw"],
            "nivcsw": st["nivcsw"],
            "switches": switches,
            # the mean uninterrupted run of the program: CPU time per time it was switched out
            "mean_run_ms": cpu * 1e3 / (switches + 1),
            "policy": POLICY_NAMES.get(st["policy"], str(st["policy"])),
            "slice_ms": st["slice_ns"] / 1e6 if st["slice_ns"] >= 0 else None,
            "output": stdout.strip(),
        }
        # What else ran on the CPU (other users' tasks, kernel threads, interrupts), and the time
        # the hypervisor took it away (steal), as shares of the run; /proc/stat's 10 ms ticks.
        hog_cpu_s = (hog1["cpu_ns"] - hog0["cpu_ns"]) / 1e9 if hog1 is not None else 0.0
        busy_s = (cpu1["busy"] - cpu0["busy"]) / TICKS
        r["background_share"] = max(0.0, busy_s - hog_cpu_s - (ru.ru_utime + ru.ru_stime)) / outer_wall
        r["steal_share"] = (cpu1["steal"] - cpu0["steal"]) / TICKS / outer_wall
        if hog1 is not None:
            # the hog's share of the CPU over the program's whole run (launch to exit)
            r["hog_share"] = (hog1["cpu_ns"] - hog0["cpu_ns"]) / 1e9 / outer_wall
            r["hog_nivcsw"] = hog1["nivcsw"] - hog0["nivcsw"]
            r["hog_slice_ms"] = hog_slice / 1e6 if hog_slice is not None else None
        return r


def summary(values: list) -> dict | None:
    values = [v for v in values if v is not None]
    if not values:
        return None
    return {"median": statistics.median(values), "min": min(values), "max": max(values), "n": len(values)}


METRICS = ("wall_s", "cpu_s", "share", "nvcsw", "nivcsw", "switches", "mean_run_ms", "hog_share", "hog_nivcsw",
           "background_share", "steal_share")
RATIO_METRICS = ("wall_s", "cpu_s", "share", "nivcsw", "switches")


def ratios_to(runs: dict[str, list[dict]], base_name: str) -> dict:
    """Each setting's metrics over those of `base_name` in the same repetition."""
    ratios = {}
    base = runs[base_name]
    for s, rs in runs.items():
        ratios[s] = {}
        for m in RATIO_METRICS:
            per_rep = []
            for r, b in zip(rs, base):
                if r.get(m) is not None and b.get(m):
                    per_rep.append(r[m] / b[m])
            ratios[s][m] = summary(per_rep)
    return ratios


def analyse(runs: dict[str, list[dict]]) -> dict:
    """Per-setting summaries, and ratios to the default of the same repetition."""
    per_setting = {}
    for s, rs in runs.items():
        d = {m: summary([r.get(m) for r in rs]) for m in METRICS if any(m in r for r in rs)}
        d["policy"] = sorted({r["policy"] for r in rs})
        d["slice_ms"] = sorted({r["slice_ms"] for r in rs if r["slice_ms"] is not None})
        hog_slices = sorted({r["hog_slice_ms"] for r in rs if r.get("hog_slice_ms") is not None})
        if hog_slices:
            d["hog_slice_ms"] = hog_slices
        per_setting[s] = d
    return per_setting


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="small inputs, one repetition (a smoke test: seconds)")
    ap.add_argument("--reps", type=int, help="repetitions (default 7; --quick: 1)")
    ap.add_argument("--cpu", type=int, help="the CPU both tasks share (default: the last one this process may use)")
    ap.add_argument("--fib-n", type=int, help="fib's N (default 42; --quick: 32)")
    ap.add_argument("--lu-n", type=int, help="lu's N (default 1500; --quick: 300)")
    ap.add_argument("--hog", choices=("spin", "cache"), default="spin",
                    help="spin: a register-only loop (default); cache: walks a buffer the size of one L2")
    ap.add_argument("--no-tune", action="store_true", help="leave out the `oslens tune` setting")
    ap.add_argument("--json", action="store_true", help="JSON only: no progress on stderr")
    args = ap.parse_args()
    reps = args.reps or (1 if args.quick else 7)
    fib_n = args.fib_n or (32 if args.quick else 42)
    lu_n = args.lu_n or (300 if args.quick else 1500)
    cpu = args.cpu if args.cpu is not None else max(os.sched_getaffinity(0))
    oslens = VENV / "bin" / "oslens"
    settings = [s for s in SETTINGS if not (s == "tune" and (args.no_tune or not oslens.exists()))]

    def log(msg: str) -> None:
        if not args.json:
            print(msg, file=sys.stderr, flush=True)

    old_term = signal.signal(signal.SIGTERM, _on_term)
    old_hup = signal.signal(signal.SIGHUP, _on_term)
    work = Path(tempfile.mkdtemp(prefix="oslens-quantum-"))
    runner = None
    try:
        build_workloads()
        hog, launch = build_tools(work)
        l2_kb = l2_cache_kb(cpu)
        hog_args = ["spin"] if args.hog == "spin" else ["cache", str(l2_kb)]
        runner = Runner(hog, launch, cpu, oslens if "tune" in settings else None, hog_args)
        programs = {
            "fib": [str(ROOT / "workloads" / "fib" / "fib"), str(fib_n)],
            "lu": [str(ROOT / "workloads" / "lu" / "lu"), str(lu_n)],
        }
        runs = {p: {s: [] for s in settings} for p in programs}
        t0 = time.monotonic()
        load0 = Path("/proc/loadavg").read_text().split()[:3]
        for rep in range(reps):
            order = settings[rep % len(settings):] + settings[:rep % len(settings)]
            for s in order:
                for p, cmd in programs.items():
                    runs[p][s].append(runner.measure(s, cmd))
            log(f"quantum: repetition {rep + 1}/{reps} done ({time.monotonic() - t0:.0f} s)")
        result = {
            "experiment": "Krintz & Wolski quantum (Table 1) on Linux",
            "kernel": platform.release(),
            "cpu": cpu,
            "online_cpus": os.cpu_count(),
            "repetitions": reps,
            "long_slice_ms": SLICE_US / 1000,
            "hog_same_autogroup": runner.hog_autogroup == read_autogroup("self"),
            "hog": "register-only spin loop, same CPU" if args.hog == "spin" else
                   f"walks {l2_kb} KiB (this CPU's L2) one write per cache line, same CPU",
            "settings": {s: {"program": {"class": SETTINGS[s][0], "slice_ms": SETTINGS[s][1] / 1000 or "kernel"},
                             "hog": None if SETTINGS[s][2] is None else
                             {"class": SETTINGS[s][2], "slice_ms": SETTINGS[s][3] / 1000 or "kernel"}}
                         for s in settings},
            "seconds": round(time.monotonic() - t0, 1),
            "loadavg": {"start": load0, "end": Path("/proc/loadavg").read_text().split()[:3]},
            "programs": {},
        }
        result["settings"].get("tune", {}).update({"plan": str(PLAN.relative_to(ROOT))})
        for p, cmd in programs.items():
            outputs = sorted({r["output"] for rs in runs[p].values() for r in rs})
            per_setting = analyse(runs[p])
            result["programs"][p] = {
                "command": " ".join([Path(cmd[0]).name, *cmd[1:]]),
                "output": outputs[0] if len(outputs) == 1 else outputs,
                "deterministic": len(outputs) == 1,
                "per_setting": per_setting,
                "ratio_to_default": ratios_to(runs[p], "default"),
                "ratio_to_alone": ratios_to(runs[p], "alone"),
                "runs": {s: [{k: v for k, v in r.items() if k != "output"} for r in rs] for s, rs in runs[p].items()},
            }
        print(json.dumps(result, indent=2))
        for p in programs:
            log(f"{p}: median ratio to default (min-max)   wall | cpu | involuntary switches | mean run ms")
            for s in settings:
                rt = result["programs"][p]["ratio_to_default"][s]
                ps = result["programs"][p]["per_setting"][s]

                def fmt(x):
                    return "-" if x is None else f"{x['median']:.3f} ({x['min']:.2f}-{x['max']:.2f})"
                log(f"  {s:15s} {fmt(rt['wall_s'])} | {fmt(rt['cpu_s'])} | {fmt(rt['nivcsw'])} | "
                    f"{ps['mean_run_ms']['median']:.1f}")
        return 0
    except Terminated as e:
        print(f"quantum: stopped by {e}", file=sys.stderr)
        return 143
    finally:
        if runner is not None:
            runner.stop_hog()
        shutil.rmtree(work, ignore_errors=True)
        signal.signal(signal.SIGTERM, old_term)
        signal.signal(signal.SIGHUP, old_hup)


if __name__ == "__main__":
    sys.exit(main())
