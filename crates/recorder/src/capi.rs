//! The C ABI (include/oslens.h). Handles are pointers to leaked, process-lifetime objects.
//! Every entry point starts with `active()`: a single relaxed load when not recording.
// The entry points dereference the handles C passes them; marking them `unsafe` would change
// nothing for their C callers, who cannot be checked either way.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

use crate::instruments::{self, Counter, Manager, Timer, PROCESS_MANAGER};
use crate::{active, clock, names, record_at, thread, DISABLED, INACTIVE, SUSPENDED};
use oslens_format::kinds;
use oslens_format::record::{Record, CONT_PAYLOAD};
use std::ffi::{c_char, c_int, CStr};
use std::sync::atomic::Ordering::Relaxed;

fn str_arg<'a>(p: *const c_char) -> std::borrow::Cow<'a, str> {
    if p.is_null() {
        return "".into();
    }
    // SAFETY: C callers pass NUL-terminated strings.
    unsafe { CStr::from_ptr(p) }.to_string_lossy()
}

fn manager_arg(m: *mut Manager) -> &'static Manager {
    if m.is_null() {
        &PROCESS_MANAGER
    } else {
        // SAFETY: handles come from osl_manager and are never freed.
        unsafe { &*m }
    }
}

#[no_mangle]
pub extern "C" fn osl_manager(name: *const c_char) -> *mut Manager {
    crate::init();
    instruments::new_manager(&str_arg(name)) as *const Manager as *mut Manager
}

fn control(m: *mut Manager, action: u64) {
    if active() {
        record_at(clock::now(), kinds::CONTROL, manager_arg(m).id, action, 0);
    }
}

#[no_mangle]
pub extern "C" fn osl_suspend(m: *mut Manager) {
    control(m, kinds::CONTROL_SUSPEND);
    if m.is_null() {
        INACTIVE.fetch_or(SUSPENDED, Relaxed);
    } else {
        instruments::set_suspended(manager_arg(m), true);
    }
}

#[no_mangle]
pub extern "C" fn osl_resume(m: *mut Manager) {
    if m.is_null() {
        INACTIVE.fetch_and(!SUSPENDED, Relaxed);
    } else {
        instruments::set_suspended(manager_arg(m), false);
    }
    control(m, kinds::CONTROL_RESUME);
}

#[no_mangle]
pub extern "C" fn osl_reset(m: *mut Manager) {
    control(m, kinds::CONTROL_RESET);
    instruments::reset(if m.is_null() { None } else { Some(manager_arg(m)) });
}

#[no_mangle]
pub extern "C" fn osl_counter(name: *const c_char, m: *mut Manager) -> *mut Counter {
    crate::init();
    instruments::new_counter(&str_arg(name), manager_arg(m)) as *const Counter as *mut Counter
}

#[no_mangle]
pub extern "C" fn osl_count(c: *mut Counter, delta: i64) {
    if !active() || c.is_null() {
        return;
    }
    // SAFETY: handle from osl_counter.
    let c = unsafe { &*c };
    if !c.manager.suspended.load(Relaxed) {
        c.count(delta);
    }
}

#[no_mangle]
pub extern "C" fn osl_counter_record(c: *mut Counter) {
    if !active() || c.is_null() {
        return;
    }
    // SAFETY: handle from osl_counter.
    let c = unsafe { &*c };
    if !c.manager.suspended.load(Relaxed) {
        c.record(kinds::COUNTER_ASKED);
    }
}

#[no_mangle]
pub extern "C" fn osl_counter_value(c: *const Counter) -> i64 {
    // SAFETY: handle from osl_counter.
    if c.is_null() { 0 } else { unsafe { &*c }.value.load(Relaxed) }
}

#[no_mangle]
pub extern "C" fn osl_timer(name: *const c_char, m: *mut Manager) -> *mut Timer {
    crate::init();
    instruments::new_timer(&str_arg(name), manager_arg(m)) as *const Timer as *mut Timer
}

