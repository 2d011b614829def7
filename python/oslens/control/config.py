"""What this machine offers for OS policy control, the current settings, and the privilege
each knob needs (Kohr et al. 1994, section 7: first see which configurations are valid).

`discover(root)` reads only files under `root` (procfs/sysfs as the kernel lays them out);
with `probe=True` (the real machine) it also asks the kernel about the calling process
(sched_getattr, affinity, nice). Absent features are reported with a reason, never raised."""

from __future__ import annotations

import os
from pathlib import Path

from oslens.control import kernel
from oslens.control.sysfs import bracketed, default_root, parse_cpu_list, read, read_int, under

CLASS_ORDER = ["other", "batch", "idle", "fifo", "rr", "deadline", "ext"]

CAP_NAMES = {kernel.CAP_SYS_ADMIN: "CAP_SYS_ADMIN", kernel.CAP_SYS_NICE: "CAP_SYS_NICE",
             kernel.CAP_SYS_RESOURCE: "CAP_SYS_RESOURCE"}

ROOT_WRITE = "root (write access to {path})"


def kernel_version(text: str | None) -> tuple[int, int] | None:
    if not text:
        return None
    parts = text.split(".")
    try:
        return int(parts[0]), int("".join(ch for ch in parts[1] if ch.isdigit()) or 0)
    except (ValueError, IndexError):
        return None


def _limits(root: Path) -> dict[str, int | None]:
    """Soft limits from /proc/self/limits: nice and rtprio (None = unlimited/unknown)."""
    out: dict[str, int | None] = {"nice": 0, "rtprio": 0}
    text = read(under(root, "/proc/self/limits"))
    if not text:
        return out
    for line in text.splitlines():
        low = line.lower()
        for key, label in (("nice", "max nice priority"), ("rtprio", "max realtime priority")):
            if low.startswith(label):
                soft = line[len(label):].split()[0]
                out[key] = None if soft == "unlimited" else int(soft)
    return out


def user_info(root: Path) -> dict:
    caps = 0
    uid = os.getuid()
    status = read(under(root, "/proc/self/status")) or ""
    for line in status.splitlines():
        if line.startswith("CapEff:"):
            caps = int(line.split()[1], 16)
        elif line.startswith("Uid:"):
            uid = int(line.split()[2])  # effective uid
    names = [name for bit, name in CAP_NAMES.items() if caps & (1 << bit)]
    limits = _limits(root)
    return {"uid": uid, "root": uid == 0, "capabilities": sorted(names),
            "rlimit_nice": limits["nice"], "rlimit_rtprio": limits["rtprio"]}


def _has_cap(user: dict, name: str) -> bool:
    return name in user["capabilities"]


def _writable(path: Path, user: dict) -> bool:
    """Whether `user` (from /proc/self/status under the root) may write `path`: decided
    from the mode bits, so a fake tree can describe an unprivileged user."""
    try:
        st = path.stat()
    except OSError:
        return False
    if user["root"]:
        return True
    if st.st_uid == user["uid"]:
        return bool(st.st_mode & 0o200)
    if st.st_gid in os.getgroups() and user["uid"] == os.geteuid():
        return bool(st.st_mode & 0o020)
    return bool(st.st_mode & 0o002)


