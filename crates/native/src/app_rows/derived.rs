//! The derived tables gathered while splitting (counters, timers, pauses, adapt; regions and
//! functions in nesting.rs, sync in sync.rs): their rows, not the records they come from; those
//! streamed (Streams) are written a page at a time as their rows are complete.

use super::columns::{bytes_of, i64_col, name_col, name_validity, named, plain_col, reason_col, who, Dicts, Reasons, Sink};
use super::compensation::Comp;
use super::flags::{decide, Flags, PassErr, N_ADAPT, N_COUNTERS, N_FUNCTIONS, N_PAUSES, N_REGIONS, N_TIMERS};
use super::nesting::Nested;
use super::sync::{SyncPart, ACQUIRED, BARRIER, COND};
use crate::parquet::{self, Column};
use oslens_format::kinds;
use std::collections::HashMap;

/// counters: one row per COUNTER record
#[derive(Default)]
pub struct Counters {
    pub ts: Vec<i64>,
    pub g: Vec<i32>,
    pub name: Vec<i32>,
    pub value: Vec<i64>,
    pub reason: Vec<u64>,
    /// compensated ts (empty: no compensation)
    pub comp: Vec<i64>,
}

/// timers: one row per stop
#[derive(Default)]
pub struct Timers {
    pub g: Vec<i32>,
    pub name: Vec<i32>,
    pub start: Vec<i64>,
    pub stop: Vec<i64>,
    pub elapsed: Vec<i64>,
    /// compensated start, stop and elapsed
    pub comp: [Vec<i64>; 3],
    /// rows whose compensated start waits for a later record of their thread (Waiting)
    pub waiting: Vec<Waiting>,
    /// the earliest start among `waiting` (i64::MAX: none)
    pub next_start: i64,
    /// rows written while waiting, and their final compensated start and elapsed (table row,
    /// start, elapsed), patched when the table is moved into place (app_tables.WrittenTable)
    pub patches: Vec<(usize, i64, i64)>,
    /// the most rows held at once where timers is streamed
    pub peak: usize,
}

/// A timer row whose start lies after every record of its thread before its stop: its
/// compensated start is the cost before the first later record that reaches it (or the whole
/// thread's), known when that record goes by (docs/trace-schema.md, "Import memory").
#[derive(Clone, Copy)]
pub struct Waiting {
    /// its row in the table (rows written so far and its place among those held)
    pub row: usize,
    pub start: i64,
}

impl Timers {
    /// The row just pushed, the table's row `row`, waits for its compensated start.
    pub fn wait(&mut self, row: usize, start: i64) {
        self.waiting.push(Waiting { row, start });
        self.next_start = self.next_start.min(start);
    }

    /// The rows waiting for a start at or before `reach` (the thread's latest running maximum;
    /// all of them with i64::MAX) given their compensated start `comp(start)`: in place where
    /// still held (the table's rows before `written` have left), else as a patch.
    pub fn resolve(&mut self, reach: i64, written: usize, comp: impl Fn(i64) -> i64) {
        let mut next = i64::MAX;
        let mut i = 0;
        while i < self.waiting.len() {
            let w = self.waiting[i];
            if w.start > reach {
                next = next.min(w.start);
                i += 1;
                continue;
            }
            self.waiting.swap_remove(i);
            let s = comp(w.start);
            if w.row >= written {
                let r = w.row - written;
                self.comp[0][r] = s;
                self.comp[2][r] = self.comp[1][r].wrapping_sub(s);
            } else {
                // its slot, made when it was written (leaving): patches are in row order
                let k = self.patches.partition_point(|p| p.0 < w.row);
                let stop = self.patches[k].2;
                self.patches[k] = (w.row, s, stop.wrapping_sub(s));
            }
        }
        self.next_start = next;
    }

    /// How many of the rows held (the first of them the table's row `written`) may be written
    /// now: those before the first still waiting, or all of them where they fill two pages of
    /// `cap` rows (the waiting ones then patched later, so a start that no later record reaches
    /// does not hold the thread's rows to its end).
    pub fn writable(&self, written: usize, cap: usize) -> usize {
        let len = self.g.len();
        if len >= 2 * cap {
            return len;
        }
        self.waiting.iter().filter(|w| w.row >= written).map(|w| w.row - written).min().unwrap_or(len)
    }

