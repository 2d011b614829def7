//! Kernel record kinds (64..=127), written by the kernel collector (`crates/collector`) into
//! per-CPU chunks `raw/kernel-cpu<N>-<seq>.osl` whose header has source = SOURCE_KERNEL_CPU,
//! clock = CLOCK_MONOTONIC_NS, pid = 0 and cpu = N. The collector owns this file: each kind
//! documents its id / a / b fields. `ts` is CLOCK_MONOTONIC ns (perf's `use_clockid`), `cpu`
//! the CPU the event happened on. "tid" is the kernel's task id, "pid" the thread-group id.
//! Each kind and its fields are declared once, below (`kernel_kinds!`, kernel_layout.rs): the
//! collector packs with `<kind>::pack`, the eBPF program with the generated
//! `crates/collector/bpf/oslens_kinds.h`, and Python decodes with `oslens._native.KERNEL_KINDS`
//! (python/oslens/store/kernel_layout.py). The collector fills in `check`.

crate::kernel_kinds! {
    /// A context switch: `prev_state` is the tracepoint's value (STATE_BITS; 0 = runnable,
    /// STATE_PREEMPTED when preempted).
    SWITCH = 64, "sched_switch", switch, "sched:sched_switch" {
        prev_tid: id[0..32] u "the task leaving the CPU",
        next_tid: a[0..32] s "the task taking the CPU",
        prev_pid: a[32..64] s "prev's thread group (0: unknown)",
        prev_state: b[0..32] u "prev's state (STATE_BITS)",
        prev_prio: b[32..64] s "prev's priority",
    }
    /// A task is woken (the waker is the current task).
    WAKEUP = 65, "sched_waking", wakeup, "sched:sched_waking" {
        waker_tid: id[0..32] u "the current task",
        tid: a[0..32] s "the woken task",
        waker_pid: a[32..64] s "the waker's thread group",
        target_cpu: b[0..32] s "the CPU the woken task will run on",
        prio: b[32..64] s "the woken task's priority",
    }
    /// A fork or clone (task:task_newtask through perf, sched:sched_process_fork through eBPF;
    /// through eBPF `clone_flags` holds only CLONE_THREAD, derived from the child's thread group).
    FORK = 66, "fork", fork, "task:task_newtask / sched:sched_process_fork" {
        parent_tid: id[0..32] u "the task calling fork or clone",
        child_tid: a[0..32] s "the new task",
        child_pid: a[32..64] s "the new task's thread group",
        parent_pid: b[0..32] s "the parent's thread group",
        clone_flags: b[32..64] u "clone flags (low 32 bits)",
    }
    /// An exec: the new comm follows as a NAME_TASK record and the file name as a NAME_EXEC
    /// record (both id = tid).
    EXEC = 67, "exec", exec, "sched:sched_process_exec" {
        tid: id[0..32] u "the task",
        pid: a[0..32] s "its thread group",
        old_tid: a[32..64] s "its tid before the exec",
    }
    /// A task exits; `group_dead` is 1 when the whole thread group is dead (through eBPF: its
    /// signal struct's live count reached 0).
    EXIT = 68, "exit", exit, "sched:sched_process_exit" {
        tid: id[0..32] u "the task",
        pid: a[0..32] s "its thread group",
        group_dead: b[0..64] u "1 when the thread group is dead",
    }
    MIGRATE = 69, "migrate", migrate, "sched:sched_migrate_task" {
        tid: id[0..32] u "the migrated task",
        orig_cpu: a[0..32] s "the CPU it leaves",
        dest_cpu: a[32..64] s "the CPU it goes to",
        current_tid: b[0..32] u "the task running the migration",
    }
    SYS_ENTER = 70, "sys_enter", sys_enter, "raw_syscalls:sys_enter" {
        tid: id[0..32] u "the calling task",
        nr: a[0..32] s "the system call's number",
        pid: a[32..64] s "the caller's thread group",
        arg0: b[0..64] u "the first argument",
    }
    SYS_EXIT = 71, "sys_exit", sys_exit, "raw_syscalls:sys_exit" {
        tid: id[0..32] u "the calling task",
        nr: a[0..32] s "the system call's number (-1 after rt_sigreturn)",
        pid: a[32..64] s "the caller's thread group",
        ret: b[0..64] s "the return value",
    }
    /// A user page fault: a user address fits in `ip`'s 48 bits.
    FAULT = 72, "page_fault_user", fault, "exceptions:page_fault_user" {
        tid: id[0..32] u "the faulting task",
        address: a[0..64] u "the faulting address",
        ip: b[0..48] u "the faulting instruction",
        error_code: b[48..64] u "the fault's error code (low 16 bits)",
    }
    /// A block request issued: `tid` is the traced task it is for (its issuer, or the task that
    /// queued its first bio). BLOCK_COMPLETE and BLOCK_ISSUE_OTHER hold the same fields.
    BLOCK_ISSUE = 73, "block_rq_issue", block_issue, "block:block_rq_issue" {
        tid: id[0..32] u "the task the request is for",
        sector: a[0..64] u "the first sector",
        dev: b[0..32] u "the device (dev_t as the kernel holds it)",
        sectors: b[32..56] u "the request's size in sectors",
        rw: b[56..64] u "RW_* flags",
    }
    /// The handler name comes as a NAME_IRQ record (id = irq).
    IRQ_ENTRY = 75, "irq_entry", irq_entry, "irq:irq_handler_entry" {
        tid: id[0..32] u "the interrupted task",
        irq: a[0..32] s "the interrupt line",
        pid: b[0..32] s "the interrupted task's thread group",
    }
    IRQ_EXIT = 76, "irq_exit", irq_exit, "irq:irq_handler_exit" {
        tid: id[0..32] u "the interrupted task",
        irq: a[0..32] s "the interrupt line",
        ret: b[0..64] s "the handler's return value",
    }
    SOFTIRQ_ENTRY = 77, "softirq_entry", softirq_entry, "irq:softirq_entry" {
        tid: id[0..32] u "the interrupted task",
        vec: a[0..32] u "the softirq vector",
        pid: b[0..32] s "the interrupted task's thread group",
    }
    /// A cpu-clock sample (`--sample HZ`).
    SAMPLE = 79, "sample", sample, "cpu-clock sample" {
        tid: id[0..32] u "the sampled task",
        ip: a[0..64] u "the instruction pointer",
        pid: b[0..32] s "the sampled task's thread group",
        in_kernel: b[32..33] u "1 when the IP is in the kernel",
    }
    /// perf's PERF_RECORD_LOST: the kernel dropped records on this CPU's ring (id = 0). The
    /// chunk header's dropped_events also counts them.
    LOST = 80, "kernel_lost", lost, "PERF_RECORD_LOST" {
        count: a[0..64] u "records lost",
    }
    /// A per-process software counter (the unprivileged tier).
    COUNTER = 81, "kernel_counter", counter, "perf software counter" {
        counter: id[0..32] u "COUNTER_*",
        value: a[0..64] u "the value, cumulative over the traced tree",
        time_enabled_ns: b[0..64] u "time enabled",
    }
    /// The traced process tree's root, written once at start.
    TRACED = 82, "traced_root", traced, "the collector" {
        root_pid: id[0..32] u "the root's pid",
        flags: a[0..64] u "1 = system-wide",
    }
    /// A task known to be alive at start (system-wide, or a partner seen first without a fork).
    /// Not written yet; reserved.
    TASK = 83, "task", task, "reserved" {}
    /// A woken task is put on a run queue (after its WAKEUP, often on the target CPU from an
    /// IPI): from WAKEUP to this is the wake-up latency, from this to its next switch-in the wait
    /// for a CPU. Laid out as WAKEUP but for the waker's pid, which this context does not know.
    ENQUEUE = 85, "sched_wakeup", enqueue, "sched:sched_wakeup" {
        current_tid: id[0..32] u "the task running where it was enqueued",
        tid: a[0..32] s "the woken task",
        target_cpu: b[0..32] s "the CPU whose run queue it joined",
        prio: b[32..64] s "the woken task's priority",
    }
    /// The kernel's own ids of a task of the recording's PID namespace, written when the
    /// recording runs inside one (the root at start, each child at its fork): every other record
    /// names tasks as the namespace numbers them, so this is what joins them to the kernel's.
    TASK_IDS = 86, "task_ids", task_ids, "the collector (eBPF sched_process_fork)" {
        tid: id[0..32] u "the task's tid in the recording's PID namespace",
        global_tid: a[0..32] u "its tid in the initial PID namespace (the kernel's)",
        global_pid: a[32..64] u "its thread group there",
    }
    @like
    /// A block request completed (`tid`: the current task, usually not the issuer).
    BLOCK_COMPLETE = 74, "block_rq_complete", block_complete, "block:block_rq_complete" = block_issue;
    /// block:block_rq_issue by an untraced task, at a device and sector where a traced request's
    /// completion has not been seen (the virtio disk drops most completions): the completion that
    /// follows is that task's, not the traced request's (`tid`: the issuing task). It makes no
    /// block_io row.
    BLOCK_ISSUE_OTHER = 84, "block_rq_issue_other", block_issue_other, "block:block_rq_issue" = block_issue;
    SOFTIRQ_EXIT = 78, "softirq_exit", softirq_exit, "irq:softirq_exit" = softirq_entry;
}

