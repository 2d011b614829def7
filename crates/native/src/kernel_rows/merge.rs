//! The kernel records in time order: each chunk (one CPU's, in the order the collector wrote
//! it) read through a cursor, and the cursors merged by (time, chunk, place in chunk), which is
//! the order a stable sort by time of the chunks laid end to end gives (the `seq` tie-break of
//! the DuckDB build). A chunk is read when the merge reaches its first time and let go when it
//! is done, so the records held are those of the chunks open at one time (about one per CPU).

use crate::app_rows::{Records, Source};
use oslens_format::{kinds, Record};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

/// The record at `i` of a buffer of 32-byte records.
#[inline(always)]
pub fn record_at(b: &[u8], i: usize) -> Record {
    assert!((i + 1) * 32 <= b.len());
    // SAFETY: the 32 bytes are in bounds (checked); Record is plain data of that size.
    unsafe { std::ptr::read_unaligned(b.as_ptr().add(i * 32) as *const Record) }
}

/// What the merge needs to know of a chunk before it opens it (the scan finds it).
#[derive(Clone, Copy, Debug)]
pub struct ChunkInfo {
    /// its earliest record time (u64::MAX: no record but names)
    pub min_ts: u64,
    /// whether its records are in time order already (else sorted, stably, when opened)
    pub sorted: bool,
}

/// One record in merged order and its place: (chunk << 32) | index in the chunk.
pub type Seq = u64;

struct Open<'a> {
    recs: Records<'a>,
    /// the chunk's record indices in time order, where it was not written in time order
    order: Option<Vec<u32>>,
    pos: usize,
}

impl Open<'_> {
    fn len(&self) -> usize {
        self.order.as_ref().map_or(self.recs.len() / 32, |o| o.len())
    }

    fn index(&self, pos: usize) -> usize {
        self.order.as_ref().map_or(pos, |o| o[pos] as usize)
    }

    /// Moves past NAME records (they go to the comm history, not to the merge).
    fn skip_names(&mut self) {
        while self.pos < self.len() && self.recs[self.index(self.pos) * 32 + 14] == kinds::NAME {
            self.pos += 1;
        }
    }
}

pub struct Merge<'a, 's> {
    chunks: &'s [Source<'a>],
    sorted: Vec<bool>,
    open: Vec<Option<Open<'a>>>,
    heap: BinaryHeap<Reverse<(u64, usize, usize)>>,
    /// chunks not opened yet, (first time, chunk), the earliest last
    pending: Vec<(u64, usize)>,
    /// the next record of the chunk read last, out of the heap
    cur: Option<Reverse<(u64, usize, usize)>>,
}

impl<'a, 's> Merge<'a, 's> {
    pub fn new(chunks: &'s [Source<'a>], info: &[ChunkInfo]) -> Merge<'a, 's> {
        let mut pending: Vec<(u64, usize)> = info.iter().enumerate().filter(|(_, c)| c.min_ts != u64::MAX).map(|(i, c)| (c.min_ts, i)).collect();
        pending.sort_by(|a, b| b.cmp(a));
        let mut open = Vec::with_capacity(chunks.len());
        open.resize_with(chunks.len(), || None);
        Merge { chunks, sorted: info.iter().map(|c| c.sorted).collect(), open, heap: BinaryHeap::new(), pending, cur: None }
    }

    fn push(&mut self, c: usize) {
        let o = self.open[c].as_mut().expect("open chunk");
        o.skip_names();
        if o.pos < o.len() {
            let ts = record_at(&o.recs, o.index(o.pos)).ts;
            self.heap.push(Reverse((ts, c, o.pos)));
        } else {
            self.open[c] = None; // done: its records are let go
        }
    }

    fn open_chunk(&mut self, c: usize) -> std::io::Result<()> {
        let recs = self.chunks[c].read()?;
        let order = (!self.sorted[c]).then(|| {
            let mut o: Vec<u32> = (0..(recs.len() / 32) as u32).collect();
            o.sort_by_key(|&i| record_at(&recs, i as usize).ts); // stable: ties keep record order
            o
        });
        self.open[c] = Some(Open { recs, order, pos: 0 });
        self.push(c);
        Ok(())
    }

    /// The next record in time order and its place (chunk << 32 | index), None at the end.
    #[inline]
    pub fn next(&mut self) -> std::io::Result<Option<(Record, Seq)>> {
        while let Some(&(first, c)) = self.pending.last() {
            let top = match (&self.cur, self.heap.peek()) {
                (Some(a), Some(b)) => Some(a.0 .0.min(b.0 .0)),
                (Some(a), None) => Some(a.0 .0),
                (None, b) => b.map(|b| b.0 .0),
            };
            if top.is_some_and(|ts| first > ts) {
                break;
            }
            self.pending.pop();
            self.open_chunk(c)?;
        }
        // the chunk read last usually comes first again: it is kept out of the heap until not
        let head = match self.cur.take() {
            Some(cur) if self.heap.peek().is_none_or(|top| cur >= *top) => cur,
            Some(cur) => {
                let top = self.heap.pop().unwrap();
                self.heap.push(cur);
                top
            }
            None => match self.heap.pop() {
                Some(top) => top,
                None => return Ok(None),
            },
        };
        let Reverse((_, c, pos)) = head;
        let o = self.open[c].as_mut().expect("open chunk");
        let i = o.index(pos);
        let r = record_at(&o.recs, i);
        o.pos = pos + 1;
        o.skip_names();
        if o.pos < o.len() {
            self.cur = Some(Reverse((record_at(&o.recs, o.index(o.pos)).ts, c, o.pos)));
        } else {
            self.open[c] = None; // done: its records are let go
        }
        Ok(Some((r, ((c as u64) << 32) | i as u64)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(recs: &[(u64, u8)]) -> Vec<u8> {
        let mut out = Vec::new();
        for (i, &(ts, kind)) in recs.iter().enumerate() {
            let r = Record { ts, id: i as u32, kind, ..Record::default() };
            // SAFETY: Record is 32 bytes of plain data.
            out.extend_from_slice(unsafe { std::slice::from_raw_parts(&r as *const Record as *const u8, 32) });
        }
        out
    }

    /// The merge gives what a stable sort by time of the chunks laid end to end gives: ties in
    /// chunk order then record order, a chunk out of time order sorted, NAME records left out.
    #[test]
    fn the_merge_is_a_stable_sort_by_time_of_the_chunks_end_to_end() {
        let k = oslens_format::kernel::SWITCH;
        let a = chunk(&[(10, k), (20, kinds::NAME), (20, k), (30, k)]);
        let b = chunk(&[(5, k), (20, k), (40, k)]);
        let c = chunk(&[(25, k), (15, k), (20, k)]);
        let srcs = [Source::Held(&a), Source::Held(&b), Source::Held(&c)];
        let info = [ChunkInfo { min_ts: 10, sorted: true }, ChunkInfo { min_ts: 5, sorted: true }, ChunkInfo { min_ts: 15, sorted: false }];
        let mut m = Merge::new(&srcs, &info);
        let mut got = Vec::new();
        while let Some((r, seq)) = m.next().unwrap() {
            got.push((r.ts, seq >> 32, seq & 0xffff_ffff));
        }
        let want = vec![(5, 1, 0), (10, 0, 0), (15, 2, 1), (20, 0, 2), (20, 1, 1), (20, 2, 2), (25, 2, 0), (30, 0, 3), (40, 1, 2)];
        assert_eq!(got, want);
    }
}
