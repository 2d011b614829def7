//! Regions and functions: begin/end records paired per thread into rows, as
//! oslens.store.pairing pairs them. The rows are written as the records go by where every end
//! closes the innermost open begin of its own key (the common case); a thread where one does
//! not is paired again from its records read again (pair_thread, the general pairing).

use crate::pairing::{pair_thread, PairScratch};

/// One thread's begin/end event for pairing.
#[derive(Clone, Copy)]
pub struct PairEv {
    pub ts: i64,
    pub key: u64,
    pub name: i32,
    pub b: u64,
    pub begin: bool,
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
    /// the final values of rows written while their region or call was open (Tracker::early)
    pub late: Vec<Late>,
}

/// A row written while its begin was still open (its end unknown): where it is, and the values
/// it ends with, to patch the written table with (oslens.store.app_tables.WrittenTable).
#[derive(Clone, Copy, Default)]
pub struct Late {
    /// its index in the table, and in its thread's rows
    pub row: usize,
    pub thread_row: usize,
    pub begin: i64,
    pub end: i64,
    pub complete: u8,
    pub comp_begin: i64,
    pub comp_end: i64,
    /// whether comp_end is known (else computed when the thread is done)
    pub comp_known: bool,
}

/// An open begin whose row was already written (Open::open holds EARLY for it).
pub const EARLY: usize = usize::MAX;


