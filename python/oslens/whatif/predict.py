"""Predictions: each policy replayed on the workload, per program task, with bounds.

Bounds come from the trace's own variability: the workload is replayed `replicates` more times
with every CPU burst and every fixed block scaled by a random factor drawn from the spread the
trace shows (the relative median absolute deviation of each task's bursts, and of its blocks of
one kind), and the background load shifted in time by up to a tenth of the window. The bounds are
the lowest and highest figure over those replays and the nominal one: an envelope of how much the
answer moves when the program behaves as variably as it did, not a confidence interval."""

from __future__ import annotations

import copy
import random
from dataclasses import replace

import numpy as np

from oslens.whatif import spec as specmod
from oslens.whatif.engine import simulate
from oslens.whatif.workload import UNTIL, Block, Dep, Workload

METRICS = ("completion_ns", "turnaround_ns", "waiting_ns", "response_ns", "switches")
MAX_SPREAD = 0.5  # a task whose bursts vary more than this (relative MAD) is capped: the bursts differ in kind
DEFAULT_SPREAD = 0.02  # for a task with fewer than 3 bursts: nothing to measure, a small stated jitter


def _spread(values: list[int]) -> float | None:
    if len(values) < 3:
        return None
    a = np.asarray(values, float)
    med = float(np.median(a))
    if med <= 0:
        return None
    return min(MAX_SPREAD, float(np.median(np.abs(a - med))) / med)


def spreads(wl: Workload) -> dict:
    """Per task index: (burst spread, {block kind: spread})."""
    out = {}
    measured = []
    for i, t in enumerate(wl.tasks):
        b = _spread(t.bursts)
        if b is not None and not t.background:
            measured.append(b)
        kinds = {}
        for kind in {blk.kind for blk in t.blocks if blk.dep is None and blk.kind != UNTIL}:
            kinds[kind] = _spread([blk.duration for blk in t.blocks if blk.kind == kind and blk.dep is None])
        out[i] = (b, kinds)
    fallback = float(np.median(measured)) if measured else DEFAULT_SPREAD
    return {i: (b if b is not None else fallback, {k: (v if v is not None else fallback) for k, v in kinds.items()})
            for i, (b, kinds) in out.items()}


def perturbed(wl: Workload, rng: random.Random, sp: dict) -> Workload:
    """A copy of the workload with durations scaled by the trace's own spread (see module doc)."""
    new = copy.copy(wl)
    window = max((t.recorded.get("completion_ns", 0) for t in wl.program), default=0)
    shift = int(rng.uniform(-0.1, 0.1) * window)
    factors = []  # per task, per burst
    tasks = []
    for i, t in enumerate(wl.tasks):
        bs, ks = sp[i]
        f = [max(0.1, rng.gauss(1.0, bs * 1.4826)) for _ in t.bursts]
        factors.append(f)
        tasks.append(t)
    out_tasks = []
    for i, t in enumerate(tasks):
        bs, ks = sp[i]
        bursts = [max(0, int(b * f)) for b, f in zip(t.bursts, factors[i])]
        blocks = []
        for blk in t.blocks:
            if blk.kind == UNTIL:
                blocks.append(Block(max(0, blk.duration + shift), UNTIL))
            elif blk.dep is None:
                s = ks.get(blk.kind, 0.0)
                blocks.append(Block(max(0, int(blk.duration * max(0.1, rng.gauss(1.0, s * 1.4826)))), blk.kind))
            else:
                blocks.append(Block(blk.duration, blk.kind, _scaled(blk.dep, factors)))
        dep = _scaled(t.arrival_dep, factors) if t.arrival_dep else None
        arrival, until = t.arrival, t.until
        if t.background:  # the competitors come and go a little earlier or later
            arrival = max(0, t.arrival + shift)
            until = max(arrival + 1, t.until + shift) if t.until is not None else None
            bursts = list(t.bursts)
        out_tasks.append(replace(t, bursts=bursts, blocks=blocks, arrival_dep=dep, arrival=arrival, until=until))
    new.tasks = out_tasks
    return new


def _scaled(dep: Dep, factors) -> Dep:
    return Dep(dep.task, dep.burst, int(dep.offset * factors[dep.task][dep.burst]))


