//! liboslens: the in-process recorder.
//!
//! The hot path is `record`: one relaxed load of the activation word, a thread-local pointer,
//! a clock read, a 32-byte store and a commit store. No lock, no allocation, no system call.
//! Everything else (a thread's first event, names, managers, fork, exit) takes the slow path.
//! oslens.h inlines the same hot path into the program for events, regions and timers (see
//! `buffer::Cursor`), and calls in here whenever the cursor says no.

mod adapt;
mod alloc;
mod buffer;
mod capi;
mod clock;
mod config;
mod fork;
mod funcs;
mod growth;
mod instruments;
mod names;
mod helper;
mod interpose;
mod session;
mod memlimit;
mod space;
mod spare;
mod stage;
mod thread;
mod writeback;

pub use capi::*;

/// Allocation failures take a reserve instead of aborting the program (alloc.rs).
#[global_allocator]
static GLOBAL: alloc::Guarded = alloc::Guarded;

use oslens_format::record::Record;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::Relaxed, Ordering::SeqCst};
use std::sync::OnceLock;

/// Reasons recording is off; recording runs only while the word is zero. oslens.h's inline path
/// calls in while UNINIT or TRIGGERED is set (OSL__ASK_LIBRARY) and drops calls otherwise.
pub(crate) const UNINIT: u32 = 1;
pub(crate) const NOT_TRACING: u32 = 2;
pub(crate) const DISABLED: u32 = 4;
pub(crate) const SUSPENDED: u32 = 8;
pub(crate) const TRIGGERED: u32 = 16;
/// The bits of the word a call must take to the library even though nothing is recorded (as
/// oslens.h's OSL__ASK_LIBRARY): any other non-zero word makes a call a load and a branch.
pub const ASK_LIBRARY: u32 = UNINIT | TRIGGERED;
/// Exported for the inline fast path of oslens.h, which asks the library whenever it is not 0.
#[export_name = "osl__inactive"]
pub static INACTIVE: AtomicU32 = AtomicU32::new(UNINIT);
/// Bumped in a fork()ed child and by every attach session: the header's per-call-site region ids
/// are only trusted when their name was defined in this process's current names chunk. Threads'
/// cursors carry it; exported for the Python extension's cache of event names (recorder_api.rs).
#[export_name = "osl__names_epoch"]
pub static NAMES_EPOCH: AtomicU32 = AtomicU32::new(1);

pub(crate) static CONFIG: OnceLock<Option<config::Config>> = OnceLock::new();
/// Trigger budget left, in record slots (u64::MAX = no trigger).
pub(crate) static SLOTS_LEFT: AtomicU64 = AtomicU64::new(u64::MAX);
pub(crate) static COUNTER_PERIOD_TICKS: AtomicU64 = AtomicU64::new(0);

/// Where `oslens record -p` writes the trace a dormant process is to record into (through
/// /proc/PID/mem, with the activation word set to UNINIT so that the next call asks the library).
pub struct AttachRequest(std::cell::UnsafeCell<[u8; 4096]>);
// SAFETY: read only by `session::wake`, under its lock; written from outside the process.
unsafe impl Sync for AttachRequest {}
#[export_name = "osl__attach_request"]
pub static ATTACH_REQUEST: AttachRequest = AttachRequest(std::cell::UnsafeCell::new([0; 4096]));

pub(crate) fn config() -> Option<&'static config::Config> {
    CONFIG.get().and_then(|c| c.as_ref()).or_else(session::config)
}

