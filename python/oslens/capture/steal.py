"""Time the hypervisor stole from this VM's CPUs during a recording (/proc/stat `steal`): the
kernel leaves it out of every task's CPU time, the trace's switch-to-switch slices hold it, so the
cross-check needs it (analysis/crosscheck.py, docs/report.md)."""

from __future__ import annotations

import os


def steal_ticks() -> dict[str, int]:
    """Per CPU, the time the hypervisor ran something else while this VM's CPU had work
    (/proc/stat `steal`, in clock ticks); empty where unreadable."""
    out = {}
    try:
        with open("/proc/stat") as f:
            for line in f:
                parts = line.split()
                if parts and parts[0].startswith("cpu") and parts[0] != "cpu" and len(parts) > 8:
                    out[parts[0]] = int(parts[8])
    except (OSError, ValueError):
        return {}
    return out


def steal_during(before: dict[str, int], after: dict[str, int]) -> dict | None:
    """The steal ticks each CPU gained over the run, and the tick's length in ns: the kernel's
    CPU times leave stolen time out, the trace's switch-to-switch slices hold it
    (analysis/crosscheck.py)."""
    if not before or not after:
        return None
    out: dict = {cpu: after[cpu] - before[cpu] for cpu in after if cpu in before}
    out["tick_ns"] = 1_000_000_000 // os.sysconf("SC_CLK_TCK")
    return out


def sched_tick_ns() -> int | None:
    """The scheduler tick's period (1 s / CONFIG_HZ, from the kernel's config), or None when the
    config is unreadable: the cross-check bounds the kernel's skipped clock updates by it, since
    ticks fall on multiples of it in CLOCK_MONOTONIC (analysis/crosscheck.py, clock_lags)."""
    import gzip
    import re
    for path, opener in (("/proc/config.gz", gzip.open), (f"/boot/config-{os.uname().release}", open)):
        try:
            with opener(path, "rt") as f:
                m = re.search(r"^CONFIG_HZ=(\d+)$", f.read(), re.M)
        except OSError:
            continue
        if m and int(m.group(1)) > 0:
            return 1_000_000_000 // int(m.group(1))
    return None
