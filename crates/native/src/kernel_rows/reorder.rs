//! Rows that are complete out of their table's order (a call's row is complete at its exit but
//! ordered by its entry): held until no row still to come can sort before them, then given in
//! order. A call open for long (a thread blocked in wait4 for the whole run) holds back every
//! row after it: past SPILL_ROWS the held rows go to disk as a sorted run, merged back as they
//! become due, so what stays in memory is bounded, not the rows behind the oldest open pair.

use std::io::{BufReader, BufWriter, Read, Write};
use std::path::PathBuf;

/// A row's place in its table's order: (time, then the table's tie-breaks, then the place of
/// its record).
pub type Key = (i64, i64, i64, i64, u64);

/// A value written to and read from a run file as fixed little-endian fields.
pub trait Slot: Copy {
    fn put(self, out: &mut Vec<u8>);
    fn take(b: &mut &[u8]) -> Self;
}

fn take8(b: &mut &[u8]) -> [u8; 8] {
    let (h, t) = b.split_at(8);
    *b = t;
    h.try_into().unwrap()
}

impl Slot for i64 {
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn take(b: &mut &[u8]) -> Self {
        i64::from_le_bytes(take8(b))
    }
}

impl Slot for u64 {
    fn put(self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.to_le_bytes());
    }
    fn take(b: &mut &[u8]) -> Self {
        u64::from_le_bytes(take8(b))
    }
}

impl Slot for Option<i64> {
    fn put(self, out: &mut Vec<u8>) {
        out.push(self.is_some() as u8);
        self.unwrap_or(0).put(out);
    }
    fn take(b: &mut &[u8]) -> Self {
        let some = b[0] != 0;
        *b = &b[1..];
        let v = i64::take(b);
        some.then_some(v)
    }
}

macro_rules! tuple_slot {
    ($($t:ident $i:tt),*) => {
        impl<$($t: Slot),*> Slot for ($($t,)*) {
            fn put(self, out: &mut Vec<u8>) {
                $(self.$i.put(out);)*
            }
            fn take(b: &mut &[u8]) -> Self {
                ($($t::take(b),)*)
            }
        }
    };
}
tuple_slot!(A 0, B 1);
tuple_slot!(A 0, B 1, C 2, D 3, E 4);
tuple_slot!(A 0, B 1, C 2, D 3, E 4, F 5);

/// Rows held on disk, sorted: the next one read ahead.
struct Run<R> {
    rd: BufReader<std::fs::File>,
    left: usize,
    head: Option<(Key, R)>,
}

impl<R: Slot> Run<R> {
    fn advance(&mut self, buf: &mut Vec<u8>) -> std::io::Result<()> {
        self.head = None;
        if self.left == 0 {
            return Ok(());
        }
        let mut len = [0u8; 4];
        self.rd.read_exact(&mut len)?;
        buf.resize(u32::from_le_bytes(len) as usize, 0);
        self.rd.read_exact(buf)?;
        self.left -= 1;
        self.head = Some(<(Key, R)>::take(&mut &buf[..]));
        Ok(())
    }
}

pub struct Reorder<R> {
    rows: Vec<(Key, R)>,
    /// try to give rows when this many are held (doubles while the oldest open pair holds them)
    next_try: usize,
    runs: Vec<Run<R>>,
    /// where runs are written (None: never)
    dir: Option<PathBuf>,
    buf: Vec<u8>,
    /// rows[..sorted] are in key order (what the last give left)
    sorted: usize,
}

const FIRST_TRY: usize = 4096;
/// Rows held in memory at most (about 100 bytes each): past half of it they go to a run on disk.
pub const SPILL_ROWS: usize = 1 << 17;

impl<R: Slot> Reorder<R> {
    pub fn new(dir: Option<PathBuf>) -> Self {
        Reorder { rows: Vec::new(), next_try: FIRST_TRY, runs: Vec::new(), dir, buf: Vec::new(), sorted: 0 }
    }

    pub fn push(&mut self, k: Key, r: R) {
        self.rows.push((k, r));
    }

    /// Whether enough rows are held to try giving some.
    pub fn due(&self) -> bool {
        self.rows.len() >= self.next_try
    }

