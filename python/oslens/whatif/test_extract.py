"""Extraction from hand-built scheduling tables, and replaying them: bursts, blocks, who woke whom."""

import pytest

from oslens_testing.analysis import synthetic
from oslens.errors import OslensError
from oslens.whatif import background, extract, spec
from oslens.whatif.engine import simulate
from oslens_testing.whatif.sim import engines
from oslens.whatif.workload import IO, SLEEP, SYNC, UNTIL, Dep, Task, Workload

MS = 1_000_000

ENGINES = engines()


def _trace(second_wait_state="S", waker_call=("futex", int(8.4 * MS), int(8.6 * MS))):
    """One CPU. main (100) runs 0-2 ms, creates worker 101 at 1 ms, waits for it (S) from 2 ms;
    101 runs 2-5, sleeps in clock_nanosleep (woken by a timer at 7), another task (500) runs 5-6,
    the CPU idles 6-7, 101 runs 7-9 and wakes 100 at 8.5 from inside a system call, then exits;
    100 runs 9-10 and exits."""
    slices = [(100, 100, "main", 0, 0, 2 * MS), (101, 100, "worker", 0, 2 * MS, 5 * MS),
              (500, 500, "other", 0, 5 * MS, 6 * MS), (0, 0, "swapper", 0, 6 * MS, 7 * MS),
              (101, 100, "worker", 0, 7 * MS, 9 * MS), (100, 100, "main", 0, 9 * MS, 10 * MS),
              (0, 0, "swapper", 0, 10 * MS, 11 * MS)]
    states = {(0, 2 * MS): second_wait_state, (0, 5 * MS): "S", (0, 6 * MS): "S", (0, 7 * MS): "R",
              (0, 9 * MS): "X", (0, 10 * MS): "X"}
    rows = {
        "meta": [("kernel.cpus", "1")],
        "threads": [(100, 100, "main", None, 0, 10 * MS, True), (100, 101, "worker", 100, 1 * MS, 9 * MS, True)],
        "tasks": [(100, 101, "worker", 100, 1 * MS, 9 * MS)],
        "cpu_slices": slices,
        "switches": synthetic.switches_from_slices(slices, states, {}),
        "wakeups": [(7 * MS, 0, 101, 0, 0), (int(8.5 * MS), 0, 100, 0, 101)],
        "syscalls": [(100, 101, 230, "clock_nanosleep", int(4.9 * MS), 7 * MS, 0),
                     (100, 101, 202, *waker_call, 0)],
    }
    return synthetic.make_con(rows)


def test_bursts_blocks_and_dependencies():
    wl = extract.workload(_trace())
    main, worker = wl.program
    assert (main.tid, main.bursts, worker.bursts) == (100, [2 * MS, 1 * MS], [3 * MS, 2 * MS])
    assert [(b.kind, b.duration) for b in worker.blocks] == [(SLEEP, 2 * MS)]  # the timer, not a dependency
    (join,) = main.blocks
    assert join.kind == SYNC and (join.dep.task, join.dep.burst, join.dep.offset) == (1, 1, int(1.5 * MS))
    assert (worker.arrival_dep.task, worker.arrival_dep.burst, worker.arrival_dep.offset) == (0, 0, 1 * MS)
    assert main.recorded == {"arrival_ns": 0, "completion_ns": 10 * MS, "waiting_ns": int(0.5 * MS),
                             "response_ns": 0, "switches": 2, "cpu_ns": 3 * MS}
    assert worker.recorded["waiting_ns"] == 1 * MS  # created at 1 ms, first ran at 2 ms
    assert wl.background == {0: {"cpu_ns": 1 * MS, "stretches": 1, "bin_ns": 10 * MS, "bins": {0: 1 * MS},
                                 "episodes": [(5 * MS, 6 * MS, True)]}}
    assert wl.recorded["makespan_ns"] == 10 * MS and wl.recorded["switches"] == 4


def test_a_join_woken_by_an_exiting_thread_is_a_dependency():
    # the kernel records exit's end, then wakes the joiner from do_exit: still the waker's doing
    wl = extract.workload(_trace(waker_call=("exit", int(8.3 * MS), int(8.4 * MS))))
    assert wl.program[0].blocks[0].kind == SYNC
    wl = extract.workload(_trace(waker_call=("write", int(8.3 * MS), int(8.4 * MS))))
    assert wl.program[0].blocks[0].kind == SLEEP  # woken from user mode: an interrupt, not the thread


def test_uninterruptible_wait_is_io():
    wl = extract.workload(_trace(second_wait_state="D"))
    assert wl.program[0].blocks[0].kind == IO and wl.program[0].blocks[0].dep is None


