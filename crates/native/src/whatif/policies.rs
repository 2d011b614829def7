//! The what-if policies, a line-for-line port of python/oslens/whatif/policies.py (the reference:
//! python/oslens/whatif/test_native.py checks both give the same schedules). Adding a policy = one
//! variant of `Policy` and its arms below, plus its Python class.

use super::task::{Task, RUNNING};
use std::collections::VecDeque;

pub const NICE_WEIGHT: [i64; 40] = [
    88761, 71755, 56483, 46273, 36291, 29154, 23254, 18705, 14949, 11916, 9548, 7620, 6100, 4904, 3906, 3121,
    2501, 1991, 1586, 1277, 1024, 820, 655, 526, 423, 335, 272, 215, 172, 137, 110, 87, 70, 56, 45, 36, 29, 23,
    18, 15,
];

#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Why {
    Arrive,
    Wake,
    Preempt,
    Expire,
    Yield,
}

/// The running state the simulator shares with policies that look at it (SRT's remaining time).
pub struct Cpus<'a> {
    pub cur: &'a [Option<usize>],
    pub since: &'a [i64],
}

pub enum Kind {
    Fifo { lifo: bool },
    Rr { q: i64 },
    Sjf,
    Srt { oracle: bool, alpha: f64, init: i64 },
    Hrrn,
    Mlfq { levels: usize, q: Vec<i64>, allot: Vec<i64> },
    Unix { q: i64, tick: i64 },
    Eevdf { slice: i64, bg_slice: Option<i64>, tick: i64, wakeup_preempt: bool, wake_resched: bool, parity: bool },
    Rt { q: i64, tick: i64, rr: bool },
}

pub struct Policy {
    pub kind: Kind,
    pub period: Option<i64>,
    q: VecDeque<usize>,
    ready: Vec<usize>,
    queues: Vec<VecDeque<usize>>,
    fair: VecDeque<usize>,
    order: u64,
    sum_w: i64,
    sum_wv: f64,
    v0: f64,
    yielder: Option<usize>,
}

fn take(q: &mut VecDeque<usize>, tasks: &[Task], cpu: usize) -> Option<usize> {
    let k = q.iter().position(|&i| tasks[i].allowed(cpu))?;
    q.remove(k)
}

/// The allowed task with the smallest key (the first of equals), removed by swapping with the last.
fn take_best<K: PartialOrd>(ready: &mut Vec<usize>, tasks: &[Task], cpu: usize, key: impl Fn(usize) -> K) -> Option<usize> {
    let mut best: Option<(usize, K)> = None;
    for (k, &i) in ready.iter().enumerate() {
        if tasks[i].allowed(cpu) {
            let v = key(i);
            if best.as_ref().map_or(true, |(_, b)| v < *b) {
                best = Some((k, v));
            }
        }
    }
    let (k, _) = best?;
    Some(ready.swap_remove(k))
}

impl Policy {
    pub fn new(kind: Kind, period: Option<i64>) -> Policy {
        let levels = if let Kind::Mlfq { levels, .. } = &kind { *levels } else { 0 };
        Policy {
            kind,
            period,
            q: VecDeque::new(),
            ready: Vec::new(),
            queues: (0..levels).map(|_| VecDeque::new()).collect(),
            fair: VecDeque::new(),
            order: 0,
            sum_w: 0,
            sum_wv: 0.0,
            v0: 0.0,
            yielder: None,
        }
    }

    fn v_avg(&self) -> f64 {
        if self.sum_w != 0 {
            self.sum_wv / self.sum_w as f64
        } else {
            self.v0
        }
    }

    fn vslice(t: &Task) -> f64 {
        (t.p.slice * 1024) as f64 / t.p.w as f64
    }

    fn running_for(t: &Task, now: i64, cpus: &Cpus) -> i64 {
        if t.state == RUNNING && t.last_cpu >= 0 && cpus.cur[t.last_cpu as usize] == Some(t.i) {
            (now - cpus.since[t.last_cpu as usize]).max(0)
        } else {
            0
        }
    }

    fn left_of(&self, t: &Task, now: i64, cpus: &Cpus) -> f64 {
        if let Kind::Srt { oracle, init, .. } = self.kind {
            if oracle {
                return (t.remaining() - Self::running_for(t, now, cpus)) as f64;
            }
            let guess = if t.p.has_tau { t.p.tau } else { init as f64 };
            return (guess - t.progress as f64 - Self::running_for(t, now, cpus) as f64).max(0.0);
        }
        0.0
    }

