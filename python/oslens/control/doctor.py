"""`oslens doctor`'s checks: what this machine and this user can record and change, each missing
part with its one-line fix (issue 33). Every check reads files under `root` (procfs and sysfs as
the kernel lays them out), so a fake tree describes a machine we do not have; the policies come
from the configuration browser (config.discover), the recording side is read here.

    checks(root) -> [{"name", "ok", "detail", "fix", "for"}]
"""

from __future__ import annotations

import ctypes.util
from pathlib import Path

from oslens.control import config
from oslens.control.sysfs import read, read_int, under

# /proc/self/status CapEff bits (linux/capability.h)
CAPS = {"CAP_SYS_PTRACE": 19, "CAP_SYS_ADMIN": 21, "CAP_SYS_NICE": 23, "CAP_PERFMON": 38, "CAP_BPF": 39}


def _caps(root: Path) -> set[str]:
    bits = 0
    for line in (read(under(root, "/proc/self/status")) or "").splitlines():
        if line.startswith("CapEff:"):
            bits = int(line.split()[1], 16)
    return {name for name, bit in CAPS.items() if bits >> bit & 1}


def check_result(name: str, ok: bool, detail: str, fix: str, used_for: str) -> dict:
    return {"name": name, "ok": bool(ok), "detail": detail, "fix": "" if ok else fix, "for": used_for}


def clock_verdict(row: dict) -> dict:
    """The clock check from analysis.clock_agreement's row: agreed when one offset fits every
    call and zero is inside its bounds."""
    lo, hi = row["offset_low_ns"], row["offset_high_ns"]
    agreed = row["calls"] > 0 and lo is not None and lo <= 0 <= hi
    if row["calls"] == 0:
        detail = "the probe's calls were not recorded"
    elif lo is None:
        detail = f"no single offset fits: {row['inside']} of {row['calls']} calls inside their brackets"
    else:
        detail = (f"offset of the kernel's clock from the app's within [{lo}, {hi}] ns over {row['calls']} calls "
                  f"(median {row['offset_median_ns']:.0f} ns)")
    return check_result("clocks agree", agreed, detail,
                        "record with OSLENS_CLOCK=monotonic (both sides then read CLOCK_MONOTONIC)",
                        "one timeline for app and kernel events")


def _mounted(root: Path, fstype: str) -> str | None:
    for line in (read(under(root, "/proc/self/mounts")) or "").splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[2] == fstype:
            return parts[1]
    return None


def _recording(root: Path, caps: set[str]) -> list[dict]:
    tracing = bool(caps & {"CAP_PERFMON", "CAP_SYS_ADMIN"})
    paranoid = read_int(under(root, "/proc/sys/kernel/perf_event_paranoid"))
    unpriv_bpf = read_int(under(root, "/proc/sys/kernel/unprivileged_bpf_disabled"))
    tracefs = _mounted(root, "tracefs")
    btf = under(root, "/sys/kernel/btf/vmlinux").exists()
    return [
        check_result("kernel tracepoints", tracing or (paranoid is not None and paranoid <= -1),
               f"perf_event_paranoid {paranoid}; {'CAP_PERFMON or CAP_SYS_ADMIN held' if tracing else 'no CAP_PERFMON'}",
               "run as root, or 'sysctl kernel.perf_event_paranoid=-1', or give the user CAP_PERFMON",
               "the kernel side of a recording (switches, syscalls, faults)"),
        check_result("tracefs", tracefs is not None or "CAP_SYS_ADMIN" in caps,
               f"mounted at {tracefs}" if tracefs else ("not mounted; the collector mounts it in its own namespace"
                                                        if "CAP_SYS_ADMIN" in caps else "not mounted"),
               "run as root once, or 'mount -t tracefs nodev /sys/kernel/tracing'",
               "tracepoint ids and field layouts"),
        check_result("eBPF", bool(caps & {"CAP_BPF", "CAP_SYS_ADMIN"}) or unpriv_bpf == 0,
               f"unprivileged_bpf_disabled {unpriv_bpf}; {'CAP_BPF held' if caps & {'CAP_BPF', 'CAP_SYS_ADMIN'} else 'no CAP_BPF'}",
               "run as root, or give the user CAP_BPF and CAP_PERFMON",
               "the cheap tier of kernel tracing (filters the traced tree in the kernel)"),
        _ptrace(root, caps),
        check_result("BTF", btf, "/sys/kernel/btf/vmlinux " + ("present" if btf else "missing"),
               "a kernel with CONFIG_DEBUG_INFO_BTF=y", "the eBPF programs (CO-RE)"),
        check_result("libbpf", ctypes.util.find_library("bpf") is not None, "libbpf.so " + (
            "found" if ctypes.util.find_library("bpf") else "not found"), "apt-get install libbpf1",
               "loading the eBPF programs (else perf_event_open is used)"),
    ]