    /// Gives `out` the rows whose time is below `bound`, in order (every row: i64::MAX).
    pub fn give(&mut self, bound: i64, out: &mut dyn FnMut(R) -> std::io::Result<()>) -> std::io::Result<()> {
        // the rows still held from the last give are sorted: only those pushed since are sorted
        // afresh, then the two runs merged (driftsort finds them), so a pair open for long costs a
        // merge per give, not a re-sort of every row it holds back (keys are unique: same order)
        let held = self.sorted.min(self.rows.len());
        self.rows[held..].sort_unstable_by_key(|x| x.0);
        if held > 0 && held < self.rows.len() && self.rows[held - 1].0 > self.rows[held].0 {
            self.rows.sort_by_key(|x| x.0);
        }
        let mut i = 0;
        loop {
            // the smallest of the memory's next row and the runs' heads
            let mut best = self.rows.get(i).map(|x| (x.0, None));
            for (j, run) in self.runs.iter().enumerate() {
                if let Some((k, _)) = &run.head {
                    if best.is_none_or_gt(k) {
                        best = Some((*k, Some(j)));
                    }
                }
            }
            match best {
                Some((k, from)) if k.0 < bound => match from {
                    None => {
                        out(self.rows[i].1)?;
                        i += 1;
                    }
                    Some(j) => {
                        let (_, r) = self.runs[j].head.take().unwrap();
                        out(r)?;
                        self.runs[j].advance(&mut self.buf)?;
                    }
                },
                _ => break,
            }
        }
        self.rows.drain(..i);
        self.runs.retain(|r| r.head.is_some());
        // past half the cap the rows go to a run, so that doubling next_try never holds more than
        // SPILL_ROWS (a pair open for the whole trace held 2-4 times that, and its sort's scratch)
        if self.rows.len() >= SPILL_ROWS / 2 {
            self.spill()?;
        }
        self.next_try = (2 * self.rows.len()).clamp(FIRST_TRY, SPILL_ROWS);
        self.sorted = self.rows.len();
        Ok(())
    }

    /// Writes the rows held (sorted) as a run on disk.
    fn spill(&mut self) -> std::io::Result<()> {
        let Some(dir) = &self.dir else { return Ok(()) };
        let name = format!(".kernel-rows-{}-{:p}", std::process::id(), self);
        let mut w = BufWriter::new(crate::anon_file::anonymous_file(dir, Some(&name))?);
        for &(k, r) in &self.rows {
            self.buf.clear();
            (k, r).put(&mut self.buf);
            w.write_all(&(self.buf.len() as u32).to_le_bytes())?;
            w.write_all(&self.buf)?;
        }
        let mut f = w.into_inner().map_err(|e| e.into_error())?;
        std::io::Seek::seek(&mut f, std::io::SeekFrom::Start(0))?;
        let mut run = Run { rd: BufReader::new(f), left: self.rows.len(), head: None };
        run.advance(&mut self.buf)?;
        self.runs.push(run);
        self.rows.clear();
        Ok(())
    }
}

/// `best` is None or sorts after `k`.
trait NoneOrGt {
    fn is_none_or_gt(&self, k: &Key) -> bool;
}

impl NoneOrGt for Option<(Key, Option<usize>)> {
    fn is_none_or_gt(&self, k: &Key) -> bool {
        self.as_ref().map_or(true, |b| b.0 > *k)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Rows pushed out of order come out in key order below each bound, the same whether they
    /// stayed in memory or went through runs on disk.
    #[test]
    fn rows_come_out_in_order_through_memory_and_runs() {
        let n = 3 * SPILL_ROWS + 17;
        let keys: Vec<i64> = (0..n as i64).map(|i| (i * 7919) % n as i64).collect();
        let mut r: Reorder<(i64, Option<i64>)> = Reorder::new(Some(std::env::temp_dir()));
        let mut got = Vec::new();
        for (i, &k) in keys.iter().enumerate() {
            r.push((k, 0, 0, 0, i as u64), (k, (k % 3 == 0).then_some(-k)));
            if r.due() {
                // nothing below 0 yet: every row stays held (and spills)
                r.give(0, &mut |x| {
                    got.push(x);
                    Ok(())
                })
                .unwrap();
            }
        }
        assert!(got.is_empty() && !r.runs.is_empty());
        r.give(n as i64 / 2, &mut |x| {
            got.push(x);
            Ok(())
        })
        .unwrap();
        r.give(i64::MAX, &mut |x| {
            got.push(x);
            Ok(())
        })
        .unwrap();
        let want: Vec<(i64, Option<i64>)> = (0..n as i64).map(|k| (k, (k % 3 == 0).then_some(-k))).collect();
        assert_eq!(got, want);
    }

    /// Rows held back by a bound that never moves (a pair open for the whole trace) go to runs:
    /// memory never holds more than SPILL_ROWS of them, and they all come out in order at the end.
    #[test]
    fn rows_held_in_memory_stay_under_the_cap() {
        let n = 5 * SPILL_ROWS + 3;
        let mut r: Reorder<i64> = Reorder::new(Some(std::env::temp_dir()));
        let mut most = 0;
        for i in 0..n as i64 {
            r.push((1 + (i ^ 1), 0, 0, 0, i as u64), i);
            if r.due() {
                r.give(0, &mut |_| panic!("nothing is due before the bound")).unwrap();
            }
            most = most.max(r.rows.len());
        }
        assert!(most <= SPILL_ROWS, "{most} rows held in memory");
        let mut got = Vec::new();
        r.give(i64::MAX, &mut |x| {
            got.push(x);
            Ok(())
        })
        .unwrap();
        assert_eq!(got.len(), n);
        assert!(got.windows(2).all(|w| (w[0] ^ 1) < (w[1] ^ 1)), "rows out of their time order");
    }
}
