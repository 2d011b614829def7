//! The sync table written: its dictionaries (kinds, objects), its mutex acquisitions' pages as
//! threads end where its object dictionary is known before the first page, else when the pass
//! is done; the parts after them (requests never acquired, barrier and condition waits) kept on
//! disk as they are finished (sync_spill.rs) and written after the last acquisition.

use super::columns::{bytes_of, dict_col, i64_col, named, plain_col, plain_strings, who, Dicts};
use super::derived::{Derived, Streams};
use super::flags::{decide, Flags, PassErr, N_SYNC_ACQUIRE, N_SYNC_HELD, N_SYNC_RELEASE, N_SYNC_UNNAMED};
use super::source::Chunk;
use super::sync::{SyncPart, Tracker, ACQUIRED, BARRIER, COND, UNACQUIRED};
use super::sync_spill::{Spill, SpillReader};
use crate::anon_file::folder_of;
use crate::parquet::{self, Column};
use oslens_format::kinds;
use std::collections::{HashMap, HashSet};

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

/// Adds to `seen` the addresses of the objects not named in rows ..n of `p`.
fn unnamed_objects(p: &SyncPart, n: usize, seen: &mut HashSet<u64>) {
    // few, each in long runs of rows
    let mut last = None;
    for (&n, &a) in p.name[..n].iter().zip(&p.addr) {
        if n < 0 && last != Some(a) {
            seen.insert(a);
            last = Some(a);
        }
    }
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

/// What writing sync pages reuses: a page's kind and object indices and validity bitmaps
/// (acquire, release), the rows of a page read back (SyncWriter::finish); and the rows written.
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

/// The sync table's columns (in oslens.store.schema's order) over rows a..b of `p` (`pg` filled for them; `nullable`: acquire,
/// release), with compensation's after its own (oslens.store.compensation).
#[allow(clippy::too_many_arguments)]
fn sync_columns<'a>(p: &'a SyncPart, a: usize, b: usize, sd: &'a SyncDicts, dicts: &'a Dicts, pg: &'a SyncPage, nullable: [bool; 2], comp: bool) -> Vec<Column<'a>> {
    let validity = |i: usize| nullable[i].then_some(&pg.valid[i][..]);
    let [pid, tid] = who(&p.g[a..b], dicts);
    let objects = if sd.unnamed.is_empty() { bytes_of(&p.name[a..b]) } else { bytes_of(&pg.object) };
    let mut cols = vec![
        dict_col(parquet::BYTE_ARRAY, Some(parquet::UTF8), bytes_of(&pg.kind), 4, (sd.n_kinds, &sd.kinds), false),
        dict_col(parquet::BYTE_ARRAY, Some(parquet::UTF8), objects, 4, (sd.n_names + sd.unnamed.len(), &sd.objects), false),
        pid,
        tid,
        i64_col(&p.request[a..b], true, true),
        Column { validity: validity(0), ..i64_col(&p.acquire[a..b], false, true) },
        Column { validity: validity(1), ..i64_col(&p.release[a..b], false, true) },
        plain_col(parquet::INT64, Some(parquet::UINT_64), bytes_of(&p.addr[a..b]), 8),
        plain_col(parquet::BOOLEAN, None, &pg.censored, 0),
    ];
    if comp {
        for j in 0..3 {
            let validity = if j == 0 { None } else { validity(j - 1) };
            cols.push(Column { validity, ..i64_col(&p.comp[j][a..b], true, true) });
        }
    }
    cols
}

/// Rows a..a+n of `p`, rows lo..lo+n of the sync parts laid end to end (`starts`), written as
/// one page. The object column's dictionary is decided by the first page (names only, or names
/// and the objects not named): a later page that needs another makes the pass run again with
/// the objects held to its end.
#[allow(clippy::too_many_arguments)]
fn write_page(p: &SyncPart, a: usize, lo: usize, n: usize, starts: &[usize; 5], sd: &SyncDicts, d: &Derived, dicts: &Dicts, st: &mut Streams, flags: &mut Flags, pg: &mut SyncPage) -> Result<(), PassErr> {
    let comp = st.costs.is_some();
    let Some(sink) = st.sync.as_mut() else { return Ok(()) };
    decide(flags, N_SYNC_UNNAMED, sd.unnamed.len())?;
    if !pg.fill(sd, starts, p, a, lo, lo + n) {
        // the dictionary from the scans lacks an object: written again, held to the end
        return Err(PassErr::Retry(N_SYNC_HELD));
    }
    let nullable = [decide(flags, N_SYNC_ACQUIRE, zeros(&p.acquire_ok, a, a + n))?, decide(flags, N_SYNC_RELEASE, zeros(&p.release_ok, a, a + n))?];
    pg.validity(p, a, a + n, nullable);
    pg.censored(p, a, a + n, &d.extent_max);
    sink.page(&sync_columns(p, a, a + n, sd, dicts, pg, nullable, comp), n)?;
    pg.written += n;
    Ok(())
}

/// The whole pages of the first `upto` mutex acquisitions written; returns the rows written.
fn acquired_pages(d: &Derived, sd: &SyncDicts, upto: usize, dicts: &Dicts, st: &mut Streams, flags: &mut Flags, pg: &mut SyncPage) -> Result<usize, PassErr> {
    let starts = part_starts(&d.sync);
    let mut lo = 0;
    while let Some(cap) = st.sync.as_ref().map(|s| s.cap()) {
        if upto - lo < cap {
            break;
        }
        write_page(&d.sync[ACQUIRED], lo, lo, cap, &starts, sd, d, dicts, st, flags, pg)?;
        lo += cap;
    }
    Ok(lo)
}

/// The sync rows at the pass's end, laid end to end: each part's rows on disk, then those
/// still in memory.
struct Rows<'a> {
    parts: &'a [SyncPart; 4],
    disk: [Option<SpillReader>; 4],
    on_disk: [usize; 4],
    /// per part, its rows taken
    taken: [usize; 4],
}

