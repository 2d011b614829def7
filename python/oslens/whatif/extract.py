"""From a trace's scheduling tables to a workload (tables in, workload out).

Per program thread, from `cpu_slices` joined with the state `switches` says it left each slice in:
  - a CPU burst is the CPU time between two blocks (slices that ended preempted, 'R', are joined:
    the gap between them is waiting, which the simulator recomputes);
  - a block starts when a slice ends in 'D' (io) or 'S'/other (sleep or sync) and lasts until the
    `wakeups` record that ended it (the time from there to the next slice is waiting again);
  - a block is a dependency (sync) when another program thread woke it from inside a system call
    (futex, pipe write, exit...) and the thread was not in a timed sleep: the simulator then ends it
    when the waker reaches the same point of its own execution; otherwise it lasts as recorded;
  - a thread arrives when its parent reaches the point where it created it (fork time).
Other tasks' slices inside the program's window are background load pinned to their CPU.
See docs/whatif.md for what this model leaves out."""

from __future__ import annotations

import bisect

import numpy as np

from oslens.analysis import db, program, task_kinds
from oslens.analysis.states import STATE_CODE_SQL
from oslens.errors import OslensError
from oslens.whatif.workload import IO, SLEEP, SYNC, UNTIL, YIELD, Block, Dep, Task, Workload

MAX_TASKS = 20_000  # program threads; beyond it the trace is refused (the simulator keeps per-task state)
TIMED_SLEEPS = {"nanosleep", "clock_nanosleep"}  # their wake-up comes from a timer, not the waker
EXITS = {"exit", "exit_group"}
YIELDS = "sched_yield"  # the task offers its CPU; modelled as a point where the policy may switch
RUNNABLE, DISK = 1, 2  # codes of STATE_CODE_SQL


def _arrays(con, sql: str, params=None) -> list[np.ndarray]:
    t = con.execute(sql, params or []).fetch_arrow_table()
    return [t.column(i).fill_null(-1).to_numpy(zero_copy_only=False).astype(np.int64) for i in range(t.num_columns)]


def _slices(con, tids: list[int]):
    """(tid, start, end, cpu, code) of every slice of `tids`, by tid then start."""
    tid_list = ",".join(str(t) for t in tids)
    return _arrays(con, f"""
        SELECT s.tid, s.start_ns, s.end_ns, s.cpu, max({STATE_CODE_SQL.format(col="w.prev_state")}) AS code
        FROM cpu_slices s LEFT JOIN switches w ON w.prev_tid = s.tid AND w.ts = s.end_ns AND w.cpu = s.cpu
        WHERE s.tid IN ({tid_list}) GROUP BY ALL ORDER BY s.tid, s.start_ns""")


class _Progress:
    """Maps a trace time to a point (burst, CPU offset) of one task's execution."""

    def __init__(self, starts, ends, burst_of, cum_at_start):
        self.starts, self.ends, self.burst_of, self.cum = starts, ends, burst_of, cum_at_start

    def point(self, ts: int) -> tuple[int, int]:
        i = bisect.bisect_right(self.starts, ts) - 1
        if i < 0:
            return 0, 0
        into = min(ts, self.ends[i]) - self.starts[i]
        return self.burst_of[i], self.cum[i] + max(0, into)


