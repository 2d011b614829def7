"""What a running program was doing when `oslens record -p` attached to it: each thread's name,
state, CPU and scheduling class, its open file descriptors, its cgroup and the cgroup's limits,
read from /proc at one CLOCK_MONOTONIC time (the trace's clock) and written to
`raw/attach-<pid>.json`, which the import turns into the `attach_*` tables; its memory maps go to
`raw/maps-<pid>-<ns>.txt` as the maps watcher writes them, so samples and functions symbolise."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

from oslens.capture.maps import MapsWatcher

# sched_setattr's policies (include/uapi/linux/sched.h)
POLICIES = {0: "SCHED_OTHER", 1: "SCHED_FIFO", 2: "SCHED_RR", 3: "SCHED_BATCH", 5: "SCHED_IDLE", 6: "SCHED_DEADLINE",
            7: "SCHED_EXT"}
# the inode of the initial PID namespace (include/linux/proc_ns.h, PROC_PID_INIT_INO)
PROC_PID_INIT_INO = 0xEFFFFFFC
# the cgroup files that limit a process, v2 then v1 (memory, CPU bandwidth and weight, tasks)
CGROUP_LIMITS = ("memory.max", "memory.high", "cpu.max", "cpu.weight", "pids.max", "cpuset.cpus.effective",
                 "memory.limit_in_bytes", "cpu.cfs_quota_us", "cpu.cfs_period_us", "cpu.shares")


def _read(path: str) -> str | None:
    try:
        with open(path) as f:
            return f.read()
    except OSError:
        return None


def _ticks_ns(ticks: int) -> int:
    return ticks * 1_000_000_000 // os.sysconf("SC_CLK_TCK")


def _monotonic_of_boot_ticks(ticks: int) -> int:
    """A /proc start time (clock ticks since boot, CLOCK_BOOTTIME) on CLOCK_MONOTONIC, to a tick."""
    offset = time.clock_gettime_ns(time.CLOCK_BOOTTIME) - time.monotonic_ns()  # time spent suspended
    return _ticks_ns(ticks) - offset


def thread_row(pid: int, tid: int) -> dict | None:
    """One thread from /proc/PID/task/TID/stat (fields after the name, `man 5 proc`); None when
    it ended meanwhile."""
    text = _read(f"/proc/{pid}/task/{tid}/stat")
    if text is None:
        return None
    name = text[text.index("(") + 1:text.rindex(")")]
    f = text[text.rindex(")") + 2:].split()  # f[0] is field 3 (state)
    policy = int(f[38]) if len(f) > 38 else 0
    return {"pid": pid, "tid": tid, "name": name, "state": f[0], "cpu": int(f[36]), "policy": POLICIES.get(policy, str(policy)),
            "nice": int(f[16]), "rt_priority": int(f[37]), "utime_ns": _ticks_ns(int(f[11])), "stime_ns": _ticks_ns(int(f[12])),
            "started_ns": _monotonic_of_boot_ticks(int(f[19]))}


def innermost(pid: int, tid: int | None = None, key: str = "NSpid:") -> int | None:
    """The task's number in its own PID namespace (the last of `NSpid:`/`NStgid:` in its
    status, what its app records carry); None when it ended meanwhile."""
    text = _read(f"/proc/{pid}/task/{tid}/status" if tid else f"/proc/{pid}/status") or ""
    for line in text.splitlines():
        if line.startswith(key):
            return int(line.split()[-1])
    return None


def sees_global_pids() -> bool:
    """Whether this /proc numbers tasks as the kernel does (oslens runs in the initial PID namespace)."""
    try:
        return os.stat("/proc/self/ns/pid").st_ino == PROC_PID_INIT_INO
    except OSError:
        return True


def own_namespace(pid: int) -> bool:
    """Whether `pid` lives in oslens's PID namespace (then /proc's numbers are its own)."""
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino == os.stat("/proc/self/ns/pid").st_ino
    except OSError:
        return True


def ns_ids(pid: int, tid: int, vpid: int | None = None, same: bool | None = None) -> tuple[int, int, int | None, int | None]:
    """(pid, tid) in the task's own PID namespace and the kernel's (None: not visible from here);
    `same`: the task is in oslens's namespace (no status to read: the numbers are /proc's)."""
    if same if same is not None else own_namespace(pid):
        vpid, vtid = pid, tid
    else:
        vpid, vtid = vpid or innermost(pid, key="NStgid:") or pid, innermost(pid, tid) or tid
    return (vpid, vtid, pid, tid) if sees_global_pids() else (vpid, vtid, None, None)


def threads(pid: int) -> list[dict]:
    """The threads of `pid`, named as its PID namespace names them (pid, tid), the kernel's
    numbers beside them (global_pid, global_tid)."""
    try:
        tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task"))
    except OSError:
        return []
    same = own_namespace(pid)  # then no thread's status need be read (a thousand threads attach in a second)
    out, vpid = [], None if same else innermost(pid, key="NStgid:")
    for t in tids:
        row = thread_row(pid, t)
        if row is not None:
            row["pid"], row["tid"], row["global_pid"], row["global_tid"] = ns_ids(pid, t, vpid, same)
            out.append(row)
    return out


def _fd_kind(target: str, path: str) -> str:
    """What a descriptor is: `file`, `dir`, `pipe`, `socket`, `char`, `block`, `fifo`, `anon`
    (an anon_inode: eventfd, epoll, timerfd, perf_event, bpf …) or `other`."""
    for prefix, kind in (("pipe:", "pipe"), ("socket:", "socket"), ("anon_inode:", "anon")):
        if target.startswith(prefix):
            return kind
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return "other"
    for test, kind in ((stat.S_ISREG, "file"), (stat.S_ISDIR, "dir"), (stat.S_ISCHR, "char"), (stat.S_ISBLK, "block"),
                       (stat.S_ISFIFO, "fifo"), (stat.S_ISSOCK, "socket")):
        if test(mode):
            return kind
    return "other"


def fds(pid: int) -> list[dict]:
    try:
        names = sorted(int(n) for n in os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return []
    out, vpid = [], pid if own_namespace(pid) else innermost(pid, key="NStgid:") or pid
    for n in names:
        path = f"/proc/{pid}/fd/{n}"
        try:
            target = os.readlink(path)
        except OSError:
            continue  # closed meanwhile
        pos = flags = None
        info = _read(f"/proc/{pid}/fdinfo/{n}") or ""
        for line in info.splitlines():
            key, _, value = line.partition(":")
            if key == "pos":
                pos = int(value)
            elif key == "flags":
                flags = int(value.strip(), 8)
        out.append({"pid": vpid, "fd": n, "kind": _fd_kind(target, path), "path": target, "pos": pos, "flags": flags})
    return out


def cgroup(pid: int, root: str = "/sys/fs/cgroup") -> dict:
    """The process's cgroup (v2's unified path, else each v1 hierarchy's) and the limits set there."""
    paths: dict[str, str] = {}
    for line in (_read(f"/proc/{pid}/cgroup") or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) == 3:
            paths[parts[1] or "unified"] = parts[2]
    limits: dict[str, str] = {}
    for controllers, rel in paths.items():
        base = Path(root) if controllers == "unified" else Path(root) / controllers.split(",")[0].removeprefix("name=")
        for name in CGROUP_LIMITS:
            value = _read(str(base / rel.lstrip("/") / name))
            if value is not None and name not in limits:
                limits[name] = value.strip()
    return {"paths": paths, "limits": limits}


def process(pid: int) -> dict:
    exe = None
    try:
        exe = os.readlink(f"/proc/{pid}/exe")
    except OSError:
        pass
    cmdline = (_read(f"/proc/{pid}/cmdline") or "").split("\0")
    vpid, _, gpid, _ = ns_ids(pid, pid)
    return {"pid": vpid, "global_pid": gpid, "exe": exe, "command": [c for c in cmdline if c], "cgroup": cgroup(pid)}


def dump(raw_dir: Path, pid: int) -> dict:
    """Reads the state of `pid` and its children now, writes `raw/attach-<pid>.json` and the
    maps; returns what it wrote."""
    ts = time.monotonic_ns()
    state = {"ts_ns": ts, "process": process(pid), "threads": threads(pid), "fds": fds(pid)}
    state["ts_end_ns"] = time.monotonic_ns()  # how long the reading took: the rows are of that span
    MapsWatcher(raw_dir, pid).snapshot()  # raw/maps-<pid>-<ns>.txt of the process and its children
    path = Path(raw_dir) / f"attach-{pid}.json"
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(state, indent=1))
    tmp.replace(path)
    return state
