"""oslens's own work (the launcher before exec, helper threads) is kept out of the program's
tables and listed once by tasks.oslens_activity."""

from oslens.analysis import breakdown, program, task_kinds, tasks
from oslens_testing.analysis.synthetic import MS, make_con


def trace():
    # oslens launched [100] at 0; held until 8 ms (runnable on no CPU: the gate), PATH search 8-9
    # (two failed execve), exec at 9, the program runs 9-20; its helper thread [101] 10-20
    rows = {
        "meta": [("hostname", "synthetic-host"), ("pid", "100")],
        "threads": [(100, 100, "sh", None, 0, 20 * MS, True), (100, 101, "oslens-helper", 100, 10 * MS, 20 * MS, True)],
        "cpu_slices": [(100, 100, "oslens", 0, 8 * MS, 20 * MS), (101, 100, "oslens-helper", 1, 10 * MS, 11 * MS)],
        "syscalls": [(100, 100, 59, "execve", 8 * MS, 8 * MS + 10, -2), (100, 100, 59, "execve", 8 * MS + 20, 8 * MS + 30, -2),
                     (100, 100, 59, "execve", 8 * MS + 40, 9 * MS + 10, 0), (100, 100, 0, "read", 12 * MS, 12 * MS + 5, 1)],
        "faults": [(1 * MS, 100, 100, 0x1000, 0x1, 6), (15 * MS, 100, 100, 0x2000, 0x1, 6)],
    }
    con = make_con(rows)
    con.execute(f"UPDATE threads SET exec_ns = {9 * MS}, is_oslens = false WHERE tid = 100")
    con.execute("UPDATE threads SET is_oslens = true WHERE tid = 101")
    return con


def test_the_launcher_hold_is_not_the_programs_time():
    con = trace()
    prog = program.program(con)
    assert prog.tids == [100] and prog.start[100] == 9 * MS
    r = breakdown.time_breakdown(con).to_pylist()[0]
    assert r["wall_ns"] == 11 * MS and r["preempted_ns"] == 0
    # the successful execve is the program's (it returns in the program); the failed ones are not
    assert r["syscall_count"] == 2 and r["faults"] == 1


def test_oslens_activity_lists_the_launcher_and_the_helper_once():
    rows = tasks.oslens_activity(trace()).to_pylist()
    assert [(r["what"], r["tid"]) for r in rows] == [(tasks.LAUNCHER, 100), (tasks.HELPER, 101)]
    launcher, helper = rows
    assert (launcher["start_ns"], launcher["end_ns"]) == (0, 9 * MS)
    assert launcher["cpu_ns"] == 1 * MS and launcher["syscalls"] == 2 and launcher["faults"] == 1
    assert helper["cpu_ns"] == 1 * MS


def test_a_helper_killed_before_it_named_itself_is_oslens_in_the_task_table():
    con = trace()
    con.execute("INSERT INTO threads (pid, tid, name, parent_tid, start_ns, end_ns, is_traced, is_oslens) "
                f"VALUES (100, 102, 'sh', 100, {9 * MS}, {9 * MS + 500}, true, true)")
    prog = program.program(con)
    assert 102 not in prog.tids
    assert task_kinds.classify_task(102, 100, "sh", prog)[0] == "oslens"
    assert task_kinds.classify_task(100, 100, "sh", prog)[0] == "program"


def test_only_this_recordings_oslens_command_is_listed():
    con = trace()
    con.execute("UPDATE threads SET parent_tid = 50 WHERE tid = 100")
    con.execute("INSERT INTO threads (pid, tid, name, is_traced, is_oslens) VALUES (50, 50, 'oslens', false, true), "
                "(60, 60, 'oslens', false, true)")  # 60: another oslens run on the machine
    rows = tasks.oslens_activity(con).to_pylist()
    assert [(r["what"], r["tid"]) for r in rows if r["what"] == tasks.COMMAND] == [(tasks.COMMAND, 50)]


def test_another_oslens_run_is_not_this_recordings_cost():
    # [50] is this recording's `oslens` command and [55] its collector (meta oslens_pids); [60],
    # also named oslens, is another oslens run on the machine that happened to preempt the program
    con = trace()
    con.execute("INSERT INTO meta VALUES ('oslens_pids.command', '50'), ('oslens_pids.collector', '55')")
    prog = program.program(con)
    assert prog.oslens_pids == {50, 55}
    assert task_kinds.classify_task(50, 50, "oslens", prog)[0] == "oslens"
    assert task_kinds.classify_task(56, 55, "oslens-collecto", prog)[0] == "oslens"  # a collector thread
    assert task_kinds.classify_task(101, 100, "oslens-helper", prog)[0] == "oslens"  # the helper, in the program
    assert task_kinds.classify_task(60, 60, "oslens", prog) == ("other process", "another oslens run on the machine")
    # a trace that does not name its processes keeps the old rule: every oslens task is oslens
    assert task_kinds.classify_task(60, 60, "oslens", program.program(trace()))[0] == "oslens"
