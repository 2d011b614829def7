"""Machine discovery against fake procfs/sysfs trees (and once against the real machine)."""

from oslens.control import config
from oslens_testing.control import fakesys


def test_project_vm_layout(tmp_path):
    m = config.discover(fakesys.make(tmp_path), probe=False)
    assert m["user"]["root"] and "CAP_SYS_NICE" in m["user"]["capabilities"]
    classes = m["sched"]["classes"]
    assert [c for c in classes if classes[c]["available"]] == ["other", "batch", "idle", "fifo", "rr", "deadline"]
    assert classes["ext"]["reason"] == "sched_ext is not built into this kernel (no /sys/kernel/sched_ext)"
    assert m["sched"]["slice"]["available"] and m["sched"]["slice"]["max_ms"] == 100
    assert m["sched"]["sched_rr_timeslice_ms"]["current"] == 100
    assert m["sched"]["affinity"]["cpus"] == [0, 1, 2, 3]
    mem = m["cgroups"]["controllers"]["memory"]
    assert mem["version"] == 1 and mem["allowed"]
    assert mem["privilege"] == "root (write access to /sys/fs/cgroup/memory/batch)"
    assert m["cgroups"]["v2"]["controllers"] == ["hugetlb"]
    assert m["cgroups"]["controllers"]["io"]["version"] == 1
    assert m["thp"]["modes"] == ["always", "madvise", "never"] and m["thp"]["current"] == "madvise"
    vda = [d for d in m["block"] if d["device"] == "vda"][0]
    assert vda["scheduler"] == "mq-deadline" and vda["read_ahead_kb"] == 128
    assert not m["cpufreq"]["available"] and "no cpufreq driver" in m["cpufreq"]["reason"]


def test_v2_sched_ext_cpufreq(tmp_path):
    m = config.discover(fakesys.make(tmp_path, cgroup="v2", sched_ext="enabled", cpufreq=True), probe=False)
    assert m["sched"]["classes"]["ext"]["available"]
    assert m["sched"]["classes"]["ext"]["scheduler"] == "scx_simple"
    mem = m["cgroups"]["controllers"]["memory"]
    assert mem["version"] == 2 and mem["hierarchy"] == "/sys/fs/cgroup"
    assert m["cgroups"]["v1"] == {}
    assert m["cpufreq"]["available"] and m["cpufreq"]["cpus"][0]["governor"] == "schedutil"


def test_sched_ext_built_but_off(tmp_path):
    m = config.discover(fakesys.make(tmp_path, sched_ext="disabled"), probe=False)
    ext = m["sched"]["classes"]["ext"]
    assert ext["available"] and "run as SCHED_OTHER" in ext["note"]


def test_absent_features_are_reported(tmp_path):
    m = config.discover(fakesys.make(tmp_path, kernel="6.6.30", cgroup="none", thp=False), probe=False)
    assert not m["sched"]["slice"]["available"]
    assert "older than 6.12" in m["sched"]["slice"]["reason"]
    assert m["cgroups"]["controllers"]["memory"]["reason"] == "no memory controller on the cgroup v1 or v2 hierarchy"
    assert not m["thp"]["available"]


def test_unprivileged_user(tmp_path):
    m = config.discover(fakesys.make(tmp_path, root_user=False), probe=False)
    assert not m["user"]["root"] and m["user"]["capabilities"] == []
    assert not m["sched"]["classes"]["fifo"]["allowed"]
    assert m["sched"]["classes"]["batch"]["allowed"]
    assert not m["sched"]["sched_rr_timeslice_ms"]["allowed"]
    assert not m["cgroups"]["controllers"]["memory"]["allowed"]
    assert not m["thp"]["allowed"]
    assert not m["sched"]["nice"]["can_lower"]


def test_real_machine_does_not_fail():
    m = config.discover("/")
    assert m["sched"]["classes"]["other"]["available"]
    assert "current" in m["sched"]["affinity"]


def test_helpers():
    from oslens.control.sysfs import bracketed, format_cpu_list, parse_cpu_list
    assert bracketed("always [madvise] never") == (["always", "madvise", "never"], "madvise")
    assert parse_cpu_list("0-2,5") == [0, 1, 2, 5]
    assert format_cpu_list([0, 1, 2, 5, 7, 8]) == "0-2,5,7-8"
    assert config.kernel_version("6.18.44-fc-v657") == (6, 18)
