//! The what-if discrete-event simulator, a line-for-line port of python/oslens/whatif/sim.py
//! (read that file's docstring for the model; python/oslens/whatif/test_native.py checks both
//! give the same schedules). Events: (time, kind, seq, a, b), arrivals and wake-ups of an instant
//! before its CPU stops.

use super::policies::{Cpus, Policy, Why};
use super::task::{Task, TaskSpec, BLOCKED, BLOCK_DEP, BLOCK_UNTIL, BLOCK_YIELD, DONE, READY, RUNNING};
use std::cmp::Reverse;
use std::collections::BinaryHeap;

const ARRIVE: u8 = 0;
const UNBLOCK: u8 = 1;
const STOP: u8 = 2;
const TICK: u8 = 3;

pub struct Outcome {
    pub tasks: Vec<Task>,
    pub decisions: i64,
    pub switches: i64,
    pub segments: Vec<(i64, i64, i64, i64)>, // cpu, task, start, end
}

pub struct Sim {
    tasks: Vec<Task>,
    policy: Policy,
    switch_ns: i64,
    migrate_ns: i64,
    keep: bool,
    segments: Vec<(i64, i64, i64, i64)>,
    ncpu: usize,
    cur: Vec<Option<usize>>,
    since: Vec<i64>,
    version: Vec<i64>,
    stop_at: Vec<i64>,
    last: Vec<Option<usize>>,
    events: BinaryHeap<Reverse<(i64, u8, u64, usize, i64)>>,
    pending: Vec<usize>,
    seq: u64,
    decisions: i64,
    switches: i64,
    arrivals: Vec<(i64, Option<(usize, usize, i64)>)>,
}

impl Sim {
    pub fn new(specs: Vec<TaskSpec>, ncpus: usize, policy: Policy, switch_ns: i64, migrate_ns: i64, keep: bool) -> Sim {
        let mut tasks: Vec<Task> = Vec::with_capacity(specs.len());
        let mut arrivals = Vec::with_capacity(specs.len());
        let mut deps: Vec<(usize, usize, i64, usize, i64)> = Vec::new(); // producer, burst, offset, target, block
        for (j, s) in specs.iter().enumerate() {
            for &(b, task, burst, off) in &s.block_deps {
                deps.push((task, burst, off, j, b as i64));
            }
            if let Some((task, burst, off)) = s.arrival_dep {
                deps.push((task, burst, off, j, -1));
            }
            arrivals.push((s.arrival, s.arrival_dep));
        }
        for (i, s) in specs.into_iter().enumerate() {
            tasks.push(Task::new(i, s));
        }
        for (task, burst, off, j, b) in deps {
            tasks[task].points.entry(burst).or_default().push((off, j, b));
        }
        for t in tasks.iter_mut() {
            for lst in t.points.values_mut() {
                lst.sort();
            }
        }
        let ncpu = ncpus.max(1);
        Sim {
            tasks,
            policy,
            switch_ns,
            migrate_ns,
            keep,
            segments: Vec::new(),
            ncpu,
            cur: vec![None; ncpu],
            since: vec![0; ncpu],
            version: vec![0; ncpu],
            stop_at: vec![0; ncpu],
            last: vec![None; ncpu],
            events: BinaryHeap::new(),
            pending: Vec::new(),
            seq: 0,
            decisions: 0,
            switches: 0,
            arrivals,
        }
    }

    fn push(&mut self, time: i64, kind: u8, a: usize, b: i64) {
        self.seq += 1;
        self.events.push(Reverse((time, kind, self.seq, a, b)));
    }

