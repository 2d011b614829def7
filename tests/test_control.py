"""End to end: `oslens config`, `oslens config check`, and `oslens tune` running a real C
program that calls osl_adapt() — each knob applied and read back, then restored after a
normal exit, after SIGTERM to tune, and after SIGKILL of tune followed by the next oslens run;
and the unprivileged path (setpriv to nobody) refusing privileged knobs but applying the rest."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from oslens import paths
from oslens.control import kernel

REPO = Path(__file__).resolve().parent.parent
OSLENS = [sys.executable, "-m", "oslens.cli"]
IS_ROOT = os.geteuid() == 0
needs_root = pytest.mark.skipif(not IS_ROOT, reason="changing global settings needs root")

PROBE_C = r"""
#define _GNU_SOURCE
#include <oslens.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

struct attr { uint32_t size, policy; uint64_t flags; int32_t nice; uint32_t prio;
              uint64_t runtime, deadline, period; };

static void show(const char *label, int rc) {
    struct attr a; memset(&a, 0, sizeof a);
    syscall(SYS_sched_getattr, 0, &a, sizeof a, 0);
    cpu_set_t set; CPU_ZERO(&set); sched_getaffinity(0, sizeof set, &set);
    char cpus[512] = "";
    for (int i = 0; i < CPU_SETSIZE && strlen(cpus) < 500; i++)
        if (CPU_ISSET(i, &set)) { char b[16]; snprintf(b, sizeof b, "%s%d", cpus[0] ? "," : "", i); strcat(cpus, b); }
    printf("{\"phase\": \"%s\", \"rc\": %d, \"policy\": %u, \"nice\": %d, \"prio\": %u, \"slice_ns\": %llu, "
           "\"cpus\": [%s], \"thp_disable\": %d}\n", label, rc, a.policy, a.nice, a.prio,
           (unsigned long long)a.runtime, cpus, prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0));
    fflush(stdout);
}

static void cat(const char *path) {
    char buf[4096] = ""; FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof buf - 1, f) : 0; buf[n] = 0; if (f) fclose(f);
    for (char *p = buf; *p; p++) if (*p == '\n' || *p == '"') *p = ' ';
    printf("{\"file\": \"%s\", \"text\": \"%s\"}\n", path, buf); fflush(stdout);
}

