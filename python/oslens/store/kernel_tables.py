"""Kernel tables from the kernel collector's per-CPU raw chunks (kinds 64..127, documented in
crates/format/src/kernel.rs, named through oslens._native). Called by the store's importer:
`build_kernel_tables(chunks, meta) -> {table name: pyarrow.Table}`.

Everything is vectorised with numpy over the concatenated records, sorted by time; the only
Python loops run over small sets (forks, distinct comm or state values). Times are
CLOCK_MONOTONIC ns (the collector asks perf for that clock), so they share the application's
time base once its TSC values are converted at import.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from oslens import _native
from oslens.capture import raw

SWITCH, WAKEUP, FORK, EXEC, EXIT, MIGRATE = (_native.KINDS[n] for n in (
    "sched_switch", "sched_waking", "fork", "exec", "exit", "migrate"))
SYS_ENTER, SYS_EXIT, FAULT, BLOCK_ISSUE, BLOCK_COMPLETE = (_native.KINDS[n] for n in (
    "sys_enter", "sys_exit", "page_fault_user", "block_rq_issue", "block_rq_complete"))
IRQ_ENTRY, IRQ_EXIT, SOFTIRQ_ENTRY, SOFTIRQ_EXIT, SAMPLE, LOST, COUNTER, TRACED, TASK = (_native.KINDS[n] for n in (
    "irq_entry", "irq_exit", "softirq_entry", "softirq_exit", "sample", "kernel_lost", "kernel_counter",
    "traced_root", "task"))
NAME_TASK, NAME_EXEC, NAME_IRQ = (_native.KERNEL_NAME_CLASSES[n] for n in ("task", "exec", "irq"))
RW_LETTERS = tuple((_native.BLOCK_RW_FLAGS[n], letter) for n, letter in (
    ("write", "W"), ("read", "R"), ("discard", "D"), ("flush", "F"), ("sync", "S"), ("meta", "M"), ("ahead", "A"),
    ("fua", "U")))
COUNTER_NAMES = _native.KERNEL_COUNTER_NAMES
FAULT_IP_BITS, BLOCK_SECTORS_SHIFT, BLOCK_SECTORS_BITS, BLOCK_FLAGS_SHIFT = (_native.KERNEL_FIELD_LAYOUT[n] for n in (
    "fault_ip_bits", "block_sectors_shift", "block_sectors_bits", "block_flags_shift"))
STATE_LETTERS = ((0x01, "S"), (0x02, "D"), (0x04, "T"), (0x08, "t"), (0x10, "X"), (0x20, "Z"), (0x40, "P"), (0x80, "I"))
SOFTIRQ_NAMES = ["HI", "TIMER", "NET_TX", "NET_RX", "BLOCK", "IRQ_POLL", "TASKLET", "SCHED", "HRTIMER", "RCU"]
LOW32 = np.uint64(0xFFFFFFFF)
CLONE_THREAD = 0x10000

_SYSCALL_NAMES = (
    "read write open close stat fstat lstat poll lseek mmap mprotect munmap brk rt_sigaction "
    "rt_sigprocmask rt_sigreturn ioctl pread64 pwrite64 readv writev access pipe select "
    "sched_yield mremap msync mincore madvise shmget shmat shmctl dup dup2 pause nanosleep "
    "getitimer alarm setitimer getpid sendfile socket connect accept sendto recvfrom sendmsg "
    "recvmsg shutdown bind listen getsockname getpeername socketpair setsockopt getsockopt clone "
    "fork vfork execve exit wait4 kill uname semget semop semctl shmdt msgget msgsnd msgrcv "
    "msgctl fcntl flock fsync fdatasync truncate ftruncate getdents getcwd chdir fchdir rename "
    "mkdir rmdir creat link unlink symlink readlink chmod fchmod chown fchown lchown umask "
    "gettimeofday getrlimit getrusage sysinfo times ptrace getuid syslog getgid setuid setgid "
    "geteuid getegid setpgid getppid getpgrp setsid setreuid setregid getgroups setgroups "
    "setresuid getresuid setresgid getresgid getpgid setfsuid setfsgid getsid capget capset "
    "rt_sigpending rt_sigtimedwait rt_sigqueueinfo rt_sigsuspend sigaltstack utime mknod uselib "
    "personality ustat statfs fstatfs sysfs getpriority setpriority sched_setparam "
    "sched_getparam sched_setscheduler sched_getscheduler sched_get_priority_max "
    "sched_get_priority_min sched_rr_get_interval mlock munlock mlockall munlockall vhangup "
    "modify_ldt pivot_root _sysctl prctl arch_prctl adjtimex setrlimit chroot sync acct "
    "settimeofday mount umount2 swapon swapoff reboot sethostname setdomainname iopl ioperm "
    "create_module init_module delete_module get_kernel_syms query_module quotactl nfsservctl "
    "getpmsg putpmsg afs_syscall tuxcall security gettid readahead setxattr lsetxattr fsetxattr "
    "getxattr lgetxattr fgetxattr listxattr llistxattr flistxattr removexattr lremovexattr "
    "fremovexattr tkill time futex sched_setaffinity sched_getaffinity set_thread_area io_setup "
    "io_destroy io_getevents io_submit io_cancel get_thread_area lookup_dcookie epoll_create "
    "epoll_ctl_old epoll_wait_old remap_file_pages getdents64 set_tid_address restart_syscall "
    "semtimedop fadvise64 timer_create timer_settime timer_gettime timer_getoverrun timer_delete "
    "clock_settime clock_gettime clock_getres clock_nanosleep exit_group epoll_wait epoll_ctl "
    "tgkill utimes vserver mbind set_mempolicy get_mempolicy mq_open mq_unlink mq_timedsend "
    "mq_timedreceive mq_notify mq_getsetattr kexec_load waitid add_key request_key keyctl "
    "ioprio_set ioprio_get inotify_init inotify_add_watch inotify_rm_watch migrate_pages openat "
    "mkdirat mknodat fchownat futimesat newfstatat unlinkat renameat linkat symlinkat readlinkat "
    "fchmodat faccessat pselect6 ppoll unshare set_robust_list get_robust_list splice tee "
    "sync_file_range vmsplice move_pages utimensat epoll_pwait signalfd timerfd_create eventfd "
    "fallocate timerfd_settime timerfd_gettime accept4 signalfd4 eventfd2 epoll_create1 dup3 "
    "pipe2 inotify_init1 preadv pwritev rt_tgsigqueueinfo perf_event_open recvmmsg fanotify_init "
    "fanotify_mark prlimit64 name_to_handle_at open_by_handle_at clock_adjtime syncfs sendmmsg "
    "setns getcpu process_vm_readv process_vm_writev kcmp finit_module sched_setattr "
    "sched_getattr renameat2 seccomp getrandom memfd_create kexec_file_load bpf execveat "
    "userfaultfd membarrier mlock2 copy_file_range preadv2 pwritev2 pkey_mprotect pkey_alloc "
    "pkey_free statx io_pgetevents rseq - - - - - - - - - - - - - - - - - - - - - - - - - - - - "
    "- - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - - "
    "- - - - - - - - - - - - - - - pidfd_send_signal io_uring_setup io_uring_enter "
    "io_uring_register open_tree move_mount fsopen fsconfig fsmount fspick pidfd_open clone3 "
    "close_range openat2 pidfd_getfd faccessat2 process_madvise epoll_pwait2 mount_setattr "
    "quotactl_fd landlock_create_ruleset landlock_add_rule landlock_restrict_self memfd_secret "
    "process_mrelease futex_waitv set_mempolicy_home_node cachestat fchmodat2 map_shadow_stack "
    "futex_wake futex_wait futex_requeue statmount listmount lsm_get_self_attr lsm_set_self_attr "
    "lsm_list_modules mseal setxattrat getxattrat listxattrat removexattrat open_tree_attr "
    "file_getattr file_setattr "
).split()


def syscall_name(nr: int) -> str:
    if 0 <= nr < len(_SYSCALL_NAMES) and _SYSCALL_NAMES[nr] != "-":
        return _SYSCALL_NAMES[nr]
    return f"syscall_{nr}"


def _syscall_names(nrs: np.ndarray) -> pa.Array:
    uniq, inv = np.unique(nrs, return_inverse=True)
    return pa.DictionaryArray.from_arrays(pa.array(inv.astype(np.int32)), pa.array([syscall_name(int(n)) for n in uniq], type=pa.string()))


def _strings(values: np.ndarray, fmt) -> pa.Array:
    """Maps integer codes to strings through `fmt`, once per distinct value."""
    if len(values) == 0:
        return pa.array([], type=pa.string())
    uniq, inv = np.unique(values, return_inverse=True)
    return pa.array([fmt(int(u)) for u in uniq], type=pa.string()).take(pa.array(inv.astype(np.int64)))


def state_letters(state: int) -> str:
    s = state & 0xFF
    if s == 0:
        return "R"
    return "|".join(letter for bit, letter in STATE_LETTERS if s & bit)


def rw_letters(flags: int) -> str:
    return "".join(letter for bit, letter in RW_LETTERS if flags & bit) or "N"


def _i64(x) -> np.ndarray:
    return np.asarray(x).astype(np.int64)


def _i32(x) -> np.ndarray:
    """Low 32 bits as a signed value (pids, cpus, syscall numbers)."""
    return (np.asarray(x, dtype=np.uint64) & LOW32).astype(np.uint32).view(np.int32).astype(np.int64)


def _hi32(x) -> np.ndarray:
    return (np.asarray(x, dtype=np.uint64) >> np.uint64(32)).astype(np.int64)


def _nullable(values: np.ndarray, valid: np.ndarray, typ=pa.int64()) -> pa.Array:
    return pa.array(values, type=typ, mask=~np.asarray(valid, dtype=bool))


class _Records:
    """Every valid kernel record of the trace, sorted by time, plus the NAME records with
    their times (comm history)."""

    def __init__(self, chunks):
        recs, name_rows, lost_rows = [], [], []
        for c in chunks:
            r = c.records
            if len(r) == 0:
                if c.header:
                    lost_rows.append((c.header["cpu"], int(c.header["dropped_events"]), 0))
                continue
            is_name = r["kind"] == raw.NAME
            name_recs = r[is_name]
            if len(name_recs) == len(c.names):
                for rec, (ident, cls, _m, name) in zip(name_recs.tolist(), c.names):
                    name_rows.append((int(rec[0]), int(ident), int(cls), name))
            else:  # cannot align names with their records: keep them without a time
                name_rows.extend((0, int(i), int(cls), n) for i, cls, _m, n in c.names)
            body = r[~is_name]
            recs.append(body)
            lost_in_records = int(body["a"][body["kind"] == LOST].sum())
            cpu = c.header["cpu"] if c.header else (int(body["cpu"][0]) if len(body) else -1)
            header_lost = int(c.header["dropped_events"]) if c.header else 0
            lost_rows.append((cpu, header_lost, lost_in_records))
        allr = np.concatenate(recs) if recs else np.zeros(0, dtype=raw.RECORD_DTYPE)
        order = np.argsort(allr["ts"], kind="stable")
        self.r = allr[order]
        self.names = name_rows
        self.lost_rows = lost_rows
        self._by_kind = {}

    def kind(self, k: int) -> np.ndarray:
        if k not in self._by_kind:
            self._by_kind[k] = self.r[self.r["kind"] == k]
        return self._by_kind[k]


class _TidMap:
    """tid -> pid from every record that names both (the last one wins)."""

    def __init__(self, R: _Records):
        tids, pids = [], []

        def add(t, p):
            tids.append(_i64(t))
            pids.append(_i64(p))

        for k in (SWITCH, WAKEUP, SYS_ENTER, SYS_EXIT):
            x = R.kind(k)
            add(x["id"], _hi32(x["a"]))
        f = R.kind(FORK)
        add(f["id"], _i32(f["b"]))
        add(_i32(f["a"]), _hi32(f["a"]))
        e = R.kind(EXEC)
        add(e["id"], _i32(e["a"]))
        x = R.kind(EXIT)
        add(x["id"], _i32(x["a"]))
        s = R.kind(SAMPLE)
        add(s["id"], _i32(s["b"]))
        for k in (IRQ_ENTRY, SOFTIRQ_ENTRY, SOFTIRQ_EXIT):
            x = R.kind(k)
            add(x["id"], _i32(x["b"]))
        t = np.concatenate(tids) if tids else np.zeros(0, np.int64)
        p = np.concatenate(pids) if pids else np.zeros(0, np.int64)
        keep = p > 0
        t, p = t[keep], p[keep]
        # last occurrence per tid: unique over the reversed arrays
        rt, rp = t[::-1], p[::-1]
        self.keys, first = np.unique(rt, return_index=True)
        self.vals = rp[first]

    def __call__(self, tids: np.ndarray) -> np.ndarray:
        tids = _i64(tids)
        out = np.full(len(tids), -1, dtype=np.int64)
        if len(self.keys):
            idx = np.clip(np.searchsorted(self.keys, tids), 0, len(self.keys) - 1)
            hit = self.keys[idx] == tids
            out[hit] = self.vals[idx[hit]]
        out[tids == 0] = 0
        return out


class _Comms:
    """The comm of a task at a time, from NAME_TASK records (written whenever it changes)."""

    def __init__(self, R: _Records):
        rows = [(ts, i, n) for ts, i, cls, n in R.names if cls == NAME_TASK]
        rows.sort(key=lambda x: (x[1], x[0]))
        self.ts = np.array([r[0] for r in rows], dtype=np.int64)
        self.tid = np.array([r[1] for r in rows], dtype=np.int64)
        self.text = np.array([r[2] for r in rows] or [""], dtype=object)
        self.sorted_ts = np.sort(self.ts)
        n = len(self.ts) + 1
        self.n = n
        self.keys = self.tid * n + np.searchsorted(self.sorted_ts, self.ts, side="right")
        # first comm per tid, for times before the first NAME
        self.first_tid, first_idx = np.unique(self.tid, return_index=True)
        self.first_idx = first_idx
        exe = [(i, n) for _ts, i, cls, n in R.names if cls == NAME_EXEC]
        self.exe = dict(exe)
        self.irq = {i: n for _ts, i, cls, n in R.names if cls == NAME_IRQ}

    def at(self, tids: np.ndarray, ts: np.ndarray) -> np.ndarray:
        tids, ts = _i64(tids), _i64(ts)
        out = np.full(len(tids), "", dtype=object)
        if len(self.ts) == 0 or len(tids) == 0:
            out[tids == 0] = "<idle>"
            return out
        q = tids * self.n + np.searchsorted(self.sorted_ts, ts, side="right")
        idx = np.searchsorted(self.keys, q, side="right") - 1
        ok = (idx >= 0) & (self.tid[np.clip(idx, 0, None)] == tids)
        out[ok] = self.text[idx[ok]]
        # before the first NAME of a task: its first comm
        miss = ~ok
        if miss.any():
            j = np.clip(np.searchsorted(self.first_tid, tids[miss]), 0, len(self.first_tid) - 1)
            hit = self.first_tid[j] == tids[miss]
            vals = np.full(hit.shape, "", dtype=object)
            vals[hit] = self.text[self.first_idx[j[hit]]]
            out[miss] = vals
        out[tids == 0] = "<idle>"
        return out

    def longest(self, tids: np.ndarray, lo: np.ndarray, hi: np.ndarray):
        """Per task: the comm it held longest within [lo, hi] (renames and exec followed; '' when
        no name was recorded) and whether it ever changed its name."""
        n = len(tids)
        best = np.full(n, "", dtype=object)
        renamed = np.zeros(n, bool)
        if len(self.ts) == 0 or n == 0:
            return best, renamed
        # rows are sorted by (tid, ts): one run per task
        starts = np.searchsorted(self.tid, tids, side="left")
        stops = np.searchsorted(self.tid, tids, side="right")
        for j in np.nonzero(stops > starts)[0]:
            a, b = int(starts[j]), int(stops[j])
            texts = self.text[a:b]
            renamed[j] = len(set(texts)) > 1
            if b - a == 1:
                best[j] = texts[0]
                continue
            ts = np.clip(self.ts[a:b], lo[j], hi[j])
            ts[0] = lo[j] if lo[j] > np.iinfo(np.int64).min else ts[0]
            held = np.diff(np.append(ts, hi[j]))
            total: dict[str, int] = {}
            for x, h in zip(texts, held.tolist()):
                total[x] = total.get(x, 0) + max(h, 0)
            best[j] = max(reversed(list(total)), key=lambda x: total[x])  # ties: the later name
        return best, renamed

    def last(self, tids: np.ndarray) -> np.ndarray:
        return self.at(tids, np.full(len(tids), np.iinfo(np.int64).max // 2, dtype=np.int64))


def _table(cols: dict) -> pa.Table:
    return pa.table({k: (v if isinstance(v, (pa.Array, pa.ChunkedArray)) else pa.array(v)) for k, v in cols.items()})


def _switches(R, pid_of, comms):
    s = R.kind(SWITCH)
    ts, cpu = _i64(s["ts"]), _i64(s["cpu"])
    prev, nxt = _i64(s["id"]), _i32(s["a"])
    prev_pid = _hi32(s["a"])
    unknown = prev_pid <= 0
    prev_pid[unknown] = pid_of(prev[unknown])
    state = _i32(s["b"])
    return _table({
        "ts": ts, "cpu": cpu, "prev_pid": prev_pid, "prev_tid": prev,
        "prev_comm": pa.array(comms.at(prev, ts), type=pa.string()),
        "prev_state": _strings(state, state_letters),
        "next_pid": pid_of(nxt), "next_tid": nxt,
        "next_comm": pa.array(comms.at(nxt, ts), type=pa.string()),
        "prev_prio": _hi32(s["b"]).astype(np.int32).astype(np.int64),
    })


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
    return _table({
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


def _wakeups(R, pid_of):
    w = R.kind(WAKEUP)
    tid = _i32(w["a"])
    return _table({
        "ts": _i64(w["ts"]), "cpu": _i64(w["cpu"]), "tid": tid, "target_cpu": _i32(w["b"]),
        "waker_tid": _i64(w["id"]), "pid": pid_of(tid), "waker_pid": _hi32(w["a"]),
    })


def _pair(key_a: np.ndarray, key_b: np.ndarray, ts: np.ndarray, is_end: np.ndarray):
    """Sorts by (key_a, key_b, ts, is_end) and returns (order, i) where records i (a start) and
    i+1 (an end) pair up."""
    order = np.lexsort((is_end, ts, key_b, key_a))
    ka, kb, e = key_a[order], key_b[order], is_end[order]
    ok = (~e[:-1]) & e[1:] & (ka[:-1] == ka[1:]) & (kb[:-1] == kb[1:])
    return order, np.nonzero(ok)[0]


# x86-64 numbers of the calls that need care when pairing entries with exits
NR_CLONE, NR_FORK, NR_VFORK, NR_EXIT, NR_EXIT_GROUP, NR_CLONE3 = 56, 57, 58, 60, 231, 435
FORK_CALLS = (NR_CLONE, NR_FORK, NR_VFORK, NR_CLONE3)
NO_RETURN_CALLS = (NR_EXIT, NR_EXIT_GROUP)


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
    tid = np.concatenate([_i64(en["id"]), _i64(ex["id"])])
    nr = np.concatenate([_i32(en["a"]), _i32(ex["a"])])
    ts = np.concatenate([_i64(en["ts"]), _i64(ex["ts"])])
    pid = np.concatenate([_hi32(en["a"]), _hi32(ex["a"])])
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
    exit_at = dict(zip(_i64(x["id"]).tolist(), _i64(x["ts"]).tolist()))
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
    return _table({
        "pid": rows_pid[srt], "tid": rows_tid[srt], "nr": rows_nr[srt], "name": _syscall_names(rows_nr[srt]),
        "start_ns": _nullable(start[srt], start_ok[srt]), "end_ns": _nullable(end[srt], end_ok[srt]),
        "ret": _nullable(ret[srt], ret_ok[srt]),
    })


def _faults(R, pid_of):
    f = R.kind(FAULT)
    tid = _i64(f["id"])
    b = f["b"].astype(np.uint64)
    return _table({
        "ts": _i64(f["ts"]), "pid": pid_of(tid), "tid": tid, "address": pa.array(f["a"].astype(np.uint64)),
        "ip": pa.array(b & np.uint64((1 << FAULT_IP_BITS) - 1)), "error_code": (b >> np.uint64(FAULT_IP_BITS)).astype(np.int64),
        "cpu": _i64(f["cpu"]),
    })


def _dev_name(dev: int) -> str:
    """major:minor of a dev_t as the kernel holds it inside (MINORBITS = 20 in include/linux/kdev_t.h)."""
    return f"{dev >> 20}:{dev & ((1 << 20) - 1)}"


def _block_io(R, pid_of):
    iss, com = R.kind(BLOCK_ISSUE), R.kind(BLOCK_COMPLETE)
    dev = np.concatenate([_i32(iss["b"]), _i32(com["b"])]) & 0xFFFFFFFF
    sector = np.concatenate([_i64(iss["a"]), _i64(com["a"])])
    ts = np.concatenate([_i64(iss["ts"]), _i64(com["ts"])])
    b = np.concatenate([iss["b"], com["b"]]).astype(np.uint64)
    tid = np.concatenate([_i64(iss["id"]), _i64(com["id"])])
    is_end = np.concatenate([np.zeros(len(iss), bool), np.ones(len(com), bool)])
    order, i = _pair(dev, sector, ts, is_end)
    e = is_end[order]
    paired = np.zeros(len(order), bool)
    paired[i] = True
    lone = np.nonzero(~e & ~paired)[0]  # issued, not completed before the end
    rows = np.concatenate([i, lone])
    o = order[rows]
    sectors = ((b[o] >> np.uint64(BLOCK_SECTORS_SHIFT)) & np.uint64((1 << BLOCK_SECTORS_BITS) - 1)).astype(np.int64)
    flags = (b[o] >> np.uint64(BLOCK_FLAGS_SHIFT)).astype(np.int64)
    comp = np.concatenate([ts[order[i + 1]], np.zeros(len(lone), np.int64)])
    comp_ok = np.concatenate([np.ones(len(i), bool), np.zeros(len(lone), bool)])
    srt = np.argsort(ts[o], kind="stable")
    return _table({
        "issue_ns": ts[o][srt], "complete_ns": _nullable(comp[srt], comp_ok[srt]),
        "dev": _strings(dev[o][srt], _dev_name), "sector": sector[o][srt], "bytes": sectors[srt] * 512,
        "rw": _strings(flags[srt], rw_letters), "tid": tid[o][srt], "pid": pid_of(tid[o][srt]),
        "dev_num": dev[o][srt],
    })


def _samples(R):
    s = R.kind(SAMPLE)
    return _table({
        "ts": _i64(s["ts"]), "pid": _i32(s["b"]), "tid": _i64(s["id"]), "cpu": _i64(s["cpu"]),
        "ip": pa.array(s["a"].astype(np.uint64)), "in_kernel": (_hi32(s["b"]) & 1).astype(bool),
    })


def _root(R, meta) -> int:
    """The traced program's first task: from the collector's TRACED record, else meta's pid."""
    traced_rec = R.kind(TRACED)
    return int(traced_rec["id"][0]) if len(traced_rec) else int(meta.get("pid") or 0)


