//! The pass: every chunk's records read once, in the order the threads' records are laid end to
//! end, each record handed to the trackers of the tables it makes rows of (app_events, the
//! derived tables, sync, compensation); a thread's rows finished when its records are all seen.

use super::clock::Clock;
use super::columns::Dicts;
use super::compensation::{Comp, Far, Step};
use super::derived::{self, Derived, PageScratch, Streams};
use super::events::Events;
use super::flags::{Flags, PassErr, N_ADAPT, N_COUNTERS, N_FUNCTIONS, N_PAUSES, N_REGIONS, N_TIMERS};
use super::nesting::{self, PairEv};
use crate::pairing::PairScratch;
use super::scan::{count_kinds, name_key};
use super::source::Chunk;
use super::sync::{self, SyncEv, ACQUIRED};
use super::sync_table::SyncWriter;
use oslens_format::kinds;
use oslens_format::record::Record;

/// The current thread's trackers.
struct Live {
    g: i32,
    first_chunk: usize,
    regions: nesting::Tracker,
    functions: nesting::Tracker,
    sync: sync::Tracker,
}

/// A thread's begin/end and sync events gathered again from its records, where a pairing must
/// be done again (nesting::Tracker::pair_again, sync::Tracker::pair_again).
#[derive(Default)]
struct Gathered {
    regions: Vec<PairEv>,
    functions: Vec<PairEv>,
    sync: Vec<SyncEv>,
    keys: Vec<(bool, u64)>,
    pairs: PairScratch,
    sync_scratch: sync::Scratch,
}

/// What the pass holds while it runs.
struct Pass<'a> {
    chunks: &'a [Chunk<'a>],
    clock: Clock,
    dicts: &'a Dicts<'a>,
    st: &'a mut Streams,
    flags: &'a mut Flags,
    d: Derived,
    live: Live,
    gathered: Gathered,
    pages: PageScratch,
    sync_writer: SyncWriter,
    /// where compensation's lookups of old times read the thread's records again
    far: Far<'a>,
}

/// The records per kind of every chunk and their largest CPU number (from the scans where known).
fn count(chunks: &[Chunk], counts: &mut [u64]) -> std::io::Result<u16> {
    let mut cpu_top = 0u16;
    for c in chunks {
        let top = match c.counts {
            Some((k, top)) => {
                counts.iter_mut().zip(k).for_each(|(a, b)| *a += b);
                top
            }
            None => count_kinds(&c.records()?, counts),
        };
        cpu_top = cpu_top.max(top);
    }
    Ok(cpu_top)
}

#[allow(clippy::too_many_arguments)]
pub fn pass(
    chunks: &[Chunk],
    threads: usize,
    clock: Clock,
    dicts: &Dicts,
    file: Option<std::fs::File>,
    group_rows: usize,
    flags: &mut Flags,
    st: &mut Streams,
) -> Result<Derived, PassErr> {
    let mut d = Derived { counts: vec![0; 256], extent_min: vec![i64::MAX; threads], extent_max: vec![i64::MIN; threads], ..Default::default() };
    // the kinds counted first, so each derived column is allocated once at its size
    let cpu_top = count(chunks, &mut d.counts)?;
    let comp_on = st.costs.is_some();
    d.reserve(comp_on);
    if let Some(costs) = st.costs.as_ref() {
        let mut per_thread = vec![0usize; threads];
        chunks.iter().for_each(|c| per_thread[c.g] += c.len() / 32);
        d.comp = Some(Comp::new(costs, threads, per_thread.into_iter().max().unwrap_or(0)));
    }
    let sync_writer = SyncWriter::new(chunks, &d, dicts, st, flags);
    let group_rows = group_rows.max(1);
    let total = d.counts.iter().sum::<u64>() as usize;
    let mut events = Events::new(dicts, file, group_rows, total, cpu_top, comp_on)?;
    let live = Live {
        g: -1,
        first_chunk: 0,
        // a program's outermost call (main) and a region around the whole program are open to
        // its end: the rows behind them are written before they end and patched
        // (docs/trace-schema.md, "Import memory")
        regions: nesting::Tracker::new(false).early(st.regions.is_some()),
        functions: nesting::Tracker::new(true).early(st.functions.is_some()),
        sync: Default::default(),
    };
    let mut p = Pass { chunks, clock, dicts, st, flags, d, live, gathered: Default::default(), pages: Default::default(), sync_writer, far: Far::new(chunks, clock) };
    let mut rows = 0usize;
    for (ci, c) in chunks.iter().enumerate() {
        if c.g as i32 != p.live.g {
            if p.live.g >= 0 {
                p.thread_done(ci)?;
            }
            p.thread_start(c.g as i32, ci);
        }
        rows += p.chunk(ci, c, &mut events)?;
    }
    if p.live.g >= 0 {
        p.thread_done(chunks.len())?;
    }
    p.d.rows = rows;
    events.finish(p.flags)?;
    p.finish()
}