def test_fifo_replay_reproduces_the_recording():
    wl = extract.workload(_trace())
    res = simulate(wl, spec.make_policy(spec.parse("fifo")))
    done = {st.task.name: st.done_at for st in res.tasks}
    assert done == {"main": 10 * MS, "worker": 9 * MS}
    assert [st.dispatches for st in res.tasks[:2]] == [2, 2]


def test_a_consumer_never_runs_before_its_producer():
    wl = extract.workload(_trace())
    wl.ncpus = 4  # the worker starts at 1 ms on its own CPU: sleeps 4-6, wakes the main thread 1.5 ms later
    for text in ("fifo", "srt", "rr:q=1ms", "default"):
        res = simulate(wl, spec.make_policy(spec.parse(text)), keep_segments=True)
        main_runs = [s for s in res.segments if s.task == 0]
        assert main_runs[-1].start == int(7.5 * MS) and res.tasks[0].done_at == int(8.5 * MS), text


def test_trace_without_kernel_events_is_refused():
    con = synthetic.make_con({"threads": [(1, 1, "p", None, 0, MS, True)]})
    with pytest.raises(OslensError, match="no scheduling records"):
        extract.workload(con)


def test_competitors_are_ready_through_their_bins_then_leave():
    wl = background.competitors(extract.workload(_trace()), 2, replayed=False)
    hogs = [t for t in wl.tasks if t.background]
    assert [(t.arrival, t.until, t.cpus) for t in hogs] == [(0, 10 * MS, (0,))] * 2
    res = simulate(wl, spec.make_policy(spec.parse("rr:q=1ms")))
    assert all(st.done_at == 10 * MS for st in res.tasks if st.background)  # left at 10 ms, work or not
    main = res.tasks[0]
    assert main.done_at > 10 * MS  # it shared the CPU with two always-ready tasks until then