def _sched(root: Path, user: dict, probe: bool) -> dict:
    release = read(under(root, "/proc/sys/kernel/osrelease"))
    version = kernel_version(release)
    ext_state = read(under(root, "/sys/kernel/sched_ext/state"))
    ext_ops = read(under(root, "/sys/kernel/sched_ext/root/ops"))
    current = None
    if probe:
        try:
            current = kernel.sched_getattr(0)
        except OSError:
            current = None
    nice_ok = _has_cap(user, "CAP_SYS_NICE")
    rt_ok = nice_ok or (user["rlimit_rtprio"] is None or user["rlimit_rtprio"] > 0)
    classes = {}
    for name in CLASS_ORDER:
        entry: dict = {"available": True, "privilege": "none", "allowed": True}
        if name in ("fifo", "rr"):
            entry.update(privilege="CAP_SYS_NICE or RLIMIT_RTPRIO > 0", allowed=rt_ok, priority_range=[1, 99])
        elif name == "deadline":
            entry.update(privilege="CAP_SYS_NICE (root), and admission control", allowed=nice_ok,
                         in_plans=False)
        elif name == "idle":
            entry["note"] = "leaving idle needs nice within RLIMIT_NICE or CAP_SYS_NICE"
        elif name == "ext":
            if ext_state is None:
                entry.update(available=False, allowed=False,
                             reason="sched_ext is not built into this kernel (no /sys/kernel/sched_ext)")
            else:
                entry.update(state=ext_state, scheduler=ext_ops or None)
                if ext_state != "enabled":
                    entry["note"] = "no BPF scheduler is loaded: SCHED_EXT tasks run as SCHED_OTHER"
        if current is not None:
            entry["current"] = current.cls == name
        classes[name] = entry

    slice_ok = version is not None and version >= kernel.SLICE_MIN_KERNEL
    slice_info: dict = {
        "available": slice_ok, "privilege": "none", "allowed": slice_ok,
        "min_ms": kernel.SLICE_MIN_NS / 1e6, "max_ms": kernel.SLICE_MAX_NS / 1e6,
        "applies_to": ["other", "batch", "idle"],
        "how": "sched_setattr(sched_runtime) on a fair-class task (EEVDF custom slice)",
    }
    if not slice_ok:
        slice_info["reason"] = (f"kernel {release or 'unknown'} is older than 6.12: "
                                "no per-task slice (sched_runtime is ignored for fair classes)")
    base = read_int(under(root, "/sys/kernel/debug/sched/base_slice_ns"))
    if base:
        slice_info["default_ms"] = base / 1e6
    if current is not None and current.cls in ("other", "batch", "idle") and slice_ok:
        slice_info["current_ms"] = current.runtime_ns / 1e6

    rr_path = under(root, "/proc/sys/kernel/sched_rr_timeslice_ms")
    rr_value = read_int(rr_path)
    rr = {"available": rr_value is not None, "current": rr_value, "path": "/proc/sys/kernel/sched_rr_timeslice_ms",
          "privilege": "root (global sysctl)", "allowed": _writable(rr_path, user), "scope": "global"}
    if rr_value is None:
        rr["reason"] = "no /proc/sys/kernel/sched_rr_timeslice_ms"

    nice = {"available": True, "range": [-20, 19], "privilege": "raising: none; lowering: CAP_SYS_NICE or RLIMIT_NICE",
            "allowed": True, "rlimit_nice": user["rlimit_nice"], "can_lower": nice_ok or (user["rlimit_nice"] or 0) > 20}
    if probe:
        nice["current"] = os.getpriority(os.PRIO_PROCESS, 0)

    online_text = read(under(root, "/sys/devices/system/cpu/online"))
    try:
        online = parse_cpu_list(online_text) if online_text else []
    except ValueError:
        online = []
    if not online and probe:
        online = sorted(os.sched_getaffinity(0))
    affinity = {"available": bool(online), "cpus": online, "privilege": "none", "allowed": True}
    if probe:
        affinity["current"] = sorted(os.sched_getaffinity(0))

    return {"kernel": release, "classes": classes, "slice": slice_info, "sched_rr_timeslice_ms": rr,
            "nice": nice, "affinity": affinity}


def parse_mounts(text: str) -> tuple[dict[str, str], str | None]:
    """(v1 controller -> mountpoint, v2 mountpoint) from /proc/self/mounts."""
    v1: dict[str, str] = {}
    v2 = None
    for line in text.splitlines():
        fields = line.split()
        if len(fields) < 4:
            continue
        _dev, mnt, fstype, opts = fields[:4]
        if fstype == "cgroup2":
            v2 = v2 or mnt
        elif fstype == "cgroup":
            for opt in opts.split(","):
                if opt in ("rw", "ro", "relatime", "noatime", "nosuid", "nodev", "noexec") or "=" in opt:
                    continue
                v1.setdefault(opt, mnt)
    return v1, v2


