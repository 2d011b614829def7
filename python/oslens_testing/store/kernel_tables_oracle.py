"""The kernel tables built with numpy over every kernel record held in memory, sorted by time: what
the import did before oslens.store.kernel_tables built them in DuckDB, kept as the oracle its
tests compare against (never imported by the package: tests/test_layers.py). Memory grows with
the records (about 250 bytes a kernel record at the peak: docs/trace-schema.md, "Import memory").
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from oslens.capture import raw
from oslens_testing.store import kernel_records, kernel_rows
from oslens.store.kernel_fields import (
    BLOCK_COMPLETE, BLOCK_ISSUE, BLOCK_ISSUE_OTHER, COUNTER,
    EXEC, EXIT, FAULT, FORK, FORK_CALLS, IRQ_ENTRY, IRQ_EXIT, MIGRATE, SAMPLE, SOFTIRQ_ENTRY,
    SOFTIRQ_EXIT, SOFTIRQ_NAMES, SWITCH, SYS_ENTER, SYS_EXIT, TASK, WAKEUP, dev_name, i64, nullable, rw_letters,
    strings, syscall_names, table_of)
from oslens.store.kernel_layout import kind_of
from oslens.store.kernel_tasks import Comms, PidMap, SMALL_KINDS, tasks, whole_tasks

# The oracle reads the words with its own shifts, written from crates/format/src/kernel.rs's
# declaration by hand rather than through kernel_layout, so that a wrong layout there shows as
# a difference between the two builds.
BLOCK_SECTORS_SHIFT, BLOCK_SECTORS_BITS, BLOCK_FLAGS_SHIFT = 32, 24, 56


def i32(x) -> np.ndarray:
    """Low 32 bits as a signed value (pids, cpus, syscall numbers)."""
    return (np.asarray(x, dtype=np.uint64) & np.uint64(0xFFFFFFFF)).astype(np.uint32).view(np.int32).astype(np.int64)


def hi32(x) -> np.ndarray:
    return (np.asarray(x, dtype=np.uint64) >> np.uint64(32)).astype(np.int64)


class _Records:
    """Every valid kernel record of the trace, sorted by time, plus the NAME records with
    their times (comm history)."""

    def __init__(self, chunks):
        recs, self.names, self.lost_rows = [], [], []
        for c in chunks:
            r = kernel_records.records_of(c)
            names, lost = kernel_records.split(c, r)
            self.names.extend(names)
            if lost is not None:
                self.lost_rows.append(lost)
            recs.append(r[r["kind"] != raw.NAME])
        allr = np.concatenate(recs) if recs else np.zeros(0, dtype=raw.RECORD_DTYPE)
        self.r = allr[np.argsort(allr["ts"], kind="stable")]
        self._by_kind = {}

    def kind(self, k: int) -> np.ndarray:
        if k not in self._by_kind:
            self._by_kind[k] = self.r[self.r["kind"] == k]
        return self._by_kind[k]


def pid_map(R: _Records) -> PidMap:
    """tid -> pid from every record that names both (the last one wins)."""
    tids, pids = [], []

    def add(t, p):
        tids.append(i64(t))
        pids.append(i64(p))

    t = R.kind(TASK)  # first: any event's own pair wins over the attach's
    add(t["id"], i32(t["a"]))
    for k in (SWITCH, WAKEUP, SYS_ENTER, SYS_EXIT):
        x = R.kind(k)
        add(x["id"], hi32(x["a"]))
    f = R.kind(FORK)
    add(f["id"], i32(f["b"]))
    add(i32(f["a"]), hi32(f["a"]))
    e = R.kind(EXEC)
    add(e["id"], i32(e["a"]))
    x = R.kind(EXIT)
    add(x["id"], i32(x["a"]))
    s = R.kind(SAMPLE)
    add(s["id"], i32(s["b"]))
    for k in (IRQ_ENTRY, SOFTIRQ_ENTRY, SOFTIRQ_EXIT):
        x = R.kind(k)
        add(x["id"], i32(x["b"]))
    t = np.concatenate(tids) if tids else np.zeros(0, np.int64)
    p = np.concatenate(pids) if pids else np.zeros(0, np.int64)
    return PidMap(t, p)


def _cpu_slices(sw: pa.Table, pid_of, comms, whole=None, woken=None):
    """One row per time a task held a CPU: from the switch that put it on to the next switch of
    that CPU, which takes it off. A switch *onto* a task can be missing while the one taking it
    off is there (a ring loss, or a switch away from a task the kernel does not deliver, such as
    one in another PID namespace: docs/report.md, the cross-check); for a task in `whole` (whose
    every switch is kept; None: every task) that slice starts at the evidence: the latest of the
    CPU's previous switch, the task's own previous switch off a CPU and, when that switch put it to
    sleep, its first wakeup after it (`woken`: wakeup times and tids; it could not run before
    it), flagged `start_inferred`. Not its last wakeup: a task woken between setting its sleep
    state and switching off (a futex wait that loses the race) is woken while it runs."""
    ts = sw.column("ts").to_numpy()
    cpu = sw.column("cpu").to_numpy()
    prev = sw.column("prev_tid").to_numpy()
    nxt = sw.column("next_tid").to_numpy()
    asleep = ~np.isin(np.array(sw.column("prev_state").to_pylist(), dtype=object), ["R", "R+", "0"])
    order = np.lexsort((ts, cpu))
    ts, cpu, prev, nxt, asleep = ts[order], cpu[order], prev[order], nxt[order], asleep[order]
    same_cpu = cpu[:-1] == cpu[1:]
    # the task switched in at i holds the CPU until switch i+1, when that switch switches it out
    ok = same_cpu & (nxt[:-1] == prev[1:])
    i = np.nonzero(ok)[0]
    start, end, tid, c = ts[i], ts[i + 1], nxt[i], cpu[i]
    inferred = np.zeros(len(i), bool)
    j = np.nonzero(same_cpu & (nxt[:-1] != prev[1:]) & (prev[1:] != 0))[0] + 1  # switched off, never seen on
    if whole is not None:
        j = j[np.isin(prev[j], np.fromiter(whole, np.int64, len(whole)))]
    if len(j):
        off, off_asleep = _previous_switch_off(ts, prev, j, asleep)
        lo = np.maximum(ts[j - 1], off)
        if woken is not None:
            first = _first_wakeup(woken[0], woken[1], prev[j], off, ts[j])
            lo = np.where(off_asleep & (first > 0), np.maximum(lo, first), lo)
        start, end = np.concatenate([start, lo]), np.concatenate([end, ts[j]])
        tid, c = np.concatenate([tid, prev[j]]), np.concatenate([c, cpu[j]])
        inferred = np.concatenate([inferred, np.ones(len(j), bool)])
        o = np.lexsort((start, c))
        start, end, tid, c, inferred = start[o], end[o], tid[o], c[o], inferred[o]
    return table_of({
        "tid": tid, "pid": pid_of(tid), "comm": pa.array(comms.at(tid, start), type=pa.string()),
        "cpu": c, "start_ns": start, "end_ns": end, "start_inferred": inferred,
    })


def _previous_switch_off(ts: np.ndarray, prev: np.ndarray, j: np.ndarray, asleep: np.ndarray):
    """For each switch j, the time the same task was last switched off any CPU before it (0 if
    never) and whether that switch put it to sleep."""
    o = np.lexsort((ts, prev))
    pos = np.empty(len(o), np.int64)
    pos[o] = np.arange(len(o))
    k = pos[j] - 1
    before = (k >= 0) & (prev[o[np.maximum(k, 0)]] == prev[j])
    return np.where(before, ts[o[np.maximum(k, 0)]], 0), before & asleep[o[np.maximum(k, 0)]]


def _first_wakeup(wts: np.ndarray, wtid: np.ndarray, tids: np.ndarray, after: np.ndarray,
                  until: np.ndarray) -> np.ndarray:
    """For each tid, the time of its first wakeup in [after, until] (0 if none)."""
    if len(wts) == 0:
        return np.zeros(len(tids), np.int64)
    o = np.lexsort((wts, wtid))
    key_t, key_s = wtid[o], wts[o]
    # the tid's run of rows, then the first at or after `after` within it
    lo = np.searchsorted(key_t, tids, side="left")
    hi = np.searchsorted(key_t, tids, side="right")
    k = np.array([lo[i] + np.searchsorted(key_s[lo[i]:hi[i]], after[i], side="left") for i in range(len(tids))],
                 np.int64)
    ok = (k < hi) & (key_s[np.minimum(k, len(key_s) - 1)] <= until)
    return np.where(ok, key_s[np.minimum(k, len(key_s) - 1)], 0)


def _pair(key_a: np.ndarray, key_b: np.ndarray, ts: np.ndarray, is_end: np.ndarray):
    """Sorts by (key_a, key_b, ts, is_end) and returns (order, i) where records i (a start) and
    i+1 (an end) pair up."""
    order = np.lexsort((is_end, ts, key_b, key_a))
    ka, kb, e = key_a[order], key_b[order], is_end[order]
    ok = (~e[:-1]) & e[1:] & (ka[:-1] == ka[1:]) & (kb[:-1] == kb[1:])
    return order, np.nonzero(ok)[0]


def _syscalls(R, pid_of):
    """One row per system call, from each thread's enter and exit records in time order.

    An exit closes the enter just before it in the same thread when the numbers agree, or when
    the exit carries nr -1: rt_sigreturn restores the registers of the interrupted code, so its
    exit no longer knows its own number. The child's first return from clone/clone3/fork/vfork
    (ret 0 in a thread that never entered the call) is not a call and makes no row. A call still
    open when its thread exits (exit, exit_group, or a thread killed inside a call) ends at the
    kernel's exit record with ret NULL. An interrupted call that the kernel restarts is two rows:
    the first returns -512..-516 (ERESTART*), the second is the restart.
    """
    en, ex = R.kind(SYS_ENTER), R.kind(SYS_EXIT)
    tid = np.concatenate([i64(en["id"]), i64(ex["id"])])
    nr = np.concatenate([i32(en["a"]), i32(ex["a"])])
    ts = np.concatenate([i64(en["ts"]), i64(ex["ts"])])
    pid = np.concatenate([hi32(en["a"]), hi32(ex["a"])])
    val = np.concatenate([np.zeros(len(en), np.int64), ex["b"].view(np.int64)])
    is_end = np.concatenate([np.zeros(len(en), bool), np.ones(len(ex), bool)])
    # pair per thread in time order; an enter followed by an exit of the same call pairs
    order = np.lexsort((is_end, ts, tid))
    t, n, s, e, p, v = tid[order], nr[order], ts[order], is_end[order], pid[order], val[order]
    paired_start = np.zeros(len(t), bool)
    if len(t) > 1:
        same_call = (n[:-1] == n[1:]) | (n[1:] == -1)
        paired_start[:-1] = (~e[:-1]) & e[1:] & (t[:-1] == t[1:]) & same_call
    paired_end = np.zeros(len(t), bool)
    paired_end[1:] = paired_start[:-1]
    i = np.nonzero(paired_start)[0]
    lone_enter = np.nonzero(~e & ~paired_start)[0]
    # a lone exit is a call entered before the collector attached, or a fork child's first return
    child_return = np.isin(n, FORK_CALLS) & (v == 0)
    lone_exit = np.nonzero(e & ~paired_end & ~child_return)[0]
    # lone enters that are their thread's last syscall record end at the thread's exit, if seen
    x = R.kind(EXIT)
    exit_at = dict(zip(i64(x["id"]).tolist(), i64(x["ts"]).tolist()))
    last_of_thread = np.ones(len(t), bool)
    last_of_thread[:-1] = t[:-1] != t[1:]
    died_in = np.array([bool(last_of_thread[j]) and exit_at.get(int(t[j]), -1) >= s[j] for j in lone_enter], bool)
    died_end = np.array([exit_at.get(int(t[j]), 0) if d else 0 for j, d in zip(lone_enter, died_in)], np.int64)
    rows_tid = np.concatenate([t[i], t[lone_enter], t[lone_exit]])
    rows_pid = np.concatenate([p[i], p[lone_enter], p[lone_exit]])
    rows_nr = np.concatenate([n[i], n[lone_enter], n[lone_exit]])
    start = np.concatenate([s[i], s[lone_enter], np.zeros(len(lone_exit), np.int64)])
    start_ok = np.concatenate([np.ones(len(i), bool), np.ones(len(lone_enter), bool), np.zeros(len(lone_exit), bool)])
    end = np.concatenate([s[i + 1], died_end, s[lone_exit]])
    end_ok = np.concatenate([np.ones(len(i), bool), died_in, np.ones(len(lone_exit), bool)])
    ret = np.concatenate([v[i + 1], np.zeros(len(lone_enter), np.int64), v[lone_exit]])
    ret_ok = np.concatenate([np.ones(len(i), bool), np.zeros(len(lone_enter), bool), np.ones(len(lone_exit), bool)])
    srt = np.argsort(np.where(start_ok, start, end), kind="stable")
    missing_pid = rows_pid <= 0
    rows_pid[missing_pid] = pid_of(rows_tid[missing_pid])
    return table_of({
        "pid": rows_pid[srt], "tid": rows_tid[srt], "nr": rows_nr[srt], "name": syscall_names(rows_nr[srt]),
        "start_ns": nullable(start[srt], start_ok[srt]), "end_ns": nullable(end[srt], end_ok[srt]),
        "ret": nullable(ret[srt], ret_ok[srt]),
    })


def _block_io(R, pid_of):
    # an untraced task's issue (BLOCK_ISSUE_OTHER) sorts as an issue and pairs like one, but makes no row
    iss, com, other = R.kind(BLOCK_ISSUE), R.kind(BLOCK_COMPLETE), R.kind(BLOCK_ISSUE_OTHER)
    dev = np.concatenate([i32(iss["b"]), i32(com["b"]), i32(other["b"])]) & 0xFFFFFFFF
    sector = np.concatenate([i64(iss["a"]), i64(com["a"]), i64(other["a"])])
    ts = np.concatenate([i64(iss["ts"]), i64(com["ts"]), i64(other["ts"])])
    b = np.concatenate([iss["b"], com["b"], other["b"]]).astype(np.uint64)
    tid = np.concatenate([i64(iss["id"]), i64(com["id"]), i64(other["id"])])
    is_end = np.concatenate([np.zeros(len(iss), bool), np.ones(len(com), bool), np.zeros(len(other), bool)])
    is_other = np.concatenate([np.zeros(len(iss) + len(com), bool), np.ones(len(other), bool)])
    order, i = _pair(dev, sector, ts, is_end)
    i = i[~is_other[order[i]]]
    e = is_end[order]
    paired = np.zeros(len(order), bool)
    paired[i] = True
    lone = np.nonzero(~e & ~paired & ~is_other[order])[0]  # issued, not completed before the end
    rows = np.concatenate([i, lone])
    o = order[rows]
    sectors = ((b[o] >> np.uint64(BLOCK_SECTORS_SHIFT)) & np.uint64((1 << BLOCK_SECTORS_BITS) - 1)).astype(np.int64)
    flags = (b[o] >> np.uint64(BLOCK_FLAGS_SHIFT)).astype(np.int64)
    comp = np.concatenate([ts[order[i + 1]], np.zeros(len(lone), np.int64)])
    comp_ok = np.concatenate([np.ones(len(i), bool), np.zeros(len(lone), bool)])
    srt = np.argsort(ts[o], kind="stable")
    return table_of({
        "issue_ns": ts[o][srt], "complete_ns": nullable(comp[srt], comp_ok[srt]),
        "dev": strings(dev[o][srt], dev_name), "sector": sector[o][srt], "bytes": sectors[srt] * 512,
        "rw": strings(flags[srt], rw_letters), "tid": tid[o][srt], "pid": pid_of(tid[o][srt]),
        "dev_num": dev[o][srt],
    })


def _irqs(R, comms):
    out = []
    for enter, leave, kind in ((IRQ_ENTRY, IRQ_EXIT, "hard"), (SOFTIRQ_ENTRY, SOFTIRQ_EXIT, "soft")):
        a, b = R.kind(enter), R.kind(leave)
        cpu = np.concatenate([i64(a["cpu"]), i64(b["cpu"])])
        num = np.concatenate([i64(a["a"]), i64(b["a"])])
        ts = np.concatenate([i64(a["ts"]), i64(b["ts"])])
        tid = np.concatenate([i64(a["id"]), i64(b["id"])])
        is_end = np.concatenate([np.zeros(len(a), bool), np.ones(len(b), bool)])
        order = np.lexsort((is_end, ts, cpu))
        c, n, e = cpu[order], num[order], is_end[order]
        ok = (~e[:-1]) & e[1:] & (c[:-1] == c[1:]) & (n[:-1] == n[1:]) if len(order) > 1 else np.zeros(0, bool)
        i = np.nonzero(ok)[0]
        o, o2 = order[i], order[i + 1]
        if kind == "hard":
            names = [comms.irq.get(int(x), str(int(x))) for x in num[o]]
        else:
            names = [SOFTIRQ_NAMES[int(x)] if 0 <= int(x) < len(SOFTIRQ_NAMES) else str(int(x)) for x in num[o]]
        out.append(table_of({
            "cpu": cpu[o], "tid": tid[o], "irq": num[o], "name": pa.array(names, type=pa.string()),
            "kind": pa.array([kind] * len(o), type=pa.string()), "start_ns": ts[o], "end_ns": ts[o2],
        }))
    t = pa.concat_tables(out)
    return t.take(pa.array(np.argsort(t.column("start_ns").to_numpy(), kind="stable")))


def _wakeups_enqueued(R: _Records) -> dict:
    """The wakeup records' columns with enqueue_ts: the woken task's next wakeup or enqueue
    (sched_wakeup) record in (time, kind, record) order, when it is an enqueue; else 0."""
    enqueue = kind_of("sched_wakeup")
    at = np.nonzero(np.isin(R.r["kind"], (WAKEUP, enqueue)))[0]  # R.r is in (time, record) order
    r = R.r[at]
    o = np.lexsort((at, r["kind"], r["ts"], i32(r["a"])))
    tid, kind, ts = i32(r["a"])[o], r["kind"][o], r["ts"][o].astype(np.int64)
    enq = np.zeros(len(o), np.int64)
    enq[:-1] = np.where((tid[1:] == tid[:-1]) & (kind[1:] == enqueue), ts[1:], 0)
    by_record = np.empty(len(o), np.int64)
    by_record[o] = enq
    w = r["kind"] == WAKEUP
    return {**{c: r[c][w] for c in ("ts", "cpu", "id", "a", "b")}, "enqueue_ts": by_record[w]}


def build_kernel_tables_oracle(chunks: list, meta: dict) -> dict[str, pa.Table]:
    """The kernel tables of a trace from its kernel chunks (source = SOURCE_KERNEL_CPU)."""
    R = _Records(chunks)
    pid_of = pid_map(R)
    comms = Comms(R.names)
    small = {k: R.kind(k) for k in SMALL_KINDS}
    sw = kernel_rows.switch_rows(R.kind(SWITCH), pid_of, comms)
    wk_table = kernel_rows.wakeup_rows(_wakeups_enqueued(R), pid_of)
    wk = {c: wk_table.column(c).to_numpy().astype(np.int64) for c in ("ts", "tid")}
    forks = R.kind(FORK)
    seen = [i64(R.kind(SWITCH)["id"]), i32(R.kind(SWITCH)["a"]), i32(forks["a"]), i64(forks["id"]), i64(R.kind(EXEC)["id"]),
            i64(R.kind(EXIT)["id"]), i64(R.kind(SYS_ENTER)["id"]), i64(R.kind(SAMPLE)["id"]), i64(R.kind(FAULT)["id"]), i64(R.kind(TASK)["id"])]
    return {
        "switches": sw,
        "cpu_slices": _cpu_slices(sw, pid_of, comms, whole_tasks(small, meta or {}), (wk["ts"], wk["tid"])),
        "wakeups": wk_table,
        "syscalls": _syscalls(R, pid_of),
        "faults": kernel_rows.fault_rows(R.kind(FAULT), pid_of),
        "block_io": _block_io(R, pid_of),
        "samples": kernel_rows.sample_rows(R.kind(SAMPLE)),
        "tasks": tasks(small, np.concatenate(seen), int(R.r["ts"][-1]) if len(R.r) else 0, pid_of, comms, meta or {}),
        "kernel_lost": kernel_records.kernel_lost(R.lost_rows),
        "irqs": _irqs(R, comms),
        "kernel_counters": kernel_rows.counter_rows(R.kind(COUNTER)),
        "migrations": kernel_rows.migration_rows(R.kind(MIGRATE)),
    }
