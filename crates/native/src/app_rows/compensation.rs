//! Compensation's bookkeeping (oslens.calibrate.compensate): each time less the cost of the
//! thread's records before it, computed as the records go by.
//!
//! A lookup by time needs the thread's breakpoints (below); they are kept for the latest
//! `window` of them only, with a mark every MARK_EVERY breakpoints over the whole thread (its
//! time, cost before and record): a time older than the window is answered exactly from the
//! mark before it, by adding up again the costs of the records after the mark, read again
//! (docs/trace-schema.md, "Import memory").

use super::clock::{rint, Clock};
use super::source::{Chunk, Records};
use oslens_format::kinds;
use oslens_format::record::Record;
use std::cell::RefCell;

/// Breakpoints kept by default (16 bytes each, up to twice as many at once: 32 MiB); the
/// environment's OSLENS_IMPORT_COMP_WINDOW overrides it (tests set a few to look up old times).
const WINDOW: usize = 1 << 20;
/// A mark every this many breakpoints (24 bytes each: 4.7 MiB for a thread of 200 M records);
/// an old time's lookup adds up the costs of about half as many records.
const MARK_EVERY: usize = 1024;

/// The breakpoints to keep (OSLENS_IMPORT_COMP_WINDOW, else WINDOW).
fn window() -> usize {
    std::env::var("OSLENS_IMPORT_COMP_WINDOW").ok().and_then(|v| v.parse().ok()).unwrap_or(WINDOW).max(1)
}

/// A breakpoint kept over the whole thread: its time, the cost before it and its record (chunk
/// index, record index in the chunk).
#[derive(Clone, Copy)]
struct Mark {
    ts: i64,
    before: f64,
    chunk: u32,
    record: u32,
}

/// Where an old time's lookup reads the thread's records again: the pass's chunks and clock,
/// and the last chunk read again (most lookups fall in the same one).
pub struct Far<'a> {
    pub chunks: &'a [Chunk<'a>],
    pub clock: Clock,
    cache: RefCell<Option<(usize, Records<'a>)>>,
    /// a chunk that could not be read again (the pass stops with it: `failed`)
    error: RefCell<Option<std::io::Error>>,
}

impl<'a> Far<'a> {
    pub fn new(chunks: &'a [Chunk<'a>], clock: Clock) -> Far<'a> {
        Far { chunks, clock, cache: RefCell::new(None), error: RefCell::new(None) }
    }

    /// The error of a chunk that could not be read again, where one could not: the lookups that
    /// needed it were answered wrong, so the pass must stop.
    pub fn failed(&self) -> Option<std::io::Error> {
        self.error.borrow_mut().take()
    }

    /// The chunk read again let go (a new thread).
    pub fn forget(&self) {
        self.cache.borrow_mut().take();
    }
}

/// cost of its earlier records at each time its records' running maximum rises (the breakpoints
/// a lookup by time needs: the first record whose running maximum reaches a time is always one
/// of them) and its cost so far; per thread, its records per kind and its pauses' sum.
#[derive(Default)]
pub struct Comp {
    /// the latest breakpoints (a window: older ones let go, see `marks`)
    bp_ts: Vec<i64>,
    bp_before: Vec<f64>,
    /// the latest breakpoint let go from the window (i64::MIN: none)
    dropped_ts: i64,
    /// the thread's breakpoints so far
    n_bp: usize,
    marks: Vec<Mark>,
    window: usize,
    /// a mark every this many breakpoints (MARK_EVERY, or the window where smaller)
    mark_every: usize,
    run_cost: f64,
    /// records per thread and kind (g * 256 + kind)
    pub kinds: Vec<u64>,
    pub pause_ns: Vec<i64>,
    /// per record kind: what one record costs (ns, in vitro); a pause costs its value instead
    costs: Vec<f64>,
}

impl Comp {
    /// A new thread: no records yet.
    pub fn reset(&mut self) {
        self.bp_ts.clear();
        self.bp_before.clear();
        self.dropped_ts = i64::MIN;
        self.n_bp = 0;
        self.marks.clear();
        self.run_cost = 0.0;
    }

    /// A record's cost: its kind's, a pause's value.
    #[inline(always)]
    fn cost(&self, kind: u8, value: i64) -> f64 {
        if kind == kinds::PAUSE {
            value.max(0) as f64
        } else {
            self.costs[kind as usize]
        }
    }

