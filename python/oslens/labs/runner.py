"""Running a lab: its programs built, its constraint applied through the control layer (journaled
before the change, restored at the end, on SIGINT/SIGTERM/SIGHUP, and — after a SIGKILL — by
the next `oslens lab` or `oslens tune` run), each program recorded with `oslens record`, and the
results kept in the lab's directory for `oslens lab check`."""

from __future__ import annotations

import bisect
import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from oslens import paths
from oslens.control import apply, journal, kernel, sysfs, zram
from oslens.control.sysfs import default_root
from oslens.errors import OslensError
from oslens.progress import Progress

LAB_PROGRAMS = paths.lab_programs()
RESULTS = "results.json"
HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def lab_dir(lab, variant: str, quick: bool, base: Path | None = None) -> Path:
    """Where a run keeps its data file, traces and results: traces/labNN-VARIANT[-quick]."""
    name = f"lab{lab.number:02d}-{variant}{'-quick' if quick else ''}"
    return (Path(base) if base is not None else Path("traces")) / name


def load_results(directory: Path) -> dict | None:
    try:
        return json.loads((Path(directory) / RESULTS).read_text())
    except (OSError, ValueError):
        return None


def recover_stale(out=sys.stderr) -> None:
    """Undo what a SIGKILLed oslens run left changed (cgroups, sysfs settings)."""
    done, problems = journal.recover()
    for line in done:
        print(f"oslens: {line}", file=out)
    for line in problems:
        print(f"oslens: warning: {line}", file=out)


def build_programs() -> None:
    """`make` in workloads/labs (a no-op when the programs are current); nothing where they came
    built, with no Makefile (an installed wheel)."""
    if not (LAB_PROGRAMS / "Makefile").exists():
        return
    try:
        proc = subprocess.run(["make", "-s", "-C", str(LAB_PROGRAMS)], capture_output=True, text=True)
    except OSError as e:
        raise OslensError(f"cannot run make ({e.strerror}); install build-essential", 1) from e
    if proc.returncode != 0:
        first = (proc.stderr.strip().splitlines() or ["no output"])[-1]
        raise OslensError(f"building the lab programs in {LAB_PROGRAMS} failed: {first}", 1)


def program(name: str) -> str:
    return str(LAB_PROGRAMS / name)


def _die_with_parent():
    """In the child before exec: a SIGKILL of `oslens lab run` takes its programs with it."""
    kernel.set_parent_death_signal(signal.SIGKILL)


@dataclass
class ProgramRun:
    argv: list
    status: int
    stdout: str
    stderr: str
    trace: Path | None
    pid: int | None

    def json(self) -> dict:
        """The program's last stdout line, which the lab programs print as JSON."""
        lines = [line for line in self.stdout.splitlines() if line.startswith("{")]
        if not lines:
            raise OslensError(f"{Path(self.argv[0]).name} printed no result (exit {self.status}): "
                              f"{self.stderr.strip()[-300:] or 'no message'}", 1)
        return json.loads(lines[-1])


class _Interrupted(Exception):
    pass


