"""The `threads` table: the kernel's fork and exit times and the name a thread held longest win
over what the recorder's chunks say; oslens's own threads are flagged."""

import numpy as np
import pyarrow as pa

from oslens.store import kernel_fields as kt, kernel_tasks
from oslens.store import threads
from oslens.store.app_tables import AppThread


def tasks_table(rows):
    keys = ["pid", "tid", "comm", "parent_tid", "start_ns", "end_ns", "is_traced", "main_comm", "exec_ns", "is_oslens"]
    return pa.table({k: [r.get(k) for r in rows] for k in keys})


def build(app, extent, tasks, meta=None):
    return {r["tid"]: r for r in threads.build(app, extent, {}, meta or {"pid": 10}, tasks).to_pylist()}


def test_kernel_exit_time_wins_over_an_unclosed_chunk():
    # bash [10] forks a subshell [11] that lives 2-4 ms; its chunk (never closed) ends at 500 ms
    app = [AppThread(10, 10, "bash"), AppThread(11, 11, "bash", ppid=10)]
    extent = (np.array([1, 2_100_000]), np.array([500_000_000, 500_000_000]))
    t = build(app, extent, tasks_table([
        {"pid": 10, "tid": 10, "comm": "bash", "start_ns": 1, "end_ns": 501_000_000, "is_traced": True, "main_comm": "bash"},
        {"pid": 11, "tid": 11, "comm": "bash", "parent_tid": 10, "start_ns": 2_000_000, "end_ns": 4_000_000,
         "is_traced": True, "main_comm": "bash"},
    ]))
    assert (t[11]["start_ns"], t[11]["end_ns"]) == (2_000_000, 4_000_000)
    assert t[10]["end_ns"] == 501_000_000


def test_the_kernel_name_held_longest_wins_over_the_chunk_header():
    # a JVM thread's chunk opened while it was still `java`; the kernel saw it renamed
    app = [AppThread(10, 10, "java"), AppThread(10, 12, "java"), AppThread(10, 13, "a-very-long-thread-name")]
    extent = (np.array([1, 2, 3]), np.array([9, 9, 9]))
    t = build(app, extent, tasks_table([
        {"pid": 10, "tid": 12, "comm": "GC Thread#0", "main_comm": "GC Thread#0", "is_traced": True},
        {"pid": 10, "tid": 13, "comm": "a-very-long-thr", "main_comm": "a-very-long-thr", "is_traced": True},
    ]))
    assert t[10]["name"] == "java" and t[12]["name"] == "GC Thread#0"
    assert t[13]["name"] == "a-very-long-thread-name"  # the recorder's untruncated form of the kernel's


def test_oslens_threads_are_flagged_unless_they_recorded_events():
    app = [AppThread(10, 10, "prog", records=5), AppThread(10, 14, "prog", records=3)]
    extent = (np.array([1, 2]), np.array([9, 9]))
    t = build(app, extent, tasks_table([
        {"pid": 10, "tid": 11, "comm": "oslens-helper", "main_comm": "oslens-helper", "is_traced": True, "is_oslens": True},
        {"pid": 10, "tid": 12, "comm": "prog", "main_comm": "prog", "is_traced": True, "is_oslens": True},  # killed by exec
        {"pid": 10, "tid": 14, "comm": "prog", "main_comm": "prog", "is_traced": True, "is_oslens": True},
        {"pid": 10, "tid": 10, "comm": "prog", "main_comm": "prog", "is_traced": True, "exec_ns": 5},
    ]))
    assert t[11]["is_oslens"] and t[12]["is_oslens"]
    assert not t[14]["is_oslens"] and not t[10]["is_oslens"]
    assert t[10]["exec_ns"] == 5


def test_longest_held_comm_follows_renames_and_exec():
    # 20: `time` 0-10, exec'd `sleep` 10-1000; 21: `java` 5-6 then `GC Thread#0` to 300; 22: one name
    c = kernel_tasks.Comms([(0, 20, kt.NAME_TASK, "time"), (10, 20, kt.NAME_TASK, "sleep"),
                            (5, 21, kt.NAME_TASK, "java"), (6, 21, kt.NAME_TASK, "GC Thread#0"),
                            (3, 22, kt.NAME_TASK, "bash")])
    best, renamed = c.longest(np.array([20, 21, 22, 23]), np.array([0, 5, 3, 0]), np.array([1000, 300, 9, 9]))
    assert best.tolist() == ["sleep", "GC Thread#0", "bash", ""]
    assert renamed.tolist() == [True, True, False, False]


def test_a_process_that_execs_takes_the_new_name(tmp_path):
    # the launcher [30] is `oslens` 0-50 (held), execs `sh` at 50 and exits at 60
    from oslens.store.test_kernel_tables import build as build_kernel, chunk, hi
    recs = [(0, 30, kt.TRACED, 0, 0), (50, 30, kt.EXEC, 30, 0), (60, 30, kt.EXIT, 30, 0)]
    c = chunk(tmp_path, 0, recs, names=[(0, 30, kt.NAME_TASK, "oslens"), (0, 30, kt.NAME_TASK, "sh")])
    t = {r["tid"]: r for r in build_kernel([c], {"pid": 30})["tasks"].to_pylist()}
    assert t[30]["main_comm"] == "sh" and t[30]["exec_ns"] == 50 and not t[30]["is_oslens"]


def test_a_thread_killed_by_its_process_exec_before_it_renamed_is_oslens(tmp_path):
    # P [40] starts thread H [41] (the recorder's helper, still named `bash`), execs at 45; H died at 44.
    # Thread W [42] renamed itself `worker` and also died of the exec: it is the program's.
    from oslens.store.test_kernel_tables import build as build_kernel, chunk, hi
    P, H, W = 40, 41, 42
    recs = [(0, P, kt.TRACED, 0, 0), (10, P, kt.FORK, H | hi(P), P | (kt.CLONE_THREAD << 32)),
            (11, P, kt.FORK, W | hi(P), P | (kt.CLONE_THREAD << 32)), (44, H, kt.EXIT, P, 0), (44, W, kt.EXIT, P, 0),
            (45, P, kt.EXEC, P, 0), (90, P, kt.EXIT, P, 0)]
    names = [(0, P, kt.NAME_TASK, "bash"), (0, H, kt.NAME_TASK, "bash"), (0, W, kt.NAME_TASK, "bash"),
             (0, W, kt.NAME_TASK, "worker"), (0, P, kt.NAME_TASK, "ls")]
    t = {r["tid"]: r for r in build_kernel([chunk(tmp_path, 0, recs, names=names)], {"pid": P})["tasks"].to_pylist()}
    assert t[H]["is_oslens"] and not t[W]["is_oslens"] and not t[P]["is_oslens"]
    assert t[P]["main_comm"] == "ls"
