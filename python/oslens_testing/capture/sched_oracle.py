"""The trigger watcher's kernel side one record at a time, as the product's numpy version
(oslens.capture.trigger_sched.Sched) must agree with it: each traced thread's off-CPU intervals
(left, back, runnable from) and the watched system calls."""

from __future__ import annotations

import collections

import numpy as np

from oslens.capture import trigger_sched
from oslens.capture.trigger_sched import (ASLEEP, EXEC, FORK, PIDNS_OUTSIDE, SWITCH, SYS_ENTER, SYS_EXIT, TASK,
                                          TRACED, WAKEUP, WAKING, _FIELDS, field)

RETAIN_NS = 1 << 62


class SchedOracle:
    """Per thread: when it left the CPU and in what state, since when it is runnable, and its
    finished off-CPU intervals (left, back, runnable from) for the last RETAIN_NS."""

    def __init__(self, syscall_nrs: set[int], switches: bool):
        self.traced: set[int] = set()
        self.out: dict[int, tuple[int, int]] = {}       # tid -> (ts it left, prev_state)
        self.runnable: dict[int, int] = {}               # tid -> ts it became runnable while out
        self.history: dict[int, collections.deque] = collections.defaultdict(collections.deque)
        self.syscall_nrs = syscall_nrs
        self.in_call: dict[int, tuple[int, int]] = {}    # tid -> (enter ts, nr)
        self.kinds = np.array([FORK, EXEC, TRACED, TASK] + ([SWITCH, WAKING, WAKEUP] if switches else []), dtype=np.uint8)
        self.nrs = np.array(sorted(syscall_nrs), dtype=np.int64)

    def keep(self, r: np.ndarray) -> np.ndarray:
        """Which of records `r` this state reads (the product's filter: the oracle checks the pairing)."""
        return trigger_sched.kept(r, self.kinds, self.nrs)

    def feed(self, r: np.ndarray):
        """Records `r`, in time order; yields ("offcpu", tid, left, back, runnable_from) for each
        traced thread back on a CPU and ("syscall", tid, enter, exit, nr) for each watched call."""
        kinds = r["kind"]
        col = {}
        for kind, names in _FIELDS.items():
            sel = kinds == kind
            if sel.any():
                for n in names:
                    # kinds sharing a field name hold it at their own records of one column
                    col.setdefault(n, np.zeros(len(r), dtype=np.int64))[sel] = field(kind, n, r[sel])
        col = {n: c.tolist() for n, c in col.items()}
        for i, (k, t) in enumerate(zip(kinds.tolist(), r["ts"].astype(np.int64).tolist())):
            if k == SWITCH:
                yield from self._switch(t, col["prev_tid"][i], col["next_tid"][i], col["prev_state"][i])
            elif k == WAKING or k == WAKEUP:
                tid = col["tid"][i]
                if tid in self.out and tid not in self.runnable:
                    self.runnable[tid] = t
            elif k == FORK:
                if col["parent_tid"][i] in self.traced:
                    self.traced.add(col["child_tid"][i])
            elif k == TRACED:
                self.traced.add(col["root_pid"][i])
            elif k == EXEC or k == TASK:
                self.traced.add(col["tid"][i])
            elif k == SYS_ENTER:
                tid = col["tid"][i]
                self.traced.add(tid)
                if col["nr"][i] in self.syscall_nrs:
                    self.in_call[tid] = (t, col["nr"][i])
                else:
                    self.in_call.pop(tid, None)
            elif k == SYS_EXIT:
                call = self.in_call.pop(col["tid"][i], None)
                if call is not None:
                    yield ("syscall", col["tid"][i], call[0], t, call[1])

    def _switch(self, t: int, prev: int, nxt: int, state: int):
        if prev:
            self.out[prev] = (t, state)
            self.runnable.pop(prev, None)
            if not state & ASLEEP:  # preempted or yielded: runnable from the switch itself
                self.runnable[prev] = t
        left = self.out.pop(nxt, None) if nxt else None
        if left is None:
            return
        ready = self.runnable.pop(nxt, t)
        if nxt not in self.traced or nxt >= PIDNS_OUTSIDE:
            return
        h = self.history[nxt]
        h.append((left[0], t, ready))
        while h and h[0][1] < t - RETAIN_NS:
            h.popleft()
        yield ("offcpu", nxt, left[0], t, ready)

    def within(self, tid: int, begin: int, end: int) -> tuple[int, int]:
        """(ns off CPU, ns waiting for a CPU) of thread `tid` inside [begin, end]."""
        off = runq = 0
        for left, back, ready in reversed(self.history.get(tid, ())):
            if back <= begin:
                break
            off += max(0, min(back, end) - max(left, begin))
            runq += max(0, min(back, end) - max(ready, begin))
        return off, runq
