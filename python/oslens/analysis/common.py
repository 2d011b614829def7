"""Helpers shared by the analyses: which tables a trace has, who the program is, the time window,
what each task is, and small interval operations in numpy.

Every analysis takes a DuckDB connection whose views are the trace tables (docs/trace-schema.md)
and returns pyarrow tables. A missing table is treated as an empty one: application-only traces
have no kernel tables, and the analyses leave out what they cannot know.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass, field

import numpy as np
import pyarrow as pa

# ---------------------------------------------------------------- tables and columns


def table_exists(con, name: str) -> bool:
    row = con.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_name = ?", [name]
    ).fetchone()
    return bool(row and row[0])


def columns(con, name: str) -> list[str]:
    if not table_exists(con, name):
        return []
    rows = con.execute(
        "SELECT column_name FROM information_schema.columns WHERE table_name = ? ORDER BY ordinal_position",
        [name],
    ).fetchall()
    return [r[0] for r in rows]


def row_count(con, name: str) -> int:
    if not table_exists(con, name):
        return 0
    return int(con.execute(f'SELECT count(*) FROM "{name}"').fetchone()[0])


def fetch(con, sql: str, params=None) -> pa.Table:
    """Runs a query and returns a pyarrow table."""
    return con.execute(sql, params or []).fetch_arrow_table()


def meta(con) -> dict[str, str]:
    if not table_exists(con, "meta"):
        return {}
    return {str(k): ("" if v is None else str(v)) for k, v in con.execute("SELECT key, value FROM meta").fetchall()}


def empty_table(schema: dict[str, pa.DataType]) -> pa.Table:
    return pa.table({k: pa.array([], type=t) for k, t in schema.items()})


def from_rows(rows: list[dict], schema: dict[str, pa.DataType]) -> pa.Table:
    return pa.table({k: pa.array([r.get(k) for r in rows], type=t) for k, t in schema.items()})


def rows(table: pa.Table) -> list[dict]:
    return table.to_pylist()


# ---------------------------------------------------------------- the kernel collector


def _meta_first(m: dict[str, str], keys) -> str | None:
    for k in keys:
        if m.get(k):
            return m[k]
    return None


def kernel_status(con) -> dict:
    """Whether the trace has kernel events and, when it has none, why (from meta when the
    recorder said so). Returns {"scheduling": bool, "syscalls": bool, "faults": bool,
    "block_io": bool, "reason": str | None, "collector": str | None}."""
    m = meta(con)
    collector = _meta_first(m, ["kernel.tier", "kernel.collector", "collector", "collector.mode", "kernel.mode", "kernel_collector"])
    reason = _meta_first(
        m,
        ["kernel.reason", "kernel.error", "collector.reason", "collector.error", "kernel.status", "collector.status"],
    )
    sched = row_count(con, "switches") > 0 or row_count(con, "cpu_slices") > 0
    st = {
        "scheduling": sched,
        "syscalls": row_count(con, "syscalls") > 0,
        "faults": row_count(con, "faults") > 0,
        "block_io": row_count(con, "block_io") > 0,
        "collector": collector,
        "reason": None,
    }
    if not sched:
        if reason:
            st["reason"] = f"the kernel collector recorded no scheduling events ({reason})"
        elif collector and (collector.lower() in ("none", "off", "disabled", "app", "app-only")
                            or "only" in collector.lower()):
            st["reason"] = f"the kernel collector did not run (collector: {collector})"
        elif collector:
            st["reason"] = f"the kernel collector ({collector}) recorded no scheduling events"
        else:
            st["reason"] = (
                "the trace has no kernel events: the kernel collector did not run or lacked privilege "
                "(record as root, or with CAP_PERFMON/CAP_BPF, to get them)"
            )
    return st


def missing_reason(con, table: str, what: str) -> str:
    """One sentence saying why `table` is empty."""
    st = kernel_status(con)
    if not st["scheduling"]:
        return f"No {what}: {st['reason']}."
    return f"No {what}: the trace's `{table}` table is empty (the collector recorded none)."


# ---------------------------------------------------------------- the program


@dataclass
class Program:
    """The traced program: its threads and the window of time it ran."""

    pids: list[int]
    tids: list[int]
    names: dict[int, str]
    pid_of: dict[int, int]
    start: dict[int, int]
    end: dict[int, int]
    main_tid: int | None
    window: tuple[int, int] | None
    cpus: list[int] = field(default_factory=list)
    own_tids: set[int] = field(default_factory=set)  # oslens's threads inside the program's processes

    @property
    def tidset(self) -> set[int]:
        return set(self.tids)


def _extent_per_tid(con) -> dict[int, tuple[int, int]]:
    """First and last timestamp seen for each thread, over the tables that have it."""
    parts = []
    if table_exists(con, "app_events"):
        parts.append("SELECT tid, min(ts) AS lo, max(ts) AS hi FROM app_events GROUP BY tid")
    if table_exists(con, "regions"):
        parts.append("SELECT tid, min(begin_ns) AS lo, max(coalesce(end_ns, begin_ns)) AS hi FROM regions GROUP BY tid")
    if table_exists(con, "cpu_slices"):
        parts.append("SELECT tid, min(start_ns) AS lo, max(end_ns) AS hi FROM cpu_slices WHERE tid <> 0 GROUP BY tid")
    if table_exists(con, "sync"):
        parts.append(
            "SELECT tid, min(request_ns) AS lo, max(coalesce(release_ns, acquire_ns, request_ns)) AS hi FROM sync GROUP BY tid"
        )
    if not parts:
        return {}
    sql = "SELECT tid, min(lo), max(hi) FROM (" + " UNION ALL ".join(parts) + ") GROUP BY tid"
    return {int(t): (int(a), int(b)) for t, a, b in con.execute(sql).fetchall() if a is not None}


_PROGRAM_CACHE: dict[int, tuple[object, tuple, "Program"]] = {}


def _fingerprint(con) -> tuple:
    return tuple(row_count(con, t) for t in ("threads", "app_events", "regions", "cpu_slices", "sync"))


def program(con) -> Program:
    """Who the program is: the traced threads (threads.is_traced), or, without a threads
    table, every thread that recorded application events. Computed once per connection (and
    again when the tables it reads change size)."""
    fp = _fingerprint(con)
    hit = _PROGRAM_CACHE.get(id(con))
    if hit is not None and hit[0] is con and hit[1] == fp:
        return hit[2]
    prog = _program(con)
    if len(_PROGRAM_CACHE) > 8:
        _PROGRAM_CACHE.clear()
    _PROGRAM_CACHE[id(con)] = (con, fp, prog)
    return prog


def _program(con) -> Program:
    extent = _extent_per_tid(con)
    names: dict[int, str] = {}
    pid_of: dict[int, int] = {}
    start: dict[int, int] = {}
    end: dict[int, int] = {}
    tids: list[int] = []
    own_tids: set[int] = set()
    if row_count(con, "threads"):
        cols = columns(con, "threads")
        traced = "WHERE is_traced" if "is_traced" in cols else ""
        own = "is_oslens" if "is_oslens" in cols else "false"
        exec_ns = "exec_ns" if "exec_ns" in cols else "NULL"
        q = (f"SELECT pid, tid, name, start_ns, end_ns, {own}, {exec_ns} FROM threads {traced} "
             "ORDER BY coalesce(start_ns, 0), tid")
        launched = launched_tid(con)
        for pid, tid, name, s, e, is_own, x in con.execute(q).fetchall():
            tid = int(tid)
            if is_own or (name or "").startswith("oslens"):
                own_tids.add(tid)
            if tid in pid_of or tid in own_tids:
                continue  # oslens's own helper threads inside the program are not the program
            tids.append(tid)
            pid_of[tid] = int(pid) if pid is not None else tid
            names[tid] = name or f"tid {tid}"
            lo, hi = extent.get(tid, (None, None))
            start[tid] = int(s) if s is not None else lo
            end[tid] = int(e) if e is not None else hi
            if tid == launched and x is not None and start[tid] is not None and int(x) > start[tid]:
                # before its exec the process oslens started is oslens's launcher, held until
                # the recorder is ready, then searching PATH (docs/report.md)
                start[tid] = min(int(x), end[tid]) if end[tid] is not None else int(x)
    if not tids:
        pids = {}
        if table_exists(con, "app_events"):
            pids = {int(t): int(p) for p, t in con.execute("SELECT DISTINCT pid, tid FROM app_events").fetchall()}
        elif table_exists(con, "regions"):
            pids = {int(t): int(p) for p, t in con.execute("SELECT DISTINCT pid, tid FROM regions").fetchall()}
        for tid in sorted(pids, key=lambda t: (extent.get(t, (0, 0))[0], t)):
            tids.append(tid)
            pid_of[tid] = pids[tid]
            names[tid] = f"tid {tid}"
            start[tid], end[tid] = extent.get(tid, (None, None))
    # drop threads with no time at all
    tids = [t for t in tids if start.get(t) is not None and end.get(t) is not None]
    pids = sorted({pid_of[t] for t in tids})
    main = None
    for t in tids:
        if t == pid_of[t]:
            main = t
            break
    if main is None and tids:
        main = min(tids, key=lambda t: start[t])
    window = (min(start[t] for t in tids), max(end[t] for t in tids)) if tids else None
    cpus: list[int] = []
    if tids and table_exists(con, "cpu_slices"):
        con_tids = ",".join(str(t) for t in tids)
        cpus = [int(r[0]) for r in con.execute(
            f"SELECT DISTINCT cpu FROM cpu_slices WHERE tid IN ({con_tids}) ORDER BY cpu").fetchall()]
    return Program(pids, tids, names, pid_of, start, end, main, window, cpus, own_tids)


def launched_tid(con) -> int | None:
    """The process `oslens record` started (its main thread), from meta."""
    try:
        return int(meta(con).get("pid") or 0) or None
    except ValueError:
        return None


def trace_origin(con, prog: Program | None = None) -> int:
    """The zero of report time axes: the program's start, else the first event."""
    prog = prog or program(con)
    if prog.window:
        return prog.window[0]
    m = meta(con)
    for k in ("start_ns", "trace.start_ns", "record.start_ns"):
        try:
            return int(m[k])
        except (KeyError, ValueError):
            pass
    return 0


