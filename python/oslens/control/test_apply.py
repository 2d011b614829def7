"""Applying per-task policies to a thread, and global settings to a fake tree."""

import os
import threading

import pytest

from oslens.control import apply, journal, kernel
from oslens_testing.control import fakesys
from oslens.errors import OslensError


def in_thread(fn):
    out = {}

    def body():
        out["value"] = fn()
    t = threading.Thread(target=body)
    t.start()
    t.join()
    return out["value"]


def test_apply_task_to_calling_thread():
    cpu = min(os.sched_getaffinity(0))  # a CPU this test may run on (not always CPU 0)
    phase = {"sched": True, "class": "batch", "policy": kernel.SCHED_BATCH, "priority": 0,
             "slice_ns": 20_000_000, "nice": 3, "affinity": [cpu], "thp_disable": None}

    def run():
        err, bits = apply.apply_task(phase)
        return err, bits, kernel.sched_getattr(0), kernel.get_affinity(0)
    err, bits, attr, cpus = in_thread(run)
    assert err == 0
    assert attr.cls == "batch" and attr.nice == 3
    assert attr.runtime_ns in (20_000_000, 0)  # 0 on kernels before 6.12
    assert cpus == [cpu]
    d = apply.decode_bits(bits)
    assert d["policy"] == "batch" and d["sched_applied"] and d["affinity_applied"] and d["nice"] == 3
    assert d["slice_us"] == 20_000 and not d["thp_applied"]
    # the process itself is untouched
    assert kernel.sched_getattr(0).cls == "other"


def test_bits_match_rust_vector():
    # the same vector is asserted in crates/recorder/src/adapt.rs
    compute = {"sched": True, "policy": 3, "priority": 0, "slice_ns": 20_000_000, "nice": 5,
               "affinity": [0], "thp_disable": True}
    assert apply.policy_bits(compute, True, True, True) == 0x4E200019F3
    default = {"sched": True, "policy": 0, "priority": 0, "slice_ns": 0, "nice": None}
    assert apply.policy_bits(default, False, False, False, nice=2) == 0x1600


def test_globals_on_fake_v1(tmp_path):
    root = fakesys.make(tmp_path / "root")
    j = journal.Journal(tmp_path / "state")
    st = apply.apply_globals({"sched_rr_timeslice_ms": 10, "thp": "never", "readahead_kb": {"vda": 64},
                              "io_scheduler": {"vda": "kyber"}, "memory_max": 1 << 30}, j, root, pid=42)
    assert fakesys.read(root, "/proc/sys/kernel/sched_rr_timeslice_ms") == "10"
    assert fakesys.read(root, "/sys/kernel/mm/transparent_hugepage/enabled") == "never"
    assert fakesys.read(root, "/sys/block/vda/queue/read_ahead_kb") == "64"
    assert fakesys.read(root, "/sys/block/vda/queue/scheduler") == "kyber"
    assert st.cgroup == root / "sys/fs/cgroup/memory/batch/oslens-42" and st.cgroup_version == 1
    assert fakesys.read(root, "/sys/fs/cgroup/memory/batch/oslens-42/memory.limit_in_bytes") == str(1 << 30)
    assert [c["what"] for c in st.changes] == ["sched_rr_timeslice_ms", "thp", "readahead_kb.vda",
                                               "io_scheduler.vda", "memory_max"]
    assert j.restore() == []
    assert fakesys.read(root, "/proc/sys/kernel/sched_rr_timeslice_ms") == "100"
    assert fakesys.read(root, "/sys/kernel/mm/transparent_hugepage/enabled") == "madvise"
    assert fakesys.read(root, "/sys/block/vda/queue/read_ahead_kb") == "128"
    assert not st.cgroup.exists()


