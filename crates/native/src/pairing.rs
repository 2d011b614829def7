//! Begin/end pairing per thread, for the native pass (app_rows). The tests' oracle pairs on its
//! own (crates/oracle/src/py_oracle.rs: pair_group), so the two are checked against each other.

use std::collections::HashMap;

/// Reused scratch space of the per-thread pairing.
#[derive(Default)]
pub struct PairScratch {
    m: Vec<i64>,
    used: Vec<bool>,
    stack: Vec<usize>,
    stacks: HashMap<u64, Vec<usize>>,
}

/// Pairs one thread's begin/end events (is_begin, key): a stack over
/// all keys, redone with a stack per key where that pairs different keys or an end closes
/// nothing. Calls out(event index of the begin, event index of its end or -1, depth) for each
/// begin in order; returns the ends that closed nothing.
#[allow(clippy::needless_range_loop)]
pub fn pair_thread(ev: &[(bool, u64)], s: &mut PairScratch, mut out: impl FnMut(usize, i64, i64)) -> u64 {
    let len = ev.len();
    s.m.clear();
    s.m.resize(len, -1);
    s.used.clear();
    s.used.resize(len, false);
    s.stack.clear();
    let mut bad = false;
    for j in 0..len {
        if ev[j].0 {
            s.stack.push(j);
        } else if let Some(b) = s.stack.pop() {
            s.m[b] = j as i64;
            s.used[j] = true;
            bad |= ev[b].1 != ev[j].1;
        } else {
            bad = true;
        }
    }
    if bad {
        s.m.iter_mut().for_each(|x| *x = -1);
        s.used.iter_mut().for_each(|x| *x = false);
        s.stacks.clear();
        for j in 0..len {
            let st = s.stacks.entry(ev[j].1).or_default();
            if ev[j].0 {
                st.push(j);
            } else if let Some(b) = st.pop() {
                s.m[b] = j as i64;
                s.used[j] = true;
            }
        }
    }
    let (mut open, mut unmatched) = (0i64, 0u64);
    for j in 0..len {
        if ev[j].0 {
            out(j, s.m[j], open);
            open += 1;
        } else if s.used[j] {
            open -= 1;
        } else {
            unmatched += 1;
        }
    }
    unmatched
}
