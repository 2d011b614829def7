//! Decoding the perf rings: tracepoint samples into oslens records (keeping only what concerns
//! the traced tree), cpu-clock samples, and the kernel's count of what it dropped.

use crate::perf;
use crate::state::State;
use crate::tracefs::Field;
use crate::tracepoints::{bytes, comm16, rw_flags, sval, uval, Ev};
use oslens_format::kernel as k;
use oslens_format::kernel_layout::Words;
use oslens_format::record::Record;

/// What a perf ring carries: tracepoint samples or cpu-clock samples.
#[derive(PartialEq, Eq, Clone, Copy)]
pub enum RingKind {
    Trace,
    Sample,
}

/// One tracepoint sample: where and when it fired, who fired it, its raw bytes and the fields of
/// its handler.
struct Tp<'a> {
    cpu: u32,
    pid: u32,
    tid: u32,
    ts: u64,
    raw: &'a [u8],
    f: [Field; 6],
}

impl Tp<'_> {
    /// A record of `kind` with the words its `pack` made (crates/format/src/kernel.rs).
    fn record(&self, kind: u8, w: Words) -> Record {
        Record::new(self.ts, w.id, self.cpu as u16, kind, w.a, w.b)
    }
}

impl State {
    /// Phase 1 of a drain: only learn new tasks of the tree, so that switches of a child drained
    /// from another CPU's ring in this same pass are kept.
    pub fn learn(&mut self, typ: u32, body: &[u8]) {
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
        let ts = u64::from_le_bytes(body[16..24].try_into().unwrap()).wrapping_add_signed(self.ts_offset);
        let kernel = (misc & perf::MISC_CPUMODE_MASK) == perf::MISC_KERNEL;
        let (tid, pid) = match &self.to_namespace {
            // as the eBPF programs name a task the namespace cannot see (oslens.bpf.c, vtid)
            Some(map) => (
                map.get(&tid).copied().unwrap_or(k::PIDNS_OUTSIDE as u32 + tid),
                map.get(&pid).copied().unwrap_or(k::PIDNS_OUTSIDE as u32 + pid),
            ),
            None => (tid, pid),
        };
        let w = k::sample::pack(tid as u64, ip, pid as u64, kernel as u64);
        self.emit(cpu, Record::new(ts, w.id, cpu as u16, k::SAMPLE, w.a, w.b));
    }

