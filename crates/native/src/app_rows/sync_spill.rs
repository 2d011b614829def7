//! The sync rows written after every mutex acquisition (requests never acquired, barrier and
//! condition waits: sync.rs parts 1-3) kept on disk from when they can no longer change until
//! the pass writes them after the last acquisition, so that they do not stay in memory however
//! many a trace has (docs/trace-schema.md, "Import memory"). Each part's rows go to an
//! anonymous file (O_TMPFILE) beside the sync table, gone when the pass ends however it ends.

use super::sync::SyncPart;
use crate::anon_file::anonymous_file;
use std::fs::File;
use std::io::{BufReader, BufWriter, Read, Seek, SeekFrom, Write};
use std::path::Path;

/// Bytes of a row: g, name, address, request, acquire and its flag, release and its flag.
const ROW: usize = 4 + 4 + 8 + 8 + 8 + 1 + 8 + 1;
/// Bytes of a row's compensated request, acquire and release.
const COMP: usize = 3 * 8;
const BUF: usize = 1 << 18;

/// One part's rows on disk, in the order they were taken from memory.
pub struct Spill {
    w: BufWriter<File>,
    /// rows written
    pub rows: usize,
    comp: bool,
    row: Vec<u8>,
}

impl Spill {
    /// Part `part`'s spill in `dir` (where there is no O_TMPFILE, a file named as the importer's
    /// temporary tables are, so that one left by a kill in between is removed by
    /// importer.remove_stale_files).
    pub fn new(dir: &Path, part: usize, comp: bool) -> std::io::Result<Spill> {
        Ok(Spill { w: BufWriter::with_capacity(BUF, anonymous_file(dir, Some(&format!(".sync-part{part}.tmp-{}.parquet", std::process::id())))?), rows: 0, comp, row: Vec::with_capacity(ROW + COMP) })
    }

    /// Appends rows 0..n of `p` (their compensated times too where the pass computes them).
    pub fn append(&mut self, p: &SyncPart, n: usize) -> std::io::Result<()> {
        for i in 0..n {
            let r = &mut self.row;
            r.clear();
            r.extend_from_slice(&p.g[i].to_le_bytes());
            r.extend_from_slice(&p.name[i].to_le_bytes());
            r.extend_from_slice(&p.addr[i].to_le_bytes());
            r.extend_from_slice(&p.request[i].to_le_bytes());
            r.extend_from_slice(&p.acquire[i].to_le_bytes());
            r.push(p.acquire_ok[i]);
            r.extend_from_slice(&p.release[i].to_le_bytes());
            r.push(p.release_ok[i]);
            if self.comp {
                for c in &p.comp {
                    r.extend_from_slice(&c[i].to_le_bytes());
                }
            }
            self.w.write_all(r)?;
        }
        self.rows += n;
        Ok(())
    }

    /// The rows written, to be read back from the first.
    pub fn reader(self) -> std::io::Result<SpillReader> {
        let mut f = self.w.into_inner().map_err(|e| e.into_error())?;
        f.seek(SeekFrom::Start(0))?;
        Ok(SpillReader { r: BufReader::with_capacity(BUF, f), comp: self.comp, row: vec![0; ROW + COMP] })
    }
}

/// A part's spilled rows read back in order.
pub struct SpillReader {
    r: BufReader<File>,
    comp: bool,
    row: Vec<u8>,
}

impl SpillReader {
    /// The next n rows appended to `out`.
    pub fn read(&mut self, n: usize, out: &mut SyncPart) -> std::io::Result<()> {
        let size = if self.comp { ROW + COMP } else { ROW };
        for _ in 0..n {
            let r = &mut self.row[..size];
            self.r.read_exact(r)?;
            let i32_at = |o: usize| i32::from_le_bytes(r[o..o + 4].try_into().unwrap());
            let i64_at = |o: usize| i64::from_le_bytes(r[o..o + 8].try_into().unwrap());
            out.g.push(i32_at(0));
            out.name.push(i32_at(4));
            out.addr.push(i64_at(8) as u64);
            out.request.push(i64_at(16));
            out.acquire.push(i64_at(24));
            out.acquire_ok.push(r[32]);
            out.release.push(i64_at(33));
            out.release_ok.push(r[41]);
            if self.comp {
                out.push_comp(i64_at(ROW), i64_at(ROW + 8), i64_at(ROW + 16));
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn part(n: usize, comp: bool) -> SyncPart {
        let mut p = SyncPart::default();
        for i in 0..n as i64 {
            p.g.push(i as i32 % 3);
            p.name.push(if i % 2 == 0 { -1 } else { i as i32 });
            p.addr.push(u64::MAX - i as u64);
            p.request.push(-i);
            p.acquire.push(i * 7);
            p.acquire_ok.push((i % 3 == 0) as u8);
            p.release.push(i64::MIN + i);
            p.release_ok.push((i % 5 == 0) as u8);
            if comp {
                p.push_comp(i * 11, i * 13, i64::MAX - i);
            }
        }
        p
    }

    fn same(a: &SyncPart, b: &SyncPart) -> bool {
        (a.g == b.g && a.name == b.name && a.addr == b.addr && a.request == b.request && a.acquire == b.acquire)
            && (a.acquire_ok == b.acquire_ok && a.release == b.release && a.release_ok == b.release_ok && a.comp == b.comp)
    }

    #[test]
    fn rows_read_back_are_the_rows_written_in_order_and_the_file_has_no_name() {
        let dir = std::env::temp_dir().join(format!("oslens-spill-test-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        for comp in [false, true] {
            let all = part(1000, comp);
            let mut s = Spill::new(&dir, 2, comp).unwrap();
            let (mut head, mut tail) = (SyncPart::default(), SyncPart::default());
            head.extend_from(&all, 0, 300);
            tail.extend_from(&all, 300, 1000);
            s.append(&head, 300).unwrap();
            s.append(&tail, 700).unwrap();
            assert_eq!(s.rows, 1000);
            assert_eq!(std::fs::read_dir(&dir).unwrap().count(), 0);
            let mut r = s.reader().unwrap();
            let mut back = SyncPart::default();
            r.read(1, &mut back).unwrap();
            r.read(999, &mut back).unwrap();
            assert!(same(&back, &all));
            assert!(r.read(1, &mut back).is_err());
        }
        std::fs::remove_dir(&dir).unwrap();
    }
}
