"""Intervals end where their evidence ends: lone block requests, system calls whose exit was not
recorded and lock waits whose acquire was lost never run to the thread's end."""

from oslens.analysis import breakdown, states
from oslens_testing.analysis.synthetic import MS, make_con, switches_from_slices


def one_thread(slices, sw_states, **tables):
    """Thread 100 alive 0-100 ms, its CPU slices (start, end) on CPU 0 and the state it left
    each in (by the slice's end)."""
    rows = {"meta": [("hostname", "synthetic-host")], "threads": [(100, 100, "main", None, 0, 100 * MS, True)]}
    sl = []
    t = 0
    for s, e in slices:
        if s > t:
            sl.append((0, 0, "swapper/0", 0, t, s))
        sl.append((100, 100, "main", 0, s, e))
        t = e
    sl.append((0, 0, "swapper/0", 0, t, 100 * MS))
    rows["cpu_slices"] = sl
    rows["switches"] = switches_from_slices(sl, {(0, e): st for (s, e), st in zip(slices, sw_states)}, {})
    rows.update(tables)
    return make_con(rows)


def with_enqueue(con, wakeups):
    """Fills `wakeups` with its kernel-only column enqueue_ts_ns, which only kernel chunks give."""
    con.execute("ALTER TABLE wakeups ADD COLUMN enqueue_ts_ns BIGINT")
    con.executemany("INSERT INTO wakeups (ts, cpu, tid, target_cpu, waker_tid, enqueue_ts_ns) VALUES (?, ?, ?, ?, ?, ?)",
                    wakeups)


def row(con):
    return breakdown.time_breakdown(con).to_pylist()[0]


def check_sum(r):
    assert sum(r[c] for c in breakdown.TIME_COLUMNS) == r["wall_ns"]


def test_a_block_request_without_completion_is_io_wait_only_while_in_D():
    # issued at 5 ms, never completed; the thread sleeps in 'S' (a futex) 10-90, in 'D' 92-95
    con = one_thread([(0, 10 * MS), (90 * MS, 92 * MS), (95 * MS, 100 * MS)], ["S", "D", "R"],
                     block_io=[(5 * MS, None, "254:0", 8, 4096, "R", 100)])
    r = row(con)
    assert r["io_wait_ns"] == 3 * MS
    assert r["sleeping_ns"] == 80 * MS
    check_sum(r)


def test_a_completed_request_in_flight_is_io_wait_while_asleep():
    con = one_thread([(0, 10 * MS), (90 * MS, 100 * MS)], ["S"], block_io=[(5 * MS, 30 * MS, "254:0", 8, 4096, "R", 100)])
    r = row(con)
    assert r["io_wait_ns"] == 20 * MS and r["sleeping_ns"] == 60 * MS
    check_sum(r)


def test_a_syscall_without_exit_leaves_on_cpu_time_unknown_until_the_next_call():
    # read entered at 2 ms with no exit; getpid 50-51 on a CPU; the thread computes 0-100
    con = one_thread([(0, 100 * MS)], [], syscalls=[(100, 100, 0, "read", 2 * MS, None, None),
                                                    (100, 100, 39, "getpid", 50 * MS, 51 * MS, 100)])
    r = row(con)
    assert r["syscalls_ns"] == 1 * MS
    assert r["unknown_ns"] == 48 * MS
    assert r["computation_ns"] == 51 * MS
    assert "system call whose exit was not recorded 48.00 ms" in r["unknown_reason"]
    check_sum(r)


def test_a_lock_wait_whose_acquire_was_lost_ends_at_the_loss():
    # single thread, mutex request at 10 ms, buffer full from there on (acquire lost); it computes
    con = one_thread([(0, 100 * MS)], [], sync=[("mutex", "m", 100, 100, 2 * MS, 3 * MS, 4 * MS),
                                                ("mutex", "m", 100, 100, 10 * MS, None, None)])
    con.execute("UPDATE threads SET lost_events = 500")
    r = row(con)
    assert r["sync_wait_ns"] == 1 * MS
    assert r["computation_ns"] == 99 * MS
    assert states.timelines(con)[100].lost_acquires == 1
    assert any("lost their acquire" in n for n in breakdown.notes(con))
    check_sum(r)


