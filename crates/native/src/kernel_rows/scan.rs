//! The first pass over the kernel chunks, one chunk at a time in the order given: what the
//! table pass needs before it starts and what grows with tasks, not records: each thread's pid
//! (the last one its records name), the tids `tasks` has a row for, exit times, the few
//! fork/exec/exit/traced records, the codes each string column's dictionary maps, and for each
//! chunk its first time, whether it is in time order, its NAME records' times and its losses.

use super::merge::{record_at, ChunkInfo};
use crate::app_rows::Source;
use oslens_format::{kernel as k, kinds, Record};
use super::{Map, Set};
use std::collections::BTreeSet;

/// (group in PID_PAIRS order, time, place): the pair read last wins, as kernel_tables._pid_map.
type PidKey = (u8, i64, u64);

#[derive(Default)]
pub struct Scan {
    pub chunks: Vec<ChunkInfo>,
    /// per chunk: its NAME records' times (the names' own order) and its LOST records' sum
    pub name_ts: Vec<Vec<i64>>,
    pub lost: Vec<u64>,
    /// per chunk: the CPU of its first record that is not a NAME (-1: none)
    pub first_cpu: Vec<i64>,
    pub pids: Map<i64, (PidKey, i64)>,
    pub seen: Set<i64>,
    pub last_seen: i64,
    pub exit_at: Map<i64, i64>,
    /// codes of switches' prev_state, syscalls' nr, counters' ids, block rw, block dev, irqs
    /// (hard), softirqs
    pub codes: [BTreeSet<i64>; 7],
    /// the fork, exec, exit and traced records with their places
    pub small: Vec<(Record, u64)>,
    pub records: u64,
    /// the last code added to each set and the last tid seen: most records repeat them
    last_code: [Option<i64>; 7],
    last_tid: Option<i64>,
}

pub const STATES: usize = 0;
pub const NRS: usize = 1;
pub const COUNTERS: usize = 2;
pub const RW: usize = 3;
pub const DEVS: usize = 4;
pub const HARD: usize = 5;
pub const SOFT: usize = 6;

impl Scan {
    #[inline]
    fn code(&mut self, i: usize, v: i64) {
        if self.last_code[i] != Some(v) {
            self.codes[i].insert(v);
            self.last_code[i] = Some(v);
        }
    }

    #[inline]
    fn see(&mut self, tid: i64) {
        if self.last_tid != Some(tid) {
            self.seen.insert(tid);
            self.last_tid = Some(tid);
        }
    }

    fn pid(&mut self, g: u8, tid: i64, pid: i64, ts: i64, seq: u64) {
        if pid <= 0 {
            return;
        }
        let key = (g, ts, seq);
        let e = self.pids.entry(tid).or_insert((key, pid));
        if key >= e.0 {
            *e = (key, pid);
        }
    }

