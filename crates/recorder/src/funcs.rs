//! Function entry/exit hooks for -finstrument-functions (owned by auto-instrumentation).
//!
//! `__cyg_profile_func_enter/exit` record FUNC_ENTRY / FUNC_EXIT with a = function address and
//! b = call site; names are resolved at import (python/oslens/store/symbols.py) from the ELF
//! symbol tables and the process's memory map, which the first hook call of each process
//! writes to `<trace>/raw/maps-<pid>-<ns>.txt` (and again, with `-exit`, at exit, so libraries
//! opened later are found too). `<ns>` is CLOCK_MONOTONIC at the time of writing: a process
//! that execs another instrumented program writes a second map with a later time.
//!
//! The hot path is one relaxed load more than `record_raw`. With OSLENS_FUNC_MIN_NS set, calls
//! shorter than that are left out: entries wait on a per-thread shadow stack and are written
//! only when the call (or one of its callees) turns out to be long enough, so the chunk stays
//! in time order and entries and exits stay balanced.
//!
//! Nothing here is compiled with -finstrument-functions (it is Rust), so the hooks never call
//! themselves; an instrumented function reached from inside them (a user-supplied malloc, say)
//! finds the recorder's own BUSY guard or the shadow stack's and is not recorded.

use crate::{active, clock, config, record_at};
use oslens_format::kinds;
use std::cell::Cell;
use std::ffi::{c_char, c_void, CStr};
use std::sync::atomic::{AtomicU64, AtomicU8, Ordering::Relaxed};
use std::sync::Once;

const UNINIT: u8 = 0;
const DIRECT: u8 = 1;
const FILTERED: u8 = 2;
const INITIALISING: u8 = 3;

static STATE: AtomicU8 = AtomicU8::new(UNINIT);
/// Minimum call duration kept, in raw clock ticks (FILTERED mode).
static MIN_TICKS: AtomicU64 = AtomicU64::new(0);
/// CLOCK_MONOTONIC ns at which this process image wrote its first map (names the map files).
static MAP_NS: AtomicU64 = AtomicU64::new(0);
static HOOKS: Once = Once::new();

thread_local! {
    static INITIALISER: Cell<bool> = const { Cell::new(false) };
    static SHADOW: Cell<*mut Shadow> = const { Cell::new(std::ptr::null_mut()) };
    static SHADOW_ALLOC: Cell<bool> = const { Cell::new(false) };
}

#[no_mangle]
pub extern "C" fn __cyg_profile_func_enter(this_fn: *mut c_void, call_site: *mut c_void) {
    if !active() {
        return;
    }
    if STATE.load(Relaxed) == DIRECT {
        record_at(clock::now(), kinds::FUNC_ENTRY, 0, this_fn as u64, call_site as u64);
    } else {
        enter_slow(this_fn as u64, call_site as u64);
    }
}

#[no_mangle]
pub extern "C" fn __cyg_profile_func_exit(this_fn: *mut c_void, call_site: *mut c_void) {
    if !active() {
        return;
    }
    if STATE.load(Relaxed) == DIRECT {
        record_at(clock::now(), kinds::FUNC_EXIT, 0, this_fn as u64, call_site as u64);
    } else {
        exit_slow(this_fn as u64, call_site as u64);
    }
}

/// Defines a name of the given class (kinds::NAME_*) in the trace and returns its id: used by
/// the preload library (programs run by exec) and the Python function tracer.
#[no_mangle]
pub extern "C" fn osl_define_name(class: u64, name: *const c_char) -> u32 {
    crate::init();
    if name.is_null() {
        return 0;
    }
    // SAFETY: NUL-terminated string from the caller.
    let name = unsafe { CStr::from_ptr(name) }.to_string_lossy();
    crate::name_id(class, &name)
}

/// Records two records of one object with one timestamp, both or neither (a full buffer):
/// the preload's lock request and acquire where the lock was free (its wait is exactly 0,
/// docs/auto-instrumentation.md, lock recording).
#[no_mangle]
pub extern "C" fn osl_record_pair(first: u8, second: u8, id: u32, a: u64, b: u64) {
    if active() {
        if let Some(t) = crate::thread::current() {
            if t.take_slots(2) {
                let (now, cpu) = (clock::now(), clock::cpu());
                t.chunk.push(oslens_format::record::Record::new(now, id, cpu, first, a, b));
                t.chunk.push(oslens_format::record::Record::new(now, id, cpu, second, a, b));
            }
        }
    }
}