impl Rows<'_> {
    /// Where each part's rows start.
    fn starts(&self) -> [usize; 5] {
        let mut starts = [0; 5];
        for i in 0..4 {
            starts[i + 1] = starts[i] + self.on_disk[i] + self.parts[i].g.len();
        }
        starts
    }

    /// The next n rows into `out` (emptied first).
    fn next(&mut self, mut n: usize, out: &mut SyncPart) -> std::io::Result<()> {
        out.truncate(0);
        for i in 0..4 {
            while n > 0 && self.taken[i] < self.on_disk[i] + self.parts[i].g.len() {
                let k = match (self.taken[i] < self.on_disk[i], self.disk[i].as_mut()) {
                    (true, Some(r)) => {
                        let k = n.min(self.on_disk[i] - self.taken[i]);
                        r.read(k, out)?;
                        k
                    }
                    _ => {
                        let a = self.taken[i] - self.on_disk[i];
                        let k = n.min(self.parts[i].g.len() - a);
                        out.extend_from(&self.parts[i], a, a + k);
                        k
                    }
                };
                self.taken[i] += k;
                n -= k;
            }
        }
        Ok(())
    }
}

/// The sync table's writer: its dictionaries while its pages are written as threads end (every
/// object named, or the objects not named known from the scans), and its page scratch.
#[derive(Default)]
pub struct SyncWriter {
    page: SyncPage,
    dicts: Option<SyncDicts>,
    /// `dicts` came from the scans: pages are written as threads end whatever the names
    known: bool,
    /// where the parts after the mutex acquisitions go as they are finished (None: held), and
    /// the rows of a part held at most while a chunk's records go by (a page; more where its
    /// pairing must be done again)
    dir: Option<std::path::PathBuf>,
    spill_rows: usize,
    spills: [Option<Spill>; 4],
    /// the objects not named of the rows spilled
    unnamed: HashSet<u64>,
}