class _Syscalls:
    """Which system call each program thread was in at a time (for telling sleeps from sync)."""

    def __init__(self, con, tids):
        self.by_tid: dict[int, tuple[list, list, list]] = {}
        if not db.row_count(con, "syscalls"):
            self.present = False
            return
        self.present = True
        tid_list = ",".join(str(t) for t in tids)
        t = con.execute(f"""SELECT tid, start_ns, coalesce(end_ns, 9223372036854775807), name FROM syscalls
                            WHERE tid IN ({tid_list}) AND start_ns IS NOT NULL ORDER BY tid, start_ns""").fetchall()
        for tid, s, e, name in t:
            rec = self.by_tid.setdefault(int(tid), ([], [], []))
            rec[0].append(int(s))
            rec[1].append(int(e))
            rec[2].append(name or "")

    def starts(self, tid: int, name: str) -> list[int]:
        rec = self.by_tid.get(tid)
        return [s for s, n in zip(rec[0], rec[2]) if n == name] if rec else []

    def at(self, tid: int, ts: int) -> str | None:
        """The system call `tid` was in at `ts`; a thread that has entered exit is in it to the end
        (the kernel wakes its joiner after the exit record, from do_exit)."""
        rec = self.by_tid.get(tid)
        if not rec:
            return None
        i = bisect.bisect_right(rec[0], ts) - 1
        if i >= 0 and (rec[1][i] >= ts or rec[2][i] in EXITS):
            return rec[2][i]
        return None


def _ncpus(con, meta: dict) -> int:
    for k in ("kernel.cpus", "machine.cpus", "machine.cpus_online"):
        try:
            n = int(meta.get(k) or 0)
        except ValueError:
            n = 0
        if n > 0:
            return n
    row = con.execute("SELECT max(cpu) FROM cpu_slices").fetchone()
    return int(row[0]) + 1 if row and row[0] is not None else 1


def _task_shape(tid, s, e, cpu, code, wake_ts, wake_by):
    """Bursts and raw blocks of one thread from its slices; also the per-slice progress map."""
    bursts, raw_blocks = [], []
    burst_of, cum = [], []
    acc = 0
    waiting = 0
    n = len(s)
    for i in range(n):
        burst_of.append(len(bursts))
        cum.append(acc)
        acc += int(e[i] - s[i])
        if i == n - 1:
            bursts.append(acc)
            break
        nxt = int(s[i + 1])
        if code[i] == RUNNABLE or code[i] <= 0:
            waiting += max(0, nxt - int(e[i]))  # preempted (or no record of why): runnable gap
            continue
        bursts.append(acc)
        acc = 0
        # the last wakeup of the thread inside the gap ended the block
        j = bisect.bisect_right(wake_ts, nxt) - 1
        if j >= 0 and wake_ts[j] >= e[i]:
            woke, waker = int(wake_ts[j]), int(wake_by[j])
        else:
            woke, waker = nxt, -1
        waiting += nxt - woke
        raw_blocks.append((int(e[i]), woke, int(code[i]), waker))
    return bursts, raw_blocks, burst_of, cum, waiting