    /// Rows ..n held (the first the table's row `written`) are about to be written: those
    /// waiting keep their compensated stop in a patch slot (start i64::MIN until resolved).
    pub fn leaving(&mut self, written: usize, n: usize) {
        let from = self.patches.len();
        for w in self.waiting.iter().filter(|w| w.row >= written && w.row - written < n) {
            let r = w.row - written;
            self.patches.push((w.row, i64::MIN, self.comp[1][r]));
        }
        // after every earlier slot (rows written before), in row order among themselves
        self.patches[from..].sort_unstable_by_key(|p| p.0);
    }
}

/// pauses: one row per PAUSE record (the recorder's own stalls)
#[derive(Default)]
pub struct Pauses {
    pub g: Vec<i32>,
    pub start: Vec<i64>,
    pub end: Vec<i64>,
    pub duration: Vec<i64>,
    pub reason: Vec<u64>,
}

/// adapt: one row per ADAPT record
#[derive(Default)]
pub struct Adapt {
    pub ts: Vec<i64>,
    pub g: Vec<i32>,
    pub name: Vec<i32>,
    pub error: Vec<i64>,
    pub policy: Vec<i64>,
}

/// Everything the pass found besides app_events.
#[derive(Default)]
pub struct Derived {
    pub counts: Vec<u64>,
    pub rows: usize,
    pub extent_min: Vec<i64>,
    pub extent_max: Vec<i64>,
    pub counters: Counters,
    pub timers: Timers,
    pub pauses: Pauses,
    pub adapt: Adapt,
    pub regions: Nested,
    pub functions: Nested,
    /// sync parts: mutex acquisitions, mutex requests never acquired, barrier waits, cond waits
    /// (sync::ACQUIRED..)
    pub sync: [SyncPart; 4],
    /// rows of sync written by the pass (its parts are then empty)
    pub sync_rows: usize,
    /// the most sync rows held at once where sync is streamed
    pub sync_peak: usize,
    /// the most regions rows held at once where regions is streamed
    pub regions_peak: usize,
    /// the most functions rows held at once where functions is streamed
    pub functions_peak: usize,
    pub comp: Option<Comp>,
}

/// The derived tables written while the pass runs (None: their rows are returned), and what
/// they need.
#[derive(Default)]
pub struct Streams {
    /// Names of sync objects the program did not name, by address (symbols of static objects:
    /// oslens.store.symbols.name_objects); the others are named by their address in hex.
    pub object_names: HashMap<u64, String>,
    pub regions: Option<Sink>,
    pub functions: Option<Sink>,
    pub counters: Option<Sink>,
    pub timers: Option<Sink>,
    pub pauses: Option<Sink>,
    pub adapt: Option<Sink>,
    pub sync: Option<Sink>,
    pub counter_reasons: Reasons,
    pub pause_reasons: Reasons,
    /// per thread: the latest closing calibration time of its chunks, and the program's exit
    /// where its chunk was never closed (i64::MIN: none), for its thread end
    pub thread_end: Vec<(i64, i64)>,
    /// per record kind: what one record costs (ns, in vitro), for the compensated times
    /// (oslens.calibrate.compensate); a pause costs its value instead. None: no compensation.
    pub costs: Option<Vec<f64>>,
}

impl Streams {
    /// The sink of a streamed derived table (N_REGIONS, ...).
    pub fn sink(&mut self, table: usize) -> &mut Option<Sink> {
        match table {
            N_REGIONS => &mut self.regions,
            N_FUNCTIONS => &mut self.functions,
            N_COUNTERS => &mut self.counters,
            N_TIMERS => &mut self.timers,
            N_ADAPT => &mut self.adapt,
            _ => &mut self.pauses,
        }
    }

    /// The sink of a streamed derived table, to read.
    fn sink_of(&self, table: usize) -> &Option<Sink> {
        match table {
            N_REGIONS => &self.regions,
            N_FUNCTIONS => &self.functions,
            N_COUNTERS => &self.counters,
            N_TIMERS => &self.timers,
            N_ADAPT => &self.adapt,
            _ => &self.pauses,
        }
    }