/// Records a function entry or exit by name id: for callers that know the name when recording
/// (the Python tracer). id = a = the NAME_FUNCTION id, b = 0 (no call site: how the importer
/// tells these from native addresses). `exit` = 0 entry, 1 exit.
#[no_mangle]
pub extern "C" fn osl_func_named(id: u32, exit: u32) {
    if active() {
        let kind = if exit == 0 { kinds::FUNC_ENTRY } else { kinds::FUNC_EXIT };
        record_at(clock::now(), kind, id, id as u64, 0);
    }
}

#[inline(always)]
fn ensure_init() -> u8 {
    let state = STATE.load(Relaxed);
    if state == DIRECT || state == FILTERED {
        return state;
    }
    init_slow()
}

#[cold]
fn init_slow() -> u8 {
    loop {
        match STATE.compare_exchange(UNINIT, INITIALISING, Relaxed, Relaxed) {
            Ok(_) => {
                INITIALISER.with(|c| c.set(true));
                let state = init_process();
                INITIALISER.with(|c| c.set(false));
                STATE.store(state, Relaxed);
                return state;
            }
            Err(INITIALISING) => {
                if INITIALISER.with(|c| c.get()) {
                    return INITIALISING; // called back from our own initialisation
                }
                std::thread::yield_now();
            }
            Err(state) => return state,
        }
    }
}

fn init_process() -> u8 {
    HOOKS.call_once(|| {
        // SAFETY: process-wide hooks registered once.
        unsafe {
            libc::pthread_atfork(None, None, Some(after_fork_child));
            libc::atexit(write_exit_map);
        }
    });
    MAP_NS.store(clock::monotonic_ns(), Relaxed);
    write_map("");
    let min_ns: u64 = std::env::var("OSLENS_FUNC_MIN_NS").ok().and_then(|v| v.trim().parse().ok()).unwrap_or(0);
    if min_ns == 0 {
        return DIRECT;
    }
    MIN_TICKS.store(ns_to_ticks(min_ns), Relaxed);
    FILTERED
}

/// Whether this process wrote its memory map for its synchronisation objects (0: not yet).
static SYNC_MAP: AtomicU8 = AtomicU8::new(0);
static SYNC_MAP_HOOK: Once = Once::new();

/// Writes the process's memory map at its first synchronisation record (osl_record_raw, from
/// the preload library), once per process: a lock, barrier or condition variable that is a
/// static variable is then named by its symbol at import (oslens.store.symbols.name_objects).
/// One relaxed load per record after that.
#[inline]
pub(crate) fn sync_map_once(kind: u8) {
    if (kinds::LOCK_REQUEST..=kinds::COND_WAIT_EXIT).contains(&kind) && SYNC_MAP.load(Relaxed) == 0 {
        write_sync_map();
    }
}

#[cold]
fn write_sync_map() {
    if config().is_none() {
        return; // a lock taken before the recorder read its configuration: at the next one
    }
    if SYNC_MAP.swap(1, Relaxed) != 0 {
        return;
    }
    SYNC_MAP_HOOK.call_once(|| {
        // SAFETY: a process-wide hook registered once.
        unsafe { libc::pthread_atfork(None, None, Some(sync_map_after_fork)) };
    });
    if MAP_NS.load(Relaxed) == 0 {
        MAP_NS.store(clock::monotonic_ns(), Relaxed);
    }
    write_map("");
}

extern "C" fn sync_map_after_fork() {
    // the child is another process, whose objects may be others: it writes its own map
    SYNC_MAP.store(0, Relaxed);
}

extern "C" fn after_fork_child() {
    // The child is another process: it writes its own map on its next hook call.
    if STATE.load(Relaxed) != UNINIT {
        STATE.store(UNINIT, Relaxed);
    }
}

extern "C" fn write_exit_map() {
    if STATE.load(Relaxed) != UNINIT && config().is_some() {
        write_map("-exit");
    }
}