    fn unix_prio(t: &Task, tick: i64) -> i64 {
        let x = t.p.est / (4 * tick) as f64 + (2 * t.nice) as f64;
        (x.trunc() as i64).div_euclid(4)
    }

    pub fn add(&mut self, tasks: &mut [Task], i: usize, _now: i64, why: Why) {
        match &self.kind {
            Kind::Fifo { lifo } => {
                if *lifo || why == Why::Preempt {
                    self.q.push_front(i)
                } else {
                    self.q.push_back(i)
                }
            }
            Kind::Rr { .. } => {
                if why == Why::Preempt {
                    self.q.push_front(i)
                } else {
                    self.q.push_back(i)
                }
            }
            Kind::Sjf | Kind::Srt { .. } | Kind::Hrrn => self.ready.push(i),
            Kind::Mlfq { .. } => {
                let p = &mut tasks[i].p;
                if why == Why::Arrive || !p.has_level {
                    p.has_level = true;
                    p.level = 0;
                    p.used = 0;
                    p.qused = 0;
                }
                self.queues[p.level].push_back(i);
            }
            Kind::Unix { .. } => {
                self.order += 1;
                tasks[i].p.order = self.order;
                self.ready.push(i);
            }
            Kind::Eevdf { slice, bg_slice, .. } => {
                let t = &mut tasks[i];
                if t.p.w == 0 {
                    t.p.w = NICE_WEIGHT[(t.nice.clamp(-20, 19) + 20) as usize];
                    t.p.slice = match bg_slice {
                        Some(b) if t.background => *b,
                        _ => *slice,
                    };
                    t.p.lag = 0.0;
                }
                if why == Why::Arrive || why == Why::Wake {
                    let v = self.v_avg();
                    t.p.v = if why == Why::Wake { v - t.p.lag } else { v };
                    let vs = Self::vslice(t);
                    t.p.d = t.p.v + if why == Why::Arrive { vs / 2.0 } else { vs };
                    self.sum_w += t.p.w;
                    self.sum_wv += t.p.w as f64 * t.p.v;
                } else if why == Why::Preempt && t.p.v >= t.p.d - 1e-6 {
                    // preempted at its slice's end: update_deadline gives it the next one
                    t.p.d = t.p.v + Self::vslice(t);
                }
                self.ready.push(i);
            }
            Kind::Rt { .. } => {
                let q = if tasks[i].background { &mut self.fair } else { &mut self.q };
                if why == Why::Preempt {
                    q.push_front(i)
                } else {
                    q.push_back(i)
                }
            }
        }
    }

    pub fn pick(&mut self, tasks: &mut [Task], cpu: usize, now: i64, cpus: &Cpus) -> Option<usize> {
        match &self.kind {
            Kind::Fifo { .. } => take(&mut self.q, tasks, cpu),
            Kind::Rr { .. } => {
                let st = take(&mut self.q, tasks, cpu);
                if let Some(i) = st {
                    tasks[i].p.used = 0;
                }
                st
            }
            Kind::Sjf => take_best(&mut self.ready, tasks, cpu, |i| (tasks[i].remaining(), tasks[i].ready_at, i)),
            Kind::Srt { .. } => {
                let ready = std::mem::take(&mut self.ready);
                let mut ready = ready;
                let st = take_best(&mut ready, tasks, cpu, |i| (self.left_of(&tasks[i], now, cpus), tasks[i].ready_at, i));
                self.ready = ready;
                st
            }
            Kind::Hrrn => take_best(&mut self.ready, tasks, cpu, |i| {
                let t = &tasks[i];
                let s = t.remaining().max(1);
                (-((now - t.ready_at + s) as f64) / s as f64, t.ready_at, i)
            }),
            Kind::Mlfq { .. } => {
                for lv in 0..self.queues.len() {
                    if let Some(i) = take(&mut self.queues[lv], tasks, cpu) {
                        tasks[i].p.qused = 0;
                        return Some(i);
                    }
                }
                None
            }
            Kind::Unix { tick, .. } => {
                let tick = *tick;
                let st = take_best(&mut self.ready, tasks, cpu, |i| (Self::unix_prio(&tasks[i], tick), tasks[i].p.order));
                if let Some(i) = st {
                    tasks[i].p.used = 0;
                }
                st
            }
            Kind::Eevdf { .. } => {
                let v = self.v_avg();
                let (mut best, mut bd, mut fb, mut fd, mut yk) = (None, f64::INFINITY, None, f64::INFINITY, None);
                for (k, &i) in self.ready.iter().enumerate() {
                    let t = &tasks[i];
                    if t.allowed(cpu) {
                        if Some(i) == self.yielder {
                            yk = Some(k);
                            continue;
                        }
                        if t.p.v <= v + 1e-6 && (best.is_none() || t.p.d < bd) {
                            best = Some(k);
                            bd = t.p.d;
                        }
                        if fb.is_none() || t.p.d < fd {
                            fb = Some(k);
                            fd = t.p.d;
                        }
                    }
                }
                self.yielder = None;
                let k = best.or(fb).or(yk)?;
                Some(self.ready.swap_remove(k))
            }
            Kind::Rt { .. } => {
                let st = take(&mut self.q, tasks, cpu).or_else(|| take(&mut self.fair, tasks, cpu));
                if let Some(i) = st {
                    if !tasks[i].p.has_used {
                        tasks[i].p.has_used = true;
                        tasks[i].p.used = 0;
                    }
                }
                st
            }
        }
    }

