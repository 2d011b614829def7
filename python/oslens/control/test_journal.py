"""The restore journal against a fake sysfs tree: journal before change, restore after,
recovery of a dead run's journal, refusal to fight another live run."""

import json
import os
import subprocess
import sys

import pytest

from oslens.control import journal
from oslens_testing.control import fakesys
from oslens.errors import OslensError


def test_set_and_restore(tmp_path):
    root = fakesys.make(tmp_path / "root")
    j = journal.Journal(tmp_path / "state")
    rr = root / "proc/sys/kernel/sched_rr_timeslice_ms"
    thp = root / "sys/kernel/mm/transparent_hugepage/enabled"
    assert j.set_file(rr, "10", "sched_rr_timeslice_ms") == "100"
    assert j.set_file(thp, "never", "thp", bracketed=True) == "madvise"
    assert rr.read_text() == "10"
    doc = json.loads(j.path.read_text())
    assert [e["old"] for e in doc["entries"]] == ["100", "madvise"]
    assert j.restore() == []
    assert rr.read_text() == "100" and thp.read_text() == "madvise"
    assert not j.path.exists()


def test_journal_written_before_change(tmp_path):
    root = fakesys.make(tmp_path / "root")
    j = journal.Journal(tmp_path / "state")
    target = root / "sys/block/vda/queue/read_ahead_kb"
    target.chmod(0o444)
    if os.geteuid() == 0:
        target.unlink()
        target.mkdir()
        with pytest.raises(OslensError, match="cannot read"):
            j.set_file(target, "64", "readahead_kb.vda")
    else:
        with pytest.raises(OslensError, match="cannot set readahead_kb.vda to 64"):
            j.set_file(target, "64", "readahead_kb.vda")
    assert j.entries == []


def test_recover_after_kill(tmp_path):
    root = fakesys.make(tmp_path / "root")
    (root / "sys/kernel/tracing/instances").mkdir(parents=True)
    state = tmp_path / "state"
    # a child process journals, changes and is SIGKILLed before it restores
    assert fakesys.journal_then_sigkill(state, [
        f"set_file(Path({str(root / 'proc/sys/kernel/sched_rr_timeslice_ms')!r}), '7', 'sched_rr_timeslice_ms')",
        f"make_cgroup(Path({str(root / 'sys/fs/cgroup/memory/batch/oslens-1')!r}), 'memory_max', plain_dir=True)",
        f"make_tracing_instance(Path({str(root / 'sys/kernel/tracing/instances/oslens-1-stacks')!r}), 'stacks')"]) == -9
    assert fakesys.read(root, "/proc/sys/kernel/sched_rr_timeslice_ms") == "7"
    assert (root / "sys/fs/cgroup/memory/batch/oslens-1").is_dir()
    done, problems = journal.recover(state)
    assert problems == []
    assert done[0].startswith(f"removed ftrace instance {root}/sys/kernel/tracing/instances/oslens-1-stacks (left by oslens tune pid ")
    assert done[1] == f"removed cgroup {root}/sys/fs/cgroup/memory/batch/oslens-1 (left by oslens tune pid {done[1].split()[-1][:-1]})"
    assert done[2].startswith("restored sched_rr_timeslice_ms to 100 (left changed by oslens tune pid ")
    assert not (root / "sys/kernel/tracing/instances/oslens-1-stacks").exists()
    assert fakesys.read(root, "/proc/sys/kernel/sched_rr_timeslice_ms") == "100"
    assert not (root / "sys/fs/cgroup/memory/batch/oslens-1").exists()
    assert os.listdir(state) == []


def test_live_run_is_not_recovered_and_not_fought(tmp_path):
    root = fakesys.make(tmp_path / "root")
    state = tmp_path / "state"
    mine = journal.Journal(state)
    rr = root / "proc/sys/kernel/sched_rr_timeslice_ms"
    mine.set_file(rr, "10", "sched_rr_timeslice_ms")
    assert journal.recover(state) == ([], [])  # the owner (this process) is alive
    other = journal.Journal(state, pid=os.getppid())  # another live process
    with pytest.raises(OslensError, match=r"is already changed by another oslens tune \(pid"):
        other.set_file(rr, "20", "sched_rr_timeslice_ms")
    mine.restore()
    assert rr.read_text() == "100"


def test_restore_is_idempotent_and_ignores_unchanged(tmp_path):
    root = fakesys.make(tmp_path / "root")
    j = journal.Journal(tmp_path / "state")
    rr = root / "proc/sys/kernel/sched_rr_timeslice_ms"
    j.set_file(rr, "100", "sched_rr_timeslice_ms")
    assert j.restore() == [] and j.restore() == []
    assert rr.read_text() == "100"


def test_a_value_changed_by_someone_else_is_left_alone(tmp_path):
    root = fakesys.make(tmp_path / "root")
    j = journal.Journal(tmp_path / "state")
    rr = root / "proc/sys/kernel/sched_rr_timeslice_ms"
    j.set_file(rr, "10", "sched_rr_timeslice_ms")
    rr.write_text("25")  # another program's change
    assert j.restore() == ["sched_rr_timeslice_ms was changed by another program while oslens had it "
                           "(now 25, oslens set 10, it was 100); left as it is"]
    assert rr.read_text() == "25"
    assert not j.path.exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")
def test_a_mount_left_by_a_killed_run_is_unmounted(tmp_path):
    """The labs mount tracefs where it is not mounted; here a tmpfs stands in for it."""
    state, target = tmp_path / "state", tmp_path / "mnt"
    target.mkdir()
    code = (f"import os,signal; from oslens.control import journal; from pathlib import Path\n"
            f"j = journal.Journal(Path({str(state)!r}))\n"
            f"j.mount('tmpfs', Path({str(target)!r}), 'tracefs stand-in')\n"
            f"os.kill(os.getpid(), signal.SIGKILL)\n")
    env = dict(os.environ, PYTHONPATH=os.path.dirname(os.path.dirname(os.path.dirname(journal.__file__))))
    try:
        assert subprocess.run([sys.executable, "-c", code], env=env).returncode == -9
        assert str(target) in journal.mount_points()
        done, problems = journal.recover(state)
        assert problems == [] and done[0].startswith(f"unmounted tmpfs from {target} (left by oslens tune pid ")
        assert str(target) not in journal.mount_points()
    finally:
        if str(target) in journal.mount_points():
            subprocess.run(["umount", "-l", str(target)])