def _tree(R, root: int) -> set[int]:
    """The root and every task forked from it, recursively (the tree the collector follows)."""
    forks = R.kind(FORK)
    members = {root}
    for parent, kid in zip(_i64(forks["id"]).tolist(), _i32(forks["a"]).tolist()):  # forks are few
        if parent in members:
            members.add(kid)
    return members


def _whole_tasks(R, meta) -> set[int] | None:
    """The tasks whose every switch the collector keeps: all of them system-wide, else the tree."""
    if (meta.get("settings") or {}).get("system_wide"):
        return None
    root = _root(R, meta)
    return _tree(R, root) if root else set()


def _tasks(R, pid_of, comms, meta):
    forks, execs, exits = R.kind(FORK), R.kind(EXEC), R.kind(EXIT)
    traced_rec = R.kind(TRACED)
    root = _root(R, meta)
    root_ts = int(traced_rec["ts"][0]) if len(traced_rec) else None
    sw = R.kind(SWITCH)
    seen = [
        _i64(sw["id"]), _i32(sw["a"]), _i32(forks["a"]), _i64(forks["id"]), _i64(execs["id"]), _i64(exits["id"]),
        _i64(R.kind(SYS_ENTER)["id"]), _i64(R.kind(SAMPLE)["id"]), _i64(R.kind(FAULT)["id"]),
    ]
    tids = np.unique(np.concatenate(seen)) if seen else np.zeros(0, np.int64)
    if root:
        tids = np.union1d(tids, [root])
    tids = tids[tids > 0]
    n = len(tids)
    start = np.zeros(n, np.int64)
    start_ok = np.zeros(n, bool)
    end = np.zeros(n, np.int64)
    end_ok = np.zeros(n, bool)
    parent_tid = np.zeros(n, np.int64)
    parent_pid = np.zeros(n, np.int64)
    parent_ok = np.zeros(n, bool)
    child = _i32(forks["a"])
    idx = np.searchsorted(tids, child)
    start[idx], start_ok[idx] = _i64(forks["ts"]), True
    parent_tid[idx], parent_pid[idx], parent_ok[idx] = _i64(forks["id"]), _i32(forks["b"]), True
    idx = np.searchsorted(tids, _i64(exits["id"]))
    end[idx], end_ok[idx] = _i64(exits["ts"]), True
    traced = np.zeros(n, bool)
    if root:
        r = np.searchsorted(tids, root)
        traced[r] = True
        if root_ts is not None and not start_ok[r]:
            start[r], start_ok[r] = root_ts, True
        traced = np.isin(tids, np.fromiter(_tree(R, root), dtype=np.int64))
    exe = np.array([comms.exe.get(int(t), "") for t in tids], dtype=object) if comms.exe else np.full(n, "", dtype=object)
    pid = pid_of(tids)
    exec_ns, exec_ok = _exec_times(execs, tids, first=True)
    last_exec, last_exec_ok = _exec_times(execs, tids, first=False)
    last_seen = int(R.r["ts"][-1]) if len(R.r) else 0
    # a process that exec'd is named by what it became (the launcher's `oslens` hold, a shell's
    # fork before it runs a command)
    lo = np.where(last_exec_ok, last_exec, np.where(start_ok, start, np.iinfo(np.int64).min))
    hi = np.where(end_ok, end, last_seen)
    main_comm, renamed = comms.longest(tids, lo, hi)
    last_comm = comms.last(tids)
    main_comm = np.where(main_comm == "", last_comm, main_comm)
    # oslens's own tasks end their lives under its names (the process oslens launches is called
    # `oslens` only until its exec)
    named_oslens = np.array([str(c).startswith("oslens") for c in last_comm], bool)
    own = named_oslens | _killed_by_exec_unnamed(tids, pid, end, end_ok, renamed, execs)
    return _table({
        "pid": pid, "tid": tids, "comm": pa.array(comms.last(tids), type=pa.string()),
        "parent_pid": _nullable(parent_pid, parent_ok), "parent_tid": _nullable(parent_tid, parent_ok),
        "start_ns": _nullable(start, start_ok), "end_ns": _nullable(end, end_ok), "is_traced": traced,
        "exe": pa.array(exe, type=pa.string()),
        "main_comm": pa.array(main_comm, type=pa.string()),
        "exec_ns": _nullable(exec_ns, exec_ok),
        "is_oslens": own,
    })


