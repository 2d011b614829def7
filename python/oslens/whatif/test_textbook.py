"""OSTEP's scheduling examples (chapters 7 and 8), computed by hand, must come out exact."""

import pytest

from oslens.whatif import spec as specmod
from oslens.whatif.engine import simulate
from oslens_testing.whatif.sim import engines
from oslens.whatif.workload import SLEEP, YIELD, Block, Task, Workload

MS = 1_000_000

ENGINES = engines()


def jobs(*defs, ncpus=1):
    """defs: (name, arrival_ms, [burst_ms, block_ms, burst_ms, ...])"""
    tasks = []
    for k, (name, arrival, shape) in enumerate(defs):
        bursts = [int(x * MS) for x in shape[0::2]]
        blocks = [Block(int(x * MS), SLEEP) for x in shape[1::2]]
        tasks.append(Task(k + 1, name, bursts, blocks, arrival=int(arrival * MS)))
    return Workload(tasks, ncpus)


def run(policy_text, wl):
    res = simulate(wl, specmod.make_policy(specmod.parse(policy_text)))
    out = {}
    for st in res.tasks:
        out[st.task.name] = (st.done_at / MS, (st.done_at - st.task.arrival) / MS, (st.first_run - st.task.arrival) / MS)
    return out, res


def test_fifo_equal_jobs():  # OSTEP 7.3: A, B, C of 10 s at 0: turnaround 10, 20, 30
    out, _ = run("fifo", jobs(("A", 0, [10]), ("B", 0, [10]), ("C", 0, [10])))
    assert [out[k][1] for k in "ABC"] == [10, 20, 30]


def test_fifo_convoy_and_sjf():  # OSTEP 7.4: A=100, B=C=10: FIFO average 110, SJF average 50
    wl = lambda: jobs(("A", 0, [100]), ("B", 0, [10]), ("C", 0, [10]))
    fifo, _ = run("fifo", wl())
    sjf, _ = run("sjf", wl())
    assert [fifo[k][1] for k in "ABC"] == [100, 110, 120]
    assert [sjf[k][1] for k in "ABC"] == [120, 10, 20]
    assert sum(v[1] for v in sjf.values()) / 3 == 50


def test_stcf_preempts_on_arrival():  # OSTEP 7.5: B, C arrive at 10: turnaround 120, 10, 20
    wl = lambda: jobs(("A", 0, [100]), ("B", 10, [10]), ("C", 10, [10]))
    out, _ = run("stcf", wl())
    assert [out[k][1] for k in "ABC"] == [120, 10, 20]
    sjf, _ = run("sjf", wl())  # non-preemptive: B and C wait for A
    assert [sjf[k][1] for k in "ABC"] == [100, 100, 110]


def test_round_robin_response():  # OSTEP 7.6: three 5 s jobs, 1 s slices: response 0, 1, 2
    out, res = run("rr:q=1ms", jobs(("A", 0, [5]), ("B", 0, [5]), ("C", 0, [5])))
    assert [out[k][2] for k in "ABC"] == [0, 1, 2]
    assert [out[k][0] for k in "ABC"] == [13, 14, 15]
    assert res.switches == 15 and res.makespan == 15 * MS


def test_lifo_runs_the_newest():
    out, _ = run("lifo", jobs(("A", 0, [10]), ("B", 1, [10]), ("C", 2, [10])))
    assert [out[k][0] for k in "ABC"] == [10, 30, 20]


def test_overlap_with_io():  # OSTEP 7.7: A alternates 10 ms CPU / 10 ms I/O; B (60 ms) fills the gaps under STCF
    out, res = run("stcf", jobs(("A", 0, [10, 10, 10, 10, 10, 10, 10, 10, 10]), ("B", 0, [60])))
    assert out["A"][0] == 90 and out["B"][0] == 110 and res.makespan == 110 * MS
    assert res.switches == 10  # A B A B A B A B, A preempts B at 80, B again