int main(int argc, char **argv) {
    show("start", 0);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "wait")) { printf("{\"ready\": 1}\n"); fflush(stdout); for (;;) pause(); }
        else if (!strncmp(argv[i], "cat:", 4)) cat(argv[i] + 4);
        else if (!strncmp(argv[i], "cg:", 3)) {  /* cg:CONTROLLER:FILE of the v1 cgroup it is in */
            char want[64], file[128], line[1024], path[1400] = "";
            if (sscanf(argv[i] + 3, "%63[^:]:%127s", want, file) != 2) continue;
            char key[80]; snprintf(key, sizeof key, ":%s:", want);
            FILE *f = fopen("/proc/self/cgroup", "r");
            while (f && fgets(line, sizeof line, f)) {
                char *m = strstr(line, key);
                if (m) { m[strcspn(m, "\n")] = 0;
                         snprintf(path, sizeof path, "/sys/fs/cgroup/%s%s/%s", want, m + strlen(key), file); }
            }
            if (f) fclose(f);
            if (path[0]) cat(path);
        }
        else show(argv[i], osl_adapt(argv[i]));
    }
    return 0;
}
"""

RR = "/proc/sys/kernel/sched_rr_timeslice_ms"
THP = "/sys/kernel/mm/transparent_hugepage/enabled"
RA = "/sys/block/loop0/queue/read_ahead_kb"


def read(path: str) -> str:
    return Path(path).read_text().strip()


@pytest.fixture(scope="module")
def work():
    """A directory every user can read (setpriv'd runs need it), removed afterwards."""
    d = Path(tempfile.mkdtemp(prefix="oslens-control-"))
    d.chmod(0o755)
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def probe(work):
    if not shutil.which("gcc"):
        pytest.skip("gcc is not installed")
    if not paths.liboslens().exists():
        pytest.skip(f"{paths.liboslens()} is not built: run make")
    flags = subprocess.run(OSLENS + ["flags", "--cflags", "--libs"], capture_output=True, text=True, check=True).stdout.split()
    src = work / "probe.c"
    src.write_text(PROBE_C)
    exe = work / "probe"
    subprocess.run(["gcc", "-O1", "-o", str(exe), str(src), *flags], check=True)
    return exe


def plan_file(work: Path, name: str, text: str) -> Path:
    p = work / f"{name}.toml"
    p.write_text(text)
    p.chmod(0o644)
    return p


def lines(text: str) -> list[dict]:
    return [json.loads(line) for line in text.splitlines() if line.startswith("{")]


def phase(out: list[dict], name: str) -> dict:
    return [o for o in out if o.get("phase") == name][0]


def filetext(out: list[dict], path: str) -> str:
    return [o for o in out if o.get("file") == path][0]["text"].strip()


# --- oslens config ---------------------------------------------------------------------

def test_config_json_on_this_machine():
    r = subprocess.run(OSLENS + ["config", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    m = json.loads(r.stdout)
    classes = m["sched"]["classes"]
    for name in ("other", "batch", "idle", "fifo", "rr", "deadline"):
        assert classes[name]["available"]
    assert classes["other"]["privilege"] == "none"
    assert "reason" in classes["ext"] or classes["ext"]["available"]
    assert m["sched"]["slice"]["min_ms"] == 0.1 and m["sched"]["slice"]["max_ms"] == 100
    assert isinstance(m["sched"]["sched_rr_timeslice_ms"]["current"], int)
    assert m["sched"]["affinity"]["current"] == sorted(os.sched_getaffinity(0))
    assert set(m["cgroups"]["controllers"]) == {"memory", "cpu", "cpuset", "io"}
    assert m["cpufreq"]["available"] or m["cpufreq"]["reason"]
    assert any(d["device"] == "loop0" for d in m["block"]) or m["block"] is not None
    text = subprocess.run(OSLENS + ["config"], capture_output=True, text=True, check=True).stdout
    assert "per-task slice (EEVDF)" in text and "memory controller" in text


def test_config_check_valid(work):
    p = plan_file(work, "valid", '[phase.default]\nclass = "other"\n[phase.compute]\nclass = "batch"\nslice_ms = 20\n')
    r = subprocess.run(OSLENS + ["config", "check", str(p)], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == f"{p}: valid on this machine (phases: default, compute; global: none)"


def test_config_check_invalid(work):
    p = plan_file(work, "invalid", """
[global]
thp = "sometimes"
[phase.compute]
class = "turbo"
slice_ms = 500
nice = 40
affinity = [4096]
""")
    r = subprocess.run(OSLENS + ["config", "check", str(p)], capture_output=True, text=True)
    assert r.returncode == 2
    online = open("/sys/devices/system/cpu/online").read().strip()
    assert r.stderr.splitlines() == [
        f"oslens: error: {p}: global.thp: 'sometimes' is not a THP mode here; use one of always, madvise, never",
        f"oslens: error: {p}: phase.compute.class: 'turbo' is not a scheduling class; use one of other, batch, idle, fifo, rr, ext",
        f"oslens: error: {p}: phase.compute.slice_ms: 500 ms is outside the per-task slice range 0.1-100 ms "
        "(the kernel would clamp it); use a value in that range",
        f"oslens: error: {p}: phase.compute.nice: 40 is not a nice value; use an integer from -20 to 19",
        f"oslens: error: {p}: phase.compute.affinity: CPU 4096 does not exist here (online: {online}); use online CPUs",
    ]
    # tune refuses it the same way, without running anything
    r = subprocess.run(OSLENS + ["tune", "--plan", str(p), "--", "true"], capture_output=True, text=True)
    assert r.returncode == 2
    assert r.stderr.splitlines()[-1] == (f"oslens: error: the plan has 5 problem(s); fix them "
                                         f"(check with 'oslens config check {p}')")


# --- oslens tune: one test per knob and ending -------------------------------------------

CG_NAME = "oslens-"

KNOBS = {
    # name: (plan, check during the run(out, tune_pid), check after)
    "class_slice": '[phase.default]\nclass = "other"\n[phase.compute]\nclass = "batch"\nslice_ms = 20\n',
    "nice": '[phase.compute]\nnice = 7\n',
    "affinity": '[phase.compute]\naffinity = [1]\n',
    "memory_cgroup": '[global]\nmemory_max = "256M"\n[phase.default]\nthp_disable = false\n',
    "cpu_cgroup": '[global]\ncpu_max = 0.5\n',
    "thp": '[global]\nthp = "{thp}"\n[phase.compute]\nthp_disable = true\n',
    "readahead": '[global]\nreadahead_kb = {{ loop0 = {ra} }}\n',
    "sched_rr_timeslice_ms": '[global]\nsched_rr_timeslice_ms = {rr}\n',
}


def memory_cgroups() -> list[str]:
    out = []
    for dirpath, dirnames, _files in os.walk("/sys/fs/cgroup"):
        for d in dirnames:
            if d.startswith(CG_NAME):
                out.append(os.path.join(dirpath, d))
    return out


class Before:
    def __init__(self):
        self.rr = read(RR)
        self.thp = read(THP)
        self.ra = read(RA) if Path(RA).exists() else None
        self.attr = kernel.sched_getattr(0)
        self.cpus = sorted(os.sched_getaffinity(0))
        self.cgroups = memory_cgroups()

    def assert_restored(self):
        assert read(RR) == self.rr
        assert read(THP) == self.thp
        if self.ra is not None:
            assert read(RA) == self.ra
        assert memory_cgroups() == self.cgroups
        a = kernel.sched_getattr(0)
        assert (a.cls, a.nice) == (self.attr.cls, self.attr.nice)
        assert sorted(os.sched_getaffinity(0)) == self.cpus


def knob_plan(work, knob, before) -> Path:
    thp_target = "never" if "[never]" not in before.thp else "always"
    ra_target = 256 if before.ra != "256" else 512
    rr_target = 10 if before.rr != "10" else 20
    text = KNOBS[knob].format(thp=thp_target, ra=ra_target, rr=rr_target)
    return plan_file(work, knob, text), {"thp": thp_target, "ra": str(ra_target), "rr": str(rr_target)}


def check_during(knob, out, target, ncpu):
    compute = phase(out, "compute")
    start = phase(out, "start")
    assert compute["rc"] == 0, compute
    if knob == "class_slice":
        assert start["policy"] == kernel.SCHED_OTHER
        assert compute["policy"] == kernel.SCHED_BATCH and compute["slice_ns"] == 20_000_000
    elif knob == "nice":
        assert start["nice"] == 0 and compute["nice"] == 7
    elif knob == "affinity":
        assert compute["cpus"] == [1] and len(start["cpus"]) == ncpu
    elif knob == "memory_cgroup":
        cg = [line for line in filetext(out, "/proc/self/cgroup").split() if ":memory:" in line][0]
        assert f"/{CG_NAME}" in cg
        path = "/sys/fs/cgroup/memory" + cg.split(":memory:")[1] + "/memory.limit_in_bytes"
        assert filetext(out, path) == str(256 << 20)
    elif knob == "cpu_cgroup":
        cg = [line for line in filetext(out, "/proc/self/cgroup").split() if ":cpu:" in line][0]
        assert f"/{CG_NAME}" in cg
        assert filetext(out, "/sys/fs/cgroup/cpu" + cg.split(":cpu:")[1] + "/cpu.cfs_quota_us") == "50000"
    elif knob == "thp":
        assert f"[{target['thp']}]" in filetext(out, THP)
        assert start["thp_disable"] == 0 and compute["thp_disable"] == 1
    elif knob == "readahead":
        assert filetext(out, RA) == target["ra"]
    elif knob == "sched_rr_timeslice_ms":
        assert filetext(out, RR) == target["rr"]


PROBE_ARGS = ["cat:/proc/self/cgroup", "cg:memory:memory.limit_in_bytes", "cg:cpu:cpu.cfs_quota_us",
              f"cat:{THP}", f"cat:{RA}", f"cat:{RR}", "compute"]


def needs_knob(knob):
    if knob == "affinity" and os.cpu_count() < 2:
        pytest.skip("needs 2 CPUs")
    if knob == "readahead" and not Path(RA).exists():
        pytest.skip("no loop0 device")
    if knob in ("memory_cgroup", "cpu_cgroup"):
        ctrl = knob.split("_")[0]
        m = json.loads(subprocess.run(OSLENS + ["config", "--json"], capture_output=True, text=True).stdout)
        if m["cgroups"]["controllers"][ctrl].get("version") != 1:
            pytest.skip(f"the {ctrl} controller is not on cgroup v1 here")


@needs_root
@pytest.mark.parametrize("knob", list(KNOBS))
def test_knob_normal_exit(work, probe, knob):
    needs_knob(knob)
    before = Before()
    plan, target = knob_plan(work, knob, before)
    r = subprocess.run(OSLENS + ["tune", "--plan", str(plan), "--", str(probe), *PROBE_ARGS],
                       capture_output=True, text=True, timeout=30)
    assert r.returncode == 0, r.stderr
    check_during(knob, lines(r.stdout), target, os.cpu_count())
    before.assert_restored()


_WAITING: list = []


@pytest.fixture(autouse=True)
def _no_tune_left_running():
    """A test that fails before it signals its waiting `oslens tune` must not leave it running,
    holding global settings against every later test (and every other oslens run here)."""
    yield
    while _WAITING:
        proc = _WAITING.pop()
        if proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # it restores what it changed
            try:
                proc.communicate(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()


def start_waiting(plan, probe):
    proc = subprocess.Popen(OSLENS + ["tune", "-q", "--plan", str(plan), "--", str(probe), *PROBE_ARGS, "wait"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    _WAITING.append(proc)
    out = []
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith("{"):
            out.append(json.loads(line))
            if out[-1].get("ready"):
                return proc, out
    proc.kill()
    raise AssertionError(f"the program did not get ready: {proc.stderr.read()}")


def probe_pids(probe) -> list[int]:
    out = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                if os.readlink(d / "exe") == str(probe):
                    out.append(int(d.name))
            except OSError:
                pass
    return out


@needs_root
@pytest.mark.parametrize("knob", list(KNOBS))
def test_knob_sigterm(work, probe, knob):
    needs_knob(knob)
    before = Before()
    plan, target = knob_plan(work, knob, before)
    proc, out = start_waiting(plan, probe)
    check_during(knob, out, target, os.cpu_count())
    proc.send_signal(signal.SIGTERM)
    _stdout, stderr = proc.communicate(timeout=20)
    assert proc.returncode == 128 + signal.SIGTERM, stderr
    assert probe_pids(probe) == []
    before.assert_restored()


@needs_root
@pytest.mark.parametrize("knob", list(KNOBS))
def test_knob_sigkill_then_next_run(work, probe, knob):
    needs_knob(knob)
    before = Before()
    plan, target = knob_plan(work, knob, before)
    proc, out = start_waiting(plan, probe)
    check_during(knob, out, target, os.cpu_count())
    proc.kill()
    proc.communicate(timeout=20)
    deadline = time.monotonic() + 5
    while probe_pids(probe) and time.monotonic() < deadline:  # the parent-death signal kills it
        time.sleep(0.02)
    assert probe_pids(probe) == []
    if knob == "sched_rr_timeslice_ms":
        assert read(RR) == target["rr"]  # still changed: nobody restored it yet
    r = subprocess.run(OSLENS + ["config"], capture_output=True, text=True, timeout=30)  # the next oslens run
    assert r.returncode == 0, r.stderr
    if knob in ("memory_cgroup", "cpu_cgroup", "thp", "readahead", "sched_rr_timeslice_ms"):
        assert "(left changed by oslens tune pid" in r.stderr or "(left by oslens tune pid" in r.stderr
    before.assert_restored()
    assert not Path(f"/run/oslens/tune-{proc.pid}.json").exists()
    assert not Path(f"/run/oslens/plan-{proc.pid}.json").exists()


# --- unprivileged --------------------------------------------------------------------------

def as_nobody_python() -> list[str] | None:
    """A python3 that user nobody can run with oslens importable (the venv may live in /root)."""
    if not IS_ROOT or not shutil.which("setpriv"):
        return None
    for py in (sys.executable, "/usr/bin/python3"):
        r = subprocess.run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", py, "-c",
                            "import tomllib, oslens.control.plan"], env=dict(os.environ, PYTHONPATH=str(REPO / "python")),
                           capture_output=True)
        if r.returncode == 0:
            return [py]
    return None


@needs_root
def test_unprivileged_refuses_privileged_knobs_and_applies_the_rest(work, probe):
    py = as_nobody_python()
    if py is None:
        pytest.skip("no python3 that user nobody can run")
    before = Before()
    plan = plan_file(work, "nobody", """
[global]
memory_max = "256M"
sched_rr_timeslice_ms = 10
[phase.default]
class = "other"
[phase.compute]
class = "batch"
slice_ms = 20
nice = 5
[phase.rt]
class = "fifo"
priority = 10
""")
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"))
    env.pop("XDG_RUNTIME_DIR", None)
    nobody = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
    r = subprocess.run(nobody + py + ["-m", "oslens.commands.tune", "--plan", str(plan), "--", str(probe), "compute", "rt"],
                       capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 0, r.stderr
    warnings = [line for line in r.stderr.splitlines() if line.startswith("oslens: warning:")]
    assert warnings[0].startswith(f"oslens: warning: {plan}: global.memory_max: a memory cap needs root (write access to /sys/fs/cgroup/")
    assert warnings[0].endswith("); run as root to apply it (skipped)")
    assert warnings[1:] == [
        f"oslens: warning: {plan}: global.sched_rr_timeslice_ms: sched_rr_timeslice_ms is a global sysctl and needs root; run as root to apply it (skipped)",
        f"oslens: warning: {plan}: phase.rt.class: class 'fifo' needs CAP_SYS_NICE or RLIMIT_RTPRIO > 0; run as root to apply it (skipped: the class stays as it is)",
        f"oslens: warning: {plan}: phase.default.nice: phase 'default' has nice 0, lower than phase 'compute''s 5: "
        "lowering nice needs CAP_SYS_NICE or RLIMIT_NICE, so as this user 'default' keeps the nice it has (skipped)",
        f"oslens: warning: {plan}: phase.rt.nice: phase 'rt' has nice 0, lower than phase 'compute''s 5: "
        "lowering nice needs CAP_SYS_NICE or RLIMIT_NICE, so as this user 'rt' keeps the nice it has (skipped)",
    ]
    out = lines(r.stdout)
    compute = phase(out, "compute")
    assert compute["rc"] == 0 and compute["policy"] == kernel.SCHED_BATCH and compute["nice"] == 5
    assert compute["slice_ns"] == 20_000_000
    # phase rt lost its class (it gets the default phase's, other) and keeps nice 5
    rt = phase(out, "rt")
    assert rt["rc"] == 0 and rt["policy"] == kernel.SCHED_OTHER and rt["nice"] == 5 and rt["slice_ns"] != 20_000_000
    before.assert_restored()
    # config check as nobody: valid, with the same warnings
    r = subprocess.run(nobody + py + ["-m", "oslens.commands.config", "check", str(plan)], capture_output=True, text=True, env=env)
    assert r.returncode == 0
    assert len([line for line in r.stderr.splitlines() if line.startswith("oslens: warning:")]) == 5
    r = subprocess.run(nobody + py + ["-m", "oslens.commands.config", "--json"], capture_output=True, text=True, env=env)
    m = json.loads(r.stdout)
    assert not m["user"]["root"]
    assert not m["sched"]["sched_rr_timeslice_ms"]["allowed"] and m["sched"]["slice"]["allowed"]
    assert not m["cgroups"]["controllers"]["memory"]["allowed"]


@needs_root
def test_tune_exit_status_and_missing_program(work):
    plan = plan_file(work, "plain", '[phase.default]\nclass = "batch"\n')
    r = subprocess.run(OSLENS + ["tune", "-q", "--plan", str(plan), "--", "sh", "-c", "exit 3"], capture_output=True, text=True)
    assert r.returncode == 3
    r = subprocess.run(OSLENS + ["tune", "-q", "--plan", str(plan), "--", "/nonexistent/prog"], capture_output=True, text=True)
    assert r.returncode == 127
    assert r.stderr.strip() == "oslens: error: cannot run /nonexistent/prog: No such file or directory; check the command"


@needs_root
def test_sigint_restores_everything(work, probe):
    before = Before()
    plan = plan_file(work, "sigint", f'[global]\nsched_rr_timeslice_ms = {7 if before.rr != "7" else 8}\n'
                                     'memory_max = "128M"\n[phase.compute]\nclass = "batch"\n')
    proc, out = start_waiting(plan, probe)
    assert phase(out, "compute")["policy"] == kernel.SCHED_BATCH
    assert len(memory_cgroups()) == len(before.cgroups) + 1
    proc.send_signal(signal.SIGINT)
    proc.communicate(timeout=20)
    assert proc.returncode == 128 + signal.SIGINT
    assert probe_pids(probe) == []
    before.assert_restored()


@needs_root
def test_record_keeps_changes_and_adapt_events(work, probe):
    before = Before()
    trace = work / "trace"
    plan = plan_file(work, "record", f'[global]\nsched_rr_timeslice_ms = {9 if before.rr != "9" else 11}\n'
                                     '[phase.compute]\nclass = "batch"\nslice_ms = 5\n')
    r = subprocess.run(OSLENS + ["tune", "-q", "--plan", str(plan), "--record", "--no-kernel", "-o", str(trace), "--",
                                 str(probe), "compute", "io"], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert phase(lines(r.stdout), "compute")["slice_ns"] == 5_000_000
    events = [json.loads(line) for line in (trace / "control.jsonl").read_text().splitlines()]
    assert [e["kind"] for e in events] == ["global", "phase", "restore"]
    assert events[0]["what"] == "sched_rr_timeslice_ms" and events[2]["value"] == before.rr and events[2]["ok"]
    assert json.loads((trace / "plan.json").read_text())["phases"]["compute"]["slice_ns"] == 5_000_000
    dump = subprocess.run(OSLENS + ["dump", str(trace)], capture_output=True, text=True)
    if dump.returncode == 0:  # the raw-record dump of the recorder, where present
        adapts = [line for line in dump.stdout.splitlines() if " adapt " in line]
        assert [a.split(" adapt ")[1].split()[0] for a in adapts] == ["compute", "io"]
    before.assert_restored()


def test_tune_on_a_fake_cgroup_v2_machine(tmp_path):
    """The whole tune path against a machine we do not have: memory on cgroup v2, sched_ext."""
    from oslens_testing.control import fakesys
    root = fakesys.make(tmp_path / "root", cgroup="v2", sched_ext="enabled", cpufreq=True)
    env = dict(os.environ, OSLENS_SYSROOT=str(root), OSLENS_STATE_DIR=str(tmp_path / "state"))
    plan = tmp_path / "v2.toml"
    plan.write_text('[global]\nmemory_max = "64M"\nthp = "never"\nreadahead_kb = { vda = 512 }\n'
                    '[phase.default]\nclass = "ext"\n')
    check = subprocess.run(OSLENS + ["config", "check", str(plan)], capture_output=True, text=True, env=env)
    assert check.returncode == 0, check.stderr
    cg = root / "sys/fs/cgroup/user.slice"
    r = subprocess.run(OSLENS + ["tune", "--plan", str(plan), "--", "sh", "-c",
                                 f"for f in {cg}/oslens-*/memory.max {cg}/oslens-*/cgroup.procs "
                                 f"{root}/sys/kernel/mm/transparent_hugepage/enabled "
                                 f"{root}/sys/block/vda/queue/read_ahead_kb; do cat $f; echo; done"],
                       capture_output=True, text=True, env=env, timeout=30)
    assert r.returncode == 0, r.stderr
    values = r.stdout.split()
    assert values[0] == str(64 << 20) and values[1].isdigit() and values[2:] == ["never", "512"]
    assert fakesys.read(root, "/sys/block/vda/queue/read_ahead_kb") == "128"
    assert "[madvise]" in fakesys.read(root, "/sys/kernel/mm/transparent_hugepage/enabled") or \
        fakesys.read(root, "/sys/kernel/mm/transparent_hugepage/enabled") == "madvise"
    assert not list(cg.glob("oslens-*"))
    assert os.listdir(tmp_path / "state") == []


def test_python_adapt_calls_are_recorded(work):
    """oslens.adapt() in a Python program writes its ADAPT records like osl_adapt() in C (a missing
    extension function was once hidden by a getattr guard, and nothing was recorded)."""
    trace = work / "pytrace"
    plan = plan_file(work, "py", '[phase.compute]\nclass = "batch"\n')
    script = work / "phases.py"
    script.write_text("import oslens\nassert oslens.adapt('compute') == 0\nassert oslens.adapt('io') == 0\n")
    r = subprocess.run(OSLENS + ["tune", "-q", "--plan", str(plan), "--record", "--no-kernel", "-o", str(trace), "--",
                                 sys.executable, str(script)], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    dump = subprocess.run(OSLENS + ["dump", str(trace)], capture_output=True, text=True, check=True)
    adapts = [line.split(" adapt ")[1].split()[0] for line in dump.stdout.splitlines() if " adapt " in line]
    assert adapts == ["compute", "io"]
