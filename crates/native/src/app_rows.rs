//! The application tables in one pass over the recorder's records (oslens.store.app_tables
//! builds the same tables with numpy when this is not used; the results are the same).
//!
//! app_events, one row per record, is written to Parquet row group by row group from column
//! buffers that are refilled for the next group, never laid out whole in memory: on the VM
//! this was measured on, every fresh 4 KiB page costs a page fault of 1-2 us on first touch,
//! and the whole table's columns were 150 k of them. The derived tables (regions, functions,
//! counters, timers, pauses, adapt, sync) are gathered while splitting: their rows, not the
//! records they come from, paired per thread as oslens.store.pairing pairs them; those streamed
//! (Streams) are written a page at a time as their rows are complete.

use crate::parquet::{self, Column, Dictionary};
use crate::NameMap;
use oslens_format::kinds;
use std::collections::HashMap;

/// One chunk's records, in the order the threads' records are laid end to end.
pub struct Chunk<'a> {
    pub records: Source<'a>,
    pub g: usize,
    pub tsc: bool,
    pub names: &'a NameMap,
    pub has_names: bool,
    /// Event payloads longer than 8 bytes, by record index in the chunk.
    pub payloads: &'a HashMap<usize, Vec<u8>>,
    /// The chunk's records per kind and their largest CPU number where known (scan_records),
    /// else counted here.
    pub counts: Option<(&'a [u64], u16)>,
    /// The (name key, address) pairs of its sync records that begin a row (Scan::sync, laid
    /// flat) where known: with every chunk's, sync's object dictionary is known before the pass.
    pub sync_keys: Option<&'a [u64]>,
}

/// Where a chunk's records come from: held in memory for the whole pass, or read again when the
/// pass reaches the chunk and let go after it, so the import holds a bounded share of the
/// records at once (oslens.store.importer.HELD_BYTES; docs/trace-schema.md, "Import memory").
pub enum Source<'a> {
    Held(&'a [u8]),
    /// The chunk's byte length and what reads its records again.
    Reload(usize, &'a dyn Reload),
}

/// Reads a chunk's records again (the importer's reader, through Python).
pub trait Reload: Sync {
    fn reload(&self) -> std::io::Result<Box<dyn std::ops::Deref<Target = [u8]> + '_>>;
}

/// A chunk's records while the pass reads them.
pub enum Records<'a> {
    Held(&'a [u8]),
    Loaded(Box<dyn std::ops::Deref<Target = [u8]> + 'a>, usize),
}

impl std::ops::Deref for Records<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match self {
            Records::Held(r) => r,
            Records::Loaded(b, n) => &b[..*n],
        }
    }
}

impl<'a> Chunk<'a> {
    /// The chunk's length in bytes (whole records).
    pub fn len(&self) -> usize {
        match self.records {
            Source::Held(r) => r.len(),
            Source::Reload(n, _) => n,
        }
    }

    /// The chunk's records; read again where they were let go. The records read again are
    /// those first read (a chunk only grows past its committed count while a recorder still
    /// writes it): fewer is an error.
    pub fn records(&self) -> std::io::Result<Records<'a>> {
        match self.records {
            Source::Held(r) => Ok(Records::Held(r)),
            Source::Reload(n, from) => {
                let got = from.reload()?;
                if got.len() < n {
                    return Err(std::io::Error::new(
                        std::io::ErrorKind::InvalidData,
                        format!("a chunk had {} bytes of records when read again, {n} when first read", got.len()),
                    ));
                }
                Ok(Records::Loaded(got, n))
            }
        }
    }
}

/// Records per kind of 32-byte records (added to `counts`), and their largest CPU number.
pub fn count_kinds(records: &[u8], counts: &mut [u64]) -> u16 {
    let mut cpu = 0u16;
    for r in records.chunks_exact(32) {
        counts[r[14] as usize] += 1;
        cpu = cpu.max(u16::from_le_bytes([r[12], r[13]]));
    }
    cpu
}

/// What one pass over a chunk's records finds (lib.rs scan_records).
pub struct Scan {
    pub counts: Vec<u64>,
    pub pairs: Vec<(u64, u64)>,
    pub cpu_max: u16,
    /// the distinct `b` words of COUNTER and of PAUSE records
    pub reasons: [Distinct; 2],
    /// the distinct (name key, address) of the sync records a sync row comes from
    pub sync: SyncKeys,
}

/// The key a record's name is looked up by (NameMap): its kind and id.
const NAME_KEY: u64 = 0x00FF_0000_FFFF_FFFF;

/// The distinct (name key, address) pairs of the sync records a row of sync comes from (lock
/// requests and acquisitions, barrier and condition wait entries): few objects, each in long
/// runs (past SyncKeys::MOST it only notes that there are more). The last pair of each kind is
/// kept (a request and its acquisition differ in their keys' kind), the set hashed with Fx.
#[derive(Default)]
pub struct SyncKeys {
    seen: std::collections::HashSet<(u64, u64), oslens_format::hash::FxBuild>,
    last: [(u64, u64); 4],
    many: bool,
}

impl SyncKeys {
    const MOST: usize = 1 << 20;

    #[inline(always)]
    fn add(&mut self, kind: u8, key: u64, addr: u64) {
        // LOCK_REQUEST, LOCK_ACQUIRE, BARRIER_ENTER, COND_WAIT_ENTER: 32, 33, 35, 37 -> 0..4
        let slot = ((kind - kinds::LOCK_REQUEST) as usize).div_ceil(2) & 3;
        // the key holds the kind (never 0): a zeroed slot never matches
        if self.last[slot] == (key, addr) || self.many {
            return;
        }
        self.last[slot] = (key, addr);
        if self.seen.len() == Self::MOST {
            self.many = !self.seen.contains(&(key, addr));
            return;
        }
        self.seen.insert((key, addr));
    }

    /// The pairs sorted and laid flat (key, address, key, ...), None where there were too many.
    pub fn take_if_few(&mut self) -> Option<Vec<u64>> {
        if self.many {
            return None;
        }
        let mut v: Vec<(u64, u64)> = std::mem::take(&mut self.seen).into_iter().collect();
        v.sort_unstable();
        Some(v.into_iter().flat_map(|(k, a)| [k, a]).collect())
    }
}

/// The kinds Scan::special looks at: clock pairs, counters and pauses (their reasons), and the
/// sync records a row comes from.
const SPECIAL: [bool; 256] = {
    let mut t = [false; 256];
    let ks = [
        kinds::CLOCK_PAIR,
        kinds::COUNTER,
        kinds::PAUSE,
        kinds::LOCK_REQUEST,
        kinds::LOCK_ACQUIRE,
        kinds::BARRIER_ENTER,
        kinds::COND_WAIT_ENTER,
    ];
    let mut i = 0;
    while i < ks.len() {
        t[ks[i] as usize] = true;
        i += 1;
    }
    t
};

/// A small sorted set of distinct values (at most 256; past that it only notes so).
#[derive(Default)]
pub struct Distinct {
    values: Vec<u64>,
    last: Option<u64>,
    many: bool,
}

impl Distinct {
    #[inline(always)]
    fn add(&mut self, v: u64) {
        if self.last == Some(v) || self.many {
            return;
        }
        self.last = Some(v);
        if let Err(at) = self.values.binary_search(&v) {
            if self.values.len() == 256 {
                self.many = true;
            } else {
                self.values.insert(at, v);
            }
        }
    }

    pub fn take_if_few(&mut self) -> Option<Vec<u64>> {
        (!self.many).then(|| std::mem::take(&mut self.values))
    }
}

/// Counts the kinds of 32-byte records, their largest CPU number, the CLOCK_PAIR records'
/// (ts, a) and the reasons of COUNTER and PAUSE records, in one pass.
pub fn scan(records: &[u8]) -> Scan {
    let mut sc = Scan { counts: vec![0; 256], pairs: Vec::new(), cpu_max: 0, reasons: Default::default(), sync: Default::default() };
    let special = |k: u8| SPECIAL[k as usize];
    // blocks of 2^30 records, so that their u32 counts cannot wrap
    for block in records.chunks(32 << 30) {
        // four histograms, so that records of one kind in a row do not wait on each other's
        // count (measured: 4.8 ns a record instead of 8.1)
        let mut hist = [[0u32; 256]; 4];
        let mut cpu = [0u16; 4];
        let mut quads = block.chunks_exact(128);
        for q in &mut quads {
            for j in 0..4 {
                let r = &q[j * 32..j * 32 + 32];
                hist[j][r[14] as usize] += 1;
                cpu[j] = cpu[j].max(u16::from_le_bytes([r[12], r[13]]));
            }
            if special(q[14]) || special(q[46]) || special(q[78]) || special(q[110]) {
                for r in q.chunks_exact(32) {
                    sc.special(r);
                }
            }
        }
        for r in quads.remainder().chunks_exact(32) {
            hist[0][r[14] as usize] += 1;
            cpu[0] = cpu[0].max(u16::from_le_bytes([r[12], r[13]]));
            sc.special(r);
        }
        for h in &hist {
            for (c, &n) in sc.counts.iter_mut().zip(h) {
                *c += n as u64;
            }
        }
        sc.cpu_max = cpu.into_iter().fold(sc.cpu_max, u16::max);
    }
    sc
}

impl Scan {
    #[inline(always)]
    fn special(&mut self, r: &[u8]) {
        match r[14] {
            kinds::CLOCK_PAIR => self.pairs.push((word(r, 0), word(r, 16))),
            kinds::COUNTER => self.reasons[0].add(word(r, 24)),
            kinds::PAUSE => self.reasons[1].add(word(r, 24)),
            kinds::LOCK_REQUEST | kinds::LOCK_ACQUIRE | kinds::BARRIER_ENTER | kinds::COND_WAIT_ENTER => {
                self.sync.add(r[14], word(r, 8) & NAME_KEY, word(r, 16))
            }
            _ => {}
        }
    }
}

/// x rounded to the nearest integer, ties to even, as f64::round_ties_even (numpy's rint) for
/// every x, without the libm call that function compiles to before SSE4.1: adding and taking
/// away 2^52 rounds in the FPU's default mode (nearest, ties to even) where |x| < 2^52, and any
/// larger (or non-finite) x is already an integer (or stays what it is).
#[inline(always)]
pub fn rint(x: f64) -> f64 {
    const BIG: f64 = 4503599627370496.0; // 2^52
    let a = x.abs();
    if a < BIG {
        ((a + BIG) - BIG).copysign(x)
    } else {
        x
    }
}

/// (r0, n0, slope, intercept): raw TSC -> ns as app_tables.to_ns_into computes it.
#[derive(Clone, Copy)]
pub struct Clock {
    pub r0: i64,
    pub n0: i64,
    pub slope: f64,
    pub intercept: f64,
}

