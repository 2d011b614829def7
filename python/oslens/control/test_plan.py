"""Plan parsing, validation (one explanation per problem) and resolution."""

import pytest

from oslens.control import config, plan
from oslens_testing.control import fakesys


@pytest.fixture
def machine(tmp_path):
    return config.discover(fakesys.make(tmp_path), probe=False)


def test_valid_plan(machine):
    p = plan.loads("""
[global]
memory_max = "512M"
thp = "never"
sched_rr_timeslice_ms = 10
readahead_kb = { vda = 256 }
io_scheduler = { vda = "kyber" }
[phase.default]
class = "other"
[phase.compute]
class = "batch"
slice_ms = 20
nice = 5
affinity = "0-1"
thp_disable = true
[phase.rt]
class = "fifo"
priority = 10
""", machine)
    assert p.errors == [] and p.warnings == []
    assert p.globals == {"memory_max": 512 << 20, "thp": "never", "sched_rr_timeslice_ms": 10,
                         "readahead_kb": {"vda": 256}, "io_scheduler": {"vda": "kyber"}}
    assert p.phases["compute"] == {"class": "batch", "slice_ms": 20, "nice": 5, "affinity": [0, 1], "thp_disable": True}


def test_every_problem_explained(machine):
    p = plan.loads("""
[global]
memory_max = "12x"
thp = "sometimes"
readahead_kb = { sdz = 5 }
colour = 1
[phase.compute]
class = "turbo"
slice_ms = 500
nice = 40
affinity = "0-7"
foo = 1
[phase.rt]
class = "fifo"
[phase.dl]
class = "deadline"
[phase.ext]
class = "ext"
[extra]
""", machine, "bad.toml")
    assert p.errors == [
        "extra: unknown table; a plan has [global] and [phase.NAME] tables",
        "global.memory_max: '12x' is not a size; write bytes or e.g. \"512M\", \"2G\"",
        "global.thp: 'sometimes' is not a THP mode here; use one of always, madvise, never",
        "global.readahead_kb.sdz: no block device 'sdz' here; use one of loop0, vda",
        "global.colour: unknown setting; [global] takes memory_max, memory_high, cpu_max, thp, sched_rr_timeslice_ms, readahead_kb, io_scheduler",
        "phase.compute.class: 'turbo' is not a scheduling class; use one of other, batch, idle, fifo, rr, ext",
        "phase.compute.slice_ms: 500 ms is outside the per-task slice range 0.1-100 ms (the kernel would clamp it); use a value in that range",
        "phase.compute.nice: 40 is not a nice value; use an integer from -20 to 19",
        "phase.compute.affinity: CPUs 4-7 do not exist here (online: 0-3); use online CPUs",
        "phase.compute.foo: unknown setting; a phase takes class, priority, slice_ms, nice, affinity, thp_disable",
        "phase.dl.class: 'deadline' is not supported in plans (it needs runtime/deadline/period and admission control); use 'fifo' or 'rr' with a priority",
        "phase.ext.class: class 'ext' is not available here: sched_ext is not built into this kernel (no /sys/kernel/sched_ext)",
        "phase.rt: class 'fifo' needs a priority (1-99); add priority = 10",
    ]


def test_cpu_max(machine):
    assert plan.loads("[global]\ncpu_max = 0.5\n", machine).globals == {"cpu_max": 0.5}
    assert plan.loads("[global]\ncpu_max = 9\n", machine).errors == [
        "global.cpu_max: 9 is not a CPU cap; give the CPUs the run may use, from 0.01 to 4 (e.g. 0.5 = half of one CPU)"]


def test_class_combinations(machine):
    p = plan.loads("""
[phase.a]
class = "rr"
priority = 5
slice_ms = 3
[phase.b]
class = "batch"
priority = 5
""", machine)
    assert p.errors == [
        "phase.a: slice_ms applies to classes other, batch and idle, not 'rr' (the rr time slice is the global sched_rr_timeslice_ms)",
        "phase.b: priority only applies to classes fifo and rr, not 'batch'; remove it",
    ]


def test_syntax_and_empty(machine):
    assert plan.loads("[phase.x\n", machine, "p.toml").errors[0].startswith("not valid TOML (")
    assert plan.loads("", machine, "p.toml").errors == [
        "the plan sets nothing; add a [phase.default] or [global] table"]
    assert plan.load("/nonexistent/p.toml", machine).errors == [
        "cannot read the plan (No such file or directory); check the path"]


