//! Tier 2, when tracepoints are refused: per-process software counters, and context switches
//! read from /proc when even those count nothing.

use std::collections::HashMap;

/// One perf software counter of the traced tree, and the last (value, time enabled) read.
pub struct Counter {
    pub id: u32,
    pub fd: i32,
    pub last: (u64, u64),
}

/// Context switches of the traced tree from /proc (the perf software counter counts nothing
/// when the kernel must be excluded, as perf_event_paranoid = 2 demands): the last value seen
/// per task, summed; a task's last few milliseconds before it exits may be missed.
#[derive(Default)]
pub struct ProcSwitches {
    per_task: HashMap<u32, u64>,
    pub last_total: u64,
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

    pub fn total(&mut self, root: u32) -> u64 {
        self.walk(root, 0);
        self.last_total = self.per_task.values().sum();
        self.last_total
    }
}