/// The dictionaries of app_events' dictionary columns, PLAIN-encoded.
pub struct Dicts<'a> {
    pub pid: (usize, &'a [u8]),
    pub tid: (usize, &'a [u8]),
    pub instrument: (usize, &'a [u8]),
    pub kind: (usize, &'a [u8]),
}

/// The rows of app_events of one row group: buffers of the group's size, written by index
/// and reused for every group.
#[derive(Default)]
struct Group {
    len: usize,
    cap: usize,
    ts: Vec<i64>,
    g: Vec<i32>,
    cpu: Vec<u16>,
    cpu_top: u16,
    name: Vec<i32>,
    name_valid: Vec<u8>,
    name_nulls: usize,
    kind: Vec<u8>,
    value: Vec<i64>,
    offsets: Vec<u64>,
    data: Vec<u8>,
    pay_valid: Vec<u8>,
    pay_nulls: usize,
    id: Vec<u32>,
    cpu_wide: Vec<i64>,
    /// compensated times (empty: no compensation)
    ts_comp: Vec<i64>,
}

impl Group {
    fn new(rows: usize) -> Group {
        let mut g = Group {
            ts: vec![0; rows],
            g: vec![0; rows],
            cpu: vec![0; rows],
            name: vec![0; rows],
            name_valid: vec![0; rows.div_ceil(64) * 8],
            kind: vec![0; rows],
            value: vec![0; rows],
            offsets: vec![0; rows + 1],
            data: Vec::with_capacity(rows),
            pay_valid: vec![0; rows.div_ceil(64) * 8],
            id: vec![0; rows],
            ..Default::default()
        };
        g.clear();
        g
    }

    /// Stores the validity bits of the word holding `row` (bits past the rows written are 0).
    #[inline(always)]
    fn store_bits(&mut self, row: usize, name: &mut u64, pay: &mut u64) {
        let at = (row >> 6) * 8;
        self.name_valid[at..at + 8].copy_from_slice(&name.to_le_bytes());
        self.pay_valid[at..at + 8].copy_from_slice(&pay.to_le_bytes());
        (*name, *pay) = (0, 0);
    }

    fn clear(&mut self) {
        self.len = 0;
        self.name_nulls = 0;
        self.pay_nulls = 0;
        self.data.clear();
    }

    fn len(&self) -> usize {
        self.len
    }

    fn full(&self) -> bool {
        self.len == self.cap
    }
}

fn bytes_of<T: Copy>(v: &[T]) -> &[u8] {
    // SAFETY: plain integers: any value is its bytes; the slice covers exactly the vector.
    unsafe { std::slice::from_raw_parts(v.as_ptr() as *const u8, std::mem::size_of_val(v)) }
}

/// One thread's begin/end event for pairing.
#[derive(Clone, Copy)]
struct PairEv {
    ts: i64,
    key: u64,
    name: i32,
    b: u64,
    begin: bool,
}

/// One thread's sync record (kinds LOCK_REQUEST..=COND_WAIT_EXIT).
#[derive(Clone, Copy)]
struct SyncEv {
    ts: i64,
    /// ts less the cost of the thread's records before it (0 without compensation)
    comp: i64,
    kind: u8,
    addr: u64,
    name: i32,
}

/// Rows of one part of the sync table.
#[derive(Default)]
pub struct SyncPart {
    pub g: Vec<i32>,
    pub name: Vec<i32>,
    pub addr: Vec<u64>,
    pub request: Vec<i64>,
    pub acquire: Vec<i64>,
    pub acquire_ok: Vec<u8>,
    pub release: Vec<i64>,
    pub release_ok: Vec<u8>,
    /// compensated request, acquire and release (filled as the records go by; rows paired
    /// again when the thread is done get theirs then)
    pub comp: [Vec<i64>; 3],
}

impl SyncPart {
    fn push_comp(&mut self, request: i64, acquire: i64, release: i64) {
        self.comp[0].push(request);
        self.comp[1].push(acquire);
        self.comp[2].push(release);
    }

    fn push(&mut self, g: i32, e: &SyncEv, request: i64, acquire: Option<i64>, release: Option<i64>) {
        self.g.push(g);
        self.name.push(e.name);
        self.addr.push(e.addr);
        self.request.push(request);
        self.acquire.push(acquire.unwrap_or(0));
        self.acquire_ok.push(acquire.is_some() as u8);
        self.release.push(release.unwrap_or(0));
        self.release_ok.push(release.is_some() as u8);
    }
}

/// Begin/end pairs of regions or functions.
#[derive(Default)]
pub struct Nested {
    pub g: Vec<i32>,
    pub name: Vec<i32>,
    pub key: Vec<u64>,
    pub b: Vec<u64>,
    pub begin: Vec<i64>,
    pub end: Vec<i64>,
    pub duration: Vec<i64>,
    pub depth: Vec<i64>,
    pub complete: Vec<u8>,
    pub unmatched: u64,
    /// compensated begin, end and duration (filled as the records go by; rows paired again or
    /// left open when the thread is done get theirs then)
    pub comp: [Vec<i64>; 3],
}

/// Everything the pass found besides app_events.
#[derive(Default)]
pub struct Derived {
    pub counts: Vec<u64>,
    pub rows: usize,
    pub extent_min: Vec<i64>,
    pub extent_max: Vec<i64>,
    // counters
    pub c_ts: Vec<i64>,
    pub c_g: Vec<i32>,
    pub c_name: Vec<i32>,
    pub c_value: Vec<i64>,
    pub c_reason: Vec<u64>,
    pub c_comp: Vec<i64>,
    // timers (one row per stop)
    pub t_g: Vec<i32>,
    pub t_name: Vec<i32>,
    pub t_start: Vec<i64>,
    pub t_stop: Vec<i64>,
    pub t_elapsed: Vec<i64>,
    /// compensated start, stop and elapsed
    pub t_comp: [Vec<i64>; 3],
    // pauses
    pub p_g: Vec<i32>,
    pub p_start: Vec<i64>,
    pub p_end: Vec<i64>,
    pub p_duration: Vec<i64>,
    pub p_reason: Vec<u64>,
    // adapt
    pub a_ts: Vec<i64>,
    pub a_g: Vec<i32>,
    pub a_name: Vec<i32>,
    pub a_error: Vec<i64>,
    pub a_policy: Vec<i64>,
    pub regions: Nested,
    pub functions: Nested,
    /// sync parts: mutex acquisitions, mutex requests never acquired, barrier waits, cond waits
    pub sync: [SyncPart; 4],
    /// rows of sync written by the pass (its parts are then empty)
    pub sync_rows: usize,
    /// a sync record of an object not named was seen (sync is then written when the pass is done,
    /// unless its dictionary was known from the scans)
    sync_unnamed: bool,
    /// the most sync rows held at once where sync is streamed
    pub sync_peak: usize,
    pub comp: Option<Comp>,
}

impl Derived {
    fn reserve(&mut self) {
        let n = |k: u8| self.counts[k as usize] as usize;
        let (c, t, p, a) = (n(kinds::COUNTER), n(kinds::TIMER_STOP), n(kinds::PAUSE), n(kinds::ADAPT));
        self.c_ts.reserve_exact(c);
        self.c_g.reserve_exact(c);
        self.c_name.reserve_exact(c);
        self.c_value.reserve_exact(c);
        self.c_reason.reserve_exact(c);
        self.t_g.reserve_exact(t);
        self.t_name.reserve_exact(t);
        self.t_start.reserve_exact(t);
        self.t_stop.reserve_exact(t);
        self.t_elapsed.reserve_exact(t);
        self.p_g.reserve_exact(p);
        self.p_start.reserve_exact(p);
        self.p_end.reserve_exact(p);
        self.p_duration.reserve_exact(p);
        self.p_reason.reserve_exact(p);
        self.a_ts.reserve_exact(a);
        self.a_g.reserve_exact(a);
        self.a_name.reserve_exact(a);
        self.a_error.reserve_exact(a);
        self.a_policy.reserve_exact(a);
        self.regions.reserve(n(kinds::REGION_BEGIN), false);
        self.functions.reserve(n(kinds::FUNC_ENTRY), true);
        // mutex acquisitions, requests never acquired (usually few: grown as needed), barrier
        // and condition waits
        for (part, k) in [(0, kinds::LOCK_ACQUIRE), (2, kinds::BARRIER_ENTER), (3, kinds::COND_WAIT_ENTER)] {
            self.sync[part].reserve(n(k));
        }
    }
}

impl Nested {
    fn reserve(&mut self, n: usize, b: bool) {
        self.g.reserve_exact(n);
        self.name.reserve_exact(n);
        self.key.reserve_exact(n);
        self.b.reserve_exact(if b { n } else { 0 });
        self.begin.reserve_exact(n);
        self.end.reserve_exact(n);
        self.duration.reserve_exact(n);
        self.depth.reserve_exact(n);
        self.complete.reserve_exact(n);
    }
}

impl SyncPart {
    fn reserve(&mut self, n: usize) {
        self.g.reserve_exact(n);
        self.name.reserve_exact(n);
        self.addr.reserve_exact(n);
        self.request.reserve_exact(n);
        self.acquire.reserve_exact(n);
        self.acquire_ok.reserve_exact(n);
        self.release.reserve_exact(n);
        self.release_ok.reserve_exact(n);
    }
}

/// Reused scratch space of the per-thread pairing.
#[derive(Default)]
struct PairScratch {
    m: Vec<i64>,
    used: Vec<bool>,
    stack: Vec<usize>,
    stacks: HashMap<u64, Vec<usize>>,
}

/// Pairs one thread's begin/end events (is_begin, key) as pairing.pair_kinds does: a stack over
/// all keys, redone with a stack per key where that pairs different keys or an end closes
/// nothing. Calls out(event index of the begin, event index of its end or -1, depth) for each
/// begin in order; returns the ends that closed nothing.
#[allow(clippy::needless_range_loop)]
fn pair_thread(ev: &[(bool, u64)], s: &mut PairScratch, mut out: impl FnMut(usize, i64, i64)) -> u64 {
    let len = ev.len();
    s.m.clear();
    s.m.resize(len, -1);
    s.used.clear();
    s.used.resize(len, false);
    s.stack.clear();
    let mut bad = false;
    for j in 0..len {
        if ev[j].0 {
            s.stack.push(j);
        } else if let Some(b) = s.stack.pop() {
            s.m[b] = j as i64;
            s.used[j] = true;
            bad |= ev[b].1 != ev[j].1;
        } else {
            bad = true;
        }
    }
    if bad {
        s.m.iter_mut().for_each(|x| *x = -1);
        s.used.iter_mut().for_each(|x| *x = false);
        s.stacks.clear();
        for j in 0..len {
            let st = s.stacks.entry(ev[j].1).or_default();
            if ev[j].0 {
                st.push(j);
            } else if let Some(b) = st.pop() {
                s.m[b] = j as i64;
                s.used[j] = true;
            }
        }
    }
    let (mut open, mut unmatched) = (0i64, 0u64);
    for j in 0..len {
        if ev[j].0 {
            out(j, s.m[j], open);
            open += 1;
        } else if s.used[j] {
            open -= 1;
        } else {
            unmatched += 1;
        }
    }
    unmatched
}

/// A thread's pairings as its records go by: where every end closes the innermost open begin
/// of its own key (the common case, and then what pairing.pair_kinds gives), a row is written
/// at its begin and completed at its end (its depth: the begins open then). A table where an
/// end closes nothing or another key is paired again when the thread's records are all seen
/// (Thread::redo, from its records read again); lock requests (pairing.lock_requests) are
/// sequential and always done here.
#[derive(Default)]
struct Live {
    g: i32,
    first_chunk: usize,
    /// regions, functions: open (row, key), whether to redo, the thread's first row
    nest: [Vec<(usize, u64)>; 2],
    nest_bad: [bool; 2],
    nest_base: [usize; 2],
    /// the thread's previous sync record
    last: Option<SyncEv>,
    /// mutex, barrier, condition wait: open (row, address), whether to redo, first rows
    sync: [Vec<(usize, u64)>; 3],
    sync_bad: [bool; 3],
    sync_base: [usize; 3],
    /// whether rows get compensated times as they are written
    comp: bool,
    /// timer rows whose compensated start waits for the thread's later records
    timers_pending: Vec<usize>,
}

impl Live {
    fn start(&mut self, g: i32, first_chunk: usize, d: &Derived) {
        self.g = g;
        self.first_chunk = first_chunk;
        self.nest.iter_mut().for_each(|s| s.clear());
        self.nest_bad = [false; 2];
        self.nest_base = [d.regions.g.len(), d.functions.g.len()];
        self.last = None;
        self.sync.iter_mut().for_each(|s| s.clear());
        self.sync_bad = [false; 3];
        self.sync_base = [0, 2, 3].map(|p| d.sync[p].g.len());
        self.comp = d.comp.is_some();
        self.timers_pending.clear();
    }

    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn begin(&mut self, t: usize, out: &mut Nested, (ts, comp): (i64, i64), key: u64, name: i32, b: u64, keep_b: bool) {
        if self.nest_bad[t] {
            return;
        }
        if self.comp {
            out.comp[0].push(comp);
            out.comp[1].push(comp);
            out.comp[2].push(0);
        }
        let row = out.g.len();
        out.g.push(self.g);
        out.name.push(name);
        out.key.push(key);
        if keep_b {
            out.b.push(b);
        }
        out.begin.push(ts);
        out.end.push(ts);
        out.duration.push(0);
        out.depth.push(self.nest[t].len() as i64);
        out.complete.push(0);
        self.nest[t].push((row, key));
    }

    #[inline(always)]
    fn end(&mut self, t: usize, out: &mut Nested, (ts, comp): (i64, i64), key: u64) {
        if self.nest_bad[t] {
            return;
        }
        match self.nest[t].pop() {
            Some((row, k)) if k == key => {
                out.end[row] = ts;
                out.duration[row] = ts.wrapping_sub(out.begin[row]);
                out.complete[row] = 1;
                if self.comp {
                    out.comp[1][row] = comp;
                    out.comp[2][row] = comp.wrapping_sub(out.comp[0][row]);
                }
            }
            _ => self.nest_bad[t] = true,
        }
    }

    #[inline(always)]
    fn sync_event(&mut self, d: &mut Derived, e: SyncEv) {
        let g = self.g;
        d.sync_unnamed |= e.name < 0;
        let req = self.last.filter(|p| p.kind == kinds::LOCK_REQUEST);
        if let Some(p) = req {
            if !(e.kind == kinds::LOCK_ACQUIRE && p.addr == e.addr) {
                d.sync[1].push(g, &p, p.ts, None, None);
                if self.comp {
                    d.sync[1].push_comp(p.comp, 0, 0);
                }
            }
        }
        let (request, request_comp) = match req {
            Some(p) if p.addr == e.addr => (p.ts, p.comp),
            _ => (e.ts, e.comp),
        };
        self.last = Some(e);
        let (t, begin) = match e.kind {
            kinds::LOCK_ACQUIRE => (0, true),
            kinds::LOCK_RELEASE => (0, false),
            kinds::BARRIER_ENTER => (1, true),
            kinds::BARRIER_EXIT => (1, false),
            kinds::COND_WAIT_ENTER => (2, true),
            kinds::COND_WAIT_EXIT => (2, false),
            _ => return,
        };
        if self.sync_bad[t] {
            return;
        }
        let out = &mut d.sync[SYNC_PAIRS[t].2];
        if begin {
            let row = out.g.len();
            if t == 0 {
                out.push(g, &e, request, Some(e.ts), None);
            } else {
                out.push(g, &e, e.ts, None, None);
            }
            if self.comp {
                match t {
                    0 => out.push_comp(request_comp, e.comp, 0),
                    _ => out.push_comp(e.comp, 0, 0),
                }
            }
            self.sync[t].push((row, e.addr));
            return;
        }
        match self.sync[t].pop() {
            Some((row, addr)) if addr == e.addr => {
                if t != 2 {
                    out.release[row] = e.ts;
                    out.release_ok[row] = 1;
                }
                if t != 0 {
                    out.acquire[row] = e.ts;
                    out.acquire_ok[row] = 1;
                }
                if self.comp {
                    if t != 2 {
                        out.comp[2][row] = e.comp;
                    }
                    if t != 0 {
                        out.comp[1][row] = e.comp;
                    }
                }
            }
            _ => self.sync_bad[t] = true,
        }
    }
}

/// A thread's begin/end and sync events, gathered again from its records for Thread::redo.
#[derive(Default)]
struct Thread {
    g: i32,
    regions: Vec<PairEv>,
    functions: Vec<PairEv>,
    sync: Vec<SyncEv>,
    keys: Vec<(bool, u64)>,
    sel: Vec<usize>,
    request: Vec<i64>,
    scratch: PairScratch,
}

impl Derived {
    fn clear_counters(&mut self) {
        self.c_ts.clear();
        self.c_g.clear();
        self.c_name.clear();
        self.c_value.clear();
        self.c_reason.clear();
        self.c_comp.clear();
    }

    /// Takes away the first n timers (written), keeping the rest in order.
    fn drain_timers(&mut self, n: usize) {
        self.t_g.drain(..n);
        self.t_name.drain(..n);
        self.t_start.drain(..n);
        self.t_stop.drain(..n);
        self.t_elapsed.drain(..n);
        self.t_comp.iter_mut().for_each(|c| {
            c.drain(..n);
        });
    }

    fn clear_timers(&mut self) {
        self.t_g.clear();
        self.t_name.clear();
        self.t_start.clear();
        self.t_stop.clear();
        self.t_elapsed.clear();
        self.t_comp.iter_mut().for_each(|c| c.clear());
    }

    fn clear_pauses(&mut self) {
        self.p_g.clear();
        self.p_start.clear();
        self.p_end.clear();
        self.p_duration.clear();
        self.p_reason.clear();
    }

    fn clear_adapt(&mut self) {
        self.a_ts.clear();
        self.a_g.clear();
        self.a_name.clear();
        self.a_error.clear();
        self.a_policy.clear();
    }
}

impl Nested {
    /// Takes away the first n rows (written), keeping the rest in order.
    fn drain_front(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        self.g.drain(..n);
        self.name.drain(..n);
        self.key.drain(..n);
        self.b.drain(..n.min(self.b.len()));
        self.begin.drain(..n);
        self.end.drain(..n);
        self.duration.drain(..n);
        self.depth.drain(..n);
        self.complete.drain(..n);
        for c in &mut self.comp {
            c.drain(..n.min(c.len()));
        }
    }

    fn truncate(&mut self, n: usize) {
        self.g.truncate(n);
        self.name.truncate(n);
        self.key.truncate(n);
        self.b.truncate(n);
        self.begin.truncate(n);
        self.end.truncate(n);
        self.duration.truncate(n);
        self.depth.truncate(n);
        self.complete.truncate(n);
        self.comp.iter_mut().for_each(|c| c.truncate(n));
    }
}

impl SyncPart {
    fn truncate(&mut self, n: usize) {
        self.g.truncate(n);
        self.name.truncate(n);
        self.addr.truncate(n);
        self.request.truncate(n);
        self.acquire.truncate(n);
        self.acquire_ok.truncate(n);
        self.release.truncate(n);
        self.release_ok.truncate(n);
        self.comp.iter_mut().for_each(|c| c.truncate(n));
    }
}

/// The sync pairs: (begin kind, end kind, part of the sync table).
const SYNC_PAIRS: [(u8, u8, usize); 3] = [
    (kinds::LOCK_ACQUIRE, kinds::LOCK_RELEASE, 0),
    (kinds::BARRIER_ENTER, kinds::BARRIER_EXIT, 2),
    (kinds::COND_WAIT_ENTER, kinds::COND_WAIT_EXIT, 3),
];

impl Thread {
    /// Pairs the thread's gathered events of the tables to redo (regions, functions; the mutex,
    /// barrier and condition-wait pairings of sync) with the general pairing (Live found an end
    /// that closes nothing or another key).
    fn redo(&mut self, d: &mut Derived, nested: [bool; 2], sync: [bool; 3]) {
        let g = self.g;
        for (t, (evs, out, keep_b)) in [(&self.regions, &mut d.regions, false), (&self.functions, &mut d.functions, true)].into_iter().enumerate() {
            if !nested[t] || evs.is_empty() {
                continue;
            }
            self.keys.clear();
            self.keys.extend(evs.iter().map(|e| (e.begin, e.key)));
            out.unmatched += pair_thread(&self.keys, &mut self.scratch, |b, e, depth| {
                let (eb, complete) = (&evs[b], e >= 0);
                let end = if complete { evs[e as usize].ts } else { eb.ts };
                out.g.push(g);
                out.name.push(eb.name);
                out.key.push(eb.key);
                if keep_b {
                    out.b.push(eb.b);
                }
                out.begin.push(eb.ts);
                out.end.push(end);
                out.duration.push(end.wrapping_sub(eb.ts));
                out.depth.push(depth);
                out.complete.push(complete as u8);
            });
        }
        if !self.sync.is_empty() && sync.iter().any(|&x| x) {
            self.flush_sync(d, sync);
        }
        self.regions.clear();
        self.functions.clear();
        self.sync.clear();
    }

    fn flush_sync(&mut self, d: &mut Derived, redo: [bool; 3]) {
        let (g, ev) = (self.g, &self.sync);
        // when each acquisition was asked for (pairing.lock_requests), and the requests never
        // acquired
        self.request.clear();
        let mut last: Option<usize> = None;
        for (i, e) in ev.iter().enumerate() {
            let req = last.filter(|&p| ev[p].kind == kinds::LOCK_REQUEST);
            let asked = req.filter(|&p| ev[p].addr == e.addr);
            if e.kind == kinds::LOCK_ACQUIRE {
                self.request.push(ev[asked.unwrap_or(i)].ts);
            }
            last = Some(i);
        }
        let ok = redo.map(|r| !r);
        for (t, &(begin, end, part)) in SYNC_PAIRS.iter().enumerate() {
            if ok[t] {
                continue;
            }
            self.sel.clear();
            self.sel.extend((0..ev.len()).filter(|&i| ev[i].kind == begin || ev[i].kind == end));
            self.keys.clear();
            self.keys.extend(self.sel.iter().map(|&i| (ev[i].kind == begin, ev[i].addr)));
            let (sel, request, out) = (&self.sel, &self.request, &mut d.sync[part]);
            let mut nth = 0usize;
            pair_thread(&self.keys, &mut self.scratch, |b, e, _depth| {
                let eb = &ev[sel[b]];
                let left = (e >= 0).then(|| ev[sel[e as usize]].ts);
                match part {
                    0 => out.push(g, eb, request[nth], Some(eb.ts), left),
                    2 => out.push(g, eb, eb.ts, left, left),
                    _ => out.push(g, eb, eb.ts, left, None),
                }
                nth += 1;
            });
        }
    }
}

/// Columns that may hold nulls, each written as nullable when its table's first page holds one:
/// app_events' instrument and payload, the names of regions, counters, timers and adapt, sync's
/// acquire and release; and whether sync's object dictionary holds objects not named. The last
/// slot is not a column: Some(true) where the objects not named the scans promised (Chunk::
/// sync_keys) were not those of the rows (the pass then holds sync as without the scans).
pub const NULLABLE: usize = 10;
const N_INSTRUMENT: usize = 0;
const N_PAYLOAD: usize = 1;
const N_REGIONS: usize = 2;
const N_COUNTERS: usize = 3;
const N_TIMERS: usize = 4;
const N_ADAPT: usize = 5;
const N_SYNC_ACQUIRE: usize = 6;
const N_SYNC_RELEASE: usize = 7;
const N_SYNC_UNNAMED: usize = 8;
const N_SYNC_HELD: usize = 9;

/// The pass is run again when a later page holds a null in a column the first page wrote as
/// required: with that column nullable (the others that were nullable stay so, the rest are
/// decided again).
pub struct Retry(pub [Option<bool>; NULLABLE]);

enum PassErr {
    Io(std::io::Error),
    Retry(usize),
}

impl From<std::io::Error> for PassErr {
    fn from(e: std::io::Error) -> Self {
        PassErr::Io(e)
    }
}

/// Whether column `slot` is written nullable, deciding it from this page's nulls the first time.
fn decide(flags: &mut [Option<bool>; NULLABLE], slot: usize, nulls: usize) -> Result<bool, PassErr> {
    let n = *flags[slot].get_or_insert(nulls > 0);
    if nulls > 0 && !n {
        return Err(PassErr::Retry(slot));
    }
    Ok(n)
}

/// A derived table written a page at a time while the pass runs.
pub struct Sink {
    w: parquet::Writer<std::fs::File>,
    in_group: usize,
    group_rows: usize,
}

impl Sink {
    pub fn new(f: std::fs::File, group_rows: usize) -> std::io::Result<Sink> {
        Ok(Sink { w: parquet::Writer::new(f)?, in_group: 0, group_rows: group_rows.max(1) })
    }

    /// Rows the next page holds: PAGE_ROWS, or what the row group has room for.
    fn cap(&self) -> usize {
        parquet::PAGE_ROWS.min(self.group_rows - self.in_group)
    }

    fn page(&mut self, cols: &[Column], n: usize) -> std::io::Result<()> {
        self.w.pages(cols, 0, n)?;
        self.in_group += n;
        if self.in_group == self.group_rows {
            self.w.end_group()?;
            self.in_group = 0;
        }
        Ok(())
    }
}

/// A small dictionary of codes (counter and pause reasons): the sorted codes and their labels,
/// PLAIN-encoded (app_tables._small_dict).
#[derive(Default)]
pub struct Reasons {
    pub codes: Vec<u64>,
    pub count: usize,
    pub plain: Vec<u8>,
}

impl Reasons {
    fn index(&self, b: u64) -> u64 {
        self.codes.binary_search(&b).map(|i| i as u64).unwrap_or(u64::MAX)
    }
}

/// The derived tables written while the pass runs (None: their rows are returned), and what
/// they need.
#[derive(Default)]
pub struct Streams {
    /// Names of sync objects the program did not name, by address (symbols of static objects:
    /// oslens.store.symbols.name_objects); the others are named by their address in hex.
    pub object_names: HashMap<u64, String>,
    pub regions: Option<Sink>,
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

/// The compensation's bookkeeping (oslens.calibrate.compensate): of the current thread, the
/// cost of its earlier records at each time its records' running maximum rises (the breakpoints
/// a lookup by time needs: the first record whose running maximum reaches a time is always one
/// of them) and its cost so far; per thread, its records per kind and its pauses' sum.
#[derive(Default)]
pub struct Comp {
    bp_ts: Vec<i64>,
    bp_before: Vec<f64>,
    run_cost: f64,
    /// records per thread and kind (g * 256 + kind)
    pub kinds: Vec<u64>,
    pub pause_ns: Vec<i64>,
}

impl Comp {
    /// A new thread: no records yet.
    fn reset(&mut self) {
        self.bp_ts.clear();
        self.bp_before.clear();
        self.run_cost = 0.0;
    }

    /// The cost of the thread's records before time t (compensate.ThreadCosts.at): before the
    /// first record whose running maximum reaches t, all of them where none does. Searched back
    /// from the latest breakpoint, where the times looked up lie (a record's own time, a timer's
    /// start): the breakpoints seen so far always hold the answer for a time no later than them.
    fn before(&self, t: i64) -> f64 {
        let ts = &self.bp_ts;
        let n = ts.len();
        if n == 0 || ts[n - 1] < t {
            return self.run_cost;
        }
        // gallop back to a breakpoint before t, then search the stretch after it
        let (mut lo, mut step) = (n - 1, 1);
        while lo > 0 && ts[lo] >= t {
            lo = lo.saturating_sub(step);
            step *= 2;
        }
        let i = if ts[lo] >= t { lo } else { lo + 1 + ts[lo + 1..n].partition_point(|&x| x < t) };
        self.bp_before[i]
    }

    /// t less the cost before it, rounded as numpy's rint
    fn comp(&self, t: i64) -> i64 {
        t.wrapping_sub(rint(self.before(t)) as i64)
    }
}

/// Page scratch: validity and boolean bitmaps, 32-bit ids.
#[derive(Default)]
struct Scratch {
    valid: Vec<u8>,
    bits: Vec<u8>,
    ids: Vec<u32>,
    sync: SyncPage,
    /// sync's dictionaries while its pages are written as threads end (every object named, or
    /// the objects not named known from the scans)
    sync_dicts: Option<SyncDicts>,
    /// sync_dicts came from the scans: sync's pages are written as threads end whatever the names
    sync_known: bool,
}

/// The validity bitmap of a page of name indices (-1: no name); returns the nulls.
fn name_validity(names: &[i32], bits: &mut Vec<u8>) -> usize {
    bits.clear();
    bits.resize(names.len().div_ceil(8), 0);
    let mut nulls = 0;
    for (i, &n) in names.iter().enumerate() {
        if n >= 0 {
            bits[i >> 3] |= 1 << (i & 7);
        } else {
            nulls += 1;
        }
    }
    nulls
}

fn plain_col<'a>(name: &str, physical: i32, converted: Option<i32>, values: &'a [u8], width: usize) -> Column<'a> {
    Column {
        name: name.to_string(),
        physical,
        converted,
        validity: None,
        offset: 0,
        values,
        width,
        data: None,
        dict: None,
        delta: false,
        stats: false,
    }
}

fn i64_col<'a>(name: &str, v: &'a [i64], delta: bool, stats: bool) -> Column<'a> {
    Column { delta, stats, ..plain_col(name, parquet::INT64, None, bytes_of(v), 8) }
}

