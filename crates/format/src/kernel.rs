//! Kernel record kinds (64..=127), written by the kernel collector (`crates/collector`) into
//! per-CPU chunks `raw/kernel-cpu<N>-<seq>.osl` whose header has source = SOURCE_KERNEL_CPU,
//! clock = CLOCK_MONOTONIC_NS, pid = 0 and cpu = N. The collector owns this file: each kind
//! documents its id / a / b fields. `ts` is CLOCK_MONOTONIC ns (perf's `use_clockid`), `cpu`
//! the CPU the event happened on. "tid" is the kernel's task id, "pid" the thread-group id.
//! `python/oslens/store/kernel_tables.py` mirrors these numbers, and the eBPF programs in
//! `crates/collector/bpf/oslens.bpf.c` write the same layouts (the collector fills in `check`).

/// sched:sched_switch. id = prev tid; a = next tid | prev pid << 32;
/// b = prev_state (the tracepoint's value: bits 0..7 S D T t X Z P I, 0 = runnable (preempted),
/// 0x100 = preempted) | prev prio << 32 (as u32) .
pub const SWITCH: u8 = 64;
/// sched:sched_waking. id = waker tid (the current task); a = woken tid | waker pid << 32;
/// b = target cpu | woken prio << 32.
pub const WAKEUP: u8 = 65;
/// A fork or clone (task:task_newtask through perf, sched:sched_process_fork through eBPF).
/// id = parent tid; a = child tid | child pid << 32; b = parent pid | (clone flags & 0xffffffff)
/// << 32 (through eBPF only CLONE_THREAD, derived from the child's thread group).
pub const FORK: u8 = 66;
/// sched:sched_process_exec. id = tid; a = pid | old tid << 32. The new comm follows as a
/// NAME_TASK record and the file name as a NAME_EXEC record (both id = tid).
pub const EXEC: u8 = 67;
/// sched:sched_process_exit. id = tid; a = pid; b = 1 when the whole thread group is dead
/// (through eBPF: its signal struct's live count reached 0).
pub const EXIT: u8 = 68;
/// sched:sched_migrate_task. id = migrated tid; a = orig cpu | dest cpu << 32; b = current tid.
pub const MIGRATE: u8 = 69;
/// raw_syscalls:sys_enter. id = tid; a = syscall nr (u32) | pid << 32; b = first argument.
pub const SYS_ENTER: u8 = 70;
/// raw_syscalls:sys_exit. id = tid; a = syscall nr (u32) | pid << 32; b = return value (i64).
pub const SYS_EXIT: u8 = 71;
/// exceptions:page_fault_user. id = tid; a = faulting address;
/// b = ip (low FAULT_IP_BITS bits) | error code (low 16 bits) << FAULT_IP_BITS.
pub const FAULT: u8 = 72;
/// FAULT's b: how many low bits hold the ip (a user address fits in 47).
pub const FAULT_IP_BITS: u32 = 48;
/// block:block_rq_issue. id = tid of the issuing task; a = sector;
/// b = dev (u32) | sectors (low BLOCK_SECTORS_BITS bits) << BLOCK_SECTORS_SHIFT | RW_* flags << BLOCK_FLAGS_SHIFT.
pub const BLOCK_ISSUE: u8 = 73;
/// BLOCK_*'s b: where the request's sector count starts, its width, and where the RW_* flags start.
pub const BLOCK_SECTORS_SHIFT: u32 = 32;
pub const BLOCK_SECTORS_BITS: u32 = 24;
pub const BLOCK_FLAGS_SHIFT: u32 = 56;
/// block:block_rq_complete. id = current tid (usually not the issuer); a and b as BLOCK_ISSUE.
pub const BLOCK_COMPLETE: u8 = 74;
/// irq:irq_handler_entry / exit. id = interrupted tid; a = irq; b = pid (entry) / ret (exit).
/// The handler name comes as a NAME_IRQ record (id = irq).
pub const IRQ_ENTRY: u8 = 75;
pub const IRQ_EXIT: u8 = 76;
/// irq:softirq_entry / exit. id = interrupted tid; a = vector; b = pid.
pub const SOFTIRQ_ENTRY: u8 = 77;
pub const SOFTIRQ_EXIT: u8 = 78;
/// cpu-clock sample (`--sample HZ`). id = tid; a = instruction pointer; b = pid | 1 << 32 when
/// the IP is in the kernel.
pub const SAMPLE: u8 = 79;
/// perf's PERF_RECORD_LOST: the kernel dropped records on this CPU's ring. id = 0;
/// a = number of records lost; b = 0. The chunk header's dropped_events also counts them.
pub const LOST: u8 = 80;
/// A per-process software counter (the unprivileged tier). id = COUNTER_*; a = value
/// (cumulative over the traced tree); b = time enabled in ns.
pub const COUNTER: u8 = 81;
/// The traced process tree's root, written once at start. id = root pid; a = flags (1 =
/// system-wide); b = 0.
pub const TRACED: u8 = 82;
/// A task known to be alive at start (system-wide, or a partner seen first without a fork).
/// Not written yet; reserved.
pub const TASK: u8 = 83;
/// block:block_rq_issue by an untraced task, at a device and sector where a traced request's
/// completion has not been seen (the virtio disk drops most completions): the completion that
/// follows is that task's, not the traced request's. id = issuing tid; a and b as BLOCK_ISSUE.
/// It makes no block_io row.
pub const BLOCK_ISSUE_OTHER: u8 = 84;

