//! The tracepoints the collector opens, the fields each handler reads, and how a field is read
//! from a tracepoint's raw bytes (offsets from tracefs `format` files, so any kernel's layout).

use crate::tracefs::Field;
use oslens_format::kernel as k;

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
pub enum Ev {
    Switch,
    Waking,
    Enqueue,
    NewTask,
    Rename,
    Exec,
    Exit,
    Migrate,
    SysEnter,
    SysExit,
    Fault,
    BioQueue,
    BlockIssue,
    BlockComplete,
    IrqEntry,
    IrqExit,
    SoftEntry,
    SoftExit,
}

/// (tracepoint, handler, event set, opened for every task on the CPU rather than per task)
pub const TRACEPOINTS: [(&str, Ev, &str, bool); 18] = [
    ("sched/sched_switch", Ev::Switch, "sched", true),
    ("sched/sched_waking", Ev::Waking, "sched", true),
    // the woken task joins a run queue: the wake-up latency's end (per CPU: it often runs in an
    // IPI on the target CPU, in whatever task's context)
    ("sched/sched_wakeup", Ev::Enqueue, "sched", true),
    ("task/task_newtask", Ev::NewTask, "", false),
    // a rename's own time: switches alone see a new name only when the thread next leaves a CPU
    ("task/task_rename", Ev::Rename, "", false),
    ("sched/sched_process_exec", Ev::Exec, "", false),
    ("sched/sched_process_exit", Ev::Exit, "", false),
    ("sched/sched_migrate_task", Ev::Migrate, "sched", true),
    ("raw_syscalls/sys_enter", Ev::SysEnter, "syscalls", false),
    ("raw_syscalls/sys_exit", Ev::SysExit, "syscalls", false),
    ("exceptions/page_fault_user", Ev::Fault, "faults", false),
    // in the submitter's context: who a request is for, when a kworker dispatches it
    ("block/block_bio_queue", Ev::BioQueue, "io", true),
    ("block/block_rq_issue", Ev::BlockIssue, "io", true),
    ("block/block_rq_complete", Ev::BlockComplete, "io", true),
    ("irq/irq_handler_entry", Ev::IrqEntry, "irq", false),
    ("irq/irq_handler_exit", Ev::IrqExit, "irq", false),
    ("irq/softirq_entry", Ev::SoftEntry, "irq", false),
    ("irq/softirq_exit", Ev::SoftExit, "irq", false),
];

/// Fields each handler needs, in a fixed order (f[0], f[1], ...).
pub fn fields_of(ev: Ev) -> &'static [&'static str] {
    match ev {
        Ev::Switch => &["prev_comm", "prev_pid", "prev_prio", "prev_state", "next_comm", "next_pid"],
        Ev::Waking | Ev::Enqueue => &["pid", "prio", "target_cpu"],
        Ev::NewTask => &["pid", "comm", "clone_flags"],
        Ev::Rename => &["pid", "newcomm"],
        Ev::Exec => &["filename", "pid", "old_pid"],
        Ev::Exit => &["pid", "group_dead"],
        Ev::Migrate => &["pid", "orig_cpu", "dest_cpu"],
        Ev::SysEnter => &["id", "args"],
        Ev::SysExit => &["id", "ret"],
        Ev::Fault => &["address", "ip", "error_code"],
        Ev::BioQueue | Ev::BlockIssue | Ev::BlockComplete => &["dev", "sector", "nr_sector", "rwbs"],
        Ev::IrqEntry => &["irq", "name"],
        Ev::IrqExit => &["irq", "ret"],
        Ev::SoftEntry | Ev::SoftExit => &["vec"],
    }
}

/// Optional fields (absent on some kernels): read as 0.
pub fn optional_field(ev: Ev, name: &str) -> bool {
    matches!((ev, name), (Ev::Exit, "group_dead") | (Ev::Switch, "prev_prio") | (Ev::Rename, "pid"))
}

pub struct Handler {
    pub ev: Ev,
    pub f: [Field; 6],
}

#[inline(always)]
pub fn uval(raw: &[u8], f: Field) -> u64 {
    let o = f.offset;
    match f.size {
        0 => 0,
        1 => raw.get(o).copied().unwrap_or(0) as u64,
        2 => raw.get(o..o + 2).map_or(0, |b| u16::from_le_bytes(b.try_into().unwrap()) as u64),
        4 => raw.get(o..o + 4).map_or(0, |b| u32::from_le_bytes(b.try_into().unwrap()) as u64),
        _ => raw.get(o..o + 8).map_or(0, |b| u64::from_le_bytes(b.try_into().unwrap())),
    }
}

#[inline(always)]
pub fn sval(raw: &[u8], f: Field) -> i64 {
    let v = uval(raw, f);
    match f.size {
        1 => v as u8 as i8 as i64,
        2 => v as u16 as i16 as i64,
        4 => v as u32 as i32 as i64,
        _ => v as i64,
    }
}

pub fn bytes(raw: &[u8], f: Field) -> &[u8] {
    let (o, n) = if f.data_loc {
        let loc = uval(raw, Field { offset: f.offset, size: 4, data_loc: false });
        ((loc & 0xffff) as usize, (loc >> 16) as usize)
    } else {
        (f.offset, f.size)
    };
    let s = raw.get(o..(o + n).min(raw.len())).unwrap_or(&[]);
    let end = s.iter().position(|&c| c == 0).unwrap_or(s.len());
    &s[..end]
}

pub fn comm16(raw: &[u8], f: Field) -> [u8; 16] {
    let mut out = [0u8; 16];
    let b = bytes(raw, f);
    let n = b.len().min(16);
    out[..n].copy_from_slice(&b[..n]);
    out
}

pub fn rw_flags(rwbs: &[u8]) -> u64 {
    let mut f = 0;
    for (i, &c) in rwbs.iter().enumerate() {
        f |= match c {
            b'W' => k::RW_WRITE,
            b'R' => k::RW_READ,
            b'D' => k::RW_DISCARD,
            b'F' if i == 0 => k::RW_FLUSH,
            b'F' => k::RW_FUA,
            b'S' => k::RW_SYNC,
            b'M' => k::RW_META,
            b'A' => k::RW_AHEAD,
            _ => 0,
        };
    }
    f
}
