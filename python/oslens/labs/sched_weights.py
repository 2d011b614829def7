"""Lab 7, scheduler weights: two spinners pinned to one CPU share it in proportion to their
weights. The kernel's table (sched_prio_to_weight, kernel/sched/core.c) gives nice 0 weight 1024,
each nice step ×1.25: nice 5 = 335, nice 10 = 110. So nice 0 against nice 5 gets
1024 / (1024 + 335) ≈ 75 %, against nice 10 ≈ 90 %."""

from __future__ import annotations

import os
import time

from oslens.control import kernel
from oslens.labs import runner
from oslens.labs.lab import Expectation, Lab, Question

# kernel/sched/core.c sched_prio_to_weight[], nice -20..19
WEIGHTS = [88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705, 14949, 11916,
           9548, 7620, 6100, 4904, 3906, 3121, 2501, 1991, 1586, 1277,
           1024, 820, 655, 526, 423, 335, 272, 215, 172, 137,
           110, 87, 70, 56, 45, 36, 29, 23, 18, 15]
SECONDS = {True: 2.0, False: 20.0}


def weight(nice: int) -> int:
    return WEIGHTS[nice + 20]


def share(nice_a: int, nice_b: int) -> float:
    return 100.0 * weight(nice_a) / (weight(nice_a) + weight(nice_b))


def params(quick: bool, variant: str = "default") -> dict:
    cpus = sorted(os.sched_getaffinity(0))
    return {"seconds": SECONDS[bool(quick)], "cpu": cpus[-1], "pairs": [[0, 5], [0, 10]],
            "quick": bool(quick), "variant": variant}


def window(seconds: float) -> tuple[int, int]:
    """An absolute CLOCK_MONOTONIC window a little ahead: spinners started one after the other
    all wait for its start, so none spins alone (which skews the shares by several points)."""
    start = time.monotonic_ns() + 200_000_000
    return start, start + int(seconds * 1e9)


def spin_argv(start: int, end: int) -> list[str]:
    return [runner.program("spin"), "--start-ns", str(start), "--end-ns", str(end)]


def _pair(ctx, cpu, a, b, seconds) -> tuple[float, dict, dict]:
    start, end = window(seconds)
    procs = [ctx.start(spin_argv(start, end), task_policy={"sched": True, "policy": kernel.CLASS_POLICY["other"],
                                                            "nice": n, "affinity": [cpu]}) for n in (a, b)]
    x, y = (ctx.finish(p) for p in procs)
    total = x["cpu_s"] + y["cpu_s"]
    return 100.0 * x["cpu_s"] / total if total else 0.0, x, y


def run(ctx, p: dict) -> dict:
    ctx.say(f"two spinners on CPU {p['cpu']} for {p['seconds']:g} s each pair (affinity and nice through the control "
            "layer's per-task policy)")
    out = {}
    for a, b in p["pairs"]:
        pct, x, y = _pair(ctx, p["cpu"], a, b, p["seconds"])
        out[f"share_nice{b}"] = pct
        out[f"cpu_s_nice{b}"] = [x["cpu_s"], y["cpu_s"]]
        ctx.say(f"  nice {a} vs nice {b}: {x['cpu_s']:.2f} s vs {y['cpu_s']:.2f} s of CPU → nice {a} got "
                f"{pct:.1f} % (model {share(a, b):.1f} %); together {x['cpu_s'] + y['cpu_s']:.2f} s of "
                f"{p['seconds']:g} s wall (the rest went to other tasks on that CPU)")
    return out


def expect(p: dict, results: dict | None) -> dict:
    r = (results or {}).get("results") or {}
    return {
        "share_nice5": Expectation(share(0, 5), 0.05, "weights 1024 (nice 0) and 335 (nice 5): 1024/1359 of the CPU",
                                   r.get("share_nice5")),
        "share_nice10": Expectation(share(0, 10), 0.04, "weights 1024 (nice 0) and 110 (nice 10): 1024/1134 of the CPU",
                                    r.get("share_nice10")),
        "weight_ratio_per_nice": Expectation(1.25, 0.02, "each nice step divides the weight by about 1.25 "
                                                         "(10 % of CPU time per step between two tasks)"),
    }


LAB = Lab(
    number=7, slug="sched-weights", title="Scheduler weights: nice as a share of one CPU",
    topic="CPU scheduling", minutes=15, requires=("compiler",), sheet="07-sched-weights.md",
    questions=[
        Question("share_nice5", "percent of the CPU the nice-0 spinner gets against nice 5", "%"),
        Question("share_nice10", "percent of the CPU the nice-0 spinner gets against nice 10", "%"),
        Question("weight_ratio_per_nice", "the factor between the weights of two neighbouring nice values"),
    ],
    predictions=("share_nice5", "share_nice10"),
    run=run, expect=expect, params=params,
)
