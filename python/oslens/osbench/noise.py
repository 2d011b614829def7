"""Is the machine quiet enough to trust a figure? Steal time and CPU pressure over a benchmark,
run-queue length at its start, and the share of repetitions in which the benchmark was preempted."""

from __future__ import annotations

import os
import time
from dataclasses import dataclass


def _cpu_ticks() -> list[int]:
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("cpu "):
                    return [int(v) for v in line.split()[1:]]
    except OSError:
        pass
    return []


def _psi_cpu_some_us() -> int | None:
    try:
        with open("/proc/pressure/cpu") as f:
            for line in f:
                if line.startswith("some"):
                    return int(line.rsplit("total=", 1)[1])
    except (OSError, ValueError, IndexError):
        pass
    return None


def _procs_running() -> int:
    try:
        with open("/proc/stat") as f:
            for line in f:
                if line.startswith("procs_running"):
                    return int(line.split()[1])
    except OSError:
        pass
    return 0


@dataclass
class Snapshot:
    wall: float
    ticks: list[int]
    psi_us: int | None
    running: int

    @classmethod
    def take(cls) -> "Snapshot":
        return cls(time.monotonic(), _cpu_ticks(), _psi_cpu_some_us(), _procs_running())


def between(a: Snapshot, b: Snapshot) -> dict:
    """Steal (share of all CPU time, /proc/stat), CPU pressure (share of wall time some task
    waited for a CPU, /proc/pressure/cpu) and the runnable tasks seen at the start."""
    out = {"seconds": round(b.wall - a.wall, 3), "steal_fraction": None, "cpu_pressure": None,
           "running_at_start": a.running}
    if a.ticks and b.ticks and len(a.ticks) > 7:
        d = [y - x for x, y in zip(a.ticks, b.ticks)]
        total = sum(d[:8])
        out["steal_fraction"] = round(d[7] / total, 4) if total > 0 else 0.0
    if a.psi_us is not None and b.psi_us is not None and b.wall > a.wall:
        out["cpu_pressure"] = round((b.psi_us - a.psi_us) / 1e6 / (b.wall - a.wall), 4)
    return out


STEAL_LIMIT = 0.02
PREEMPTED_LIMIT = 0.25
CI_LIMIT = 0.10


def judge(summary: dict, preempted: int, reps: int, machine: dict, preemption_expected: bool) -> tuple[list[str], bool]:
    """(notes, noisy): plain-language remarks on a figure, and whether the machine was too noisy
    to trust its median (steal, a wide interval, a median far above the minimum, or most
    repetitions preempted). A few preempted repetitions are noted but do not condemn a figure:
    the median absorbs them."""
    notes, noisy = [], False
    steal = machine.get("steal_fraction")
    if steal is not None and steal > STEAL_LIMIT:
        notes.append(f"steal {steal:.1%}")
        noisy = True
    if not preemption_expected and reps and preempted / reps > PREEMPTED_LIMIT:
        notes.append(f"preempted in {preempted}/{reps} reps")
        noisy = noisy or preempted / reps > 0.5
    if summary.get("ci_rel_halfwidth", 0) > CI_LIMIT:
        notes.append(f"CI ±{summary['ci_rel_halfwidth']:.0%}")
        noisy = True
    if summary.get("min", 0) > 0 and summary["median"] / summary["min"] > 1.5 and reps >= 6:
        notes.append(f"median {summary['median'] / summary['min']:.1f}× min")
        noisy = True
    return notes, noisy


def cpu_count() -> int:
    return len(os.sched_getaffinity(0))