#[no_mangle]
pub extern "C" fn osl_timer_start(t: *mut Timer) {
    if !active() || t.is_null() {
        return;
    }
    // SAFETY: handle from osl_timer.
    let t = unsafe { &*t };
    if !t.suspended.load(Relaxed) {
        t.start();
    }
}

#[no_mangle]
pub extern "C" fn osl_timer_stop(t: *mut Timer) {
    if !active() || t.is_null() {
        return;
    }
    // SAFETY: handle from osl_timer.
    let t = unsafe { &*t };
    if !t.suspended.load(Relaxed) {
        t.stop();
    }
}

#[no_mangle]
pub extern "C" fn osl_timer_total_ns(t: *const Timer) -> u64 {
    if t.is_null() {
        return 0;
    }
    // SAFETY: handle from osl_timer.
    clock::ticks_to_ns(unsafe { &*t }.total_ticks.load(Relaxed))
}

#[no_mangle]
pub extern "C" fn osl_event(id: u32, payload: *const u8, len: usize) {
    if !active() {
        return;
    }
    if len <= 8 {
        // the common case: the payload fits the record
        let value = if payload.is_null() || len == 0 {
            0
        } else if len == 8 {
            // SAFETY: 8 readable bytes.
            u64::from_le(unsafe { (payload as *const u64).read_unaligned() })
        } else {
            // SAFETY: `len` readable bytes.
            unsafe { std::slice::from_raw_parts(payload, len) }.iter().rev().fold(0u64, |acc, &c| acc << 8 | c as u64)
        };
        // The thread state first: a thread's first event creates its chunk (system calls), and
        // the event's time must follow them on the kernel's timeline, not precede them.
        if let Some(t) = thread::current() {
            if t.take_slots(1) {
                t.chunk.push(Record::new(clock::now(), id, clock::cpu(), kinds::EVENT, len as u64, value));
            }
        }
        return;
    }
    let bytes: &[u8] = if payload.is_null() || len == 0 {
        &[]
    } else {
        // SAFETY: the caller passes `len` readable bytes.
        unsafe { std::slice::from_raw_parts(payload, len) }
    };
    let n = bytes.len().min(8);
    let first = if n == 8 {
        // SAFETY: at least 8 readable bytes.
        unsafe { (payload as *const u64).read_unaligned() }
    } else {
        bytes[..n].iter().rev().fold(0u64, |acc, &c| acc << 8 | c as u64)
    };
    let Some(t) = thread::current() else { return };
    let rest = &bytes[n..];
    let slots = 1 + rest.len().div_ceil(CONT_PAYLOAD) as u64;
    if !t.take_slots(slots) {
        return;
    }
    let head = Record::new(clock::now(), id, clock::cpu(), kinds::EVENT, bytes.len() as u64, u64::from_le(first));
    if rest.is_empty() {
        t.chunk.push(head);
    } else {
        t.chunk.push_with_payload(head, rest);
    }
}

#[no_mangle]
pub extern "C" fn osl_event_name(id: u32, name: *const c_char) {
    crate::init();
    names::define_kept(kinds::NAME_EVENT, id, 0, &str_arg(name));
}

/// Records a region boundary; returns its id once the name is defined in this process (0 when
/// nothing was recorded), so the header can cache it per call site.
#[inline(always)]
fn region(name: *const c_char, kind: u8) -> u32 {
    if !active() || name.is_null() {
        return 0;
    }
    // SAFETY: NUL-terminated string from the caller.
    let id = unsafe { names::hash_cstr(name as *const u8) };
    let Some(t) = thread::current() else { return 0 };
    names::ensure_region_name(&mut t.seen, id, name as *const u8);
    // read after any slow path above (chunk creation, a first name), as for events
    let ts = clock::now();
    if t.take_slots(1) {
        t.chunk.push(Record::new(ts, id, clock::cpu(), kind, 0, 0));
    }
    id
}