fn write_map(suffix: &str) {
    let Some(cfg) = config() else { return };
    let Ok(maps) = std::fs::read("/proc/self/maps") else { return };
    // SAFETY: no preconditions.
    let pid = unsafe { libc::getpid() };
    let path = format!("{}/maps-{pid}-{}{suffix}.txt", cfg.raw_dir.as_str(), MAP_NS.load(Relaxed));
    let tmp = format!("{path}.tmp");
    if std::fs::write(&tmp, maps).is_ok() {
        let _ = std::fs::rename(&tmp, &path);
    }
}

fn ns_to_ticks(ns: u64) -> u64 {
    if clock::clock_kind() != oslens_format::header::CLOCK_TSC {
        return ns;
    }
    let (r0, n0) = clock::pair();
    let (mut r1, mut n1) = (r0, n0);
    while n1 - n0 < 200_000 {
        (r1, n1) = clock::pair();
    }
    (ns as f64 * (r1 - r0) as f64 / (n1 - n0) as f64) as u64
}

// ---- the minimum-duration filter ----

const SHADOW_DEPTH: usize = 512;

#[derive(Clone, Copy)]
struct Frame {
    func: u64,
    site: u64,
    ts: u64,
    emitted: bool,
}

struct Shadow {
    depth: usize,
    /// Calls deeper than SHADOW_DEPTH: counted, never recorded.
    overflow: usize,
    busy: bool,
    frames: [Frame; SHADOW_DEPTH],
}

fn shadow() -> Option<&'static mut Shadow> {
    let p = SHADOW.with(|s| s.get());
    if !p.is_null() {
        // SAFETY: this thread's own shadow stack, never freed while the thread runs.
        let s = unsafe { &mut *p };
        return (!s.busy).then_some(s);
    }
    if SHADOW_ALLOC.with(|a| a.replace(true)) {
        return None;
    }
    let s = Box::into_raw(Box::new(Shadow { depth: 0, overflow: 0, busy: false, frames: [Frame { func: 0, site: 0, ts: 0, emitted: false }; SHADOW_DEPTH] }));
    SHADOW.with(|c| c.set(s));
    SHADOW_ALLOC.with(|a| a.set(false));
    // SAFETY: just created for this thread. (Leaked at thread exit: 16 KiB per thread that
    // ever called an instrumented function while the filter is on.)
    Some(unsafe { &mut *s })
}

#[inline(never)]
fn enter_slow(func: u64, site: u64) {
    match ensure_init() {
        DIRECT => record_at(clock::now(), kinds::FUNC_ENTRY, 0, func, site),
        FILTERED => {
            let Some(s) = shadow() else { return };
            if s.depth == SHADOW_DEPTH {
                s.overflow += 1;
                return;
            }
            s.frames[s.depth] = Frame { func, site, ts: clock::now(), emitted: false };
            s.depth += 1;
        }
        _ => {}
    }
}

#[inline(never)]
fn exit_slow(func: u64, site: u64) {
    match ensure_init() {
        DIRECT => record_at(clock::now(), kinds::FUNC_EXIT, 0, func, site),
        FILTERED => {
            let Some(s) = shadow() else { return };
            s.busy = true;
            exit_filtered(s, func);
            s.busy = false;
        }
        _ => {}
    }
}

fn exit_filtered(s: &mut Shadow, func: u64) {
    if s.overflow > 0 {
        s.overflow -= 1;
        return;
    }
    // The matching frame; frames above it were left by longjmp or an exception.
    let Some(idx) = (0..s.depth).rev().find(|&i| s.frames[i].func == func) else { return };
    let now = clock::now();
    for j in (idx + 1..s.depth).rev() {
        if s.frames[j].emitted {
            record_at(now, kinds::FUNC_EXIT, 0, s.frames[j].func, s.frames[j].site);
        }
    }
    let min = MIN_TICKS.load(Relaxed);
    if !s.frames[idx].emitted && now.wrapping_sub(s.frames[idx].ts) >= min {
        // Long enough: so are its callers still waiting; write their entries first, in order.
        let mut k = idx;
        while k > 0 && !s.frames[k - 1].emitted {
            k -= 1;
        }
        for f in &mut s.frames[k..=idx] {
            record_at(f.ts, kinds::FUNC_ENTRY, 0, f.func, f.site);
            f.emitted = true;
        }
    }
    if s.frames[idx].emitted {
        record_at(now, kinds::FUNC_EXIT, 0, s.frames[idx].func, s.frames[idx].site);
    }
    s.depth = idx;
}
