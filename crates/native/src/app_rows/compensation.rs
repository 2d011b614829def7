//! Compensation's bookkeeping (oslens.calibrate.compensate): each time less the cost of the
//! thread's records before it, computed as the records go by.

use super::clock::rint;
use oslens_format::kinds;

/// cost of its earlier records at each time its records' running maximum rises (the breakpoints
/// a lookup by time needs: the first record whose running maximum reaches a time is always one
/// of them) and its cost so far; per thread, its records per kind and its pauses' sum.
#[derive(Default)]
pub struct Comp {
    bp_ts: Vec<i64>,
    bp_before: Vec<f64>,
    run_cost: f64,
    /// records per thread and kind (g * 256 + kind)
    pub kinds: Vec<u64>,
    pub pause_ns: Vec<i64>,
    /// per record kind: what one record costs (ns, in vitro); a pause costs its value instead
    costs: Vec<f64>,
}

impl Comp {
    /// A new thread: no records yet.
    pub fn reset(&mut self) {
        self.bp_ts.clear();
        self.bp_before.clear();
        self.run_cost = 0.0;
    }

    /// The cost of the thread's records before time t (compensate.ThreadCosts.at): before the
    /// first record whose running maximum reaches t, all of them where none does. Searched back
    /// from the latest breakpoint, where the times looked up lie (a record's own time, a timer's
    /// start): the breakpoints seen so far always hold the answer for a time no later than them.
    fn before(&self, t: i64) -> f64 {
        let ts = &self.bp_ts;
        let n = ts.len();
        if n == 0 || ts[n - 1] < t {
            return self.run_cost;
        }
        // gallop back to a breakpoint before t, then search the stretch after it
        let (mut lo, mut step) = (n - 1, 1);
        while lo > 0 && ts[lo] >= t {
            lo = lo.saturating_sub(step);
            step *= 2;
        }
        let i = if ts[lo] >= t { lo } else { lo + 1 + ts[lo + 1..n].partition_point(|&x| x < t) };
        self.bp_before[i]
    }

    /// t less the cost before it, rounded as numpy's rint
    pub fn comp(&self, t: i64) -> i64 {
        t.wrapping_sub(rint(self.before(t)) as i64)
    }
}


/// One record's compensated times (Comp::track).
pub struct Step {
    /// ts less the cost of the thread's earlier records (app_events' ts_comp_ns)
    pub ts_comp: i64,
    /// the record's time as the derived tables' compensated columns have it (a lookup by time:
    /// its own cost-before where it raises the thread's running maximum)
    pub at: i64,
    /// a timer's compensated start; None where the start lies after every record so far (a
    /// negative elapsed time): its cost is known when the thread's records are all seen
    pub timer_start: Option<i64>,
}

impl Comp {
    /// Bookkeeping for `threads` threads, the longest of `most` records, at `costs` per kind.
    pub fn new(costs: &[f64], threads: usize, most: usize) -> Comp {
        let mut t = vec![0.0; 256];
        t.iter_mut().zip(costs).for_each(|(a, b)| *a = *b);
        let mut cp = Comp { costs: t, kinds: vec![0; threads * 256], pause_ns: vec![0; threads], ..Default::default() };
        // the breakpoints: at most one per record of the longest thread
        cp.bp_ts.reserve_exact(most);
        cp.bp_before.reserve_exact(most);
        cp
    }

    /// A record of thread `g` of `kind` at `ts` (`value`: a pause's duration; `timer_start`: a
    /// timer stop's start): its compensated times, its cost then added to the thread's.
    #[inline(always)]
    pub fn track(&mut self, g: usize, kind: u8, ts: i64, value: i64, timer_start: i64) -> Step {
        // ts minus the cost of the thread's earlier records (np.rint, then to int64)
        let ts_comp = ts.wrapping_sub(rint(self.run_cost) as i64);
        let at = if self.bp_ts.last().is_none_or(|&m| ts > m) {
            self.bp_ts.push(ts);
            self.bp_before.push(self.run_cost);
            ts_comp
        } else {
            self.comp(ts)
        };
        let mut start = Some(0);
        if kind == kinds::TIMER_STOP {
            start = self.bp_ts.last().is_some_and(|&m| timer_start <= m).then(|| self.comp(timer_start));
        }
        let cost = if kind == kinds::PAUSE {
            let v = value.max(0);
            self.pause_ns[g] += v;
            v as f64
        } else {
            self.costs[kind as usize]
        };
        self.run_cost += cost;
        self.kinds[g * 256 + kind as usize] += 1;
        Step { ts_comp, at, timer_start: start }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// compensate.ThreadCosts.at by its definition: the cost before the first record whose
    /// running maximum reaches t, the whole cost where none does.
    fn cost_before_reference(ts: &[i64], costs: &[f64], t: i64) -> f64 {
        let mut max = i64::MIN;
        let mut before = 0.0;
        for (&x, &c) in ts.iter().zip(costs) {
            max = max.max(x);
            if max >= t {
                return before;
            }
            before += c;
        }
        before
    }

    #[test]
    fn cost_before_follows_the_running_maximum_at_every_prefix() {
        // times that tie and step back, as records of one thread on several CPUs can
        let ts: Vec<i64> = (0..400i64).map(|i| 3 * i + (i * 7919 % 11) - 7).collect();
        let costs: Vec<f64> = (0..400).map(|i| 1.0 + (i % 5) as f64 * 0.25).collect();
        let mut cp = Comp::default();
        for (i, (&t, &c)) in ts.iter().zip(&costs).enumerate() {
            if cp.bp_ts.last().is_none_or(|&m| t > m) {
                cp.bp_ts.push(t);
                cp.bp_before.push(cp.run_cost);
            }
            // what the pass asks as the records go by: times up to the running maximum
            let max = *cp.bp_ts.last().unwrap();
            for q in [t, t - 1, t - 9, max, ts[0] - 1, ts[i / 2]] {
                if q <= max {
                    assert_eq!(cp.before(q), cost_before_reference(&ts, &costs, q), "t {q} after record {i}");
                }
            }
            cp.run_cost += c;
        }
        // at the thread's end every time is answerable, past the last one too
        for q in ts[0] - 5..ts[399] + 5 {
            assert_eq!(cp.before(q), cost_before_reference(&ts, &costs, q), "t {q} at the end");
        }
    }
}
