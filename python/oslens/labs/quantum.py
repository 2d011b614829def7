"""Lab 10, the quantum: context switches against the length of the time slice. Two spinners at
the same SCHED_RR priority, pinned to one CPU, take turns: each runs one quantum, then goes to
the back of the queue (kernel/sched/rt.c task_tick_rt), so in a window of W seconds the CPU
passes between them W / Q times. The quantum is the global sched_rr_timeslice_ms, set through
the control layer (journaled, restored at the end, on signals and after a SIGKILL by the next
oslens run); the kernel keeps it in ticks (msecs_to_jiffies rounds up), which
sched_rr_get_interval reports: at HZ 250, 10 ms becomes 12 ms. Counts are the spinners' own
own: the handovers (they note in a shared page which of them ran last) and getrusage's
preemptions over the window, with /proc/PID/sched and, where perf is installed, `perf stat -e
context-switches` beside them. See docs/experiments.md for the fair class (EEVDF) side."""

from __future__ import annotations

import gzip
import math
import os
import shutil
from pathlib import Path

from oslens.control import kernel
from oslens.labs import plot, runner
from oslens.labs.lab import Expectation, Lab, Question
from oslens.labs.sched_weights import spin_argv, window

SECONDS = {True: 1.5, False: 10.0}
SLICES_MS = (10, 30, 100)
PRIORITY = 1


def params(quick: bool, variant: str = "default") -> dict:
    cpus = sorted(os.sched_getaffinity(0))
    return {"seconds": SECONDS[bool(quick)], "cpu": cpus[-1], "slices_ms": list(SLICES_MS), "hz": config_hz(),
            "quick": bool(quick), "variant": variant}


def config_hz() -> int | None:
    """CONFIG_HZ of the running kernel, from /proc/config.gz or /boot/config-RELEASE."""
    for path in (Path("/proc/config.gz"), Path(f"/boot/config-{os.uname().release}")):
        try:
            text = gzip.decompress(path.read_bytes()).decode() if path.suffix == ".gz" else path.read_text()
        except (OSError, EOFError, gzip.BadGzipFile):
            continue
        for line in text.splitlines():
            if line.startswith("CONFIG_HZ="):
                return int(line.split("=")[1])
    return None


def quantum_ms(asked_ms: float, hz: int | None) -> float:
    """What the kernel makes of sched_rr_timeslice_ms: whole ticks, rounded up."""
    if not hz:
        return float(asked_ms)
    tick = 1000.0 / hz
    return math.ceil(asked_ms / tick - 1e-9) * tick


def _perf_argv(out: Path) -> list[str]:
    if shutil.which("perf") is None:
        return []
    return ["perf", "stat", "-x", ",", "-e", "context-switches", "-o", str(out), "--"]


def _perf_count(out: Path) -> int | None:
    try:
        for line in out.read_text().splitlines():
            fields = line.split(",")
            if len(fields) > 2 and fields[2].startswith("context-switches") and fields[0].isdigit():
                return int(fields[0])
    except OSError:
        return None
    return None


def _pair(ctx, p: dict, slice_ms: int) -> dict:
    ctx.set_globals({"sched_rr_timeslice_ms": slice_ms})
    policy = {"sched": True, "policy": kernel.CLASS_POLICY["rr"], "priority": PRIORITY, "affinity": [p["cpu"]]}
    start, end = window(p["seconds"])
    perf_out = [ctx.dir / f"perf-{slice_ms}ms-{i}.csv" for i in range(2)]
    share = ctx.dir / f"turn-{slice_ms}ms"
    share.unlink(missing_ok=True)
    argv = [*spin_argv(start, end), "--share", str(share)]
    procs = [ctx.start([*_perf_argv(out), *argv], task_policy=policy) for out in perf_out]
    spinners = [ctx.finish(proc) for proc in procs]
    perf = [_perf_count(out) for out in perf_out]
    share.unlink(missing_ok=True)
    invol = sum(s["window_nivcsw"] for s in spinners)
    turns = sum(s["handovers"] for s in spinners)
    return {"slice_ms": slice_ms, "rr_interval_ms": spinners[0]["rr_interval_ns"] / 1e6,
            "policy": spinners[0]["policy"], "involuntary": invol, "handovers": turns, "per_s": turns / p["seconds"],
            "others": max(invol - turns, 0),
            "cpu_s": sum(s["cpu_s"] for s in spinners), "sched_nivcsw": sum(s["sched_nivcsw"] for s in spinners),
            "rusage_switches": sum(s["nvcsw"] + s["nivcsw"] for s in spinners),
            "perf_switches": sum(perf) if None not in perf else None}


