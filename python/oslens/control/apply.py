"""Applying policies.

Per-task (the calling thread; they die with the task, nothing to restore): scheduling class,
slice, nice and real-time priority in one sched_setattr call, CPU affinity, and the THP
prctl. `apply_task(phase)` takes one phase of a resolved plan and returns (errno, bits).

Global (the whole machine; journaled before the change, restored after): the cgroup memory
and CPU caps in a cgroup `oslens-PID` made for the run, the THP mode, readahead and I/O scheduler per
device, and sched_rr_timeslice_ms. `apply_globals(plan_globals, journal, machine, root)`.

Policy bits (the `b` of an ADAPT trace record; the same in adapt.rs):
  bits 0-3 policy, bit 4 sched_setattr applied, bit 5 affinity applied, bit 6 THP prctl
  applied, bit 7 THP disabled, bits 8-15 nice + 20, bits 16-23 real-time priority,
  bits 24-55 slice in microseconds (0 = the kernel's default)."""

from __future__ import annotations

import os
from pathlib import Path

from oslens.control import kernel, sysfs
from oslens.control.config import own_cgroups, parse_mounts
from oslens.control.journal import Journal
from oslens.errors import OslensError

BIT_SCHED = 1 << 4
BIT_AFFINITY = 1 << 5
BIT_THP = 1 << 6
BIT_THP_DISABLED = 1 << 7