    pub fn record(&mut self, cpu: u32, kind: RingKind, typ: u32, misc: u16, body: &[u8]) {
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
        let ts = u64::from_le_bytes(body[8..16].try_into().unwrap()).wrapping_add_signed(self.ts_offset);
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
        let ev = h.ev;
        let t = Tp { cpu, pid, tid, ts, raw, f: h.f };
        let (f, raw) = (t.f, t.raw);
        match ev {
            Ev::Switch => self.switch(&t),
            Ev::Waking => self.waking(&t),
            Ev::Enqueue => self.enqueue(&t),
            Ev::NewTask => self.new_task(&t),
            Ev::Rename => {
                // kernels that dropped the field rename only the current task
                let who = if f[0].size == 0 { tid } else { sval(raw, f[0]) as u32 };
                self.renamed(cpu, ts, who, comm16(raw, f[1]));
            }
            Ev::Exec => {
                let old = sval(raw, f[2]) as u32;
                let file = bytes(raw, f[0]).to_vec();
                self.emit(cpu, t.record(k::EXEC, k::exec::pack(tid as u64, pid as u64, old as u64)));
                self.exec_names(cpu, ts, tid, &file);
            }
            Ev::Exit => {
                let dead = uval(raw, f[1]);
                self.emit(cpu, t.record(k::EXIT, k::exit::pack(tid as u64, pid as u64, dead)));
            }
            Ev::Migrate => self.migrate(&t),
            Ev::SysEnter => {
                let nr = sval(raw, f[0]) as u64;
                let arg0 = uval(raw, Field { offset: f[1].offset, size: 8, data_loc: false });
                self.emit(cpu, t.record(k::SYS_ENTER, k::sys_enter::pack(tid as u64, nr, pid as u64, arg0)));
            }
            Ev::SysExit => {
                let nr = sval(raw, f[0]) as u64;
                let ret = sval(raw, f[1]) as u64;
                self.emit(cpu, t.record(k::SYS_EXIT, k::sys_exit::pack(tid as u64, nr, pid as u64, ret)));
            }
            Ev::Fault => {
                let w = k::fault::pack(tid as u64, uval(raw, f[0]), uval(raw, f[1]), uval(raw, f[2]));
                self.emit(cpu, t.record(k::FAULT, w));
            }
            Ev::BioQueue => self.bio_queue(&t),
            Ev::BlockIssue | Ev::BlockComplete => self.block_request(&t, ev == Ev::BlockIssue),
            Ev::IrqEntry => {
                let irq = sval(raw, f[0]);
                if self.irq_names.insert(irq) {
                    let name = bytes(raw, f[1]).to_vec();
                    self.emit_name(cpu, ts, irq as u32, k::NAME_IRQ, &name);
                }
                self.emit(cpu, t.record(k::IRQ_ENTRY, k::irq_entry::pack(tid as u64, irq as u64, pid as u64)));
            }
            Ev::IrqExit => {
                let irq = sval(raw, f[0]);
                let ret = sval(raw, f[1]);
                self.emit(cpu, t.record(k::IRQ_EXIT, k::irq_exit::pack(tid as u64, irq as u64, ret as u64)));
            }
            Ev::SoftEntry | Ev::SoftExit => {
                let vec = uval(raw, f[0]);
                let (kind, w) = if ev == Ev::SoftEntry {
                    (k::SOFTIRQ_ENTRY, k::softirq_entry::pack(tid as u64, vec, pid as u64))
                } else {
                    (k::SOFTIRQ_EXIT, k::softirq_exit::pack(tid as u64, vec, pid as u64))
                };
                self.emit(cpu, t.record(kind, w));
            }
        }
    }

    fn switch(&mut self, t: &Tp) {
        let (f, raw) = (t.f, t.raw);
        let prev = sval(raw, f[1]) as u32;
        let next = sval(raw, f[5]) as u32;
        if self.filter_switches && !self.traced.contains(&prev) && !self.traced.contains(&next) {
            self.filtered += 1;
            return;
        }
        self.note_comm(t.cpu, t.ts, prev, comm16(raw, f[0]));
        self.note_comm(t.cpu, t.ts, next, comm16(raw, f[4]));
        let w = k::switch::pack(prev as u64, next as u64, t.pid as u64, uval(raw, f[3]), sval(raw, f[2]) as u64);
        self.emit(t.cpu, t.record(k::SWITCH, w));
    }

    fn waking(&mut self, t: &Tp) {
        let (f, raw, tid) = (t.f, t.raw, t.tid);
        let woken = sval(raw, f[0]) as u32;
        if self.filter_switches && !self.traced.contains(&tid) && !self.traced.contains(&woken) {
            self.filtered += 1;
            return;
        }
        // A wakeup of a traced task by a traced task is delivered twice (once to each).
        if let Some(&(lts, lw, lt)) = self.last_waking.get(&t.cpu) {
            if lw == tid && lt == woken && t.ts.wrapping_sub(lts) < 5_000 {
                return;
            }
        }
        self.last_waking.insert(t.cpu, (t.ts, tid, woken));
        let w = k::wakeup::pack(tid as u64, woken as u64, t.pid as u64, sval(raw, f[2]) as u64, sval(raw, f[1]) as u64);
        self.emit(t.cpu, t.record(k::WAKEUP, w));
    }

