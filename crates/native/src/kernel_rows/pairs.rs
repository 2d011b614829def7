//! The tables whose rows pair two records of one key (kernel_pairs.py's): syscalls (a thread's
//! entry and exit), block_io (a device sector's issue and completion) and irqs (a CPU's handler
//! entry and exit). Each key's records come in time order; at one time the closing records sort
//! after the opening ones, so a key's closers are held until a later record of it. Rows go out
//! through a Reorder, in the table's order.

use super::context::{put, put_opt, Ctx, DEV, IRQ, KIND, RW, SYSCALL};
use super::reorder::Reorder;
use super::table::{Buf, Table};
use oslens_format::{kernel as k, Record};
use super::Map;

// x86-64 numbers of the calls whose child returns 0 without having entered them
const FORK_CALLS: [i64; 4] = [56, 57, 58, 435];

/// A key's state: its open record, and its closers of one time held (time, records).
struct Keyed<O, C> {
    open: Option<O>,
    held: Vec<C>,
    held_ts: i64,
}

impl<O, C> Default for Keyed<O, C> {
    fn default() -> Self {
        Keyed { open: None, held: Vec::new(), held_ts: 0 }
    }
}

/// (ts, nr, pid, value, seq) of a sys_enter or sys_exit
type Sys = (i64, i64, i64, i64, u64);
/// a syscalls row: (tid, pid, nr, start, end, ret)
type SysRow = (i64, i64, i64, Option<i64>, Option<i64>, Option<i64>);
/// (ts, seq, tid, b word) of a block issue
type Issue = (i64, u64, i64, u64);
/// a block_io row: (issue, complete, dev, sector, b word, tid)
type BlockRow = (i64, Option<i64>, i64, i64, u64, i64);
/// (ts, seq, tid, num) of an irq entry
type Entry = (i64, u64, i64, i64);
/// an irqs row: (cpu, tid, num, grp, start, end)
type IrqRow = (i64, i64, i64, i64, i64, i64);

pub struct Pairs {
    calls: Option<(Table, Map<i64, Keyed<Sys, Sys>>, Reorder<SysRow>)>,
    block: Option<(Table, Map<(i64, i64), Keyed<Issue, ()>>, Reorder<BlockRow>)>,
    irqs: Option<(Table, Map<(i64, i64), Keyed<Entry, i64>>, Reorder<IrqRow>)>,
}

fn bound<O, C>(m: &Map<impl std::hash::Hash + Eq, Keyed<O, C>>, open_ts: impl Fn(&O) -> i64, now: i64) -> i64 {
    m.values().map(|s| s.open.as_ref().map_or(i64::MAX, &open_ts).min(if s.held.is_empty() { i64::MAX } else { s.held_ts })).min().unwrap_or(i64::MAX).min(now)
}

impl Pairs {
    pub fn new(cx: &Ctx) -> std::io::Result<Pairs> {
        let opt = || Buf::Opt(Vec::new(), Vec::new());
        let i = || Buf::I64(Vec::new());
        let d = |x| Buf::Dict(Vec::new(), x);
        let calls = cx.table("syscalls", vec![i(), i(), i(), d(SYSCALL), opt(), opt(), opt()])?;
        let block = cx.table("block_io", vec![i(), opt(), d(DEV), i(), i(), d(RW), i(), i(), i()])?;
        let irqs = cx.table("irqs", vec![i(), i(), i(), d(IRQ), d(KIND), i(), i()])?;
        Ok(Pairs {
            calls: calls.map(|t| (t, Map::default(), Reorder::new(cx.spill_dir()))),
            block: block.map(|t| (t, Map::default(), Reorder::new(cx.spill_dir()))),
            irqs: irqs.map(|t| (t, Map::default(), Reorder::new(cx.spill_dir()))),
        })
    }

    #[inline]
    pub fn record(&mut self, cx: &Ctx, r: &Record, seq: u64) -> std::io::Result<()> {
        match r.kind {
            k::SYS_ENTER | k::SYS_EXIT if self.calls.is_some() => self.call(cx, r, seq),
            k::BLOCK_ISSUE | k::BLOCK_COMPLETE | k::BLOCK_ISSUE_OTHER if self.block.is_some() => self.block(cx, r, seq),
            k::IRQ_ENTRY | k::IRQ_EXIT | k::SOFTIRQ_ENTRY | k::SOFTIRQ_EXIT if self.irqs.is_some() => self.irq(cx, r, seq),
            _ => Ok(()),
        }
    }

