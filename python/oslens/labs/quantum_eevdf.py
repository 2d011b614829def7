"""Lab 10, variant eevdf: the fair class's quantum. Two SCHED_OTHER spinners pinned to one CPU,
each given the same per-task slice through sched_setattr's sched_runtime (EEVDF custom slice,
Linux >= 6.12; kernel/sched/syscalls.c keeps it in se.slice, clamped to 0.1-100 ms): 0.1, 3
and 10 ms. The slice is the CPU time the running task may use before its virtual deadline;
the kernel notices a used-up slice only when it next updates the task's runtime, at the tick
(CONFIG_HZ; no hrtick here), so a slice shorter than a tick lasts one tick. A longer slice is
an upper bound, not a promise: on this VM turns end earlier (docs/labs.md, measured).

The pair runs in a cpu cgroup of the run with the largest weight (v1 cpu.shares 262144, v2
cpu.weight 10000; the cgroup goes with the run), so the tasks of other sessions do not take
their CPU turn by turn. A turn is the pair's CPU time per handover (the spinners note in a
shared page which of them ran last)."""

from __future__ import annotations

import math
import os

from oslens.control import kernel, sysfs
from oslens.labs import plot
from oslens.labs.lab import Expectation, Question, Variant
from oslens.labs.sched_weights import spin_argv, window

SLICES_US = (100, 3000, 10000)
LONG_US = 10000
HEAVY = {1: ("cpu.shares", "262144"), 2: ("cpu.weight", "10000")}  # the largest weight each version takes

QUESTIONS = [
    *(Question(f"kept_slice_ms_{s}us", f"the slice the kernel keeps (se.slice) when sched_runtime asks {s / 1000:g} ms",
               "ms") for s in SLICES_US),
    *(Question(f"turn_ms_{s}us", f"CPU time a spinner holds the CPU before the other gets it, slice {s / 1000:g} ms",
               "ms") for s in SLICES_US),
]
PREDICTIONS = ("turn_ms_100us", f"turn_ms_{LONG_US}us")
REQUIRES = ("root", "compiler", "cpu-cgroup", "eevdf-slice")


def turn_bounds(slice_us: int, hz: int) -> tuple[float, float]:
    """(shortest, longest) turn the model allows: a slice ends at the first tick after it is used,
    so at least one tick and at most the slice rounded up to whole ticks."""
    tick = 1000.0 / hz
    return tick, max(1, math.ceil(slice_us / 1000 / tick - 1e-9)) * tick


def _heavy_cgroup(ctx) -> list:
    """A cpu cgroup of the run (control layer) given the largest weight; no quota to speak of."""
    cgroups = ctx.cap_cpu(float(len(os.sched_getaffinity(0))), name="eevdf")
    for cg in cgroups:
        version = 2 if (cg / "cpu.weight").exists() else 1
        name, value = HEAVY[version]
        if (cg / name).exists():
            sysfs.write(cg / name, value)
    return cgroups


def _pair(ctx, p: dict, slice_us: int, cgroups) -> dict:
    policy = {"sched": True, "policy": kernel.CLASS_POLICY["other"], "nice": 0, "slice_ns": slice_us * 1000,
              "affinity": [p["cpu"]]}
    start, end = window(p["seconds"])
    share = ctx.dir / f"turn-{slice_us}us"
    share.unlink(missing_ok=True)
    procs = [ctx.start([*spin_argv(start, end), "--share", str(share)], cgroups=cgroups, task_policy=policy)
             for _ in range(2)]
    spinners = [ctx.finish(proc) for proc in procs]
    share.unlink(missing_ok=True)
    turns = sum(s["handovers"] for s in spinners)
    cpu_s = sum(s["cpu_s"] for s in spinners)
    return {"slice_us": slice_us, "kept_ms": [s["slice_ns"] / 1e6 for s in spinners],
            "policy": spinners[0]["policy"], "handovers": turns, "cpu_s": cpu_s,
            "turn_ms": 1000 * cpu_s / turns if turns else None,
            "involuntary": sum(s["window_nivcsw"] for s in spinners),
            "sched_nivcsw": sum(s["sched_nivcsw"] for s in spinners)}