    /// The cost of the thread's records before time t (compensate.ThreadCosts.at): before the
    /// first record whose running maximum reaches t, all of them where none does. Searched back
    /// from the latest breakpoint, where the times looked up lie (a record's own time, a timer's
    /// start): the breakpoints seen so far always hold the answer for a time no later than them.
    fn before(&self, t: i64, far: &Far) -> f64 {
        let ts = &self.bp_ts;
        let n = ts.len();
        if n == 0 || ts[n - 1] < t {
            return self.run_cost;
        }
        if t <= self.dropped_ts {
            return self.before_far(t, far);
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

    /// before(t) for a time no later than a breakpoint let go from the window: from the last
    /// mark before t, the thread's records read again and their costs added up in the order
    /// track added them (so the sum is the same, bit for bit) to the first breakpoint at t or
    /// after.
    #[cold]
    fn before_far(&self, t: i64, far: &Far) -> f64 {
        let k = self.marks.partition_point(|m| m.ts < t);
        if k == 0 {
            return self.marks.first().map_or(0.0, |m| m.before);
        }
        let m = self.marks[k - 1];
        let (mut run, mut max) = (m.before, i64::MIN);
        let mut cache = far.cache.borrow_mut();
        for ci in m.chunk as usize..far.chunks.len() {
            let c = &far.chunks[ci];
            if cache.as_ref().is_none_or(|(at, _)| *at != ci) {
                *cache = None; // the one read before let go first
                match c.records() {
                    Ok(r) => *cache = Some((ci, r)),
                    Err(e) => {
                        far.error.borrow_mut().get_or_insert(e);
                        return run;
                    }
                }
            }
            let recs = &cache.as_ref().unwrap().1;
            let from = if ci == m.chunk as usize { m.record as usize } else { 0 };
            for raw in recs[from * 32..].chunks_exact(32) {
                let r = Record::from_bytes(raw);
                if r.kind == kinds::NAME || r.kind == kinds::CONT || r.kind == kinds::EMPTY {
                    continue;
                }
                let (ts, value) = far.clock.decode(&r, c.tsc);
                if ts > max {
                    if ts >= t {
                        return run;
                    }
                    max = ts;
                }
                run += self.cost(r.kind, value);
            }
        }
        run
    }

    /// t less the cost before it, rounded as numpy's rint
    pub fn comp(&self, t: i64, far: &Far) -> i64 {
        t.wrapping_sub(rint(self.before(t, far)) as i64)
    }

    /// A new breakpoint at `ts` of the record `at` (chunk, record index): kept in the window,
    /// marked every MARK_EVERY, the window's older half let go when it is full.
    #[inline(always)]
    fn breakpoint(&mut self, ts: i64, at: (usize, usize)) {
        if self.n_bp % self.mark_every == 0 {
            self.marks.push(Mark { ts, before: self.run_cost, chunk: at.0 as u32, record: at.1 as u32 });
        }
        self.n_bp += 1;
        if self.bp_ts.len() == 2 * self.window {
            self.dropped_ts = self.bp_ts[self.window - 1];
            self.bp_ts.drain(..self.window);
            self.bp_before.drain(..self.window);
        }
        self.bp_ts.push(ts);
        self.bp_before.push(self.run_cost);
    }
}


/// One record's compensated times (Comp::track).
pub struct Step {
    /// ts less the cost of the thread's earlier records (app_events' ts_comp_ns)
    pub ts_comp: i64,
    /// the record's time as the derived tables' compensated columns have it (a lookup by time:
    /// its own cost-before where it raises the thread's running maximum)
    pub at: i64,
    /// a timer's compensated start; None where the start lies after every record so far (a
    /// negative elapsed time): its cost is known when the thread's records are all seen
    pub timer_start: Option<i64>,
}

impl Comp {
    /// Bookkeeping for `threads` threads, the longest of `most` records, at `costs` per kind.
    pub fn new(costs: &[f64], threads: usize, most: usize) -> Comp {
        let mut t = vec![0.0; 256];
        t.iter_mut().zip(costs).for_each(|(a, b)| *a = *b);
        let window = window();
        let mut cp = Comp { costs: t, kinds: vec![0; threads * 256], pause_ns: vec![0; threads], window, mark_every: MARK_EVERY.min(window), dropped_ts: i64::MIN, ..Default::default() };
        // the breakpoints: at most one per record of the longest thread, two windows at most
        let keep = most.min(2 * window);
        cp.bp_ts.reserve_exact(keep);
        cp.bp_before.reserve_exact(keep);
        cp
    }

    /// A record of thread `g` of `kind` at `ts` (`value`: a pause's duration; `timer_start`: a
    /// timer stop's start; `at`: its chunk and index there): its compensated times, its cost
    /// then added to the thread's.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    pub fn track(&mut self, g: usize, kind: u8, ts: i64, value: i64, timer_start: i64, pos: (usize, usize), far: &Far) -> Step {
        // ts minus the cost of the thread's earlier records (np.rint, then to int64)
        let ts_comp = ts.wrapping_sub(rint(self.run_cost) as i64);
        let at = if self.bp_ts.last().is_none_or(|&m| ts > m) {
            self.breakpoint(ts, pos);
            ts_comp
        } else {
            self.comp(ts, far)
        };
        let mut start = Some(0);
        if kind == kinds::TIMER_STOP {
            start = self.bp_ts.last().is_some_and(|&m| timer_start <= m).then(|| self.comp(timer_start, far));
        }
        if kind == kinds::PAUSE {
            self.pause_ns[g] += value.max(0);
        }
        self.run_cost += self.cost(kind, value);
        self.kinds[g * 256 + kind as usize] += 1;
        Step { ts_comp, at, timer_start: start }
    }
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

    /// 400 records of one thread in chunks of 50: times that tie and step back, as records of
    /// one thread on several CPUs can; events and counters at their kind's cost, pauses at their
    /// value, and a name record (no cost) now and then. Returns the chunks' bytes, and the time
    /// and cost of each record that has one.
    fn thread(per_kind: &[f64]) -> (Vec<Vec<u8>>, Vec<i64>, Vec<f64>) {
        let (mut bytes, mut ts, mut costs) = (vec![Vec::new(); 8], Vec::new(), Vec::new());
        for i in 0..400i64 {
            let t = 3 * i + (i * 7919 % 11) - 7 + 100;
            let kind = [kinds::EVENT, kinds::COUNTER, kinds::EVENT, kinds::PAUSE, kinds::EVENT, kinds::NAME, kinds::COUNTER][i as usize % 7];
            let r = Record::new(t as u64, 0, 0, kind, (i % 4) as u64, 0);
            bytes[i as usize / 50].extend_from_slice(&r.to_bytes());
            if kind != kinds::NAME {
                ts.push(t);
                costs.push(if kind == kinds::PAUSE { (i % 4) as f64 } else { per_kind[kind as usize] });
            }
        }
        (bytes, ts, costs)
    }

    #[test]
    fn cost_before_follows_the_running_maximum_at_every_prefix_kept_or_let_go() {
        let mut per_kind = vec![0.0; 256];
        per_kind[kinds::EVENT as usize] = 1.25;
        per_kind[kinds::COUNTER as usize] = 0.3;
        let (bytes, ts, costs) = thread(&per_kind);
        let names = crate::names::NameMap::new(&[], &[]);
        let payloads = std::collections::HashMap::new();
        let chunks: Vec<Chunk> = bytes
            .iter()
            .map(|b| Chunk { records: super::super::source::Source::Held(b), g: 0, tsc: false, names: &names, has_names: false, payloads: &payloads, counts: None, sync_keys: None })
            .collect();
        let clock = Clock { r0: 0, n0: 0, slope: 1.0, intercept: 0.0 };
        // every breakpoint kept, and only the latest few (older times' costs added up again)
        for window in [1 << 20, 5, 1] {
            let far = Far::new(&chunks, clock);
            let mut cp = Comp::new(&per_kind, 1, 400);
            cp.window = window;
            cp.mark_every = MARK_EVERY.min(window);
            let mut n = 0;
            for (ci, c) in chunks.iter().enumerate() {
                for (i, raw) in c.records().unwrap().chunks_exact(32).enumerate() {
                    let r = Record::from_bytes(raw);
                    if r.kind == kinds::NAME {
                        continue;
                    }
                    let t = r.ts as i64;
                    cp.track(0, r.kind, t, r.a as i64, 0, (ci, i), &far);
                    // what the pass asks as the records go by: times up to the running maximum
                    let max = *cp.bp_ts.last().unwrap();
                    for q in [t, t - 1, t - 9, max, ts[0] - 1, ts[n / 2]] {
                        if q <= max {
                            assert_eq!(cp.before(q, &far), cost_before_reference(&ts[..=n], &costs[..=n], q), "t {q} after record {n}, window {window}");
                        }
                    }
                    n += 1;
                }
            }
            assert_eq!(n, ts.len());
            assert_eq!(window < 10, cp.dropped_ts > ts[0] && cp.marks.len() > 1, "window {window}: breakpoints let go");
            // at the thread's end every time is answerable, past the last one too
            for q in ts[0] - 5..ts[ts.len() - 1] + 5 {
                assert_eq!(cp.before(q, &far), cost_before_reference(&ts, &costs, q), "t {q} at the end, window {window}");
            }
        }
    }
}
