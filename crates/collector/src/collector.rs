//! The collector once attached: enable, drain the rings while the program runs, finish with
//! the counts and losses of the DONE line. Attaching (the tiers) is in setup.rs.

use crate::attach;
use crate::bpf;
use crate::chunk::Writer;
use crate::cli::Opts;
use crate::counters::{Counter, ProcSwitches};
use crate::json::{json_list, json_str};
use crate::perf;
use crate::perf_records::RingKind;
use crate::signals;
use crate::state::State;

/// Answers a drain asked for on stdin (`DRAINED`, one line on stdout).
pub fn say_drained() {
    use std::io::Write;
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "DRAINED");
    let _ = out.flush();
}

/// How often the collector drains its rings when nothing wakes it: 4 times a second keeps it off
/// the program's CPUs in a recording left on (issue 32's target is 10 wake-ups a second at most);
/// a busy ring wakes it at its watermark instead.
const TICK_MS: i32 = 250;
use crate::sys::{now_ns, online_cpus};
use oslens_format::kernel as k;
use oslens_format::record::Record;
use std::time::{Duration, Instant};

/// A perf ring and what it carries.
pub struct RingSlot {
    pub cpu: u32,
    pub kind: RingKind,
    pub ring: perf::Ring,
}

pub struct Collector {
    pub opts: Opts,
    pub tier: u32,
    pub tier_name: String,
    pub reason: Option<String>,
    pub tracefs_how: Option<String>,
    pub enabled: Vec<String>,
    pub missing: Vec<String>,
    /// Events enabled and disabled one by one: per-CPU ones and per-task group leaders.
    pub fds: Vec<i32>,
    /// Per-task group members: they follow their leader's enable and disable.
    pub members: Vec<i32>,
    pub rings: Vec<RingSlot>,
    /// The fd owning each ring: poll()able, readable when the ring is a quarter full.
    pub leaders: Vec<i32>,
    pub counters: Vec<Counter>,
    pub proc_switches: Option<ProcSwitches>,
    pub bpf: Option<bpf::Bpf>,
    pub bpf_lost: Vec<u64>,
    pub bpf_note: Option<String>,
    pub bpf_used: bool,
    pub st: State,
    pub scratch: Vec<u8>,
    pub cpus: Vec<u32>,
    pub sampling: Option<String>,
    /// The threads of the attached processes alive at the attach (`--attach`).
    pub attached: Vec<attach::Alive>,
    /// The inode of the recording's PID namespace, 0 in the initial one (sys::pid_namespace).
    pub pidns: u64,
    /// The traced root in the records' numbering: `--pid`, or the first attached process's pid
    /// in its own PID namespace (an attach from the host into a container).
    pub root: u32,
}

pub const TIER_TRACEPOINTS: &str = "kernel tracepoints";
pub const TIER_COUNTERS: &str = "per-process software counters";
pub const TIER_NONE: &str = "application events only";

impl Collector {
    pub fn new(opts: Opts) -> Collector {
        let cpus = online_cpus();
        let raw_dir = format!("{}/raw", opts.trace);
        let writers = cpus.iter().map(|&c| (c, Writer::new(&raw_dir, &format!("kernel-cpu{c}"), c, opts.chunk_records))).collect();
        let mut st = State::new(opts.system_wide, writers);
        st.ts_offset = crate::sys::monotonic_offset();
        let root = opts.pid.max(0) as u32;
        Collector {
            opts,
            tier: 3,
            tier_name: TIER_NONE.into(),
            reason: None,
            tracefs_how: None,
            enabled: vec![],
            missing: vec![],
            fds: vec![],
            members: vec![],
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
            attached: vec![],
            pidns: crate::sys::pid_namespace(),
            root,
        }
    }

    pub fn close_all(&mut self) {
        self.bpf = None;
        self.rings.clear();
        for fd in self.fds.drain(..).chain(self.members.drain(..)) {
            // SAFETY: our fd.
            unsafe { libc::close(fd) };
        }
        for c in self.counters.drain(..) {
            // SAFETY: our fd.
            unsafe { libc::close(c.fd) };
        }
    }

    pub fn start(&mut self) {
        if self.tier == 1 {
            let root = self.root;
            if root > 0 {
                self.st.traced.insert(root);
            }
            let cpu = self.cpus[0];
            let w = k::traced::pack(root as u64, self.opts.system_wide as u64);
            self.st.emit(cpu, Record::new(now_ns(), w.id, cpu as u16, k::TRACED, w.a, w.b));
            self.record_attached(cpu);
            if let Some((pid, tid)) = self.bpf.as_ref().and_then(|b| b.root_global) {
                let w = k::task_ids::pack(root as u64, tid as u64, pid as u64);
                self.st.emit(cpu, Record::new(now_ns(), w.id, cpu as u16, k::TASK_IDS, w.a, w.b));
            }
        }
        for &fd in &self.fds {
            perf::enable(fd);
        }
        for c in &self.counters {
            perf::enable(c.fd);
        }
    }