def test_memory_and_cpu_on_v2(tmp_path):
    root = fakesys.make(tmp_path / "root", cgroup="v2")
    j = journal.Journal(tmp_path / "state")
    st = apply.apply_globals({"memory_max": 64 << 20, "cpu_max": 0.25}, j, root, pid=7)
    assert st.cgroup_version == 2
    assert st.cgroups == [root / "sys/fs/cgroup/user.slice/oslens-7"]  # one cgroup for both
    assert fakesys.read(root, "/sys/fs/cgroup/user.slice/oslens-7/memory.max") == str(64 << 20)
    assert fakesys.read(root, "/sys/fs/cgroup/user.slice/oslens-7/cpu.max") == "25000 100000"
    j.restore()
    assert not st.cgroup.exists()


@pytest.mark.parametrize("cgroup,path,name", [("v1", "sys/fs/cgroup/memory/batch/oslens-9", "memory.soft_limit_in_bytes"),
                                               ("v2", "sys/fs/cgroup/user.slice/oslens-9", "memory.high")])
def test_memory_high_is_a_soft_limit_and_restored(tmp_path, cgroup, path, name):
    """memory_high (the labs' throttle-instead-of-kill cap) shares the memory cgroup with
    memory_max, and goes when the journal restores, also from a journal left by a dead run."""
    root = fakesys.make(tmp_path / "root", cgroup=cgroup)
    j = journal.Journal(tmp_path / "state", pid=9)
    st = apply.apply_globals({"memory_max": 64 << 20, "memory_high": 32 << 20}, j, root, pid=9)
    assert st.cgroups == [root / path] and st.cgroup == root / path
    assert fakesys.read(root, f"/{path}/{name}") == str(32 << 20)
    assert [e["what"] for e in j.entries] == ["memory_max"]  # one cgroup, journaled once
    j.doc["starttime"] = -1  # as if the run had been SIGKILLed: recovery removes the cgroup
    j._save()
    done, problems = journal.recover(tmp_path / "state")
    assert problems == [] and done == [f"removed cgroup {root / path} (left by oslens tune pid 9)"]
    assert not (root / path).exists()


def test_cpu_on_v1_is_its_own_hierarchy(tmp_path):
    root = fakesys.make(tmp_path / "root")
    j = journal.Journal(tmp_path / "state")
    st = apply.apply_globals({"memory_max": 64 << 20, "cpu_max": 1.5}, j, root, pid=8)
    assert st.cgroups == [root / "sys/fs/cgroup/memory/batch/oslens-8", root / "sys/fs/cgroup/cpu/oslens-8"]
    assert fakesys.read(root, "/sys/fs/cgroup/cpu/oslens-8/cpu.cfs_quota_us") == "150000"
    assert fakesys.read(root, "/sys/fs/cgroup/cpu/oslens-8/cpu.cfs_period_us") == "100000"
    assert j.restore() == []
    assert st.cgroups[0].exists() is False and st.cgroups[1].exists() is False


def test_memory_v2_needs_subtree_control(tmp_path):
    root = fakesys.make(tmp_path / "root", cgroup="v2")
    (root / "sys/fs/cgroup/user.slice/cgroup.subtree_control").write_text("cpu\n")
    with pytest.raises(OslensError, match=r"echo \+memory > .*/user.slice/cgroup.subtree_control"):
        apply.memory_cgroup_parent(root)


def test_no_memory_controller(tmp_path):
    root = fakesys.make(tmp_path / "root", cgroup="none")
    with pytest.raises(OslensError, match="no memory cgroup controller on this machine"):
        apply.memory_cgroup_parent(root)


def test_failed_global_keeps_earlier_ones_restorable(tmp_path):
    root = fakesys.make(tmp_path / "root")
    j = journal.Journal(tmp_path / "state")
    with pytest.raises(OslensError):
        apply.apply_globals({"sched_rr_timeslice_ms": 10, "readahead_kb": {"nodev": 1}}, j, root)
    assert fakesys.read(root, "/proc/sys/kernel/sched_rr_timeslice_ms") == "10"
    j.restore()
    assert fakesys.read(root, "/proc/sys/kernel/sched_rr_timeslice_ms") == "100"
    assert os.listdir(tmp_path / "state") == []