def own_cgroups(root: Path) -> dict[str, str]:
    """controller -> the calling process's cgroup path ('' names the v2 entry)."""
    out: dict[str, str] = {}
    for line in (read(under(root, "/proc/self/cgroup")) or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        _hier, ctrls, path = parts
        if not ctrls:
            out[""] = path
        for c in ctrls.split(","):
            out[c] = path
    return out


def _cgroups(root: Path, user: dict) -> dict:
    v1, v2 = parse_mounts(read(under(root, "/proc/self/mounts")) or "")
    mine = own_cgroups(root)
    v2_ctrls: list[str] = []
    if v2:
        v2_ctrls = (read(under(root, f"{v2}/cgroup.controllers")) or "").split()
    info: dict = {
        "v1": {c: {"mount": m, "cgroup": mine.get(c)} for c, m in sorted(v1.items())},
        "v2": {"mount": v2, "controllers": v2_ctrls, "cgroup": mine.get("")} if v2 else None,
    }
    controllers = {}
    for ctrl in ("memory", "cpu", "cpuset", "io"):
        v1_name = "blkio" if ctrl == "io" else ctrl
        if v1_name in v1:
            parent = under(root, v1[v1_name] + (mine.get(v1_name) or "/"))
            controllers[ctrl] = {"available": True, "version": 1, "hierarchy": v1[v1_name],
                                 "privilege": ROOT_WRITE.format(path="/" + parent.relative_to(root).as_posix()),
                                 "allowed": _writable(parent, user)}
        elif ctrl in v2_ctrls:
            parent = under(root, v2 + (mine.get("") or "/"))
            controllers[ctrl] = {"available": True, "version": 2, "hierarchy": v2,
                                 "privilege": ROOT_WRITE.format(path="/" + parent.relative_to(root).as_posix()),
                                 "allowed": _writable(parent, user)}
        else:
            controllers[ctrl] = {"available": False, "allowed": False,
                                 "reason": f"no {ctrl} controller on the cgroup v1 or v2 hierarchy"}
    info["controllers"] = controllers
    info["plan_knobs"] = {"memory_max": "memory", "cpu_max": "cpu"}
    return info


def _thp(root: Path, user: dict) -> dict:
    base = under(root, "/sys/kernel/mm/transparent_hugepage")
    enabled = base / "enabled"
    if not enabled.exists():
        return {"available": False, "allowed": False,
                "reason": "no /sys/kernel/mm/transparent_hugepage (THP not built)"}
    modes, current = bracketed(read(enabled))
    dmodes, dcurrent = bracketed(read(base / "defrag"))
    return {"available": True, "modes": modes, "current": current,
            "defrag_modes": dmodes, "defrag": dcurrent,
            "privilege": "root (global)", "allowed": _writable(enabled, user), "scope": "global",
            "per_task": {"how": "prctl(PR_SET_THP_DISABLE)", "privilege": "none"}}


def _block(root: Path, user: dict) -> list[dict]:
    out = []
    block = under(root, "/sys/block")
    try:
        names = sorted(os.listdir(block))
    except OSError:
        return out
    for name in names:
        queue = block / name / "queue"
        schedulers, current = bracketed(read(queue / "scheduler"))
        ra = read_int(queue / "read_ahead_kb")
        size = read_int(block / name / "size")
        entry = {"device": name, "schedulers": schedulers, "scheduler": current,
                 "read_ahead_kb": ra, "size_sectors": size,
                 "privilege": "root (global, per device)",
                 "allowed": _writable(queue / "read_ahead_kb", user)}
        if not schedulers:
            entry["scheduler_reason"] = "this device has no I/O scheduler"
        out.append(entry)
    return out


def _cpufreq(root: Path, user: dict) -> dict:
    cpu_dir = under(root, "/sys/devices/system/cpu")
    policies = []
    try:
        names = sorted(n for n in os.listdir(cpu_dir) if n.startswith("cpu") and n[3:].isdigit())
    except OSError:
        names = []
    for name in names:
        freq = cpu_dir / name / "cpufreq"
        gov = read(freq / "scaling_governor")
        if gov is None:
            continue
        policies.append({"cpu": int(name[3:]), "governor": gov,
                         "governors": (read(freq / "scaling_available_governors") or "").split(),
                         "driver": read(freq / "scaling_driver")})
    if not policies:
        return {"available": False, "allowed": False,
                "reason": "no cpufreq driver (no /sys/devices/system/cpu/cpu*/cpufreq): the hypervisor or firmware controls the frequency"}
    return {"available": True, "cpus": policies, "privilege": "root (global)",
            "allowed": _writable(cpu_dir / f"cpu{policies[0]['cpu']}" / "cpufreq" / "scaling_governor", user),
            "scope": "global", "in_plans": False}


def discover(root: Path | str | None = None, probe: bool | None = None) -> dict:
    """Everything `oslens config` shows, as one JSON-able dict."""
    root = Path(root) if root is not None else default_root()
    if probe is None:
        probe = root == Path("/")
    user = user_info(root)
    return {
        "root": str(root),
        "user": user,
        "sched": _sched(root, user, probe),
        "cgroups": _cgroups(root, user),
        "thp": _thp(root, user),
        "block": _block(root, user),
        "cpufreq": _cpufreq(root, user),
    }