fn dict_col<'a>(name: &str, physical: i32, converted: Option<i32>, values: &'a [u8], width: usize, dict: (usize, &'a [u8]), stats: bool) -> Column<'a> {
    Column { dict: Some(Dictionary { count: dict.0, plain: dict.1 }), stats, ..plain_col(name, physical, converted, values, width) }
}

fn who<'a>(g: &'a [i32], d: &'a Dicts) -> [Column<'a>; 2] {
    [dict_col("pid", parquet::INT64, None, bytes_of(g), 4, d.pid, true), dict_col("tid", parquet::INT64, None, bytes_of(g), 4, d.tid, true)]
}

fn name_col<'a>(name: &str, v: &'a [i32], d: &'a Dicts, validity: Option<&'a [u8]>) -> Column<'a> {
    Column { validity, ..dict_col(name, parquet::BYTE_ARRAY, Some(parquet::UTF8), bytes_of(v), 4, d.instrument, false) }
}

fn reason_col<'a>(v: &'a [u64], r: &'a Reasons) -> Column<'a> {
    dict_col("reason", parquet::BYTE_ARRAY, Some(parquet::UTF8), bytes_of(v), 8, (r.count, &r.plain), false)
}

/// Writes the rows lo..hi of a streamed table as one page; with `footer` (lo == hi) writes its
/// footer, the columns' schema, instead.
#[allow(clippy::too_many_arguments)]
fn derived_page(
    table: usize,
    d: &Derived,
    lo: usize,
    hi: usize,
    dicts: &Dicts,
    st: &mut Streams,
    flags: &mut [Option<bool>; NULLABLE],
    sc: &mut Scratch,
    footer: bool,
) -> Result<(), PassErr> {
    let names: &[i32] = match table {
        N_REGIONS => &d.regions.name[lo..hi],
        N_COUNTERS => &d.c_name[lo..hi],
        N_TIMERS => &d.t_name[lo..hi],
        N_ADAPT => &d.a_name[lo..hi],
        _ => &[],
    };
    let nulls = name_validity(names, &mut sc.valid);
    let nullable = if table == N_PAUSES { false } else if footer { flags[table] == Some(true) } else { decide(flags, table, nulls)? };
    let validity = nullable.then_some(&sc.valid[..]);
    let comp = st.costs.is_some();
    // compensation's columns, after the table's own (oslens.store.compensation)
    fn comp_cols<'a>(names: [&str; 3], v: &'a [Vec<i64>; 3], lo: usize, hi: usize) -> Vec<Column<'a>> {
        names.iter().zip(v).map(|(n, c)| i64_col(n, &c[lo..hi], COMP_DELTA.contains(n), true)).collect()
    }
    let mut cols: Vec<Column> = match table {
        N_REGIONS => {
            let n = &d.regions;
            sc.bits.clear();
            sc.bits.resize((hi - lo).div_ceil(8), 0);
            for (i, &c) in n.complete[lo..hi].iter().enumerate() {
                sc.bits[i >> 3] |= (c & 1) << (i & 7);
            }
            sc.ids.clear();
            sc.ids.extend(n.key[lo..hi].iter().map(|&k| k as u32));
            let [pid, tid] = who(&n.g[lo..hi], dicts);
            vec![
                pid,
                tid,
                name_col("name", names, dicts, validity),
                i64_col("begin_ns", &n.begin[lo..hi], true, true),
                i64_col("end_ns", &n.end[lo..hi], false, true),
                i64_col("duration_ns", &n.duration[lo..hi], false, true),
                i64_col("depth", &n.depth[lo..hi], false, false),
                plain_col("complete", parquet::BOOLEAN, None, &sc.bits, 0),
                plain_col("id", parquet::INT32, Some(parquet::UINT_32), bytes_of(&sc.ids), 4),
            ]
        }
        N_COUNTERS => {
            let [pid, tid] = who(&d.c_g[lo..hi], dicts);
            vec![
                i64_col("ts", &d.c_ts[lo..hi], true, true),
                pid,
                tid,
                name_col("name", names, dicts, validity),
                i64_col("value", &d.c_value[lo..hi], false, false),
                reason_col(&d.c_reason[lo..hi], &st.counter_reasons),
            ]
        }
        N_TIMERS => {
            let [pid, tid] = who(&d.t_g[lo..hi], dicts);
            vec![
                pid,
                tid,
                name_col("name", names, dicts, validity),
                i64_col("start_ns", &d.t_start[lo..hi], true, true),
                i64_col("stop_ns", &d.t_stop[lo..hi], false, true),
                i64_col("elapsed_ns", &d.t_elapsed[lo..hi], false, true),
            ]
        }
        N_ADAPT => {
            let [pid, tid] = who(&d.a_g[lo..hi], dicts);
            vec![
                i64_col("ts", &d.a_ts[lo..hi], true, true),
                pid,
                tid,
                name_col("phase", names, dicts, validity),
                i64_col("error", &d.a_error[lo..hi], false, false),
                i64_col("policy", &d.a_policy[lo..hi], false, false),
            ]
        }
        _ => {
            let [pid, tid] = who(&d.p_g[lo..hi], dicts);
            vec![
                pid,
                tid,
                i64_col("start_ns", &d.p_start[lo..hi], true, true),
                i64_col("end_ns", &d.p_end[lo..hi], false, true),
                i64_col("duration_ns", &d.p_duration[lo..hi], false, true),
                reason_col(&d.p_reason[lo..hi], &st.pause_reasons),
            ]
        }
    };
    if comp {
        match table {
            N_REGIONS => cols.extend(comp_cols(["begin_comp_ns", "end_comp_ns", "duration_comp_ns"], &d.regions.comp, lo, hi)),
            N_COUNTERS => cols.push(i64_col("ts_comp_ns", &d.c_comp[lo..hi], true, true)),
            N_TIMERS => cols.extend(comp_cols(["start_comp_ns", "stop_comp_ns", "elapsed_comp_ns"], &d.t_comp, lo, hi)),
            _ => {}
        }
    }
    let cols = cols;
    let sink = match table {
        N_REGIONS => &mut st.regions,
        N_COUNTERS => &mut st.counters,
        N_TIMERS => &mut st.timers,
        N_ADAPT => &mut st.adapt,
        _ => &mut st.pauses,
    };
    if footer {
        if let Some(done) = sink.take() {
            done.w.finish(&cols)?;
        }
    } else if let Some(sink) = sink.as_mut() {
        if hi > lo {
            sink.page(&cols, hi - lo)?;
        }
    }
    Ok(())
}