    pub fn run(mut self) -> Outcome {
        for i in 0..self.tasks.len() {
            if self.arrivals[i].1.is_none() {
                self.push(self.arrivals[i].0, ARRIVE, i, 0);
            }
        }
        let period = self.policy.period;
        if let Some(p) = period {
            self.push(p, TICK, 0, 0);
        }
        while let Some(Reverse((time, kind, _s, a, b))) = self.events.pop() {
            match kind {
                STOP => {
                    if b == self.version[a] {
                        self.stop(a, time);
                    }
                }
                ARRIVE => self.make_ready(a, time, Why::Arrive),
                UNBLOCK => {
                    let t = &self.tasks[a];
                    if t.state == BLOCKED && t.seg as i64 == b {
                        self.make_ready(a, time, Why::Wake);
                    }
                }
                _ => {
                    if self.events.is_empty() || self.tasks.iter().all(|t| t.state == DONE) {
                        continue;
                    }
                    let running = self.cur.iter().filter(|c| c.is_some()).count();
                    self.policy.tick(&mut self.tasks, running);
                    self.recheck_all(time);
                    self.push(time + period.unwrap_or(1), TICK, 0, 0);
                }
            }
            if !self.pending.is_empty() {
                let flush = match self.events.peek() {
                    None => true,
                    Some(Reverse((t, k, ..))) => *t != time || *k >= STOP,
                };
                if flush {
                    self.place_pending(time);
                }
            }
        }
        Outcome { tasks: self.tasks, decisions: self.decisions, switches: self.switches, segments: self.segments }
    }

