"""What the simulator takes from this machine: the scheduler tick, EEVDF's base slice, the
SCHED_RR time slice, and the cost of a context switch and of a migration from `oslens bench`
results (ctx.thread.pinned and ctx.thread.cross_cpu medians). Each figure says where it came
from; a default is named as one."""

from __future__ import annotations

import gzip
import math
from pathlib import Path

import numpy as np

from oslens.errors import OslensError

# Without --bench a switch costs nothing extra: a trace's slices tile each CPU from one switch
# record to the next, so the bursts already hold the switches they had; charging 3 us again made
# sysbench's real-time runs (8,000 switches in 25-40 ms) come out 40-80 points too long
# (docs/whatif.md "Switch costs"). --bench FILE charges this machine's measured cost per switch.
DEFAULT_SWITCH_NS = 0
DEFAULT_MIGRATE_NS = 0
DEFAULT_HZ = 250


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def kernel_hz() -> tuple[int, str]:
    try:
        with gzip.open("/proc/config.gz", "rt") as f:
            for line in f:
                if line.startswith("CONFIG_HZ="):
                    return int(line.split("=", 1)[1]), "/proc/config.gz"
    except (OSError, ValueError):
        pass
    return DEFAULT_HZ, "default"


def base_slice_ns(ncpus: int) -> tuple[int, str]:
    text = _read("/sys/kernel/debug/sched/base_slice_ns")
    if text and text.isdigit():
        return int(text), "/sys/kernel/debug/sched/base_slice_ns"
    # the kernel scales 0.75 ms by 1 + log2(CPUs), CPUs capped at 8 (SCHED_TUNABLESCALING_LOG)
    factor = 1 + int(math.log2(max(1, min(ncpus, 8))))
    return 750_000 * factor, f"0.75 ms x (1 + log2 {min(ncpus, 8)} CPUs), the kernel's default"


def rr_timeslice_ns() -> tuple[int, str]:
    text = _read("/proc/sys/kernel/sched_rr_timeslice_ms")
    if text and text.isdigit():
        return int(text) * 1_000_000, "kernel.sched_rr_timeslice_ms"
    return 100_000_000, "default"


def switch_costs(bench_json: str | None) -> dict:
    """(switch_ns, migrate_ns) with their sources, from an `oslens bench --json` file if given."""
    if not bench_json:
        return {"switch_ns": DEFAULT_SWITCH_NS, "migrate_ns": DEFAULT_MIGRATE_NS,
                "source": "none beyond the recorded bursts, which hold their switches' cost (give --bench FILE "
                          "from 'oslens bench --json FILE' to charge this machine's per switch)"}
    from oslens.osbench import results

    doc = results.load(bench_json)
    by = {r["name"]: r for r in doc.get("results", []) if r.get("status") == "ok"}
    pinned = by.get("ctx.thread.pinned") or by.get("ctx.process.pinned")
    cross = by.get("ctx.thread.cross_cpu") or by.get("ctx.process.cross_cpu")
    if not pinned:
        raise OslensError(f"{bench_json} has no ctx.thread.pinned result; run 'oslens bench --only ctx.thread.* --json FILE'", 2)
    sw = int(pinned["median_ns"])
    mig = max(0, int(cross["median_ns"]) - sw) if cross else DEFAULT_MIGRATE_NS
    return {"switch_ns": sw, "migrate_ns": mig, "source": f"{bench_json} ({pinned['name']}"
            + (f", {cross['name']} - it)" if cross else ")")}


def defaults(ncpus: int, bench_json: str | None = None) -> dict:
    hz, hz_src = kernel_hz()
    sl, sl_src = base_slice_ns(ncpus)
    rr, rr_src = rr_timeslice_ns()
    out = {"tick_ns": 1_000_000_000 // hz, "base_slice_ns": sl, "rr_timeslice_ns": rr,
           "sources": {"tick": f"CONFIG_HZ={hz} ({hz_src})", "base_slice": sl_src, "rr_timeslice": rr_src}}
    costs = switch_costs(bench_json)
    out.update(switch_ns=costs["switch_ns"], migrate_ns=costs["migrate_ns"])
    out["sources"]["switch"] = costs["source"]
    return out


def observed_tick(mach: dict, preempted_ends: list[int]) -> dict:
    """The grid the trace's preemptions fall on. A preempted slice ends at a scheduler tick (or
    at a wake-up); on this VM (CONFIG_HZ=250) the program's preempted slices end as often 2 ms
    into the 4 ms tick as at its start (docs/whatif.md, "tick"), so the running task is
    rescheduled every 2 ms: the model's tick is halved when the half-tick phase holds at least
    half as many ends as phase 0 (50 preemptions at least, else CONFIG_HZ stands)."""
    tick = mach.get("tick_ns") or 0
    if tick <= 0 or len(preempted_ends) < 50:
        return mach
    phase = np.asarray(preempted_ends, dtype=np.int64) % tick
    width = tick // 16
    at_tick = int(((phase < width) | (phase > tick - width)).sum())
    at_half = int((np.abs(phase - tick // 2) < width).sum())
    if at_tick < 20 or at_half < at_tick // 2:
        return mach
    out = dict(mach, tick_ns=tick // 2)
    out["sources"] = dict(mach.get("sources", {}), tick=f"{mach.get('sources', {}).get('tick', '')}, halved: "
                          f"{at_half} preempted slices ended half-way between ticks, {at_tick} at one")
    return out