    fn call(&mut self, cx: &Ctx, r: &Record, seq: u64) -> std::io::Result<()> {
        let (t, tids, out) = self.calls.as_mut().unwrap();
        let f = &k::sys_exit::F;
        let (ts, tid) = (r.ts as i64, f.tid.get(r));
        let v = if r.kind == k::SYS_EXIT { f.ret.get(r) } else { 0 };
        let rec: Sys = (ts, f.nr.get(r), f.pid.get(r), v, seq);
        let s = tids.entry(tid).or_default();
        if !s.held.is_empty() && s.held_ts != ts {
            for x in std::mem::take(&mut s.held) {
                call_exit(cx, tid, s, x, out);
            }
        }
        if r.kind == k::SYS_ENTER {
            if let Some(p) = s.open.replace(rec) {
                lone_enter(cx, tid, p, None, out);
            }
        } else {
            s.held.push(rec);
            s.held_ts = ts;
        }
        if out.due() {
            let b = bound(tids, |o| o.0, ts);
            give_calls(cx, t, out, b)?;
        }
        Ok(())
    }

    fn block(&mut self, cx: &Ctx, r: &Record, seq: u64) -> std::io::Result<()> {
        let (t, keys, out) = self.block.as_mut().unwrap();
        let f = &k::block_issue::F;
        let (ts, dev, sector) = (r.ts as i64, f.dev.get(r), f.sector.get(r));
        let s = keys.entry((dev, sector)).or_default();
        if !s.held.is_empty() && s.held_ts != ts {
            s.held.clear();
            if let Some(i) = s.open.take() {
                out.push((i.0, 0, dev, sector, i.1), (i.0, Some(s.held_ts), dev, sector, i.3, i.2));
            }
        }
        if r.kind == k::BLOCK_COMPLETE {
            s.held.push(());
            s.held_ts = ts;
        } else {
            let next = (r.kind == k::BLOCK_ISSUE).then_some((ts, seq, f.tid.get(r), r.b));
            if let Some(i) = std::mem::replace(&mut s.open, next) {
                out.push((i.0, 1, dev, sector, i.1), (i.0, None, dev, sector, i.3, i.2));
            }
        }
        if s.open.is_none() && s.held.is_empty() {
            keys.remove(&(dev, sector));
        }
        if out.due() {
            let b = bound(keys, |o| o.0, ts);
            give_block(cx, t, out, b)?;
        }
        Ok(())
    }

    fn irq(&mut self, cx: &Ctx, r: &Record, seq: u64) -> std::io::Result<()> {
        let (t, keys, out) = self.irqs.as_mut().unwrap();
        let f = &k::irq_entry::F;
        let grp = if matches!(r.kind, k::IRQ_ENTRY | k::IRQ_EXIT) { 0 } else { 1 };
        let (ts, cpu, num) = (r.ts as i64, r.cpu as i64, f.irq.get(r));
        let s = keys.entry((grp, cpu)).or_default();
        if !s.held.is_empty() && s.held_ts != ts {
            irq_exits(s, grp, cpu, out);
        }
        if matches!(r.kind, k::IRQ_EXIT | k::SOFTIRQ_EXIT) {
            s.held.push(num);
            s.held_ts = ts;
        } else {
            s.open = Some((ts, seq, f.tid.get(r), num));
        }
        if out.due() {
            let b = bound(keys, |o| o.0, ts);
            give_irqs(cx, t, out, b)?;
        }
        Ok(())
    }

    /// The rows still open at the end, the last pages and the footers.
    pub fn finish(self, cx: &Ctx) -> std::io::Result<Vec<(&'static str, usize)>> {
        let mut done = Vec::new();
        if let Some((mut t, tids, mut out)) = self.calls {
            for (tid, mut s) in tids {
                for x in std::mem::take(&mut s.held) {
                    call_exit(cx, tid, &mut s, x, &mut out);
                }
                if let Some(p) = s.open.take() {
                    let died = cx.exit_at.get(&tid).copied().filter(|&d| d >= p.0);
                    lone_enter(cx, tid, p, died, &mut out);
                }
            }
            give_calls(cx, &mut t, &mut out, i64::MAX)?;
            done.extend(cx.finish(Some(t))?);
        }
        if let Some((mut t, keys, mut out)) = self.block {
            for ((dev, sector), s) in keys {
                if let Some(i) = s.open {
                    let end = (!s.held.is_empty()).then_some(s.held_ts);
                    out.push((i.0, if end.is_some() { 0 } else { 1 }, dev, sector, i.1), (i.0, end, dev, sector, i.3, i.2));
                }
            }
            give_block(cx, &mut t, &mut out, i64::MAX)?;
            done.extend(cx.finish(Some(t))?);
        }
        if let Some((mut t, keys, mut out)) = self.irqs {
            for ((grp, cpu), mut s) in keys {
                irq_exits(&mut s, grp, cpu, &mut out);
            }
            give_irqs(cx, &mut t, &mut out, i64::MAX)?;
            done.extend(cx.finish(Some(t))?);
        }
        Ok(done)
    }
}

