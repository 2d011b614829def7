"""What an import may use under the memory cgroup it runs in (issue 30: containers and caps).

    headroom() -> (bytes the cgroup can still give, its limit, its folder) or None without a limit
    refusal(trace) -> the one line that says why the import is not run here, or None

The headroom counts the cgroup's file cache as free: the trace just written sits in it, and the
kernel reclaims it before it OOM-kills anything.
"""

from __future__ import annotations

from pathlib import Path

from oslens import _native

# An import's peak resident memory on the largest traces measured (bench/import: 283-293 MiB for
# 200 M application records; the kernel pass's below that), with a margin.
IMPORT_NEEDS = 320 << 20
# DuckDB's share when nothing caps it; under a cap, a quarter of the headroom, never below the floor


def _reclaimable(folder: str) -> int:
    """The cgroup's file cache (v1 total_*_file, v2 *_file in memory.stat), 0 when unreadable."""
    try:
        stat = dict(line.split()[:2] for line in Path(folder, "memory.stat").read_text().splitlines())
    except (OSError, ValueError):
        return 0
    keys = ("total_inactive_file", "total_active_file") if "total_inactive_file" in stat else ("inactive_file", "active_file")
    return sum(int(stat.get(k, 0)) for k in keys)


def headroom() -> tuple[int, int, str] | None:
    """(bytes left, limit, cgroup folder) of this process's nearest limited memory cgroup."""
    found = _native.memory_limit()
    if not found:
        return None
    limit, usage, folder = found
    return max(limit - max(usage - _reclaimable(folder), 0), 0), limit, folder


def refusal(trace: Path) -> str | None:
    """Why the import cannot run here (the cgroup cannot give what an import needs), with the
    command that imports it elsewhere; None when it can."""
    room = headroom()
    if room is None or room[0] >= IMPORT_NEEDS:
        return None
    left, limit, folder = room
    return (f"oslens: the trace was not imported: the memory cgroup {folder} has {left >> 20} MiB of its "
            f"{limit >> 20} MiB limit left and an import needs about {IMPORT_NEEDS >> 20} MiB; the raw trace is whole: "
            f"run 'oslens import {trace}' where more memory is free")
