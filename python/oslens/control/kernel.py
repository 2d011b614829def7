"""The per-task kernel interface the control layer uses: sched_setattr / sched_getattr,
affinity, nice and the THP prctl, for the calling thread (tid 0) or another task.

Only the standard library (ctypes) is used, so this module works under any Python 3.11
and in a forked child before exec."""

from __future__ import annotations

import ctypes
import os
import platform
from dataclasses import dataclass

# Scheduling policies (include/uapi/linux/sched.h).
SCHED_OTHER = 0
SCHED_FIFO = 1
SCHED_RR = 2
SCHED_BATCH = 3
SCHED_IDLE = 5
SCHED_DEADLINE = 6
SCHED_EXT = 7

CLASS_POLICY = {
    "other": SCHED_OTHER,
    "fifo": SCHED_FIFO,
    "rr": SCHED_RR,
    "batch": SCHED_BATCH,
    "idle": SCHED_IDLE,
    "deadline": SCHED_DEADLINE,
    "ext": SCHED_EXT,
}
POLICY_CLASS = {v: k for k, v in CLASS_POLICY.items()}
RT_CLASSES = ("fifo", "rr")
FAIR_CLASSES = ("other", "batch", "idle", "ext")

# EEVDF per-task slice limits (kernel/sched/syscalls.c clamps sched_runtime to these).
SLICE_MIN_NS = 100_000
SLICE_MAX_NS = 100_000_000
SLICE_MIN_KERNEL = (6, 12)

PR_SET_PDEATHSIG = 1
PR_SET_THP_DISABLE = 41
PR_GET_THP_DISABLE = 42

# Capability bits (include/uapi/linux/capability.h).
CAP_SYS_ADMIN = 21
CAP_SYS_NICE = 23
CAP_SYS_RESOURCE = 24

_SYSCALLS = {
    # machine: (sched_setattr, sched_getattr)
    "x86_64": (314, 315),
    "aarch64": (274, 275),
    "riscv64": (274, 275),
    "ppc64le": (355, 356),
    "s390x": (345, 346),
}


class SchedAttr(ctypes.Structure):
    _fields_ = [
        ("size", ctypes.c_uint32),
        ("sched_policy", ctypes.c_uint32),
        ("sched_flags", ctypes.c_uint64),
        ("sched_nice", ctypes.c_int32),
        ("sched_priority", ctypes.c_uint32),
        ("sched_runtime", ctypes.c_uint64),
        ("sched_deadline", ctypes.c_uint64),
        ("sched_period", ctypes.c_uint64),
    ]


SCHED_ATTR_SIZE = ctypes.sizeof(SchedAttr)  # 48, SCHED_ATTR_SIZE_VER0

_libc = None


def _lib():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
        _libc.prctl.restype = ctypes.c_int
        _libc.prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    return _libc


def _numbers():
    machine = platform.machine()
    if machine not in _SYSCALLS:
        raise OSError(38, f"sched_setattr syscall number unknown on {machine}")
    return _SYSCALLS[machine]


@dataclass
class TaskSched:
    """What sched_getattr reports for one task."""

    policy: int
    cls: str
    nice: int
    priority: int
    runtime_ns: int  # for fair classes on Linux >= 6.12: the task's slice


def sched_getattr(tid: int = 0) -> TaskSched:
    attr = SchedAttr()
    rc = _lib().syscall(ctypes.c_long(_numbers()[1]), ctypes.c_int(tid), ctypes.byref(attr),
                        ctypes.c_uint(SCHED_ATTR_SIZE), ctypes.c_uint(0))
    if rc != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    policy = attr.sched_policy & 0xFF
    return TaskSched(policy, POLICY_CLASS.get(policy, str(policy)), attr.sched_nice,
                     attr.sched_priority, attr.sched_runtime)


def sched_setattr(policy: int, *, nice: int = 0, priority: int = 0, runtime_ns: int = 0,
                  deadline_ns: int = 0, period_ns: int = 0, tid: int = 0) -> int:
    """Set the whole scheduling state of one task at once. Returns 0 or an errno."""
    attr = SchedAttr()
    attr.size = SCHED_ATTR_SIZE
    attr.sched_policy = policy
    attr.sched_flags = 0
    attr.sched_nice = nice
    attr.sched_priority = priority
    attr.sched_runtime = runtime_ns
    attr.sched_deadline = deadline_ns
    attr.sched_period = period_ns
    rc = _lib().syscall(ctypes.c_long(_numbers()[0]), ctypes.c_int(tid), ctypes.byref(attr), ctypes.c_uint(0))
    return 0 if rc == 0 else ctypes.get_errno()


def set_affinity(cpus, tid: int = 0) -> int:
    try:
        os.sched_setaffinity(tid, set(cpus))
        return 0
    except OSError as err:
        return err.errno or 22


def get_affinity(tid: int = 0) -> list[int]:
    return sorted(os.sched_getaffinity(tid))


def set_thp_disable(disable: bool) -> int:
    rc = _lib().prctl(PR_SET_THP_DISABLE, 1 if disable else 0, 0, 0, 0)
    return 0 if rc == 0 else ctypes.get_errno()


def get_thp_disable() -> bool:
    rc = _lib().prctl(PR_GET_THP_DISABLE, 0, 0, 0, 0)
    return rc > 0


def set_parent_death_signal(sig: int) -> int:
    rc = _lib().prctl(PR_SET_PDEATHSIG, sig, 0, 0, 0)
    return 0 if rc == 0 else ctypes.get_errno()