/// The compensated columns delta-encoded (oslens.store.compensation.DELTA_COLUMNS): those of
/// the times that are (ts, begin_ns, start_ns, request_ns).
const COMP_DELTA: [&str; 8] = ["ts_comp_ns", "begin_comp_ns", "start_comp_ns", "request_comp_ns", "end_comp_ns", "stop_comp_ns", "acquire_comp_ns", "release_comp_ns"];

/// The table number of pauses (no name column: no slot in the flags).
const N_PAUSES: usize = NULLABLE;

#[inline(always)]
fn word(r: &[u8], o: usize) -> u64 {
    u64::from_le_bytes(r[o..o + 8].try_into().unwrap())
}

/// Runs the pass: app_events written to `file` in row groups of `group_rows` (None: not
/// written), the derived tables with a sink in `st` written there, the other derived rows
/// returned. `nullable`: see Retry (None: decided by the first page).
#[allow(clippy::too_many_arguments)]
pub fn run(
    chunks: &[Chunk],
    threads: usize,
    clock: Clock,
    dicts: &Dicts,
    file: Option<std::fs::File>,
    group_rows: usize,
    nullable: [Option<bool>; NULLABLE],
    st: &mut Streams,
) -> std::io::Result<Result<Derived, Retry>> {
    let mut flags = nullable;
    match pass(chunks, threads, clock, dicts, file, group_rows, &mut flags, st) {
        Ok(d) => Ok(Ok(d)),
        Err(PassErr::Io(e)) => Err(e),
        Err(PassErr::Retry(slot)) => {
            let mut again = flags.map(|f| f.filter(|&n| n));
            again[slot] = Some(true);
            Ok(Err(Retry(again)))
        }
    }
}