def test_an_open_wait_without_loss_is_a_wait_only_while_asleep_until_the_next_record():
    # cond wait entered at 10 ms, never returned: the thread sleeps 20-100 (killed at exit)
    con = one_thread([(0, 20 * MS)], ["S"], sync=[("cond", "c", 100, 100, 10 * MS, None, None)])
    r = row(con)
    assert r["sync_wait_ns"] == 80 * MS
    assert r["unknown_ns"] == 10 * MS and "acquire was not recorded" in r["unknown_reason"]
    check_sum(r)


def test_unknown_without_a_switch_state_says_why():
    con = one_thread([(0, 10 * MS)], [""])
    r = row(con)
    assert r["unknown_ns"] == 90 * MS
    assert r["unknown_reason"] == "left its CPU with no switch record saying in which state 90.00 ms"


def test_a_slice_whose_switch_in_was_lost_is_unknown_over_its_window_not_preempted():
    # preempted at 10 ms; the switch back on was not recorded (a task the kernel does not deliver
    # ran in between); switched off again at 50 ms: 10-50 ms it was on a CPU for an unknown part
    rows = {"meta": [("hostname", "synthetic-host")], "threads": [(100, 100, "main", None, 0, 100 * MS, True)],
            "cpu_slices": [(100, 100, "main", 0, 0, 10 * MS, False), (100, 100, "main", 0, 10 * MS, 50 * MS, True),
                           (100, 100, "main", 0, 60 * MS, 100 * MS, False)],
            "switches": [(10 * MS, 0, 100, 100, "main", "R", 7, 7, "other"), (50 * MS, 0, 100, 100, "main", "S", 0, 0, "idle"),
                         (60 * MS, 0, 0, 0, "idle", "R", 100, 100, "main")],
            "kernel_lost": [("kernel collector", "cpu 0", 3)]}
    r = row(make_con(rows))
    assert r["computation_ns"] == 50 * MS and r["sleeping_ns"] == 10 * MS and r["preempted_ns"] == 0
    assert r["unknown_reason"] == "on a CPU for part of this time: the switch onto it was not recorded 40.00 ms"
    check_sum(r)


def test_a_switch_in_the_kernel_never_emitted_is_unknown_only_until_the_threads_first_record_on_that_cpu():
    # as above, but the collector lost nothing (the kernel's own stream lacks the switch, as for
    # this VM's agent thread) and the thread wrote records: on CPU 1 at 11 ms (not where the
    # slice is, so no evidence), then on CPU 0 at 12 ms and 30 ms: it ran from 12 ms on
    rows = {"meta": [("hostname", "synthetic-host")], "threads": [(100, 100, "main", None, 0, 100 * MS, True)],
            "cpu_slices": [(100, 100, "main", 0, 0, 10 * MS, False), (100, 100, "main", 0, 10 * MS, 50 * MS, True),
                           (100, 100, "main", 0, 60 * MS, 100 * MS, False)],
            "switches": [(10 * MS, 0, 100, 100, "main", "R", 7, 7, "tokio-rt-worker"),
                         (50 * MS, 0, 100, 100, "main", "S", 0, 0, "idle"), (60 * MS, 0, 0, 0, "idle", "R", 100, 100, "main")],
            "app_events": [(11 * MS, 100, 100, 1, None, "event", 0), (12 * MS, 100, 100, 0, None, "event", 0),
                           (30 * MS, 100, 100, 0, None, "event", 0)]}
    con = make_con(rows)
    r = row(con)
    assert r["unknown_ns"] == 2 * MS
    assert r["unknown_reason"] == ("on a CPU for part of this time: the kernel emitted no switch onto it (its own stream "
                                   "lacks it; the collector lost nothing) 2.00 ms")
    assert r["computation_ns"] == 88 * MS and r["sleeping_ns"] == 10 * MS and r["preempted_ns"] == 0
    assert r["cpu_slices"] == 3
    assert any("the kernel emitted no switch onto it" in n for n in breakdown.notes(con))
    check_sum(r)
    # a system call's entry is evidence too (it has no CPU: the thread ran nowhere else meanwhile)
    con.execute("DELETE FROM app_events")
    con.execute("INSERT INTO syscalls (pid, tid, nr, name, start_ns, end_ns) VALUES (100, 100, 39, 'getpid', 20000000, 20001000)")
    states._CACHE.clear()
    r = row(con)
    assert r["unknown_ns"] == 10 * MS and r["syscalls_ns"] == 1000
    check_sum(r)