/// A dormant process (started without OSLENS_TRACE) asked to record by an attach: every such
/// request starts a new session (session.rs). A process traced from its start is left as it is.
fn wake() {
    if CONFIG.get().is_some_and(|c| c.is_some()) {
        INACTIVE.fetch_and(!UNINIT, Relaxed); // traced from its start: an attach changes nothing
        return;
    }
    session::lock();
    if INACTIVE.load(SeqCst) & UNINIT == 0 {
        session::unlock(); // another thread took this request
        return;
    }
    // SAFETY: a plain copy of the buffer oslens wrote before setting the word.
    let request = unsafe { std::ptr::read_volatile(ATTACH_REQUEST.0.get()) };
    let Some(cfg) = session::asked(&request).and_then(config::Config::for_attach) else {
        INACTIVE.store(NOT_TRACING, SeqCst);
        session::unlock();
        return;
    };
    static HOOKS: std::sync::Once = std::sync::Once::new();
    HOOKS.call_once(|| {
        writeback::read_env();
        thread::install_process_hooks();
        fork::install_hooks();
        space::presize_fd_table();
    });
    let watched = session::begin(cfg);
    names::new_session();
    NAMES_EPOCH.fetch_add(1, Relaxed); // inlined call sites name their regions again
    thread::invalidate_cursors();
    INACTIVE.store(0, SeqCst);
    session::unlock();
    if watched {
        helper::start(); // outside every recorder lock (helper.rs)
        helper::wake();
    }
    // the new trace starts with every counter's value (they keep counting across sessions)
    instruments::record_all_counters(oslens_format::kinds::COUNTER_ASKED);
}

/// The helper thread names itself in the names chunk too: a flight snapshot may hold none of the
/// kernel records that named it (here, at the crate root, so helper.rs need not depend on names.rs).
pub(crate) fn helper_started(tid: u32) {
    names::define_kept(oslens_format::kinds::NAME_THREAD, tid, 0, "oslens-helper");
}

/// Reads the environment once. Called by the library constructor and, for static links where
/// the constructor may not be pulled in, by the first call that finds the recorder uninitialised.
pub(crate) fn init() {
    CONFIG.get_or_init(|| {
        clock::init();
        let cfg = config::Config::from_env();
        let mut inactive = 0;
        match &cfg {
            None => inactive |= NOT_TRACING,
            Some(c) => {
                if !c.start_enabled {
                    inactive |= DISABLED;
                }
                if let Some(limit) = c.limit_slots {
                    SLOTS_LEFT.store(limit, Relaxed);
                }
                // the memory budget and write-behind are decided before the first chunk
                writeback::read_env();
                thread::install_process_hooks();
                fork::install_hooks();
                space::presize_fd_table();
            }
        }
        INACTIVE.store(inactive, Relaxed);
        cfg
    });
}

/// Whether the CPU says its TSC is invariant (CPUID; the recorder's clock is then the TSC):
/// `oslens record` asks once and hands the answer to the programs it starts
/// (OSLENS_TSC_INVARIANT), so that they need not ask.
pub fn tsc_is_invariant() -> bool {
    clock::tsc_is_invariant()
}

/// What only a process that records needs, done before its first chunk (a thread's or its
/// names chunk) rather than at load: raw/, and the memory the recording may keep resident and
/// whether it writes behind, which read the cgroup's files (ten opens here, and a v1
/// `memory.usage_in_bytes` flushes the cgroup's statistics: up to 3 ms), a cost every process
/// started under oslens paid before (docs/recorder.md, "Start-up"). A fork()ed child inherits
/// its parent's.
pub(crate) fn before_first_chunk(cfg: &config::Config) {
    static DONE: std::sync::Once = std::sync::Once::new();
    config::ensure_raw_dir(cfg.raw_dir.as_str(), session::current());
    DONE.call_once(|| {
        memlimit::init();
        writeback::init(memlimit::budget_left() != u64::MAX);
    });
}

/// Converts the counter period to clock ticks on the first counter's creation, not at load:
/// the estimate spins 200 µs, which every process started under oslens paid before
/// (docs/recorder.md, "Start-up").
pub(crate) fn ensure_counter_period() {
    static DONE: std::sync::Once = std::sync::Once::new();
    DONE.call_once(|| {
        if let Some(c) = config() {
            COUNTER_PERIOD_TICKS.store(period_ticks(c.counter_period_us), Relaxed);
        }
    });
}

fn period_ticks(period_us: u64) -> u64 {
    if period_us == 0 {
        return 0;
    }
    // Estimate the clock rate over a 200 µs spin: the period is a soft setting.
    let (r0, n0) = clock::pair();
    let (mut r1, mut n1) = (r0, n0);
    while n1 - n0 < 200_000 {
        (r1, n1) = clock::pair();
    }
    let ticks_per_ns = (r1 - r0) as f64 / (n1 - n0) as f64;
    (period_us as f64 * 1000.0 * ticks_per_ns) as u64
}