# exec kills a process's other threads before it completes: a thread that exits this long before
# its process's exec record died of it
EXEC_KILL_WINDOW_NS = 50_000_000


def _exec_times(execs, tids: np.ndarray, first: bool):
    """Each task's first (or last) successful exec (sched_process_exec), if seen."""
    out, ok = np.zeros(len(tids), np.int64), np.zeros(len(tids), bool)
    e_tid, e_ts = _i64(execs["id"]), _i64(execs["ts"])
    for t, ts in sorted(zip(e_tid.tolist(), e_ts.tolist()), key=lambda x: -x[1] if first else x[1]):  # execs are few
        j = np.searchsorted(tids, t)
        if j < len(tids) and tids[j] == t:
            out[j], ok[j] = ts, True
    return out, ok


def _killed_by_exec_unnamed(tids, pid, end, end_ok, renamed, execs) -> np.ndarray:
    """Threads that their process's exec killed before they ever changed their inherited name:
    a non-main thread that exited just before its process exec'd. In a traced process these are
    the recorder's helper threads caught before they named themselves (the store's `threads`
    keeps the flag only for threads that recorded no application events)."""
    out = np.zeros(len(tids), bool)
    if len(execs) == 0:
        return out
    exec_by_pid: dict[int, list[int]] = {}
    for t, a, ts in zip(_i64(execs["id"]).tolist(), _i32(execs["a"]).tolist(), _i64(execs["ts"]).tolist()):
        exec_by_pid.setdefault(a if a > 0 else t, []).append(ts)
    for j in np.nonzero(end_ok & (tids != pid) & ~renamed)[0]:
        if any(0 <= x - end[j] <= EXEC_KILL_WINDOW_NS for x in exec_by_pid.get(int(pid[j]), ())):
            out[j] = True
    return out


