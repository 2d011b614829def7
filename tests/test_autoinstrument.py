"""End-to-end tests of automatic instrumentation: unmodified pthread programs under the preload
library, -finstrument-functions builds, processes started by a shell script, and Python
programs (regions, counters, events, the function tracer)."""

import collections
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from conftest import C_DIR, ROOT, VENV, dump, kinds_of, run_oslens

PY = str(VENV / "bin" / "python")


def record(tmp_path, *command, extra=(), env=None, name="trace"):
    trace = tmp_path / name
    proc = run_oslens("record", "--no-kernel", "-f", "-o", trace, *extra, "--", *command, env=env)
    return trace, proc


def open_store(trace):
    import oslens

    return oslens.open(trace)


@pytest.fixture(scope="module")
def cbuild(tmp_path_factory):
    """Plain builds: no oslens header, no -loslens."""
    d = tmp_path_factory.mktemp("auto")
    sync = d / "auto_sync"
    subprocess.run(["gcc", "-O2", "-o", sync, C_DIR / "auto_sync.c", "-lpthread"], check=True)
    lib = d / "libauto_calls_lib.so"
    subprocess.run(["gcc", "-O1", "-fPIC", "-shared", "-finstrument-functions", "-o", lib, C_DIR / "auto_calls_lib.c"], check=True)
    calls = d / "auto_calls"
    subprocess.run(["gcc", "-O1", "-finstrument-functions", "-o", calls, C_DIR / "auto_calls.c", f"-L{d}", "-lauto_calls_lib",
                    f"-Wl,-rpath,{d}"], check=True)
    return {"sync": sync, "calls": calls, "dir": d}


# ---------------------------------------------------------------- pthread synchronisation


@pytest.mark.parametrize("threads,iters,barriers", [(1, 50, 3), (4, 200, 5)])
def test_unmodified_pthread_program_exact_sync_counts(tmp_path, cbuild, threads, iters, barriers):
    trace, proc = record(tmp_path, cbuild["sync"], threads, iters, barriers, extra=("--sync", "all"))
    expected = json.loads(proc.stdout)
    got = kinds_of(dump(trace))
    assert got["lock_acquire"] == expected["lock_acquire"] == threads * (iters + 1)
    assert got["lock_request"] == got["lock_acquire"] == got["lock_release"]
    assert got["barrier_enter"] == got["barrier_exit"] == threads * barriers
    assert got["sem_post"] == got["sem_wait_exit"] == threads
    assert got["thread_create"] == got["thread_start"] == got["thread_join_exit"] == threads

    con = open_store(trace)
    rows = dict(con.sql("select kind, count(*) from sync group by kind").fetchall())
    assert rows.get("mutex") == threads * (iters + 1)
    assert rows.get("barrier") == threads * barriers
    episodes = con.sql("select count(distinct acquire_ns) from sync where kind = 'barrier'").fetchone()[0]
    # Every thread leaves an episode at its own time; the episodes are the entries per thread.
    per_thread = con.sql("select count(*) from sync where kind = 'barrier' group by tid").fetchall()
    assert {n for (n,) in per_thread} == {barriers}
    assert episodes >= barriers
    waits = con.sql("select count(*) from sync where kind = 'mutex' and not (request_ns <= acquire_ns and acquire_ns <= release_ns)").fetchone()[0]
    assert waits == 0


def test_condition_variable_waits_keep_lock_accounting_balanced(tmp_path, cbuild):
    trace, proc = record(tmp_path, cbuild["sync"], "cond", 300, extra=("--sync", "all"))
    assert json.loads(proc.stdout) == {"cond_signal": 300, "consumed": 300}
    records = dump(trace)
    got = kinds_of(records)
    assert got["cond_signal"] == 300
    assert got["cond_wait_enter"] == got["cond_wait_exit"] > 0
    # A wait gives the mutex up and takes it back: every acquisition still has its release.
    for tid in {r["tid"] for r in records if r["kind"] == "lock_acquire"}:
        mine = kinds_of(records, tid=tid)
        assert mine["lock_request"] == mine["lock_acquire"] == mine["lock_release"]
    con = open_store(trace)
    rows = dict(con.sql("select kind, count(*) from sync group by kind").fetchall())
    assert rows.get("cond", 0) == got["cond_wait_enter"]
    assert rows.get("mutex") == got["lock_acquire"] == 300 + 1 + got["cond_wait_exit"]


