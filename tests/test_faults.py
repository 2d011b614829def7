"""Recording must never kill the program (issue 20, docs/recorder.md "Faults"): a trace on a file
system that fills up. Each test mounts its own small tmpfs under /tmp and always unmounts it."""

import contextlib
import fcntl
import json
import os
import shutil
import struct
import subprocess
import tempfile
import time
from pathlib import Path

import duckdb
import pytest

from conftest import OSLENS, run_oslens

EVENTS = 1_000_000


def _root_with_mount() -> bool:
    return os.geteuid() == 0


pytestmark = pytest.mark.skipif(not _root_with_mount(), reason="mounting a tmpfs needs root")


def _tmpfs(size: str):
    """A tmpfs under /tmp, unmounted and removed whatever the test did."""
    where = Path(tempfile.mkdtemp(prefix="oslens-faults-", dir="/tmp"))
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "oslens-test", str(where)], check=True)
    try:
        yield where
    finally:
        if subprocess.run(["umount", str(where)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(where)], capture_output=True)
        where.rmdir()


@pytest.fixture
def small_fs():
    yield from _tmpfs("6m")


@pytest.fixture
def roomy_fs():
    yield from _tmpfs("64m")


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
    """The file system is nearly past its margin before the run: at most a thread's small first
    chunk fits. The program runs untouched, every app event is recorded or counted as lost, and
    the kernel collector stops too."""
    (small_fs / "filler").write_bytes(b"\1" * (4 << 20))
    want = subprocess.run([flood, "2", "20000"], capture_output=True, text=True, check=True).stdout
    trace = small_fs / "t"
    proc = run_oslens("record", "--no-preload", "-o", trace, "--", flood, "2", "20000", check=False)
    assert proc.returncode == 0, proc.stderr
    assert want in proc.stdout
    lost = rows(trace, "SELECT source, \"where\", count, reason FROM lost WHERE reason LIKE 'disk full%'")
    app = [r for r in lost if r[0] == "app"]
    recorded = rows(trace, "SELECT count(*) FROM app_events WHERE kind = 'event'")[0][0]
    # a thread's small first chunk (growth) may fit; its ring, past the margin, does not
    assert recorded + sum(r[2] for r in app) == 2 * (20000 + 1), (recorded, lost)
    assert recorded < 2 * 20000
    meta = json.loads((trace / "meta.json").read_text())
    if meta["kernel"].get("tier_level", 0) > 0:  # kernel events were available
        kernel = [r for r in lost if r[0] == "kernel"]
        assert kernel and all(r[2] > 0 for r in kernel), lost
        assert "disk full" in meta["kernel"].get("write_error", ""), meta["kernel"]


MEMCG_ROOT = Path("/sys/fs/cgroup/memory")


@pytest.fixture
def memcg():
    """A cgroup v1 memory cgroup capped at 128 MiB, removed whatever the test did."""
    if not (MEMCG_ROOT / "memory.limit_in_bytes").exists():
        pytest.skip("no cgroup v1 memory controller")
    cg = MEMCG_ROOT / f"oslens-test-{os.getpid()}-{time.monotonic_ns()}"
    cg.mkdir()
    try:
        (cg / "memory.limit_in_bytes").write_text(str(128 << 20))
        yield cg
    finally:
        for pid in (cg / "cgroup.procs").read_text().split():  # none left normally
            try:
                (MEMCG_ROOT / "cgroup.procs").write_text(pid)
            except OSError:
                pass
        for _ in range(50):
            try:
                cg.rmdir()
                break
            except OSError:
                time.sleep(0.1)


def in_cgroup(cg, *command):
    """The command moved into `cg` before it runs (only the program, not oslens record)."""
    return ["sh", "-c", f'echo $$ > {cg}/cgroup.procs && exec "$@"', "sh", *map(str, command)]


def oom_kills(cg) -> int:
    return int(dict(l.split() for l in (cg / "memory.oom_control").read_text().splitlines())["oom_kill"])


