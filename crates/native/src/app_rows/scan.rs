//! The scan: one quick pass over a chunk's records before the tables are built, counting the
//! kinds (so each column is allocated once at its size) and gathering what the pass must know
//! up front (clock pairs, counter and pause reasons, the sync objects).

use oslens_format::kinds;
use oslens_format::record::Record;

/// Records per kind of 32-byte records (added to `counts`), and their largest CPU number.
pub fn count_kinds(records: &[u8], counts: &mut [u64]) -> u16 {
    let mut cpu = 0u16;
    for raw in records.chunks_exact(32) {
        let r = Record::from_bytes(raw);
        counts[r.kind as usize] += 1;
        cpu = cpu.max(r.cpu);
    }
    cpu
}

/// What one pass over a chunk's records finds (py_app_pass.rs scan_records).
pub struct Scan {
    pub counts: Vec<u64>,
    pub pairs: Vec<(u64, u64)>,
    pub cpu_max: u16,
    /// the distinct `b` words of COUNTER and of PAUSE records
    pub reasons: [Distinct; 2],
    /// the distinct (name key, address) of the sync records a sync row comes from
    pub sync: SyncKeys,
}

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
            let rs = [0, 1, 2, 3].map(|j| Record::from_bytes(&q[j * 32..j * 32 + 32]));
            for (j, r) in rs.iter().enumerate() {
                hist[j][r.kind as usize] += 1;
                cpu[j] = cpu[j].max(r.cpu);
            }
            if rs.iter().any(|r| special(r.kind)) {
                rs.iter().for_each(|r| sc.special(r));
            }
        }
        for raw in quads.remainder().chunks_exact(32) {
            let r = Record::from_bytes(raw);
            hist[0][r.kind as usize] += 1;
            cpu[0] = cpu[0].max(r.cpu);
            sc.special(&r);
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
    fn special(&mut self, r: &Record) {
        match r.kind {
            kinds::CLOCK_PAIR => self.pairs.push((r.ts, r.a)),
            kinds::COUNTER => self.reasons[0].add(r.b),
            kinds::PAUSE => self.reasons[1].add(r.b),
            kinds::LOCK_REQUEST | kinds::LOCK_ACQUIRE | kinds::BARRIER_ENTER | kinds::COND_WAIT_ENTER => {
                self.sync.add(r.kind, name_key(r), r.a)
            }
            _ => {}
        }
    }
}

/// The key a record's name is looked up by (NameMap): its kind and id.
#[inline(always)]
pub fn name_key(r: &Record) -> u64 {
    (r.kind as u64) << 48 | r.id as u64
}