def policy_bits(phase: dict, sched_ok: bool, aff_ok: bool, thp_ok: bool, nice: int | None = None) -> int:
    bits = 0
    if phase.get("sched"):
        bits |= phase["policy"] & 0xF
        if sched_ok:
            bits |= BIT_SCHED
        n = phase.get("nice") if phase.get("nice") is not None else nice
        bits |= ((n or 0) + 20 & 0xFF) << 8
        bits |= (phase.get("priority", 0) & 0xFF) << 16
        bits |= ((phase.get("slice_ns", 0) // 1000) & 0xFFFFFFFF) << 24
    if aff_ok:
        bits |= BIT_AFFINITY
    if thp_ok:
        bits |= BIT_THP
        if phase.get("thp_disable"):
            bits |= BIT_THP_DISABLED
    return bits


def decode_bits(bits: int) -> dict:
    """The policy an ADAPT record's `b` describes (for reports)."""
    out = {"policy": kernel.POLICY_CLASS.get(bits & 0xF, str(bits & 0xF)),
           "sched_applied": bool(bits & BIT_SCHED), "affinity_applied": bool(bits & BIT_AFFINITY),
           "thp_applied": bool(bits & BIT_THP), "thp_disabled": bool(bits & BIT_THP_DISABLED),
           "nice": ((bits >> 8) & 0xFF) - 20, "priority": (bits >> 16) & 0xFF,
           "slice_us": (bits >> 24) & 0xFFFFFFFF}
    return out


def apply_task(phase: dict, tid: int = 0) -> tuple[int, int]:
    """Apply one resolved phase to a task (0 = the calling thread). Every part is tried;
    returns (first errno or 0, policy bits of what was applied)."""
    first = 0
    sched_ok = aff_ok = thp_ok = False
    nice_used = None
    if phase.get("sched"):
        nice = phase.get("nice")
        if nice is None:  # the plan does not control nice: keep the task's own
            try:
                nice = kernel.sched_getattr(tid).nice
            except OSError:
                nice = 0
        nice_used = nice
        err = kernel.sched_setattr(phase["policy"], nice=nice, priority=phase.get("priority", 0),
                                   runtime_ns=phase.get("slice_ns", 0), tid=tid)
        sched_ok = err == 0
        first = first or err
    if phase.get("affinity"):
        err = kernel.set_affinity(phase["affinity"], tid)
        aff_ok = err == 0
        first = first or err
    if phase.get("thp_disable") is not None:
        err = kernel.set_thp_disable(bool(phase["thp_disable"]))
        thp_ok = err == 0
        first = first or err
    return first, policy_bits(phase, sched_ok, aff_ok, thp_ok, nice_used)


# --- global settings ------------------------------------------------------------------

CGROUP_KNOBS = {"memory_max": "memory", "memory_high": "memory", "cpu_max": "cpu"}  # plan knob -> controller
CPU_PERIOD_US = 100_000


def cgroup_parent(root: Path, controller: str, knob: str) -> tuple[Path, int]:
    """(the directory the run's cgroup goes in, cgroup version) for one controller: nested
    under the cgroup oslens itself is in, so limits that already apply keep applying."""
    v1, v2 = parse_mounts(sysfs.read(sysfs.under(root, "/proc/self/mounts")) or "")
    mine = own_cgroups(root)
    if controller in v1:
        return sysfs.under(root, v1[controller] + (mine.get(controller) or "/")), 1
    if v2:
        ctrls = (sysfs.read(sysfs.under(root, f"{v2}/cgroup.controllers")) or "").split()
        if controller in ctrls:
            parent = sysfs.under(root, v2 + (mine.get("") or "/"))
            sub = (sysfs.read(parent / "cgroup.subtree_control") or "").split()
            if controller not in sub:
                raise OslensError(f"the {controller} controller is not enabled for children of {parent}; "
                                  f"enable it with: echo +{controller} > {parent}/cgroup.subtree_control", 1)
            return parent, 2
    raise OslensError(f"no {controller} cgroup controller on this machine; remove {knob} from the plan", 1)


def memory_cgroup_parent(root: Path) -> tuple[Path, int]:
    return cgroup_parent(root, "memory", "memory_max")


class GlobalState:
    """What apply_globals did: the cgroups the program must join, and a log of changes."""

    def __init__(self):
        self.cgroups: list[Path] = []       # every directory the program joins (one per v1 hierarchy)
        self.cgroup: Path | None = None     # the memory cgroup (for its usage at the end)
        self.cgroup_version = 0
        self.changes: list[dict] = []


def _limit_files(knob: str, value, version: int) -> list[tuple[str, str]]:
    if knob == "memory_max":
        return [("memory.limit_in_bytes" if version == 1 else "memory.max", str(value))]
    if knob == "memory_high":  # reclaim and throttle above it rather than kill (v1: only under pressure)
        return [("memory.soft_limit_in_bytes" if version == 1 else "memory.high", str(value))]
    quota = max(1000, int(round(float(value) * CPU_PERIOD_US)))
    if version == 1:
        return [("cpu.cfs_period_us", str(CPU_PERIOD_US)), ("cpu.cfs_quota_us", str(quota))]
    return [("cpu.max", f"{quota} {CPU_PERIOD_US}")]


def apply_globals(settings: dict, journal: Journal, root: Path | str = "/", pid: int | str | None = None) -> GlobalState:
    """pid names the run's cgroup oslens-PID (a string such as "123-soft" tells apart two
    cgroups of one run)."""
    root = Path(root)
    fake = root != Path("/")
    pid = pid if pid is not None else os.getpid()
    state = GlobalState()

    def change(path, value, what, bracketed=False):
        old = journal.set_file(path, str(value), what, bracketed)
        state.changes.append({"what": what, "path": str(path), "old": old, "new": str(value)})

    if "sched_rr_timeslice_ms" in settings:
        change(sysfs.under(root, "/proc/sys/kernel/sched_rr_timeslice_ms"), settings["sched_rr_timeslice_ms"],
               "sched_rr_timeslice_ms")
    if "thp" in settings:
        change(sysfs.under(root, "/sys/kernel/mm/transparent_hugepage/enabled"), settings["thp"], "thp", True)
    for dev, kb in sorted(settings.get("readahead_kb", {}).items()):
        change(sysfs.under(root, f"/sys/block/{dev}/queue/read_ahead_kb"), kb, f"readahead_kb.{dev}")
    for dev, sched in sorted(settings.get("io_scheduler", {}).items()):
        change(sysfs.under(root, f"/sys/block/{dev}/queue/scheduler"), sched, f"io_scheduler.{dev}", True)
    for knob, controller in CGROUP_KNOBS.items():
        if knob not in settings:
            continue
        parent, version = cgroup_parent(root, controller, knob)
        cg = parent / f"oslens-{pid}"
        if cg not in state.cgroups:  # on v2 one cgroup serves every controller
            journal.make_cgroup(cg, knob, plain_dir=fake)
            state.cgroups.append(cg)
        for name, value in _limit_files(knob, settings[knob], version):
            try:
                sysfs.write(cg / name, value, create=fake)
            except OSError as e:
                raise OslensError(f"cannot set {knob} ({cg / name}: {e.strerror}); check {knob} "
                                  "and that this kernel has the limit", 1) from e
            state.changes.append({"what": knob, "path": str(cg / name), "old": None, "new": value, "cgroup": str(cg)})
        if controller == "memory":
            state.cgroup, state.cgroup_version = cg, version
    return state


def join_cgroup(cg: Path, pid: int | None = None, create: bool = False) -> None:
    sysfs.write(cg / "cgroup.procs", str(pid if pid is not None else os.getpid()), create=create)


def cgroup_usage(cg: Path, version: int) -> dict:
    """Peak memory and limit hits of the run's cgroup (read before it is removed)."""
    if version == 1:
        return {"peak_bytes": sysfs.read_int(cg / "memory.max_usage_in_bytes"),
                "limit_hits": sysfs.read_int(cg / "memory.failcnt"),
                "oom_kills": _field(sysfs.read(cg / "memory.oom_control") or "", "oom_kill")}
    events = sysfs.read(cg / "memory.events") or ""
    hits = None
    for line in events.splitlines():
        k, _, v = line.partition(" ")
        if k == "max":
            hits = int(v)
    return {"peak_bytes": sysfs.read_int(cg / "memory.peak"), "limit_hits": hits, "oom_kills": _field(events, "oom_kill")}


def _field(text: str, key: str) -> int | None:
    for line in text.splitlines():
        k, _, v = line.partition(" ")
        if k == key and v.strip().isdigit():
            return int(v)
    return None