def test_flood_under_a_memory_cap_with_the_trace_in_memory_is_never_oom_killed(memcg, flood, tmp_path):
    """A trace on tmpfs is resident and charged to the program's cgroup: the recorder sizes the
    buffers to a quarter of the headroom, so the flood runs on, its losses counted."""
    shm = Path(tempfile.mkdtemp(prefix="oslens-faults-", dir="/dev/shm"))
    try:
        trace = shm / "t"
        proc = run_oslens("record", "--no-kernel", "--no-preload", "-o", trace, "--",
                          *in_cgroup(memcg, flood, 2, 3_000_000, 64), check=False)
        assert proc.returncode == 0, proc.stderr
        assert "own pages intact 16384 of 16384" in proc.stdout
        assert oom_kills(memcg) == 0
        assert json.loads((trace / "meta.json").read_text())["exit"] == {"code": 0}
        recorded = dict(rows(trace, "SELECT tid, count(*) FROM app_events WHERE kind = 'event' AND id = 1 GROUP BY tid"))
        lost = rows(trace, "SELECT \"where\", count, reason FROM lost")
        dropped = {int(w.split()[1]): c for w, c, r in lost if w.startswith("thread ")}
        assert recorded and all(recorded[t] + dropped.get(t, 0) == 3_000_000 for t in recorded), (recorded, lost)
        # the buffers were sized to fit: 2 x 64 MiB would not have
        assert sum(recorded.values()) * 32 < 64 << 20
    finally:
        shutil.rmtree(shm, ignore_errors=True)


def test_program_using_most_of_its_cap_runs_to_completion_recorded(memcg, flood, tmp_path):
    """100 MiB of the program's own under a 128 MiB cap, a trace on disk: written behind and
    dropped from the page cache as it goes, so the program is neither killed nor starved."""
    trace = tmp_path / "t"
    proc = run_oslens("record", "--no-kernel", "--no-preload", "-o", trace, "--",
                      *in_cgroup(memcg, flood, 2, 1_500_000, 100), check=False)
    assert proc.returncode == 0, proc.stderr
    assert "own pages intact 25600 of 25600" in proc.stdout
    assert oom_kills(memcg) == 0
    recorded = rows(trace, "SELECT count(*) FROM app_events WHERE kind = 'event' AND id = 1")[0][0]
    lost = rows(trace, "SELECT coalesce(sum(count), 0) FROM lost")[0][0]
    assert recorded + lost == 2 * 1_500_000 and recorded > 0


def _children(pid: int) -> list[int]:
    try:
        return [int(c) for c in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]
    except OSError:
        return []