    pub fn quantum(&self, t: &Task, start: i64) -> Option<i64> {
        match &self.kind {
            Kind::Rr { q } | Kind::Unix { q, .. } => Some(q - t.p.used),
            Kind::Mlfq { q, allot, .. } => Some((q[t.p.level] - t.p.qused).min(allot[t.p.level] - t.p.used)),
            Kind::Eevdf { tick, .. } => {
                let tt = ((t.p.d - t.p.v) * t.p.w as f64 / 1024.0).max(0.0);
                let mut end = start + (tt + 0.999) as i64;
                if *tick != 0 {
                    end = -((-end).div_euclid(*tick)) * tick;
                }
                Some((end - start).max(1))
            }
            Kind::Rt { q, tick, rr } => {
                if !t.background {
                    if *rr { Some(q - t.p.used) } else { None }
                } else if *tick != 0 {
                    Some(*tick)
                } else {
                    None
                }
            }
            _ => None,
        }
    }

    pub fn ran(&mut self, tasks: &mut [Task], i: usize, ns: i64) {
        let t = &mut tasks[i];
        match &self.kind {
            Kind::Rr { .. } | Kind::Rt { .. } => t.p.used += ns,
            Kind::Unix { .. } => {
                t.p.est += ns as f64;
                t.p.has_est = true;
                t.p.used += ns;
            }
            Kind::Mlfq { levels, q, allot } => {
                t.p.used += ns;
                t.p.qused += ns;
                let lv = t.p.level;
                if t.p.used >= allot[lv] {
                    t.p.level = (lv + 1).min(levels - 1);
                    t.p.used = 0;
                    t.p.qused = q[t.p.level];
                }
            }
            Kind::Eevdf { .. } => {
                let dv = (ns * 1024) as f64 / t.p.w as f64;
                t.p.v += dv;
                self.sum_wv += t.p.w as f64 * dv;
            }
            _ => {}
        }
    }

    pub fn expired(&mut self, t: &mut Task) -> bool {
        match &self.kind {
            Kind::Rr { q } | Kind::Unix { q, .. } => t.p.used >= *q,
            Kind::Mlfq { q, .. } => t.p.qused >= q[t.p.level],
            Kind::Eevdf { .. } => {
                if t.p.v >= t.p.d - 1e-6 {
                    t.p.d = t.p.v + Self::vslice(t);
                    true
                } else {
                    false
                }
            }
            Kind::Rt { q, tick, rr } => {
                if !t.background && !*rr {
                    return false;
                }
                let limit = if !t.background { *q } else if *tick != 0 { *tick } else { 1 << 62 };
                if t.p.used >= limit {
                    t.p.used = 0;
                    true
                } else {
                    false
                }
            }
            _ => false,
        }
    }

    pub fn preempts(&self, w: &Task, r: &Task, now: i64, cpus: &Cpus) -> bool {
        match &self.kind {
            Kind::Srt { .. } => self.left_of(w, now, cpus) < self.left_of(r, now, cpus),
            Kind::Mlfq { .. } => w.p.level < r.p.level,
            Kind::Unix { tick, .. } => Self::unix_prio(w, *tick) < Self::unix_prio(r, *tick),
            Kind::Eevdf { wakeup_preempt, parity, .. } => {
                if !*wakeup_preempt || (*parity && w.p.slice >= r.p.slice) {
                    return false;
                }
                w.p.v <= self.v_avg() + 1e-6 && w.p.d < r.p.d
            }
            Kind::Rt { .. } => !w.background && r.background,
            _ => false,
        }
    }