    /// Kept when the woken task is traced: the current task is unrelated (it runs where the
    /// enqueue happens), so it neither keeps nor drops the record.
    fn enqueue(&mut self, t: &Tp) {
        let woken = sval(t.raw, t.f[0]) as u32;
        if self.filter_switches && !self.traced.contains(&woken) {
            self.filtered += 1;
            return;
        }
        let w = k::enqueue::pack(t.tid as u64, woken as u64, sval(t.raw, t.f[2]) as u64, sval(t.raw, t.f[1]) as u64);
        self.emit(t.cpu, t.record(k::ENQUEUE, w));
    }

    fn new_task(&mut self, t: &Tp) {
        let (f, raw, tid, pid) = (t.f, t.raw, t.tid, t.pid);
        let child = sval(raw, f[0]) as u32;
        let flags = uval(raw, f[2]);
        let child_pid = if flags & libc::CLONE_THREAD as u64 != 0 { pid } else { child };
        if self.system_wide && !self.traced.contains(&tid) {
            // kept (system-wide) but not part of the tree
        } else {
            self.traced.insert(child);
        }
        self.note_comm(t.cpu, t.ts, child, comm16(raw, f[1]));
        self.emit(t.cpu, t.record(k::FORK, k::fork::pack(tid as u64, child as u64, child_pid as u64, pid as u64, flags)));
    }

    fn migrate(&mut self, t: &Tp) {
        let (f, raw) = (t.f, t.raw);
        let who = sval(raw, f[0]) as u32;
        if self.filter_switches && !self.traced.contains(&who) {
            self.filtered += 1;
            return;
        }
        let w = k::migrate::pack(who as u64, sval(raw, f[1]) as u64, sval(raw, f[2]) as u64, t.tid as u64);
        self.emit(t.cpu, t.record(k::MIGRATE, w));
    }

    /// Not recorded: remembers which traced task a bio is for, since the request may be
    /// dispatched later from a kworker's context.
    fn bio_queue(&mut self, t: &Tp) {
        if self.traced.contains(&t.tid) {
            let dev = uval(t.raw, t.f[0]) & 0xffff_ffff;
            let sector = uval(t.raw, t.f[1]);
            if self.queued_block.len() > 1 << 16 {
                self.queued_block.clear();
            }
            self.queued_block.insert((dev, sector), t.tid);
        }
    }

    fn block_request(&mut self, t: &Tp, issue: bool) {
        let (f, raw, tid) = (t.f, t.raw, t.tid);
        let dev = uval(raw, f[0]) & 0xffff_ffff;
        let sector = uval(raw, f[1]);
        let nsec = uval(raw, f[2]);
        let flags = rw_flags(bytes(raw, f[3]));
        // the task a request is for: its issuer when traced, else the traced task that
        // queued its first bio
        let owner = match self.queued_block.remove(&(dev, sector)) {
            Some(q) if issue && !self.traced.contains(&tid) => q,
            _ => tid,
        };
        let mut kind = if issue { k::BLOCK_ISSUE } else { k::BLOCK_COMPLETE };
        if !self.system_wide {
            if issue {
                if !self.traced.contains(&owner) {
                    // Kept, as every completion is, to tell a traced request's missing completion
                    // from a later one of the same sector: the rings are drained CPU by CPU, so
                    // this issue may be read before the traced one it follows (the importer, which
                    // merges by time, pairs them; block issues are few).
                    self.pending_block.remove(&(dev, sector));
                    kind = k::BLOCK_ISSUE_OTHER;
                } else {
                    if self.pending_block.len() > 1 << 16 {
                        self.pending_block.clear();
                    }
                    self.pending_block.insert((dev, sector));
                }
            } else {
                // Every completion is kept: the rings are drained CPU by CPU, so a
                // completion on one CPU may be read before its issue on another. The
                // importer pairs them and drops completions of others' requests.
                self.pending_block.remove(&(dev, sector));
            }
        }
        // BLOCK_COMPLETE and BLOCK_ISSUE_OTHER are laid out as BLOCK_ISSUE (kernel.rs)
        self.emit(t.cpu, t.record(kind, k::block_issue::pack(owner as u64, sector, dev, nsec, flags)));
    }
}