def run(ctx, p: dict) -> dict:
    hz = p["hz"]
    ctx.say(f"two SCHED_OTHER spinners pinned to CPU {p['cpu']}, {p['seconds']:g} s for each slice in "
            f"{', '.join(f'{s / 1000:g}' for s in SLICES_US)} ms (sched_setattr sched_runtime, per task, through the "
            f"control layer); CONFIG_HZ {hz or 'unknown'}")
    cgroups = _heavy_cgroup(ctx)
    ctx.say(f"in the cpu cgroup {cgroups[0].name} of the run, at the largest weight (gone with the run)")
    pairs = [_pair(ctx, p, s, cgroups) for s in SLICES_US]
    out = {"pairs": pairs}
    for x in pairs:
        out[f"kept_slice_ms_{x['slice_us']}us"] = x["kept_ms"][0]
        out[f"turn_ms_{x['slice_us']}us"] = x["turn_ms"]
    _observations(ctx, hz, pairs)
    return out


def _observations(ctx, hz, pairs) -> None:
    say = ctx.say
    say("\nObservations (both spinners, in the window: turn = their CPU time / handovers; handovers = the CPU "
        "passed from one spinner to the other)")
    say(f"  {'slice':>8}{'se.slice':>10}{'handovers':>11}{'CPU s':>7}{'turn':>9}{'model':>14}{'invol.':>8}")
    for x in pairs:
        lo, hi = turn_bounds(x["slice_us"], hz or 250)
        model = f"{lo:g} ms" if lo == hi else f"{lo:g}-{hi:g} ms"
        turn = "-" if x["turn_ms"] is None else f"{x['turn_ms']:.2f} ms"
        say(f"  {x['slice_us'] / 1000:>6g}ms{x['kept_ms'][0]:>8g}ms{x['handovers']:>11}{x['cpu_s']:>7.2f}{turn:>9}"
            f"{model:>14}{x['involuntary']:>8}")
    say(f"  (model: a slice ends at the first tick after it is used up, tick {1000 / (hz or 250):g} ms; a longer slice "
        "may end sooner: see docs/labs.md)")
    say("\n  turn length against the slice:")
    for line in plot.bars([(f"{x['slice_us'] / 1000:g} ms", x["turn_ms"] or 0) for x in pairs], width=36,
                          unit=" ms", digits=2):
        say(line)


def expect(p: dict, results: dict | None) -> dict:
    r = (results or {}).get("results") or {}
    hz = ((results or {}).get("params") or {}).get("hz") or p["hz"] or 250
    tick = 1000 / hz
    out = {}
    for s in SLICES_US:
        out[f"kept_slice_ms_{s}us"] = Expectation(
            s / 1000, 0.0, f"sched_runtime {s} µs is kept as asked: the kernel clamps it to 0.1-100 ms only",
            r.get(f"kept_slice_ms_{s}us"), abs_band=0.001, widen=False)
        lo, hi = turn_bounds(s, hz)
        if lo == hi:
            out[f"turn_ms_{s}us"] = Expectation(
                lo, 0.2, f"a {s / 1000:g} ms slice is used up within a tick, and the kernel notices it at the tick "
                         f"(CONFIG_HZ {hz}): one {tick:g} ms turn", r.get(f"turn_ms_{s}us"))
        else:
            mid = (lo + hi) / 2
            out[f"turn_ms_{s}us"] = Expectation(
                mid, (hi - lo) / 2 / mid + 0.1,
                f"a {s / 1000:g} ms slice ends at the first tick after it is used up ({hi:g} ms at most), but EEVDF may "
                f"hand the CPU over sooner, not before one {tick:g} ms tick", r.get(f"turn_ms_{s}us"),
                widen=False)  # the band is already the model's whole range
    return out


VARIANT = Variant(QUESTIONS, PREDICTIONS, REQUIRES, run, expect)