def test_mlfq_long_job_then_short_job():  # OSTEP 8.2: B arrives at 100 ms, runs at the top, done at 120
    out, _ = run("mlfq:levels=3,q=10ms,boost=0s", jobs(("A", 0, [200]), ("B", 100, [20])))
    assert out["B"][0] == 120 and out["A"][0] == 220


def test_mlfq_boost_saves_the_starved():  # OSTEP 8.3: with a boost every 50 ms the long job runs
    shape = [1, 1] * 100 + [1]  # two interactive jobs keep the CPU busy between them
    wl = lambda: jobs(("A", 0, [200]), ("B", 0, shape), ("C", 0, shape))
    mlfq = "mlfq:levels=2,q=10ms,allot=100ms/1s"
    starved, _ = run(mlfq + ",boost=0s", wl())
    boosted, _ = run(mlfq + ",boost=50ms", wl())
    assert starved["A"][0] > max(starved["B"][0], starved["C"][0])  # sank, then waited for both
    assert boosted["A"][0] < starved["A"][0]


def test_hrrn_prefers_the_long_waiter():
    # at 10: B (burst 10, waited 9: ratio 1.9) beats C (burst 2, waited 1: ratio 1.5)
    out, _ = run("hrrn", jobs(("A", 0, [10]), ("B", 1, [10]), ("C", 9, [2])))
    assert [out[k][0] for k in "ABC"] == [10, 20, 22]


def test_two_cpus_and_affinity():
    wl = jobs(("A", 0, [10]), ("B", 0, [10]), ("C", 0, [10]), ncpus=2)
    out, _ = run("fifo", wl)
    assert sorted(out[k][0] for k in "ABC") == [10, 10, 20]
    wl = jobs(("A", 0, [10]), ("B", 0, [10]), ncpus=2)
    wl.tasks[0].cpus = (0,)
    wl.tasks[1].cpus = (0,)
    out, _ = run("fifo", wl)
    assert [out[k][0] for k in "AB"] == [10, 20]


@pytest.mark.parametrize("text,message", [
    ("bogus", "unknown policy 'bogus'"),
    ("rr:q=10", "q='10' is not a duration"),
    ("rr:quantum=10ms", "rr has no parameter 'quantum'"),
    ("mlfq:levels=2,q=1ms/2ms/3ms", "q lists 3 durations for 2 levels"),
    ("srt:est=magic", "est='magic' is not one of ewma, oracle"),
    ("eevdf:nice=40", "nice=40 is outside -20..19"),
])
def test_bad_specs_say_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        specmod.parse(text)


@pytest.mark.parametrize("engine", ["python", "native"])
@pytest.mark.parametrize("policy", ["fifo", "rr:q=10ms", "mlfq", "eevdf:slice=3ms,tick=4ms", "sched_fifo", "sched_rr"])
def test_sched_yield_hands_the_cpu_over_only_when_another_is_ready(policy, engine):
    # A: 3 ms of CPU with a sched_yield 1 ms in; B (2 ms) becomes ready at 0.5 ms and, under every
    # policy here, does not preempt A: A's yield at 1 ms gives B the CPU (1-3), A finishes 3-5
    a = lambda: Task(1, "A", [MS, 2 * MS], [Block(0, YIELD)])
    res = ENGINES[engine](Workload([a(), Task(2, "B", [2 * MS], [], arrival=MS // 2)], 1),
                   specmod.make_policy(specmod.parse(policy)))
    assert [(st.done_at, st.dispatches, st.involuntary) for st in res.tasks] == [(5 * MS, 2, 1), (3 * MS, 1, 0)]
    alone = ENGINES[engine](Workload([a()], 1), specmod.make_policy(specmod.parse(policy)))
    assert [(st.done_at, st.dispatches, st.involuntary) for st in alone.tasks] == [(3 * MS, 1, 0)]