def _ptrace(root: Path, caps: set[str]) -> dict:
    """Yama's ptrace scope: `record -p` wakes a program's dormant instruments through
    /proc/PID/mem, which needs ptrace access to it (kernel events need only the tracing checks)."""
    scope = read_int(under(root, "/proc/sys/kernel/yama/ptrace_scope"))
    ok = scope is None or scope == 0 or (scope < 3 and "CAP_SYS_PTRACE" in caps)
    detail = ("no Yama" if scope is None else f"ptrace_scope {scope}") + (
        "; CAP_SYS_PTRACE held" if "CAP_SYS_PTRACE" in caps else "")
    fix = ("'sysctl kernel.yama.ptrace_scope=1' (or 0) and run as root or with CAP_SYS_PTRACE" if scope == 3 else
           "run as root or with CAP_SYS_PTRACE, or 'sysctl kernel.yama.ptrace_scope=0'")
    return check_result("ptrace access", ok, detail, fix, "waking a running program's instruments (record -p)")


def _clock(root: Path) -> list[dict]:
    flags = set()
    for line in (read(under(root, "/proc/cpuinfo")) or "").splitlines():
        if line.startswith("flags"):
            flags = set(line.split(":", 1)[1].split())
            break
    invariant = {"constant_tsc", "nonstop_tsc"} <= flags
    vm = "hypervisor" in flags
    container = any(under(root, p).exists() for p in ("/.dockerenv", "/run/.containerenv"))
    where = ("a container" if container else "") + (" in " if container and vm else "") + ("a VM" if vm else "")
    return [
        check_result("invariant TSC", invariant, "constant_tsc and nonstop_tsc" if invariant else "the TSC is not invariant",
               "none needed: the recorder falls back to CLOCK_MONOTONIC (about 20 ns a record more)",
               "the recorder's clock (one rdtsc a record)"),
        {"name": "machine", "ok": True, "detail": where or "bare metal, no container detected", "fix": "",
         "for": "reading the numbers (a VM's steal time is in the cross-check)"},
    ]


def _control(root: Path) -> list[dict]:
    found = config.discover(root)
    sched, cgroups, thp = found["sched"], found["cgroups"]["controllers"], found["thp"]
    out = [
        check_result("EEVDF slice", sched["slice"].get("available", False), sched["slice"].get("reason", "sched_attr.sched_runtime"),
               "Linux 6.6 or later", "per-task time slices (plans: slice_us)"),
        check_result("real-time classes", sched["classes"]["fifo"]["allowed"],
                     f"SCHED_FIFO/RR need {sched['classes']['fifo'].get('privilege', 'CAP_SYS_NICE')}",
                     "run as root, or give the user CAP_SYS_NICE (or an RLIMIT_RTPRIO above 0)",
                     "SCHED_FIFO/RR in plans, what-if validation and the scheduling labs"),
        check_result("sched_ext", sched["classes"]["ext"]["available"], sched["classes"]["ext"].get("reason", "built"),
               "a kernel with CONFIG_SCHED_CLASS_EXT=y", "the ext scheduling class in plans"),
        check_result("time namespaces", under(root, "/proc/self/ns/time").exists(),
               "/proc/self/ns/time " + ("present" if under(root, "/proc/self/ns/time").exists() else "missing"),
               "a kernel with CONFIG_TIME_NS=y", "per-node clocks in the multi-node clock tests"),
        check_result("THP", thp["available"], f"mode {thp.get('current')}" if thp["available"] else thp.get("reason", ""),
               "a kernel with CONFIG_TRANSPARENT_HUGEPAGE=y", "the THP knob in plans and the page-fault labs"),
    ]
    for ctrl in ("memory", "cpu"):
        c = cgroups[ctrl]
        detail = f"cgroup v{c['version']} at {c['hierarchy']}" if c["available"] else c.get("reason", "")
        fix = (f"run as root (needs {c['privilege']})" if c["available"] else
               f"mount the {ctrl} controller (v1) or enable it in cgroup.subtree_control (v2), as root")
        out.append(check_result(f"cgroup {ctrl} controller", c["available"] and c["allowed"], detail, fix,
                                f"{ctrl} caps in plans and labs"))
    return out


def checks(root: Path | str | None = None) -> list[dict]:
    """Every check, recording side first."""
    root = Path(root) if root is not None else Path("/")
    caps = _caps(root)
    return [*_recording(root, caps), *_clock(root), *_control(root)]
