//! oslens-collector: records what the kernel did for one process tree (or the whole system)
//! into per-CPU raw chunks of the trace directory, on CLOCK_MONOTONIC.
//!
//! Mechanism: perf_event_open on tracepoints, one mmap ring per CPU (every event of that CPU
//! redirected into it with PERF_EVENT_IOC_SET_OUTPUT), drained while the program runs.
//! Events of the traced tree are opened per task with `inherit`, so the kernel follows forks and
//! threads and never delivers other tasks' events. sched_switch, sched_waking, sched_migrate_task
//! and the block events are opened per CPU for every task (a switch *to* a traced task happens in
//! the other task's context; a wakeup of a traced task per task would be delivered twice when the
//! waker is traced too; a migration is done by whoever balances; a block completion runs in
//! whatever context the interrupt hits) and filtered here: a switch or wakeup is kept when either
//! side belongs to the traced tree (Kohr's "who took the CPU away"), a migration when it moves a
//! traced task, a completion when it matches an issue that was kept.
//!
//! Tiers: kernel tracepoints (root or CAP_PERFMON), else per-process software counters
//! (perf_event_paranoid permitting), else nothing (application events only). The first line on
//! stdout is `READY {json}` once attached; at exit `DONE {json}` with counts and losses.
//! Stops cleanly on SIGTERM / SIGINT / SIGHUP, on the parent's death (PR_SET_PDEATHSIG) and,
//! with --watch-stdin, when stdin reaches end of file. perf events die with their file
//! descriptors, so even SIGKILL leaves nothing switched on.

mod bpf;
mod chunk;
mod perf;
mod tracefs;

use chunk::Writer;
use oslens_format::kernel as k;
use oslens_format::record::Record;
use std::collections::{HashMap, HashSet};
use std::hash::{BuildHasherDefault, Hasher};
use std::io::Write;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tracefs::{Field, Format};

static STOP: AtomicBool = AtomicBool::new(false);

extern "C" fn on_signal(_: libc::c_int) {
    STOP.store(true, Ordering::SeqCst);
}

