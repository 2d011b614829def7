"""Threads that record nothing of their own (issue 22): under the preload their start and end go
to their process's thread ledger in its names chunk, not to chunk files, and the store still
lists every one of them with its start, end and name (docs/recorder.md, "Start-up"). So do a
fork()ed child's fork, exec and exit markers (issue 31)."""

import signal

import pytest

from conftest import dump, kinds_of, meta, run_oslens

IDLE = 20


@pytest.fixture(scope="module")
def prog(compile_c):
    return compile_c("thread_start.c")


def record(tmp_path, prog, *args, kernel=False, check=True):
    trace = tmp_path / "trace"
    proc = run_oslens("record", *([] if kernel else ["--no-kernel"]), "-f", "-o", trace, "--", prog, *args, check=check)
    got = dict(kv.split("=") for kv in proc.stdout.split())
    return trace, proc, int(got["child"]), int(got["late"])


def sql(trace, query):
    import oslens

    con = oslens.open(trace)
    return con.sql(query).fetchall()


def threads(trace):
    return sql(trace, "SELECT pid, tid, name, parent_tid, start_ns, end_ns, source, app_records FROM threads "
               "WHERE is_traced ORDER BY tid")


def app_chunk_writers(trace):
    return sorted(tuple(map(int, p.stem.split("-")[1:3])) for p in (trace / "raw").glob("app-*.osl"))


def test_threads_that_record_nothing_get_no_chunk_file(tmp_path, prog):
    trace, _, child, late = record(tmp_path, prog, IDLE)
    rows = threads(trace)
    main = rows[0][0]
    # chunk files: the two main threads and the thread that recorded an event, nothing else
    assert app_chunk_writers(trace) == sorted([(main, main), (child, child), (main, late)])
    idle = [r for r in rows if r[2] == "idle"]
    assert [r[0] for r in idle] == [main] * IDLE + [child] * 3
    for pid, tid, _name, parent, start, end, source, records in idle:
        assert parent == pid and source == "app" and records == 2  # thread_start, clock pair at its end
        assert start is not None and end is not None and start < end
    assert len(rows) == 2 + IDLE + 3 + 1
    records = dump(trace)
    # one thread_start per thread started, wherever it was kept
    assert kinds_of(records)["thread_start"] == IDLE + 3 + 1
    assert kinds_of(records)["thread_create"] == IDLE + 3 + 1
    # the late thread's chunk opens with its true start, 20 ms before its first record of its own
    mine = [r for r in records if r["tid"] == late]
    assert [r["kind"] for r in mine][:2] == ["thread_start", "event"]
    assert mine[1]["ts"] - mine[0]["ts"] >= 15_000_000
    # meta.json lists every thread too, the ledger's under their names chunk
    assert len(meta(trace)["threads"]) == len(rows)
    assert not meta(trace)["damage"]


def test_killed_program_keeps_the_ledger(tmp_path, prog):
    trace, proc, child, late = record(tmp_path, prog, 5, "kill", check=False)
    assert proc.returncode == 128 + signal.SIGKILL
    rows = threads(trace)
    main = rows[0][0]
    assert app_chunk_writers(trace) == sorted([(main, main), (child, child), (main, late)])
    idle = [r for r in rows if r[0] == main and r[2] == "idle"]
    assert len(idle) == 5 and all(r[4] < r[5] and r[7] == 2 for r in idle)
    # the two threads blocked at the kill: their start is kept (their end is the program's)
    running = [r for r in rows if r[0] == main and r[1] > late]
    assert len(running) == 2 and all(r[4] is not None and r[7] == 1 for r in running)
    assert len(rows) == 2 + 5 + 3 + 1 + 2