# ---------------------------------------------------------------- what each task is

KERNEL_THREADS = [
    # (prefix, description)
    ("swapper", "idle task: runs when no other task is ready"),
    ("kworker", "kernel worker: deferred work from drivers and subsystems (workqueues)"),
    ("ksoftirqd", "kernel: softirq processing (network, timers, block completions) under load"),
    ("migration", "kernel: moves tasks between CPUs (CPU stopper)"),
    ("rcu_", "kernel: RCU grace-period and callback processing"),
    ("rcuc", "kernel: RCU callbacks"),
    ("rcuog", "kernel: RCU callback offload"),
    ("rcuop", "kernel: RCU callback offload"),
    ("kthreadd", "kernel: creates kernel threads"),
    ("kswapd", "kernel: page reclaim when memory runs low"),
    ("kcompactd", "kernel: memory compaction"),
    ("khugepaged", "kernel: collapses pages into transparent huge pages"),
    ("jbd2", "kernel: ext4 journal commits"),
    ("kblockd", "kernel: block-layer queue work"),
    ("writeback", "kernel: writes dirty pages to disk"),
    ("flush-", "kernel: writes dirty pages to disk"),
    ("cpuhp", "kernel: CPU hotplug"),
    ("watchdog", "kernel: lockup detector"),
    ("irq/", "kernel: threaded interrupt handler"),
    ("idle_inject", "kernel: idle injection (thermal)"),
    ("oom_reaper", "kernel: reclaims memory of killed tasks"),
    ("kauditd", "kernel: audit records"),
    ("khungtaskd", "kernel: hung-task detector"),
    ("ksmd", "kernel: same-page merging"),
    ("kintegrityd", "kernel: block integrity"),
    ("scsi_", "kernel: SCSI error handling / work"),
    ("ext4-", "kernel: ext4 work"),
    ("xfs", "kernel: XFS work"),
    ("btrfs", "kernel: btrfs work"),
    ("loop", "kernel: loop block device"),
    ("nvme", "kernel: NVMe driver work"),
    ("virtio", "kernel: virtio driver work"),
    ("hwrng", "kernel: hardware random number generator"),
    ("psimon", "kernel: pressure-stall monitor"),
    ("kdevtmpfs", "kernel: devtmpfs"),
    ("netns", "kernel: network namespace cleanup"),
    ("napi/", "kernel: threaded network polling"),
    ("pool_workqueue", "kernel: workqueue pool management"),
]