impl SyncWriter {
    /// The writer of a pass whose chunks are `chunks` (their scans' sync keys, where known, give
    /// the object dictionary before the first page, unless an earlier pass found them wrong).
    pub fn new(chunks: &[Chunk], d: &Derived, dicts: &Dicts, st: &Streams, flags: &mut Flags) -> SyncWriter {
        let mut w = SyncWriter::default();
        let Some(sink) = st.sync.as_ref() else { return w };
        w.dir = folder_of(sink.w.get_ref()).or_else(|| Some(std::env::temp_dir()));
        w.spill_rows = sink.cap();
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
        if flags[N_SYNC_HELD] != Some(true) {
            if let Some(unnamed) = scanned_unnamed(chunks) {
                w.dicts = Some(SyncDicts::new(&d.counts, dicts.instrument, unnamed, &st.object_names));
                w.known = true;
            }
        }
        w
    }

    /// A thread is done: the mutex acquisitions' whole pages written where the object
    /// dictionary is known before the first page: from the scans (the names, then the objects
    /// not named), or while every object so far has its name (`unnamed`: one has none).
    pub fn thread_done(&mut self, d: &mut Derived, unnamed: bool, dicts: &Dicts, st: &mut Streams, flags: &mut Flags) -> Result<(), PassErr> {
        if st.sync.is_none() {
            return Ok(());
        }
        d.sync_peak = d.sync_peak.max(part_starts(&d.sync)[4]);
        for part in [UNACQUIRED, BARRIER, COND] {
            let n = d.sync[part].g.len();
            self.spill(d, part, n, st.costs.is_some())?;
        }
        if !self.known && (unnamed || flags[N_SYNC_UNNAMED] == Some(true)) {
            return Ok(());
        }
        let sd = self.dicts.get_or_insert_with(|| SyncDicts::new(&d.counts, dicts.instrument, Vec::new(), &st.object_names));
        let done = acquired_pages(d, sd, d.sync[ACQUIRED].g.len(), dicts, st, flags, &mut self.page)?;
        d.sync[ACQUIRED].drain_front(done);
        Ok(())
    }

    /// While a thread's records go by: the whole pages of its first `upto` mutex acquisitions
    /// (those that can no longer change) written and taken away where the object dictionary came
    /// from the scans (else they wait for the thread's end, as thread_done decides); returns the
    /// rows taken away.
    pub fn write_finished(&mut self, d: &mut Derived, upto: usize, dicts: &Dicts, st: &mut Streams, flags: &mut Flags) -> Result<usize, PassErr> {
        if st.sync.is_none() || !self.known {
            return Ok(0);
        }
        d.sync_peak = d.sync_peak.max(part_starts(&d.sync)[4]);
        let Some(sd) = self.dicts.as_ref() else { return Ok(0) };
        let done = acquired_pages(d, sd, upto, dicts, st, flags, &mut self.page)?;
        d.sync[ACQUIRED].drain_front(done);
        Ok(done)
    }

    /// While a thread's records go by: its rows of the parts after the mutex acquisitions that
    /// can no longer change taken to disk: the requests never acquired (but the last, whose
    /// compensated times wait for the thread's end), and the barrier and condition waits before
    /// the oldest still open (none where the pairing must be done again: `tracker` says).
    pub fn spill_finished(&mut self, d: &mut Derived, tracker: &mut Tracker, st: &Streams) -> Result<(), PassErr> {
        if st.sync.is_none() {
            return Ok(());
        }
        let comp = st.costs.is_some();
        d.sync_peak = d.sync_peak.max(part_starts(&d.sync)[4]);
        let u = &d.sync[UNACQUIRED];
        let n = if comp { u.comp[0].len().min(u.g.len()) } else { u.g.len() };
        self.spill(d, UNACQUIRED, n, comp)?;
        for (part, open) in [(BARRIER, &mut tracker.barrier), (COND, &mut tracker.cond)] {
            if let Some(n) = open.finished(d.sync[part].g.len()) {
                self.spill(d, part, n, comp)?;
                open.shift(n);
            }
        }
        Ok(())
    }

