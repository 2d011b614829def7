//! A task of the what-if simulator as the simulator and the policies share it: its workload
//! (bursts, blocks, who it waits for), its state and figures, and each policy's own fields.
//! States and block kinds are the numbers python/oslens/whatif/native.py reads and writes
//! (oslens._native.WHATIF_STATES and WHATIF_BLOCK_KINDS, crates/native/src/whatif/mod.rs).

use std::collections::{HashMap, HashSet};

pub const NOT_ARRIVED: u8 = 0;
pub const READY: u8 = 1;
pub const RUNNING: u8 = 2;
pub const BLOCKED: u8 = 3;
pub const DONE: u8 = 4;
pub const BLOCK_FIXED: u8 = 0;
pub const BLOCK_DEP: u8 = 1;
pub const BLOCK_UNTIL: u8 = 2;
pub const BLOCK_YIELD: u8 = 3;

/// Per-task state of the policies (one struct for all of them: each uses its own fields).
#[derive(Default, Clone)]
pub struct PState {
    pub used: i64,
    pub has_used: bool,
    pub qused: i64,
    pub level: usize,
    pub has_level: bool,
    pub est: f64,
    pub has_est: bool,
    pub order: u64,
    pub tau: f64,
    pub has_tau: bool,
    pub w: i64,
    pub v: f64,
    pub d: f64,
    pub slice: i64,
    pub lag: f64,
}

#[derive(Clone, Copy)]
pub struct BlockSpec {
    pub kind: u8, // BLOCK_FIXED (a fixed duration), BLOCK_DEP, BLOCK_UNTIL, BLOCK_YIELD
    pub duration: i64,
}

pub struct TaskSpec {
    pub bursts: Vec<i64>,
    pub blocks: Vec<BlockSpec>,
    pub arrival: i64,
    pub arrival_dep: Option<(usize, usize, i64)>,
    pub block_deps: Vec<(usize, usize, usize, i64)>, // (block, task, burst, offset)
    pub cpus: Vec<u64>, // the allowed CPUs' bits, 64 a word; empty: any CPU
    pub nice: i64,
    pub background: bool,
    pub until: i64,
}

pub struct Task {
    pub i: usize,
    pub bursts: Vec<i64>,
    pub blocks: Vec<BlockSpec>,
    pub cpus: Vec<u64>, // the allowed CPUs' bits, 64 a word; empty: any CPU
    pub nice: i64,
    pub background: bool,
    pub until: i64,
    pub state: u8,
    pub seg: usize,
    pub progress: i64,
    pub points: HashMap<usize, Vec<(i64, usize, i64)>>,
    pub pi: usize,
    pub fired: HashSet<usize>,
    pub last_cpu: i64,
    pub ready_at: i64,
    pub first_run: i64,
    pub done_at: i64,
    pub arrived_at: i64,
    pub waiting: i64,
    pub dispatches: i64,
    pub voluntary: i64,
    pub involuntary: i64,
    pub p: PState,
}

impl Task {
    /// The task's state before the simulation starts.
    pub fn new(i: usize, s: TaskSpec) -> Task {
        Task {
            i,
            bursts: s.bursts,
            blocks: s.blocks,
            cpus: s.cpus,
            nice: s.nice,
            background: s.background,
            until: s.until,
            state: NOT_ARRIVED,
            seg: 0,
            progress: 0,
            points: HashMap::new(),
            pi: 0,
            fired: HashSet::new(),
            last_cpu: -1,
            ready_at: 0,
            first_run: -1,
            done_at: -1,
            arrived_at: -1,
            waiting: 0,
            dispatches: 0,
            voluntary: 0,
            involuntary: 0,
            p: PState::default(),
        }
    }

    pub fn remaining(&self) -> i64 {
        self.bursts[self.seg] - self.progress
    }
    pub fn bursts_at(&self, k: usize) -> i64 {
        self.bursts[k]
    }
    pub fn allowed(&self, cpu: usize) -> bool {
        self.cpus.is_empty() || self.cpus.get(cpu / 64).is_some_and(|w| w & (1u64 << (cpu % 64)) != 0)
    }
}

