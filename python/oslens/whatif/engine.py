"""simulate(): the what-if simulator, the Rust core (crates/native/src/whatif/, through
oslens._native.whatif_simulate). It is the only engine at run time; the Python simulator
(python/oslens_testing/whatif/sim.py) is the test oracle test_native.py holds it to."""

from __future__ import annotations

from oslens import _native
from oslens.whatif.result import DONE, INF, Segment, SimResult, SimTask
from oslens.whatif.workload import UNTIL, YIELD, Workload

BLOCK = _native.WHATIF_BLOCK_KINDS


def _cpu_words(cpus) -> list[int]:
    """The allowed CPUs as bits, 64 a word (empty: any CPU)."""
    if cpus is None:
        return []
    words = [0] * (max(cpus) // 64 + 1)
    for c in set(cpus):
        words[c // 64] |= 1 << (c % 64)
    return words


def _tuples(wl: Workload):
    out = []
    for t in wl.tasks:
        blocks, deps = [], []
        for b, blk in enumerate(t.blocks):
            if blk.dep is not None:
                blocks.append((BLOCK["dep"], blk.duration))
                deps.append((b, blk.dep.task, blk.dep.burst, blk.dep.offset))
            else:
                kind = BLOCK["until"] if blk.kind == UNTIL else BLOCK["yield"] if blk.kind == YIELD else BLOCK["fixed"]
                blocks.append((kind, blk.duration))
        ad = t.arrival_dep
        out.append((list(t.bursts), blocks, t.arrival, (ad.task, ad.burst, ad.offset) if ad else None, deps,
                    _cpu_words(t.cpus), int(t.nice), bool(t.background), t.until if t.until is not None else INF))
    return out


def simulate(workload: Workload, policy, switch_ns: int = 0, migrate_ns: int = 0,
             keep_segments: bool = False) -> SimResult:
    name, params = policy.native()
    d = _native.whatif_simulate(_tuples(workload), max(1, workload.ncpus), name, params, int(switch_ns),
                                int(migrate_ns), bool(keep_segments))
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
