"""Recording must never kill the program (issue 20, docs/recorder.md "Faults"): a trace on a file
system that fills up. Each test mounts its own small tmpfs under /tmp and always unmounts it."""

import json
import os
import subprocess
import tempfile
from pathlib import Path

import duckdb
import pytest

from conftest import run_oslens

EVENTS = 1_000_000


def _root_with_mount() -> bool:
    return os.geteuid() == 0


pytestmark = pytest.mark.skipif(not _root_with_mount(), reason="mounting a tmpfs needs root")


@pytest.fixture
def small_fs():
    """A 6 MiB tmpfs under /tmp, unmounted and removed whatever the test did."""
    where = Path(tempfile.mkdtemp(prefix="oslens-faults-", dir="/tmp"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=6m", "oslens-test", str(where)], check=True)
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)]).returncode != 0:
            subprocess.run(["umount", "-l", str(where)])
        where.rmdir()


@pytest.fixture(scope="module")
def flood(compile_c):
    return compile_c("fault_flood.c")


def rows(trace, sql):
    con = duckdb.connect()
    tables = Path(trace) / "tables"
    for p in tables.glob("*.parquet"):
        con.execute(f"CREATE VIEW {p.stem} AS SELECT * FROM read_parquet('{p}')")
    return con.execute(sql).fetchall()


def test_disk_full_never_kills_the_program_and_counts_every_event(tmp_path, small_fs, flood):
    want = subprocess.run([flood, "2", str(EVENTS)], capture_output=True, text=True, check=True).stdout
    trace = small_fs / "t"
    proc = run_oslens("record", "--no-kernel", "--no-preload", "-o", trace, "--", flood, "2", str(EVENTS))
    assert proc.stdout == want  # the program's own output, intact; exit status 0 (run_oslens checks)
    recorded = dict(rows(trace, "SELECT tid, count(*) FROM app_events WHERE kind = 'event' AND id = 1 GROUP BY tid"))
    lost = rows(trace, "SELECT \"where\", count, reason FROM lost")
    assert lost, "a 6 MiB file system cannot hold 2 x 32 MB of records"
    by_thread = {}
    for where, count, reason in lost:
        assert reason.startswith("disk full at ") and "recording stopped" in reason, reason
        if where.startswith("thread "):
            by_thread[int(where.split()[1])] = count
        else:  # threads that got no buffer at all
            by_thread.setdefault("no buffer", 0)
            by_thread["no buffer"] += count
    # every flood event is either in the trace or counted as lost, per thread
    for tid in set(recorded) | {t for t in by_thread if t != "no buffer"}:
        assert recorded.get(tid, 0) + by_thread.get(tid, 0) == EVENTS, (tid, recorded, by_thread)
    threads_seen = len(set(recorded) | {t for t in by_thread if t != "no buffer"})
    assert by_thread.get("no buffer", 0) == (2 - threads_seen) * (EVENTS + 1)  # + their "ready" event
    # the thread chunks were cut to their records: nothing sparse is left to fill a copy
    for chunk in (trace / "raw").glob("app-*.osl"):
        assert chunk.stat().st_size < 6 << 20


def test_full_disk_from_the_start_kernel_and_app_losses_counted(tmp_path, small_fs, flood):
    """The file system is past its margin before the run: no buffer can be reserved. The program
    runs untouched, every app event is counted as lost, and the kernel collector stops too."""
    (small_fs / "filler").write_bytes(b"\1" * (4 << 20))
    want = subprocess.run([flood, "2", "20000"], capture_output=True, text=True, check=True).stdout
    trace = small_fs / "t"
    proc = run_oslens("record", "--no-preload", "-o", trace, "--", flood, "2", "20000", check=False)
    assert proc.returncode == 0, proc.stderr
    assert want in proc.stdout
    lost = rows(trace, "SELECT source, \"where\", count, reason FROM lost WHERE reason LIKE 'disk full%'")
    app = [r for r in lost if r[0] == "app"]
    assert sum(r[2] for r in app) == 2 * (20000 + 1), lost
    assert rows(trace, "SELECT count(*) FROM app_events")[0][0] == 0
    meta = json.loads((trace / "meta.json").read_text())
    if meta["kernel"].get("tier_level", 0) > 0:  # kernel events were available
        kernel = [r for r in lost if r[0] == "kernel"]
        assert kernel and all(r[2] > 0 for r in kernel), lost
        assert "disk full" in meta["kernel"].get("write_error", ""), meta["kernel"]