def test_ledger_threads_agree_with_the_kernel(tmp_path, prog):
    """The kernel collector sees the same threads, each started before its ledger start and ended
    after its ledger end."""
    trace, _, child, _ = record(tmp_path, prog, 5, kernel=True)
    rows = threads(trace)
    assert {r[0] for r in rows} >= {child}
    assert all(r[6] == "app+kernel" for r in rows), rows
    bounds = sql(trace, """
        SELECT k.tid, k.start_ns, k.end_ns, min(e.ts), max(e.ts)
        FROM app_events e JOIN tasks k ON k.tid = e.tid
        WHERE e.tid <> e.pid AND e.kind IN ('thread_start', 'clock_pair')
        GROUP BY ALL""")
    assert len(bounds) == len(rows) - 2
    for tid, k_start, k_end, first, last in bounds:
        assert k_start <= first and (k_end is None or last <= k_end), tid


EXECS = 6


def test_children_that_record_nothing_but_fork_exec_exit_make_one_file(tmp_path, compile_c):
    """A fork()ed child's fork, exec and exit markers go to its thread ledger (docs/recorder.md,
    "Start-up"): a child that records nothing else makes its names chunk only, and the store,
    `oslens dump` and meta.json show exactly the markers and threads the program's log says."""
    trace = tmp_path / "trace"
    proc = run_oslens("record", "--no-kernel", "-f", "-o", trace, "--", compile_c("fork_markers.c"), EXECS)
    log = [line.split("=") for line in proc.stdout.split()]
    kids = {kind: [int(p) for k, p in log if k == kind] for kind in ("exec", "failed", "xit", "_exit", "record", "killed")}
    assert len(kids["exec"]) == EXECS and all(len(v) == 1 for k, v in kids.items() if k != "exec")
    children = [int(p) for _, p in log]
    files = sorted(p.name for p in (trace / "raw").glob("*.osl"))
    parent = int(files[0].split("-")[1])
    # the parent's chunk and names chunk, a names chunk per child, and the recording child's chunk
    assert files == sorted([f"app-{parent}-{parent}-0.osl", f"names-{parent}-0.osl", f"app-{kids['record'][0]}-{kids['record'][0]}-0.osl"]
                           + [f"names-{c}-0.osl" for c in children])
    records = dump(trace)
    forks = [(r["pid"], r["value"], r["b"]) for r in records if r["kind"] == "process_fork"]
    assert sorted(forks) == sorted([(parent, c, 0) for c in children] + [(c, 0, parent) for c in children])
    execs = [(r["pid"], r["name"], r["value"]) for r in records if r["kind"] == "process_exec"]
    failed, rec = kids["failed"][0], kids["record"][0]
    assert sorted(execs) == sorted([(c, "/bin/true", 0) for c in kids["exec"] + [rec]]
                                   + [(failed, "/nonexistent/prog", 0), (failed, "/nonexistent/prog", 2), (failed, "/bin/true", 0)])
    assert [(r["pid"], r["value"]) for r in records if r["kind"] == "process_exit"] == [(kids["xit"][0], 3)]
    # the recording child's chunk holds its fork marker first, once, then its event and exec
    assert [r["kind"] for r in records if r["pid"] == rec] == ["process_fork", "event", "process_exec"]
    # the killed child keeps its fork marker; the exit()ing child its closing clock pair
    assert [r["kind"] for r in records if r["pid"] == kids["killed"][0]] == ["process_fork"]
    assert [r["kind"] for r in records if r["pid"] == kids["xit"][0] and r["tid"]] == ["process_fork", "process_exit", "clock_pair"]
    rows = sql(trace, "SELECT pid, tid, app_records FROM threads WHERE is_traced ORDER BY tid")
    want = {c: 2 for c in kids["exec"]} | {failed: 4, kids["xit"][0]: 3, kids["_exit"][0]: 1, rec: 3, kids["killed"][0]: 1}
    assert {p: n for p, t, n in rows if p != parent} == want and all(p == t for p, t, _ in rows)
    assert len(meta(trace)["threads"]) == len(rows) and not meta(trace)["damage"]