fn pid_or(cx: &Ctx, pid: i64, tid: i64) -> i64 {
    if pid <= 0 {
        cx.pid_of(tid)
    } else {
        pid
    }
}

fn lone_enter(cx: &Ctx, tid: i64, p: Sys, died: Option<i64>, out: &mut Reorder<SysRow>) {
    out.push((p.0, 1, tid, 0, p.4), (tid, pid_or(cx, p.2, tid), p.1, Some(p.0), died, None));
}

/// An exit in its thread's order: it closes the open entry when the numbers agree (or it is
/// rt_sigreturn's, nr -1), else it is alone (but a forked child's first return, which is no call).
fn call_exit(cx: &Ctx, tid: i64, s: &mut Keyed<Sys, Sys>, x: Sys, out: &mut Reorder<SysRow>) {
    if let Some(p) = s.open.take() {
        if p.1 == x.1 || x.1 == -1 {
            out.push((p.0, 0, tid, 0, p.4), (tid, pid_or(cx, p.2, tid), p.1, Some(p.0), Some(x.0), Some(x.3)));
            return;
        }
        lone_enter(cx, tid, p, None, out);
    }
    if !(FORK_CALLS.contains(&x.1) && x.3 == 0) {
        out.push((x.0, 2, tid, 0, x.4), (tid, pid_or(cx, x.2, tid), x.1, None, Some(x.0), Some(x.3)));
    }
}

fn irq_exits(s: &mut Keyed<Entry, i64>, grp: i64, cpu: i64, out: &mut Reorder<IrqRow>) {
    for num in std::mem::take(&mut s.held) {
        if let Some(e) = s.open.take() {
            if e.3 == num {
                out.push((e.0, grp, cpu, 0, e.1), (cpu, e.2, num, grp, e.0, s.held_ts));
            }
        }
    }
}

fn give_calls(cx: &Ctx, t: &mut Table, out: &mut Reorder<SysRow>, bound: i64) -> std::io::Result<()> {
    out.give(bound, &mut |(tid, pid, nr, start, end, ret)| {
        for (b, v) in t.b.iter_mut().zip([pid, tid, nr, cx.dicts[SYSCALL].index(nr) as i64]) {
            put(b, v);
        }
        put_opt(&mut t.b[4], start);
        put_opt(&mut t.b[5], end);
        put_opt(&mut t.b[6], ret);
        cx.row(t)
    })
}

fn give_block(cx: &Ctx, t: &mut Table, out: &mut Reorder<BlockRow>, bound: i64) -> std::io::Result<()> {
    out.give(bound, &mut |(issue, complete, dev, sector, b, tid)| {
        let r = Record { b, ..Record::default() };
        let f = &k::block_issue::F;
        put(&mut t.b[0], issue);
        put_opt(&mut t.b[1], complete);
        let vals = [cx.dicts[DEV].index(dev) as i64, sector, f.sectors.get(&r) * 512, cx.dicts[RW].index(f.rw.get(&r)) as i64, tid, cx.pid_of(tid), dev];
        for (b, v) in t.b[2..].iter_mut().zip(vals) {
            put(b, v);
        }
        cx.row(t)
    })
}

fn give_irqs(cx: &Ctx, t: &mut Table, out: &mut Reorder<IrqRow>, bound: i64) -> std::io::Result<()> {
    out.give(bound, &mut |(cpu, tid, num, grp, start, end)| {
        for (b, v) in t.b.iter_mut().zip([cpu, tid, num, cx.dicts[IRQ].index(num * 2 + grp) as i64, cx.dicts[KIND].index(grp) as i64, start, end]) {
            put(b, v);
        }
        cx.row(t)
    })
}