#[no_mangle]
pub extern "C" fn osl_region_begin(name: *const c_char) {
    region(name, kinds::REGION_BEGIN);
}

#[no_mangle]
pub extern "C" fn osl_region_end(name: *const c_char) {
    region(name, kinds::REGION_END);
}

/// The inline path's way in for a region whose call site has no id cached yet.
#[no_mangle]
pub extern "C" fn osl__region_slow(kind: u8, name: *const c_char) -> u32 {
    match kind {
        kinds::REGION_BEGIN | kinds::REGION_END => region(name, kind),
        _ => 0,
    }
}

/// The calling thread's cursor, for the inline path of oslens.h (never null, never freed).
#[no_mangle]
pub extern "C" fn osl__writer_attach() -> *mut crate::buffer::Cursor {
    thread::writer()
}

#[no_mangle]
pub extern "C" fn osl_enable() {
    crate::init();
    INACTIVE.fetch_and(!DISABLED, Relaxed);
    control(std::ptr::null_mut(), kinds::CONTROL_ENABLE);
}

#[no_mangle]
pub extern "C" fn osl_disable() {
    control(std::ptr::null_mut(), kinds::CONTROL_DISABLE);
    INACTIVE.fetch_or(DISABLED, Relaxed);
}

#[no_mangle]
pub extern "C" fn osl_enabled() -> c_int {
    active() as c_int
}

#[no_mangle]
pub extern "C" fn osl_flush() {
    if !active() {
        return;
    }
    instruments::record_all_counters(kinds::COUNTER_ASKED);
    if let Some(t) = thread::current() {
        let start = clock::now();
        t.chunk.write_clock_pair();
        t.chunk.sync_to_disk();
        let end = clock::now();
        thread::add_pause(end - start);
        record_at(end, kinds::PAUSE, 0, end - start, kinds::PAUSE_FLUSH);
    }
}

#[no_mangle]
pub extern "C" fn osl_thread_name(name: *const c_char) {
    crate::init();
    let name = str_arg(name);
    let short: String = name.chars().take(15).collect();
    if let Ok(c) = std::ffi::CString::new(short) {
        // SAFETY: valid C string for the calling thread.
        unsafe { libc::pthread_setname_np(libc::pthread_self(), c.as_ptr()) };
    }
    if crate::config().is_none() {
        return;
    }
    if let Some(t) = thread::current() {
        t.chunk.set_name(&name);
        // A renamed thread gets a second NAME record; the importer keeps the last one.
        let tid = t.chunk.tid;
        names::define_again(kinds::NAME_THREAD, tid, &name);
    }
}

#[no_mangle]
pub extern "C" fn osl_dropped() -> u64 {
    thread::current_if_exists().map_or(0, |t| t.chunk.dropped_events())
}

#[no_mangle]
pub extern "C" fn osl_pause_ns() -> u64 {
    thread::paused_ns()
}

#[no_mangle]
pub extern "C" fn osl_trace_dir() -> *const c_char {
    crate::init();
    crate::config().map_or(std::ptr::null(), |c| c.trace_dir.as_cstr().as_ptr())
}

#[no_mangle]
pub extern "C" fn osl_adapt(phase: *const c_char) -> c_int {
    crate::init();
    crate::adapt::adapt(&str_arg(phase))
}

/// The preload's THREAD_START of the calling thread (a = creator's tid, b = its pthread_t): kept
/// in the process's thread ledger until the thread records something of its own (thread.rs).
#[no_mangle]
pub extern "C" fn osl_thread_started(creator: u64, pthread: u64) {
    thread::started(creator, pthread);
}

#[no_mangle]
pub extern "C" fn osl_record_raw(kind: u8, id: u32, a: u64, b: u64) {
    crate::funcs::sync_map_once(kind);
    crate::record_raw(kind, id, a, b);
}