    fn cpus(&self) -> Cpus<'_> {
        Cpus { cur: &self.cur, since: &self.since }
    }

    fn make_ready(&mut self, i: usize, now: i64, why: Why) {
        let t = &mut self.tasks[i];
        if t.arrived_at < 0 {
            t.arrived_at = now;
        }
        t.state = READY;
        t.ready_at = now;
        self.policy.add(&mut self.tasks, i, now, why);
        self.pending.push(i);
    }

    fn place_pending(&mut self, now: i64) {
        let pending = std::mem::take(&mut self.pending);
        for i in pending {
            if self.tasks[i].state == READY {
                self.place(i, now);
            }
        }
    }

    fn place(&mut self, i: usize, now: i64) {
        for c in 0..self.ncpu {
            if self.cur[c].is_none() && self.tasks[i].allowed(c) {
                self.dispatch(c, now);
                if self.tasks[i].state != READY {
                    return;
                }
            }
        }
        if self.tasks[i].state != READY {
            return;
        }
        let mut victim: Option<usize> = None;
        let mut worst: Option<usize> = None;
        for c in 0..self.ncpu {
            if let Some(r) = self.cur[c] {
                let cpus = self.cpus();
                if self.tasks[i].allowed(c)
                    && (self.policy.preempts(&self.tasks[i], &self.tasks[r], now, &cpus)
                        || self.policy.slice_over(&self.tasks[r], now - self.since[c]))
                {
                    let better = match worst {
                        None => true,
                        Some(w) => self.policy.worse(&self.tasks[r], &self.tasks[w], now, &cpus),
                    };
                    if better {
                        victim = Some(c);
                        worst = Some(r);
                    }
                }
            }
        }
        if let Some(c) = victim {
            self.preempt(c, now);
        }
    }

    fn recheck_all(&mut self, now: i64) {
        for c in 0..self.ncpu {
            if self.cur[c].is_none() {
                self.dispatch(c, now);
            }
        }
        for c in 0..self.ncpu {
            if let Some(r) = self.cur[c] {
                if self.policy.should_yield(&self.tasks, r, c) {
                    self.preempt(c, now);
                }
            }
        }
    }

    fn account(&mut self, c: usize, now: i64) -> usize {
        let i = self.cur[c].expect("a running task");
        let ran = now - self.since[c];
        if ran > 0 {
            self.tasks[i].progress += ran;
            self.policy.ran(&mut self.tasks, i, ran);
            if self.keep {
                self.segments.push((c as i64, i as i64, self.since[c], now));
            }
        }
        self.since[c] = now;
        i
    }

    fn preempt(&mut self, c: usize, now: i64) {
        if now < self.since[c] || self.stop_at[c] <= now {
            return;
        }
        let i = self.account(c, now);
        self.fire_points(i, now);
        self.version[c] += 1;
        self.cur[c] = None;
        let t = &mut self.tasks[i];
        t.state = READY;
        t.ready_at = now;
        t.involuntary += 1;
        self.policy.add(&mut self.tasks, i, now, Why::Preempt);
        self.dispatch(c, now);
    }

    fn pick(&mut self, c: usize, now: i64) -> Option<usize> {
        let cpus = Cpus { cur: &self.cur, since: &self.since };
        self.policy.pick(&mut self.tasks, c, now, &cpus)
    }

    fn dispatch(&mut self, c: usize, now: i64) {
        let mut st = self.pick(c, now);
        self.decisions += 1;
        while let Some(i) = st {
            if now < self.tasks[i].until {
                break;
            }
            self.leave(i, now);
            st = self.pick(c, now);
        }
        let Some(i) = st else {
            self.cur[c] = None;
            self.last[c] = None;
            return;
        };
        let mut cost = 0;
        if self.last[c] != Some(i) {
            cost = self.switch_ns;
            self.switches += 1;
            self.tasks[i].dispatches += 1;
        }
        let t = &mut self.tasks[i];
        if t.last_cpu >= 0 && t.last_cpu != c as i64 {
            cost += self.migrate_ns;
        }
        t.waiting += now - t.ready_at;
        if t.first_run < 0 {
            t.first_run = now;
        }
        t.state = RUNNING;
        t.last_cpu = c as i64;
        self.cur[c] = Some(i);
        self.last[c] = Some(i);
        self.since[c] = now + cost;
        self.plan(c, now + cost);
    }

    fn leave(&mut self, i: usize, now: i64) {
        let t = &mut self.tasks[i];
        t.state = DONE;
        t.done_at = now.min(t.until);
        self.policy.left(t);
    }

    fn plan(&mut self, c: usize, start: i64) {
        let i = self.cur[c].expect("a running task");
        let t = &self.tasks[i];
        let mut run = (t.bursts[t.seg] - t.progress).min((t.until - start).max(0));
        if let Some(pts) = t.points.get(&t.seg) {
            if t.pi < pts.len() {
                run = run.min((pts[t.pi].0 - t.progress).max(0));
            }
        }
        if let Some(q) = self.policy.quantum(t, start) {
            run = run.min(q.max(1));
        }
        self.version[c] += 1;
        self.stop_at[c] = start + run;
        let v = self.version[c];
        self.push(start + run, STOP, c, v);
    }

    fn fire_points(&mut self, i: usize, now: i64) {
        loop {
            let t = &self.tasks[i];
            let Some(pts) = t.points.get(&t.seg) else { return };
            if t.pi >= pts.len() || pts[t.pi].0 > t.progress {
                return;
            }
            let (_off, j, b) = pts[t.pi];
            self.tasks[i].pi += 1;
            if b < 0 {
                self.push(now, ARRIVE, j, 0);
            } else if self.tasks[j].state == BLOCKED && self.tasks[j].seg as i64 == b + 1 {
                self.push(now, UNBLOCK, j, b + 1);
            } else {
                self.tasks[j].fired.insert(b as usize);
            }
        }
    }

    fn stop(&mut self, c: usize, now: i64) {
        let i = self.account(c, now);
        self.fire_points(i, now);
        if now >= self.tasks[i].until {
            self.leave(i, now);
            self.cur[c] = None;
            self.last[c] = None;
            self.version[c] += 1;
            self.dispatch(c, now);
            return;
        }
        if self.tasks[i].progress >= self.tasks[i].bursts[self.tasks[i].seg] {
            let t = &self.tasks[i];
            if t.seg < t.blocks.len() && t.blocks[t.seg].kind == BLOCK_YIELD {
                self.sched_yield(c, i, now);
                return;
            }
            if self.next_burst(i, now) {
                self.plan(c, now);
                return;
            }
            self.cur[c] = None;
            self.last[c] = None;
            self.version[c] += 1;
            self.dispatch(c, now);
            return;
        }
        if self.policy.expired(&mut self.tasks[i]) {
            self.requeue(c, i, now, Why::Expire);
            return;
        }
        self.plan(c, now);
    }

    /// Task i goes back to the ready queue and the CPU picks again (maybe i itself).
    fn requeue(&mut self, c: usize, i: usize, now: i64, why: Why) {
        self.cur[c] = None;
        self.version[c] += 1;
        self.tasks[i].state = READY;
        self.tasks[i].ready_at = now;
        self.policy.add(&mut self.tasks, i, now, why);
        self.dispatch(c, now);
        if self.cur[c] != Some(i) {
            self.tasks[i].involuntary += 1;
        }
    }

    /// sched_yield at the end of a burst (sim.py `_yield`): requeued behind the others when
    /// another ready task may run on this CPU, else it goes on.
    fn sched_yield(&mut self, c: usize, i: usize, now: i64) {
        let t = &mut self.tasks[i];
        t.seg += 1;
        t.progress = 0;
        t.pi = 0;
        if !self.tasks.iter().any(|t| t.state == READY && t.allowed(c)) {
            self.plan(c, now);
            return;
        }
        self.policy.yielded(&mut self.tasks[i]);
        self.requeue(c, i, now, Why::Yield);
    }

    fn next_burst(&mut self, i: usize, now: i64) -> bool {
        let b = self.tasks[i].seg;
        self.policy.burst_done(&mut self.tasks[i]);
        let t = &mut self.tasks[i];
        if b >= t.blocks.len() {
            t.state = DONE;
            t.done_at = now;
            self.policy.left(t);
            return false;
        }
        let block = t.blocks[b];
        t.seg += 1;
        t.progress = 0;
        t.pi = 0;
        let seg = t.seg as i64;
        match block.kind {
            BLOCK_DEP => {
                if t.fired.contains(&b) {
                    return true;
                }
                t.state = BLOCKED;
            }
            BLOCK_UNTIL => {
                if block.duration <= now {
                    return true;
                }
                t.state = BLOCKED;
                self.push(block.duration, UNBLOCK, i, seg);
            }
            _ => {
                if block.duration <= 0 {
                    return true;
                }
                t.state = BLOCKED;
                self.push(now + block.duration, UNBLOCK, i, seg);
            }
        }
        let t = &mut self.tasks[i];
        t.voluntary += 1;
        self.policy.left(t);
        false
    }
}