    /// Rows of a streamed table written so far.
    pub fn written(&self, table: usize) -> usize {
        self.sink_of(table).as_ref().map_or(0, |s| s.written)
    }

    /// Rows the next page of a streamed table holds (None: not streamed).
    pub fn cap(&self, table: usize) -> Option<usize> {
        self.sink_of(table).as_ref().map(|s| s.cap())
    }
}

impl Derived {
    /// Every column at its size (the records' kinds counted first), so each is allocated once:
    /// growing them copies into fresh memory (a page fault per 4 KiB: docs/trace-schema.md).
    pub fn reserve(&mut self, comp: bool) {
        let n = |k: u8| self.counts[k as usize] as usize;
        let (c, t, p, a) = (n(kinds::COUNTER), n(kinds::TIMER_STOP), n(kinds::PAUSE), n(kinds::ADAPT));
        let (cs, ts, ps, ad) = (&mut self.counters, &mut self.timers, &mut self.pauses, &mut self.adapt);
        [&mut cs.ts, &mut cs.value].into_iter().for_each(|v| v.reserve_exact(c));
        [&mut cs.g, &mut cs.name].into_iter().for_each(|v| v.reserve_exact(c));
        cs.reason.reserve_exact(c);
        [&mut ts.start, &mut ts.stop, &mut ts.elapsed].into_iter().for_each(|v| v.reserve_exact(t));
        [&mut ts.g, &mut ts.name].into_iter().for_each(|v| v.reserve_exact(t));
        ts.next_start = i64::MAX;
        [&mut ps.start, &mut ps.end, &mut ps.duration].into_iter().for_each(|v| v.reserve_exact(p));
        ps.g.reserve_exact(p);
        ps.reason.reserve_exact(p);
        [&mut ad.ts, &mut ad.error, &mut ad.policy].into_iter().for_each(|v| v.reserve_exact(a));
        [&mut ad.g, &mut ad.name].into_iter().for_each(|v| v.reserve_exact(a));
        self.regions.reserve(n(kinds::REGION_BEGIN), false);
        self.functions.reserve(n(kinds::FUNC_ENTRY), true);
        // mutex acquisitions, requests never acquired (usually few: grown as needed), barrier
        // and condition waits
        let parts = [(ACQUIRED, kinds::LOCK_ACQUIRE), (BARRIER, kinds::BARRIER_ENTER), (COND, kinds::COND_WAIT_ENTER)];
        for (part, k) in parts {
            self.sync[part].reserve(n(k));
        }
        if comp {
            self.counters.comp.reserve_exact(c);
            self.timers.comp.iter_mut().for_each(|v| v.reserve_exact(t));
            self.regions.comp.iter_mut().for_each(|v| v.reserve_exact(n(kinds::REGION_BEGIN)));
            self.functions.comp.iter_mut().for_each(|v| v.reserve_exact(n(kinds::FUNC_ENTRY)));
            for (part, k) in parts {
                self.sync[part].comp.iter_mut().for_each(|v| v.reserve_exact(n(k)));
            }
        }
    }

    /// Rows held of a streamed table.
    pub fn len(&self, table: usize) -> usize {
        match table {
            N_REGIONS => self.regions.g.len(),
            N_FUNCTIONS => self.functions.g.len(),
            N_COUNTERS => self.counters.ts.len(),
            N_TIMERS => self.timers.g.len(),
            N_ADAPT => self.adapt.g.len(),
            _ => self.pauses.g.len(),
        }
    }

