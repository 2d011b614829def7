//! oslens-collector: records what the kernel did for one process tree (or the whole system)
//! into per-CPU raw chunks of the trace directory, on CLOCK_MONOTONIC.
//!
//! Mechanism: perf_event_open on tracepoints, one mmap ring per CPU (every event of that CPU
//! redirected into it with PERF_EVENT_IOC_SET_OUTPUT), drained while the program runs.
//! Events of the traced tree are opened per task with `inherit`, so the kernel follows forks and
//! threads and never delivers other tasks' events. sched_switch, sched_waking, sched_migrate_task
//! and the block events are opened per CPU for every task (a switch *to* a traced task happens in
//! the other task's context; a wakeup of a traced task per task would be delivered twice when the
//! waker is traced too; a migration is done by whoever balances; a block completion runs in
//! whatever context the interrupt hits) and filtered here: a switch or wakeup is kept when either
//! side belongs to the traced tree (Kohr's "who took the CPU away"), a migration when it moves a
//! traced task, a completion when it matches an issue that was kept.
//!
//! Tiers: kernel tracepoints (root or CAP_PERFMON), else per-process software counters
//! (perf_event_paranoid permitting), else nothing (application events only). The first line on
//! stdout is `READY {json}` once attached; at exit `DONE {json}` with counts and losses.
//! Stops cleanly on SIGTERM / SIGINT / SIGHUP, on the parent's death (PR_SET_PDEATHSIG) and,
//! with --watch-stdin, when stdin reaches end of file. perf events die with their file
//! descriptors, so even SIGKILL leaves nothing switched on.
//!
//! Modules, top down (each uses only those after it): `setup` (the tiers: attach), `collector`
//! (enable, drain, finish), `perf_records` and `bpf_records` (decoding the two kinds of ring),
//! `state` (what decoding remembers, where records go), `tracepoints` (which tracepoints, which
//! fields), then the leaves: `cli`, `attach` (the threads of running processes), `task_events` (their
//! per-task events, opened in parallel), `perf`, `bpf`, `tracefs`, `chunk`, `counters`, `signals`,
//! `sys`, `json`.

mod attach;
mod bpf;
mod bpf_records;
mod chunk;
mod cli;
mod collector;
mod counters;
mod json;
mod perf;
mod perf_records;
mod setup;
mod signals;
mod state;
mod task_events;
mod sys;
mod tracefs;
mod tracepoints;

use std::io::Write;

fn main() {
    let opts = match cli::parse_args() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("oslens-collector: {e}\n{}", cli::USAGE);
            std::process::exit(2);
        }
    };
    // SAFETY: plain calls.
    let parent = unsafe { libc::getppid() };
    unsafe { libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGTERM as libc::c_ulong, 0, 0, 0) };
    signals::install_signals();
    if unsafe { libc::getppid() } != parent {
        signals::request_stop();
    }
    if !std::path::Path::new(&opts.trace).join("raw").is_dir() {
        if let Err(e) = std::fs::create_dir_all(std::path::Path::new(&opts.trace).join("raw")) {
            eprintln!("oslens-collector: cannot create {}/raw: {e}", opts.trace);
            std::process::exit(2);
        }
    }
    let mut c = collector::Collector::new(opts);
    c.setup();
    c.start();
    let mut ready = c.summary();
    ready.push('}');
    {
        let mut out = std::io::stdout().lock();
        let _ = writeln!(out, "READY {ready}");
        let _ = out.flush();
    }
    if c.tier < 3 {
        c.run();
    } else {
        // Nothing to collect; wait to be told to stop so the protocol stays the same.
        while !signals::stop_requested() {
            let mut p = [libc::pollfd { fd: 0, events: libc::POLLIN, revents: 0 }];
            let n = unsafe { libc::poll(p.as_mut_ptr(), if c.opts.watch_stdin { 1 } else { 0 }, 50) };
            if n > 0 {
                let mut buf = [0u8; 64];
                if unsafe { libc::read(0, buf.as_mut_ptr() as *mut libc::c_void, 64) } <= 0 {
                    break;
                }
                collector::say_drained(); // nothing to drain: the answer a snapshot waits for
            }
        }
    }
    let done = c.finish();
    let mut out = std::io::stdout().lock();
    let _ = writeln!(out, "DONE {done}");
    let _ = out.flush();
}