/// Streamed rows lo.. of a derived table written a page at a time while a whole page is there
/// (all of them with `last`); returns the rows written.
#[allow(clippy::too_many_arguments)]
fn drain_pages(table: usize, d: &Derived, len: usize, last: bool, dicts: &Dicts, st: &mut Streams, flags: &mut [Option<bool>; NULLABLE], sc: &mut Scratch) -> Result<usize, PassErr> {
    let cap = |st: &Streams| {
        let s = match table {
            N_REGIONS => &st.regions,
            N_COUNTERS => &st.counters,
            N_TIMERS => &st.timers,
            N_ADAPT => &st.adapt,
            _ => &st.pauses,
        };
        s.as_ref().map(|s| s.cap())
    };
    let mut lo = 0;
    while let Some(c) = cap(st) {
        let n = c.min(len - lo);
        if n == 0 || (n < c && !last) {
            break;
        }
        derived_page(table, d, lo, lo + n, dicts, st, flags, sc, false)?;
        lo += n;
    }
    Ok(lo)
}

#[allow(clippy::too_many_arguments)]
fn pass(
    chunks: &[Chunk],
    threads: usize,
    clock: Clock,
    dicts: &Dicts,
    file: Option<std::fs::File>,
    group_rows: usize,
    flags: &mut [Option<bool>; NULLABLE],
    st: &mut Streams,
) -> Result<Derived, PassErr> {
    let mut d = Derived {
        counts: vec![0; 256],
        extent_min: vec![i64::MAX; threads],
        extent_max: vec![i64::MIN; threads],
        ..Default::default()
    };
    // the kinds counted first, so each derived column is allocated once at its size: growing
    // them copies into fresh memory (measured: a page fault per 4 KiB for over half the pass's
    // faults, 105 k of 197 k on the bench's 20 M records)
    // the CPU column's dictionary is 0..=the largest CPU number of all records (as
    // app_tables._small_ints makes it), written before the first page
    let mut cpu_top = 0u16;
    for c in chunks {
        let top = match c.counts {
            Some((k, top)) => {
                d.counts.iter_mut().zip(k).for_each(|(a, b)| *a += b);
                top
            }
            None => count_kinds(&c.records()?, &mut d.counts),
        };
        cpu_top = cpu_top.max(top);
    }
    d.reserve();
    if st.sync.is_some() {
        // nulls the records' kinds promise: condition waits are never released, and requests
        // beyond the acquisitions are never acquired (no retry when a later page holds them)
        let n = |k: u8| d.counts[k as usize];
        let unacquired = n(kinds::LOCK_REQUEST) > n(kinds::LOCK_ACQUIRE);
        if unacquired {
            flags[N_SYNC_ACQUIRE].get_or_insert(true);
        }
        if unacquired || n(kinds::COND_WAIT_ENTER) > 0 {
            flags[N_SYNC_RELEASE].get_or_insert(true);
        }
    }
    let mut writer = file.map(parquet::Writer::new).transpose()?;
    let mut sc = Scratch::default();
    if st.sync.is_some() && flags[N_SYNC_HELD] != Some(true) {
        if let Some(unnamed) = scanned_unnamed(chunks) {
            sc.sync_dicts = Some(SyncDicts::new(&d.counts, dicts.instrument, unnamed, &st.object_names));
            sc.sync_known = true;
        }
    }
    let group_rows = group_rows.max(1);
    // app_events is written a page at a time (PAGE_ROWS rows: the pages a row group of
    // group_rows gets), from buffers of one page's rows
    let total = d.counts.iter().sum::<u64>() as usize;
    let mut grp = Group::new(parquet::PAGE_ROWS.min(group_rows).min(total).max(1));
    grp.cpu_top = cpu_top;
    let costs: Option<[f64; 256]> = st.costs.as_ref().map(|c| {
        let mut t = [0.0; 256];
        t.iter_mut().zip(c).for_each(|(a, b)| *a = *b);
        t
    });
    if costs.is_some() {
        grp.ts_comp = vec![0; grp.ts.len()];
        d.comp = Some(Comp { kinds: vec![0; threads * 256], pause_ns: vec![0; threads], ..Default::default() });
        // every compensated column at its size up front, as the derived columns (Derived::reserve)
        let n = |k: u8| d.counts[k as usize] as usize;
        d.c_comp.reserve_exact(n(kinds::COUNTER));
        d.t_comp.iter_mut().for_each(|c| c.reserve_exact(n(kinds::TIMER_STOP)));
        d.regions.comp.iter_mut().for_each(|c| c.reserve_exact(n(kinds::REGION_BEGIN)));
        d.functions.comp.iter_mut().for_each(|c| c.reserve_exact(n(kinds::FUNC_ENTRY)));
        for (part, k) in [(0, kinds::LOCK_ACQUIRE), (2, kinds::BARRIER_ENTER), (3, kinds::COND_WAIT_ENTER)] {
            d.sync[part].comp.iter_mut().for_each(|c| c.reserve_exact(n(k)));
        }
        // the breakpoints: at most one per record of the longest thread
        let mut per_thread = vec![0usize; threads];
        chunks.iter().for_each(|c| per_thread[c.g] += c.len() / 32);
        let most = per_thread.into_iter().max().unwrap_or(0);
        let cp = d.comp.as_mut().unwrap();
        cp.bp_ts.reserve_exact(most);
        cp.bp_before.reserve_exact(most);
    }
    let mut in_group = 0usize;
    grp.cap = grp.ts.len().min(group_rows);
    let mut live = Live { g: -1, ..Default::default() };
    let mut th = Thread::default();
    let cpu_dict: Vec<i64> = (0..1i64 << 15).collect();
    let mut last_cols: Option<[bool; 2]> = None;
    let comp_on = costs.is_some();
    let mut flush_page = |grp: &mut Group, writer: &mut Option<parquet::Writer<std::fs::File>>, flags: &mut [Option<bool>; NULLABLE]| -> Result<(), PassErr> {
        let n = [decide(flags, N_INSTRUMENT, grp.name_nulls)?, decide(flags, N_PAYLOAD, grp.pay_nulls)?];
        if let Some(w) = writer.as_mut() {
            if grp.cpu_top >= 1 << 15 {
                grp.cpu_wide.clear();
                grp.cpu_wide.extend(grp.cpu[..grp.len].iter().map(|&c| c as i64));
            }
            let cols = columns(grp, dicts, n, bytes_of(&cpu_dict), comp_on);
            w.pages(&cols, 0, grp.len())?;
            in_group += grp.len();
            if in_group == group_rows {
                w.end_group()?;
                in_group = 0;
            }
        }
        last_cols = Some(n);
        grp.clear();
        // the next page: PAGE_ROWS rows, or what the row group has room for
        grp.cap = grp.ts.len().min(group_rows - in_group);
        Ok(())
    };
    let (mut name_bits, mut pay_bits, mut rows) = (0u64, 0u64, 0usize);
    for (ci, c) in chunks.iter().enumerate() {
        let g = c.g as i32;
        if g != live.g {
            if live.g >= 0 {
                let first = live.first_chunk;
                thread_done(&mut live, &mut th, &chunks[first..ci], clock, &mut d, dicts, st, flags, &mut sc)?;
            }
            live.start(g, ci, &d);
            if let Some(cp) = d.comp.as_mut() {
                cp.reset();
            }
        }
        let (mut lo, mut hi) = (d.extent_min[c.g], d.extent_max[c.g]);
        let records = c.records()?; // let go at the end of the chunk (Source::Reload)
        for (i, r) in records.chunks_exact(32).enumerate() {
            let w1 = word(r, 8);
            let k = r[14];
            let a = word(r, 16);
            let (ts, value) = if c.tsc {
                let dt = (word(r, 0) as i64).wrapping_sub(clock.r0) as f64;
                let ts = (rint(dt * clock.slope + clock.intercept) as i64).wrapping_add(clock.n0);
                let v = if k == kinds::TIMER_STOP || k == kinds::PAUSE { rint(a as i64 as f64 * clock.slope) as i64 } else { a as i64 };
                (ts, v)
            } else {
                (word(r, 0) as i64, a as i64)
            };
            lo = lo.min(ts);
            hi = hi.max(ts);
            if k == kinds::NAME || k == kinds::CONT || k == kinds::EMPTY {
                continue;
            }
            let name = if c.has_names { c.names.get(w1 & NAME_KEY) } else { -1 };
            let b = word(r, 24);
            // app_events
            let row = grp.len;
            grp.ts[row] = ts;
            grp.g[row] = g;
            let cpu = (w1 >> 32) as u16;
            grp.cpu[row] = cpu;
            // validity bits gathered a word at a time (a byte's read-modify-write for each row
            // made each row wait on the previous one's store)
            let bit = row & 63;
            name_bits |= ((name >= 0) as u64) << bit;
            pay_bits |= ((k == kinds::EVENT) as u64) << bit;
            if bit == 63 {
                grp.store_bits(row, &mut name_bits, &mut pay_bits);
            }
            grp.name_nulls += (name < 0) as usize;
            grp.name[row] = name.max(0);
            grp.kind[row] = k;
            grp.value[row] = value;
            grp.id[row] = w1 as u32;
            if k == kinds::EVENT {
                if a <= 8 {
                    grp.data.extend_from_slice(&b.to_le_bytes()[..a as usize]);
                } else {
                    let first = b.to_le_bytes();
                    let p: &[u8] = c.payloads.get(&i).map(|v| &v[..]).unwrap_or(&first);
                    grp.data.extend_from_slice(&p[..p.len().min(a.min(usize::MAX as u64) as usize)]);
                }
            } else {
                grp.pay_nulls += 1;
            }
            grp.offsets[row + 1] = grp.data.len() as u64;
            grp.len = row + 1;
            // the record's time in the derived tables' compensated columns (a lookup by time:
            // its own cost-before where it raises the thread's running maximum)
            let mut at = (ts, 0i64);
            let mut timer_start = (ts.wrapping_sub(value), 0i64);
            if let (Some(costs), Some(cp)) = (costs.as_ref(), d.comp.as_mut()) {
                // ts minus the cost of the thread's earlier records (np.rint, then to int64)
                grp.ts_comp[row] = ts.wrapping_sub(rint(cp.run_cost) as i64);
                at.1 = if cp.bp_ts.last().is_none_or(|&m| ts > m) {
                    cp.bp_ts.push(ts);
                    cp.bp_before.push(cp.run_cost);
                    grp.ts_comp[row]
                } else {
                    cp.comp(ts)
                };
                if k == kinds::TIMER_STOP {
                    if cp.bp_ts.last().is_some_and(|&m| timer_start.0 <= m) {
                        timer_start.1 = cp.comp(timer_start.0);
                    } else {
                        // a start after every record so far (a negative elapsed time): its
                        // cost is known when the thread's records are all seen
                        live.timers_pending.push(d.t_g.len());
                    }
                }
                let cost = if k == kinds::PAUSE {
                    let v = value.max(0);
                    cp.pause_ns[c.g] += v;
                    v as f64
                } else {
                    costs[k as usize]
                };
                cp.run_cost += cost;
                cp.kinds[c.g * 256 + k as usize] += 1;
            }
            // the derived tables
            match k {
                kinds::REGION_BEGIN => live.begin(0, &mut d.regions, at, w1 as u32 as u64, name, 0, false),
                kinds::REGION_END => live.end(0, &mut d.regions, at, w1 as u32 as u64),
                kinds::FUNC_ENTRY => live.begin(1, &mut d.functions, at, a, name, b, true),
                kinds::FUNC_EXIT => live.end(1, &mut d.functions, at, a),
                kinds::LOCK_REQUEST..=kinds::COND_WAIT_EXIT => live.sync_event(&mut d, SyncEv { ts, comp: at.1, kind: k, addr: a, name }),
                kinds::COUNTER => {
                    d.c_ts.push(ts);
                    d.c_g.push(g);
                    d.c_name.push(name);
                    d.c_value.push(value);
                    d.c_reason.push(if st.counters.is_some() { st.counter_reasons.index(b) } else { b });
                    if comp_on {
                        d.c_comp.push(at.1);
                    }
                    if st.counters.as_ref().is_some_and(|s| d.c_ts.len() == s.cap()) {
                        drain_pages(N_COUNTERS, &d, d.c_ts.len(), false, dicts, st, flags, &mut sc)?;
                        d.clear_counters();
                    }
                }
                kinds::TIMER_STOP => {
                    d.t_g.push(g);
                    d.t_name.push(name);
                    d.t_start.push(timer_start.0);
                    d.t_stop.push(ts);
                    d.t_elapsed.push(value);
                    if comp_on {
                        d.t_comp[0].push(timer_start.1);
                        d.t_comp[1].push(at.1);
                        d.t_comp[2].push(at.1.wrapping_sub(timer_start.1));
                    }
                    // (rows waiting for their compensated start are written when the thread is done)
                    if live.timers_pending.is_empty() && st.timers.as_ref().is_some_and(|s| d.t_g.len() == s.cap()) {
                        drain_pages(N_TIMERS, &d, d.t_g.len(), false, dicts, st, flags, &mut sc)?;
                        d.clear_timers();
                    }
                }
                kinds::PAUSE => {
                    d.p_g.push(g);
                    d.p_start.push(ts.wrapping_sub(value));
                    d.p_end.push(ts);
                    d.p_duration.push(value);
                    d.p_reason.push(if st.pauses.is_some() { st.pause_reasons.index(b) } else { b });
                    if st.pauses.as_ref().is_some_and(|s| d.p_g.len() == s.cap()) {
                        drain_pages(N_PAUSES, &d, d.p_g.len(), false, dicts, st, flags, &mut sc)?;
                        d.clear_pauses();
                    }
                }
                kinds::ADAPT => {
                    d.a_ts.push(ts);
                    d.a_g.push(g);
                    d.a_name.push(name);
                    d.a_error.push(a as i64);
                    d.a_policy.push(b as i64);
                    if st.adapt.as_ref().is_some_and(|s| d.a_g.len() == s.cap()) {
                        drain_pages(N_ADAPT, &d, d.a_g.len(), false, dicts, st, flags, &mut sc)?;
                        d.clear_adapt();
                    }
                }
                _ => {}
            }
            rows += 1;
            if grp.full() {
                if grp.len & 63 != 0 {
                    grp.store_bits(grp.len - 1, &mut name_bits, &mut pay_bits);
                }
                flush_page(&mut grp, &mut writer, flags)?;
            }
        }
        d.extent_min[c.g] = lo;
        d.extent_max[c.g] = hi;
    }
    if live.g >= 0 {
        let first = live.first_chunk;
        thread_done(&mut live, &mut th, &chunks[first..], clock, &mut d, dicts, st, flags, &mut sc)?;
    }
    d.rows = rows;
    if grp.len() > 0 {
        if grp.len & 63 != 0 {
            grp.store_bits(grp.len - 1, &mut name_bits, &mut pay_bits);
        }
        flush_page(&mut grp, &mut writer, flags)?;
    }
    if let Some(mut w) = writer {
        let n = last_cols.unwrap_or([false, false]);
        w.end_group()?;
        w.finish(&columns(&grp, dicts, n, bytes_of(&cpu_dict), comp_on))?;
    }
    // the streamed derived tables' last pages and footers
    for (table, len) in [(N_COUNTERS, d.c_ts.len()), (N_TIMERS, d.t_g.len()), (N_PAUSES, d.p_g.len()), (N_ADAPT, d.a_g.len()), (N_REGIONS, d.regions.g.len())] {
        let streamed = match table {
            N_REGIONS => st.regions.is_some(),
            N_COUNTERS => st.counters.is_some(),
            N_TIMERS => st.timers.is_some(),
            N_ADAPT => st.adapt.is_some(),
            _ => st.pauses.is_some(),
        };
        if !streamed {
            continue;
        }
        drain_pages(table, &d, len, true, dicts, st, flags, &mut sc)?;
        derived_page(table, &d, 0, 0, dicts, st, flags, &mut sc, true)?;
        match table {
            N_REGIONS => d.regions.truncate(0),
            N_COUNTERS => d.clear_counters(),
            N_TIMERS => d.clear_timers(),
            N_ADAPT => d.clear_adapt(),
            _ => d.clear_pauses(),
        }
    }
    write_sync(&mut d, dicts, st, flags, &mut sc)?;
    Ok(d)
}