def _wait_for(predicate, timeout=60.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        got = predicate()
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError("timed out")


def _runs(pid: int, program) -> bool:
    """True once `pid` has exec'd `program` (a held child is still oslens's fork before that)."""
    try:
        return os.readlink(f"/proc/{pid}/exe") == str(program)
    except OSError:
        return False


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
    except OSError:
        return ""


def test_record_killed_leaves_the_program_running_to_its_end(tmp_path, flood):
    """SIGKILL of `oslens record` itself: the program is not left held or stopped; it runs on
    and finishes, still recording (the trace is then incomplete: meta.json has no exit)."""
    out = tmp_path / "out"
    with open(out, "w") as f:
        rec = subprocess.Popen([*OSLENS, "record", "--no-kernel", "-o", tmp_path / "t", "--", flood, "2", "1000000", "0", "300"],
                               stdout=f, stderr=subprocess.DEVNULL)
    program = _wait_for(lambda: [c for c in _children(rec.pid) if _runs(c, flood)])[0]
    rec.kill()
    rec.wait()
    state = Path(f"/proc/{program}/stat").read_text().rsplit(")", 1)[1].split()[0]
    assert state in "RSD", state  # running, not stopped (T) nor held
    _wait_for(lambda: "own pages intact" in out.read_text())
    assert out.read_text().count(" sum ") == 2
    assert "exit" not in json.loads((tmp_path / "t" / "meta.json").read_text())


def test_killed_kernel_collector_counts_kernel_losses_from_then(tmp_path, flood):
    out = tmp_path / "out"
    trace = tmp_path / "t"
    with open(out, "w") as f:
        rec = subprocess.Popen([*OSLENS, "record", "--no-preload", "-o", trace, "--", flood, "2", "1000000", "0", "300"],
                               stdout=f, stderr=subprocess.PIPE, text=True)
    collector = _wait_for(lambda: [c for c in _children(rec.pid) if "oslens-collector" in _cmdline(c)], timeout=30)[0]
    _wait_for(lambda: [c for c in _children(rec.pid) if _runs(c, flood)])
    os.kill(collector, 9)
    _, err = rec.communicate(timeout=120)
    assert rec.returncode == 0, err
    assert out.read_text().count(" sum ") == 2
    lost = rows(trace, "SELECT source, \"where\", count, reason FROM lost WHERE source = 'kernel'")
    assert [(s, w, c) for s, w, c, _ in lost] == [("kernel", "collector", None)], lost
    assert lost[0][3].startswith("kernel collector died (exit status -9)"), lost


def test_buffer_size_that_cannot_fit_the_cgroup_is_kept_with_a_warning(memcg, flood, tmp_path):
    """--buffer-mb wins over the cgroup's headroom, but says so (prepared buffers are resident)."""
    script = (f"echo $$ > {memcg}/cgroup.procs && exec {OSLENS[0]} record --no-kernel --no-preload --no-import "
              f"--prepare-buffers --buffer-mb 64 -o {tmp_path / 't'} -- {flood} 1 1000")
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    assert f"--buffer-mb 64 does not fit the memory cgroup {memcg}" in proc.stderr
    assert oom_kills(memcg) == 0


def test_trace_file_system_removed_mid_run(roomy_fs, flood, tmp_path):
    """The trace's file system goes away (lazily unmounted) while the program records: the
    program runs on to its end; oslens record says in one line that the trace is gone."""
    out = tmp_path / "out"
    with open(out, "w") as f:
        rec = subprocess.Popen([*OSLENS, "record", "--no-kernel", "-o", roomy_fs / "t", "--", flood, "2", "1000000", "0", "300"],
                               stdout=f, stderr=subprocess.PIPE, text=True)
    _wait_for(lambda: [c for c in _children(rec.pid) if _runs(c, flood)])
    time.sleep(0.3)
    subprocess.run(["umount", "-l", str(roomy_fs)], check=True)
    _, err = rec.communicate(timeout=120)
    assert out.read_text().count(" sum ") == 2 and "own pages intact" in out.read_text()
    assert rec.returncode == 1 and "Traceback" not in err, err
    assert "the program exited with status 0, but its trace" in err and "can no longer be written" in err


@pytest.mark.parametrize("early", [0, 1])
def test_allocation_failures_stop_the_recording_not_the_program(compile_c, early):
    """A real address-space limit (prlimit --as) that the program itself exhausts, then records:
    not one more byte can be mapped or allocated. Before, the recorder's first allocation aborted
    the program (SIGABRT, 'memory allocation of 64 bytes failed'). Now the program runs on with
    its output intact; a thread that had its buffer before (early=1: the main thread) keeps
    recording into it, with no helper thread (its pthread_create fails); a thread that had none
    gets none, and its events are counted lost with the reason."""
    nomem = compile_c("fault_nomem.c")
    command = ["prlimit", f"--as={1 << 30}", nomem, "100000", str(early)]
    want = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert "address space exhausted: yes" in want
    with tempfile.TemporaryDirectory(prefix="oslens-nomem-") as where:
        trace = Path(where) / "t"
        proc = run_oslens("record", "--no-kernel", "--no-preload", "-o", trace, "--", *command)
        assert proc.stdout == want
        recorded = rows(trace, "SELECT count(*) FROM app_events WHERE kind = 'event' AND id = 1")[0][0]
        lost = rows(trace, "SELECT count, reason FROM lost")
        assert recorded == 100_000 * early
        assert [c for c, _ in lost] == [100_000 * (2 - early)], lost
        assert lost[0][1].startswith("out of memory at ") and "recording stopped" in lost[0][1], lost
        if early:  # the main thread's buffer grew after the exhaustion: no stack for the helper thread
            assert "no recorder helper thread ran: the program's threads copied all" in proc.stderr


def test_allocation_failures_in_the_preload_stop_the_recording_not_the_program(compile_c):
    """The same exhausted address space under the preload (record's default): each event is
    taken under the thread's own lock, first locked after the exhaustion, so the preload's lock
    counting may find no memory for its table. Before, the first lock registered a TLS destructor,
    which glibc aborts on when it has no memory, and the table's allocation aborted too; now the
    state is made at thread start and a table that cannot be had sends each acquisition to the
    recorder as one record."""
    nomem = compile_c("fault_nomem.c")
    command = ["prlimit", f"--as={1 << 30}", nomem, "20000", "0"]
    want = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert "address space exhausted: yes" in want
    with tempfile.TemporaryDirectory(prefix="oslens-nomem-") as where:
        trace = Path(where) / "t"
        proc = run_oslens("record", "--no-kernel", "-o", trace, "--", *command, check=False)
        assert proc.returncode == 0 and proc.stdout == want, proc.stderr[-2000:]
        # under the preload both threads recorded before the exhaustion, so both have buffers: every
        # event is kept, and every acquisition is counted (in a table where the thread's malloc arena
        # still had room, else one counter record each)
        events = rows(trace, "SELECT count(*) FROM app_events WHERE kind = 'event' AND id = 1")[0][0]
        counted = rows(trace, "SELECT coalesce(sum(value), 0), count(*) FROM counters WHERE reason = 'lock'")[0]
        lost = rows(trace, "SELECT coalesce(sum(count), 0) FROM lost")[0][0]
        assert events + lost == 2 * 20_000 and events > 0, (events, lost)
        assert counted[0] == 2 * 20_000 - lost and 1 <= counted[1] <= counted[0], (counted, lost)


@pytest.mark.parametrize("preload", [True, False])
def test_thread_started_after_the_memory_ran_out_records_or_counts(compile_c, preload):
    """The program exhausts its address space (prlimit --as), then starts a thread (on a stack
    glibc kept cached), whose every lock and event comes with no memory left. Before, the
    preload's per-thread state registered a thread-local destructor at its first lock, which
    glibc aborts on when it cannot allocate ('failed to register TLS destructor', SIGABRT). Now
    per-thread teardown is a pthread key set at load: exit 0, output intact; the main thread,
    which had its buffer before, keeps every event and every lock acquisition (counted in a
    table, or one counter record each); the new thread gets no buffer, and each of its records
    (an event and a lock count per iteration under the preload) is counted lost with the reason."""
    n = 20_000
    nomem = compile_c("fault_nomem.c")
    command = ["prlimit", f"--as={1 << 30}", nomem, str(n), "1", "1"]
    want = subprocess.run(command, capture_output=True, text=True, check=True).stdout
    assert "address space exhausted: yes" in want
    with tempfile.TemporaryDirectory(prefix="oslens-nomem-") as where:
        trace = Path(where) / "t"
        flags = [] if preload else ["--no-preload"]
        proc = run_oslens("record", "--no-kernel", *flags, "-o", trace, "--", *command, check=False)
        assert proc.returncode == 0 and proc.stdout == want, proc.stderr[-2000:]
        events = rows(trace, "SELECT count(DISTINCT tid), count(*) FROM app_events WHERE kind = 'event' AND id = 1")[0]
        counted = rows(trace, "SELECT coalesce(sum(value), 0) FROM counters WHERE reason = 'lock'")[0][0]
        lost = rows(trace, "SELECT count, reason FROM lost")
        assert events == (1, n), events
        assert counted == (n if preload else 0)
        assert [c for c, _ in lost] == [2 * n if preload else n], lost
        assert lost[0][1].startswith("out of memory at ") and "recording stopped" in lost[0][1], lost


FS_IOC_SHUTDOWN = 0x8004587D  # _IOR('X', 125, __u32): ext4 and xfs "going down"
SHUTDOWN_NOLOGFLUSH = 2


@contextlib.contextmanager
def _ext4_on_loop(where: Path):
    """A 256 MiB ext4 on a loop device (errors=remount-ro), unmounted and its loop device
    detached whatever happened; the caller checks both are gone."""
    image, mnt = where / "ext4.img", where / "mnt"
    with open(image, "wb") as f:
        f.truncate(256 << 20)
    subprocess.run(["mkfs.ext4", "-q", "-F", str(image)], check=True)
    mnt.mkdir()
    subprocess.run(["mount", "-o", "loop,errors=remount-ro", str(image), str(mnt)], check=True)
    try:
        yield mnt
    finally:
        if subprocess.run(["umount", str(mnt)], capture_output=True).returncode != 0:
            subprocess.run(["umount", "-l", str(mnt)], capture_output=True)
        for dev in subprocess.run(["losetup", "-j", str(image)], capture_output=True, text=True).stdout.splitlines():
            subprocess.run(["losetup", "-d", dev.split(":")[0]], capture_output=True)


def _fail_file_system(mnt: Path, how: str):
    if how == "error":  # what ext4 does on finding corruption: journal aborted, read-only
        dev = Path(subprocess.run(["findmnt", "-no", "SOURCE", str(mnt)], capture_output=True, text=True, check=True).stdout.strip()).name
        Path(f"/sys/fs/ext4/{dev}/trigger_fs_error").write_text("oslens test")
    else:  # the disk gone: every later I/O fails with EIO
        fd = os.open(mnt, os.O_RDONLY)
        try:
            fcntl.ioctl(fd, FS_IOC_SHUTDOWN, struct.pack("I", SHUTDOWN_NOLOGFLUSH))
        finally:
            os.close(fd)


@pytest.mark.parametrize("how", ["error", "shutdown"])
def test_trace_file_system_failing_mid_run(flood, tmp_path, how):
    """The trace's ext4 fails while the program records: an ext4 error (remounted read-only) or a
    shutdown (the disk gone). The program runs on to its end with its output and exit status;
    oslens record says in one line that the trace can no longer be written. After the error the
    chunks still read: every event is recorded or counted lost, with the reason."""
    events = 600_000
    want = subprocess.run([flood, "2", str(events)], capture_output=True, text=True, check=True).stdout
    out = tmp_path / "out"
    with _ext4_on_loop(tmp_path) as mnt:
        trace = mnt / "t"
        with open(out, "w") as f:
            rec = subprocess.Popen([*OSLENS, "record", "--no-kernel", "--no-preload", "-o", trace, "--", flood, "2", str(events), "0", "300"],
                                   stdout=f, stderr=subprocess.PIPE, text=True)
        _wait_for(lambda: [c for c in _children(rec.pid) if _runs(c, flood)])
        time.sleep(0.3)
        os.sync()  # the trace's folder and files on disk before the failure (see the copy below)
        _fail_file_system(mnt, how)
        _, err = rec.communicate(timeout=120)
        assert out.read_text() == want
        assert rec.returncode == 1 and "Traceback" not in err, err
        assert "the program exited with status 0, but its trace" in err and "can no longer be written" in err, err
        if how == "error":
            copy = tmp_path / "copy"
            cp = subprocess.run(["cp", "-r", "--sparse=always", str(trace), str(copy)], capture_output=True, text=True)
            if cp.returncode and "Bad message" in cp.stderr:
                # EBADMSG: after the forced error, ext4 found a checksum of its own metadata wrong
                # when it read the folder again (seen once in CI); nothing oslens wrote can be read
                shutil.rmtree(copy, ignore_errors=True)
                copy = None
            else:
                assert cp.returncode == 0, cp.stderr
    assert str(tmp_path / "mnt") not in Path("/proc/mounts").read_text()
    assert subprocess.run(["losetup", "-j", str(tmp_path / "ext4.img")], capture_output=True, text=True).stdout == ""
    if how == "error":
        if copy is None:
            pytest.skip("ext4 reported its own metadata damaged (EBADMSG) after the forced error: the chunks could not be copied")
        run_oslens("import", copy, check=False)
        recorded = dict(rows(copy, "SELECT tid, count(*) FROM app_events WHERE kind = 'event' AND id = 1 GROUP BY tid"))
        lost = rows(copy, "SELECT \"where\", count, reason FROM lost")
        assert lost, "the file system failed while the threads were recording"
        dropped = {int(w.split()[1]): c for w, c, r in lost if w.startswith("thread ")}
        assert all(r.startswith(("file system read-only at ", "I/O error at ")) for _, _, r in lost), lost
        assert len(recorded) == 2 and all(recorded[t] + dropped.get(t, 0) == events for t in recorded), (recorded, lost)


def test_record_inside_a_memory_cap_keeps_the_programs_status_and_says_how_to_import(memcg, flood, tmp_path):
    """oslens record itself under a 128 MiB cap (a container's limit): the flood is recorded,
    the import, which needs more than the cap has, is not started, the one line says how to
    import elsewhere, record exits with the program's status, and nothing is OOM-killed (issue 30)."""
    trace = tmp_path / "t"
    proc = subprocess.run(in_cgroup(memcg, *OSLENS, "record", "--no-preload", "-o", trace, "--", flood, 2, 2_000_000),
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    assert f"the raw trace is whole: run 'oslens import {trace}' where more memory is free" in proc.stderr
    assert "the trace was not imported: the memory cgroup" in proc.stderr
    assert oom_kills(memcg) == 0
    assert not (trace / "tables").exists()
    run_oslens("import", trace)  # outside the cap, the one command the line gave
    recorded = rows(trace, "SELECT count(*) FROM app_events WHERE kind = 'event' AND id = 1")[0][0]
    lost = rows(trace, "SELECT coalesce(sum(count), 0) FROM lost WHERE source = 'app'")[0][0]
    assert recorded + lost == 2 * 2_000_000 and recorded > 0