def test_no_preload_records_no_sync(tmp_path, cbuild):
    trace, _ = record(tmp_path, cbuild["sync"], 2, 10, 1, extra=("--no-preload",))
    assert not (trace / "raw").exists() or kinds_of(dump(trace))["lock_acquire"] == 0


def test_forked_child_is_traced(tmp_path, cbuild):
    trace, proc = record(tmp_path, cbuild["sync"], "fork", extra=("--sync", "all"))
    child = json.loads(proc.stdout)["child"]
    records = dump(trace)
    assert kinds_of(records, pid=child)["lock_acquire"] == 1
    forks = [r for r in records if r["kind"] == "process_fork"]
    assert {r["pid"] for r in forks} == {child, next(r["pid"] for r in forks if r["value"] == child)}


def test_shell_script_running_two_programs_traces_both(tmp_path, cbuild):
    script = tmp_path / "two.sh"
    # The second program is started with an empty environment: the exec wrapper puts
    # OSLENS_TRACE and LD_PRELOAD back.
    script.write_text(f"#!/bin/sh\n{cbuild['sync']} 2 7 2 > /dev/null\nenv -i {cbuild['calls']} > /dev/null\necho done\n")
    script.chmod(0o755)
    trace, proc = record(tmp_path, script, extra=("--sync", "all"))
    assert "done" in proc.stdout
    records = dump(trace)
    sync_pids = {r["pid"] for r in records if r["kind"] == "lock_acquire"}
    func_pids = {r["pid"] for r in records if r["kind"] == "func_entry"}
    assert len(sync_pids) == 1 and len(func_pids) == 1 and sync_pids != func_pids
    assert kinds_of(records, pid=next(iter(sync_pids)))["lock_acquire"] == 2 * 8
    execs = [r for r in records if r["kind"] == "process_exec"]
    assert len(execs) >= 2


# ---------------------------------------------------------------- -finstrument-functions


EXPECTED_TREE = [
    ("main", 0), ("work", 1), ("leaf", 2), ("leaf", 2), ("leaf", 2),
    ("recurse", 1), ("recurse", 2), ("recurse", 3), ("lib_entry", 1), ("lib_twice", 2),
]


def test_instrumented_functions_call_tree_with_names(tmp_path, cbuild):
    trace, _ = record(tmp_path, cbuild["calls"], "fork")
    maps = sorted(p.name for p in (trace / "raw").glob("maps-*.txt"))
    assert len({m.split("-")[1] for m in maps}) == 2, maps  # parent and forked child
    con = open_store(trace)
    pids = [p for (p,) in con.sql("select pid from functions group by pid order by min(begin_ns)").fetchall()]
    assert len(pids) == 2
    rows = con.sql(f"select name, depth, duration_ns, complete from functions where pid = {pids[0]} order by begin_ns").fetchall()
    tree = [(n, d) for n, d, _, _ in rows if n != "tiny"]
    assert tree[: len(EXPECTED_TREE)] == EXPECTED_TREE
    assert tree[len(EXPECTED_TREE):] == [("slow", 1)]
    assert sum(1 for n, *_ in rows if n == "tiny") == 1000
    assert all(c for *_, c in rows)
    slow = next(dur for n, _, dur, _ in rows if n == "slow")
    assert slow >= 1_500_000
    child = con.sql(f"select name, depth from functions where pid = {pids[1]} order by begin_ns").fetchall()
    assert child == [("work", 0), ("leaf", 1), ("leaf", 1), ("leaf", 1)]


def test_minimum_duration_filter_keeps_long_calls_and_their_callers(tmp_path, cbuild):
    env = dict(os.environ, OSLENS_FUNC_MIN_NS="1000000")
    trace, _ = record(tmp_path, cbuild["calls"], env=env)
    got = kinds_of(dump(trace))
    assert got["func_entry"] == got["func_exit"] == 2  # main and slow
    con = open_store(trace)
    assert con.sql("select name, depth from functions order by begin_ns").fetchall() == [("main", 0), ("slow", 1)]