/// A thread's records are all seen: its begin/end and sync events paired, its unclosed regions
/// and functions ended when it ended (app_tables._chunk_extent), the regions' whole pages
/// written where they are streamed.
#[allow(clippy::too_many_arguments)]
fn thread_done(
    live: &mut Live,
    th: &mut Thread,
    chunks: &[Chunk],
    clock: Clock,
    d: &mut Derived,
    dicts: &Dicts,
    st: &mut Streams,
    flags: &mut [Option<bool>; NULLABLE],
    sc: &mut Scratch,
) -> Result<(), PassErr> {
    let g = live.g as usize;
    if let Some(p) = live.last.filter(|p| p.kind == kinds::LOCK_REQUEST) {
        d.sync[1].push(live.g, &p, p.ts, None, None);
    }
    let bases = live.nest_base;
    if live.nest_bad.iter().chain(&live.sync_bad).any(|&b| b) {
        // rows of the tables to redo taken back, and the thread's events gathered again
        if live.nest_bad[0] {
            d.regions.truncate(bases[0]);
        }
        if live.nest_bad[1] {
            d.functions.truncate(bases[1]);
        }
        for (t, &(_, _, part)) in SYNC_PAIRS.iter().enumerate() {
            if live.sync_bad[t] {
                d.sync[part].truncate(live.sync_base[t]);
            }
        }
        th.g = live.g;
        let any_sync = live.sync_bad.iter().any(|&b| b);
        for c in chunks {
            for r in c.records()?.chunks_exact(32) {
                let k = r[14];
                let want = match k {
                    kinds::REGION_BEGIN | kinds::REGION_END => live.nest_bad[0],
                    kinds::FUNC_ENTRY | kinds::FUNC_EXIT => live.nest_bad[1],
                    kinds::LOCK_REQUEST..=kinds::COND_WAIT_EXIT => any_sync,
                    _ => false,
                };
                if !want {
                    continue;
                }
                let (w1, a, b) = (word(r, 8), word(r, 16), word(r, 24));
                let ts = if c.tsc {
                    let dt = (word(r, 0) as i64).wrapping_sub(clock.r0) as f64;
                    (rint(dt * clock.slope + clock.intercept) as i64).wrapping_add(clock.n0)
                } else {
                    word(r, 0) as i64
                };
                let name = if c.has_names { c.names.get(w1 & NAME_KEY) } else { -1 };
                match k {
                    kinds::REGION_BEGIN | kinds::REGION_END => {
                        th.regions.push(PairEv { ts, key: w1 as u32 as u64, name, b: 0, begin: k == kinds::REGION_BEGIN })
                    }
                    kinds::FUNC_ENTRY | kinds::FUNC_EXIT => th.functions.push(PairEv { ts, key: a, name, b, begin: k == kinds::FUNC_ENTRY }),
                    _ => th.sync.push(SyncEv { ts, comp: 0, kind: k, addr: a, name }),
                }
            }
        }
        th.redo(d, live.nest_bad, live.sync_bad);
    }
    let mut end = d.extent_max[g];
    if let Some(&(calib, open)) = st.thread_end.get(g) {
        end = end.max(calib);
        if open != i64::MIN && end != i64::MIN {
            end = end.max(open);
        }
    }
    for (n, base) in [(&mut d.regions, bases[0]), (&mut d.functions, bases[1])] {
        for r in base..n.g.len() {
            if n.complete[r] == 0 {
                n.end[r] = end.max(n.begin[r]);
                n.duration[r] = n.end[r].wrapping_sub(n.begin[r]);
            }
        }
    }
    let timers_held = !live.timers_pending.is_empty();
    compensate_thread(live, d);
    if timers_held && st.timers.is_some() {
        let done = drain_pages(N_TIMERS, d, d.t_g.len(), false, dicts, st, flags, sc)?;
        d.drain_timers(done);
    }
    if st.regions.is_some() {
        let done = drain_pages(N_REGIONS, d, d.regions.g.len(), false, dicts, st, flags, sc)?;
        d.regions.drain_front(done);
    }
    sync_thread_done(d, dicts, st, flags, sc)
}

