"""Lock recording modes (docs/recorder.md "Locks"): by default an uncontended pthread lock
acquisition is counted per thread and lock (lock_counts), a contended one recorded with its
wait; `--sync all` records every one. Kohr et al.'s Table 6 is the same either way, the counts
survive a SIGKILL up to the documented bound, and compare-order refuses a counted trace."""

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import C_DIR, OSLENS, run_oslens

FLUSH_EVERY = 4096  # crates/preload/src/counts.rs


@pytest.fixture(scope="module")
def program(tmp_path_factory):
    out = tmp_path_factory.mktemp("sync_counts") / "sync_counts"
    subprocess.run(["gcc", "-O2", "-o", out, C_DIR / "sync_counts.c", "-lpthread"], check=True)
    return out


def record(trace, *command, mode=None):
    extra = ("--sync", mode) if mode else ()
    return run_oslens("record", "--no-kernel", "-f", "-o", trace, *extra, "--", *command)


def table6(trace):
    import oslens
    from oslens.analysis import sync_summary

    con = oslens.open(trace)
    try:
        rows = sync_summary.sync_summary(con).to_pylist()
        mode = con.execute("SELECT value FROM meta WHERE key = 'settings.sync'").fetchone()[0]
        records = dict(con.execute("SELECT CAST(kind AS VARCHAR), count(*) FROM app_events GROUP BY 1").fetchall())
    finally:
        con.close()
    return rows, mode, records


def test_table6_is_the_same_whether_uncontended_locks_are_counted_or_recorded(tmp_path, program):
    got = {}
    for mode in ("contended", "all"):
        proc = record(tmp_path / mode, program, "plain", mode=None if mode == "contended" else mode)
        expected = json.loads(proc.stdout)
        got[mode] = table6(tmp_path / mode)
    (counted, mode_c, rec_c), (recorded, mode_a, rec_a) = got["contended"], got["all"]
    assert (mode_c, mode_a) == ("contended", "all")
    # one contended acquisition recorded by default (request, acquire, release); every one with --sync all
    assert rec_c["lock_acquire"] == expected["c_contended"]
    assert rec_a["lock_acquire"] == rec_a["lock_request"] == sum(v for k, v in expected.items() if k != "c_contended")
    # objects are addresses, which differ from run to run: compare the rows by their count,
    # which the program makes distinct per object
    by_count = [{r["count"]: r for r in rows if r["object"] != "(all)"} for rows in (counted, recorded)]
    assert set(by_count[0]) == set(by_count[1]) == {expected[k] for k in ("a", "b", "rw", "d", "c")}
    stats = ("count", "threads", "wait_mean_ns", "wait_var_ns2", "wait_max_ns")
    for n in (expected["a"], expected["b"], expected["rw"], expected["d"]):
        assert [by_count[0][n][s] for s in stats] == [by_count[1][n][s] for s in stats] == [n, 1, 0.0, 0.0, 0]
    # the lock taken once free and once contended: a zero wait and one wait w, in both modes
    # exactly mean w/2 and population variance w^2/4
    for table in by_count:
        c = table[expected["c"]]
        w = c["wait_max_ns"]
        assert w > 0 and c["threads"] == 2
        assert c["wait_mean_ns"] == w / 2 and c["wait_var_ns2"] == pytest.approx(w * w / 4, rel=1e-12)
    totals = [next(r for r in rows if r["object"] == "(all)" and r["kind"] == "mutex") for rows in (counted, recorded)]
    assert totals[0]["count"] == totals[1]["count"] == sum(v for k, v in expected.items() if k != "c_contended")


