"""The kernel side of the trigger watcher (capture/triggers.py): the traced threads' time off
CPU and waiting for a CPU, and their system calls, from the collector's records taken in time
order. Fields are read through the one declaration of their layout (oslens._native.KERNEL_KINDS).
A batch's switches and wakeups are paired per thread with numpy (a switch-heavy program makes
hundreds of thousands a second); the rare tree and system-call records go one by one.
"""

from __future__ import annotations

import numpy as np

from oslens import _native

K = _native.KINDS
SWITCH, WAKING, WAKEUP, FORK, EXEC, EXIT, TRACED, TASK = (K[n] for n in (
    "sched_switch", "sched_waking", "sched_wakeup", "fork", "exec", "exit", "traced_root", "task"))
SYS_ENTER, SYS_EXIT = K["sys_enter"], K["sys_exit"]
ASLEEP = _native.KERNEL_STATE_ASLEEP
PIDNS_OUTSIDE = _native.KERNEL_PIDNS_OUTSIDE
# how long a thread's off-CPU intervals are kept for joint conditions over a long region
RETAIN_NS = 120_000_000_000
# an off-CPU interval: the thread left its CPU, came back, and was runnable from (back: never)
INTERVAL = np.dtype([("tid", np.int64), ("left", np.int64), ("back", np.int64), ("ready", np.int64)])
OUT, WAKE, IN = 0, 1, 2


def field(kind: int, name: str, r: np.ndarray) -> np.ndarray:
    """Field `name` of kernel records `r` of kind `kind`, as int64 (sign-extended when signed)."""
    word, shift, bits, signed = _KINDS_BY_NUMBER[kind]["fields"][name]
    v = r[word].astype(np.uint64) >> np.uint64(shift)
    if bits < 64:
        v = v & np.uint64((1 << bits) - 1)
    s = v.astype(np.int64)
    return np.where(s >= 1 << (bits - 1), s - (1 << bits), s) if signed and bits < 64 else s


_KINDS_BY_NUMBER = {v["kind"]: v for v in _native.KERNEL_KINDS.values()}
# the fields read of each kind
_FIELDS = {SWITCH: ("prev_tid", "next_tid", "prev_state"), WAKING: ("tid",), WAKEUP: ("tid",),
           FORK: ("parent_tid", "child_tid"), EXEC: ("tid",), EXIT: ("tid",), TRACED: ("root_pid",), TASK: ("tid",),
           SYS_ENTER: ("tid", "nr"), SYS_EXIT: ("tid", "nr")}


def _group_first(tid: np.ndarray) -> np.ndarray:
    """For each position of a tid-sorted array, the position where its tid's run starts."""
    pos = np.arange(len(tid))
    start = np.r_[True, tid[1:] != tid[:-1]] if len(tid) else np.zeros(0, dtype=bool)
    return np.maximum.accumulate(np.where(start, pos, 0))


def kept(r: np.ndarray, kinds: np.ndarray, nrs: np.ndarray) -> np.ndarray:
    """Which of records `r` are of `kinds`, or entries and exits of the system calls `nrs`."""
    m = np.isin(r["kind"], kinds)
    if len(nrs):
        for kind in (SYS_ENTER, SYS_EXIT):
            m |= (r["kind"] == kind) & np.isin(field(kind, "nr", r), nrs)
    return m


