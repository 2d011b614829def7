"""The Rust core (the runtime engine) and the Python oracle give the same schedule, decision for decision."""

import pytest

from oslens.whatif import spec
from oslens.whatif.engine import simulate
from oslens_testing.whatif import sim as oracle
from oslens_testing.whatif.policies import POLICIES as ORACLE_POLICIES
from oslens_testing.whatif.synthetic import workload

POLICIES = ["fifo", "lifo", "sjf", "hrrn", "srt", "srt:est=ewma,alpha=0.3,init=2ms", "rr:q=3ms",
            "mlfq:levels=3,q=2ms/4ms/8ms,allot=4ms/8ms/16ms,boost=50ms", "mlfq:boost=0s", "unix:q=20ms,decay=100ms", "eevdf",
            "eevdf:slice=1ms,tick=0s", "batch", "eevdf:nice=5", "sched_rr:q=8ms", "sched_fifo", "rr:q=2ms,cpus=0"]
FIELDS = ("state", "done_at", "first_run", "arrived_at", "waiting", "dispatches", "voluntary", "involuntary")


@pytest.mark.parametrize("text", POLICIES)
@pytest.mark.parametrize("seed", [1, 2])
def test_same_schedule(text, seed):
    from oslens.whatif.predict import apply_spec

    sp = spec.parse(text)
    wl = apply_spec(workload(seed), sp)
    py = oracle.simulate(wl, spec.make_policy(sp), 3000, 10000, keep_segments=True)
    rs = simulate(wl, spec.make_policy(sp), 3000, 10000, keep_segments=True)
    for a, b in zip(py.tasks, rs.tasks):
        assert [getattr(a, f) for f in FIELDS] == [getattr(b, f) for f in FIELDS], (text, a.task.name)
    assert (py.decisions, py.switches, py.makespan, py.stalled) == (rs.decisions, rs.switches, rs.makespan, rs.stalled)
    assert [(s.cpu, s.task, s.start, s.end) for s in py.segments] == [(s.cpu, s.task, s.start, s.end) for s in rs.segments]


def test_affinity_past_the_64th_cpu_runs_in_the_core():
    """The Python simulator used to take over when a task was bound past CPU 63; the core takes
    any width of CPU mask now and gives the oracle's schedule."""
    from oslens.whatif.workload import Task, Workload

    ms = 1_000_000
    wl = Workload([Task(1, "a", [2 * ms], [], cpus=(70,)), Task(2, "b", [ms], [], cpus=(3, 70)),
                   Task(3, "c", [ms], [], cpus=(3,))], 72)
    pol = spec.make_policy(spec.parse("rr:q=1ms"))
    rs, py = simulate(wl, pol, keep_segments=True), oracle.simulate(wl, pol, keep_segments=True)
    assert [(s.cpu, s.task, s.start, s.end) for s in rs.segments] == [(s.cpu, s.task, s.start, s.end) for s in py.segments]
    assert {s.cpu for s in rs.segments if s.task == 0} == {70}


def test_every_policy_a_user_can_name_has_a_form_in_the_core():
    for name in spec.PARAMS:
        policy = spec.make_policy(spec.parse(name))
        assert policy.native()[0] in ORACLE_POLICIES, name
