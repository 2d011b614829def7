"""The Rust core (oslens._native.whatif_simulate, crates/native/src/whatif/): the same simulation
as sim.py, for policies that have a `native()` form, at a far higher decision rate
(bench/whatif). sim.py stays the reference; test_native.py checks both agree exactly."""

from __future__ import annotations

from oslens.whatif.sim import DONE, INF, Segment, SimResult, SimTask
from oslens.whatif.workload import UNTIL, YIELD, Workload

from oslens._native import whatif_simulate as _simulate


def available(policy, workload: Workload) -> bool:
    if policy.native() is None:
        return False
    return all(t.cpus is None or max(t.cpus) < 64 for t in workload.tasks)


def _tuples(wl: Workload):
    out = []
    for t in wl.tasks:
        blocks, deps = [], []
        for b, blk in enumerate(t.blocks):
            if blk.dep is not None:
                blocks.append((1, blk.duration))
                deps.append((b, blk.dep.task, blk.dep.burst, blk.dep.offset))
            else:
                blocks.append((2 if blk.kind == UNTIL else 3 if blk.kind == YIELD else 0, blk.duration))
        ad = t.arrival_dep
        mask = (1 << 64) - 1 if t.cpus is None else sum(1 << c for c in set(t.cpus))
        out.append((list(t.bursts), blocks, t.arrival, (ad.task, ad.burst, ad.offset) if ad else None, deps, mask,
                    int(t.nice), bool(t.background), t.until if t.until is not None else INF))
    return out


def simulate(workload: Workload, policy, switch_ns: int = 0, migrate_ns: int = 0,
             keep_segments: bool = False) -> SimResult:
    name, params = policy.native()
    d = _simulate(_tuples(workload), max(1, workload.ncpus), name, params, int(switch_ns), int(migrate_ns),
                  bool(keep_segments))
    tasks = []
    for i, t in enumerate(workload.tasks):
        st = SimTask(i, t)
        st.state, st.done_at, st.first_run = d["state"][i], d["done_at"][i], d["first_run"][i]
        st.arrived_at, st.waiting, st.dispatches = d["arrived_at"][i], d["waiting"][i], d["dispatches"][i]
        st.voluntary, st.involuntary = d["voluntary"][i], d["involuntary"][i]
        tasks.append(st)
    stalled = [st.i for st in tasks if st.state != DONE]
    ends = [st.done_at for st in tasks if st.state == DONE and not st.background]
    starts = [st.task.arrival if st.arrived_at < 0 else st.arrived_at for st in tasks if not st.background]
    makespan = (max(ends) - min(starts)) if ends and starts else 0
    segments = [Segment(*s) for s in d["segments"]]
    return SimResult(tasks, makespan, d["decisions"], d["switches"], segments, stalled)
