//! What every kernel table's rows are completed with: each thread's pid, its comm at a time,
//! the string columns' dictionaries and the declared columns.

use super::table::{Buf, Dict, Table};
use crate::app_rows::Declared;
use super::Map;

/// The dictionaries the importer gives, in this order.
pub const COMM: usize = 0;
pub const STATE: usize = 1;
pub const SYSCALL: usize = 2;
pub const COUNTER: usize = 3;
pub const RW: usize = 4;
pub const DEV: usize = 5;
pub const IRQ: usize = 6;
pub const KIND: usize = 7;
pub const DICTS: usize = 8;

/// The comm of a task at a time, from the NAME records (kernel_tasks.Comms): the last name at
/// or before the time, else the task's first; `<idle>` for tid 0, "" for a task never named.
pub struct Comms {
    by_tid: Map<i64, Vec<(i64, u32)>>,
    idle: u32,
    none: u32,
}

impl Comms {
    /// history: (tid, time, index in the comm dictionary) in (tid, time) order, ties in record
    /// order; idle, none: the indices of `<idle>` and "".
    pub fn new(history: &[(i64, i64, u32)], idle: u32, none: u32) -> Comms {
        let mut by_tid: Map<i64, Vec<(i64, u32)>> = Map::default();
        for &(tid, ts, i) in history {
            by_tid.entry(tid).or_default().push((ts, i));
        }
        Comms { by_tid, idle, none }
    }

    #[inline]
    pub fn at(&self, tid: i64, ts: i64) -> u32 {
        if tid == 0 {
            return self.idle;
        }
        match self.by_tid.get(&tid) {
            None => self.none,
            Some(h) => {
                let p = h.partition_point(|x| x.0 <= ts);
                h[p.saturating_sub(1)].1
            }
        }
    }
}

pub struct Ctx<'a> {
    pub pids: Map<i64, i64>,
    pub comms: Comms,
    pub dicts: Vec<Dict>,
    pub declared: &'a Declared,
    /// (delta, statistics) of each declared column, by table
    pub enc: &'a std::collections::HashMap<String, Vec<(bool, bool)>>,
    pub paths: &'a std::collections::HashMap<String, String>,
    pub group_rows: usize,
    /// tasks whose every switch is kept (None: every task): an inferred slice is only theirs
    pub whole: Option<super::Set<i64>>,
    /// tid -> the time of its exit record (a call open at exit ends there)
    pub exit_at: Map<i64, i64>,
}

impl Ctx<'_> {
    /// The thread's pid: the last its records named; 0 for tid 0, -1 when none did.
    #[inline]
    pub fn pid_of(&self, tid: i64) -> i64 {
        if tid == 0 {
            0
        } else {
            *self.pids.get(&tid).unwrap_or(&-1)
        }
    }

    /// Where held rows spill: beside the tables written.
    pub fn spill_dir(&self) -> Option<std::path::PathBuf> {
        self.paths.values().next().and_then(|p| std::path::Path::new(p).parent()).map(|p| p.to_path_buf())
    }

    /// The table's writer, when the importer asked for it.
    pub fn table(&self, name: &'static str, b: Vec<Buf>) -> std::io::Result<Option<Table>> {
        let Some(path) = self.paths.get(name) else { return Ok(None) };
        let enc = self.enc.get(name).cloned().unwrap_or_else(|| vec![(false, false); b.len()]);
        Table::new(name, b, enc, path, self.group_rows).map(Some)
    }

    pub fn row(&self, t: &mut Table) -> std::io::Result<()> {
        t.row(&self.dicts, self.declared)
    }

    pub fn finish(&self, t: Option<Table>) -> std::io::Result<Option<(&'static str, usize)>> {
        t.map(|t| {
            let name = t.name;
            t.finish(&self.dicts, self.declared).map(|n| (name, n))
        })
        .transpose()
    }
}

pub fn i64s(n: usize) -> Vec<Buf> {
    (0..n).map(|_| Buf::I64(Vec::new())).collect()
}

/// Pushes onto an I64 column.
#[inline(always)]
pub fn put(b: &mut Buf, v: i64) {
    match b {
        Buf::I64(x) => x.push(v),
        Buf::U64(x) => x.push(v as u64),
        Buf::Dict(x, _) => x.push(v as u32),
        Buf::Bool(x) => x.push(v != 0),
        Buf::Opt(x, ok) => {
            x.push(v);
            ok.push(true)
        }
    }
}

/// Pushes a possibly missing value onto a nullable column.
#[inline(always)]
pub fn put_opt(b: &mut Buf, v: Option<i64>) {
    if let Buf::Opt(x, ok) = b {
        x.push(v.unwrap_or(0));
        ok.push(v.is_some());
    }
}