/// A cheap hasher for task ids.
#[derive(Default)]
struct IdHasher(u64);
impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ b as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, v: u32) {
        self.0 = (self.0 ^ v as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
    fn write_u64(&mut self, v: u64) {
        self.0 = (self.0 ^ v).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}
type Fast = BuildHasherDefault<IdHasher>;

struct Opts {
    trace: String,
    pid: i32,
    events: Vec<String>,
    system_wide: bool,
    sample_hz: u64,
    ring_mib: usize,
    chunk_records: u64,
    watch_stdin: bool,
    force_tier: u32,
    /// Experimental: sched_switch / waking per task like perf record (switches *to* the tree
    /// from other tasks are then missed).
    per_task_sched: bool,
    /// auto (eBPF for the hot events when it loads, else perf), perf, or ebpf.
    mechanism: String,
}

const USAGE: &str = "usage: oslens-collector --trace DIR (--pid PID | --system-wide) [--events sched,syscalls,faults,io,irq] [--sample HZ] [--ring-mib N] [--chunk-records N] [--watch-stdin] [--tier 1|2|3]";
const DEFAULT_SETS: &str = "sched,syscalls,faults,io,irq";

fn parse_args() -> Result<Opts, String> {
    let mut o = Opts {
        trace: String::new(),
        pid: 0,
        events: vec![],
        system_wide: false,
        sample_hz: 0,
        ring_mib: 32,
        chunk_records: 1 << 20,
        watch_stdin: false,
        force_tier: 0,
        per_task_sched: false,
        mechanism: "auto".into(),
    };
    let mut events = DEFAULT_SETS.to_string();
    let mut args = std::env::args().skip(1);
    while let Some(a) = args.next() {
        let mut val = |name: &str| args.next().ok_or_else(|| format!("{name} needs a value"));
        match a.as_str() {
            "--trace" => o.trace = val("--trace")?,
            "--pid" => o.pid = val("--pid")?.parse().map_err(|_| "--pid needs a number".to_string())?,
            "--events" => events = val("--events")?,
            "--system-wide" => o.system_wide = true,
            "--sample" => o.sample_hz = val("--sample")?.parse().map_err(|_| "--sample needs a frequency in Hz".to_string())?,
            "--ring-mib" => o.ring_mib = val("--ring-mib")?.parse().map_err(|_| "--ring-mib needs a number".to_string())?,
            "--chunk-records" => o.chunk_records = val("--chunk-records")?.parse().map_err(|_| "--chunk-records needs a number".to_string())?,
            "--watch-stdin" => o.watch_stdin = true,
            "--per-task-sched" => o.per_task_sched = true,
            "--mechanism" => {
                o.mechanism = val("--mechanism")?;
                if !["auto", "perf", "ebpf"].contains(&o.mechanism.as_str()) {
                    return Err("--mechanism is auto, perf or ebpf".into());
                }
            }
            "--tier" => o.force_tier = val("--tier")?.parse().map_err(|_| "--tier needs 1, 2 or 3".to_string())?,
            "-h" | "--help" => {
                println!("{USAGE}");
                std::process::exit(0);
            }
            _ => return Err(format!("unknown argument {a}")),
        }
    }
    if o.trace.is_empty() {
        return Err("--trace DIR is required".into());
    }
    if o.pid <= 0 && !o.system_wide {
        return Err("--pid PID (the traced program) or --system-wide is required".into());
    }
    o.events = oslens_format::kernel::parse_event_sets(&events)?;
    if !o.ring_mib.is_power_of_two() || o.ring_mib > 1024 {
        return Err("--ring-mib must be a power of two up to 1024".into());
    }
    o.chunk_records = o.chunk_records.max(64);
    Ok(o)
}

fn online_cpus() -> Vec<u32> {
    let text = std::fs::read_to_string("/sys/devices/system/cpu/online").unwrap_or_default();
    let mut out = vec![];
    for part in text.trim().split(',').filter(|p| !p.is_empty()) {
        let mut it = part.split('-');
        let a: u32 = it.next().and_then(|x| x.parse().ok()).unwrap_or(0);
        let b: u32 = it.next().and_then(|x| x.parse().ok()).unwrap_or(a);
        out.extend(a..=b);
    }
    if out.is_empty() {
        // SAFETY: plain call.
        let n = unsafe { libc::sysconf(libc::_SC_NPROCESSORS_ONLN) }.max(1) as u32;
        out = (0..n).collect();
    }
    out
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

fn errno_text(e: i32) -> String {
    std::io::Error::from_raw_os_error(e).to_string()
}

fn json_str(s: &str) -> String {
    let mut out = String::with_capacity(s.len() + 2);
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

fn json_list(v: &[String]) -> String {
    format!("[{}]", v.iter().map(|s| json_str(s)).collect::<Vec<_>>().join(", "))
}

// ---------------------------------------------------------------------------------------------
// Tracepoints

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Ev {
    Switch,
    Waking,
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
const TRACEPOINTS: [(&str, Ev, &str, bool); 17] = [
    ("sched/sched_switch", Ev::Switch, "sched", true),
    ("sched/sched_waking", Ev::Waking, "sched", true),
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
fn fields_of(ev: Ev) -> &'static [&'static str] {
    match ev {
        Ev::Switch => &["prev_comm", "prev_pid", "prev_prio", "prev_state", "next_comm", "next_pid"],
        Ev::Waking => &["pid", "prio", "target_cpu"],
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
fn optional_field(ev: Ev, name: &str) -> bool {
    matches!((ev, name), (Ev::Exit, "group_dead") | (Ev::Switch, "prev_prio") | (Ev::Rename, "pid"))
}

struct Handler {
    ev: Ev,
    f: [Field; 6],
}

#[inline(always)]
fn uval(raw: &[u8], f: Field) -> u64 {
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
fn sval(raw: &[u8], f: Field) -> i64 {
    let v = uval(raw, f);
    match f.size {
        1 => v as u8 as i8 as i64,
        2 => v as u16 as i16 as i64,
        4 => v as u32 as i32 as i64,
        _ => v as i64,
    }
}

fn bytes(raw: &[u8], f: Field) -> &[u8] {
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

fn comm16(raw: &[u8], f: Field) -> [u8; 16] {
    let mut out = [0u8; 16];
    let b = bytes(raw, f);
    let n = b.len().min(16);
    out[..n].copy_from_slice(&b[..n]);
    out
}

fn rw_flags(rwbs: &[u8]) -> u64 {
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

// ---------------------------------------------------------------------------------------------

#[derive(PartialEq, Eq, Clone, Copy)]
enum RingKind {
    Trace,
    Sample,
}

struct RingSlot {
    cpu: u32,
    kind: RingKind,
    ring: perf::Ring,
}

/// Decoding state, apart from the rings so a ring can be walked while the state changes.
struct State {
    system_wide: bool,
    filter_switches: bool,
    handlers: Vec<Handler>,
    by_id: Vec<u16>,
    newtask_id: u16,
    writers: HashMap<u32, Writer>,
    traced: HashSet<u32, Fast>,
    comms: HashMap<u32, [u8; 16], Fast>,
    irq_names: HashSet<i64, Fast>,
    pending_block: HashSet<(u64, u64), Fast>,
    /// (dev, sector) of bios the tree queued, with the submitting task.
    queued_block: HashMap<(u64, u64), u32, Fast>,
    last_waking: HashMap<u32, (u64, u32, u32), Fast>,
    samples_seen: u64,
    kept: u64,
    filtered: u64,
    write_error: Option<String>,
    unwritten: u64,
}

impl State {
    fn emit(&mut self, cpu: u32, r: Record) {
        let w = self.writers.get_mut(&cpu).expect("writer per cpu");
        if let Err(e) = w.push(r) {
            self.unwritten += 1;
            self.write_error.get_or_insert(e);
        } else {
            self.kept += 1;
        }
    }

    fn emit_name(&mut self, cpu: u32, ts: u64, id: u32, class: u64, name: &[u8]) {
        let w = self.writers.get_mut(&cpu).expect("writer per cpu");
        if let Err(e) = w.push_name(ts, id, cpu as u16, class, name) {
            self.write_error.get_or_insert(e);
        }
    }

    fn note_comm(&mut self, cpu: u32, ts: u64, tid: u32, comm: [u8; 16]) {
        if tid == 0 {
            return;
        }
        if self.comms.get(&tid) != Some(&comm) {
            self.comms.insert(tid, comm);
            let n = comm.iter().position(|&c| c == 0).unwrap_or(16);
            self.emit_name(cpu, ts, tid, k::NAME_TASK, &comm[..n]);
        }
    }

    fn lost(&mut self, cpu: u32, n: u64) {
        let ts = now_ns();
        self.emit(cpu, Record::new(ts, 0, cpu as u16, k::LOST, n, 0));
        let w = self.writers.get_mut(&cpu).unwrap();
        let _ = w.count_lost(n);
    }

    /// After an exec: the file name, and the new comm (its base name, as the kernel sets it).
    fn exec_names(&mut self, cpu: u32, ts: u64, tid: u32, file: &[u8]) {
        self.emit_name(cpu, ts, tid, k::NAME_EXEC, file);
        let base = file.rsplit(|&b| b == b'/').next().unwrap_or(file);
        let mut comm = [0u8; 16];
        let n = base.len().min(15);
        comm[..n].copy_from_slice(&base[..n]);
        self.note_comm(cpu, ts, tid, comm);
    }

    /// A record from the eBPF ring: already in oslens's layout but for the check byte; switch
    /// records carry both comms after it, fork records the child's.
    fn bpf_record(&mut self, b: &[u8]) {
        if b.len() < 32 {
            return;
        }
        let r = Record::from_bytes(&b[..32]);
        let cpu = if self.writers.contains_key(&(r.cpu as u32)) { r.cpu as u32 } else { *self.writers.keys().min().unwrap() };
        let comm = |o: usize| -> [u8; 16] {
            let mut c = [0u8; 16];
            if b.len() >= o + 16 {
                c.copy_from_slice(&b[o..o + 16]);
            }
            c
        };
        match r.kind {
            k::SWITCH => {
                self.note_comm(cpu, r.ts, r.id, comm(32));
                self.note_comm(cpu, r.ts, (r.a & 0xffff_ffff) as u32, comm(48));
            }
            k::FORK => {
                let child = (r.a & 0xffff_ffff) as u32;
                if !self.system_wide || self.traced.contains(&r.id) {
                    self.traced.insert(child);
                }
                self.note_comm(cpu, r.ts, child, comm(32));
            }
            k::EXEC => {
                let raw = &b[32..];
                let file = raw[..raw.iter().position(|&c| c == 0).unwrap_or(raw.len())].to_vec();
                self.emit(cpu, Record::new(r.ts, r.id, r.cpu, r.kind, r.a, r.b));
                self.exec_names(cpu, r.ts, r.id, &file);
                return;
            }
            k::IRQ_ENTRY => {
                let irq = r.a as u32 as i32 as i64;
                if self.irq_names.insert(irq) {
                    let raw = &b[32.min(b.len())..];
                    let name = raw[..raw.iter().position(|&c| c == 0).unwrap_or(raw.len())].to_vec();
                    self.emit_name(cpu, r.ts, irq as u32, k::NAME_IRQ, &name);
                }
            }
            _ => {}
        }
        self.emit(cpu, Record::new(r.ts, r.id, r.cpu, r.kind, r.a, r.b));
    }

    /// Phase 1 of a drain: only learn new tasks of the tree, so that switches of a child drained
    /// from another CPU's ring in this same pass are kept.
    fn learn(&mut self, typ: u32, body: &[u8]) {
        if typ != perf::RECORD_SAMPLE || body.len() < 22 {
            return;
        }
        let parent = u32::from_le_bytes(body[4..8].try_into().unwrap());
        let raw = &body[20..];
        if u16::from_le_bytes(raw[0..2].try_into().unwrap()) != self.newtask_id {
            return;
        }
        let h = &self.handlers[self.by_id[self.newtask_id as usize] as usize - 1];
        let child = sval(raw, h.f[0]) as u32;
        if self.traced.contains(&parent) {
            self.traced.insert(child);
        }
    }

    fn sample(&mut self, cpu: u32, misc: u16, body: &[u8]) {
        if body.len() < 24 {
            return;
        }
        let ip = u64::from_le_bytes(body[0..8].try_into().unwrap());
        let pid = u32::from_le_bytes(body[8..12].try_into().unwrap());
        let tid = u32::from_le_bytes(body[12..16].try_into().unwrap());
        let ts = u64::from_le_bytes(body[16..24].try_into().unwrap());
        let kernel = (misc & perf::MISC_CPUMODE_MASK) == perf::MISC_KERNEL;
        self.emit(cpu, Record::new(ts, tid, cpu as u16, k::SAMPLE, ip, pid as u64 | (kernel as u64) << 32));
    }

    fn record(&mut self, cpu: u32, kind: RingKind, typ: u32, misc: u16, body: &[u8]) {
        match typ {
            perf::RECORD_SAMPLE => {
                self.samples_seen += 1;
                if kind == RingKind::Sample {
                    self.sample(cpu, misc, body);
                } else {
                    self.tracepoint(cpu, body);
                }
            }
            perf::RECORD_LOST if body.len() >= 16 => {
                let n = u64::from_le_bytes(body[8..16].try_into().unwrap());
                self.lost(cpu, n);
            }
            _ => {}
        }
    }

    fn tracepoint(&mut self, cpu: u32, body: &[u8]) {
        if body.len() < 22 {
            return;
        }
        let pid = u32::from_le_bytes(body[0..4].try_into().unwrap());
        let tid = u32::from_le_bytes(body[4..8].try_into().unwrap());
        let ts = u64::from_le_bytes(body[8..16].try_into().unwrap());
        let size = u32::from_le_bytes(body[16..20].try_into().unwrap()) as usize;
        let raw = &body[20..(20 + size).min(body.len())];
        if raw.len() < 8 {
            return;
        }
        let ty = u16::from_le_bytes(raw[0..2].try_into().unwrap());
        let hi = self.by_id[ty as usize];
        if hi == 0 {
            return;
        }
        let h = &self.handlers[hi as usize - 1];
        let f = h.f;
        let c = cpu as u16;
        match h.ev {
            Ev::Switch => {
                let prev = sval(raw, f[1]) as u32;
                let next = sval(raw, f[5]) as u32;
                if self.filter_switches && !self.traced.contains(&prev) && !self.traced.contains(&next) {
                    self.filtered += 1;
                    return;
                }
                self.note_comm(cpu, ts, prev, comm16(raw, f[0]));
                self.note_comm(cpu, ts, next, comm16(raw, f[4]));
                let state = uval(raw, f[3]) & 0xffff_ffff;
                let prio = sval(raw, f[2]) as i32 as u32 as u64;
                self.emit(cpu, Record::new(ts, prev, c, k::SWITCH, next as u64 | (pid as u64) << 32, state | prio << 32));
            }
            Ev::Waking => {
                let woken = sval(raw, f[0]) as u32;
                if self.filter_switches && !self.traced.contains(&tid) && !self.traced.contains(&woken) {
                    self.filtered += 1;
                    return;
                }
                // A wakeup of a traced task by a traced task is delivered twice (once to each).
                if let Some(&(lts, lw, lt)) = self.last_waking.get(&cpu) {
                    if lw == tid && lt == woken && ts.wrapping_sub(lts) < 5_000 {
                        return;
                    }
                }
                self.last_waking.insert(cpu, (ts, tid, woken));
                let target = sval(raw, f[2]) as i32 as u32 as u64;
                let prio = sval(raw, f[1]) as i32 as u32 as u64;
                self.emit(cpu, Record::new(ts, tid, c, k::WAKEUP, woken as u64 | (pid as u64) << 32, target | prio << 32));
            }
            Ev::NewTask => {
                let child = sval(raw, f[0]) as u32;
                let flags = uval(raw, f[2]);
                let child_pid = if flags & libc::CLONE_THREAD as u64 != 0 { pid } else { child };
                if self.system_wide && !self.traced.contains(&tid) {
                    // kept (system-wide) but not part of the tree
                } else {
                    self.traced.insert(child);
                }
                self.note_comm(cpu, ts, child, comm16(raw, f[1]));
                self.emit(cpu, Record::new(ts, tid, c, k::FORK, child as u64 | (child_pid as u64) << 32, pid as u64 | (flags & 0xffff_ffff) << 32));
            }
            Ev::Rename => {
                // kernels that dropped the field rename only the current task
                let who = if f[0].size == 0 { tid } else { sval(raw, f[0]) as u32 };
                self.note_comm(cpu, ts, who, comm16(raw, f[1]));
            }
            Ev::Exec => {
                let old = sval(raw, f[2]) as u32;
                let file = bytes(raw, f[0]).to_vec();
                self.emit(cpu, Record::new(ts, tid, c, k::EXEC, pid as u64 | (old as u64) << 32, 0));
                self.exec_names(cpu, ts, tid, &file);
            }
            Ev::Exit => {
                let dead = uval(raw, f[1]);
                self.emit(cpu, Record::new(ts, tid, c, k::EXIT, pid as u64, dead));
            }
            Ev::Migrate => {
                let who = sval(raw, f[0]) as u32;
                if self.filter_switches && !self.traced.contains(&who) {
                    self.filtered += 1;
                    return;
                }
                let orig = sval(raw, f[1]) as i32 as u32 as u64;
                let dest = sval(raw, f[2]) as i32 as u32 as u64;
                self.emit(cpu, Record::new(ts, who, c, k::MIGRATE, orig | dest << 32, tid as u64));
            }
            Ev::SysEnter => {
                let nr = sval(raw, f[0]) as u32 as u64;
                let arg0 = uval(raw, Field { offset: f[1].offset, size: 8, data_loc: false });
                self.emit(cpu, Record::new(ts, tid, c, k::SYS_ENTER, nr | (pid as u64) << 32, arg0));
            }
            Ev::SysExit => {
                let nr = sval(raw, f[0]) as u32 as u64;
                let ret = sval(raw, f[1]) as u64;
                self.emit(cpu, Record::new(ts, tid, c, k::SYS_EXIT, nr | (pid as u64) << 32, ret));
            }
            Ev::Fault => {
                let addr = uval(raw, f[0]);
                let ip = uval(raw, f[1]) & 0xffff_ffff_ffff;
                let code = uval(raw, f[2]) & 0xffff;
                self.emit(cpu, Record::new(ts, tid, c, k::FAULT, addr, ip | code << 48));
            }
            Ev::BioQueue => {
                // Not recorded: remembers which traced task a bio is for, since the request
                // may be dispatched later from a kworker's context.
                if self.traced.contains(&tid) {
                    let dev = uval(raw, f[0]) & 0xffff_ffff;
                    let sector = uval(raw, f[1]);
                    if self.queued_block.len() > 1 << 16 {
                        self.queued_block.clear();
                    }
                    self.queued_block.insert((dev, sector), tid);
                }
            }
            Ev::BlockIssue | Ev::BlockComplete => {
                let dev = uval(raw, f[0]) & 0xffff_ffff;
                let sector = uval(raw, f[1]);
                let nsec = uval(raw, f[2]) & 0xff_ffff;
                let flags = rw_flags(bytes(raw, f[3]));
                // the task a request is for: its issuer when traced, else the traced task that
                // queued its first bio
                let owner = match self.queued_block.remove(&(dev, sector)) {
                    Some(t) if h.ev == Ev::BlockIssue && !self.traced.contains(&tid) => t,
                    _ => tid,
                };
                if !self.system_wide {
                    if h.ev == Ev::BlockIssue {
                        if !self.traced.contains(&owner) {
                            self.filtered += 1;
                            return;
                        }
                        self.pending_block.insert((dev, sector));
                    } else {
                        // Every completion is kept: the rings are drained CPU by CPU, so a
                        // completion on one CPU may be read before its issue on another. The
                        // importer pairs them and drops completions of others' requests.
                        self.pending_block.remove(&(dev, sector));
                    }
                }
                let kind = if h.ev == Ev::BlockIssue { k::BLOCK_ISSUE } else { k::BLOCK_COMPLETE };
                self.emit(cpu, Record::new(ts, owner, c, kind, sector, dev | nsec << 32 | flags << 56));
            }
            Ev::IrqEntry => {
                let irq = sval(raw, f[0]);
                if self.irq_names.insert(irq) {
                    let name = bytes(raw, f[1]).to_vec();
                    self.emit_name(cpu, ts, irq as u32, k::NAME_IRQ, &name);
                }
                self.emit(cpu, Record::new(ts, tid, c, k::IRQ_ENTRY, irq as u64, pid as u64));
            }
            Ev::IrqExit => {
                let irq = sval(raw, f[0]);
                let ret = sval(raw, f[1]);
                self.emit(cpu, Record::new(ts, tid, c, k::IRQ_EXIT, irq as u64, ret as u64));
            }
            Ev::SoftEntry | Ev::SoftExit => {
                let vec = uval(raw, f[0]);
                let kind = if h.ev == Ev::SoftEntry { k::SOFTIRQ_ENTRY } else { k::SOFTIRQ_EXIT };
                self.emit(cpu, Record::new(ts, tid, c, kind, vec, pid as u64));
            }
        }
    }
}

struct Counter {
    id: u32,
    fd: i32,
    last: (u64, u64),
}

/// Context switches of the traced tree from /proc (the perf software counter counts nothing
/// when the kernel must be excluded, as perf_event_paranoid = 2 demands): the last value seen
/// per task, summed; a task's last few milliseconds before it exits may be missed.
#[derive(Default)]
struct ProcSwitches {
    per_task: HashMap<u32, u64>,
    last_total: u64,
}

impl ProcSwitches {
    fn task_switches(pid: u32, tid: u32) -> Option<u64> {
        let text = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/status")).ok()?;
        let mut total = 0;
        for line in text.lines() {
            if let Some(v) = line.strip_prefix("voluntary_ctxt_switches:").or_else(|| line.strip_prefix("nonvoluntary_ctxt_switches:")) {
                total += v.trim().parse::<u64>().unwrap_or(0);
            }
        }
        Some(total)
    }

    fn walk(&mut self, pid: u32, depth: u32) {
        if depth > 64 {
            return;
        }
        let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/task")) else { return };
        for e in dir.flatten() {
            let Some(tid) = e.file_name().to_str().and_then(|t| t.parse::<u32>().ok()) else { continue };
            if let Some(v) = Self::task_switches(pid, tid) {
                let slot = self.per_task.entry(tid).or_insert(0);
                *slot = (*slot).max(v);
            }
            if let Ok(children) = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/children")) {
                for c in children.split_whitespace().filter_map(|c| c.parse::<u32>().ok()) {
                    self.walk(c, depth + 1);
                }
            }
        }
    }

    fn total(&mut self, root: u32) -> u64 {
        self.walk(root, 0);
        self.last_total = self.per_task.values().sum();
        self.last_total
    }
}

struct Collector {
    opts: Opts,
    tier: u32,
    tier_name: String,
    reason: Option<String>,
    tracefs_how: Option<String>,
    enabled: Vec<String>,
    missing: Vec<String>,
    fds: Vec<i32>,
    rings: Vec<RingSlot>,
    /// The fd owning each ring: poll()able, readable when the ring is a quarter full.
    leaders: Vec<i32>,
    counters: Vec<Counter>,
    proc_switches: Option<ProcSwitches>,
    bpf: Option<bpf::Bpf>,
    bpf_lost: Vec<u64>,
    bpf_note: Option<String>,
    bpf_used: bool,
    st: State,
    scratch: Vec<u8>,
    cpus: Vec<u32>,
    sampling: Option<String>,
}

const TIER_TRACEPOINTS: &str = "kernel tracepoints";
const TIER_COUNTERS: &str = "per-process software counters";
const TIER_NONE: &str = "application events only";

impl Collector {
    fn new(opts: Opts) -> Collector {
        let cpus = online_cpus();
        let raw_dir = format!("{}/raw", opts.trace);
        let writers = cpus.iter().map(|&c| (c, Writer::new(&raw_dir, &format!("kernel-cpu{c}"), c, opts.chunk_records))).collect();
        let st = State {
            system_wide: opts.system_wide,
            filter_switches: !opts.system_wide,
            handlers: vec![],
            by_id: vec![0; 65536],
            newtask_id: u16::MAX,
            writers,
            traced: HashSet::default(),
            comms: HashMap::default(),
            irq_names: HashSet::default(),
            pending_block: HashSet::default(),
            queued_block: HashMap::default(),
            last_waking: HashMap::default(),
            samples_seen: 0,
            kept: 0,
            filtered: 0,
            write_error: None,
            unwritten: 0,
        };
        Collector {
            opts,
            tier: 3,
            tier_name: TIER_NONE.into(),
            reason: None,
            tracefs_how: None,
            enabled: vec![],
            missing: vec![],
            fds: vec![],
            rings: vec![],
            leaders: vec![],
            counters: vec![],
            proc_switches: None,
            bpf: None,
            bpf_lost: vec![],
            bpf_note: None,
            bpf_used: false,
            st,
            scratch: Vec::with_capacity(65536),
            cpus,
            sampling: None,
        }
    }

    fn close_all(&mut self) {
        self.bpf = None;
        self.rings.clear();
        for fd in self.fds.drain(..) {
            // SAFETY: our fd.
            unsafe { libc::close(fd) };
        }
        for c in self.counters.drain(..) {
            // SAFETY: our fd.
            unsafe { libc::close(c.fd) };
        }
    }

    /// Tier 1: tracepoints. Err(reason) to fall back.
    fn attach_tracepoints(&mut self) -> Result<(), String> {
        let tfs = tracefs::find()?;
        self.tracefs_how = Some(tfs.how.clone());
        let mut chosen: Vec<(&str, Ev, bool, Format)> = vec![];
        let _ = &self.bpf;
        for (tp, ev, set, per_cpu) in TRACEPOINTS {
            if !set.is_empty() && !self.opts.events.iter().any(|e| e == set) {
                continue;
            }
            match tfs.format(tp) {
                Some(fmt) => {
                    let missing_field = fields_of(ev).iter().find(|n| fmt.field(n).is_none() && !optional_field(ev, n));
                    if let Some(n) = missing_field {
                        self.missing.push(format!("{tp} (no field {n} on this kernel)"));
                        continue;
                    }
                    let per_cpu = per_cpu && !(self.opts.per_task_sched && matches!(ev, Ev::Switch | Ev::Waking | Ev::Migrate));
                    chosen.push((tp, ev, per_cpu || self.opts.system_wide, fmt));
                }
                None => self.missing.push(format!("{tp} (not in this kernel)")),
            }
        }
        if chosen.is_empty() {
            return Err("none of the requested tracepoints exist on this kernel".into());
        }
        // The hot events through eBPF when it loads: filtered in the kernel, no perf sample path.
        let wants = |set: &str| self.opts.events.iter().any(|e| e == set);
        if self.opts.mechanism != "perf" && !self.opts.per_task_sched {
            let want = bpf::Want { sched: wants("sched"), syscalls: wants("syscalls"), faults: wants("faults"), irq: wants("irq") };
            // one ring for all CPUs: as large as the per-CPU perf rings together, at least 8 MiB
            // (OSLENS_COLLECTOR_BPF_RING_KIB overrides it, for tests of the loss accounting)
            let bpf_ring = ((self.opts.ring_mib * self.cpus.len()).next_power_of_two().max(8) << 20).min(1 << 30);
            let bpf_ring = std::env::var("OSLENS_COLLECTOR_BPF_RING_KIB")
                .ok()
                .and_then(|v| v.parse::<usize>().ok())
                .filter(|v| v.is_power_of_two() && *v >= 4)
                .map_or(bpf_ring, |v| v << 10);
            match bpf::Bpf::load(&want, self.opts.system_wide, self.opts.pid.max(0) as u32, bpf_ring) {
                Ok(b) => {
                    let covered: Vec<&str> = bpf::programs(&want).iter().filter(|p| p.2).map(|p| p.1).collect();
                    // task_newtask is replaced by the eBPF sched_process_fork
                    chosen.retain(|c| !covered.contains(&c.0) && c.1 != Ev::NewTask);
                    for n in &covered {
                        self.enabled.push(n.to_string());
                    }
                    self.bpf_note = Some(format!("eBPF (tp_btf, in-kernel filter, BPF ring buffer) for {}", b.programs.join(", ")));
                    self.bpf = Some(b);
                    self.bpf_used = true;
                }
                Err(e) => {
                    if self.opts.mechanism == "ebpf" {
                        return Err(format!("eBPF was asked for but is unavailable: {e}"));
                    }
                    self.bpf_note = Some(format!("eBPF unavailable ({e}); perf_event_open for every event"));
                }
            }
        }
        let ring_bytes = self.opts.ring_mib << 20;
        for (tp, ev, per_cpu, fmt) in &chosen {
            let mut f = [Field::default(); 6];
            for (i, n) in fields_of(*ev).iter().enumerate() {
                f[i] = fmt.field(n).unwrap_or_default();
            }
            self.st.handlers.push(Handler { ev: *ev, f });
            self.st.by_id[fmt.id as usize] = self.st.handlers.len() as u16;
            if *ev == Ev::NewTask {
                self.st.newtask_id = fmt.id;
            }
            let _ = (tp, per_cpu);
        }
        for &cpu in &self.cpus.clone() {
            let mut leader: Option<i32> = None;
            for (tp, _ev, per_cpu, fmt) in &chosen {
                let mut a = perf::Attr::new(perf::TYPE_TRACEPOINT, fmt.id as u64);
                a.sample_period = 1;
                a.sample_type = perf::SAMPLE_TID | perf::SAMPLE_TIME | perf::SAMPLE_RAW;
                a.flags = perf::F_DISABLED | perf::F_USE_CLOCKID | perf::F_WATERMARK;
                a.clockid = libc::CLOCK_MONOTONIC;
                a.wakeup = (ring_bytes / 4) as u32;
                let pid = if *per_cpu { -1 } else { self.opts.pid };
                if pid != -1 {
                    a.flags |= perf::F_INHERIT;
                }
                let fd = match perf::open(&a, pid, cpu as i32, -1) {
                    Ok(fd) => fd,
                    Err(e) if e == libc::EACCES || e == libc::EPERM => {
                        self.close_all();
                        return Err(format!("perf_event_open on {tp} was refused ({}): tracepoints need root or CAP_PERFMON", errno_text(e)));
                    }
                    Err(e) if e == libc::ESRCH => {
                        self.close_all();
                        return Err(format!("the traced process {} is gone", self.opts.pid));
                    }
                    Err(e) => {
                        if cpu == self.cpus[0] {
                            self.missing.push(format!("{tp} ({})", errno_text(e)));
                        }
                        continue;
                    }
                };
                self.fds.push(fd);
                match leader {
                    None => {
                        let ring = perf::Ring::map(fd, ring_bytes).map_err(|e| {
                            format!("cannot map a {} MiB ring buffer for CPU {cpu}: {}", self.opts.ring_mib, errno_text(e))
                        })?;
                        self.rings.push(RingSlot { cpu, kind: RingKind::Trace, ring });
                        self.leaders.push(fd);
                        leader = Some(fd);
                    }
                    Some(l) => {
                        if let Err(e) = perf::set_output(fd, l) {
                            self.close_all();
                            return Err(format!("cannot share the CPU {cpu} ring with {tp}: {}", errno_text(e)));
                        }
                    }
                }
                if cpu == self.cpus[0] {
                    self.enabled.push(tp.to_string());
                }
            }
        }
        if self.enabled.is_empty() {
            self.close_all();
            return Err("no tracepoint could be opened".into());
        }
        if self.bpf.is_some() && !self.opts.system_wide {
            // every task the tree forks is learnt from the eBPF fork records
            self.st.traced.insert(self.opts.pid.max(0) as u32);
        }
        self.st.filter_switches = !self.opts.system_wide && !self.opts.per_task_sched && self.enabled.iter().any(|e| e == "sched/sched_switch");
        if self.opts.sample_hz > 0 {
            self.attach_sampling(false);
        }
        Ok(())
    }

    fn attach_sampling(&mut self, user_only: bool) {
        let ring_bytes = 1usize << 20;
        for &cpu in &self.cpus.clone() {
            let mut a = perf::Attr::new(perf::TYPE_SOFTWARE, perf::SW_CPU_CLOCK);
            a.sample_period = self.opts.sample_hz;
            a.sample_type = perf::SAMPLE_IP | perf::SAMPLE_TID | perf::SAMPLE_TIME;
            a.flags = perf::F_DISABLED | perf::F_USE_CLOCKID | perf::F_FREQ | perf::F_WATERMARK;
            if user_only {
                a.flags |= perf::F_EXCLUDE_KERNEL | perf::F_EXCLUDE_HV;
            }
            a.clockid = libc::CLOCK_MONOTONIC;
            a.wakeup = (ring_bytes / 4) as u32;
            let pid = if self.opts.system_wide { -1 } else { self.opts.pid };
            if pid != -1 {
                a.flags |= perf::F_INHERIT;
            }
            match perf::open(&a, pid, cpu as i32, -1) {
                Ok(fd) => match perf::Ring::map(fd, ring_bytes) {
                    Ok(ring) => {
                        self.fds.push(fd);
                        self.leaders.push(fd);
                        self.rings.push(RingSlot { cpu, kind: RingKind::Sample, ring });
                    }
                    Err(e) => {
                        // SAFETY: our fd.
                        unsafe { libc::close(fd) };
                        self.sampling = Some(format!("sampling unavailable: cannot map its ring ({})", errno_text(e)));
                        return;
                    }
                },
                Err(e) => {
                    self.sampling = Some(format!("sampling unavailable: perf_event_open on cpu-clock refused ({})", errno_text(e)));
                    return;
                }
            }
        }
        self.sampling = Some(format!("cpu-clock at {} Hz{}", self.opts.sample_hz, if user_only { ", user space only" } else { ", user and kernel" }));
    }

    /// Tier 2: per-process software counters, read periodically.
    fn attach_counters(&mut self) -> Result<(), String> {
        if self.opts.system_wide {
            return Err("--system-wide needs kernel tracepoints".into());
        }
        let list = [
            (k::COUNTER_CONTEXT_SWITCHES, perf::SW_CONTEXT_SWITCHES),
            (k::COUNTER_CPU_MIGRATIONS, perf::SW_CPU_MIGRATIONS),
            (k::COUNTER_PAGE_FAULTS, perf::SW_PAGE_FAULTS),
            (k::COUNTER_MINOR_FAULTS, perf::SW_PAGE_FAULTS_MIN),
            (k::COUNTER_MAJOR_FAULTS, perf::SW_PAGE_FAULTS_MAJ),
            (k::COUNTER_TASK_CLOCK, perf::SW_TASK_CLOCK),
        ];
        let mut last_err = 0;
        for (id, config) in list {
            let mut a = perf::Attr::new(perf::TYPE_SOFTWARE, config);
            a.read_format = perf::FORMAT_TOTAL_TIME_ENABLED;
            a.flags = perf::F_DISABLED | perf::F_INHERIT | perf::F_EXCLUDE_KERNEL | perf::F_EXCLUDE_HV;
            if id == k::COUNTER_CONTEXT_SWITCHES || id == k::COUNTER_CPU_MIGRATIONS {
                // counted in the kernel only: with exclude_kernel they stay 0; try with the kernel
                a.flags &= !(perf::F_EXCLUDE_KERNEL | perf::F_EXCLUDE_HV);
            }
            match perf::open(&a, self.opts.pid, -1, -1) {
                Ok(fd) => {
                    self.counters.push(Counter { id, fd, last: (0, 0) });
                    self.enabled.push(format!("software:{}", k::counter_name(id)));
                }
                Err(e) => {
                    last_err = e;
                    if id == k::COUNTER_CONTEXT_SWITCHES {
                        self.proc_switches = Some(ProcSwitches::default());
                        self.enabled.push("/proc:context_switches (sampled every 20 ms)".into());
                    }
                }
            }
        }
        if self.counters.is_empty() && self.proc_switches.is_none() {
            return Err(format!(
                "per-process software counters were refused too ({}; kernel.perf_event_paranoid = {})",
                errno_text(last_err),
                std::fs::read_to_string("/proc/sys/kernel/perf_event_paranoid").unwrap_or_default().trim()
            ));
        }
        if self.opts.sample_hz > 0 {
            self.attach_sampling(true);
        }
        Ok(())
    }

    fn setup(&mut self) {
        let mut reasons = vec![];
        let force = self.opts.force_tier;
        if force <= 1 {
            if self.opts.events.is_empty() {
                reasons.push("no kernel event set was selected".to_string());
            } else {
                match self.attach_tracepoints() {
                    Ok(()) => {
                        self.tier = 1;
                        self.tier_name = TIER_TRACEPOINTS.into();
                        return;
                    }
                    Err(r) => reasons.push(r),
                }
            }
        } else {
            reasons.push(format!("tier {force} was asked for"));
        }
        if force <= 2 {
            match self.attach_counters() {
                Ok(()) => {
                    self.tier = 2;
                    self.tier_name = TIER_COUNTERS.into();
                    self.reason = Some(reasons.join("; "));
                    return;
                }
                Err(r) => reasons.push(r),
            }
        }
        self.tier = 3;
        self.tier_name = TIER_NONE.into();
        self.reason = Some(reasons.join("; "));
    }

    fn start(&mut self) {
        if self.tier == 1 {
            let root = self.opts.pid.max(0) as u32;
            if root > 0 {
                self.st.traced.insert(root);
            }
            let cpu = self.cpus[0];
            self.st.emit(cpu, Record::new(now_ns(), root, cpu as u16, k::TRACED, self.opts.system_wide as u64, 0));
        }
        for &fd in &self.fds {
            perf::enable(fd);
        }
        for c in &self.counters {
            perf::enable(c.fd);
        }
    }

    fn read_counters(&mut self) {
        let ts = now_ns();
        let cpu = self.cpus[0];
        if let Some(p) = self.proc_switches.as_mut() {
            let before = p.last_total;
            let v = p.total(self.opts.pid as u32);
            if v != before || before == 0 {
                self.st.emit(cpu, Record::new(ts, k::COUNTER_CONTEXT_SWITCHES, u16::MAX, k::COUNTER, v, 0));
            }
        }
        for i in 0..self.counters.len() {
            if let Some(v) = perf::read_counter(self.counters[i].fd) {
                if v.0 != self.counters[i].last.0 || self.counters[i].last == (0, 0) {
                    self.counters[i].last = v;
                    let id = self.counters[i].id;
                    self.st.emit(cpu, Record::new(ts, id, u16::MAX, k::COUNTER, v.0, v.1));
                }
            }
        }
    }

    /// One pass over every ring; returns the bytes consumed.
    fn drain(&mut self) -> u64 {
        let mut from_bpf = 0u64;
        if let Some(b) = self.bpf.as_mut() {
            let st = &mut self.st;
            from_bpf = b.consume(&mut |rec: &[u8]| st.bpf_record(rec)) as u64 * 32;
            let lost = b.lost_per_cpu();
            for (cpu, &n) in lost.iter().enumerate() {
                let prev = self.bpf_lost.get(cpu).copied().unwrap_or(0);
                if n > prev && self.st.writers.contains_key(&(cpu as u32)) {
                    self.st.lost(cpu as u32, n - prev);
                }
            }
            self.bpf_lost = lost;
        }
        let heads: Vec<u64> = self.rings.iter().map(|r| r.ring.head()).collect();
        let Collector { rings, st, scratch, .. } = self;
        if st.filter_switches {
            for (slot, &head) in rings.iter().zip(&heads) {
                if slot.kind == RingKind::Trace {
                    slot.ring.walk(slot.ring.tail(), head, scratch, |t, _m, b| st.learn(t, b));
                }
            }
        }
        let mut total = 0;
        for (slot, &head) in rings.iter().zip(&heads) {
            let tail = slot.ring.tail();
            let (cpu, kind) = (slot.cpu, slot.kind);
            let end = slot.ring.walk(tail, head, scratch, |t, m, b| st.record(cpu, kind, t, m, b));
            slot.ring.set_tail(end);
            total += end - tail;
        }
        total + from_bpf
    }

    fn run(&mut self) {
        let mut pfds: Vec<libc::pollfd> = vec![];
        if self.opts.watch_stdin {
            pfds.push(libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 });
        }
        let first_ring = pfds.len();
        for &fd in &self.leaders {
            pfds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
        }
        // Rings hold well over 100 ms of records at full rate and wake us at a quarter full, so a
        // slow tick costs nothing in losses and keeps the collector off the program's CPUs.
        let tick_ms = if self.counters.is_empty() && self.proc_switches.is_none() { 25 } else { 20 };
        let mut last_counters = Instant::now();
        while !STOP.load(Ordering::SeqCst) {
            let got = self.drain();
            if (!self.counters.is_empty() || self.proc_switches.is_some()) && last_counters.elapsed() >= Duration::from_millis(20) {
                self.read_counters();
                last_counters = Instant::now();
            }
            if got > (self.opts.ring_mib as u64) << 16 {
                continue; // busy: drain again at once
            }
            for p in pfds.iter_mut() {
                p.revents = 0;
            }
            // SAFETY: valid pollfd array.
            let n = unsafe { libc::poll(pfds.as_mut_ptr(), pfds.len() as libc::nfds_t, tick_ms) };
            for p in pfds[first_ring..].iter_mut() {
                if p.revents & (libc::POLLHUP | libc::POLLERR) != 0 {
                    p.fd = -1; // a per-task ring whose tasks are all gone: nothing more will come
                }
            }
            if n > 0 && self.opts.watch_stdin && pfds[0].revents != 0 {
                let mut buf = [0u8; 64];
                // SAFETY: buf is writable.
                let r = unsafe { libc::read(0, buf.as_mut_ptr() as *mut libc::c_void, buf.len()) };
                if r <= 0 {
                    break; // our parent closed the pipe or died
                }
            }
        }
    }

    fn finish(&mut self) -> String {
        if let Some(b) = self.bpf.as_mut() {
            b.detach();
        }
        for &fd in &self.fds {
            perf::disable(fd);
        }
        for c in &self.counters {
            perf::disable(c.fd);
        }
        // Everything written before the disable is in the rings: drain until empty.
        while self.drain() > 0 {}
        if !self.counters.is_empty() || self.proc_switches.is_some() {
            let before: Vec<(u64, u64)> = self.counters.iter().map(|c| c.last).collect();
            for c in self.counters.iter_mut() {
                c.last = (u64::MAX, 0); // forces a final record even when unchanged
            }
            self.read_counters();
            for (c, b) in self.counters.iter_mut().zip(before) {
                if c.last.0 == u64::MAX {
                    c.last = b; // the final read failed: keep the last value read
                }
            }
        }
        let mut counters: Vec<String> =
            self.counters.iter().map(|c| format!("{}: {}", json_str(k::counter_name(c.id)), c.last.0)).collect();
        if let Some(p) = &self.proc_switches {
            counters.push(format!("{}: {}", json_str("context_switches"), p.last_total));
        }
        self.close_all();
        let mut lost_per_cpu = vec![];
        let mut records_per_cpu = vec![];
        let mut chunks = vec![];
        for &c in &self.cpus {
            let w = self.st.writers.get_mut(&c).unwrap();
            w.close();
            lost_per_cpu.push(w.lost.to_string());
            records_per_cpu.push(w.records.to_string());
            chunks.extend(w.files.iter().cloned());
        }
        let lost: u64 = self.st.writers.values().map(|w| w.lost).sum();
        let mut out = self.summary();
        out.push_str(&format!(
            ", \"lost\": {lost}, \"lost_per_cpu\": [{}], \"records\": {}, \"records_per_cpu\": [{}], \"filtered_out\": {}, \"chunks\": {}, \"counters\": {{{}}}",
            lost_per_cpu.join(", "),
            self.st.kept,
            records_per_cpu.join(", "),
            self.st.filtered,
            json_list(&chunks),
            counters.join(", ")
        ));
        if let Some(e) = &self.st.write_error {
            out.push_str(&format!(", \"write_error\": {}, \"unwritten\": {}", json_str(e), self.st.unwritten));
        }
        out.push('}');
        out
    }

    /// The start of the JSON object (without the closing brace).
    fn summary(&self) -> String {
        let mut s = format!("{{\"tier\": {}, \"tier_level\": {}", json_str(&self.tier_name), self.tier);
        if let Some(r) = &self.reason {
            s.push_str(&format!(", \"reason\": {}", json_str(r)));
        }
        s.push_str(&format!(
            ", \"mechanism\": {}, \"events\": {}, \"event_sets\": {}, \"missing\": {}, \"system_wide\": {}, \"pid\": {}, \"cpus\": {}, \"ring_mib\": {}, \"clock\": \"CLOCK_MONOTONIC\"",
            json_str(&match self.tier {
                1 => match &self.bpf_note {
                    Some(n) if self.bpf_used => format!("{n}; perf_event_open tracepoints (per-task inherit, per-CPU block) for the rest"),
                    Some(n) => format!("perf_event_open tracepoints, per-task inherit + per-CPU sched_switch/waking/block, mmap rings ({n})"),
                    None => "perf_event_open tracepoints, per-task inherit + per-CPU sched_switch/waking/block, mmap rings".to_string(),
                },
                2 => "perf_event_open software counters (per process, inherited) and /proc context switches, read every 20 ms".to_string(),
                _ => "none".to_string(),
            }),
            json_list(&self.enabled),
            json_list(&self.opts.events),
            json_list(&self.missing),
            self.opts.system_wide,
            self.opts.pid,
            self.cpus.len(),
            self.opts.ring_mib
        ));
        if let Some(t) = &self.tracefs_how {
            s.push_str(&format!(", \"tracefs\": {}", json_str(t)));
        }
        if let Some(t) = &self.sampling {
            s.push_str(&format!(", \"sampling\": {}", json_str(t)));
        }
        s
    }
}

fn install_signals() {
    for sig in [libc::SIGTERM, libc::SIGINT, libc::SIGHUP] {
        // SAFETY: installing an async-signal-safe handler (it stores an atomic).
        unsafe {
            let mut sa: libc::sigaction = std::mem::zeroed();
            sa.sa_sigaction = on_signal as extern "C" fn(libc::c_int) as usize;
            libc::sigemptyset(&mut sa.sa_mask);
            sa.sa_flags = 0;
            libc::sigaction(sig, &sa, std::ptr::null_mut());
        }
    }
    // SAFETY: plain calls.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
}

fn main() {
    let opts = match parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("oslens-collector: {e}\n{USAGE}");
            std::process::exit(2);
        }
    };
    // SAFETY: plain calls.
    let parent = unsafe { libc::getppid() };
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong, 0, 0, 0) };
    install_signals();
    if unsafe { libc::getppid() } != parent {
        STOP.store(true, Ordering::SeqCst);
    }
    if !std::path::Path::new(&opts.trace).join("raw").is_dir() {
        if let Err(e) = std::fs::create_dir_all(std::path::Path::new(&opts.trace).join("raw")) {
            eprintln!("oslens-collector: cannot create {}/raw: {e}", opts.trace);
            std::process::exit(2);
        }
    }
    let mut c = Collector::new(opts);
    c.setup();
    c.start();
    let mut ready = c.summary();
    ready.push('}');
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "READY {ready}");
        let _ = out.flush();
    }
    if c.tier < 3 {
        c.run();
    } else {
        // Nothing to collect; wait to be told to stop so the protocol stays the same.
        while !STOP.load(Ordering::SeqCst) {
            let mut p = [libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 }];
            let n = unsafe { libc::poll(p.as_mut_ptr(), if c.opts.watch_stdin { 1 } else { 0 }, 50) };
            if n > 0 {
                let mut buf = [0u8; 64];
                if unsafe { libc::read(0, buf.as_mut_ptr() as *mut libc::c_void, 64) } <= 0 {
                    break;
                }
            }
        }
    }
    let done = c.finish();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "DONE {done}");
    let _ = out.flush();
}