class Sched:
    """Per thread: when it left the CPU (and whether preempted), since when it is runnable, and
    its finished off-CPU intervals for the last RETAIN_NS."""

    def __init__(self, syscall_nrs: set[int], switches: bool):
        self.traced: set[int] = set()
        self.out: dict[int, tuple[int, bool]] = {}       # tid -> (ts it left, preempted)
        self.runnable: dict[int, int] = {}               # tid -> ts it became runnable while out
        self.history: list[np.ndarray] = []              # INTERVAL arrays, by batch
        self.in_call: dict[int, tuple[int, int]] = {}    # tid -> (enter ts, nr)
        self.exited: set[int] = set()
        self.kinds = np.array([FORK, EXEC, EXIT, TRACED, TASK] + ([SWITCH, WAKING, WAKEUP] if switches else []),
                              dtype=np.uint8)
        self.nrs = np.array(sorted(syscall_nrs), dtype=np.int64)

    def keep(self, r: np.ndarray) -> np.ndarray:
        """Which of records `r` this state reads: the tree's tasks, the switches and wakeups when
        asked for, and the watched system calls' entries and exits."""
        return kept(r, self.kinds, self.nrs)

    def feed(self, r: np.ndarray) -> tuple[np.ndarray, list[tuple[int, int, int, int]]]:
        """Records `r`, in time order: (the traced threads' off-CPU intervals that ended in them,
        INTERVAL; the watched system calls that ended in them, (tid, enter, exit, nr))."""
        self._one_by_one(r[np.isin(r["kind"], (FORK, EXEC, EXIT, TRACED, TASK))])
        calls = self._calls(r[np.isin(r["kind"], (SYS_ENTER, SYS_EXIT))]) if len(self.nrs) else []
        got = self._switches(r)
        for t in self.exited:  # a dead thread's last switch-out is not a wait, nor its call
            self.out.pop(t, None)
            self.runnable.pop(t, None)
            self.in_call.pop(t, None)
        self.exited.clear()
        if len(got):
            traced = np.fromiter(self.traced, dtype=np.int64, count=len(self.traced))
            got = got[np.isin(got["tid"], traced) & (got["tid"] < PIDNS_OUTSIDE)]
        if len(got):
            self.history.append(got)
            while self.history and self.history[0]["back"].max() < int(got["back"].max()) - RETAIN_NS:
                self.history.pop(0)
        return got, calls

    def _one_by_one(self, r: np.ndarray):
        """The tree's records (who is traced, who ended), in order."""
        cols = {}
        for k in (FORK, EXEC, EXIT, TRACED, TASK):
            sel = r["kind"] == k
            cols[k] = {n: iter(field(k, n, r[sel]).tolist()) for n in _FIELDS[k]}
        for k in r["kind"].tolist():
            c = {n: next(v) for n, v in cols[k].items()}
            if k == FORK:
                if c["parent_tid"] in self.traced:
                    self.traced.add(c["child_tid"])
            elif k == TRACED:
                self.traced.add(c["root_pid"])
            elif k == EXEC or k == TASK:
                self.traced.add(c["tid"])
            else:
                self.exited.add(c["tid"])

    def _calls(self, r: np.ndarray) -> list[tuple[int, int, int, int]]:
        """The watched system calls that ended in `r` (their entries and exits only): an exit
        pairs with its thread's entry just before it; an entry still open is carried."""
        tid = np.concatenate([np.fromiter(self.in_call, dtype=np.int64, count=len(self.in_call)),
                              *(field(k, "tid", r[r["kind"] == k]) for k in (SYS_ENTER, SYS_EXIT))])
        nr = np.concatenate([np.array([c[1] for c in self.in_call.values()], dtype=np.int64),
                             *(field(k, "nr", r[r["kind"] == k]) for k in (SYS_ENTER, SYS_EXIT))])
        ts = np.concatenate([np.array([c[0] for c in self.in_call.values()], dtype=np.int64),
                             *(r["ts"][r["kind"] == k].astype(np.int64) for k in (SYS_ENTER, SYS_EXIT))])
        n_enter = len(self.in_call) + int(np.count_nonzero(r["kind"] == SYS_ENTER))
        enter = np.arange(len(tid)) < n_enter
        self.traced.update(tid[enter].tolist())
        order = np.lexsort((~enter, ts, tid))  # an entry before an exit of the same instant
        tid, nr, ts, enter = tid[order], nr[order], ts[order], enter[order]
        pair = np.flatnonzero(~enter[1:] & enter[:-1] & (tid[1:] == tid[:-1]))
        last = np.r_[tid[1:] != tid[:-1], True] & enter if len(tid) else enter
        self.in_call = {t: (at, n) for t, at, n in zip(tid[last].tolist(), ts[last].tolist(), nr[last].tolist())}
        return list(zip(tid[pair].tolist(), ts[pair].tolist(), ts[pair + 1].tolist(), nr[pair].tolist()))

    def _events(self, r: np.ndarray):
        """Each thread's OUT, WAKE and IN events of the batch after those carried from the last
        one, sorted by thread then time: (tid, ts, type, preempted)."""
        sw = r[r["kind"] == SWITCH]
        wk = r[np.isin(r["kind"], (WAKING, WAKEUP))]
        wake_tid = np.concatenate([field(k, "tid", wk[wk["kind"] == k]) for k in (WAKING, WAKEUP)])
        wake_ts = np.concatenate([wk["ts"][wk["kind"] == k] for k in (WAKING, WAKEUP)]).astype(np.int64)
        sw_ts = sw["ts"].astype(np.int64)
        state = field(SWITCH, "prev_state", sw)
        c_out = np.array([(t, ts, p) for t, (ts, p) in self.out.items()], dtype=np.int64).reshape(-1, 3)
        c_rdy = np.array(list(self.runnable.items()), dtype=np.int64).reshape(-1, 2)
        n_out, n_rdy = len(c_out), len(c_rdy)
        tid = np.concatenate([c_out[:, 0], c_rdy[:, 0], field(SWITCH, "prev_tid", sw), wake_tid, field(SWITCH, "next_tid", sw)])
        ts = np.concatenate([c_out[:, 1], c_rdy[:, 1], sw_ts, wake_ts, sw_ts])
        kind = np.concatenate([np.full(n_out, OUT), np.full(n_rdy, WAKE), np.full(len(sw), OUT), np.full(len(wk), WAKE),
                               np.full(len(sw), IN)])
        pre = np.concatenate([c_out[:, 2].astype(bool), np.zeros(n_rdy, bool), (state & ASLEEP) == 0, np.zeros(len(wk), bool),
                              np.zeros(len(sw), bool)])
        # carried events first, then time; a switch's OUT before the same instant's IN of that thread
        rank = np.concatenate([np.zeros(n_out), np.ones(n_rdy), np.full(len(sw), 2), np.full(len(wk), 2), np.full(len(sw), 3)])
        order = np.lexsort((rank, ts, tid))
        keep = tid[order] != 0  # the idle task
        order = order[keep]
        return tid[order], ts[order], kind[order], pre[order]

    def _switches(self, r: np.ndarray) -> np.ndarray:
        """The off-CPU intervals that ended in this batch; what is still open carried over."""
        tid, ts, kind, pre = self._events(r)
        m = len(tid)
        pos = np.arange(m)
        first = _group_first(tid)
        last_out = np.maximum.accumulate(np.where(kind == OUT, pos, -1)) if m else pos
        last_in = np.maximum.accumulate(np.where(kind == IN, pos, -1)) if m else pos
        prev_in = np.r_[-1, last_in[:-1]] if m else pos
        # the first wakeup after each OUT (before the next OUT of the thread)
        wpos = pos[(kind == WAKE) & (last_out >= first)]
        seg = last_out[wpos]
        head = np.r_[True, seg[1:] != seg[:-1]] if len(seg) else np.zeros(0, bool)
        woken = np.full(m, -1)
        woken[seg[head]] = wpos[head]
        ins = pos[kind == IN]
        o = last_out[ins]
        ok = (o >= first[ins]) & (o > prev_in[ins])
        ins, o = ins[ok], o[ok]
        w = woken[o]
        ready = np.where(pre[o], ts[o], np.where((w >= 0) & (w < ins), ts[np.maximum(w, 0)], ts[ins]))
        got = np.empty(len(ins), dtype=INTERVAL)
        got["tid"], got["left"], got["back"], got["ready"] = tid[ins], ts[o], ts[ins], ready
        self._carry(tid, ts, pre, first, last_out, last_in, woken)
        return got

    def _carry(self, tid, ts, pre, first, last_out, last_in, woken):
        """Threads whose last event is an OUT: still off CPU (and maybe runnable) after the batch."""
        self.out, self.runnable = {}, {}
        if not len(tid):
            return
        ends = np.r_[first[1:] != first[:-1], True]
        e = np.flatnonzero(ends)
        o = last_out[e]
        off = (o >= first[e]) & (o > last_in[e])
        for t, at, p, w in zip(tid[e][off].tolist(), ts[o[off]].tolist(), pre[o[off]].tolist(), woken[o[off]].tolist()):
            self.out[t] = (at, p)
            if p:
                self.runnable[t] = at
            elif w >= 0:
                self.runnable[t] = int(ts[w])

    def within(self, tid: int, begin: int, end: int) -> tuple[int, int]:
        """(ns off CPU, ns waiting for a CPU) of thread `tid` inside [begin, end]."""
        off = runq = 0
        for h in self.history:
            if not len(h) or h["back"][-1] <= begin and h["back"].max() <= begin:
                continue
            x = h[(h["tid"] == tid) & (h["back"] > begin) & (h["left"] < end)]
            hi = np.minimum(x["back"], end)
            off += int((hi - np.maximum(x["left"], begin)).sum())
            runq += int(np.maximum(0, hi - np.maximum(x["ready"], begin)).sum())
        return off, runq
