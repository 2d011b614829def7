"""Lab 3, a cap without swap: anonymous memory over a hard cgroup cap cannot be paged out
without swap, so the kernel's OOM killer ends the program (exit 137 = 128 + SIGKILL, the
cgroup's oom_kill count 1) when it has touched about the cap. Under a soft limit instead
(v1 memory.soft_limit_in_bytes, v2 memory.high) nothing is killed: v1 only reclaims down to
it under global memory pressure, v2 throttles the program above it."""

from __future__ import annotations

import re

from oslens.labs import runner
from oslens.labs.lab import Expectation, Lab, Question

MiB = 1 << 20
SIZES = {True: {"cap_mb": 32, "alloc_mb": 64}, False: {"cap_mb": 128, "alloc_mb": 256}}


def params(quick: bool, variant: str = "default") -> dict:
    return {**SIZES[bool(quick)], "quick": bool(quick), "variant": variant}


def _touched(stdout: str) -> int:
    found = re.findall(r"^touched (\d+)$", stdout, re.M)
    return int(found[-1]) if found else 0


def run(ctx, p: dict) -> dict:
    cap, alloc = p["cap_mb"], p["alloc_mb"]
    prog = runner.program("alloc_touch")
    ctx.say(f"alloc_touch touches {alloc} MiB of anonymous memory, 1 MiB at a time, 4 KiB pages; no swap")
    hard = ctx.cap_memory(cap * MiB)
    ctx.say(f"\n1. hard cap: memory.limit_in_bytes / memory.max = {cap} MiB ({hard.name})")
    res = ctx.run([prog, "--mb", str(alloc), "--cgroup", str(hard)], "hard")
    use = ctx.cap_usage()
    out = {"hard_exit": res.status, "hard_touched_mb": _touched(res.stdout), "hard_oom_kills": use.get("oom_kills"),
           "hard_peak_mb": (use.get("peak_bytes") or 0) / MiB, "hard_limit_hits": use.get("limit_hits")}
    soft = ctx.cap_memory(None, cap * MiB, name="soft")
    ctx.say(f"2. soft limit only: memory.soft_limit_in_bytes / memory.high = {cap} MiB ({soft.name})")
    res2 = ctx.run([prog, "--mb", str(alloc), "--cgroup", str(soft)], "soft")
    use2 = ctx.cap_usage()
    out.update({"soft_exit": res2.status, "soft_touched_mb": _touched(res2.stdout),
                "soft_oom_kills": use2.get("oom_kills"), "soft_peak_mb": (use2.get("peak_bytes") or 0) / MiB})
    ctx.say("\nObservations")
    ctx.say(f"  {'run':<12}{'exit':>6}{'touched MiB':>13}{'peak MiB':>10}{'oom_kill':>10}")
    ctx.say(f"  {'hard cap':<12}{out['hard_exit']:>6}{out['hard_touched_mb']:>13}{out['hard_peak_mb']:>10.1f}"
            f"{out['hard_oom_kills'] if out['hard_oom_kills'] is not None else '-':>10}")
    ctx.say(f"  {'soft limit':<12}{out['soft_exit']:>6}{out['soft_touched_mb']:>13}{out['soft_peak_mb']:>10.1f}"
            f"{out['soft_oom_kills'] if out['soft_oom_kills'] is not None else '-':>10}")
    ctx.say(f"  exit {out['hard_exit']} = 128 + {out['hard_exit'] - 128 if out['hard_exit'] > 128 else '?'} "
            f"(SIGKILL is 9): the OOM killer, not a crash of the program")
    return out


def expect(p: dict, results: dict | None) -> dict:
    r = (results or {}).get("results") or {}
    cap = p["cap_mb"]
    return {
        "exit_status": Expectation(137, 0.0, "killed by SIGKILL (9) from the OOM killer: a shell reports 128 + 9",
                                   r.get("hard_exit"), widen=False),
        "oom_kills": Expectation(1, 0.0, "one process in the cgroup, killed once (memory.oom_control oom_kill)",
                                 r.get("hard_oom_kills"), widen=False),
        "mb_touched_before_kill": Expectation(
            cap, 0.12, f"anonymous pages cannot leave without swap: it dies when its pages fill the {cap} MiB cap "
                       "(less its page tables and binary)", r.get("hard_touched_mb")),
        "soft_exit_status": Expectation(0, 0.0, "a soft limit reclaims or throttles, it never kills", r.get("soft_exit"),
                                        widen=False),
        "soft_peak_mb": Expectation(
            p["alloc_mb"], 0.12, f"on v1 the soft limit acts only under global memory pressure: all {p['alloc_mb']} MiB "
                                 "stay resident", r.get("soft_peak_mb")),
    }


LAB = Lab(
    number=3, slug="oom", title="A cap without swap: the OOM killer", topic="virtual memory, OOM",
    minutes=20, requires=("root", "memory-cgroup", "compiler", "no-swap"), optional=("collector",),
    sheet="03-oom.md",
    questions=[
        Question("exit_status", "the exit status a shell would report for the capped program"),
        Question("oom_kills", "the cgroup's oom_kill count after the capped run"),
        Question("mb_touched_before_kill", "MiB the program had touched when it was killed", "MiB"),
        Question("soft_exit_status", "the exit status under the soft limit only"),
        Question("soft_peak_mb", "the soft-limited cgroup's peak memory", "MiB"),
    ],
    predictions=("exit_status", "mb_touched_before_kill"),
    run=run, expect=expect, params=params,
)