    /// Has running task r used up its slice `ran` ns after it was last accounted? The kernel's
    /// enqueue of a woken task runs update_curr, which reschedules such a task at once rather
    /// than at the next tick (docs/whatif.md, "wake-ups").
    pub fn slice_over(&self, r: &Task, ran: i64) -> bool {
        match &self.kind {
            Kind::Eevdf { wake_resched, .. } => {
                *wake_resched && r.p.v + (ran.max(0) * 1024) as f64 / r.p.w as f64 >= r.p.d - 1e-6
            }
            _ => false,
        }
    }

    /// Is running task a a better victim than b?
    pub fn worse(&self, a: &Task, b: &Task, now: i64, cpus: &Cpus) -> bool {
        match &self.kind {
            Kind::Srt { .. } => self.left_of(a, now, cpus) > self.left_of(b, now, cpus),
            Kind::Mlfq { .. } => a.p.level > b.p.level,
            Kind::Unix { tick, .. } => Self::unix_prio(a, *tick) > Self::unix_prio(b, *tick),
            Kind::Eevdf { .. } => a.p.d > b.p.d,
            Kind::Rt { .. } => a.background && !b.background,
            _ => false,
        }
    }

    pub fn should_yield(&self, tasks: &[Task], r: usize, cpu: usize) -> bool {
        match &self.kind {
            Kind::Mlfq { .. } => {
                let lv = tasks[r].p.level;
                self.queues[..lv].iter().any(|q| q.iter().any(|&i| tasks[i].allowed(cpu)))
            }
            Kind::Unix { tick, .. } => {
                let mine = Self::unix_prio(&tasks[r], *tick);
                self.ready.iter().any(|&i| Self::unix_prio(&tasks[i], *tick) < mine && tasks[i].allowed(cpu))
            }
            _ => false,
        }
    }

    pub fn tick(&mut self, tasks: &mut [Task], running: usize) {
        match &self.kind {
            Kind::Mlfq { .. } => {
                let mut moved = Vec::new();
                for q in self.queues.iter_mut() {
                    moved.extend(q.drain(..));
                }
                for t in tasks.iter_mut() {
                    if t.p.has_level {
                        t.p.level = 0;
                        t.p.used = 0;
                    }
                }
                self.queues[0].extend(moved);
            }
            Kind::Unix { tick, .. } => {
                let load = (self.ready.len() + running) as f64;
                let f = 2.0 * load / (2.0 * load + 1.0);
                for t in tasks.iter_mut() {
                    if t.p.has_est {
                        t.p.est = t.p.est * f + (t.nice * tick) as f64;
                    }
                }
            }
            _ => {}
        }
    }

    /// `t` calls sched_yield while another task is ready; `add(.., Why::Yield)` follows (policies.py).
    pub fn yielded(&mut self, t: &mut Task) {
        if let Kind::Eevdf { .. } = &self.kind {
            if t.p.v >= t.p.d - 1e-6 {
                t.p.d = t.p.v + Self::vslice(t);
            }
            t.p.d += Self::vslice(t);
            self.yielder = Some(t.i);
        }
    }

    pub fn burst_done(&mut self, t: &mut Task) {
        match &self.kind {
            Kind::Rr { .. } => t.p.used = 0,
            Kind::Srt { oracle: false, alpha, init } => {
                let done = t.bursts_at(t.seg) as f64;
                let prev = if t.p.has_tau { t.p.tau } else { *init as f64 };
                t.p.tau = alpha * done + (1.0 - alpha) * prev;
                t.p.has_tau = true;
            }
            _ => {}
        }
    }

    pub fn left(&mut self, t: &mut Task) {
        if let Kind::Eevdf { tick, .. } = &self.kind {
            let v = self.v_avg();
            let limit = (2.0 * Self::vslice(t)).max((tick * 1024) as f64 / t.p.w as f64);
            t.p.lag = (-limit).max(limit.min(v - t.p.v));
            self.sum_w -= t.p.w;
            self.sum_wv -= t.p.w as f64 * t.p.v;
            self.v0 = v;
            if self.sum_w == 0 {
                self.sum_wv = 0.0;
            }
        }
    }
}