#[cfg(test)]
mod tests {
    use super::super::policies::{Kind, Policy};
    use super::super::task::BlockSpec;
    use super::*;

    const MS: i64 = 1_000_000;

    fn task(bursts: Vec<i64>, blocks: Vec<BlockSpec>, block_deps: Vec<(usize, usize, usize, i64)>) -> TaskSpec {
        TaskSpec { bursts, blocks, arrival: 0, arrival_dep: None, block_deps, cpus: Vec::new(), nice: 0, background: false, until: 1 << 62 }
    }

    #[test]
    fn round_robin_of_three_equal_jobs() {
        // OSTEP 7.6: three 5 ms jobs, 1 ms quantum: done at 13, 14, 15 ms, five turns each
        let specs = (0..3).map(|_| task(vec![5 * MS], vec![], vec![])).collect();
        let out = Sim::new(specs, 1, Policy::new(Kind::Rr { q: MS }, None), 0, 0, false).run();
        assert_eq!(out.tasks.iter().map(|t| t.done_at).collect::<Vec<_>>(), vec![13 * MS, 14 * MS, 15 * MS]);
        assert_eq!(out.tasks.iter().map(|t| t.dispatches).collect::<Vec<_>>(), vec![5, 5, 5]);
        assert_eq!(out.switches, 15);
    }

    #[test]
    fn a_consumer_waits_for_its_producers_point() {
        // task 1 runs 1 ms, then waits until task 0 is 2 ms into its 4 ms burst, then runs 1 ms more
        let producer = task(vec![4 * MS], vec![], vec![]);
        let consumer = task(vec![MS, MS], vec![BlockSpec { kind: BLOCK_DEP, duration: 0 }], vec![(0, 0, 0, 2 * MS)]);
        let out = Sim::new(vec![producer, consumer], 2, Policy::new(Kind::Fifo { lifo: false }, None), 0, 0, true).run();
        assert_eq!((out.tasks[0].done_at, out.tasks[1].done_at), (4 * MS, 3 * MS));
        assert!(out.segments.contains(&(1, 1, 2 * MS, 3 * MS)));
    }
}