    fn record(&mut self, r: &Record, seq: u64) {
        let ts = r.ts as i64;
        self.last_seen = self.last_seen.max(ts);
        self.records += 1;
        match r.kind {
            k::SWITCH => {
                let f = &k::switch::F;
                self.pid(1, f.prev_tid.get(r), f.prev_pid.get(r), ts, seq);
                self.see(f.prev_tid.get(r));
                self.see(f.next_tid.get(r));
                self.code(STATES, f.prev_state.get(r));
            }
            k::WAKEUP => self.pid(2, k::wakeup::F.waker_tid.get(r), k::wakeup::F.waker_pid.get(r), ts, seq),
            k::SYS_ENTER | k::SYS_EXIT => {
                let f = &k::sys_enter::F;
                let tid = f.tid.get(r);
                self.pid(if r.kind == k::SYS_ENTER { 3 } else { 4 }, tid, f.pid.get(r), ts, seq);
                if r.kind == k::SYS_ENTER {
                    self.see(tid);
                }
                self.code(NRS, f.nr.get(r));
            }
            k::FORK | k::EXEC | k::EXIT | k::TRACED | k::TASK_IDS | k::TASK => self.small_record(r, seq),
            k::SAMPLE => {
                self.pid(9, k::sample::F.tid.get(r), k::sample::F.pid.get(r), ts, seq);
                self.see(k::sample::F.tid.get(r));
            }
            k::FAULT => {
                self.see(k::fault::F.tid.get(r));
            }
            k::IRQ_ENTRY => {
                self.pid(10, k::irq_entry::F.tid.get(r), k::irq_entry::F.pid.get(r), ts, seq);
                self.code(HARD, k::irq_entry::F.irq.get(r));
            }
            k::SOFTIRQ_ENTRY | k::SOFTIRQ_EXIT => {
                let g = if r.kind == k::SOFTIRQ_ENTRY { 11 } else { 12 };
                self.pid(g, k::softirq_entry::F.tid.get(r), k::softirq_entry::F.pid.get(r), ts, seq);
                self.code(SOFT, k::irq_entry::F.irq.get(r)); // read as irq_entry's field, as kernel_pairs does
            }
            k::COUNTER => {
                self.code(COUNTERS, k::counter::F.counter.get(r));
            }
            k::BLOCK_ISSUE => {
                self.code(RW, k::block_issue::F.rw.get(r));
                self.code(DEVS, k::block_issue::F.dev.get(r));
            }
            _ => {}
        }
    }

    fn small_record(&mut self, r: &Record, seq: u64) {
        let ts = r.ts as i64;
        match r.kind {
            k::FORK => {
                let f = &k::fork::F;
                self.pid(5, f.parent_tid.get(r), f.parent_pid.get(r), ts, seq);
                self.pid(6, f.child_tid.get(r), f.child_pid.get(r), ts, seq);
                self.see(f.child_tid.get(r));
                self.see(f.parent_tid.get(r));
            }
            k::EXEC => {
                self.pid(7, k::exec::F.tid.get(r), k::exec::F.pid.get(r), ts, seq);
                self.see(k::exec::F.tid.get(r));
            }
            k::TASK => {
                // a thread alive at an attach: its pid counts least (group 0), every event's own after it
                self.pid(0, k::task::F.tid.get(r), k::task::F.pid.get(r), ts, seq);
                self.see(k::task::F.tid.get(r));
            }
            k::EXIT => {
                let tid = k::exit::F.tid.get(r);
                self.pid(8, tid, k::exit::F.pid.get(r), ts, seq);
                self.see(tid);
                let e = self.exit_at.entry(tid).or_insert(ts);
                *e = (*e).max(ts);
            }
            _ => {}
        }
        self.small.push((*r, seq));
    }

    /// Scans one chunk (number `c`).
    fn chunk(&mut self, c: usize, recs: &[u8]) {
        let (mut min_ts, mut last, mut sorted) = (u64::MAX, 0u64, true);
        let (mut names, mut lost, mut first_cpu) = (Vec::new(), 0u64, -1i64);
        for i in 0..recs.len() / 32 {
            let r = record_at(recs, i);
            if r.kind == kinds::NAME {
                names.push(r.ts as i64);
                continue;
            }
            if first_cpu < 0 {
                first_cpu = r.cpu as i64;
            }
            sorted &= r.ts >= last;
            last = r.ts;
            min_ts = min_ts.min(r.ts);
            if r.kind == k::LOST {
                lost += k::lost::F.count.get(&r) as u64;
            }
            self.record(&r, ((c as u64) << 32) | i as u64);
        }
        self.chunks.push(ChunkInfo { min_ts, sorted });
        self.name_ts.push(names);
        self.lost.push(lost);
        self.first_cpu.push(first_cpu);
    }
}

/// Scans every chunk, one read at a time; the small records end in time order (ties: place).
pub fn scan(chunks: &[Source]) -> std::io::Result<Scan> {
    let mut s = Scan::default();
    for (c, src) in chunks.iter().enumerate() {
        let recs = src.read()?;
        s.chunk(c, &recs);
    }
    s.small.sort_by_key(|(r, seq)| (r.ts, *seq));
    Ok(s)
}