def _kernel_lost(R):
    per_cpu: dict[int, int] = {}
    for cpu, header, records in R.lost_rows:
        per_cpu[cpu] = per_cpu.get(cpu, 0) + max(header, records)
    cpus = sorted(per_cpu)
    return _table({
        "source": pa.array(["kernel collector"] * len(cpus), type=pa.string()),
        "where": pa.array([f"cpu {c}" for c in cpus], type=pa.string()),
        "count": np.array([per_cpu[c] for c in cpus], dtype=np.int64),
        "cpu": np.array(cpus, dtype=np.int64),
    })


def _irqs(R, comms):
    out = []
    for enter, leave, kind in ((IRQ_ENTRY, IRQ_EXIT, "hard"), (SOFTIRQ_ENTRY, SOFTIRQ_EXIT, "soft")):
        a, b = R.kind(enter), R.kind(leave)
        cpu = np.concatenate([_i64(a["cpu"]), _i64(b["cpu"])])
        num = np.concatenate([_i64(a["a"]), _i64(b["a"])])
        ts = np.concatenate([_i64(a["ts"]), _i64(b["ts"])])
        tid = np.concatenate([_i64(a["id"]), _i64(b["id"])])
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
        out.append(_table({
            "cpu": cpu[o], "tid": tid[o], "irq": num[o], "name": pa.array(names, type=pa.string()),
            "kind": pa.array([kind] * len(o), type=pa.string()), "start_ns": ts[o], "end_ns": ts[o2],
        }))
    t = pa.concat_tables(out)
    return t.take(pa.array(np.argsort(t.column("start_ns").to_numpy(), kind="stable")))