impl Pass<'_> {
    fn thread_start(&mut self, g: i32, first_chunk: usize) {
        let comp = self.d.comp.is_some();
        let live = &mut self.live;
        live.g = g;
        live.first_chunk = first_chunk;
        live.regions.start(self.d.regions.g.len(), comp, self.d.regions.late.len());
        live.functions.start(self.d.functions.g.len(), comp, self.d.functions.late.len());
        live.sync.start(g, &self.d.sync, comp);
        if let Some(cp) = self.d.comp.as_mut() {
            cp.reset();
        }
        self.far.forget();
    }

    /// One chunk's records; returns the rows of app_events they made.
    fn chunk(&mut self, ci: usize, c: &Chunk, events: &mut Events) -> Result<usize, PassErr> {
        let g = c.g as i32;
        let (mut lo, mut hi) = (self.d.extent_min[c.g], self.d.extent_max[c.g]);
        let records = c.records()?; // let go at the end of the chunk (Source::Reload)
        let mut rows = 0;
        for (i, raw) in records.chunks_exact(32).enumerate() {
            let r = Record::from_bytes(raw);
            let (ts, value) = self.clock.decode(&r, c.tsc);
            lo = lo.min(ts);
            hi = hi.max(ts);
            if r.kind == kinds::NAME || r.kind == kinds::CONT || r.kind == kinds::EMPTY {
                continue;
            }
            let name = if c.has_names { c.names.get(name_key(&r)) } else { -1 };
            let timer_start = ts.wrapping_sub(value);
            let step = match self.d.comp.as_mut() {
                Some(cp) => {
                    let step = cp.track(c.g, r.kind, ts, value, timer_start, (ci, i), &self.far);
                    if ts >= self.d.timers.next_start {
                        // timers waiting for a record at their start: this one reaches it
                        let far = &self.far;
                        self.d.timers.resolve(ts, self.st.written(N_TIMERS), |t| cp.comp(t, far));
                    }
                    step
                }
                None => Step { ts_comp: 0, at: 0, timer_start: Some(0) },
            };
            events.push(&r, (ts, step.ts_comp), value, g, name, (c.payloads, i), self.flags)?;
            self.derived(&r, g, (ts, step.at), value, name, (timer_start, step.timer_start))?;
            rows += 1;
        }
        self.d.extent_min[c.g] = lo;
        self.d.extent_max[c.g] = hi;
        drop(records);
        if let Some(e) = self.far.failed() {
            return Err(PassErr::Io(e));
        }
        self.write_finished()?;
        Ok(rows)
    }

    /// The whole pages of the current thread's rows written as its records go by, not held to
    /// its end: regions and functions (those still open too, patched later: nesting.rs Late),
    /// mutex acquisitions before the oldest lock still held; the other sync rows finished go to
    /// disk until the pass's end (docs/trace-schema.md, "Import memory").
    fn write_finished(&mut self) -> Result<(), PassErr> {
        for table in [N_REGIONS, N_FUNCTIONS] {
            if self.st.cap(table).is_none() {
                continue;
            }
            let len = self.d.len(table);
            let (held, tracker) = match table {
                N_REGIONS => (&mut self.d.regions_peak, &mut self.live.regions),
                _ => (&mut self.d.functions_peak, &mut self.live.functions),
            };
            *held = (*held).max(len);
            if let Some(upto) = tracker.o.writable(len) {
                let first = self.st.written(table);
                let done = derived::drain_pages(table, &self.d, upto, false, self.dicts, self.st, self.flags, &mut self.pages)?;
                tracker.o.going_early(done, first, if table == N_REGIONS { &self.d.regions } else { &self.d.functions });
                self.d.drain_front(table, done);
                tracker.o.shift(done);
            }
        }
        if let Some(upto) = self.live.sync.mutex.finished(self.d.sync[ACQUIRED].g.len()) {
            let done = self.sync_writer.write_finished(&mut self.d, upto, self.dicts, self.st, self.flags)?;
            self.live.sync.mutex.shift(done);
        }
        self.sync_writer.spill_finished(&mut self.d, &mut self.live.sync, self.st)
    }

    /// A record's rows in the derived tables (`at`: its time and compensated time; `start`: a
    /// timer's start and its compensated start, None where it waits for the thread's end).
    #[inline(always)]
    fn derived(&mut self, r: &Record, g: i32, at: (i64, i64), value: i64, name: i32, start: (i64, Option<i64>)) -> Result<(), PassErr> {
        let (d, live) = (&mut self.d, &mut self.live);
        let comp = d.comp.is_some();
        match r.kind {
            kinds::REGION_BEGIN => live.regions.begin(&mut d.regions, g, at, r.id as u64, name, 0),
            kinds::REGION_END => live.regions.end(&mut d.regions, at, r.id as u64),
            kinds::FUNC_ENTRY => live.functions.begin(&mut d.functions, g, at, r.a, name, r.b),
            kinds::FUNC_EXIT => live.functions.end(&mut d.functions, at, r.a),
            kinds::LOCK_REQUEST..=kinds::COND_WAIT_EXIT => {
                live.sync.event(&mut d.sync, SyncEv { ts: at.0, comp: at.1, kind: r.kind, addr: r.a, name });
                self.sync_writer.spill_if_full(d, &mut live.sync, self.st)?;
            }
            kinds::COUNTER => {
                let c = &mut d.counters;
                c.ts.push(at.0);
                c.g.push(g);
                c.name.push(name);
                c.value.push(value);
                c.reason.push(if self.st.counters.is_some() { self.st.counter_reasons.index(r.b) } else { r.b });
                if comp {
                    c.comp.push(at.1);
                }
                self.page_if_full(N_COUNTERS)?;
            }
            kinds::TIMER_STOP => {
                let t = &mut d.timers;
                if start.1.is_none() {
                    t.wait(self.st.written(N_TIMERS) + t.g.len(), start.0);
                }
                t.g.push(g);
                t.name.push(name);
                t.start.push(start.0);
                t.stop.push(at.0);
                t.elapsed.push(value);
                if comp {
                    let s = start.1.unwrap_or(0);
                    t.comp[0].push(s);
                    t.comp[1].push(at.1);
                    t.comp[2].push(at.1.wrapping_sub(s));
                }
                self.timers_pages()?;
            }
            kinds::PAUSE => {
                let p = &mut d.pauses;
                p.g.push(g);
                p.start.push(at.0.wrapping_sub(value));
                p.end.push(at.0);
                p.duration.push(value);
                p.reason.push(if self.st.pauses.is_some() { self.st.pause_reasons.index(r.b) } else { r.b });
                self.page_if_full(N_PAUSES)?;
            }
            kinds::ADAPT => {
                let a = &mut d.adapt;
                a.ts.push(at.0);
                a.g.push(g);
                a.name.push(name);
                a.error.push(r.a as i64);
                a.policy.push(r.b as i64);
                self.page_if_full(N_ADAPT)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// A streamed table's page written where its rows fill one.
    #[inline(always)]
    fn page_if_full(&mut self, table: usize) -> Result<(), PassErr> {
        if self.st.cap(table) == Some(self.d.len(table)) {
            derived::write_pages(table, &mut self.d, false, self.dicts, self.st, self.flags, &mut self.pages)?;
        }
        Ok(())
    }

    /// timers' whole pages written before the first row still waiting for its compensated
    /// start, or past it where two pages are held (Timers::writable).
    fn timers_pages(&mut self) -> Result<(), PassErr> {
        let Some(cap) = self.st.cap(N_TIMERS) else { return Ok(()) };
        let t = &mut self.d.timers;
        t.peak = t.peak.max(t.g.len());
        if t.g.len() < cap {
            return Ok(());
        }
        let written = self.st.written(N_TIMERS);
        let upto = t.writable(written, cap);
        let done = derived::drain_pages(N_TIMERS, &self.d, upto, false, self.dicts, self.st, self.flags, &mut self.pages)?;
        self.d.timers.leaving(written, done);
        self.d.drain_front(N_TIMERS, done);
        Ok(())
    }

    /// The current thread's records are all seen (its chunks end before chunk `upto`): its
    /// begin/end and sync events paired (again from its records where the live pairing could
    /// not), its unclosed regions and functions ended when it ended (app_tables._chunk_extent),
    /// its compensated times completed, and the whole pages of its streamed tables written.
    fn thread_done(&mut self, upto: usize) -> Result<(), PassErr> {
        let g = self.live.g as usize;
        self.live.sync.finish(&mut self.d.sync);
        self.pair_again(upto)?;
        let mut end = self.d.extent_max[g];
        if let Some(&(calib, open)) = self.st.thread_end.get(g) {
            end = end.max(calib);
            if open != i64::MIN && end != i64::MIN {
                end = end.max(open);
            }
        }
        self.live.regions.close_open(&mut self.d.regions, end);
        self.live.functions.close_open(&mut self.d.functions, end);
        self.compensate_thread();
        let (cp, far) = (self.d.comp.as_ref(), &self.far);
        self.live.regions.finish_early(&mut self.d.regions, |t| cp.map_or(0, |c| c.comp(t, far)));
        self.live.functions.finish_early(&mut self.d.functions, |t| cp.map_or(0, |c| c.comp(t, far)));
        if let Some(e) = self.far.failed() {
            return Err(PassErr::Io(e));
        }
        self.timers_pages()?;
        if self.st.regions.is_some() {
            self.d.regions_peak = self.d.regions_peak.max(self.d.regions.g.len());
            derived::write_pages(N_REGIONS, &mut self.d, false, self.dicts, self.st, self.flags, &mut self.pages)?;
        }
        if self.st.functions.is_some() {
            self.d.functions_peak = self.d.functions_peak.max(self.d.functions.g.len());
            derived::write_pages(N_FUNCTIONS, &mut self.d, false, self.dicts, self.st, self.flags, &mut self.pages)?;
        }
        self.sync_writer.thread_done(&mut self.d, self.live.sync.unnamed, self.dicts, self.st, self.flags)
    }

    /// The pairings the live trackers gave up on done again from the thread's records read again.
    fn pair_again(&mut self, upto: usize) -> Result<(), PassErr> {
        let live = &mut self.live;
        let want = [live.regions.o.bad, live.functions.o.bad, live.sync.bad().iter().any(|&b| b)];
        if !want.iter().any(|&b| b) {
            return Ok(());
        }
        let th = &mut self.gathered;
        for c in &self.chunks[live.first_chunk..upto] {
            gather(c, self.clock, want, th)?;
        }
        let g = live.g;
        if want[0] {
            live.regions.pair_again(&mut self.d.regions, g, &th.regions, &mut th.keys, &mut th.pairs);
        }
        if want[1] {
            live.functions.pair_again(&mut self.d.functions, g, &th.functions, &mut th.keys, &mut th.pairs);
        }
        live.sync.pair_again(&mut self.d.sync, &th.sync, &mut th.sync_scratch);
        th.regions.clear();
        th.functions.clear();
        th.sync.clear();
        Ok(())
    }

    /// The compensated times of the thread's rows that could not have theirs as their records
    /// went by (compensation.build: each time less the cost of the thread's records before it):
    /// rows paired again, the ends of regions and functions left open (the thread's end), and
    /// timers whose start lay after every record before their stop.
    fn compensate_thread(&mut self) {
        let (d, live, far) = (&mut self.d, &mut self.live, &self.far);
        let Some(cp) = d.comp.as_ref() else { return };
        for (n, base) in [(&mut d.regions, live.regions.o.base), (&mut d.functions, live.functions.o.base)] {
            let (len, from) = (n.g.len(), n.comp[0].len());
            for r in base.min(from)..from {
                if n.complete[r] == 0 {
                    let e = cp.comp(n.end[r], far);
                    n.comp[1][r] = e;
                    n.comp[2][r] = e.wrapping_sub(n.comp[0][r]);
                }
            }
            for r in from..len {
                let (b, e) = (cp.comp(n.begin[r], far), cp.comp(n.end[r], far));
                n.comp[0].push(b);
                n.comp[1].push(e);
                n.comp[2].push(e.wrapping_sub(b));
            }
        }
        for part in &mut d.sync {
            for r in part.comp[0].len()..part.g.len() {
                let acquire = if part.acquire_ok[r] != 0 { cp.comp(part.acquire[r], far) } else { 0 };
                let release = if part.release_ok[r] != 0 { cp.comp(part.release[r], far) } else { 0 };
                part.push_comp(cp.comp(part.request[r], far), acquire, release);
            }
        }
        d.timers.resolve(i64::MAX, self.st.written(N_TIMERS), |t| cp.comp(t, far));
    }

    /// The streamed derived tables' last pages and footers, and sync's.
    fn finish(mut self) -> Result<Derived, PassErr> {
        for table in [N_COUNTERS, N_TIMERS, N_PAUSES, N_ADAPT, N_REGIONS, N_FUNCTIONS] {
            if self.st.cap(table).is_none() {
                continue;
            }
            derived::write_pages(table, &mut self.d, true, self.dicts, self.st, self.flags, &mut self.pages)?;
            derived::page(table, &self.d, 0, 0, self.dicts, self.st, self.flags, &mut self.pages, true)?;
        }
        let mut d = self.d;
        self.sync_writer.finish(&mut d, self.dicts, self.st, self.flags)?;
        Ok(d)
    }
}

/// A chunk's begin/end and sync events of the pairings to redo (`want`: regions, functions,
/// sync), gathered again from its records.
fn gather(c: &Chunk, clock: Clock, want: [bool; 3], th: &mut Gathered) -> std::io::Result<()> {
    for raw in c.records()?.chunks_exact(32) {
        let r = Record::from_bytes(raw);
        let wanted = match r.kind {
            kinds::REGION_BEGIN | kinds::REGION_END => want[0],
            kinds::FUNC_ENTRY | kinds::FUNC_EXIT => want[1],
            kinds::LOCK_REQUEST..=kinds::COND_WAIT_EXIT => want[2],
            _ => false,
        };
        if !wanted {
            continue;
        }
        let ts = if c.tsc { clock.ts(r.ts) } else { r.ts as i64 };
        let name = if c.has_names { c.names.get(name_key(&r)) } else { -1 };
        match r.kind {
            kinds::REGION_BEGIN | kinds::REGION_END => {
                th.regions.push(PairEv { ts, key: r.id as u64, name, b: 0, begin: r.kind == kinds::REGION_BEGIN })
            }
            kinds::FUNC_ENTRY | kinds::FUNC_EXIT => th.functions.push(PairEv { ts, key: r.a, name, b: r.b, begin: r.kind == kinds::FUNC_ENTRY }),
            _ => th.sync.push(SyncEv { ts, comp: 0, kind: r.kind, addr: r.a, name }),
        }
    }
    Ok(())
}
