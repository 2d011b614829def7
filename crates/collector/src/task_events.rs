//! Per-task perf events for many threads, opened in parallel (issue 31: a thousand threads on two
//! CPUs are 12,000 events). Each thread gets one group per CPU: its first tracepoint leads,
//! disabled, the others follow it, so starting and stopping cost one ioctl per group; every event
//! writes into its CPU's ring from the open on (PERF_FLAG_FD_OUTPUT, no SET_OUTPUT ioctl).

use crate::perf;

/// Threads per opening worker below which one more worker is not worth its start.
const THREADS_PER_WORKER: usize = 32;
/// At most this many workers: the kernel finds a tracepoint's event under one mutex
/// (perf_trace_init, event_mutex), so more would mostly queue there.
const MAX_WORKERS: usize = 4;

/// Events opened for some threads: group leaders (enabled and disabled one by one), their members
/// (which follow the leader), and how many threads had ended before their turn.
#[derive(Default, Debug)]
pub struct Groups {
    pub leaders: Vec<i32>,
    pub members: Vec<i32>,
    pub gone: usize,
}

/// Events held open only for a while, closed when dropped.
#[derive(Default)]
pub struct Held(pub Vec<i32>);

impl Drop for Held {
    fn drop(&mut self) {
        for &fd in &self.0 {
            perf::close(fd);
        }
    }
}

/// A group the kernel refused: the index of the attribute it refused, its errno, the thread.
#[derive(Debug, PartialEq)]
pub struct Refused {
    pub index: usize,
    pub errno: i32,
    pub tid: i32,
}

impl Groups {
    pub fn close(&mut self) {
        for fd in self.leaders.drain(..).chain(self.members.drain(..)) {
            perf::close(fd);
        }
    }

    fn absorb(&mut self, mut other: Groups) {
        self.leaders.append(&mut other.leaders);
        self.members.append(&mut other.members);
        self.gone += other.gone;
    }
}

/// Opens `tid`'s group on `cpu` into the ring owned by `ring`; Ok(false): the thread has ended.
fn open_group(attrs: &[perf::Attr], tid: i32, cpu: i32, ring: i32, g: &mut Groups) -> Result<bool, Refused> {
    let mut lead = attrs[0];
    lead.flags |= perf::F_DISABLED;
    let leader = match perf::open_into(&lead, tid, cpu, ring, false) {
        Ok(fd) => fd,
        Err(libc::ESRCH) => return Ok(false),
        Err(errno) => return Err(Refused { index: 0, errno, tid }),
    };
    let first = g.members.len();
    for (index, a) in attrs.iter().enumerate().skip(1) {
        let mut a = *a;
        a.flags &= !perf::F_DISABLED; // counts once its leader is enabled
        match perf::open_into(&a, tid, cpu, leader, true) {
            Ok(fd) => g.members.push(fd),
            Err(errno) => {
                for fd in g.members.drain(first..) {
                    perf::close(fd);
                }
                perf::close(leader);
                return if errno == libc::ESRCH { Ok(false) } else { Err(Refused { index, errno, tid }) };
            }
        }
    }
    g.leaders.push(leader);
    Ok(true)
}

/// The groups of `tids` on every (cpu, ring owner) of `rings`, one after the other.
fn open_part(attrs: &[perf::Attr], tids: &[i32], rings: &[(u32, i32)]) -> Result<Groups, Refused> {
    let mut g = Groups::default();
    for &tid in tids {
        for &(cpu, ring) in rings {
            match open_group(attrs, tid, cpu as i32, ring, &mut g) {
                Ok(true) => {}
                Ok(false) => {
                    g.gone += 1; // the groups on earlier CPUs stay: they record nothing more
                    break;
                }
                Err(r) => {
                    g.close();
                    return Err(r);
                }
            }
        }
    }
    Ok(g)
}

/// The groups of every thread of `tids` on every CPU of `rings`, the threads split across up to
/// one worker per CPU (MAX_WORKERS at most); on a refusal nothing stays open.
pub fn open_all(attrs: &[perf::Attr], tids: &[i32], rings: &[(u32, i32)]) -> Result<Groups, Refused> {
    if attrs.is_empty() || tids.is_empty() {
        return Ok(Groups::default());
    }
    let workers = rings.len().min(MAX_WORKERS).min(tids.len().div_ceil(THREADS_PER_WORKER)).max(1);
    if workers == 1 {
        return open_part(attrs, tids, rings);
    }
    let per = tids.len().div_ceil(workers);
    let results: Vec<Result<Groups, Refused>> = std::thread::scope(|s| {
        let hs: Vec<_> = tids.chunks(per).map(|part| s.spawn(move || open_part(attrs, part, rings))).collect();
        hs.into_iter().map(|h| h.join().expect("a worker opening perf events panicked")).collect()
    });
    let mut all = Groups::default();
    let mut refused = None;
    for r in results {
        match r {
            Ok(g) => all.absorb(g),
            Err(e) => refused = refused.or(Some(e)),
        }
    }
    match refused {
        Some(e) => {
            all.close();
            Err(e)
        }
        None => Ok(all),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn nothing_to_open_opens_nothing() {
        let g = open_all(&[], &[1, 2], &[(0, -1)]).unwrap();
        assert!(g.leaders.is_empty() && g.members.is_empty() && g.gone == 0);
    }

    #[test]
    fn a_thread_that_does_not_exist_is_counted_gone_not_refused() {
        // pid_max is at most 2^22: no task has this tid; ESRCH comes before any privilege check
        let mut a = perf::Attr::new(perf::TYPE_SOFTWARE, perf::SW_CONTEXT_SWITCHES);
        a.flags = perf::F_EXCLUDE_KERNEL | perf::F_EXCLUDE_HV; // allowed unprivileged
        let g = open_all(&[a, a], &[(1 << 22) + 7], &[(0, -1)]).unwrap();
        assert_eq!((g.leaders.len(), g.members.len(), g.gone), (0, 0, 1));
    }
}
