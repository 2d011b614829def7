//! The tables with a row per record, in time order (kernel_rows.py's): switches, faults,
//! samples, kernel_counters, migrations, and wakeups, whose row also needs the woken task's
//! next record (its enqueue, sched_wakeup, when that comes before its next wakeup).

use super::context::{i64s, put, put_opt, Ctx, COMM, COUNTER, STATE};
use super::reorder::Reorder;
use super::table::{Buf, Table};
use oslens_format::{kernel as k, Record};
use super::Map;

pub struct Rows {
    switches: Option<Table>,
    faults: Option<Table>,
    samples: Option<Table>,
    counters: Option<Table>,
    migrations: Option<Table>,
    wakeups: Option<Table>,
    wake: Wakes,
}

/// A wakeup row waiting for the woken task's next record: (ts, cpu, tid, target, waker, waker pid).
type Wake = (i64, i64, i64, i64, i64, i64);

struct Wakes {
    /// per woken task: its last wakeup not yet followed, and its enqueues of one time held
    /// until a later record (at one time a wakeup sorts before an enqueue)
    open: Map<i64, (Option<(Wake, u64)>, Option<i64>)>,
    held: Reorder<(Wake, Option<i64>)>,
}

impl Wakes {
    /// Gives up the open wakeups whose task's enqueue is held from before `ts` (the merge's time):
    /// the task's next record, at `ts` or later, would push the same row, and until it came the
    /// open wakeup held back every later wakeup row (a task woken once, then never again).
    fn close_followed(&mut self, ts: i64) {
        let held = &mut self.held;
        self.open.retain(|_, (open, enq)| match *enq {
            Some(e) if e < ts => {
                if let Some((row, s)) = open.take() {
                    held.push((row.0, 0, 0, 0, s), (row, Some(e)));
                }
                false
            }
            _ => true,
        });
    }
}

impl Rows {
    pub fn new(cx: &Ctx) -> std::io::Result<Rows> {
        let dict = |d| Buf::Dict(Vec::new(), d);
        let mut sw = i64s(10);
        sw[4] = dict(COMM);
        sw[5] = dict(STATE);
        sw[8] = dict(COMM);
        let mut fa = i64s(7);
        fa[3] = Buf::U64(Vec::new());
        fa[4] = Buf::U64(Vec::new());
        let mut sa = i64s(6);
        sa[4] = Buf::U64(Vec::new());
        sa[5] = Buf::Bool(Vec::new());
        let mut co = i64s(4);
        co[1] = dict(COUNTER);
        let mut wa = i64s(8);
        wa[7] = Buf::Opt(Vec::new(), Vec::new());
        Ok(Rows {
            switches: cx.table("switches", sw)?,
            faults: cx.table("faults", fa)?,
            samples: cx.table("samples", sa)?,
            counters: cx.table("kernel_counters", co)?,
            migrations: cx.table("migrations", i64s(4))?,
            wakeups: cx.table("wakeups", wa)?,
            wake: Wakes { open: Map::default(), held: Reorder::new(cx.spill_dir()) },
        })
    }