/// SWITCH's prev_state bits as sched:sched_switch reports them (TASK_REPORT: S D T t X Z P I),
/// with their letters in the switches table; 0 is runnable (preempted or yielded).
pub const STATE_BITS: [(u64, &str); 8] =
    [(0x01, "S"), (0x02, "D"), (0x04, "T"), (0x08, "t"), (0x10, "X"), (0x20, "Z"), (0x40, "P"), (0x80, "I")];
/// prev_state of a preempted task (TASK_REPORT_MAX, as the tracepoint reports it).
pub const STATE_PREEMPTED: u64 = 0x100;
/// The bits of prev_state that mean the task left the CPU asleep (any of STATE_BITS).
pub const STATE_ASLEEP: u64 = 0xff;
/// A task outside the recording's PID namespace (which cannot see it) is named by this plus its
/// tid in the initial namespace: above any pid a namespace hands out (PID_MAX_LIMIT is 4 Mi), so
/// it never equals one, and readable (1000000045 is the kernel's task 45).
pub const PIDNS_OUTSIDE: u64 = 1_000_000_000;
/// The layout's constants the eBPF program needs besides the kinds (oslens_kinds.h).
pub const C_CONSTANTS: [(&str, u64, &str); 4] = [
    ("OSL_PIDNS_OUTSIDE", PIDNS_OUTSIDE, "added to the kernel's tid of a task outside the recording's PID namespace"),
    ("OSL_STATE_PREEMPTED", STATE_PREEMPTED, "SWITCH prev_state of a preempted task"),
    ("OSL_STATE_IDLE", 0x80, "SWITCH prev_state of an idle kthread (TASK_REPORT_IDLE, letter I)"),
    ("OSL_STATE_DEAD", 0x10, "SWITCH prev_state of a dead task (X)"),
];

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
    crate::kernel_layout::kind(KINDS, kind).map_or("unknown", |k| k.name)
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
        for k in KINDS.iter().map(|k| k.kind) {
            assert!(k >= crate::kinds::KERNEL_FIRST && k <= 127);
            assert_ne!(kind_name(k), "unknown", "{k}");
        }
        let mut names: Vec<_> = KINDS.iter().map(|k| k.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), KINDS.len());
        assert_eq!(kind_name(127), "unknown");
    }

    #[test]
    fn fields_pack_and_read_back_within_their_width() {
        let w = switch::pack(7, (-1i64) as u64, 3, STATE_PREEMPTED, (-5i64) as u64);
        assert_eq!((w.id, w.a, w.b), (7, 0xffff_ffff | 3 << 32, 0x100 | 0xffff_fffb << 32));
        let r = crate::Record::new(0, w.id, 0, SWITCH, w.a, w.b);
        assert_eq!((switch::F.next_tid.get(&r), switch::F.prev_pid.get(&r), switch::F.prev_prio.get(&r)), (-1, 3, -5));
        // a value wider than its field is cut, not spilled into the next one
        let w = fault::pack(1, 2, u64::MAX, 0x1_0002);
        assert_eq!(w.b, (1 << 48) - 1 | 2 << 48);
    }

    #[test]
    fn each_kinds_fields_fit_their_words_without_overlapping() {
        for k in KINDS {
            let mut used = [0u64; 3];
            for f in k.fields {
                let word = f.word as usize;
                assert!(f.bits > 0 && f.shift + f.bits <= if word == 0 { 32 } else { 64 }, "{}.{}", k.name, f.name);
                assert_eq!(used[word] & f.mask() << f.shift, 0, "{}.{} overlaps", k.name, f.name);
                used[word] |= f.mask() << f.shift;
            }
        }
    }

    /// The eBPF program is C, built apart and committed as an object, so it includes a header
    /// generated from KINDS; this keeps the header equal to the declaration (OSLENS_BLESS=1
    /// rewrites it).
    #[test]
    fn the_ebpf_header_is_generated_from_the_declaration() {
        let path = concat!(env!("CARGO_MANIFEST_DIR"), "/../collector/bpf/oslens_kinds.h");
        let want = crate::kernel_layout::c_header(KINDS, &C_CONSTANTS);
        if std::env::var_os("OSLENS_BLESS").is_some() {
            std::fs::write(path, &want).unwrap();
        }
        let have = std::fs::read_to_string(path).unwrap_or_default();
        assert!(have == want, "{path} differs from crates/format/src/kernel.rs: run OSLENS_BLESS=1 cargo test -p oslens-format");
    }
}