def test_the_recorders_pauses_and_close_are_instrumentation_not_the_programs_io_wait():
    # 0-10 computes; 10-30 a recorder pause writing a chunk (its write waits for the disk: D
    # 12-28); 30-80 sleeps; from 90 (the close's clock_pair, the thread's last record) to its exit
    # call at 97 the recorder flushes the thread's records, again waiting in D 91-96
    con = one_thread([(0, 12 * MS), (28 * MS, 30 * MS), (80 * MS, 91 * MS), (96 * MS, 100 * MS)], ["D", "S", "D", "R"],
                     pauses=[(100, 100, 10 * MS, 30 * MS, 20 * MS, "copy out")],
                     block_io=[(12 * MS, 28 * MS, "254:0", 8, 4096, "WS", 100), (91 * MS, 96 * MS, "254:0", 9, 4096, "WS", 100)],
                     app_events=[(5 * MS, 100, 100, 0, None, "lock_request", 1), (90 * MS, 100, 100, 0, None, "clock_pair", 1)],
                     syscalls=[(100, 100, 60, "exit", 97 * MS, None, None)])
    r = row(con)
    assert r["io_wait_ns"] == 0, r
    assert r["instrumentation_ns"] == 20 * MS + 7 * MS
    assert r["computation_ns"] == 10 * MS + 10 * MS and r["sleeping_ns"] == 50 * MS
    check_sum(r)


def test_time_after_a_wakeup_is_waiting_for_a_cpu_not_the_wait():
    # in 'D' from 10 ms, woken at 40 (sched_waking), on a CPU again at 50; asleep in 'S' from 60,
    # woken at 80, running at 90: the kernel's run_delay counts 40-50 and 80-90 too
    con = one_thread([(0, 10 * MS), (50 * MS, 60 * MS), (90 * MS, 100 * MS)], ["D", "S", "R"],
                     wakeups=[(40 * MS, 0, 100, 0, 7), (80 * MS, 0, 100, 0, 7)])
    r = row(con)
    assert (r["io_wait_ns"], r["sleeping_ns"], r["preempted_ns"]) == (30 * MS, 20 * MS, 20 * MS)
    check_sum(r)


def test_a_wakeup_before_the_thread_left_its_cpu_changes_nothing():
    # woken at 9 ms while still running (a wake-up that raced the sleep), then in 'S' 10-90
    con = one_thread([(0, 10 * MS), (90 * MS, 100 * MS)], ["S"], wakeups=[(9 * MS, 0, 100, 0, 7)])
    r = row(con)
    assert (r["sleeping_ns"], r["preempted_ns"]) == (80 * MS, 0)
    check_sum(r)


def test_from_a_wakeup_to_its_enqueue_is_wakeup_latency_then_waiting_for_a_cpu():
    # asleep in 'S' from 10 ms, woken at 40 (sched_waking), on a run queue at 44 (sched_wakeup),
    # on a CPU at 50; a second wakeup at 80 has no enqueue recorded: preempted until it runs
    con = one_thread([(0, 10 * MS), (50 * MS, 60 * MS), (90 * MS, 100 * MS)], ["S", "S", "R"])
    with_enqueue(con, [(40 * MS, 0, 100, 0, 7, 44 * MS), (80 * MS, 0, 100, 0, 7, None)])
    r = row(con)
    assert (r["sleeping_ns"], r["wakeup_latency_ns"], r["preempted_ns"]) == (50 * MS, 4 * MS, 16 * MS)
    check_sum(r)
