"""Findings in proportion (issue 21): ranked by the share of the program's thread time they
explain, one finding for many objects of one kind, oslens's own cost last unless it is large."""

from oslens.analysis import findings
from oslens_testing.analysis.synthetic import MS, make_con, switches_from_slices


def _alternating(tid, pid, comm, cpu, other, start, end, every, burst):
    """Slices of `tid` on `cpu` from start to end, preempted every `every` ns for `burst` ns by
    `other` = (tid, pid, comm); the switch states that say the thread was still runnable."""
    slices, states, t = [], {}, start
    while t < end:
        run_end = min(t + every - burst, end)
        slices.append((tid, pid, comm, cpu, t, run_end))
        if run_end >= end:
            break
        states[(cpu, run_end)] = "R"
        slices.append((*other, cpu, run_end, run_end + burst))
        t = run_end + burst
    return slices, states


def test_many_condition_variables_make_one_finding_naming_the_worst():
    # thread a waits at seven condition variables in turn (10-80 ms, its CPU idle) while thread b
    # is preempted by hog [900] 10-90 ms: every wait coincides with preemption
    slices = [(1, 1, "a", 0, 0, 10 * MS), (0, 0, "swapper/0", 0, 10 * MS, 80 * MS), (1, 1, "a", 0, 80 * MS, 100 * MS),
              (2, 1, "b", 1, 0, 10 * MS), (900, 900, "hog", 1, 10 * MS, 90 * MS), (2, 1, "b", 1, 90 * MS, 100 * MS)]
    sync = [("cond", f"0x{k}", 1, 1, (10 + 10 * k) * MS, (20 + 10 * k) * MS - (k == 6), None) for k in range(7)]
    con = make_con({
        "threads": [(1, 1, "a", None, 0, 100 * MS, True), (1, 2, "b", 1, 0, 100 * MS, True)],
        "cpu_slices": slices, "switches": switches_from_slices(slices, {(1, 10 * MS): "R"}, {}), "sync": sync})
    f = findings.findings(con).to_pylist()
    conds = [x for x in f if x["code"] == "sync_preempted"]
    assert len(conds) == 1, [x["title"] for x in conds]
    assert conds[0]["title"].startswith("7 condition variables are dominated by preemption")
    assert conds[0]["subject"] == "cond 0x0"  # the worst: 0x6 waits 1 ns less
    assert "hog [900]" in conds[0]["text"] and "0x1, 0x2, 0x3, …" in conds[0]["text"]
    assert conds[0]["share"] == (70 * MS - 1) / (200 * MS)


def test_the_program_comes_before_oslens_own_cost():
    # WATER-like: a waits 6 ms at a barrier (3% of 200 ms of thread time), while oslens's helper
    # preempts b 200 times a second for 25 µs (0.5%): the barrier is first, oslens last, as an INFO
    b, st = _alternating(2, 1, "b", 1, (950, 1, "oslens-helper"), 0, 100 * MS, 5 * MS, 25_000)
    a = [(1, 1, "a", 0, 0, 50 * MS), (0, 0, "swapper/0", 0, 50 * MS, 56 * MS), (1, 1, "a", 0, 56 * MS, 100 * MS)]
    con = make_con({
        "threads": [(1, 1, "a", None, 0, 100 * MS, True), (1, 2, "b", 1, 0, 100 * MS, True)],
        "cpu_slices": a + b, "switches": switches_from_slices(a + b, st, {}),
        "sync": [("barrier", "bar", 1, 1, 50 * MS, 56 * MS, None), ("barrier", "bar", 1, 2, 56 * MS, 56 * MS, None)]})
    f = findings.findings(con).to_pylist()
    assert f[0]["code"] == "sync_imbalance" and f[0]["subject"] == "barrier bar"
    assert f[0]["severity"] == "info" and f[0]["share"] == 6 * MS / (200 * MS)
    assert f[-1]["code"] == "oslens_cost" and f[-1]["severity"] == "info"
    assert f[-1]["share"] == 20 * 25_000 / (200 * MS)
    assert not any(x["code"] in ("interference", "cpu_hog") and "oslens" in x["subject"] for x in f)


def test_large_tracing_cost_is_a_ranked_warning():
    rows = [findings.finding("info", "oslens_cost", "oslens", "t", "x", 1, 0.01, group=3),
            findings.finding("warning", "oslens_cost", "oslens", "t", "x", 1, 0.08, group=1),
            findings.finding("warning", "preemption", "", "t", "x", 1, 0.06),
            findings.finding("info", "migrations", "", "t", "x", 40, None),
            findings.finding("info", "io_critical", "", "t", "x", 1, 0.02),
            findings.finding("warning", "lost", "", "t", "x", 5, None, group=0)]
    order = [(r["code"], r["share"]) for r in findings.rank(rows)]
    assert order == [("lost", None), ("oslens_cost", 0.08), ("preemption", 0.06), ("io_critical", 0.02),
                     ("migrations", None), ("oslens_cost", 0.01)]


def test_an_interferer_whose_switches_off_were_not_recorded_has_no_invented_cpu_time():
    # python [950], in another PID namespace (pid unknown), preempts b 20 times; its switches off
    # the CPU were never recorded (as on this VM's sandbox), so the trace cannot tell its CPU time
    b, st = _alternating(2, 1, "b", 1, (950, -1, "python"), 0, 100 * MS, 5 * MS, 25_000)
    a = [(1, 1, "a", 0, 0, 100 * MS)]
    switches = [s for s in switches_from_slices(a + b, st, {}) if s[3] != 950]
    con = make_con({
        "threads": [(1, 1, "a", None, 0, 100 * MS, True), (1, 2, "b", 1, 0, 100 * MS, True)],
        "cpu_slices": a + [s for s in b if s[0] != 950], "switches": switches})
    (f,) = [x for x in findings.findings(con).to_pylist() if x["code"] == "interference"]
    assert f["title"] == "python (pid ?, other process) preempted the program 20 times"
    assert "CPU time the trace cannot tell (n/a: its switches off the CPU were not recorded)" in f["text"]
    assert "counted with the tasks whose switches were not recorded" in f["text"] and " 0 ns" not in f["text"]


def test_wakeups_slow_to_reach_a_run_queue_make_a_wakeup_latency_finding():
    # thread a sleeps 10-90 ms; woken at 80, on a run queue only at 86 (sched_wakeup), runs at 90:
    # 6 ms of its 100 ms were the wake-up itself, 4 ms waiting for the CPU
    slices = [(1, 1, "a", 0, 0, 10 * MS), (0, 0, "swapper/0", 0, 10 * MS, 90 * MS), (1, 1, "a", 0, 90 * MS, 100 * MS)]
    con = make_con({
        "threads": [(1, 1, "a", None, 0, 100 * MS, True)], "cpu_slices": slices,
        "switches": switches_from_slices(slices, {}, {})})
    con.execute("ALTER TABLE wakeups ADD COLUMN enqueue_ts_ns BIGINT")  # a kernel-only column
    con.execute("INSERT INTO wakeups (ts, cpu, tid, target_cpu, waker_tid, enqueue_ts_ns) VALUES (?, 1, 1, 0, 5, ?)",
                [80 * MS, 86 * MS])
    f = [x for x in findings.findings(con).to_pylist() if x["code"] == "wakeup_latency"]
    assert len(f) == 1 and f[0]["share"] == 0.06 and f[0]["value"] == 6 * MS
    assert f[0]["text"].startswith("1 wakeup of program threads took 6.00 ms on average (at most 6.00 ms)")