/// NAME classes used in kernel chunks (beside kinds::NAME_*).
pub const NAME_TASK: u64 = 8;
pub const NAME_EXEC: u64 = 9;
pub const NAME_IRQ: u64 = 10;

/// The kernel event sets a recording may ask for (`oslens record --events`, the collector's
/// `--events`), in the order the collector opens them.
pub const EVENT_SETS: [&str; 5] = ["sched", "syscalls", "faults", "io", "irq"];

/// The event sets a comma-separated list names (aliases: syscall, sys, fault, pagefaults,
/// block, disk, all), each once, in the order given; an unknown name is an error that says
/// which names there are.
pub fn parse_event_sets(list: &str) -> Result<Vec<String>, String> {
    let mut out: Vec<String> = vec![];
    for e in list.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let e = e.to_ascii_lowercase();
        let names: Vec<&str> = match e.as_str() {
            "syscall" | "sys" => vec!["syscalls"],
            "fault" | "pagefaults" => vec!["faults"],
            "block" | "disk" => vec!["io"],
            "all" => EVENT_SETS.to_vec(),
            other if EVENT_SETS.contains(&other) => vec![other],
            _ => return Err(format!("unknown event set '{e}': choose among {} (or all)", EVENT_SETS.join(","))),
        };
        for n in names {
            if !out.iter().any(|o| o == n) {
                out.push(n.to_string());
            }
        }
    }
    if out.is_empty() {
        return Err(format!("no event set named: choose among {} (or all)", EVENT_SETS.join(",")));
    }
    Ok(out)
}

/// Block request flags (from the tracepoint's rwbs string).
pub const RW_WRITE: u64 = 1;
pub const RW_READ: u64 = 2;
pub const RW_DISCARD: u64 = 4;
pub const RW_FLUSH: u64 = 8;
pub const RW_SYNC: u64 = 16;
pub const RW_META: u64 = 32;
pub const RW_AHEAD: u64 = 64;
pub const RW_FUA: u64 = 128;

/// Software counters of the unprivileged tier (COUNTER records' id).
pub const COUNTER_CONTEXT_SWITCHES: u32 = 1;
pub const COUNTER_CPU_MIGRATIONS: u32 = 2;
pub const COUNTER_PAGE_FAULTS: u32 = 3;
pub const COUNTER_MINOR_FAULTS: u32 = 4;
pub const COUNTER_MAJOR_FAULTS: u32 = 5;
pub const COUNTER_TASK_CLOCK: u32 = 6;

pub fn counter_name(id: u32) -> &'static str {
    match id {
        COUNTER_CONTEXT_SWITCHES => "context_switches",
        COUNTER_CPU_MIGRATIONS => "cpu_migrations",
        COUNTER_PAGE_FAULTS => "page_faults",
        COUNTER_MINOR_FAULTS => "minor_faults",
        COUNTER_MAJOR_FAULTS => "major_faults",
        COUNTER_TASK_CLOCK => "task_clock_ns",
        _ => "unknown",
    }
}

pub fn kind_name(kind: u8) -> &'static str {
    match kind {
        SWITCH => "sched_switch",
        WAKEUP => "sched_waking",
        FORK => "fork",
        EXEC => "exec",
        EXIT => "exit",
        MIGRATE => "migrate",
        SYS_ENTER => "sys_enter",
        SYS_EXIT => "sys_exit",
        FAULT => "page_fault_user",
        BLOCK_ISSUE => "block_rq_issue",
        BLOCK_COMPLETE => "block_rq_complete",
        IRQ_ENTRY => "irq_entry",
        IRQ_EXIT => "irq_exit",
        SOFTIRQ_ENTRY => "softirq_entry",
        SOFTIRQ_EXIT => "softirq_exit",
        SAMPLE => "sample",
        LOST => "kernel_lost",
        COUNTER => "kernel_counter",
        TRACED => "traced_root",
        TASK => "task",
        BLOCK_ISSUE_OTHER => "block_rq_issue_other",
        _ => "unknown",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_sets_parse_with_aliases_and_reject_unknown_names() {
        assert_eq!(parse_event_sets("sched, SYS,disk,sched").unwrap(), vec!["sched", "syscalls", "io"]);
        assert_eq!(parse_event_sets("all").unwrap(), EVENT_SETS.to_vec());
        assert_eq!(parse_event_sets("sched,bogus").unwrap_err(), "unknown event set 'bogus': choose among sched,syscalls,faults,io,irq (or all)");
        assert!(parse_event_sets(" , ").is_err());
    }

    #[test]
    fn kernel_kinds_are_named_and_in_range() {
        for k in SWITCH..=BLOCK_ISSUE_OTHER {
            assert!(k >= crate::kinds::KERNEL_FIRST && k <= 127);
            assert_ne!(kind_name(k), "unknown", "{k}");
        }
        assert_eq!(kind_name(127), "unknown");
    }
}