def test_name_filter_at_import(tmp_path, cbuild):
    env = dict(os.environ, OSLENS_FUNC_FILTER="*e*,!leaf")
    trace, _ = record(tmp_path, cbuild["calls"], env=env)
    assert json.loads((trace / "raw" / "autoinstrument.json").read_text())["func_filter"] == "*e*,!leaf"
    con = open_store(trace)
    names = {n for (n,) in con.sql("select distinct name from functions").fetchall()}
    assert names == {"recurse", "lib_entry", "lib_twice"}


# ---------------------------------------------------------------- Python


PY_SCRIPT = textwrap.dedent('''
    import threading
    import oslens.instrument as osl

    def leaf(n):
        return n * 2

    def middle(n):
        with osl.region("inner"):
            return leaf(n) + leaf(n + 1)

    @osl.traced
    def outer():
        return sum(middle(i) for i in range(3))

    def in_thread():
        with osl.region("threaded"):
            leaf(1)

    with osl.region("main"):
        hits = osl.counter("hits")
        hits.add(5)
        osl.event("checkpoint", b"xyz")
        print(outer())
        t = threading.Thread(target=in_thread)
        t.start()
        t.join()
''')


@pytest.mark.parametrize("preload", [True, False])
def test_python_regions_and_function_calls_nest(tmp_path, preload):
    script = tmp_path / "prog.py"
    script.write_text(PY_SCRIPT)
    extra = ("--trace-python", "__main__.*") + (() if preload else ("--no-preload",))
    trace, proc = record(tmp_path, PY, script, extra=extra)
    assert proc.stdout.strip() == "18"
    con = open_store(trace)
    regions = con.sql("select name, depth from regions where tid = (select tid from regions where name = 'main') order by begin_ns").fetchall()
    assert regions == [("main", 0), ("__main__.outer", 1), ("inner", 2), ("inner", 2), ("inner", 2)]
    assert con.sql("select name, depth from regions where name = 'threaded'").fetchall() == [("threaded", 0)]
    funcs = con.sql("select name, depth from functions where tid = (select tid from regions where name = 'main') order by begin_ns").fetchall()
    gen = ("__main__.outer.<locals>.<genexpr>", 2)  # resumed once per item, and once more to finish
    step = [gen, ("__main__.middle", 3), ("__main__.leaf", 4), ("__main__.leaf", 4)]
    assert funcs == [("__main__.<module>", 0), ("__main__.outer", 1), *step, *step, *step, gen]
    threaded = con.sql("select name, depth from functions where tid = (select tid from regions where name = 'threaded') order by begin_ns").fetchall()
    assert threaded == [("__main__.in_thread", 0), ("__main__.leaf", 1)]
    assert con.sql("select count(*) from functions where name = '__main__.in_thread'").fetchone()[0] == 1
    assert con.sql("select max(value) from counters where name = 'hits'").fetchone()[0] == 5
    records = dump(trace)
    assert kinds_of(records)["event"] == 1


def test_python_api_is_a_no_op_without_oslens_record():
    code = "import oslens.instrument as o\nwith o.region('x'):\n    o.counter('c').add(1); o.event('e')\nprint(o.enabled(), o.trace_calls())"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OSLENS_")}
    out = subprocess.run([PY, "-c", code], capture_output=True, text=True, env=env, check=True, cwd=ROOT)
    assert out.stdout.split() == ["False", "False"]


def test_python_filter_excludes(tmp_path):
    script = tmp_path / "prog.py"
    script.write_text("def a():\n    return b()\n\ndef b():\n    return 1\n\nfor _ in range(3):\n    a()\n")
    trace, _ = record(tmp_path, PY, script, extra=("--trace-python", "*,!b"))
    con = open_store(trace)
    names = collections.Counter(n for (n,) in con.sql("select name from functions").fetchall())
    assert names["__main__.a"] == 3 and names["__main__.b"] == 0