DAEMONS = {
    "systemd": "init and service manager",
    "systemd-journal": "system logger (journald)",
    "systemd-journald": "system logger (journald)",
    "systemd-udevd": "device event manager",
    "systemd-logind": "login manager",
    "systemd-network": "network manager (networkd)",
    "systemd-resolve": "DNS resolver",
    "systemd-timesyn": "time synchronisation",
    "systemd-oomd": "userspace out-of-memory killer",
    "sshd": "SSH server",
    "cron": "periodic job scheduler",
    "crond": "periodic job scheduler",
    "atd": "deferred job scheduler",
    "dbus-daemon": "message bus",
    "dbus-broker": "message bus",
    "rsyslogd": "system logger",
    "rs:main Q:Reg": "system logger (rsyslog main queue)",
    "in:imjournal": "system logger (rsyslog journal input)",
    "irqbalance": "spreads interrupts across CPUs",
    "chronyd": "time synchronisation",
    "ntpd": "time synchronisation",
    "containerd": "container runtime",
    "dockerd": "container engine",
    "NetworkManager": "network manager",
    "polkitd": "authorisation service",
    "udisksd": "disk manager",
    "snapd": "snap package daemon",
    "agetty": "console login",
    "getty": "console login",
    "dhclient": "DHCP client",
    "dhcpcd": "DHCP client",
    "acpid": "ACPI event daemon",
    "qemu-ga": "QEMU guest agent",
    "unattended-upgr": "automatic package upgrades",
    "packagekitd": "package manager service",
    "thermald": "thermal daemon",
    "tuned": "tuning daemon",
    "avahi-daemon": "mDNS service discovery",
    "cupsd": "print server",
    "multipathd": "multipath storage",
    "haveged": "entropy daemon",
}


