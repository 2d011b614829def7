"""What the kernel collector's records hold (kinds 64..127, declared in crates/format/src/kernel.rs
and named through oslens._native; their fields are read through kernel_layout) and how their
values read as text, for the kernel tables (oslens.store.kernel_tables) and the small per-task
build (kernel_tasks).
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from oslens import _native
from oslens.capture.syscall_names import syscall_name

SWITCH, WAKEUP, FORK, EXEC, EXIT, MIGRATE = (_native.KINDS[n] for n in (
    "sched_switch", "sched_waking", "fork", "exec", "exit", "migrate"))
SYS_ENTER, SYS_EXIT, FAULT, BLOCK_ISSUE, BLOCK_COMPLETE, BLOCK_ISSUE_OTHER = (_native.KINDS[n] for n in (
    "sys_enter", "sys_exit", "page_fault_user", "block_rq_issue", "block_rq_complete", "block_rq_issue_other"))
IRQ_ENTRY, IRQ_EXIT, SOFTIRQ_ENTRY, SOFTIRQ_EXIT, SAMPLE, LOST, COUNTER, TRACED, TASK = (_native.KINDS[n] for n in (
    "irq_entry", "irq_exit", "softirq_entry", "softirq_exit", "sample", "kernel_lost", "kernel_counter",
    "traced_root", "task"))
TASK_IDS = _native.KINDS["task_ids"]
# a task outside the recording's PID namespace is named by this plus its kernel tid (kernel.rs)
PIDNS_OUTSIDE = _native.KERNEL_PIDNS_OUTSIDE
NAME_TASK, NAME_EXEC, NAME_IRQ = (_native.KERNEL_NAME_CLASSES[n] for n in ("task", "exec", "irq"))
RW_LETTERS = tuple((_native.BLOCK_RW_FLAGS[n], letter) for n, letter in (
    ("write", "W"), ("read", "R"), ("discard", "D"), ("flush", "F"), ("sync", "S"), ("meta", "M"), ("ahead", "A"),
    ("fua", "U")))
COUNTER_NAMES = _native.KERNEL_COUNTER_NAMES
STATE_LETTERS = tuple(_native.KERNEL_STATE_BITS)
STATE_ASLEEP = _native.KERNEL_STATE_ASLEEP
STATE_PREEMPTED = _native.KERNEL_STATE_PREEMPTED
SOFTIRQ_NAMES = ["HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU"]
CLONE_THREAD = 0x10000

def syscall_names(nrs: np.ndarray) -> pa.Array:
    uniq, inv = np.unique(nrs, return_inverse=True)
    return pa.DictionaryArray.from_arrays(pa.array(inv.astype(np.int32)), pa.array([syscall_name(int(n)) for n in uniq], type=pa.string()))


def strings(values: np.ndarray, fmt) -> pa.Array:
    """Maps integer codes to strings through `fmt`, once per distinct value."""
    if len(values) == 0:
        return pa.array([], type=pa.string())
    uniq, inv = np.unique(values, return_inverse=True)
    return pa.array([fmt(int(u)) for u in uniq], type=pa.string()).take(pa.array(inv.astype(np.int64)))


def state_letters(state: int) -> str:
    s = state & STATE_ASLEEP
    if s == 0:
        return "R"
    return "|".join(letter for bit, letter in STATE_LETTERS if s & bit)


def rw_letters(flags: int) -> str:
    return "".join(letter for bit, letter in RW_LETTERS if flags & bit) or "N"


def i64(x) -> np.ndarray:
    return np.asarray(x).astype(np.int64)


def nullable(values: np.ndarray, valid: np.ndarray, typ=pa.int64()) -> pa.Array:
    return pa.array(values, type=typ, mask=~np.asarray(valid, dtype=bool))


# x86-64 numbers of the calls that need care when pairing entries with exits
NR_CLONE, NR_FORK, NR_VFORK, NR_EXIT, NR_EXIT_GROUP, NR_CLONE3 = 56, 57, 58, 60, 231, 435
FORK_CALLS = (NR_CLONE, NR_FORK, NR_VFORK, NR_CLONE3)
NO_RETURN_CALLS = (NR_EXIT, NR_EXIT_GROUP)


def table_of(cols: dict) -> pa.Table:
    return pa.table({k: (v if isinstance(v, (pa.Array, pa.ChunkedArray)) else pa.array(v)) for k, v in cols.items()})


def dev_name(dev: int) -> str:
    """major:minor of a dev_t as the kernel holds it inside (MINORBITS = 20 in include/linux/kdev_t.h)."""
    return f"{dev >> 20}:{dev & ((1 << 20) - 1)}"