def test_old_kernel_has_no_slice(tmp_path):
    m = config.discover(fakesys.make(tmp_path, kernel="6.6.1"), probe=False)
    p = plan.loads("[phase.compute]\nslice_ms = 10\n", m)
    assert p.errors == ["phase.compute.slice_ms: no per-task slice on this machine: kernel 6.6.1 is older than 6.12: "
                        "no per-task slice (sched_runtime is ignored for fair classes)"]


def test_unprivileged_warnings_and_skipping(tmp_path):
    m = config.discover(fakesys.make(tmp_path, root_user=False), probe=False)
    p = plan.loads("""
[global]
memory_max = "1G"
sched_rr_timeslice_ms = 5
readahead_kb = { vda = 64 }
[phase.default]
class = "other"
[phase.compute]
class = "batch"
slice_ms = 20
nice = 5
[phase.io]
class = "rr"
priority = 3
nice = 0
""", m)
    assert p.errors == []
    assert p.warnings == [
        "global.memory_max: a memory cap needs root (write access to /sys/fs/cgroup/memory/batch); run as root to apply it (skipped)",
        "global.sched_rr_timeslice_ms: sched_rr_timeslice_ms is a global sysctl and needs root; run as root to apply it (skipped)",
        "global.readahead_kb.vda: changing vda's settings needs root; run as root to apply it (skipped)",
        "phase.io.class: class 'rr' needs CAP_SYS_NICE or RLIMIT_RTPRIO > 0; run as root to apply it (skipped: the class stays as it is)",
        "phase.default.nice: phase 'default' has nice 0, lower than phase 'compute''s 5: lowering nice needs "
        "CAP_SYS_NICE or RLIMIT_NICE, so as this user 'default' keeps the nice it has (skipped)",
        "phase.io.nice: phase 'io' has nice 0, lower than phase 'compute''s 5: lowering nice needs "
        "CAP_SYS_NICE or RLIMIT_NICE, so as this user 'io' keeps the nice it has (skipped)",
    ]
    plan.drop_skipped(p)
    assert p.globals == {}
    assert p.phases["io"] == {}
    assert p.phases["compute"] == {"class": "batch", "slice_ms": 20, "nice": 5}
    r = plan.resolve(p, {"class": "other", "nice": 0, "affinity": [0], "thp_disable": False})
    assert [r["phases"][n]["nice"] for n in ("default", "compute", "io")] == [None, 5, None]
    assert r["phases"]["io"]["class"] == "other"


def test_resolve_fills_every_phase(machine):
    p = plan.loads("""
[phase.default]
class = "other"
slice_ms = 3
[phase.compute]
class = "batch"
slice_ms = 20
affinity = [1]
[phase.io]
nice = 2
""", machine)
    base = {"class": "other", "priority": 0, "nice": 0, "affinity": [0, 1, 2, 3], "thp_disable": False}
    r = plan.resolve(p, base)
    ph = r["phases"]
    assert ph["default"] == {"sched": True, "class": "other", "policy": 0, "priority": 0, "slice_ns": 3_000_000,
                             "nice": 0, "affinity": [0, 1, 2, 3], "thp_disable": None}
    assert ph["compute"] == {"sched": True, "class": "batch", "policy": 3, "priority": 0, "slice_ns": 20_000_000,
                             "nice": 0, "affinity": [1], "thp_disable": None}
    # io inherits the default phase's class and slice
    assert ph["io"]["class"] == "other" and ph["io"]["slice_ns"] == 3_000_000 and ph["io"]["nice"] == 2


def test_resolve_leaves_uncontrolled_knobs_alone(machine):
    p = plan.loads("[phase.compute]\nthp_disable = true\n", machine)
    r = plan.resolve(p, {"class": "other", "nice": 0, "affinity": [0], "thp_disable": False})
    assert r["phases"]["default"] == {"sched": False, "affinity": None, "thp_disable": False}
    assert r["phases"]["compute"] == {"sched": False, "affinity": None, "thp_disable": True}


def test_sizes():
    assert plan.parse_size("512M") == 512 << 20
    assert plan.parse_size("1.5G") == 3 << 29
    assert plan.parse_size(4096) == 4096
    assert plan.parse_size("2GiB") == 2 << 30
    assert plan.parse_size("lots") is None
