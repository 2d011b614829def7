"""Lab 9, CPU throttling: a cgroup CPU quota (CFS bandwidth: v1 cpu.cfs_quota_us per
cpu.cfs_period_us, v2 cpu.max) lets the cgroup run `quota` of CPU time per `period`, then
throttles it until the next period. Spinners that want every CPU, under a 0.1-CPU quota, get
0.1 s of CPU per second of wall time and are throttled in every period. (A small quota and a
spinner per CPU: on a host busy with other work a lone spinner under a larger quota might not
even reach its quota, and nothing would be throttled.)"""

from __future__ import annotations

import os

from oslens.control.apply import CPU_PERIOD_US
from oslens.labs import runner
from oslens.labs.lab import Expectation, Lab, Question
from oslens.labs.sched_weights import spin_argv, window

SECONDS = {True: 2.0, False: 20.0}
QUOTA = 0.1


def params(quick: bool, variant: str = "default") -> dict:
    return {"seconds": SECONDS[bool(quick)], "quota_cpus": QUOTA, "period_us": CPU_PERIOD_US,
            "spinners": len(os.sched_getaffinity(0)), "quick": bool(quick), "variant": variant}


def run(ctx, p: dict) -> dict:
    cgs = ctx.cap_cpu(p["quota_cpus"])
    cpu_cg = cgs[-1]
    ctx.say(f"{p['spinners']} spinners (one per CPU), in a cgroup capped at {p['quota_cpus']} CPU "
            f"({int(p['quota_cpus'] * p['period_us'])} µs per {p['period_us']} µs period) for {p['seconds']:g} s; "
            f"then one spinner uncapped")
    before = ctx.cpu_stat(cpu_cg)
    start, end = window(p["seconds"])
    procs = [ctx.start(spin_argv(start, end), cgroups=cgs) for _ in range(p["spinners"])]
    capped = {"cpu_s": sum(ctx.finish(proc)["cpu_s"] for proc in procs)}
    after = ctx.cpu_stat(cpu_cg)
    start, end = window(p["seconds"])
    free = ctx.finish(ctx.start(spin_argv(start, end)))
    periods = after.get("nr_periods", 0) - before.get("nr_periods", 0)
    throttled = after.get("nr_throttled", 0) - before.get("nr_throttled", 0)
    throttled_s = (after.get("throttled_time", 0) - before.get("throttled_time", 0)) / 1e9
    out = {"capped_cpu_s": capped["cpu_s"], "free_cpu_s": free["cpu_s"], "periods": periods,
           "throttled_periods": throttled, "throttled_s": throttled_s,
           "capped_share": capped["cpu_s"] / p["seconds"], "free_share": free["cpu_s"] / p["seconds"]}
    ctx.say("\nObservations")
    ctx.say(f"  capped:   {capped['cpu_s']:.2f} s of CPU in {p['seconds']:g} s ({out['capped_share']:.0%}); "
            f"cpu.stat: {periods} periods, {throttled} throttled, {throttled_s:.2f} s throttled")
    ctx.say(f"  uncapped: {free['cpu_s']:.2f} s of CPU in {p['seconds']:g} s ({out['free_share']:.0%}) — "
            "less than 100 % means other programs share this machine")
    return out


def expect(p: dict, results: dict | None) -> dict:
    r = (results or {}).get("results") or {}
    periods = p["seconds"] * 1e6 / p["period_us"]
    return {
        "cpu_seconds": Expectation(p["quota_cpus"] * p["seconds"], 0.1,
                                   f"{p['quota_cpus']} CPU × {p['seconds']:g} s: the quota, every period",
                                   r.get("capped_cpu_s")),
        "throttled_periods": Expectation(periods, 0.15, f"it wants more than its quota in every one of the "
                                         f"{periods:.0f} periods of {p['period_us'] // 1000} ms", r.get("throttled_periods")),
    }


LAB = Lab(
    number=9, slug="cpu-throttling", title="CPU throttling: a cgroup CPU quota", topic="CPU scheduling, cgroups",
    minutes=15, requires=("root", "cpu-cgroup", "compiler"), sheet="09-cpu-throttling.md",
    questions=[
        Question("cpu_seconds", "CPU seconds the capped spinners get together", "s"),
        Question("throttled_periods", "periods in which the cgroup was throttled"),
    ],
    predictions=("cpu_seconds", "throttled_periods"),
    run=run, expect=expect, params=params,
)