    /// Adds the rows of one record (in time order).
    #[inline]
    pub fn record(&mut self, cx: &Ctx, r: &Record, seq: u64) -> std::io::Result<()> {
        let (ts, cpu) = (r.ts as i64, r.cpu as i64);
        let (t, vals): (&mut Option<Table>, [i64; 10]) = match r.kind {
            k::SWITCH => {
                let f = &k::switch::F;
                let (prev, next, pp) = (f.prev_tid.get(r), f.next_tid.get(r), f.prev_pid.get(r));
                let prev_pid = if pp <= 0 { cx.pid_of(prev) } else { pp };
                let state = cx.dicts[STATE].index(f.prev_state.get(r)) as i64;
                let (pc, nc) = (cx.comms.at(prev, ts) as i64, cx.comms.at(next, ts) as i64);
                (&mut self.switches, [ts, cpu, prev_pid, prev, pc, state, cx.pid_of(next), next, nc, f.prev_prio.get(r)])
            }
            k::FAULT => {
                let f = &k::fault::F;
                let tid = f.tid.get(r);
                (&mut self.faults, [ts, cx.pid_of(tid), tid, f.address.get(r), f.ip.get(r), f.error_code.get(r), cpu, 0, 0, 0])
            }
            k::SAMPLE => {
                let f = &k::sample::F;
                (&mut self.samples, [ts, f.pid.get(r), f.tid.get(r), cpu, f.ip.get(r), f.in_kernel.get(r), 0, 0, 0, 0])
            }
            k::COUNTER => {
                let f = &k::counter::F;
                let name = cx.dicts[COUNTER].index(f.counter.get(r)) as i64;
                (&mut self.counters, [ts, name, f.value.get(r), f.time_enabled_ns.get(r), 0, 0, 0, 0, 0, 0])
            }
            k::MIGRATE => {
                let f = &k::migrate::F;
                (&mut self.migrations, [ts, f.tid.get(r), f.orig_cpu.get(r), f.dest_cpu.get(r), 0, 0, 0, 0, 0, 0])
            }
            k::WAKEUP | k::ENQUEUE if self.wakeups.is_some() => return self.wake_record(cx, r, seq),
            _ => return Ok(()),
        };
        if let Some(t) = t {
            for (b, v) in t.b.iter_mut().zip(vals) {
                put(b, v);
            }
            cx.row(t)?;
        }
        Ok(())
    }

    fn wake_record(&mut self, cx: &Ctx, r: &Record, seq: u64) -> std::io::Result<()> {
        let ts = r.ts as i64;
        let tid = k::wakeup::F.tid.get(r);
        let w = &mut self.wake;
        let (open, held) = w.open.entry(tid).or_default();
        // an enqueue held from an earlier time follows the open wakeup (or nothing)
        if held.is_some_and(|h| h != ts) {
            if let Some((row, s)) = open.take() {
                w.held.push((row.0, 0, 0, 0, s), (row, *held));
            }
            *held = None;
        }
        if r.kind == k::ENQUEUE {
            held.get_or_insert(ts);
        } else {
            // the open wakeup is followed by this one; an enqueue held at this time follows this one
            if let Some((row, s)) = open.take() {
                w.held.push((row.0, 0, 0, 0, s), (row, None));
            }
            let f = &k::wakeup::F;
            *open = Some(((ts, r.cpu as i64, tid, f.target_cpu.get(r), f.waker_tid.get(r), f.waker_pid.get(r)), seq));
        }
        if open.is_none() && held.is_none() {
            w.open.remove(&tid);
        }
        if w.held.due() {
            w.close_followed(ts);
            let bound = w.open.values().filter_map(|(o, _)| o.map(|x| x.0 .0)).min().unwrap_or(i64::MAX).min(ts);
            self.give_wakeups(cx, bound)?;
        }
        Ok(())
    }

    fn give_wakeups(&mut self, cx: &Ctx, bound: i64) -> std::io::Result<()> {
        let Some(t) = self.wakeups.as_mut() else { return Ok(()) };
        self.wake.held.give(bound, &mut |(w, e): (Wake, Option<i64>)| {
            let (ts, cpu, tid, target, waker, waker_pid) = w;
            for (b, v) in t.b.iter_mut().zip([ts, cpu, tid, target, waker, cx.pid_of(tid), waker_pid]) {
                put(b, v);
            }
            put_opt(&mut t.b[7], e.filter(|&e| e > 0));
            cx.row(t)
        })
    }

    /// The last rows and the files' footers; the rows each table got.
    pub fn finish(mut self, cx: &Ctx) -> std::io::Result<Vec<(&'static str, usize)>> {
        let open: Vec<_> = self.wake.open.drain().collect();
        for (_, (o, held)) in open {
            if let Some((row, s)) = o {
                self.wake.held.push((row.0, 0, 0, 0, s), (row, held));
            }
        }
        self.give_wakeups(cx, i64::MAX)?;
        let mut out = Vec::new();
        for t in [self.switches, self.faults, self.samples, self.counters, self.migrations, self.wakeups] {
            out.extend(cx.finish(t)?);
        }
        Ok(out)
    }
}