def workload(con, include_background: bool = True, since_ns: int | None = None) -> Workload:
    """The workload of the trace's program. Raises OslensError when the trace cannot give one.
    since_ns: the program starts there (what its threads did before is left out: --validate's
    launcher, which runs in the default class until it sets the policy under test)."""
    if db.row_count(con, "cpu_slices") == 0:
        raise OslensError("the trace has no scheduling records (cpu_slices is empty); record it with kernel "
                          "events: 'oslens record -- CMD' as root, without --no-kernel", 2)
    prog = program.program(con)
    if not prog.tids:
        raise OslensError("the trace has no program threads; record a program with 'oslens record -- CMD'", 2)
    tids = sorted(prog.tids)
    if len(tids) > MAX_TASKS:
        raise OslensError(f"the program has {len(tids):,} threads, more than whatif simulates ({MAX_TASKS:,}); "
                          "record a smaller run", 2)
    meta = db.meta(con)
    st, ss, se, scpu, scode = _slices(con, tids)
    starts = dict(prog.start)
    if since_ns is not None:
        keep = se > since_ns
        st, ss, se, scpu, scode = st[keep], np.maximum(ss[keep], since_ns), se[keep], scpu[keep], scode[keep]
        starts = {t: max(s, since_ns) for t, s in starts.items()}
    # the origin: the first sign of the program, its start or a slice the kernel saw before it
    origin = min([starts[t] for t in tids] + ([int(ss.min())] if len(ss) else []))
    end = max(prog.end[t] for t in tids)
    wt, wts, wby = _arrays(con, f"""SELECT tid, ts, waker_tid FROM wakeups WHERE tid IN ({",".join(map(str, tids))})
                                    AND ts >= ? ORDER BY tid, ts""", [since_ns if since_ns is not None else -1])
    syscalls = _Syscalls(con, tids)
    parents = task_kinds.task_parents(con)
    index = {tid: i for i, tid in enumerate(t for t in tids if (st == t).any())}
    shapes, progress = {}, {}
    for tid in index:
        lo, hi = np.searchsorted(st, tid, "left"), np.searchsorted(st, tid, "right")
        wlo, whi = np.searchsorted(wt, tid, "left"), np.searchsorted(wt, tid, "right")
        shape = _task_shape(tid, ss[lo:hi], se[lo:hi], scpu[lo:hi], scode[lo:hi],
                            wts[wlo:whi].tolist(), wby[wlo:whi].tolist())
        shapes[tid] = (shape, ss[lo:hi], se[lo:hi])
        progress[tid] = _Progress(ss[lo:hi].tolist(), se[lo:hi].tolist(), shape[2], shape[3])
    tasks: list[Task] = []
    counts = {IO: 0, SLEEP: 0, SYNC: 0, YIELD: 0}
    for tid in index:
        (bursts, raw, _b, _c, waiting), s, e = shapes[tid]
        blocks = []
        for b_start, woke, code, waker in raw:
            kind, dep = _classify(tid, b_start, woke, code, waker, index, progress, syscalls)
            counts[kind] += 1
            blocks.append(Block(woke - b_start, kind, dep))
        start = starts[tid] if starts.get(tid) is not None else int(s[0])
        start = min(start, int(s[0]))
        parent = parents.get(tid)
        arrival_dep = None
        if parent in index and parent != tid:
            arrival_dep = Dep(index[parent], *progress[parent].point(start))
        waiting += int(s[0]) - start
        tasks.append(Task(tid, prog.names.get(tid, str(tid)), bursts, blocks, arrival=start - origin,
                          arrival_dep=arrival_dep, recorded={
                              "arrival_ns": start - origin, "completion_ns": int(e[-1]) - origin,
                              "waiting_ns": int(waiting), "response_ns": int(s[0]) - start,
                              "switches": int(len(s)), "cpu_ns": int(sum(bursts))},
                          slices=list(zip((s - origin).tolist(), (e - origin).tolist()))))
    if not tasks:
        raise OslensError("the program's threads never appear in cpu_slices; record it with kernel events", 2)
    yields = {i: [progress[tid].point(ts) for ts in syscalls.starts(tid, YIELDS)] for tid, i in index.items()}
    counts[YIELD] = split_at_yields(tasks, yields)
    bg = _background(con, set(index), origin, end) if include_background else {}
    wl = Workload(tasks, _ncpus(con, meta), origin_ns=origin, background=bg,
                  preempted_ends=se[scode == RUNNABLE].tolist())
    if include_background and str(meta.get("kernel.system_wide", "")).lower() == "true":
        wl.others = others(con, set(index), origin, end)
    wl.recorded = {"makespan_ns": max(t.recorded["completion_ns"] for t in tasks),
                   "switches": sum(t.recorded["switches"] for t in tasks),
                   "blocks": counts, "background_cpu_ns": sum(b["cpu_ns"] for b in bg.values())}
    if not syscalls.present:
        wl.notes.append("no system call records: wake-ups by program threads are all taken as dependencies "
                        "(a timer firing while a program thread ran is then mistaken for one)")
    wl.check()
    return wl