class LabRun:
    """with LabRun(lab, variant, quick, directory) as ctx: ctx.cap_memory(...); ctx.run(...)"""

    def __init__(self, lab, variant: str, quick: bool, directory: Path, record: bool = True,
                 out=None):
        self.lab, self.variant, self.quick = lab, variant, quick
        self.dir = Path(directory).resolve()
        self.record = record
        self.out = out  # None: sys.stdout when printing, which a progress bar may have redirected above itself
        self.bar = Progress(f"lab {lab.number}", enabled=False)  # drawn from __enter__ to __exit__
        self.journal: journal.Journal | None = None
        self.cgroups: list[Path] = []
        self.memory_cgroup: tuple[Path, int] | None = None
        self._children: list[subprocess.Popen] = []
        self._old: dict = {}
        self._signalled = 0

    # -- lifetime ------------------------------------------------------------------------
    def __enter__(self):
        recover_stale()
        self.bar = Progress(f"lab {self.lab.number}")  # no end known: a lab runs as many programs as it needs
        self.dir.mkdir(parents=True, exist_ok=True)
        self.journal = journal.Journal(command=["oslens", "lab", "run", str(self.lab.number)],
                                       tool=f"oslens lab run {self.lab.number}")
        self._old = {s: signal.signal(s, self._on_signal) for s in HANDLED}
        return self

    def _on_signal(self, signum, _frame):
        # kept as well as raised: Python drops an exception raised inside an at-fork hook (logging's
        # _releaseLock after Popen's fork), and the run would then go on to its end
        self._signalled = signum
        for child in self._children:
            if child.poll() is None:
                child.send_signal(signum)
        raise _Interrupted(signum)

    def _started(self, child: subprocess.Popen) -> subprocess.Popen:
        """A child to stop with the run; a signal that arrived while it was forked ends the run here."""
        self._children.append(child)
        if self._signalled:
            raise _Interrupted(self._signalled)
        return child

    def __exit__(self, exc_type, exc, _tb):
        self.bar.close()
        for child in self._children:
            if child.poll() is None:
                child.kill()
                child.wait()
        problems = self.journal.restore() if self.journal else []
        for line in problems:
            print(f"oslens: warning: {line}", file=sys.stderr)
        if self.journal and self.journal.entries and not problems:
            names = dict.fromkeys(f"{e['what']} {Path(e['path']).name}" if e['what'] != Path(e['path']).name else e['what']
                                  for e in self.journal.entries)  # a setting changed several times, once
            self.say(f"restored: {', '.join(names)}")
        for s, h in self._old.items():
            signal.signal(s, h)
        if exc_type is _Interrupted or (exc_type is None and self._signalled):
            signum = exc.args[0] if exc_type is _Interrupted else self._signalled
            raise OslensError(f"interrupted by signal {signum}; every setting the lab changed is restored", 128 + signum)
        return False

    def say(self, text: str = "") -> None:
        print(text, file=self.out or sys.stdout, flush=True)

    # -- constraints ---------------------------------------------------------------------
    def cap_memory(self, limit_bytes: int | None, high_bytes: int | None = None, name: str | None = None) -> Path:
        """A cgroup of this run with memory.limit_in_bytes (v1) / memory.max (v2) = limit and,
        given high_bytes, the soft limit (v1 memory.soft_limit_in_bytes / v2 memory.high), made
        and journaled by the control layer. `name` tells a second cgroup of the same run apart
        (oslens-PID-NAME). The lab programs join it themselves (--cgroup)."""
        settings = {}
        if limit_bytes is not None:
            settings["memory_max"] = str(int(limit_bytes))
        if high_bytes is not None:
            settings["memory_high"] = str(int(high_bytes))
        tag = f"{os.getpid()}-{name}" if name else os.getpid()
        state = apply.apply_globals(settings, self.journal, default_root(), tag)
        self.cgroups.extend(state.cgroups)
        self.memory_cgroup = (state.cgroup, state.cgroup_version)
        return state.cgroup

    def cap_cpu(self, cpus: float, name: str | None = None) -> list[Path]:
        """A cgroup of this run with a CFS bandwidth cap of `cpus` CPUs (v1 cpu.cfs_quota_us over
        cpu.cfs_period_us, v2 cpu.max), through the control layer. Returns the cgroups to join."""
        tag = f"{os.getpid()}-{name}" if name else os.getpid()
        state = apply.apply_globals({"cpu_max": cpus}, self.journal, default_root(), tag)
        self.cgroups.extend(state.cgroups)
        return state.cgroups

    def set_globals(self, settings: dict) -> None:
        """Machine-wide settings of the control layer (sched_rr_timeslice_ms, thp, readahead_kb,
        ...), journaled before each change and restored with the rest."""
        apply.apply_globals(settings, self.journal, default_root(), os.getpid())

    def swap_on_zram(self, size_bytes: int) -> dict:
        """Swap on a free zram device for this run (control.zram), journaled: swapoff and the
        device's reset (disksize 0) at the end, on signals, and by the next oslens run after a
        SIGKILL. Made before the run's cgroup, so it is undone after the cgroup is gone."""
        return zram.swap_on_zram(self.journal, size_bytes, default_root())

    def swap_peak(self) -> int | None:
        """The most swap the run's memory cgroup used, in bytes (v1: the memory + swap peak less the
        memory peak, a lower bound, close while the memory stays at the cap; v2: memory.swap.peak)."""
        if not self.memory_cgroup:
            return None
        cg, version = self.memory_cgroup
        if version == 2:
            return sysfs.read_int(cg / "memory.swap.peak")
        both, mem = sysfs.read_int(cg / "memory.memsw.max_usage_in_bytes"), sysfs.read_int(cg / "memory.max_usage_in_bytes")
        return None if both is None or mem is None else both - mem

    @staticmethod
    def cpu_stat(cg: Path) -> dict:
        """cpu.stat of a cgroup: periods, throttled periods, throttled time in ns (v1 and v2)."""
        out = {}
        for line in (sysfs.read(cg / "cpu.stat") or "").splitlines():
            key, _, value = line.partition(" ")
            if value.strip().isdigit():
                out[key] = int(value)
        if "throttled_usec" in out and "throttled_time" not in out:
            out["throttled_time"] = out["throttled_usec"] * 1000
        return out

    def memory_stat(self, v1_key: str, v2_key: str | None = None) -> int | None:
        """One counter of the run's memory cgroup's memory.stat (the keys differ by version)."""
        if not self.memory_cgroup:
            return None
        cg, version = self.memory_cgroup
        want = v1_key if version == 1 else (v2_key or v1_key)
        for line in (sysfs.read(cg / "memory.stat") or "").splitlines():
            key, _, value = line.partition(" ")
            if key == want and value.strip().isdigit():
                return int(value)
        return None

    def cached_bytes(self) -> int | None:
        """Page-cache bytes charged to the run's memory cgroup."""
        return self.memory_stat("cache", "file")

    def refaults(self) -> int | None:
        """File pages read again soon after the cgroup evicted them (the kernel's workingset)."""
        return self.memory_stat("workingset_refault_file")

    def cap_usage(self) -> dict:
        if not self.memory_cgroup:
            return {}
        return apply.cgroup_usage(*self.memory_cgroup)

    # -- programs ------------------------------------------------------------------------
    def run(self, argv: list, label: str, record: bool | None = None, events: str = "faults",
            env: dict | None = None, preload: bool = False, block_when_full: bool = False) -> ProgramRun:
        """Run one program to completion, recorded by `oslens record` into DIR/label unless
        record is False. Its stdout is captured; its stderr too. (Programs that take no
        --cgroup are started with `start(..., cgroups=...)` instead.) preload: load the application
        recorder too (lab 8 reads its lock tables); block_when_full: its threads pause for another
        buffer rather than drop records (lab 8 counts every lock operation)."""
        record = self.record if record is None else record
        self.bar.step(f"{Path(str(argv[0])).name} ({label})")
        trace = None
        cmd = list(argv)
        if record:
            trace = self.dir / label
            # --no-preload unless asked: most lab programs need only the kernel's events, so nothing
            # of oslens is loaded into them (and nothing of it is charged to their cap).
            cmd = [sys.executable, "-m", "oslens.cli", "record", "--no-import", *(() if preload else ("--no-preload",)),
                   "--buffer-mb", "1", *(("--on-full", "block") if block_when_full else ()), "--events", events,
                   "-f", "-o", str(trace), "--", *argv]
        child = self._started(subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                               preexec_fn=_die_with_parent, env=env))
        stdout, stderr = child.communicate()
        self._children.remove(child)
        pid = None
        if trace is not None:
            try:
                pid = json.loads((trace / "meta.json").read_text()).get("pid")
            except (OSError, ValueError):
                trace = None
        return ProgramRun(list(argv), child.returncode, stdout, stderr, trace, pid)

    def start(self, argv: list, cgroups=(), task_policy: dict | None = None, interactive: bool = False) -> subprocess.Popen:
        """Start one program unrecorded, joined to `cgroups` and with a per-task policy of the
        control layer (apply.apply_task: nice, affinity, slice) before it execs. finish() it.
        interactive: its stdin is a pipe too (programs that wait for their cue)."""
        self.bar.step(Path(str(argv[0])).name)

        def setup():
            kernel.set_parent_death_signal(signal.SIGKILL)
            for cg in cgroups:
                apply.join_cgroup(cg)
            if task_policy:
                err, _bits = apply.apply_task(task_policy)
                if err:
                    os.write(2, f"cannot apply {task_policy}: {os.strerror(err)}\n".encode())
                    os._exit(126)
        return self._started(subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                                              preexec_fn=setup, stdin=subprocess.PIPE if interactive else None))

    def finish(self, child: subprocess.Popen) -> dict:
        """Wait for a started program; its last JSON line."""
        stdout, stderr = child.communicate()
        self._children.remove(child)
        return ProgramRun(list(child.args), child.returncode, stdout, stderr, None, child.pid).json()

    def finish_quietly(self, child: subprocess.Popen, timeout: float = 60.0) -> int:
        """Wait for a started program whose output was read as it ran; killed after `timeout`."""
        try:
            child.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.communicate()
        self._children.remove(child)
        return child.returncode

    def save(self, params: dict, results: dict, facts: dict) -> Path:
        doc = {"lab": self.lab.number, "variant": self.variant, "quick": self.quick,
               "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "machine": facts,
               "params": params, "results": results}
        path = self.dir / RESULTS
        path.write_text(json.dumps(doc, indent=1))
        return path