    /// The threads alive at an attach: traced from now, each with a TASK record (it was not
    /// created now) and its name.
    fn record_attached(&mut self, cpu: u32) {
        let ts = now_ns();
        for a in std::mem::take(&mut self.attached) {
            self.st.traced.insert(a.tid);
            let w = k::task::pack(a.tid as u64, a.pid as u64, 1);
            self.st.emit(cpu, Record::new(ts, w.id, cpu as u16, k::TASK, w.a, w.b));
            self.st.note_comm(cpu, ts, a.tid, a.comm);
            if self.pidns != 0 && a.global_tid != 0 {
                // in a PID namespace the records carry its tids: the kernel's, so they join
                let w = k::task_ids::pack(a.tid as u64, a.global_tid as u64, a.global_pid as u64);
                self.st.emit(cpu, Record::new(ts, w.id, cpu as u16, k::TASK_IDS, w.a, w.b));
            }
        }
    }

    pub fn read_counters(&mut self) {
        let ts = now_ns();
        let cpu = self.cpus[0];
        if let Some(p) = self.proc_switches.as_mut() {
            let before = p.last_total;
            let v = p.total(self.opts.pid as u32);
            if v != before || before == 0 {
                let w = k::counter::pack(k::COUNTER_CONTEXT_SWITCHES as u64, v, 0);
                self.st.emit(cpu, Record::new(ts, w.id, u16::MAX, k::COUNTER, w.a, w.b));
            }
        }
        for i in 0..self.counters.len() {
            if let Some(v) = perf::read_counter(self.counters[i].fd) {
                if v.0 != self.counters[i].last.0 || self.counters[i].last == (0, 0) {
                    self.counters[i].last = v;
                    let id = self.counters[i].id;
                    let w = k::counter::pack(id as u64, v.0, v.1);
                    self.st.emit(cpu, Record::new(ts, w.id, u16::MAX, k::COUNTER, w.a, w.b));
                }
            }
        }
    }

    /// One pass over every ring; returns the bytes consumed.
    pub fn drain(&mut self) -> u64 {
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

    pub fn run(&mut self) {
        let mut pfds: Vec<libc::pollfd> = vec![];
        if self.opts.watch_stdin {
            pfds.push(libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 });
        }
        let wake = self.bpf.as_ref().map_or(-1, |b| b.wake_fd);
        if wake >= 0 {
            pfds.push(libc::pollfd { fd: wake, events: libc::POLLIN, revents: 0 });
        }
        let first_ring = pfds.len();
        for &fd in &self.leaders {
            pfds.push(libc::pollfd { fd, events: libc::POLLIN, revents: 0 });
        }
        // Rings hold many ticks of records at full rate and wake us at a quarter full, so a slow
        // tick costs nothing in losses and keeps the collector off the program's CPUs
        // (docs/kernel-collector.md; the loss test starves tiny rings). Counters are sampled
        // every 20 ms.
        let tick_ms = if self.counters.is_empty() && self.proc_switches.is_none() { TICK_MS } else { 20 };
        let mut last_counters = Instant::now();
        let mut drain_asked = false;
        while !signals::stop_requested() {
            let got = self.drain();
            if drain_asked {
                // a snapshot waits for this line: every record made before it asked is in the chunks
                say_drained();
                drain_asked = false;
            }
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
            if n > 0 && wake >= 0 {
                if let Some(b) = self.bpf.as_ref() {
                    b.clear_wake();
                }
            }
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
                drain_asked = true; // any line on stdin asks for a drain now (a flight snapshot)
            }
        }
    }

    pub fn finish(&mut self) -> String {
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
        let skipped = self.bpf.as_ref().map(|b| b.skipped_by_kernel()).unwrap_or_default();
        let skipped: Vec<String> = skipped.iter().map(|(name, n)| format!("{}: {n}", json_str(name))).collect();
        out.push_str(&format!(", \"skipped_by_kernel\": {{{}}}", skipped.join(", ")));
        out.push('}');
        out
    }

    /// The start of the JSON object (without the closing brace).
    pub fn summary(&self) -> String {
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
        if self.pidns != 0 {
            s.push_str(&format!(", \"pid_namespace\": {}", self.pidns));
            if let Some((pid, tid)) = self.bpf.as_ref().and_then(|b| b.root_global) {
                s.push_str(&format!(", \"root_global\": {{\"pid\": {pid}, \"tid\": {tid}}}"));
            }
        }
        if self.st.ts_offset != 0 {
            s.push_str(&format!(", \"monotonic_offset_ns\": {}", self.st.ts_offset));
        }
        s
    }
}