def test_counts_equal_every_recorded_acquisition_of_a_contended_program(tmp_path):
    """auto_sync: 4 threads contending on one mutex; default counts + recorded rows = --sync all's rows."""
    prog = tmp_path / "auto_sync"
    subprocess.run(["gcc", "-O2", "-o", prog, C_DIR / "auto_sync.c", "-lpthread"], check=True)
    import oslens

    totals = {}
    for mode in ("contended", "all"):
        proc = record(tmp_path / mode, prog, 4, 300, 3, mode=mode)
        want = json.loads(proc.stdout)["lock_acquire"]
        con = oslens.open(tmp_path / mode)
        rows = con.execute("SELECT count(*) FROM sync WHERE kind = 'mutex'").fetchone()[0]
        counted = con.execute("SELECT coalesce(sum(count), 0) FROM lock_counts").fetchone()[0]
        con.close()
        totals[mode] = (rows + counted, want)
        if mode == "all":
            assert counted == 0
    assert totals["contended"][0] == totals["contended"][1] == totals["all"][0] == totals["all"][1] == 4 * 301


def test_a_thread_taking_more_locks_than_its_table_holds_stays_exact_in_few_records(tmp_path, program):
    """1,000 heap mutexes taken 20 times each in a row (more objects than a thread's count table
    holds: Node's main thread counted 656): every count exact, and about one counter record per
    object, not one per acquisition once the table is full (16,000 records before)."""
    import oslens

    n, k = 1000, 20
    proc = record(tmp_path / "t", program, "many", n, k)
    want = json.loads(proc.stdout)
    con = oslens.open(tmp_path / "t")
    try:
        per_object = dict(con.execute("SELECT object, sum(count) FROM lock_counts GROUP BY object").fetchall())
        records = con.execute("SELECT sum(records) FROM lock_counts").fetchone()[0]
    finally:
        con.close()
    # the static lock `a` too, counted across every refill of the table
    assert sorted(per_object.values()) == sorted([k] * want["objects"] + [want["a"]])
    assert records < 2 * n


def _children(pid):
    try:
        return [int(p) for p in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _state(pid):
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


@pytest.mark.parametrize("how,n,want", [("block", 10_000, 10_000), ("sleep", 10_000, 2 * FLUSH_EVERY),
                                        ("lock", 10_000, 10_001)])  # + the main thread taking the lock the other waits for
def test_sigkill_loses_only_the_counts_since_the_last_flush(tmp_path, program, how, n, want):
    """A thread blocked in a wrapped wait has flushed every count; one killed while running
    loses those since its last flush (every FLUSH_EVERY acquisitions): here n mod FLUSH_EVERY.
    A thread killed asleep in a contended lock leaves its wait censored: no acquire, and marked."""
    trace = tmp_path / "t"
    rec = subprocess.Popen([*OSLENS, "record", "--no-kernel", "-f", "-o", str(trace), "--", str(program), "kill", str(n), how],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert rec.stdout.readline().strip() == "ready"
        deadline = time.monotonic() + 30
        while not _children(rec.pid) and time.monotonic() < deadline:
            time.sleep(0.01)
        (child,) = _children(rec.pid)
        while _state(child) != "S" and time.monotonic() < deadline:  # asleep in sem_wait / sleep
            time.sleep(0.01)
        os.kill(child, signal.SIGKILL)
        rec.communicate(timeout=120)
    finally:
        if rec.poll() is None:
            rec.kill()
            rec.wait()
    import oslens

    con = oslens.open(trace)
    counted = con.execute("SELECT coalesce(sum(count), 0) FROM lock_counts").fetchone()[0]
    waits = con.execute("SELECT acquire_ns IS NULL, wait_censored FROM sync WHERE kind = 'mutex'").fetchall()
    con.close()
    assert counted == want
    assert waits == ([(True, True)] if how == "lock" else [])


def test_compare_order_refuses_a_trace_without_every_acquisition(tmp_path, program):
    record(tmp_path / "a", program, "plain")
    record(tmp_path / "b", program, "plain")
    proc = run_oslens("compare-order", tmp_path / "a", tmp_path / "b", check=False)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "--sync contended" in lines[0] and "oslens record --sync all" in lines[0]
    # regions and events need no lock acquisitions: still compared
    proc = run_oslens("compare-order", "--include", "regions", tmp_path / "a", tmp_path / "b", check=False)
    assert proc.returncode == 0, proc.stderr
