"""Swap on a zram device for a run (lab 1's zram variant, docs/labs.md): a free zram device
given a compressor and a size, formatted with mkswap and turned on with swapon, every step
journaled before it is made (journal.py: restored by swapoff, then the device's `reset`, which
puts its disksize back to 0 and its compressor to the kernel's default).

Only devices that already exist are used: reading /sys/class/zram-control/hot_add creates a new
one, so this module never touches it. Everything is read under a root (control.sysfs), so tests
describe machines without zram with fake trees."""

from __future__ import annotations

import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

from oslens.control import sysfs
from oslens.control.journal import Journal
from oslens.errors import OslensError

TOOLS = ("mkswap", "swapon", "swapoff")  # util-linux (mkswap) and mount (swapon, swapoff) on Debian
PREFERRED = ("lz4", "lzo-rle", "lzo", "zstd")  # fast first: the lab measures paging, not compression
PRIORITY = 32767  # above any swap the machine already has, so the run's pages go to this device
SEARCH = "/usr/sbin:/sbin:/usr/bin:/bin"  # where the tools live, whatever PATH a non-login shell has


@dataclass
class Device:
    name: str        # zram0
    sysdir: Path     # /sys/block/zram0 (under the root)
    node: Path       # /dev/zram0


def active_swaps(root: Path) -> list[str]:
    """The devices and files /proc/swaps lists."""
    lines = (sysfs.read(sysfs.under(root, "/proc/swaps")) or "").splitlines()[1:]
    return [line.split()[0] for line in lines if line.split()]


def devices(root: Path) -> list[Path]:
    block = sysfs.under(root, "/sys/block")
    try:
        found = [p for p in block.iterdir() if re.fullmatch(r"zram\d+", p.name)]
    except OSError:
        return []
    return sorted(found, key=lambda p: int(p.name[4:]))


def free_device(root: Path) -> Device | None:
    """A zram device nobody uses: not initialised (disksize 0), not swap, not mounted."""
    swaps = set(active_swaps(root))
    mounts = sysfs.read(sysfs.under(root, "/proc/self/mounts")) or ""
    for d in devices(root):
        node = Path("/dev") / d.name
        if sysfs.read_int(d / "initstate") != 0 or str(node) in swaps or f"{node} " in mounts:
            continue
        return Device(d.name, d, node)
    return None


def algorithms(dev: Device) -> tuple[list[str], str | None]:
    """(the compressors the device offers, the current one)."""
    names = (sysfs.read(dev.sysdir / "comp_algorithm") or "").split()
    current = next((n.strip("[]") for n in names if n.startswith("[")), None)
    return [n.strip("[]") for n in names], current


def missing(root: Path) -> str | None:
    """None when swap on zram can be set up here, else exactly what is missing and why."""
    if not devices(root):
        control = sysfs.under(root, "/sys/class/zram-control").exists()
        return ("no zram device (/sys/block/zram*): " + (
            "the zram module is loaded but has no device; add one with "
            "'cat /sys/class/zram-control/hot_add'" if control else
            "this kernel has no zram (CONFIG_ZRAM), or the module is not loaded: modprobe zram"))
    if free_device(root) is None:
        names = ", ".join(d.name for d in devices(root))
        return f"every zram device ({names}) is in use (initialised, swap or mounted); free one with swapoff and 'echo 1 > /sys/block/zramN/reset'"
    tools = [t for t in TOOLS if shutil.which(t, path=SEARCH) is None]
    if tools:
        return f"no {', '.join(tools)} on this machine: apt-get install -y util-linux mount"
    return None


def describe(root: Path) -> str:
    dev = free_device(root)
    algs, current = algorithms(dev)
    return f"{dev.name} free (compressors {' '.join(algs)}, now {current}); mkswap, swapon, swapoff found"


def _run(argv: list[str], what: str) -> None:
    proc = subprocess.run(argv, capture_output=True, text=True)
    if proc.returncode != 0:
        reason = (proc.stderr.strip().splitlines() or [f"exit {proc.returncode}"])[-1]
        raise OslensError(f"cannot {what} ({reason})", 1)


def swap_on_zram(journal: Journal, size_bytes: int, root: Path | None = None) -> dict:
    """Swap of `size_bytes` on a free zram device, journaled step by step. Returns what was set
    (device, compressor, size) for the run's transcript."""
    root = Path(root) if root is not None else sysfs.default_root()
    why = missing(root)
    if why:
        raise OslensError(f"cannot set up swap on zram: {why}", 1)
    dev = free_device(root)
    algs, current = algorithms(dev)
    alg = next((a for a in PREFERRED if a in algs), current)
    if alg and alg != current:
        journal.set_file(dev.sysdir / "comp_algorithm", alg, "zram_compressor", bracketed=True)
    journal.zram_device(dev.sysdir, dev.node, "zram")
    try:
        sysfs.write(dev.sysdir / "disksize", str(int(size_bytes)))
    except OSError as e:
        raise OslensError(f"cannot size {dev.name} ({dev.sysdir / 'disksize'}: {e.strerror})", 1) from e
    _run(["mkswap", str(dev.node)], f"format {dev.node} as swap")
    journal.swap_on(dev.node, "swap")
    _run(["swapon", "-p", str(PRIORITY), str(dev.node)], f"turn on swap on {dev.node}")
    return {"device": str(dev.node), "compressor": alg, "disksize": int(size_bytes), "priority": PRIORITY}


def usage(dev_name: str, root: Path | None = None) -> dict:
    """zram's mm_stat: bytes stored (uncompressed), compressed, memory used now and at most
    (the kernel's Documentation/admin-guide/blockdev/zram.rst)."""
    root = Path(root) if root is not None else sysfs.default_root()
    fields = (sysfs.read(sysfs.under(root, f"/sys/block/{dev_name}/mm_stat")) or "").split()
    if len(fields) < 5:
        return {}
    orig, compr, used, _limit, used_max = (int(x) for x in fields[:5])
    return {"orig_bytes": orig, "compr_bytes": compr, "mem_used_bytes": used, "mem_used_max_bytes": used_max}