    /// Takes away the first n rows of a table (written), keeping the rest in order.
    pub fn drain_front(&mut self, table: usize, n: usize) {
        fn drain<T>(v: &mut Vec<T>, n: usize) {
            v.drain(..n.min(v.len()));
        }
        match table {
            N_REGIONS => self.regions.drain_front(n),
            N_FUNCTIONS => self.functions.drain_front(n),
            N_COUNTERS => {
                let c = &mut self.counters;
                [&mut c.ts, &mut c.value, &mut c.comp].into_iter().for_each(|v| drain(v, n));
                [&mut c.g, &mut c.name].into_iter().for_each(|v| drain(v, n));
                drain(&mut c.reason, n);
            }
            N_TIMERS => {
                let t = &mut self.timers;
                [&mut t.start, &mut t.stop, &mut t.elapsed].into_iter().chain(&mut t.comp).for_each(|v| drain(v, n));
                [&mut t.g, &mut t.name].into_iter().for_each(|v| drain(v, n));
            }
            N_ADAPT => {
                let a = &mut self.adapt;
                [&mut a.ts, &mut a.error, &mut a.policy].into_iter().for_each(|v| drain(v, n));
                [&mut a.g, &mut a.name].into_iter().for_each(|v| drain(v, n));
            }
            _ => {
                let p = &mut self.pauses;
                [&mut p.start, &mut p.end, &mut p.duration].into_iter().for_each(|v| drain(v, n));
                drain(&mut p.g, n);
                drain(&mut p.reason, n);
            }
        }
    }

    /// The name column of a table's rows lo..hi (empty: the table has none).
    fn names(&self, table: usize, lo: usize, hi: usize) -> &[i32] {
        match table {
            N_REGIONS => &self.regions.name[lo..hi],
            N_COUNTERS => &self.counters.name[lo..hi],
            N_TIMERS => &self.timers.name[lo..hi],
            N_ADAPT => &self.adapt.name[lo..hi],
            _ => &[],
        }
    }
}

/// Page scratch: validity and boolean bitmaps, 32-bit ids, functions' pid and tid values and
/// their names' (all null) offsets.
#[derive(Default)]
pub struct PageScratch {
    valid: Vec<u8>,
    bits: Vec<u8>,
    ids: Vec<u32>,
    pids: Vec<i64>,
    tids: Vec<i64>,
    offsets: Vec<u32>,
}

/// compensation's columns, after the table's own (oslens.store.compensation): a begin, an end
/// (delta-encoded, as the times they compensate are) and a duration
fn comp_cols(v: &[Vec<i64>; 3], lo: usize, hi: usize) -> Vec<Column<'_>> {
    v.iter().zip([true, true, false]).map(|(c, delta)| i64_col(&c[lo..hi], delta, true)).collect()
}

/// regions' columns over rows lo..hi (`sc.valid`: the names' validity, filled)
fn region_columns<'a>(n: &'a Nested, lo: usize, hi: usize, dicts: &'a Dicts, validity: Option<&'a [u8]>, sc: &'a mut PageScratch, comp: bool) -> Vec<Column<'a>> {
    sc.bits.clear();
    sc.bits.resize((hi - lo).div_ceil(8), 0);
    for (i, &c) in n.complete[lo..hi].iter().enumerate() {
        sc.bits[i >> 3] |= (c & 1) << (i & 7);
    }
    sc.ids.clear();
    sc.ids.extend(n.key[lo..hi].iter().map(|&k| k as u32));
    let [pid, tid] = who(&n.g[lo..hi], dicts);
    let mut cols = vec![
        pid,
        tid,
        name_col(&n.name[lo..hi], dicts, validity),
        i64_col(&n.begin[lo..hi], true, true),
        i64_col(&n.end[lo..hi], false, true),
        i64_col(&n.duration[lo..hi], false, true),
        i64_col(&n.depth[lo..hi], false, false),
        plain_col(parquet::BOOLEAN, None, &sc.bits, 0),
        plain_col(parquet::INT32, Some(parquet::UINT_32), bytes_of(&sc.ids), 4),
    ];
    if comp {
        cols.extend(comp_cols(&n.comp, lo, hi));
    }
    cols
}

/// The i64 value of entry g of a PLAIN-encoded INT64 dictionary (app_tables' pid and tid).
fn plain_i64(plain: &[u8], g: i32) -> i64 {
    let j = g as usize * 8;
    i64::from_le_bytes(plain[j..j + 8].try_into().unwrap())
}

