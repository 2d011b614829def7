//! What the decoders know between records (the traced tree, names already written, block
//! requests in flight) and where records go: one chunk writer per CPU.

use crate::chunk::Writer;
use crate::sys::now_ns;
use crate::tracepoints::Handler;
use oslens_format::hash::FxBuild as Fast;
use oslens_format::kernel as k;
use oslens_format::record::Record;
use std::collections::{HashMap, HashSet};

/// Decoding state, apart from the rings so a ring can be walked while the state changes.
pub struct State {
    pub system_wide: bool,
    pub filter_switches: bool,
    pub handlers: Vec<Handler>,
    pub by_id: Vec<u16>,
    pub newtask_id: u16,
    pub writers: HashMap<u32, Writer, Fast>,
    pub traced: HashSet<u32, Fast>,
    pub comms: HashMap<u32, [u8; 16], Fast>,
    pub irq_names: HashSet<i64, Fast>,
    pub pending_block: HashSet<(u64, u64), Fast>,
    /// (dev, sector) of bios the tree queued, with the submitting task.
    pub queued_block: HashMap<(u64, u64), u32, Fast>,
    pub last_waking: HashMap<u32, (u64, u32, u32), Fast>,
    pub samples_seen: u64,
    pub kept: u64,
    pub filtered: u64,
    pub write_error: Option<String>,
    pub unwritten: u64,
    /// Added to the kernel's timestamps: the offset of CLOCK_MONOTONIC in the collector's time
    /// namespace (sys::monotonic_offset), so records share the program's clock.
    pub ts_offset: i64,
    /// An attach from the host into a PID namespace: perf's samples carry the kernel's tids, the
    /// other records the namespace's; the kernel tid -> namespace tid of every task a TASK_IDS
    /// record names, which the samples are translated by. None: nothing to translate.
    pub to_namespace: Option<HashMap<u32, u32, Fast>>,
}

impl State {
    pub fn new(system_wide: bool, writers: HashMap<u32, Writer, Fast>) -> State {
        State {
            system_wide,
            filter_switches: !system_wide,
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
            ts_offset: 0,
            to_namespace: None,
        }
    }

    pub fn emit(&mut self, cpu: u32, r: Record) {
        if r.kind == k::TASK_IDS {
            if let Some(map) = self.to_namespace.as_mut() {
                map.insert(k::task_ids::F.global_tid.get(&r) as u32, k::task_ids::F.tid.get(&r) as u32);
            }
        }
        let w = self.writers.get_mut(&cpu).expect("writer per cpu");
        if let Err(e) = w.push(r) {
            self.unwritten += 1;
            self.write_error.get_or_insert(e);
        } else {
            self.kept += 1;
        }
    }

    pub fn emit_name(&mut self, cpu: u32, ts: u64, id: u32, class: u64, name: &[u8]) {
        let w = self.writers.get_mut(&cpu).expect("writer per cpu");
        if let Err(e) = w.push_name(ts, id, cpu as u16, class, name) {
            self.write_error.get_or_insert(e);
        }
    }

    pub fn note_comm(&mut self, cpu: u32, ts: u64, tid: u32, comm: [u8; 16]) {
        if tid == 0 {
            return;
        }
        if self.comms.get(&tid) != Some(&comm) {
            self.comms.insert(tid, comm);
            let n = comm.iter().position(|&c| c == 0).unwrap_or(16);
            self.emit_name(cpu, ts, tid, k::NAME_TASK, &comm[..n]);
        }
    }

    /// A task_rename: the name is written at the rename's time even when it is already known,
    /// since the eBPF ring is drained before the perf rings and a later switch read from it may
    /// have carried the new name first, at its own later time.
    pub fn renamed(&mut self, cpu: u32, ts: u64, tid: u32, comm: [u8; 16]) {
        if tid == 0 {
            return;
        }
        self.comms.insert(tid, comm);
        let n = comm.iter().position(|&c| c == 0).unwrap_or(16);
        self.emit_name(cpu, ts, tid, k::NAME_TASK, &comm[..n]);
    }

    pub fn lost(&mut self, cpu: u32, n: u64) {
        let ts = now_ns();
        let w = k::lost::pack(n);
        self.emit(cpu, Record::new(ts, w.id, cpu as u16, k::LOST, w.a, w.b));
        let w = self.writers.get_mut(&cpu).unwrap();
        let _ = w.count_lost(n);
    }

    /// After an exec: the file name, and the new comm (its base name, as the kernel sets it).
    pub fn exec_names(&mut self, cpu: u32, ts: u64, tid: u32, file: &[u8]) {
        self.emit_name(cpu, ts, tid, k::NAME_EXEC, file);
        let base = file.rsplit(|&b| b == b'/').next().unwrap_or(file);
        let mut comm = [0u8; 16];
        let n = base.len().min(15);
        comm[..n].copy_from_slice(&base[..n]);
        self.note_comm(cpu, ts, tid, comm);
    }
}