def _fault_times(trace: Path | None, pid: int | None, lo: int, hi: int) -> list[int] | None:
    """The times of `pid`'s user page faults on addresses [lo, hi) in a recorded trace, in order;
    None where the trace has no fault events or cannot be read."""
    if trace is None or pid is None:
        return None
    from oslens import store

    try:
        con = store.open_trace(trace, quiet=True)
        names = {r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()}
        if "faults" not in names:
            return None
        rows = con.execute("SELECT ts FROM faults WHERE pid = ? AND address >= ? AND address < ? ORDER BY ts",
                           [pid, lo, hi]).fetchall()
    except Exception as e:  # noqa: BLE001 - a trace that cannot be read leaves rusage's figures
        print(f"oslens: warning: the trace {trace} could not be read ({e}); showing rusage only", file=sys.stderr)
        return None
    return [r[0] for r in rows]


def trace_faults(trace: Path, pid: int, lo: int, hi: int, buckets: int = 20) -> dict | None:
    """User page faults of `pid` on addresses [lo, hi) in a recorded trace, with how they spread
    over the run (the paper's pfault_timeline)."""
    ts = _fault_times(trace, pid, lo, hi)
    if ts is None:
        return None
    if not ts:
        return {"count": 0, "timeline": [], "bucket_ns": 0}
    span = max(ts[-1] - ts[0], 1)
    width = span // buckets + 1
    hist = [0] * buckets
    for t in ts:
        hist[min((t - ts[0]) // width, buckets - 1)] += 1
    return {"count": len(ts), "timeline": hist, "bucket_ns": width}


def trace_fault_counts(trace: Path | None, pid: int | None, lo: int, hi: int,
                       windows: list[tuple[int, int]]) -> list[int] | None:
    """User page faults of `pid` on [lo, hi) in each CLOCK_MONOTONIC window [t0, t1) of a trace
    (a program's phases, timed by the program itself)."""
    ts = _fault_times(trace, pid, lo, hi)
    if ts is None:
        return None
    return [bisect.bisect_left(ts, t1) - bisect.bisect_left(ts, t0) for t0, t1 in windows]


def kernel_tier(trace: Path | None) -> str | None:
    if trace is None:
        return None
    try:
        meta = json.loads((trace / "meta.json").read_text())
    except (OSError, ValueError):
        return None
    k = meta.get("kernel") or {}
    return k.get("tier")