def _counters(R):
    c = R.kind(COUNTER)
    return _table({
        "ts": _i64(c["ts"]), "name": _strings(_i64(c["id"]), lambda i: COUNTER_NAMES.get(i, str(i))),
        "value": _i64(c["a"]), "time_enabled_ns": _i64(c["b"]),
    })


def _migrations(R):
    m = R.kind(MIGRATE)
    return _table({"ts": _i64(m["ts"]), "tid": _i64(m["id"]), "orig_cpu": _i32(m["a"]), "dest_cpu": _hi32(m["a"])})


def build_kernel_tables(chunks: list, meta: dict) -> dict[str, pa.Table]:
    """The kernel tables of a trace from its kernel chunks (source = SOURCE_KERNEL_CPU)."""
    R = _Records(chunks)
    pid_of = _TidMap(R)
    comms = _Comms(R)
    sw = _switches(R, pid_of, comms)
    wk_table = _wakeups(R, pid_of)
    wk = {c: wk_table.column(c).to_numpy().astype(np.int64) for c in ("ts", "tid")}
    return {
        "switches": sw,
        "cpu_slices": _cpu_slices(sw, pid_of, comms, _whole_tasks(R, meta or {}), (wk["ts"], wk["tid"])),
        "wakeups": wk_table,
        "syscalls": _syscalls(R, pid_of),
        "faults": _faults(R, pid_of),
        "block_io": _block_io(R, pid_of),
        "samples": _samples(R),
        "tasks": _tasks(R, pid_of, comms, meta or {}),
        "kernel_lost": _kernel_lost(R),
        "irqs": _irqs(R, comms),
        "kernel_counters": _counters(R),
        "migrations": _migrations(R),
    }
