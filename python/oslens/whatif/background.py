"""Other tasks as competitors. The collector keeps only the switches that involve the program,
so a trace shows when others took a CPU from the program (per CPU and 10 ms bin, extract.py), but
neither all of their demand (what ran after the CPU went idle is unseen) nor how many of them
wanted the CPU at once, which is what a fair scheduler's share depends on. The model: on each
CPU, during each stretch of bins where others ran, K always-ready tasks pinned there. K is fitted
once per trace: the value with which the default policy (eevdf with this machine's slice) best
reproduces the program's recorded total waiting time. Every policy is then predicted with that K,
the competitors being ordinary tasks of the policy (below the program under SCHED_FIFO/RR).
See docs/whatif.md."""

from __future__ import annotations

import copy

from oslens.whatif import spec as specmod
from oslens.whatif.engine import simulate
from oslens.whatif.workload import Task, Workload

K_MAX = 32


def competitors(wl: Workload, k: int) -> Workload:
    """A copy of the workload with K competitors per CPU that had background load."""
    new = copy.copy(wl)
    hogs = []
    if k > 0:
        for cpu, b in sorted(wl.background.items()):
            if cpu >= wl.ncpus:
                continue
            for lo, hi in active_windows(b):
                for j in range(k):
                    hogs.append(Task(-(cpu * 1000 + j + 1), f"background {cpu}.{j}", [hi - lo], [], arrival=lo,
                                     cpus=(cpu,), background=True, until=hi))
    new.tasks = [t for t in wl.tasks if not t.background] + hogs
    return new


def active_windows(b: dict) -> list[tuple[int, int]]:
    """[start, end) ns of each run of consecutive bins in which others took the CPU."""
    out = []
    for i in sorted(b["bins"]):
        lo, hi = i * b["bin_ns"], (i + 1) * b["bin_ns"]
        if out and out[-1][1] == lo:
            out[-1] = (out[-1][0], hi)
        else:
            out.append((lo, hi))
    return out


def _waiting(wl: Workload, k: int, machine: dict) -> int:
    res = simulate(competitors(wl, k), specmod.make_policy(specmod.parse("default"), machine),
                   machine.get("switch_ns", 0), machine.get("migrate_ns", 0))
    return sum(st.waiting for st in res.tasks if not st.background)


def fit(wl: Workload, machine: dict) -> tuple[int, dict]:
    """K for this trace, and how well the default policy then reproduces the recorded waiting."""
    target = sum(t.recorded.get("waiting_ns", 0) for t in wl.tasks if not t.background)
    if not wl.background:
        return 0, {"k": 0, "recorded_waiting_ns": target, "fitted_waiting_ns": None}
    # every K: waiting is not monotone in K everywhere (competitors that run out of work stop
    # competing), and 33 replays of the Rust core take about a second
    waits = {k: _waiting(wl, k, machine) for k in range(K_MAX + 1)}
    best_k = min(waits, key=lambda k: (abs(waits[k] - target), k))
    best_err = (abs(waits[best_k] - target), waits[best_k])
    return best_k, {"k": best_k, "recorded_waiting_ns": target, "fitted_waiting_ns": best_err[1]}