/// The compensated times of the thread's rows that could not have theirs as their records went
/// by (compensation.build: each time less the cost of the thread's records before it): rows of
/// regions, functions and sync paired again (Thread::redo), the ends of regions and functions
/// left open (the thread's end), and timers whose start lay after every record before their stop.
fn compensate_thread(live: &mut Live, d: &mut Derived) {
    let Some(cp) = d.comp.as_ref() else { return };
    for (n, base) in [(&mut d.regions, live.nest_base[0]), (&mut d.functions, live.nest_base[1])] {
        let (len, from) = (n.g.len(), n.comp[0].len());
        for r in base.min(from)..from {
            if n.complete[r] == 0 {
                let e = cp.comp(n.end[r]);
                n.comp[1][r] = e;
                n.comp[2][r] = e.wrapping_sub(n.comp[0][r]);
            }
        }
        for r in from..len {
            let (b, e) = (cp.comp(n.begin[r]), cp.comp(n.end[r]));
            n.comp[0].push(b);
            n.comp[1].push(e);
            n.comp[2].push(e.wrapping_sub(b));
        }
    }
    for part in &mut d.sync {
        for r in part.comp[0].len()..part.g.len() {
            let acquire = if part.acquire_ok[r] != 0 { cp.comp(part.acquire[r]) } else { 0 };
            let release = if part.release_ok[r] != 0 { cp.comp(part.release[r]) } else { 0 };
            part.push_comp(cp.comp(part.request[r]), acquire, release);
        }
    }
    for r in live.timers_pending.drain(..) {
        d.t_comp[0][r] = cp.comp(d.t_start[r]);
        d.t_comp[2][r] = d.t_comp[1][r].wrapping_sub(d.t_comp[0][r]);
    }
}

/// The sync table's labels of its parts, in their order (app_tables.SYNC_LABELS).
const SYNC_LABELS: [&str; 4] = ["mutex", "mutex", "barrier", "cond"];

/// The sync table's dictionaries, as app_tables._sync_table makes them over all its rows: the
/// kinds present (known from the records' kinds: a part has rows where its begin records are,
/// the requests never acquired are mutex rows too), and the names then the addresses of the
/// objects not named, sorted.
struct SyncDicts {
    kinds: Vec<u8>,
    n_kinds: usize,
    part_kind: [u32; 4],
    objects: Vec<u8>,
    n_names: usize,
    unnamed: Vec<u64>,
}

/// PLAIN byte arrays: each value's length, then its bytes.
fn plain_strings<S: AsRef<str>>(out: &mut Vec<u8>, values: impl IntoIterator<Item = S>) {
    for v in values {
        out.extend_from_slice(&(v.as_ref().len() as u32).to_le_bytes());
        out.extend_from_slice(v.as_ref().as_bytes());
    }
}

impl SyncDicts {
    fn new(counts: &[u64], names: (usize, &[u8]), unnamed: Vec<u64>, object_names: &HashMap<u64, String>) -> SyncDicts {
        let n = |k: u8| counts[k as usize];
        let has = [n(kinds::LOCK_ACQUIRE) + n(kinds::LOCK_REQUEST), 0, n(kinds::BARRIER_ENTER), n(kinds::COND_WAIT_ENTER)];
        let (mut labels, mut part_kind) = (Vec::new(), [0u32; 4]);
        for (i, label) in SYNC_LABELS.into_iter().enumerate() {
            if has[i] > 0 && !labels.contains(&label) {
                labels.push(label);
            }
            part_kind[i] = labels.iter().position(|&l| l == label).unwrap_or(0) as u32;
        }
        let mut objects = names.1.to_vec();
        plain_strings(&mut objects, unnamed.iter().map(|a| object_names.get(a).cloned().unwrap_or_else(|| format!("0x{a:x}"))));
        let mut kinds = Vec::new();
        plain_strings(&mut kinds, &labels);
        SyncDicts { kinds, n_kinds: labels.len(), part_kind, objects, n_names: names.0, unnamed }
    }
}

/// The addresses of the objects not named in the sync rows, sorted.
fn unnamed_objects(parts: &[SyncPart; 4]) -> Vec<u64> {
    // few, each in long runs of rows
    let (mut seen, mut last) = (std::collections::HashSet::new(), None);
    for p in parts {
        for (&n, &a) in p.name.iter().zip(&p.addr) {
            if n < 0 && last != Some(a) {
                seen.insert(a);
                last = Some(a);
            }
        }
    }
    let mut unnamed: Vec<u64> = seen.into_iter().collect();
    unnamed.sort_unstable();
    unnamed
}

/// The addresses of the objects not named that the sync rows will hold, sorted, from every
/// chunk's scan (None where one has none): the addresses of the scanned (name key, address)
/// pairs whose key has no name, as the pass names the records.
fn scanned_unnamed(chunks: &[Chunk]) -> Option<Vec<u64>> {
    let mut unnamed = Vec::new();
    for c in chunks {
        for ka in c.sync_keys?.chunks_exact(2) {
            if !c.has_names || c.names.get(ka[0]) < 0 {
                unnamed.push(ka[1]);
            }
        }
    }
    unnamed.sort_unstable();
    unnamed.dedup();
    Some(unnamed)
}

/// Where each part's rows start when the parts are laid end to end.
fn part_starts(parts: &[SyncPart; 4]) -> [usize; 5] {
    let mut starts = [0; 5];
    for (i, p) in parts.iter().enumerate() {
        starts[i + 1] = starts[i] + p.g.len();
    }
    starts
}

impl SyncPart {
    /// Appends rows a..b of `o`.
    fn extend_from(&mut self, o: &SyncPart, a: usize, b: usize) {
        self.g.extend_from_slice(&o.g[a..b]);
        self.name.extend_from_slice(&o.name[a..b]);
        self.addr.extend_from_slice(&o.addr[a..b]);
        self.request.extend_from_slice(&o.request[a..b]);
        self.acquire.extend_from_slice(&o.acquire[a..b]);
        self.acquire_ok.extend_from_slice(&o.acquire_ok[a..b]);
        self.release.extend_from_slice(&o.release[a..b]);
        self.release_ok.extend_from_slice(&o.release_ok[a..b]);
        for (c, oc) in self.comp.iter_mut().zip(&o.comp) {
            if !oc.is_empty() {
                c.extend_from_slice(&oc[a..b]);
            }
        }
    }

    /// Takes away the first n rows (written), keeping the rest in order.
    fn drain_front(&mut self, n: usize) {
        if n == 0 {
            return;
        }
        self.g.drain(..n);
        self.name.drain(..n);
        self.addr.drain(..n);
        self.request.drain(..n);
        self.acquire.drain(..n);
        self.acquire_ok.drain(..n);
        self.release.drain(..n);
        self.release_ok.drain(..n);
        for c in &mut self.comp {
            c.drain(..n.min(c.len()));
        }
    }
}

/// Rows lo..hi of the sync parts laid end to end: (the part holding them, the row of its first),
/// or copied into `tmp` where they straddle parts.
fn sync_rows<'a>(parts: &'a [SyncPart; 4], starts: &[usize; 5], lo: usize, hi: usize, tmp: &'a mut SyncPart) -> (&'a SyncPart, usize) {
    if let Some(i) = (0..4).find(|&i| starts[i] <= lo && hi <= starts[i + 1]) {
        return (&parts[i], starts[i]);
    }
    tmp.truncate(0);
    for (i, p) in parts.iter().enumerate() {
        let (a, b) = (lo.clamp(starts[i], starts[i + 1]), hi.clamp(starts[i], starts[i + 1]));
        tmp.extend_from(p, a - starts[i], b - starts[i]);
    }
    (tmp, lo)
}

/// What writing sync pages reuses: a page's kind and object indices and validity bitmaps
/// (acquire, release), rows copied where a page straddles parts; and the rows written.
#[derive(Default)]
struct SyncPage {
    written: usize,
    /// per object not named (SyncDicts::unnamed): whether a row written holds it
    used: Vec<bool>,
    kind: Vec<u32>,
    object: Vec<u32>,
    valid: [Vec<u8>; 2],
    /// wait_censored's bits
    censored: Vec<u8>,
    tmp: SyncPart,
}

impl SyncPage {
    /// For rows lo..hi of the parts laid end to end (`starts`), rows a.. of `p`: the kind
    /// indices, and the object indices where some object is not named (the names' are the
    /// rows' own); false where a row's object not named is not in the dictionary.
    fn fill(&mut self, sd: &SyncDicts, starts: &[usize; 5], p: &SyncPart, a: usize, lo: usize, hi: usize) -> bool {
        let b = a + hi - lo;
        self.kind.clear();
        for i in 0..4 {
            let n = hi.clamp(starts[i], starts[i + 1]) - lo.clamp(starts[i], starts[i + 1]);
            self.kind.extend(std::iter::repeat_n(sd.part_kind[i], n));
        }
        self.object.clear();
        self.used.resize(sd.unnamed.len(), false);
        let mut found = true;
        if !sd.unnamed.is_empty() {
            // the objects in long runs: the last one's index kept
            let mut last: Option<(u64, usize)> = None;
            for (&n, &addr) in p.name[a..b].iter().zip(&p.addr[a..b]) {
                if n >= 0 {
                    self.object.push(n as u32);
                    continue;
                }
                let i = match last {
                    Some((l, i)) if l == addr => i,
                    _ => match sd.unnamed.binary_search(&addr) {
                        Ok(i) => {
                            self.used[i] = true;
                            last = Some((addr, i));
                            i
                        }
                        Err(_) => {
                            found = false;
                            0
                        }
                    },
                };
                self.object.push((sd.n_names + i) as u32);
            }
        } else {
            found = p.name[a..b].iter().all(|&n| n >= 0);
        }
        found
    }

    /// wait_censored of rows a..b of `p`: the wait has no end recorded and is the thread's last
    /// record (`last[g]`, its records' latest time): the thread was killed waiting, or its
    /// recorder dropped the rest (buffer full), so the wait lasted at least until the trace
    /// stops knowing the thread (docs/trace-schema.md, sync).
    fn censored(&mut self, p: &SyncPart, a: usize, b: usize, last: &[i64]) {
        self.censored.clear();
        self.censored.resize((b - a).div_ceil(8), 0);
        for i in a..b {
            let open = p.acquire_ok[i] == 0 && p.request[i] >= last[p.g[i] as usize];
            self.censored[(i - a) >> 3] |= (open as u8) << ((i - a) & 7);
        }
    }

    /// The validity bitmaps of rows a..b of `p` (acquire, release) where `nullable`.
    fn validity(&mut self, p: &SyncPart, a: usize, b: usize, nullable: [bool; 2]) {
        for ((bits, ok), n) in self.valid.iter_mut().zip([&p.acquire_ok, &p.release_ok]).zip(nullable) {
            bits.clear();
            if n {
                bits.resize((b - a).div_ceil(8), 0);
                for (i, &v) in ok[a..b].iter().enumerate() {
                    bits[i >> 3] |= (v & 1) << (i & 7);
                }
            }
        }
    }
}