def split_at_yields(tasks: list[Task], yields: dict[int, list[tuple[int, int]]]) -> int:
    """Cuts each task's bursts at its sched_yield points (burst, CPU offset) with a YIELD block
    between the pieces, and moves every dependency point to the piece that holds it. Returns the
    number of yields kept (a yield at a burst's very start or end offers nothing to cut)."""
    cuts = {}
    for i, pts in yields.items():
        per = {}
        for b, off in pts:
            if 0 < off < tasks[i].bursts[b]:
                per.setdefault(b, set()).add(off)
        if per:
            cuts[i] = {b: sorted(v) for b, v in per.items()}
    if not cuts:
        return 0
    base = {}  # task -> first new burst index of each old burst
    for i, per in cuts.items():
        first, k = [], 0
        for b in range(len(tasks[i].bursts)):
            first.append(k)
            k += 1 + len(per.get(b, ()))
        base[i] = first

    def moved(dep: Dep | None) -> Dep | None:
        if dep is None or dep.task not in cuts:
            return dep
        c = cuts[dep.task].get(dep.burst, [])
        p = bisect.bisect_left(c, dep.offset)  # a point exactly at a cut belongs to the piece before
        return Dep(dep.task, base[dep.task][dep.burst] + p, dep.offset - (c[p - 1] if p else 0))

    for t in tasks:
        t.arrival_dep = moved(t.arrival_dep)
        for blk in t.blocks:
            blk.dep = moved(blk.dep)
    for i, per in cuts.items():
        t = tasks[i]
        bursts, blocks = [], []
        for b, length in enumerate(t.bursts):
            edges = [0] + per.get(b, []) + [length]
            for k in range(len(edges) - 1):
                bursts.append(edges[k + 1] - edges[k])
                if k < len(edges) - 2:
                    blocks.append(Block(0, YIELD))
            if b < len(t.blocks):
                blocks.append(t.blocks[b])
        t.bursts, t.blocks = bursts, blocks
    return sum(len(c) for per in cuts.values() for c in per.values())


def _classify(tid, b_start, woke, code, waker, index, progress, syscalls):
    if code == DISK:
        return IO, None
    if waker not in index or waker == tid:
        return SLEEP, None
    if syscalls.present:
        if syscalls.at(tid, b_start) in TIMED_SLEEPS:
            return SLEEP, None  # the timer's interrupt ran in whatever thread held the CPU
        if syscalls.at(waker, woke) is None:
            return SLEEP, None  # woken from an interrupt that hit the waker in user mode
    return SYNC, Dep(index[waker], *progress[waker].point(woke))


OTHERS_MAX = 2000  # other tasks replayed one by one (by CPU time); the rest are left to the K fit


def others(con, program_tids: set[int], origin: int, end: int) -> list[Task]:
    """Every other task of a system-wide trace inside the program's window, replayed as it ran:
    its CPU bursts (slices joined across preemptions, as for the program) and, between them, a
    block until the time the kernel woke it (UNTIL), pinned to the CPUs it ran on. A per-CPU
    stretch would hide how many of them wanted the CPU at once and how often each woke, which is
    what a fair scheduler's switches depend on (docs/whatif.md, "other tasks")."""
    prog = ",".join(str(t) for t in sorted(program_tids)) or "-1"
    rows = con.execute(f"""SELECT tid, sum(least(end_ns, ?) - greatest(start_ns, ?)) AS ns FROM cpu_slices
                           WHERE tid <> 0 AND tid NOT IN ({prog}) AND end_ns > ? AND start_ns < ?
                           GROUP BY tid ORDER BY ns DESC, tid LIMIT {OTHERS_MAX}""",
                       [end, origin, origin, end]).fetchall()
    tids = sorted(int(r[0]) for r in rows if r[1] and r[1] > 0)
    if not tids:
        return []
    st, ss, se, scpu, scode = _slices(con, tids)
    keep = (se > origin) & (ss < end)
    st, ss, se, scpu, scode = st[keep], np.maximum(ss[keep], origin), np.minimum(se[keep], end), scpu[keep], scode[keep]
    wt, wts = _arrays(con, f"""SELECT tid, ts FROM wakeups WHERE tid IN ({",".join(map(str, tids))})
                               AND ts >= ? AND ts < ? ORDER BY tid, ts""", [origin, end])
    out = []
    for tid in tids:
        lo, hi = np.searchsorted(st, tid, "left"), np.searchsorted(st, tid, "right")
        if hi <= lo:
            continue
        wlo, whi = np.searchsorted(wt, tid, "left"), np.searchsorted(wt, tid, "right")
        woken = wts[wlo:whi].tolist()
        bursts, raw, _b, _c, _w = _task_shape(tid, ss[lo:hi], se[lo:hi], scpu[lo:hi], scode[lo:hi],
                                              woken, [-1] * len(woken))
        first = int(ss[lo])
        j = bisect.bisect_right(woken, first) - 1  # woken before its first slice: it was waiting since
        arrival = (woken[j] if j >= 0 else first) - origin
        blocks = [Block(woke - origin, UNTIL) for _s, woke, _code, _w in raw]
        cpus = tuple(sorted({int(c) for c in scpu[lo:hi]}))
        out.append(Task(tid, f"other {tid}", [max(1, b) for b in bursts], blocks, arrival=max(0, arrival),
                        cpus=cpus, background=True))
    return out