/// functions' columns over rows lo..hi, as app_tables' in-memory build makes them: pid and tid
/// plain (not dictionary-encoded), the key (address) and `b` (call site) unsigned, and a name
/// column all null (`sc.valid`: zeroed), filled at import by oslens.store.symbols.
fn function_columns<'a>(n: &'a Nested, lo: usize, hi: usize, dicts: &Dicts, sc: &'a mut PageScratch, comp: bool) -> Vec<Column<'a>> {
    sc.bits.clear();
    sc.bits.resize((hi - lo).div_ceil(8), 0);
    for (i, &c) in n.complete[lo..hi].iter().enumerate() {
        sc.bits[i >> 3] |= (c & 1) << (i & 7);
    }
    sc.pids.clear();
    sc.pids.extend(n.g[lo..hi].iter().map(|&g| plain_i64(dicts.pid.1, g)));
    sc.tids.clear();
    sc.tids.extend(n.g[lo..hi].iter().map(|&g| plain_i64(dicts.tid.1, g)));
    sc.offsets.clear();
    sc.offsets.resize(hi - lo + 1, 0);
    let unsigned = |v: &'a [u64]| plain_col(parquet::INT64, Some(parquet::UINT_64), bytes_of(v), 8);
    let mut cols = vec![
        i64_col(&sc.pids, false, true),
        i64_col(&sc.tids, false, true),
        unsigned(&n.key[lo..hi]),
        unsigned(&n.b[lo..hi]),
        Column { validity: Some(&sc.valid), data: Some(&[]), ..plain_col(parquet::BYTE_ARRAY, Some(parquet::UTF8), bytes_of(&sc.offsets), 4) },
        i64_col(&n.begin[lo..hi], true, true),
        i64_col(&n.end[lo..hi], false, true),
        i64_col(&n.duration[lo..hi], false, true),
        i64_col(&n.depth[lo..hi], false, false),
        plain_col(parquet::BOOLEAN, None, &sc.bits, 0),
    ];
    if comp {
        cols.extend(comp_cols(&n.comp, lo, hi));
    }
    cols
}

/// The columns of a derived table other than regions and functions over rows lo..hi.
#[allow(clippy::too_many_arguments)]
fn table_columns<'a>(table: usize, d: &'a Derived, lo: usize, hi: usize, dicts: &'a Dicts, validity: Option<&'a [u8]>, st: &'a Streams, comp: bool) -> Vec<Column<'a>> {
    let names = d.names(table, lo, hi);
    match table {
        N_COUNTERS => {
            let c = &d.counters;
            let [pid, tid] = who(&c.g[lo..hi], dicts);
            let mut cols = vec![
                i64_col(&c.ts[lo..hi], true, true),
                pid,
                tid,
                name_col(names, dicts, validity),
                i64_col(&c.value[lo..hi], false, false),
                reason_col(&c.reason[lo..hi], &st.counter_reasons),
            ];
            if comp {
                cols.push(i64_col(&c.comp[lo..hi], true, true));
            }
            cols
        }
        N_TIMERS => {
            let t = &d.timers;
            let [pid, tid] = who(&t.g[lo..hi], dicts);
            let mut cols = vec![
                pid,
                tid,
                name_col(names, dicts, validity),
                i64_col(&t.start[lo..hi], true, true),
                i64_col(&t.stop[lo..hi], false, true),
                i64_col(&t.elapsed[lo..hi], false, true),
            ];
            if comp {
                cols.extend(comp_cols(&t.comp, lo, hi));
            }
            cols
        }
        N_ADAPT => {
            let a = &d.adapt;
            let [pid, tid] = who(&a.g[lo..hi], dicts);
            vec![
                i64_col(&a.ts[lo..hi], true, true),
                pid,
                tid,
                name_col(names, dicts, validity),
                i64_col(&a.error[lo..hi], false, false),
                i64_col(&a.policy[lo..hi], false, false),
            ]
        }
        _ => {
            let p = &d.pauses;
            let [pid, tid] = who(&p.g[lo..hi], dicts);
            vec![
                pid,
                tid,
                i64_col(&p.start[lo..hi], true, true),
                i64_col(&p.end[lo..hi], false, true),
                i64_col(&p.duration[lo..hi], false, true),
                reason_col(&p.reason[lo..hi], &st.pause_reasons),
            ]
        }
    }
}

