"""What this machine offers a lab, checked before anything runs: each requirement says exactly
what is missing and why the lab needs it, so a lab that cannot run stops before it starts.

`facts()` are the settings a transcript is stamped with (kernel, THP mode, read_ahead_kb,
cgroup version of the memory controller, swap, page size). Everything is read under
OSLENS_SYSROOT (control.sysfs), so the tests describe machines we do not have."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from oslens import paths
from oslens.control import config, sysfs, zram

MEMORY_FS_TYPES = {"tmpfs", "ramfs"}  # their pages cannot be evicted without swap


@dataclass
class Check:
    name: str
    ok: bool
    detail: str      # what is there, or exactly what is missing and what to do
    blocking: bool = True


def _machine(root: Path) -> dict:
    return config.discover(root, probe=root == Path("/"))


def swap_total_kb(root: Path) -> int:
    for line in (sysfs.read(sysfs.under(root, "/proc/meminfo")) or "").splitlines():
        if line.startswith("SwapTotal:"):
            return int(line.split()[1])
    return 0


def _fs_type(path: Path, root: Path) -> str | None:
    """The filesystem type of the mount holding `path` (longest mount point prefix)."""
    best, fstype = "", None
    target = str(Path(path).resolve())
    for line in (sysfs.read(sysfs.under(root, "/proc/self/mounts")) or "").splitlines():
        fields = line.split()
        if len(fields) < 3:
            continue
        mnt = fields[1]
        if (target == mnt or target.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
            best, fstype = mnt, fields[2]
    return fstype


def block_device(path: Path, root: Path) -> str | None:
    """The block device (sysfs name, whole disk) holding `path`, or None (tmpfs, overlay...)."""
    try:
        dev = os.stat(path).st_dev
    except OSError:
        return None
    link = sysfs.under(root, f"/sys/dev/block/{os.major(dev)}:{os.minor(dev)}")
    try:
        real = Path(os.path.realpath(link))
    except OSError:
        return None
    if not real.exists():
        return None
    if (real / "partition").exists():
        real = real.parent
    return real.name


def read_ahead_kb(path: Path, root: Path) -> int | None:
    dev = block_device(path, root)
    if dev is None:
        return None
    return sysfs.read_int(sysfs.under(root, f"/sys/block/{dev}/queue/read_ahead_kb"))


def facts(data_dir: Path, root: Path | None = None) -> dict:
    """The settings that decide what the labs show, for stamping transcripts."""
    root = Path(root) if root is not None else sysfs.default_root()
    m = _machine(root)
    mem = m["cgroups"]["controllers"].get("memory", {})
    return {
        "kernel": m["sched"].get("kernel") or os.uname().release,
        "thp": m["thp"].get("current") if m["thp"].get("available") else "unavailable",
        "read_ahead_kb": read_ahead_kb(data_dir, root),
        "data_device": block_device(data_dir, root),
        "memory_cgroup": f"v{mem['version']}" if mem.get("available") else "none",
        "swap_kb": swap_total_kb(root),
        "page_size": os.sysconf("SC_PAGE_SIZE"),
        "cpus": len(m["sched"]["affinity"].get("cpus") or []),
    }


def stamp(f: dict) -> str:
    return (f"kernel {f['kernel']}, THP {f['thp']}, read_ahead_kb {f['read_ahead_kb']} "
            f"({f['data_device'] or 'no block device'}), memory cgroup {f['memory_cgroup']}, "
            f"swap {f['swap_kb'] // 1024} MiB, page {f['page_size']} B, {f['cpus']} CPUs")


# --- requirements ---------------------------------------------------------------------

def _root(m, _data, _root):
    ok = bool(m["user"].get("root"))  # from (fake) /proc/self/status, so tests describe users
    return ok, "running as root" if ok else ("not root: the lab creates a cgroup and changes its limits; "
                                              "run it with sudo")


def _controller(name):
    def check(m, _data, _root):
        c = m["cgroups"]["controllers"].get(name, {})
        if not c.get("available"):
            return False, (f"no {name} controller on cgroup v1 or v2 ({c.get('reason', 'not mounted')}); "
                           f"the lab caps its programs with it")
        if not c.get("allowed"):
            return False, f"the {name} controller (cgroup v{c['version']}) is there but not writable: {c.get('privilege')}"
        return True, f"{name} controller on cgroup v{c['version']} ({c['hierarchy']})"
    return check


def _compiler(_m, _data, _root):
    if paths.installed():
        return True, f"the lab programs came built with oslens ({paths.lab_programs()})"
    missing = [t for t in ("cc", "make") if shutil.which(t) is None]
    src = paths.lab_programs() / "Makefile"
    if missing:
        return False, f"no {' and no '.join(missing)} in PATH: the lab builds its C programs (apt-get install -y build-essential)"
    if not src.exists():
        return False, f"the lab programs' sources are missing ({src}); run from an oslens checkout"
    return True, "cc and make found"


def _disk(_m, data, root):
    fstype = _fs_type(data, root)
    if fstype in MEMORY_FS_TYPES:
        return False, (f"{data} is on {fstype}: its pages live in memory and cannot be paged out without swap; "
                       "run the lab from a directory on a disk (-o DIR)")
    return True, f"{data} is on {fstype or 'an unknown filesystem'}"


def _collector(_m, _data, _root):
    exe = paths.tool("oslens-collector")
    if not exe.exists():
        return False, f"the kernel collector is not built ({exe}); no kernel events: run 'make'"
    return True, "the kernel collector is built"


def _swap(_m, _data, root):
    kb = swap_total_kb(root)
    if kb <= 0:
        return False, "no swap is active (/proc/swaps is empty): anonymous pages cannot be paged out"
    return True, f"{kb // 1024} MiB of swap"


def _no_swap(_m, _data, root):
    kb = swap_total_kb(root)
    if kb > 0:
        return False, (f"{kb // 1024} MiB of swap is active: over the cap the kernel swaps instead of "
                       "killing; turn it off (swapoff -a) to see the OOM kill")
    return True, "no swap: over the cap the kernel can only kill"


def _readahead(_m, data, root):
    ra = read_ahead_kb(data, root)
    if ra is None:
        return False, f"{data} is not on a block device, so it has no read_ahead_kb"
    if ra == 0:
        return False, f"read_ahead_kb is 0 on {block_device(data, root)}: nothing is read ahead"
    return True, f"read_ahead_kb {ra} on {block_device(data, root)}"


def read_costs(data: Path, kb: int, singles: int = 16, windows: int = 3) -> tuple[float, float] | None:
    """(seconds per 4 KiB read, seconds per read_ahead_kb read) on the data directory's disk: a
    probe file of four windows is written there, synced, read back with O_DIRECT at scattered
    offsets (no page cache on this side; a VM host's cache still counts, as it does for the lab's
    matrix, which is just as freshly written) and removed. None where that cannot be done."""
    import mmap
    import random
    import statistics
    import tempfile
    import time

    window = kb * 1024
    try:
        fd, name = tempfile.mkstemp(prefix=".oslens-read-cost-", dir=data)
    except OSError:
        return None
    rng = random.Random(kb)
    try:
        chunk = b"\x5a" * (1 << 20)
        for _ in range(4 * window // len(chunk) or 1):
            os.write(fd, chunk)
        os.fsync(fd)
        size = os.fstat(fd).st_size
        os.close(fd)
        fd = os.open(name, os.O_RDONLY | os.O_DIRECT)
        buf = mmap.mmap(-1, window)  # page-aligned, as O_DIRECT wants

        def cost(n):
            offset = rng.randrange(0, max(size - n, 1)) // 4096 * 4096
            t0 = time.perf_counter()
            os.preadv(fd, [memoryview(buf)[:n]], offset)
            return time.perf_counter() - t0

        return statistics.median(cost(4096) for _ in range(singles)), statistics.median(cost(window) for _ in range(windows))
    except (OSError, AttributeError):
        return None
    finally:
        os.close(fd)
        os.unlink(name)


def read_ahead_verdict(one_s: float, window_s: float, window_pages: int) -> tuple[bool, str]:
    """Does read-ahead make lab 2's column walk slower here? Asynchronous read-ahead keeps a window
    ahead of the walk, which uses every page of it (docs/labs/02-read-ahead.md), so per page of
    the column it pays window_s / W instead of one_s."""
    per_page = window_s / window_pages
    text = (f"a 4 KiB read costs {one_s * 1e6:,.0f} µs, a {window_pages}-page read-ahead window "
            f"{window_s * 1e3:,.1f} ms, i.e. {per_page * 1e6:,.1f} µs per page the column walk uses")
    if per_page > one_s:
        return True, text + ": read-ahead costs more than it saves here, the column walk gets slower"
    return False, (text + f": {one_s / per_page:,.0f}× cheaper than reading pages one by one, so on this device the "
                   "column walk gets faster with read-ahead, not slower (its transfer time per page is "
                   "below its per-request latency; see the sheet)")


def _readahead_cost(_m, data, root):
    dev, ra = block_device(data, root), read_ahead_kb(data, root)
    if not dev or not ra:
        return False, "no block device with read-ahead under the data directory: nothing to measure"
    costs = read_costs(data, ra) if root == Path("/") else None
    if costs is None:
        return False, f"cannot time reads on {dev} (a probe file in {data}, O_DIRECT): the run will tell"
    return read_ahead_verdict(*costs, ra * 1024 // os.sysconf("SC_PAGE_SIZE"))


def _zram_swap(_m, _data, root):
    why = zram.missing(root)
    if why:
        return False, why + " (the variant swaps the capped program's pages to a compressed RAM disk)"
    return True, zram.describe(root)


def _thp(m, _data, _root):
    t = m["thp"]
    if not t.get("available"):
        return False, t.get("reason", "no transparent huge pages")
    return True, f"THP {t['current']} (defrag {t.get('defrag')})"


def _kernel_stacks(_m, _data, root):
    """Kernel stacks at tracepoints: an ftrace instance and the `stacktrace` event trigger."""
    tracefs = next((t for t in ("/sys/kernel/tracing", "/sys/kernel/debug/tracing")
                    if sysfs.under(root, t + "/instances").is_dir()), None)
    if tracefs is None:
        if "tracefs" in (sysfs.read(sysfs.under(root, "/proc/filesystems")) or "") and \
                sysfs.under(root, "/sys/kernel/tracing").is_dir():
            return True, "tracefs is not mounted: the lab mounts it on /sys/kernel/tracing for the run (unmounted after)"
        return False, "no tracefs in this kernel (/proc/filesystems): kernel stacks at tracepoints need it"
    if not sysfs.under(root, tracefs + "/events/kmem/mm_page_alloc/trigger").exists():
        return False, f"{tracefs} has no kmem:mm_page_alloc trigger file (a kernel without event triggers)"
    return True, f"ftrace instances and event stack triggers ({tracefs})"


def _two_cpus(m, _data, _root):
    cpus = m["sched"]["affinity"].get("cpus") or []
    if len(cpus) < 2:
        return False, f"{len(cpus)} CPU online: the lab compares one CPU with two"
    return True, f"{len(cpus)} CPUs online"


def _rr_timeslice(m, _data, _root):
    rr = m["sched"].get("sched_rr_timeslice_ms") or {}
    if not rr.get("available"):
        return False, f"{rr.get('reason', 'no sched_rr_timeslice_ms')}: the lab sets the round-robin quantum there"
    return True, f"sched_rr_timeslice_ms {rr['current']} ({rr['path']})"


def _eevdf_slice(m, _data, _root):
    sl = m["sched"].get("slice") or {}
    if not sl.get("available"):
        return False, f"{sl.get('reason', 'no per-task slice')}: the variant sets each spinner's slice there"
    return True, f"per-task slices ({sl.get('how', 'sched_setattr sched_runtime')})"


REQUIREMENTS = {
    "root": _root,
    "memory-cgroup": _controller("memory"),
    "cpu-cgroup": _controller("cpu"),
    "compiler": _compiler,
    "disk": _disk,
    "collector": _collector,
    "swap": _swap,
    "no-swap": _no_swap,
    "readahead": _readahead,
    "thp": _thp,
    "two-cpus": _two_cpus,
    "kernel-stacks": _kernel_stacks,
    "rr-timeslice": _rr_timeslice,
    "readahead-slower": _readahead_cost,
    "zram-swap": _zram_swap,
    "eevdf-slice": _eevdf_slice,
}


def preflight(lab, data_dir: Path, root: Path | None = None, optional: bool = True,
              variant: str | None = None) -> list[Check]:
    """optional=False: only what blocks the lab (for `lab list`; some optional checks measure)."""
    root = Path(root) if root is not None else sysfs.default_root()
    m = _machine(root)
    out = []
    for name in (*lab.requires_for(variant), *(lab.optional if optional else ())):
        ok, detail = REQUIREMENTS[name](m, Path(data_dir), root)
        out.append(Check(name, ok, detail, blocking=name not in lab.optional))
    return out


def blockers(checks: list[Check]) -> list[Check]:
    return [c for c in checks if c.blocking and not c.ok]