BG_BINS = 2000  # the background's time profile is kept in at most this many bins per CPU
BG_BIN_MIN_NS = 10_000_000


def _background(con, program_tids: set[int], origin: int, end: int) -> dict[int, dict]:
    """Other tasks' demand per CPU, as far as it met the program: each time another task took a
    CPU inside the window, until that CPU's next recorded switch (the collector keeps only switches
    that involve the program, so what ran between is seen as one stretch). Per CPU: total ns and
    the ns in each time bin (bin_ns wide, from the origin). background.py makes competitors of it."""
    prog = ",".join(str(t) for t in sorted(program_tids)) or "-1"
    bin_ns = max(BG_BIN_MIN_NS, (end - origin) // BG_BINS + 1)
    rows = con.execute(f"""SELECT cpu, greatest(ts, ?) - ?, least(nts, ?) - ?, nprev
                           FROM (SELECT ts, cpu, next_tid, lead(ts) OVER (PARTITION BY cpu ORDER BY ts) AS nts,
                                        lead(prev_tid) OVER (PARTITION BY cpu ORDER BY ts) AS nprev
                                 FROM switches)
                           WHERE next_tid <> 0 AND next_tid NOT IN ({prog}) AND nts IS NOT NULL AND nts > ? AND ts < ?
                           ORDER BY cpu, ts""", [origin, origin, end, origin, origin, end]).fetchall()
    out: dict[int, dict] = {}
    for cpu, s, e, nprev in rows:
        b = out.setdefault(int(cpu), {"cpu_ns": 0, "stretches": 0, "bin_ns": bin_ns, "bins": {}, "episodes": []})
        b["cpu_ns"] += int(e - s)
        b["stretches"] += 1
        b["episodes"].append((int(s), int(e), nprev != 0))
        while s < e:  # spread the stretch over the bins it covers
            k = s // bin_ns
            upto = min(e, (k + 1) * bin_ns)
            b["bins"][k] = b["bins"].get(k, 0) + int(upto - s)
            s = upto
    for b in out.values():
        b["episodes"] = _capped(b["episodes"])
    return {c: b for c, b in out.items() if b["cpu_ns"] > 0}


EPISODES_MAX = 20_000  # per CPU: a longer trace's stretches are merged with their neighbours


def _capped(episodes: list) -> list:
    """At most EPISODES_MAX stretches, merging each with the next while too many (bounded memory)."""
    while len(episodes) > EPISODES_MAX:
        merged = []
        for j in range(0, len(episodes), 2):
            pair = episodes[j:j + 2]
            merged.append((pair[0][0], pair[-1][1], pair[-1][2]))
        episodes = merged
    return episodes