/// The rows of ok[a..b] that are not (nulls).
fn zeros(ok: &[u8], a: usize, b: usize) -> usize {
    ok[a..b].iter().filter(|&&v| v == 0).count()
}

/// The sync table's columns over rows a..b of `p` (`pg` filled for them; `nullable`: acquire,
/// release), with compensation's after its own (oslens.store.compensation).
#[allow(clippy::too_many_arguments)]
fn sync_columns<'a>(p: &'a SyncPart, a: usize, b: usize, sd: &'a SyncDicts, dicts: &'a Dicts, pg: &'a SyncPage, nullable: [bool; 2], comp: bool) -> Vec<Column<'a>> {
    let validity = |i: usize| nullable[i].then_some(&pg.valid[i][..]);
    let [pid, tid] = who(&p.g[a..b], dicts);
    let objects = if sd.unnamed.is_empty() { bytes_of(&p.name[a..b]) } else { bytes_of(&pg.object) };
    let mut cols = vec![
        dict_col("kind", parquet::BYTE_ARRAY, Some(parquet::UTF8), bytes_of(&pg.kind), 4, (sd.n_kinds, &sd.kinds), false),
        dict_col("object", parquet::BYTE_ARRAY, Some(parquet::UTF8), objects, 4, (sd.n_names + sd.unnamed.len(), &sd.objects), false),
        pid,
        tid,
        i64_col("request_ns", &p.request[a..b], true, true),
        Column { validity: validity(0), ..i64_col("acquire_ns", &p.acquire[a..b], false, true) },
        Column { validity: validity(1), ..i64_col("release_ns", &p.release[a..b], false, true) },
        plain_col("address", parquet::INT64, Some(parquet::UINT_64), bytes_of(&p.addr[a..b]), 8),
        plain_col("wait_censored", parquet::BOOLEAN, None, &pg.censored, 0),
    ];
    if comp {
        for (j, name) in ["request_comp_ns", "acquire_comp_ns", "release_comp_ns"].into_iter().enumerate() {
            let validity = if j == 0 { None } else { validity(j - 1) };
            cols.push(Column { validity, ..i64_col(name, &p.comp[j][a..b], true, true) });
        }
    }
    cols
}

/// The first `upto` rows of the sync parts laid end to end written a page at a time while a
/// whole page is there (all of them with `last`); returns the rows written. The object column's
/// dictionary is decided by the first page (names only, or names and the objects not named):
/// a later page that needs another makes the pass run again with the objects held to its end.
#[allow(clippy::too_many_arguments)]
fn sync_pages(d: &Derived, sd: &SyncDicts, upto: usize, last: bool, dicts: &Dicts, st: &mut Streams, flags: &mut [Option<bool>; NULLABLE], pg: &mut SyncPage) -> Result<usize, PassErr> {
    let starts = part_starts(&d.sync);
    let comp = st.costs.is_some();
    let mut lo = 0;
    while let Some(sink) = st.sync.as_mut() {
        let n = sink.cap().min(upto - lo);
        if n == 0 || (n < sink.cap() && !last) {
            break;
        }
        decide(flags, N_SYNC_UNNAMED, sd.unnamed.len())?;
        let mut tmp = std::mem::take(&mut pg.tmp);
        let (p, first) = sync_rows(&d.sync, &starts, lo, lo + n, &mut tmp);
        let a = lo - first;
        if !pg.fill(sd, &starts, p, a, lo, lo + n) {
            // the dictionary from the scans lacks an object: written again, held to the end
            return Err(PassErr::Retry(N_SYNC_HELD));
        }
        let nullable = [decide(flags, N_SYNC_ACQUIRE, zeros(&p.acquire_ok, a, a + n))?, decide(flags, N_SYNC_RELEASE, zeros(&p.release_ok, a, a + n))?];
        pg.validity(p, a, a + n, nullable);
        pg.censored(p, a, a + n, &d.extent_max);
        sink.page(&sync_columns(p, a, a + n, sd, dicts, pg, nullable, comp), n)?;
        pg.tmp = tmp;
        pg.written += n;
        lo += n;
    }
    Ok(lo)
}

/// A thread is done: the mutex acquisitions' whole pages written where the object dictionary
/// is known before the first page: from the scans (the names, then the objects not named), or
/// while every object so far has its name (the names).
fn sync_thread_done(d: &mut Derived, dicts: &Dicts, st: &mut Streams, flags: &mut [Option<bool>; NULLABLE], sc: &mut Scratch) -> Result<(), PassErr> {
    if st.sync.is_none() {
        return Ok(());
    }
    d.sync_peak = d.sync_peak.max(part_starts(&d.sync)[4]);
    if !sc.sync_known && (d.sync_unnamed || flags[N_SYNC_UNNAMED] == Some(true)) {
        return Ok(());
    }
    let sd = sc.sync_dicts.get_or_insert_with(|| SyncDicts::new(&d.counts, dicts.instrument, Vec::new(), &st.object_names));
    let done = sync_pages(d, sd, d.sync[0].g.len(), false, dicts, st, flags, &mut sc.sync)?;
    d.sync[0].drain_front(done);
    Ok(())
}

/// The sync rows still held (the mutex acquisitions not yet written, then the requests never
/// acquired, the barrier and the condition waits), and the file's footer, where sync is
/// streamed: when the pass is done, every object is known (the scans' dictionary, where it was
/// used, must then be that of the rows: no object in it that no row holds).
fn write_sync(d: &mut Derived, dicts: &Dicts, st: &mut Streams, flags: &mut [Option<bool>; NULLABLE], sc: &mut Scratch) -> Result<(), PassErr> {
    if st.sync.is_none() {
        return Ok(());
    }
    let total = part_starts(&d.sync)[4];
    d.sync_peak = d.sync_peak.max(total);
    let sd = match sc.sync_dicts.take() {
        Some(sd) if sc.sync_known => sd,
        _ => SyncDicts::new(&d.counts, dicts.instrument, unnamed_objects(&d.sync), &st.object_names),
    };
    let pg = &mut sc.sync;
    sync_pages(d, &sd, total, true, dicts, st, flags, pg)?;
    if sc.sync_known && pg.used.iter().any(|&u| !u) {
        return Err(PassErr::Retry(N_SYNC_HELD));
    }
    let nullable = [flags[N_SYNC_ACQUIRE] == Some(true), flags[N_SYNC_RELEASE] == Some(true)];
    let tmp = std::mem::take(&mut pg.tmp);
    let _ = pg.fill(&sd, &[0; 5], &tmp, 0, 0, 0);
    pg.validity(&tmp, 0, 0, nullable);
    pg.censored(&tmp, 0, 0, &d.extent_max);
    if let Some(sink) = st.sync.take() {
        sink.w.finish(&sync_columns(&tmp, 0, 0, &sd, dicts, pg, nullable, st.costs.is_some()))?;
    }
    d.sync = Default::default();
    d.sync_rows = pg.written;
    Ok(())
}

/// app_events' columns over one group's buffers, as oslens.store.native_parquet describes the
/// table app_tables.build makes (dictionary pid, tid, cpu, instrument and kind; ts delta-encoded;
/// min/max statistics for ts, pid, tid and cpu).
fn columns<'a>(grp: &'a Group, d: &'a Dicts, nullable: [bool; 2], cpu_dict: &'a [u8], comp: bool) -> Vec<Column<'a>> {
    let n = grp.len;
    let col = plain_col;
    let dict = |(count, plain): (usize, &'a [u8])| Some(Dictionary { count, plain });
    let cpu = if grp.cpu_top < 1 << 15 {
        let top = grp.cpu_top as usize;
        Column { dict: Some(Dictionary { count: top + 1, plain: &cpu_dict[..(top + 1) * 8] }), stats: true, ..col("cpu", parquet::INT64, None, bytes_of(&grp.cpu[..n]), 2) }
    } else {
        Column { stats: true, ..col("cpu", parquet::INT64, None, bytes_of(&grp.cpu_wide), 8) }
    };
    let mut cols = vec![
        Column { delta: true, stats: true, ..col("ts", parquet::INT64, None, bytes_of(&grp.ts[..n]), 8) },
        Column { dict: dict(d.pid), stats: true, ..col("pid", parquet::INT64, None, bytes_of(&grp.g[..n]), 4) },
        Column { dict: dict(d.tid), stats: true, ..col("tid", parquet::INT64, None, bytes_of(&grp.g[..n]), 4) },
        cpu,
        Column {
            dict: dict(d.instrument),
            validity: nullable[0].then_some(&grp.name_valid[..n.div_ceil(8)]),
            ..col("instrument", parquet::BYTE_ARRAY, Some(parquet::UTF8), bytes_of(&grp.name[..n]), 4)
        },
        Column { dict: dict(d.kind), ..col("kind", parquet::BYTE_ARRAY, Some(parquet::UTF8), &grp.kind[..n], 1) },
        col("value", parquet::INT64, None, bytes_of(&grp.value[..n]), 8),
        Column {
            data: Some(&grp.data),
            validity: nullable[1].then_some(&grp.pay_valid[..n.div_ceil(8)]),
            ..col("payload", parquet::BYTE_ARRAY, None, bytes_of(&grp.offsets[..n + 1]), 8)
        },
        col("id", parquet::INT32, Some(parquet::UINT_32), bytes_of(&grp.id[..n]), 4),
    ];
    if comp {
        // oslens.store.compensation's column, appended after the table's own
        cols.push(Column { delta: true, stats: true, ..col("ts_comp_ns", parquet::INT64, None, bytes_of(&grp.ts_comp[..n]), 8) });
    }
    cols
}

#[cfg(test)]
mod tests {
    use super::*;

    /// compensate.ThreadCosts.at by its definition: the cost before the first record whose
    /// running maximum reaches t, the whole cost where none does.
    fn cost_before_reference(ts: &[i64], costs: &[f64], t: i64) -> f64 {
        let mut max = i64::MIN;
        let mut before = 0.0;
        for (&x, &c) in ts.iter().zip(costs) {
            max = max.max(x);
            if max >= t {
                return before;
            }
            before += c;
        }
        before
    }

    #[test]
    fn cost_before_follows_the_running_maximum_at_every_prefix() {
        // times that tie and step back, as records of one thread on several CPUs can
        let ts: Vec<i64> = (0..400i64).map(|i| 3 * i + (i * 7919 % 11) - 7).collect();
        let costs: Vec<f64> = (0..400).map(|i| 1.0 + (i % 5) as f64 * 0.25).collect();
        let mut cp = Comp::default();
        for (i, (&t, &c)) in ts.iter().zip(&costs).enumerate() {
            if cp.bp_ts.last().is_none_or(|&m| t > m) {
                cp.bp_ts.push(t);
                cp.bp_before.push(cp.run_cost);
            }
            // what the pass asks as the records go by: times up to the running maximum
            let max = *cp.bp_ts.last().unwrap();
            for q in [t, t - 1, t - 9, max, ts[0] - 1, ts[i / 2]] {
                if q <= max {
                    assert_eq!(cp.before(q), cost_before_reference(&ts, &costs, q), "t {q} after record {i}");
                }
            }
            cp.run_cost += c;
        }
        // at the thread's end every time is answerable, past the last one too
        for q in ts[0] - 5..ts[399] + 5 {
            assert_eq!(cp.before(q), cost_before_reference(&ts, &costs, q), "t {q} at the end");
        }
    }
}