#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = {
    extern "C" fn constructor() {
        init();
    }
    constructor
};

/// True when recording is on; initialises on first use.
#[inline(always)]
pub(crate) fn active() -> bool {
    let word = INACTIVE.load(Relaxed);
    if word == 0 {
        return true;
    }
    if word & UNINIT != 0 {
        init();
        if INACTIVE.load(Relaxed) & UNINIT != 0 {
            wake(); // still UNINIT after init: oslens set it again to wake a dormant process
        }
        return INACTIVE.load(Relaxed) == 0;
    }
    if word == TRIGGERED {
        // Past the trigger the user asked for: not a loss, but counted so the trace says so.
        if let Some(t) = thread::current_if_exists() {
            t.chunk.count_suppressed();
        }
    }
    false
}

/// Records one event on the calling thread (the public low-level entry point).
#[inline(always)]
pub fn record_raw(kind: u8, id: u32, a: u64, b: u64) {
    if active() {
        // the clock is read after the thread's state exists (its creation makes system calls)
        if let Some(t) = thread::current() {
            if t.take_slots(1) {
                t.chunk.push(Record::new(clock::now(), id, clock::cpu(), kind, a, b));
            }
        }
    }
}

/// Records with a timestamp already read (so a caller that needed the time anyway reads it once).
#[inline(always)]
pub(crate) fn record_at(ts: u64, kind: u8, id: u32, a: u64, b: u64) {
    if let Some(t) = thread::current() {
        if t.take_slots(1) {
            t.chunk.push(Record::new(ts, id, clock::cpu(), kind, a, b));
        }
    }
}

/// (limit, usage, cgroup directory) of the nearest limited memory cgroup of the calling
/// process (`oslens record` warns when `--buffer-mb` cannot fit a quarter of its headroom).
pub fn memory_limit() -> Option<(u64, u64, String)> {
    memlimit::nearest_limit()
}

/// `memory_limit` read from a fake machine's /proc and /sys under `root` (tests).
pub fn memory_limit_under(root: &str) -> Option<(u64, u64, String)> {
    memlimit::nearest_limit_under(root)
}

/// The share of a memory cgroup's headroom a recording keeps resident at most (1/N).
pub const HEADROOM_SHARE_DIV: u64 = memlimit::HEADROOM_SHARE_DIV;

/// The id of a name of the given class, defining the name in the trace on first use.
pub fn name_id(class: u64, name: &str) -> u32 {
    let id = names::hash_name(name.as_bytes());
    names::define(class, id, 0, name);
    id
}

#[cfg(test)]
mod header_tests {
    //! oslens.h repeats a few facts of this crate for its inline path; they must agree.
    use oslens_format::kinds;

    const HEADER: &str = include_str!("../include/oslens.h");

    #[test]
    fn inline_constants_match_the_library() {
        let ask = format!("#define OSL__ASK_LIBRARY ({}u | {}u)", crate::UNINIT, crate::TRIGGERED);
        assert!(HEADER.contains(&ask), "{ask}");
        let kinds = format!(
            "enum {{ OSL__EVENT = {}, OSL__REGION_BEGIN = {}, OSL__REGION_END = {}, OSL__TIMER_START = {}, OSL__TIMER_STOP = {} }};",
            kinds::EVENT, kinds::REGION_BEGIN, kinds::REGION_END, kinds::TIMER_START, kinds::TIMER_STOP
        );
        assert!(HEADER.contains(&kinds), "{kinds}");
    }

    #[test]
    fn cursor_and_timer_layouts_match_the_header() {
        use crate::buffer::Cursor;
        use crate::instruments::Timer;
        use std::mem::offset_of;
        assert_eq!([offset_of!(Cursor, records), offset_of!(Cursor, pos), offset_of!(Cursor, inline_limit), offset_of!(Cursor, committed), offset_of!(Cursor, cpu_id), offset_of!(Cursor, names_epoch)], [0, 8, 16, 24, 32, 40]);
        assert_eq!([offset_of!(Timer, started), offset_of!(Timer, total_ticks), offset_of!(Timer, id), offset_of!(Timer, suspended)], [0, 8, 16, 20]);
    }
}
