"""What each task on the machine is: the program, oslens itself, a kernel thread, a daemon or
another process, from its name, its parent and (on the recording machine) /proc."""

from __future__ import annotations

from oslens.analysis.db import has_column
from oslens.analysis.program import Program


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
    if not has_column(con, "tasks", "parent_tid"):
        return {}
    return {int(t): int(p) for t, p in con.execute(
        "SELECT tid, any_value(parent_tid) FROM tasks WHERE parent_tid IS NOT NULL GROUP BY tid").fetchall()}


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
    if prog is not None and tid in prog.own_tids:
        return "oslens", "oslens itself (recorder, helper thread or kernel collector)"
    if comm.startswith("oslens"):
        # another oslens run on the machine is not this recording's cost
        if prog is None or not prog.oslens_pids or pid in prog.oslens_pids or tid in prog.oslens_pids:
            return "oslens", "oslens itself (recorder, helper thread or kernel collector)"
        return "other process", "another oslens run on the machine"
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