/// Writes the rows lo..hi of a streamed table as one page; with `footer` (lo == hi) writes its
/// footer, the columns' schema, instead.
#[allow(clippy::too_many_arguments)]
pub fn page(table: usize, d: &Derived, lo: usize, hi: usize, dicts: &Dicts, st: &mut Streams, flags: &mut Flags, sc: &mut PageScratch, footer: bool) -> Result<(), PassErr> {
    if table == N_FUNCTIONS {
        return function_page(d, lo, hi, dicts, st, sc, footer);
    }
    let nulls = name_validity(d.names(table, lo, hi), &mut sc.valid);
    let nullable = if table == N_PAUSES {
        false
    } else if footer {
        flags[table] == Some(true)
    } else {
        decide(flags, table, nulls)?
    };
    let comp = st.costs.is_some();
    let mut sink = st.sink(table).take();
    let valid = std::mem::take(&mut sc.valid);
    let validity = nullable.then_some(&valid[..]);
    let cols = if table == N_REGIONS {
        region_columns(&d.regions, lo, hi, dicts, validity, sc, comp)
    } else {
        table_columns(table, d, lo, hi, dicts, validity, st, comp)
    };
    let done = emit(&mut sink, table_name(table), cols, hi - lo, footer, dicts);
    sc.valid = valid;
    *st.sink(table) = sink;
    Ok(done?)
}

/// The name oslens.store.schema declares a streamed derived table by.
fn table_name(table: usize) -> &'static str {
    match table {
        N_REGIONS => "regions",
        N_FUNCTIONS => "functions",
        N_COUNTERS => "counters",
        N_TIMERS => "timers",
        N_ADAPT => "adapt",
        _ => "pauses",
    }
}

/// A page of `rows` rows of `cols` written to the sink, or with `footer` its footer (the columns
/// named as `table` is declared).
fn emit(sink: &mut Option<Sink>, table: &str, cols: Vec<Column>, rows: usize, footer: bool, dicts: &Dicts) -> std::io::Result<()> {
    if footer {
        return sink.take().map(|s| s.w.finish(&named(table, cols, dicts)?)).transpose().map(|_| ());
    }
    match sink.as_mut() {
        Some(s) if rows > 0 => s.page(&cols, rows),
        _ => Ok(()),
    }
}

/// page() of functions: its name column is always nullable (all null).
fn function_page(d: &Derived, lo: usize, hi: usize, dicts: &Dicts, st: &mut Streams, sc: &mut PageScratch, footer: bool) -> Result<(), PassErr> {
    let comp = st.costs.is_some();
    let mut sink = st.functions.take();
    let mut valid = std::mem::take(&mut sc.valid);
    valid.clear();
    valid.resize((hi - lo).div_ceil(8), 0);
    sc.valid = valid;
    let cols = function_columns(&d.functions, lo, hi, dicts, sc, comp);
    let done = emit(&mut sink, "functions", cols, hi - lo, footer, dicts);
    st.functions = sink;
    Ok(done?)
}

/// Streamed rows ..upto of a derived table written a page at a time while a whole page is there
/// (all of them with `last`); returns the rows written.
#[allow(clippy::too_many_arguments)]
pub fn drain_pages(table: usize, d: &Derived, upto: usize, last: bool, dicts: &Dicts, st: &mut Streams, flags: &mut Flags, sc: &mut PageScratch) -> Result<usize, PassErr> {
    let len = upto;
    let mut lo = 0;
    while let Some(c) = st.cap(table) {
        let n = c.min(len - lo);
        if n == 0 || (n < c && !last) {
            break;
        }
        page(table, d, lo, lo + n, dicts, st, flags, sc, false)?;
        lo += n;
    }
    Ok(lo)
}

/// A streamed table's rows written a page at a time while a whole page is there (all of them
/// with `last`), and taken away.
pub fn write_pages(table: usize, d: &mut Derived, last: bool, dicts: &Dicts, st: &mut Streams, flags: &mut Flags, sc: &mut PageScratch) -> Result<(), PassErr> {
    let done = drain_pages(table, d, d.len(table), last, dicts, st, flags, sc)?;
    d.drain_front(table, done);
    Ok(())
}