impl Nested {
    pub fn reserve(&mut self, n: usize, b: bool) {
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

    /// Takes away the first n rows (written), keeping the rest in order.
    pub fn drain_front(&mut self, n: usize) {
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

    pub fn truncate(&mut self, n: usize) {
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

/// One nesting table's rows of the current thread as its records go by: a row written at its
/// begin and completed at its end (its depth: the begins open then), until an end closes
/// nothing or another key (`bad`: the thread is paired again when its records are all seen).
#[derive(Default)]
pub struct Tracker {
    /// the open begins and the thread's rows
    pub o: Open,
    /// whether the rows keep the records' `b` word (functions: the call site)
    keep_b: bool,
    /// whether rows get compensated times as they are written
    comp: bool,
}

/// One pairing's open begins and rows of the current thread (regions, functions, each sync pair).
#[derive(Default)]
pub struct Open {
    /// the open begins: (row, key)
    pub open: Vec<(usize, u64)>,
    /// an end closed nothing or another key: the thread is paired again when its records are all
    /// seen
    pub bad: bool,
    /// the thread's first row not yet written
    pub base: usize,
    /// the thread's rows written while its records went by (finished, shift)
    pub written: usize,
    /// whether rows are written past the oldest open begin (write_early)
    pub early_ok: bool,
    /// the thread's rows written while open, in row order (Late, into Nested::late from
    /// `late_base` when they end), and which of them are still open (a stack)
    pub early: Vec<Late>,
    pub early_open: Vec<usize>,
    pub late_base: usize,
}

impl Open {
    /// A new thread, whose rows start at `base`.
    pub fn start(&mut self, base: usize) {
        self.open.clear();
        self.bad = false;
        self.base = base;
        self.written = 0;
        self.early.clear();
        self.early_open.clear();
    }

    /// The rows (`len` of them) that can be written now: all of them where rows may be
    /// written before their end (early_ok: their final values patched in later), else those
    /// before the oldest begin still open (finished).
    pub fn writable(&self, len: usize) -> Option<usize> {
        if self.early_ok && !self.bad {
            return Some(len);
        }
        self.finished(len)
    }

    /// Rows ..n are about to be written, the first being row `table_row` of the table: the open
    /// begins among them become early ones (their begins and compensated begins kept).
    pub fn going_early(&mut self, n: usize, table_row: usize, out: &Nested) {
        for o in self.open.iter_mut().filter(|o| o.0 != EARLY && o.0 < n) {
            let r = o.0;
            self.early_open.push(self.early.len());
            self.early.push(Late {
                row: table_row + r,
                thread_row: self.written + (r - self.base),
                begin: out.begin[r],
                end: out.begin[r],
                comp_begin: out.comp[0].get(r).copied().unwrap_or(0),
                ..Default::default()
            });
            o.0 = EARLY;
        }
    }

    /// The rows (`len` of them) that can no longer change: those before the oldest begin still
    /// open. None once the thread must be paired again: its rows not yet written may all change.
    /// (The general pairing pairs the ends of a well-nested stretch as the live one does, so the
    /// rows it closed are final: pair_again keeps the rows written.)
    pub fn finished(&self, len: usize) -> Option<usize> {
        if self.bad {
            return None;
        }
        Some(self.open.first().map_or(len, |&(row, _)| row))
    }

    /// The first n rows were written and taken away.
    pub fn shift(&mut self, n: usize) {
        self.open.iter_mut().filter(|o| o.0 != EARLY).for_each(|o| o.0 -= n);
        self.written += n.saturating_sub(self.base);
        self.base = self.base.saturating_sub(n);
    }
}

impl Tracker {
    pub fn new(keep_b: bool) -> Tracker {
        Tracker { keep_b, ..Default::default() }
    }

    /// Whether rows are written before their ends (Open::writable).
    pub fn early(mut self, ok: bool) -> Tracker {
        self.o.early_ok = ok;
        self
    }

    /// A new thread, whose rows start at `base` (`late`: Nested::late's length then).
    pub fn start(&mut self, base: usize, comp: bool, late: usize) {
        self.o.start(base);
        self.o.late_base = late;
        self.comp = comp;
    }

    #[inline(always)]
    pub fn begin(&mut self, out: &mut Nested, g: i32, (ts, comp): (i64, i64), key: u64, name: i32, b: u64) {
        if self.o.bad {
            return;
        }
        if self.comp {
            out.comp[0].push(comp);
            out.comp[1].push(comp);
            out.comp[2].push(0);
        }
        let row = out.g.len();
        out.g.push(g);
        out.name.push(name);
        out.key.push(key);
        if self.keep_b {
            out.b.push(b);
        }
        out.begin.push(ts);
        out.end.push(ts);
        out.duration.push(0);
        out.depth.push(self.o.open.len() as i64);
        out.complete.push(0);
        self.o.open.push((row, key));
    }

    #[inline(always)]
    pub fn end(&mut self, out: &mut Nested, (ts, comp): (i64, i64), key: u64) {
        if self.o.bad {
            return;
        }
        match self.o.open.pop() {
            Some((EARLY, k)) if k == key => {
                let i = self.o.early_open.pop().expect("an early begin has its entry");
                let e = &mut self.o.early[i];
                (e.end, e.complete, e.comp_end, e.comp_known) = (ts, 1, comp, true);
            }
            Some((row, k)) if k == key => {
                out.end[row] = ts;
                out.duration[row] = ts.wrapping_sub(out.begin[row]);
                out.complete[row] = 1;
                if self.comp {
                    out.comp[1][row] = comp;
                    out.comp[2][row] = comp.wrapping_sub(out.comp[0][row]);
                }
            }
            _ => self.o.bad = true,
        }
    }

    /// The thread's rows paired again from its events (the rows the tracker wrote taken back,
    /// but for those already written: the same rows, see `finished`).
    pub fn pair_again(&mut self, out: &mut Nested, g: i32, evs: &[PairEv], keys: &mut Vec<(bool, u64)>, scratch: &mut PairScratch) {
        out.truncate(self.o.base);
        if evs.is_empty() {
            return;
        }
        keys.clear();
        keys.extend(evs.iter().map(|e| (e.begin, e.key)));
        let keep_b = self.keep_b;
        let (written, mut row) = (self.o.written, 0usize);
        let mut early = self.o.early.iter_mut().peekable();
        out.unmatched += pair_thread(keys, scratch, |b, e, depth| {
            if row < written {
                // written already: an early row takes the end the general pairing gives it
                if let Some(x) = early.next_if(|x| x.thread_row == row) {
                    let complete = e >= 0;
                    x.end = if complete { evs[e as usize].ts } else { evs[b].ts };
                    x.complete = complete as u8;
                    x.comp_known = false;
                }
                row += 1;
                return;
            }
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

    /// The thread's rows left open ended when the thread ended (app_tables._chunk_extent).
    pub fn close_open(&mut self, out: &mut Nested, end: i64) {
        for r in self.o.base..out.g.len() {
            if out.complete[r] == 0 {
                out.end[r] = end.max(out.begin[r]);
                out.duration[r] = out.end[r].wrapping_sub(out.begin[r]);
            }
        }
        for e in self.o.early.iter_mut().filter(|e| e.complete == 0) {
            (e.end, e.comp_known) = (end.max(e.begin), false);
        }
    }

    /// The thread's early rows, final (their compensated ends computed by `comp` where not
    /// known), into Nested::late.
    pub fn finish_early(&mut self, out: &mut Nested, mut comp: impl FnMut(i64) -> i64) {
        for e in self.o.early.iter_mut().filter(|e| !e.comp_known) {
            (e.comp_end, e.comp_known) = (comp(e.end), true);
        }
        out.late.truncate(self.o.late_base);
        out.late.append(&mut self.o.early);
        self.o.early_open.clear();
    }
}