def _proc_kind(pid: int, comm: str | None) -> str | None:
    """When the task still runs on this machine under the same name, ask /proc."""
    if pid is None or pid <= 0 or not comm:
        return None
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    lpar, rpar = stat.find("("), stat.rfind(")")
    if lpar < 0 or rpar < 0 or stat[lpar + 1 : rpar] != comm:
        return None
    fields = stat[rpar + 2 :].split()
    try:
        ppid = int(fields[1])
        flags = int(fields[6])
        tty = int(fields[4])
    except (IndexError, ValueError):
        return None
    if flags & 0x00200000:  # PF_KTHREAD
        return "kernel thread"
    if ppid == 1 and tty == 0:
        return "daemon"
    return None


def task_parents(con) -> dict[int, int]:
    """Parent of each task the kernel collector saw being created or running (`tasks`)."""
    if not common_has(con, "tasks", "parent_tid"):
        return {}
    return {int(t): int(p) for t, p in con.execute(
        "SELECT tid, any_value(parent_tid) FROM tasks WHERE parent_tid IS NOT NULL GROUP BY tid").fetchall()}


def common_has(con, table: str, column: str) -> bool:
    return column in columns(con, table)


def classify_task(tid: int, pid: int | None, comm: str | None, prog: Program | None,
                  same_host: bool = False, parents: dict[int, int] | None = None) -> tuple[str, str]:
    """(kind, description) of a task: 'idle', 'program', 'oslens', 'kernel thread', 'daemon'
    or 'other process'. Kinds come from the task's name (and, when the trace was recorded on
    this machine and the task still runs under that name, from /proc)."""
    comm = comm or ""
    if tid == 0:
        return "idle", "idle task: runs when no other task is ready"
    if prog is not None and tid in prog.tidset:
        return "program", f"the program: {prog.names.get(tid, comm)}"
    if comm.startswith("oslens") or (prog is not None and tid in prog.own_tids):
        return "oslens", "oslens itself (recorder, helper thread or kernel collector)"
    if prog is not None and pid is not None and pid in prog.pids:
        return "program", f"the program (untraced thread {comm})"
    for prefix, desc in KERNEL_THREADS:
        if comm.startswith(prefix):
            return "kernel thread", desc
    base = comm.split("/")[0]
    if base in DAEMONS:
        return "daemon", DAEMONS[base]
    parent = (parents or {}).get(tid)
    if parent is None and pid is not None and pid != tid:
        parent = (parents or {}).get(pid)
    if parent == 2 or tid == 2:
        return "kernel thread", "kernel thread (a child of kthreadd)"
    if parent == 1:
        return "daemon", "background service (a child of init)"
    if same_host:
        kind = _proc_kind(pid if pid is not None else tid, comm)
        if kind == "kernel thread":
            return kind, "kernel thread"
        if kind == "daemon":
            return kind, "background service (a child of init with no terminal)"
    if pid is not None and pid == 2:
        return "kernel thread", "kernel thread"
    return "other process", "another process on the machine"


