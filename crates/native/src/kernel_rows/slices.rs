//! cpu_slices (kernel_pairs.slice_rows): a task holds a CPU from the switch that puts it on to
//! the CPU's next switch, when that takes it off; where the switch on is missing, the slice
//! starts at the evidence (the CPU's previous switch, the task's previous switch off a CPU and,
//! when that put it to sleep, its first wakeup since), flagged inferred. The table is ordered
//! by CPU, so each CPU's rows are kept apart, on disk past a page, until the end.

use super::context::{Ctx, COMM};
use super::table::{Buf, Table};
use crate::anon_file::anonymous_file;
use oslens_format::{kernel as k, Record};
use super::Map;
use std::collections::BTreeMap;
use std::io::{BufReader, BufWriter, Read, Write};

/// (start, inferred, place in the CPU's switches, tid, end): a row in its CPU's order
type Slice = (i64, bool, u64, i64, i64);
const SLICE_BYTES: usize = 33;
const KEEP: usize = 1 << 16;

#[derive(Default)]
struct Cpu {
    /// its last switch: (time, the task it put on, its place)
    last: Option<(i64, i64, u64)>,
    seen: u64,
    rows: Vec<Slice>,
    spill: Option<BufWriter<std::fs::File>>,
    spilled: usize,
}

#[derive(Default)]
struct Task {
    /// its last switch off a CPU: (time, whether asleep)
    off: Option<(i64, bool)>,
    /// its first wakeup since then, and its last wakeup
    woken: Option<i64>,
    last_wake: i64,
}

pub struct Slices {
    t: Table,
    cpus: BTreeMap<i64, Cpu>,
    tasks: Map<i64, Task>,
    dir: std::path::PathBuf,
}

impl Slices {
    pub fn new(cx: &Ctx) -> std::io::Result<Option<Slices>> {
        let b = vec![Buf::I64(vec![]), Buf::I64(vec![]), Buf::Dict(vec![], COMM), Buf::I64(vec![]), Buf::I64(vec![]), Buf::I64(vec![]), Buf::Bool(vec![])];
        let Some(t) = cx.table("cpu_slices", b)? else { return Ok(None) };
        let dir = std::path::Path::new(&cx.paths["cpu_slices"]).parent().map(|p| p.to_path_buf()).unwrap_or_else(std::env::temp_dir);
        Ok(Some(Slices { t, cpus: BTreeMap::new(), tasks: Map::default(), dir }))
    }

    #[inline]
    pub fn record(&mut self, cx: &Ctx, r: &Record) -> std::io::Result<()> {
        match r.kind {
            k::WAKEUP => {
                let ts = r.ts as i64;
                let t = self.tasks.entry(k::wakeup::F.tid.get(r)).or_default();
                if t.off.is_some() && t.woken.is_none() {
                    t.woken = Some(ts);
                }
                t.last_wake = ts;
                Ok(())
            }
            k::SWITCH => self.switch(cx, r),
            _ => Ok(()),
        }
    }

    fn switch(&mut self, cx: &Ctx, r: &Record) -> std::io::Result<()> {
        let f = &k::switch::F;
        let (ts, cpu, prev, next) = (r.ts as i64, r.cpu as i64, f.prev_tid.get(r), f.next_tid.get(r));
        let c = self.cpus.entry(cpu).or_default();
        let o = c.seen;
        c.seen += 1;
        if let Some((last_ts, last_next, last_o)) = c.last {
            if last_next == prev {
                push(c, (last_ts, false, last_o, prev, ts), &self.dir)?;
            } else if prev != 0 && cx.whole.as_ref().map_or(true, |w| w.contains(&prev)) {
                let t = self.tasks.get(&prev);
                let (off, asleep) = t.and_then(|t| t.off).unwrap_or((0, false));
                let mut lo = last_ts.max(off);
                if let Some(first) = t.and_then(|t| t.woken).filter(|&w| asleep && w > 0 && w <= ts) {
                    lo = lo.max(first);
                }
                push(c, (lo, true, o, prev, ts), &self.dir)?;
            }
        }
        c.last = Some((ts, next, o));
        let t = self.tasks.entry(prev).or_default();
        t.off = Some((ts, (f.prev_state.get(r) as u64) & oslens_format::kernel::STATE_ASLEEP != 0));
        t.woken = (t.last_wake == ts).then_some(ts);
        Ok(())
    }

    /// Writes every CPU's rows, in CPU order; the rows written.
    pub fn finish(mut self, cx: &Ctx) -> std::io::Result<(&'static str, usize)> {
        for (cpu, c) in std::mem::take(&mut self.cpus) {
            if let Some(w) = c.spill {
                let f = w.into_inner().map_err(|e| e.into_error())?;
                let mut rd = BufReader::new(f);
                std::io::Seek::seek(rd.get_mut(), std::io::SeekFrom::Start(0))?;
                let mut buf = [0u8; SLICE_BYTES];
                for _ in 0..c.spilled {
                    rd.read_exact(&mut buf)?;
                    self.write(cx, cpu, decode(&buf))?;
                }
            }
            for s in c.rows {
                self.write(cx, cpu, s)?;
            }
        }
        let n = self.t.finish(&cx.dicts, cx.declared)?;
        Ok(("cpu_slices", n))
    }

    fn write(&mut self, cx: &Ctx, cpu: i64, (start, inferred, _, tid, end): Slice) -> std::io::Result<()> {
        let vals = [tid, cx.pid_of(tid), cx.comms.at(tid, start) as i64, cpu, start, end, inferred as i64];
        for (b, v) in self.t.b.iter_mut().zip(vals) {
            super::context::put(b, v);
        }
        cx.row(&mut self.t)
    }
}

/// Adds a row to its CPU's, in order (an inferred slice can start where the next one does);
/// past KEEP rows, all but the last go to the CPU's file.
fn push(c: &mut Cpu, s: Slice, dir: &std::path::Path) -> std::io::Result<()> {
    c.rows.push(s);
    let mut i = c.rows.len() - 1;
    while i > 0 && c.rows[i] < c.rows[i - 1] {
        c.rows.swap(i, i - 1);
        i -= 1;
    }
    if c.rows.len() > KEEP {
        if c.spill.is_none() {
            c.spill = Some(BufWriter::new(anonymous_file(dir, Some(&format!(".kernel-slices-{}-{:p}", std::process::id(), c)))?));
        }
        let w = c.spill.as_mut().unwrap();
        let n = c.rows.len() - 1;
        for s in c.rows.drain(..n) {
            w.write_all(&encode(s))?;
        }
        c.spilled += n;
    }
    Ok(())
}

fn encode((start, inferred, o, tid, end): Slice) -> [u8; SLICE_BYTES] {
    let mut b = [0u8; SLICE_BYTES];
    b[0..8].copy_from_slice(&start.to_le_bytes());
    b[8] = inferred as u8;
    b[9..17].copy_from_slice(&o.to_le_bytes());
    b[17..25].copy_from_slice(&tid.to_le_bytes());
    b[25..33].copy_from_slice(&end.to_le_bytes());
    b
}

fn decode(b: &[u8; SLICE_BYTES]) -> Slice {
    let i = |r: std::ops::Range<usize>| i64::from_le_bytes(b[r].try_into().unwrap());
    (i(0..8), b[8] != 0, i(9..17) as u64, i(17..25), i(25..33))
}
