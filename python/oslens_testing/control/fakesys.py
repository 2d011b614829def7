"""A fake kernel interface for tests: a temp dir laid out like / with the procfs and sysfs
files the control layer reads and writes, describing a machine we do not have (cgroup v2
with memory, sched_ext, cpufreq, an old kernel, an unprivileged user...)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT_STATUS = "Name:\tpython\nUid:\t0\t0\t0\t0\nCapEff:\t000001ffffffffff\n"
USER_STATUS = "Name:\tpython\nUid:\t65534\t65534\t65534\t65534\nCapEff:\t0000000000000000\n"
LIMITS = ("Limit                     Soft Limit           Hard Limit           Units\n"
          "Max nice priority         0                    0\n"
          "Max realtime priority     0                    0\n")


def _put(root: Path, path: str, text: str, mode: int = 0o644) -> Path:
    p = root / path.lstrip("/")
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    p.chmod(mode)
    return p


def make(root: Path, *, kernel: str = "6.18.0", cgroup: str = "v1", thp: bool = True,
         sched_ext: str | None = None, cpufreq: bool = False, root_user: bool = True,
         cpus: str = "0-3", devices=("vda", "loop0")) -> Path:
    """Lay out a fake machine under `root`. cgroup: 'v1' (memory on v1, v2 with hugetlb only,
    as on the project's VMs), 'v2' (memory on v2) or 'none'."""
    root = Path(root)
    _put(root, "/proc/sys/kernel/osrelease", kernel + "\n")
    _put(root, "/proc/sys/kernel/sched_rr_timeslice_ms", "100\n")
    _put(root, "/proc/self/status", ROOT_STATUS if root_user else USER_STATUS)
    _put(root, "/proc/self/limits", LIMITS)
    _put(root, "/sys/devices/system/cpu/online", cpus + "\n")
    mounts = []
    if cgroup == "v1":
        for ctrl in ("cpu", "cpuset", "memory", "blkio"):
            mounts.append(f"cgroup /sys/fs/cgroup/{ctrl} cgroup rw,relatime,{ctrl} 0 0")
            (root / f"sys/fs/cgroup/{ctrl}/batch").mkdir(parents=True, exist_ok=True)
        mounts.append("cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0")
        _put(root, "/sys/fs/cgroup/unified/cgroup.controllers", "hugetlb\n")
        _put(root, "/proc/self/cgroup", "4:memory:/batch\n3:cpuset:/\n2:blkio:/\n1:cpu:/\n0::/\n")
    elif cgroup == "v2":
        mounts.append("cgroup2 /sys/fs/cgroup cgroup2 rw,nosuid,nodev,noexec,relatime 0 0")
        _put(root, "/sys/fs/cgroup/cgroup.controllers", "cpuset cpu io memory hugetlb pids\n")
        _put(root, "/sys/fs/cgroup/user.slice/cgroup.subtree_control", "cpu memory\n")
        _put(root, "/proc/self/cgroup", "0::/user.slice\n")
    else:
        _put(root, "/proc/self/cgroup", "")
    _put(root, "/proc/self/mounts", "\n".join(["proc /proc proc rw 0 0", *mounts]) + "\n")
    if thp:
        _put(root, "/sys/kernel/mm/transparent_hugepage/enabled", "always [madvise] never\n")
        _put(root, "/sys/kernel/mm/transparent_hugepage/defrag", "always defer defer+madvise [madvise] never\n")
    if sched_ext is not None:
        _put(root, "/sys/kernel/sched_ext/state", sched_ext + "\n")
        if sched_ext == "enabled":
            _put(root, "/sys/kernel/sched_ext/root/ops", "scx_simple\n")
    for n in range(4 if cpus == "0-3" else 1):
        (root / f"sys/devices/system/cpu/cpu{n}").mkdir(parents=True, exist_ok=True)
        if cpufreq:
            _put(root, f"/sys/devices/system/cpu/cpu{n}/cpufreq/scaling_governor", "schedutil\n")
            _put(root, f"/sys/devices/system/cpu/cpu{n}/cpufreq/scaling_available_governors",
                 "performance powersave schedutil\n")
            _put(root, f"/sys/devices/system/cpu/cpu{n}/cpufreq/scaling_driver", "intel_pstate\n")
    for dev in devices:
        _put(root, f"/sys/block/{dev}/size", "0\n" if dev.startswith("loop") else "41943040\n")
        _put(root, f"/sys/block/{dev}/queue/scheduler", "[none] mq-deadline kyber bfq\n"
             if dev.startswith("loop") else "none [mq-deadline] kyber bfq\n")
        _put(root, f"/sys/block/{dev}/queue/read_ahead_kb", "128\n")
    return root


def memory_cap(root: Path, limit: int | None, usage: int, cache: int) -> Path:
    """Caps the fake machine's memory cgroup (laid out by `make`) at `limit` bytes (None: "max"),
    `usage` bytes charged, `cache` of them file cache; returns the cgroup's folder. v1 writes
    memory.limit_in_bytes / usage_in_bytes and total_*_file, v2 memory.max / current and *_file."""
    root = Path(root)
    v1 = (root / "sys/fs/cgroup/memory/batch").is_dir()
    folder = root / ("sys/fs/cgroup/memory/batch" if v1 else "sys/fs/cgroup/user.slice")
    files = ("memory.limit_in_bytes", "memory.usage_in_bytes") if v1 else ("memory.max", "memory.current")
    keys = ("total_inactive_file", "total_active_file") if v1 else ("inactive_file", "active_file")
    _put(root, str(folder.relative_to(root) / files[0]), f"{'max' if limit is None else limit}\n")
    _put(root, str(folder.relative_to(root) / files[1]), f"{usage}\n")
    _put(root, str(folder.relative_to(root) / "memory.stat"), f"anon {usage - cache}\n{keys[0]} {cache // 2}\n"
                                                                f"{keys[1]} {cache - cache // 2}\n")
    return folder


def read(root: Path, path: str) -> str:
    return (Path(root) / path.lstrip("/")).read_text().strip()




def journal_then_sigkill(state: Path, calls: list[str], journal_args: str = "") -> int:
    """What a crash leaves: a child process opens `journal.Journal(state<journal_args>)`, makes
    `calls` on it (Python source, e.g. "swap_on('/dev/zram0', 'swap')") and is SIGKILLed before
    it restores anything. Returns the child's return code."""
    code = ("import os,signal; from oslens.control import journal; from pathlib import Path\n"
            f"j = journal.Journal(Path({str(state)!r}){journal_args})\n"
            + "".join(f"j.{c}\n" for c in calls) + "os.kill(os.getpid(), signal.SIGKILL)\n")
    package_parent = Path(__file__).resolve().parents[2]
    return subprocess.run([sys.executable, "-c", code], env=dict(os.environ, PYTHONPATH=str(package_parent))).returncode