def same_host(con) -> bool:
    m = meta(con)
    host = _meta_first(m, ["machine.hostname", "hostname", "host", "system.hostname"])
    return bool(host) and host == socket.gethostname() and os.path.isdir("/proc")


# ---------------------------------------------------------------- intervals


def merge_intervals(starts: np.ndarray, ends: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Union of [start, end) intervals, sorted and disjoint."""
    starts = np.asarray(starts, dtype=np.int64)
    ends = np.asarray(ends, dtype=np.int64)
    keep = ends > starts
    starts, ends = starts[keep], ends[keep]
    if len(starts) == 0:
        return starts, ends
    order = np.argsort(starts, kind="stable")
    s, e = starts[order], ends[order]
    run_end = np.maximum.accumulate(e)
    new = np.ones(len(s), dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    out_s = s[idx]
    out_e = np.maximum.reduceat(e, idx)
    return out_s, out_e


def point_in(points: np.ndarray, starts: np.ndarray, ends: np.ndarray) -> np.ndarray:
    """For each point, whether it lies inside one of the disjoint sorted intervals [s, e)."""
    if len(starts) == 0:
        return np.zeros(len(points), dtype=bool)
    i = np.searchsorted(starts, points, side="right") - 1
    ok = i >= 0
    res = np.zeros(len(points), dtype=bool)
    res[ok] = points[ok] < ends[i[ok]]
    return res


def overlap_total(a_s, a_e, b_s, b_e) -> int:
    """Total length of the intersection of two unions of intervals."""
    a_s, a_e = merge_intervals(a_s, a_e)
    b_s, b_e = merge_intervals(b_s, b_e)
    if len(a_s) == 0 or len(b_s) == 0:
        return 0
    return int(overlap_each(a_s, a_e, b_s, b_e).sum())


def overlap_each(q_s, q_e, b_s, b_e) -> np.ndarray:
    """For each query interval [q_s, q_e), its overlap with the disjoint sorted intervals
    [b_s, b_e), in O((n + m) log m) with prefix sums."""
    q_s = np.asarray(q_s, dtype=np.int64)
    q_e = np.asarray(q_e, dtype=np.int64)
    if len(b_s) == 0 or len(q_s) == 0:
        return np.zeros(len(q_s), dtype=np.int64)
    lens = b_e - b_s
    cum = np.concatenate([[0], np.cumsum(lens)])

    def covered_before(t):
        # length of the union that lies before time t
        i = np.searchsorted(b_s, t, side="right")  # intervals starting at or before t
        full = cum[np.maximum(i - 1, 0)]
        last = np.where(i > 0, np.clip(t - b_s[np.maximum(i - 1, 0)], 0, lens[np.maximum(i - 1, 0)]), 0)
        return np.where(i > 0, full + last, 0)

    return np.maximum(covered_before(q_e) - covered_before(q_s), 0)


def fmt_ns(ns) -> str:
    """A duration in readable units."""
    if ns is None:
        return "-"
    ns = float(ns)
    a = abs(ns)
    if a >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.0f} ns"
