//! The sync table's rows: lock requests, acquisitions and releases, barrier and condition
//! waits paired per thread as oslens.store.pairing pairs them (lock requests with the next
//! acquisition of the same object, pairing.lock_requests), as the records go by; a pairing
//! where a release closes nothing or another object is done again when the thread is done.

use super::nesting::Open;
use crate::pairing::{pair_thread, PairScratch};
use oslens_format::kinds;

/// The sync table's parts, in the order they are written: mutex acquisitions, mutex requests
/// never acquired, barrier waits, condition waits.
pub const ACQUIRED: usize = 0;
pub const UNACQUIRED: usize = 1;
pub const BARRIER: usize = 2;
pub const COND: usize = 3;

#[derive(Clone, Copy)]
pub struct SyncEv {
    pub ts: i64,
    /// ts less the cost of the thread's records before it (0 without compensation)
    pub comp: i64,
    pub kind: u8,
    pub addr: u64,
    pub name: i32,
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
    pub fn push_comp(&mut self, request: i64, acquire: i64, release: i64) {
        self.comp[0].push(request);
        self.comp[1].push(acquire);
        self.comp[2].push(release);
    }

    pub fn push(&mut self, g: i32, e: &SyncEv, request: i64, acquire: Option<i64>, release: Option<i64>) {
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


impl SyncPart {
    pub fn reserve(&mut self, n: usize) {
        self.g.reserve_exact(n);
        self.name.reserve_exact(n);
        self.addr.reserve_exact(n);
        self.request.reserve_exact(n);
        self.acquire.reserve_exact(n);
        self.acquire_ok.reserve_exact(n);
        self.release.reserve_exact(n);
        self.release_ok.reserve_exact(n);
    }

    pub fn truncate(&mut self, n: usize) {
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

    /// Appends rows a..b of `o`.
    pub fn extend_from(&mut self, o: &SyncPart, a: usize, b: usize) {
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
    pub fn drain_front(&mut self, n: usize) {
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

/// The sync pairs: (begin kind, end kind, part of the sync table).
const SYNC_PAIRS: [(u8, u8, usize); 3] = [
    (kinds::LOCK_ACQUIRE, kinds::LOCK_RELEASE, ACQUIRED),
    (kinds::BARRIER_ENTER, kinds::BARRIER_EXIT, BARRIER),
    (kinds::COND_WAIT_ENTER, kinds::COND_WAIT_EXIT, COND),
];

/// The current thread's sync rows as its records go by.
#[derive(Default)]
pub struct Tracker {
    g: i32,
    /// the thread's previous sync record
    last: Option<SyncEv>,
    pub mutex: Open,
    pub barrier: Open,
    pub cond: Open,
    /// whether rows get compensated times as they are written
    comp: bool,
    /// a sync record of an object not named was seen
    pub unnamed: bool,
}

impl Tracker {
    /// A new thread `g` (its rows start where `parts` end).
    pub fn start(&mut self, g: i32, parts: &[SyncPart; 4], comp: bool) {
        self.g = g;
        self.last = None;
        for (o, p) in [(&mut self.mutex, ACQUIRED), (&mut self.barrier, BARRIER), (&mut self.cond, COND)] {
            o.start(parts[p].g.len());
        }
        self.comp = comp;
    }

    /// Whether a pairing must be done again.
    pub fn bad(&self) -> [bool; 3] {
        [self.mutex.bad, self.barrier.bad, self.cond.bad]
    }

    #[inline(always)]
    pub fn event(&mut self, parts: &mut [SyncPart; 4], e: SyncEv) {
        let g = self.g;
        self.unnamed |= e.name < 0;
        let req = self.last.filter(|p| p.kind == kinds::LOCK_REQUEST);
        if let Some(p) = req {
            if !(e.kind == kinds::LOCK_ACQUIRE && p.addr == e.addr) {
                parts[UNACQUIRED].push(g, &p, p.ts, None, None);
                if self.comp {
                    parts[UNACQUIRED].push_comp(p.comp, 0, 0);
                }
            }
        }
        let (request, request_comp) = match req {
            Some(p) if p.addr == e.addr => (p.ts, p.comp),
            _ => (e.ts, e.comp),
        };
        self.last = Some(e);
        let (open, part, begin) = match e.kind {
            kinds::LOCK_ACQUIRE => (&mut self.mutex, ACQUIRED, true),
            kinds::LOCK_RELEASE => (&mut self.mutex, ACQUIRED, false),
            kinds::BARRIER_ENTER => (&mut self.barrier, BARRIER, true),
            kinds::BARRIER_EXIT => (&mut self.barrier, BARRIER, false),
            kinds::COND_WAIT_ENTER => (&mut self.cond, COND, true),
            kinds::COND_WAIT_EXIT => (&mut self.cond, COND, false),
            _ => return,
        };
        if open.bad {
            return;
        }
        let out = &mut parts[part];
        if begin {
            let row = out.g.len();
            if part == ACQUIRED {
                out.push(g, &e, request, Some(e.ts), None);
            } else {
                out.push(g, &e, e.ts, None, None);
            }
            if self.comp {
                match part {
                    ACQUIRED => out.push_comp(request_comp, e.comp, 0),
                    _ => out.push_comp(e.comp, 0, 0),
                }
            }
            open.open.push((row, e.addr));
            return;
        }
        match open.open.pop() {
            Some((row, addr)) if addr == e.addr => {
                // a mutex is released; a barrier's exit is both; a condition wait is acquired
                if part != COND {
                    out.release[row] = e.ts;
                    out.release_ok[row] = 1;
                }
                if part != ACQUIRED {
                    out.acquire[row] = e.ts;
                    out.acquire_ok[row] = 1;
                }
                if self.comp {
                    if part != COND {
                        out.comp[2][row] = e.comp;
                    }
                    if part != ACQUIRED {
                        out.comp[1][row] = e.comp;
                    }
                }
            }
            _ => open.bad = true,
        }
    }

    /// The thread's last record, a lock request, was never acquired.
    pub fn finish(&self, parts: &mut [SyncPart; 4]) {
        if let Some(p) = self.last.filter(|p| p.kind == kinds::LOCK_REQUEST) {
            parts[UNACQUIRED].push(self.g, &p, p.ts, None, None);
        }
    }

    /// The pairings to redo taken back (their rows truncated) and paired again from the
    /// thread's sync events `ev` with the general pairing; `request` and `sel` are scratch.
    pub fn pair_again(&self, parts: &mut [SyncPart; 4], ev: &[SyncEv], scratch: &mut Scratch) {
        let redo = self.bad();
        for ((open, &(_, _, part)), &r) in [&self.mutex, &self.barrier, &self.cond].into_iter().zip(&SYNC_PAIRS).zip(&redo) {
            if r {
                parts[part].truncate(open.base);
            }
        }
        if ev.is_empty() || !redo.iter().any(|&x| x) {
            return;
        }
        // when each acquisition was asked for (pairing.lock_requests), and the requests never
        // acquired
        scratch.request.clear();
        let mut last: Option<usize> = None;
        for (i, e) in ev.iter().enumerate() {
            let req = last.filter(|&p| ev[p].kind == kinds::LOCK_REQUEST);
            let asked = req.filter(|&p| ev[p].addr == e.addr);
            if e.kind == kinds::LOCK_ACQUIRE {
                scratch.request.push(ev[asked.unwrap_or(i)].ts);
            }
            last = Some(i);
        }
        let g = self.g;
        let opens = [&self.mutex, &self.barrier, &self.cond];
        for (t, &(begin, end, part)) in SYNC_PAIRS.iter().enumerate() {
            if !redo[t] {
                continue;
            }
            // the rows written while the records went by are the same rows (Open::finished)
            let mut skip = opens[t].written;
            scratch.sel.clear();
            scratch.sel.extend((0..ev.len()).filter(|&i| ev[i].kind == begin || ev[i].kind == end));
            scratch.keys.clear();
            scratch.keys.extend(scratch.sel.iter().map(|&i| (ev[i].kind == begin, ev[i].addr)));
            let (sel, request, out) = (&scratch.sel, &scratch.request, &mut parts[part]);
            let mut nth = 0usize;
            pair_thread(&scratch.keys, &mut scratch.pairs, |b, e, _depth| {
                if skip > 0 {
                    skip -= 1;
                    nth += 1;
                    return;
                }
                let eb = &ev[sel[b]];
                let left = (e >= 0).then(|| ev[sel[e as usize]].ts);
                match part {
                    ACQUIRED => out.push(g, eb, request[nth], Some(eb.ts), left),
                    BARRIER => out.push(g, eb, eb.ts, left, left),
                    _ => out.push(g, eb, eb.ts, left, None),
                }
                nth += 1;
            });
        }
    }
}

/// Scratch space of the pairing done again.
#[derive(Default)]
pub struct Scratch {
    request: Vec<i64>,
    sel: Vec<usize>,
    keys: Vec<(bool, u64)>,
    pairs: PairScratch,
}
