"""The standalone launcher agrees with oslens.control.kernel and really changes the policy."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

from oslens.control import kernel
from oslens.whatif import launch

LAUNCH = str(Path(launch.__file__))


def test_numbers_agree_with_the_control_layer():
    for machine, nr in launch.SCHED_SETATTR.items():
        assert kernel._SYSCALLS[machine][0] == nr
    for cls, policy in launch.CLASSES.items():
        assert kernel.CLASS_POLICY[cls] == policy


def test_the_program_runs_under_the_class_and_affinity():
    probe = "import os; print(os.sched_getscheduler(0), sorted(os.sched_getaffinity(0)), os.getpriority(os.PRIO_PROCESS, 0))"
    out = subprocess.run([sys.executable, "-I", "-S", LAUNCH, "batch", "0", "5", "0", "0", "--",
                          sys.executable, "-c", probe], capture_output=True, text=True, check=True).stdout.split(None, 1)
    assert out[0] == "3" and out[1].strip() == "[0] 5"


@pytest.mark.skipif(os.geteuid() != 0, reason="SCHED_FIFO needs root")
def test_real_time_class():
    out = subprocess.run([sys.executable, "-I", "-S", LAUNCH, "fifo", "10", "0", "0", "-", "--",
                          sys.executable, "-c", "import os; print(os.sched_getscheduler(0))"],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "1"


def test_a_missing_program_is_one_line():
    proc = subprocess.run([sys.executable, "-I", "-S", LAUNCH, "other", "0", "0", "0", "-", "--", "/nonexistent/x"],
                          capture_output=True, text=True)
    assert proc.returncode == 127 and proc.stderr.count("\n") == 1 and "cannot run /nonexistent/x" in proc.stderr


def test_the_policy_starts_at_the_launchers_sched_setattr():
    from oslens_testing.analysis import synthetic
    from oslens.whatif import validate

    def con(syscalls):
        return synthetic.make_con({"meta": [("pid", "100")], "syscalls": syscalls})

    calls = [(100, 100, 1, "execve", 5, 9, 0), (100, 101, 314, "sched_setattr", 20, 21, 0),
             (100, 100, 314, "sched_setattr", 40, 41, 0), (100, 100, 314, "sched_setattr", 70, 71, 0)]
    # the launched process's first call, not another thread's nor the program's own later one
    assert validate.policy_start(con(calls)) == 40
    assert validate.policy_start(con(calls[:2])) is None  # the launcher never set a policy
    assert validate.policy_start(con([])) is None  # no system-call records: the process's start