def as_recorded(wl: Workload) -> Workload:
    """The program's threads as the trace ran them: each recorded slice a burst released at its
    recorded start (an UNTIL block), other tasks left out (their time is in the gaps already)."""
    new = copy.copy(wl)
    new.tasks = [replace(t, bursts=[max(1, e - s) for s, e in t.slices], arrival=t.slices[0][0], arrival_dep=None,
                         blocks=[Block(s, UNTIL) for s, _e in t.slices[1:]], cpus=None)
                 for t in wl.tasks if not t.background and t.slices]
    return new


def apply_spec(wl: Workload, sp: specmod.Spec) -> Workload:
    """The workload as the spec's modifiers change it (nice, affinity, CPU count of the program)."""
    if sp.name == "recorded":
        wl = as_recorded(wl)
    if sp.nice is None and sp.cpus is None and sp.ncpus is None:
        return wl
    new = copy.copy(wl)
    new.tasks = [t if t.background else replace(t, nice=sp.nice if sp.nice is not None else t.nice,
                                                cpus=sp.cpus if sp.cpus is not None else t.cpus)
                 for t in wl.tasks]
    if sp.ncpus is not None:
        new.ncpus = sp.ncpus
        new.tasks = [replace(t, cpus=tuple(c for c in t.cpus if c < sp.ncpus) or (0,)) if t.cpus else t
                     for t in new.tasks]
    return new


def figures(result) -> dict:
    """Per program task and for the whole program, from one simulation."""
    tasks = {}
    for st in result.tasks:
        if st.background:
            continue
        done = st.done_at if st.done_at >= 0 else None
        arrived = st.arrived_at if st.arrived_at >= 0 else st.task.arrival
        tasks[st.task.tid] = {
            "completion_ns": done,
            "turnaround_ns": done - arrived if done is not None else None,
            "waiting_ns": st.waiting,
            "response_ns": st.first_run - arrived if st.first_run >= 0 else None,
            "switches": st.dispatches,
        }
    return {"tasks": tasks, "makespan_ns": result.makespan,
            "switches": sum(t["switches"] for t in tasks.values()), "decisions": result.decisions,
            "stalled": [result.tasks[i].task.tid for i in result.stalled if not result.tasks[i].background]}


def run_policy(wl: Workload, sp: specmod.Spec, machine: dict, replicates: int = 8, seed: int = 1,
               keep_segments: bool = False) -> dict:
    """Nominal prediction plus bounds (min/max over perturbed replays) for one policy."""
    base = apply_spec(wl, sp)
    sw, mig = machine.get("switch_ns", 0), machine.get("migrate_ns", 0)
    if sp.name == "recorded":
        sw = mig = 0  # the recorded slices' times include what switching cost
    nominal = simulate(base, specmod.make_policy(sp, machine), sw, mig, keep_segments)
    nom = figures(nominal)
    rng = random.Random(seed)
    sp_ = spreads(base)
    reps = [figures(simulate(perturbed(base, rng, sp_), specmod.make_policy(sp, machine), sw, mig))
            for _ in range(replicates)]
    decisions = nom["decisions"] + sum(r["decisions"] for r in reps)
    out = {"policy": sp.text, "makespan_ns": nom["makespan_ns"], "switches": nom["switches"],
           "makespan_bounds": _bounds([nom["makespan_ns"]] + [r["makespan_ns"] for r in reps]),
           "switches_bounds": _bounds([nom["switches"]] + [r["switches"] for r in reps]),
           "stalled": nom["stalled"], "decisions": decisions, "tasks": {}}
    for tid, f in nom["tasks"].items():
        row = dict(f)
        for m in METRICS:
            row[m.replace("_ns", "") + "_bounds"] = _bounds([f[m]] + [r["tasks"][tid][m] for r in reps
                                                                      if tid in r["tasks"]])
        out["tasks"][tid] = row
    if keep_segments:
        out["segments"] = nominal.segments
    return out


def _bounds(values):
    vals = [v for v in values if v is not None]
    return [min(vals), max(vals)] if vals else None


def recorded(wl: Workload) -> dict:
    tasks = {}
    for t in wl.program:
        r = t.recorded
        tasks[t.tid] = {"completion_ns": r["completion_ns"], "turnaround_ns": r["completion_ns"] - r["arrival_ns"],
                        "waiting_ns": r["waiting_ns"], "response_ns": r["response_ns"], "switches": r["switches"]}
    return {"makespan_ns": wl.recorded["makespan_ns"], "switches": wl.recorded["switches"], "tasks": tasks}
