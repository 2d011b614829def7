"""`oslens doctor`: each missing part named with its fix, exit 0 only when everything oslens uses is
there; checked on fake procfs/sysfs trees (machines we do not have, labelled as such: the control
layer's fakesys), on this machine as root (with the measured clock check) and as an unprivileged user."""

import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import OSLENS
from oslens_testing.control import fakesys

FLAGS = "flags\t\t: fpu tsc constant_tsc nonstop_tsc hypervisor\n"


def full_machine(root: Path, **kw) -> Path:
    """A fake machine with everything oslens uses: fakesys's policies plus the recording side."""
    fakesys.make(root, sched_ext="disabled", **kw)
    for path, text in {"/proc/sys/kernel/perf_event_paranoid": "2\n", "/proc/sys/kernel/unprivileged_bpf_disabled": "2\n",
                       "/sys/kernel/btf/vmlinux": "", "/proc/cpuinfo": FLAGS, "/proc/self/ns/time": ""}.items():
        p = root / path.lstrip("/")
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
    return root


def doctor(root: Path, *args) -> subprocess.CompletedProcess:
    return subprocess.run([*OSLENS, "doctor", *args], capture_output=True, text=True,
                          env={**os.environ, "OSLENS_SYSROOT": str(root)}, timeout=120)


def test_a_machine_with_everything_passes(tmp_path):
    proc = doctor(full_machine(tmp_path))
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "MISSING" not in proc.stdout
    assert "clocks agree" not in proc.stdout  # a fake tree has no clocks to measure


def test_each_missing_part_is_named_with_its_fix(tmp_path):
    root = full_machine(tmp_path, root_user=False)
    (root / "sys/kernel/btf/vmlinux").unlink()
    (root / "sys/kernel/sched_ext/state").unlink()
    proc = doctor(root, "--json")
    assert proc.returncode == 1
    got = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert not json.loads(proc.stdout)["ok"]
    missing = sorted(n for n, c in got.items() if not c["ok"])
    assert missing == ["BTF", "cgroup cpu controller", "cgroup memory controller", "eBPF", "kernel tracepoints",
                       "real-time classes", "sched_ext", "tracefs"]
    assert got["real-time classes"]["fix"] == "run as root, or give the user CAP_SYS_NICE (or an RLIMIT_RTPRIO above 0)"
    assert got["cgroup memory controller"]["fix"] == "run as root (needs root (write access to /sys/fs/cgroup/memory/batch))"
    assert got["kernel tracepoints"]["fix"] == ("run as root, or 'sysctl kernel.perf_event_paranoid=-1', or give the "
                                               "user CAP_PERFMON")
    assert got["kernel tracepoints"]["detail"] == "perf_event_paranoid 2; no CAP_PERFMON"
    assert got["BTF"]["fix"] == "a kernel with CONFIG_DEBUG_INFO_BTF=y"
    assert all(c["fix"] == "" for c in got.values() if c["ok"])
    text = doctor(root)
    assert text.returncode == 1
    assert ("8 missing: kernel tracepoints, tracefs, eBPF, BTF, real-time classes, sched_ext, cgroup memory controller, "
            "cgroup cpu controller") in text.stderr


def test_paranoid_minus_one_lets_an_unprivileged_user_trace(tmp_path):
    root = full_machine(tmp_path, root_user=False)
    (root / "proc/sys/kernel/perf_event_paranoid").write_text("-1\n")
    got = {c["name"]: c for c in json.loads(doctor(root, "--json").stdout)["checks"]}
    assert got["kernel tracepoints"]["ok"]


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root")
def test_this_machine_as_root_measures_the_clocks():
    proc = subprocess.run([*OSLENS, "doctor", "--json"], capture_output=True, text=True, timeout=300)
    got = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    assert got["kernel tracepoints"]["ok"] and got["eBPF"]["ok"]
    clock = got["clocks agree"]
    assert clock["ok"], clock
    assert "over 2000 calls" in clock["detail"]
    assert proc.returncode == (0 if all(c["ok"] for c in got.values()) else 1)


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv")
def test_this_machine_as_an_unprivileged_user_names_what_it_lacks():
    cmd = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", *OSLENS, "doctor", "--json",
           "--no-clock"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, env={**os.environ, "HOME": "/tmp"})
    if proc.returncode not in (0, 1) or not proc.stdout.startswith("{"):
        pytest.skip(f"the checkout is not readable by nobody: {proc.stderr.strip()[:200]}")
    got = {c["name"]: c for c in json.loads(proc.stdout)["checks"]}
    paranoid = int(Path("/proc/sys/kernel/perf_event_paranoid").read_text())
    assert got["kernel tracepoints"]["ok"] == (paranoid <= -1)
    assert got["eBPF"]["ok"] == (int(Path("/proc/sys/kernel/unprivileged_bpf_disabled").read_text()) == 0)
    assert proc.returncode == 1