    /// spill_finished where a part after the mutex acquisitions holds a page of rows, so that
    /// a chunk's waits (a million barrier waits in 64 MiB) are not all held till its end.
    #[inline(always)]
    pub fn spill_if_full(&mut self, d: &mut Derived, tracker: &mut Tracker, st: &Streams) -> Result<(), PassErr> {
        if self.dir.is_some() && [UNACQUIRED, BARRIER, COND].iter().any(|&p| d.sync[p].g.len() >= self.spill_rows) {
            return self.spill_finished(d, tracker, st);
        }
        Ok(())
    }

    /// The first n rows of `part` taken to its file.
    fn spill(&mut self, d: &mut Derived, part: usize, n: usize, comp: bool) -> std::io::Result<()> {
        let Some(dir) = self.dir.as_ref().filter(|_| n > 0) else { return Ok(()) };
        let spill = match &mut self.spills[part] {
            Some(s) => s,
            none => none.insert(Spill::new(dir, part, comp)?),
        };
        spill.append(&d.sync[part], n)?;
        unnamed_objects(&d.sync[part], n, &mut self.unnamed);
        d.sync[part].drain_front(n);
        Ok(())
    }

    /// The sync rows still held (the mutex acquisitions not yet written, then the requests never
    /// acquired, the barrier and the condition waits), and the file's footer, where sync is
    /// streamed: when the pass is done, every object is known (the scans' dictionary, where it
    /// was used, must then be that of the rows: no object in it that no row holds).
    pub fn finish(mut self, d: &mut Derived, dicts: &Dicts, st: &mut Streams, flags: &mut Flags) -> Result<(), PassErr> {
        if st.sync.is_none() {
            return Ok(());
        }
        d.sync_peak = d.sync_peak.max(part_starts(&d.sync)[4]);
        let sd = match self.dicts.take() {
            Some(sd) if self.known => sd,
            _ => {
                let mut seen = std::mem::take(&mut self.unnamed);
                d.sync.iter().for_each(|p| unnamed_objects(p, p.g.len(), &mut seen));
                let mut unnamed: Vec<u64> = seen.into_iter().collect();
                unnamed.sort_unstable();
                SyncDicts::new(&d.counts, dicts.instrument, unnamed, &st.object_names)
            }
        };
        let mut rows = Rows { parts: &d.sync, disk: [None, None, None, None], on_disk: [0; 4], taken: [0; 4] };
        for (i, s) in std::mem::take(&mut self.spills).into_iter().enumerate() {
            if let Some(s) = s {
                rows.on_disk[i] = s.rows;
                rows.disk[i] = Some(s.reader()?);
            }
        }
        let (starts, pg) = (rows.starts(), &mut self.page);
        let mut tmp = std::mem::take(&mut pg.tmp);
        let mut lo = 0;
        while let Some(cap) = st.sync.as_ref().map(|s| s.cap()).filter(|_| lo < starts[4]) {
            let n = cap.min(starts[4] - lo);
            rows.next(n, &mut tmp)?;
            write_page(&tmp, 0, lo, n, &starts, &sd, d, dicts, st, flags, pg)?;
            lo += n;
        }
        if self.known && pg.used.iter().any(|&u| !u) {
            return Err(PassErr::Retry(N_SYNC_HELD));
        }
        let nullable = [flags[N_SYNC_ACQUIRE] == Some(true), flags[N_SYNC_RELEASE] == Some(true)];
        tmp.truncate(0);
        let _ = pg.fill(&sd, &[0; 5], &tmp, 0, 0, 0);
        pg.validity(&tmp, 0, 0, nullable);
        pg.censored(&tmp, 0, 0, &d.extent_max);
        if let Some(sink) = st.sync.take() {
            sink.w.finish(&named("sync", sync_columns(&tmp, 0, 0, &sd, dicts, pg, nullable, st.costs.is_some()), dicts)?)?;
        }
        d.sync = Default::default();
        d.sync_rows = pg.written;
        Ok(())
    }
}
