"""The memory a recording may keep resident under a memory cgroup limit (docs/recorder.md,
"Faults"). The recorder sizes each thread's buffer to fit a share of the cgroup's headroom
(crates/recorder/src/memlimit.rs); a size given with --buffer-mb is kept as given, so
`oslens record` warns when it cannot fit."""

from __future__ import annotations

import sys
from pathlib import Path

from oslens import _native


def in_memory(path: Path) -> bool:
    """True when `path` is on tmpfs or ramfs (every recorded page then stays resident)."""
    best, fstype = "", ""
    try:
        mounts = Path("/proc/mounts").read_text().splitlines()
    except OSError:
        return False
    target = str(Path(path).resolve())
    for line in mounts:
        parts = line.split()
        if len(parts) >= 3:
            point = parts[1].replace("\\040", " ")
            if (target == point or target.startswith(point.rstrip("/") + "/")) and len(point) >= len(best):
                best, fstype = point, parts[2]
    return fstype in ("tmpfs", "ramfs")


def warn_if_buffers_cannot_fit(trace: Path, options: dict) -> str | None:
    """The warning (also printed) when --buffer-mb was given, buffers stay resident (prepared, or
    a trace in memory) and one of them exceeds the recording's share of the cgroup's headroom."""
    mb = options.get("buffer_mb")
    limit = _native.memory_limit()
    if not mb or not limit or not (options.get("prepare_buffers") or in_memory(trace)):
        return None
    cap, usage, where = limit
    share = max(cap - usage, 0) // _native.HEADROOM_SHARE_DIV
    if mb << 20 <= share:
        return None
    line = (f"oslens: warning: --buffer-mb {mb} does not fit the memory cgroup {where} "
            f"({max(cap - usage, 0) >> 20} MiB left under its {cap >> 20} MiB limit; a recording keeps at most "
            f"1/{_native.HEADROOM_SHARE_DIV} of it resident): kept as given, so each recording thread may hold "
            f"{mb} MiB charged to the program, which the OOM killer may then end")
    print(line, file=sys.stderr)
    return line