def run(ctx, p: dict) -> dict:
    ctx.say(f"two spinners, SCHED_RR priority {PRIORITY}, pinned to CPU {p['cpu']}, {p['seconds']:g} s for each "
            f"sched_rr_timeslice_ms in {', '.join(map(str, p['slices_ms']))} (set through the control layer, "
            f"restored after); CONFIG_HZ {p['hz'] or 'unknown'}")
    pairs = [_pair(ctx, p, s) for s in p["slices_ms"]]
    out = {"pairs": pairs}
    for pair in pairs:
        out[f"quantum_ms_{pair['slice_ms']}"] = pair["rr_interval_ms"]
        out[f"handovers_per_s_{pair['slice_ms']}"] = pair["per_s"]
    _observations(ctx, p, pairs)
    return out


def _observations(ctx, p: dict, pairs: list[dict]) -> None:
    ctx.say("\nObservations (both spinners, in the window: handovers = the CPU passed from one spinner to the other; "
            "involuntary = getrusage's preemptions, by the other spinner or by anything else)")
    ctx.say(f"  {'asked':>7}{'quantum':>9}{'handovers':>11}{'per s':>8}{'model':>8}{'invol.':>8}{'others':>8}"
            f"{'CPU s':>7}{'/proc sched':>13}{'rusage':>8}{'perf':>6}")
    for x in pairs:
        perf = "-" if x["perf_switches"] is None else f"{x['perf_switches']}"
        ctx.say(f"  {x['slice_ms']:>5}ms{x['rr_interval_ms']:>7.0f}ms{x['handovers']:>11}{x['per_s']:>8.1f}"
                f"{1000 / x['rr_interval_ms'] if x['rr_interval_ms'] else 0:>8.1f}{x['involuntary']:>8}{x['others']:>8}"
                f"{x['cpu_s']:>7.2f}{x['sched_nivcsw']:>13}{x['rusage_switches']:>8}{perf:>6}")
    ctx.say("  (others = preemptions by other tasks: the fair server runs starved fair-class tasks up to 50 ms a second "
            "even under SCHED_RR. Whole run: /proc sched = nr_involuntary_switches; rusage = every switch since the "
            "fork; perf stat -e context-switches = every switch since the exec)")
    ctx.say("\n  handovers per second against the quantum:")
    for line in plot.bars([(f"{x['rr_interval_ms']:.0f} ms", x["per_s"]) for x in pairs], width=36):
        ctx.say(line)


def expect(p: dict, results: dict | None) -> dict:
    r = (results or {}).get("results") or {}
    hz = ((results or {}).get("params") or {}).get("hz") or p["hz"]
    out = {}
    for s in p["slices_ms"]:
        measured_q = r.get(f"quantum_ms_{s}")
        q = quantum_ms(s, hz) if hz or measured_q is None else measured_q  # no kernel config: the kernel's own word
        out[f"quantum_ms_{s}"] = Expectation(
            q, 0.0, f"sched_rr_timeslice_ms {s} is kept in ticks of {1000 / hz:g} ms (CONFIG_HZ {hz}), rounded up"
            if hz else f"sched_rr_timeslice_ms {s} as sched_rr_get_interval reported it (CONFIG_HZ unknown here)", measured_q, abs_band=0.5, widen=False)
        out[f"handovers_per_s_{s}"] = Expectation(
            1000 / q, 0.2, f"the CPU passes from one spinner to the other once per {q:g} ms quantum: 1000 / {q:g} a second",
            r.get(f"handovers_per_s_{s}"), abs_band=2.0)
    return out


LAB = Lab(
    number=10, slug="quantum", title="The quantum: context switches against the time slice",
    topic="CPU scheduling", minutes=20, requires=("root", "compiler", "rr-timeslice"), sheet="10-quantum.md",
    questions=[
        *(Question(f"quantum_ms_{s}", f"the quantum the kernel gives when sched_rr_timeslice_ms is {s}", "ms")
          for s in SLICES_MS),
        *(Question(f"handovers_per_s_{s}", f"times per second the CPU passes from one spinner to the other with "
                   f"sched_rr_timeslice_ms {s}") for s in SLICES_MS),
    ],
    predictions=("handovers_per_s_10", "handovers_per_s_100"),
    run=run, expect=expect, params=params,
    variants={"default": "SCHED_RR: the quantum is sched_rr_timeslice_ms",
              "eevdf": "SCHED_OTHER: each spinner's own EEVDF slice (sched_setattr sched_runtime)"},
    variant_modules={"eevdf": "oslens.labs.quantum_eevdf"},
)