def _spinner_among_wakers(ends_by_idle=False):
    """One CPU: program thread 100 spins 10 ms; another task wakes at 1, 3, 5 and 7 ms and runs
    0.2 ms each time (recorded as the stretches it took the CPU from 100)."""
    wl = Workload([Task(100, "spin", [10 * MS], [], recorded={"waiting_ns": 0})], 1)
    eps = [(k * MS, k * MS + MS // 5, True) for k in (1, 3, 5, 7)]
    wl.background = {0: {"cpu_ns": 4 * MS // 5, "stretches": 4, "bin_ns": 10 * MS, "bins": {0: 4 * MS // 5},
                         "episodes": eps}}
    return wl


def test_replayed_competitor_wakes_at_each_stretch_and_runs_its_length():
    wl = background.competitors(_spinner_among_wakers(), 0)
    (other,) = [t for t in wl.tasks if t.background]
    assert (other.arrival, other.bursts, other.cpus) == (1 * MS, [MS // 5] * 4, (0,))
    assert [(b.kind, b.duration) for b in other.blocks] == [(UNTIL, 3 * MS), (UNTIL, 5 * MS), (UNTIL, 7 * MS)]


def test_replayed_competitor_shares_the_cpu_under_eevdf_not_under_fifo():
    wl = background.competitors(_spinner_among_wakers(), 0)
    eevdf = simulate(wl, spec.make_policy(spec.parse("eevdf:slice=3ms,tick=1ms,parity=1")))
    fifo = simulate(wl, spec.make_policy(spec.parse("fifo")))
    # eevdf: when the spinner's protected slice ends (at a tick) the woken competitor runs its
    # 0.2 ms, so the spinner is dispatched again after them and is late by their 0.8 ms
    assert eevdf.tasks[0].done_at == 10 * MS + 4 * MS // 5 and eevdf.tasks[0].dispatches > 1
    assert eevdf.tasks[1].waiting < 9 * MS
    # FIFO never preempts: the spinner runs through, the competitor's demand waits until 10 ms
    assert (fifo.tasks[0].dispatches, fifo.tasks[0].done_at) == (1, 10 * MS)
    assert fifo.tasks[1].done_at == 10 * MS + 4 * MS // 5


@pytest.mark.parametrize("engine", ["python", "native"])
def test_a_wakeup_reschedules_a_task_past_its_slice_at_once_not_at_the_tick(engine):
    wl = background.competitors(_spinner_among_wakers(), 0)
    now = ENGINES[engine](wl, spec.make_policy(spec.parse("eevdf:slice=1ms,tick=4ms,parity=1")))
    late = ENGINES[engine](wl, spec.make_policy(spec.parse("eevdf:slice=1ms,tick=4ms,wake_resched=0,parity=1")))
    # the spinner is past its 1 ms slice at each wake-up (1, 3, 5, 7 ms): the woken competitor
    # runs at once, the spinner is dispatched 1 + 4 times
    assert [(st.dispatches, st.waiting) for st in now.tasks] == [(5, 4 * MS // 5), (4, 0)]
    assert now.tasks[1].done_at == 7 * MS + MS // 5
    # noticed only at the 4 ms ticks, the competitor waits
    assert late.tasks[1].waiting > 4 * MS and late.tasks[0].dispatches < 5


def test_split_at_yields_moves_dependency_points_to_their_piece():
    from oslens.whatif.workload import YIELD, Block, Dep

    producer = Task(1, "p", [10 * MS, 2 * MS], [Block(MS, SLEEP)])
    consumer = Task(2, "c", [MS, MS], [Block(0, SYNC, Dep(0, 0, 6 * MS))], arrival_dep=Dep(0, 0, 4 * MS))
    late = Task(3, "l", [MS, MS], [Block(0, SYNC, Dep(0, 1, MS))])
    # yields at 4 ms and 8 ms of burst 0; one at offset 0 of burst 1 offers nothing to cut
    kept = extract.split_at_yields([producer, consumer, late], {0: [(0, 8 * MS), (0, 4 * MS), (1, 0)]})
    assert kept == 2
    assert producer.bursts == [4 * MS, 4 * MS, 2 * MS, 2 * MS]
    assert [b.kind for b in producer.blocks] == [YIELD, YIELD, SLEEP]
    assert consumer.arrival_dep == Dep(0, 0, 4 * MS)  # a point at a cut belongs to the piece before
    assert consumer.blocks[0].dep == Dep(0, 1, 2 * MS)
    assert late.blocks[0].dep == Dep(0, 3, MS)


@pytest.mark.parametrize("engine", ["python", "native"])
def test_without_run_to_parity_a_woken_task_preempts_within_the_slice(engine):
    wl = background.competitors(_spinner_among_wakers(), 0)
    specs = {"eevdf": "eevdf:slice=3ms,tick=4ms", "parity": "eevdf:slice=3ms,tick=4ms,parity=1",
             "batch": "batch:slice=3ms,tick=4ms"}
    res = {k: [(st.dispatches, st.waiting) for st in ENGINES[engine](wl, spec.make_policy(spec.parse(t))).tasks]
           for k, t in specs.items()}
    # the default model lets an eligible woken task with an earlier deadline in at once: the
    # competitor waits less and the spinner is switched out more than under RUN_TO_PARITY
    assert res["eevdf"][1][1] < res["parity"][1][1]
    assert res["eevdf"][0][0] > res["parity"][0][0]
    assert res["batch"] == res["parity"]  # SCHED_BATCH: no wake-up preemption at all


def test_since_leaves_out_what_ran_before_it():
    # --validate's launcher runs in the default class until its sched_setattr: the program's clock
    # starts there, so main's first burst is what it ran after 0.5 ms and every time shifts by it
    wl = extract.workload(_trace(), since_ns=MS // 2)
    main, worker = wl.program
    assert wl.origin_ns == MS // 2
    assert (main.bursts, worker.bursts) == ([int(1.5 * MS), MS], [3 * MS, 2 * MS])
    assert main.recorded["completion_ns"] == int(9.5 * MS) and worker.arrival == MS // 2
    assert worker.arrival_dep == Dep(0, 0, MS // 2)  # created 0.5 ms into main's first (clipped) burst
    assert wl.recorded["makespan_ns"] == int(9.5 * MS) and wl.recorded["switches"] == 4
    # a clock starting after main's first slice drops it
    assert extract.workload(_trace(), since_ns=int(2.5 * MS)).program[0].bursts == [MS]


@pytest.mark.parametrize("waits,chosen", [
    ({0: 70, 1: 108, 14: 101}, 1),  # K=1 and K=14 both within 10% of 102: the fewer competitors
    ({0: 50, 3: 80, 9: 120}, 9),  # none within 10%: the closest (|120 - 102| < |80 - 102|)
    ({0: 100, 5: 102}, 0),
])
def test_k_fit_takes_the_fewest_competitors_that_give_the_waiting(monkeypatch, waits, chosen):
    wl = _spinner_among_wakers()
    wl.tasks[0].recorded["waiting_ns"] = 102
    monkeypatch.setattr(background, "_waiting", lambda _wl, k, _m, _r: waits.get(k, 10_000))
    k, fit = background.fit(wl, {})
    assert k == chosen and fit == {"k": chosen, "recorded_waiting_ns": 102, "fitted_waiting_ns": waits[chosen]}
