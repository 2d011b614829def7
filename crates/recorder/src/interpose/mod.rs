//! The interposed pthread, semaphore, thread, fork, exec and exit calls of liboslens: the
//! wrappers that `oslens record` gives an unmodified program by preloading liboslens.so.
//!
//! They were a library of their own (liboslens_preload.so), a second object for every process
//! started under oslens to load and relocate (docs/recorder.md, "Start-up"). Here they call the
//! recorder directly. They are on only in a process that records (OSLENS_TRACE) *and* was given
//! liboslens through LD_PRELOAD, and only in liboslens.so itself (`decide`): a program linked
//! with liboslens but run with `--no-preload`, or not traced, has every wrapper call straight
//! through to glibc's function (one relaxed load more), and the copy in a program linked with
//! liboslens.a calls through to the preloaded library's. The real functions are found with dlsym(RTLD_NEXT, …) (dlvsym for
//! the condition variables, whose unversioned lookup finds glibc's 2.2.5 compatibility versions).
//!
//! Records (kinds in crates/format/src/kinds.rs; a = object address):
//! - mutex and rwlock (the try call first, so contention costs no clock read):
//!   - uncontended: counted per thread and object (counts.rs: COUNTER records, b =
//!     COUNTER_LOCK, flushed in batches) by default; with OSLENS_SYNC=all (`--sync all`)
//!     LOCK_REQUEST + LOCK_ACQUIRE with one timestamp (osl_record_pair: its wait is 0) and a
//!     LOCK_RELEASE before the unlock;
//!   - contended: LOCK_REQUEST before the blocking call, LOCK_ACQUIRE after it succeeded,
//!     LOCK_RELEASE before the unlock; b = LOCK_* flag below (which call).
//! - pthread_cond_*wait: LOCK_RELEASE of the mutex (b = FLAG_COND) where its hold was
//!   recorded, COND_WAIT_ENTER (b = mutex address), COND_WAIT_EXIT (b = the call's result),
//!   then LOCK_REQUEST + LOCK_ACQUIRE of the mutex with one timestamp (b = FLAG_COND: that wait
//!   is the condition wait's): the mutex is held again from there, and its release is recorded.
//! - pthread_cond_signal / broadcast: COND_SIGNAL, b = 0 / 1.
//! - pthread_barrier_wait: BARRIER_ENTER, BARRIER_EXIT (b = 1 for the serial thread).
//! - sem_wait / timedwait / trywait / post: SEM_WAIT_ENTER, SEM_WAIT_EXIT (b = 0 or errno), SEM_POST.
//! - pthread_create / join: THREAD_CREATE (a = new pthread_t, b = result), THREAD_START in the
//!   new thread (a = creator's tid, b = own pthread_t; into the thread ledger, thread.rs),
//!   THREAD_JOIN_ENTER / EXIT.
//! - fork, exec, posix_spawn, exit: process.rs.

use crate::capi::osl_record_raw;
use crate::funcs::{osl_define_name, osl_record_pair};
use oslens_format::kinds;
use oslens_format::object::object_base;
use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CStr};
use std::sync::atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering::Relaxed};

mod counts;
mod process;

/// Whether the wrappers record: UNKNOWN until the constructor (or a first call) decides.
const UNKNOWN: u8 = 0;
const CALL_THROUGH: u8 = 1;
const RECORDING: u8 = 2;
static STATE: AtomicU8 = AtomicU8::new(UNKNOWN);
/// Load address of liboslens.so: threads it starts itself (helpers) are not the program's.
static RECORDER_BASE: AtomicUsize = AtomicUsize::new(0);

pub const FLAG_LOCK: u64 = 0;
pub const FLAG_TRYLOCK: u64 = 1;
pub const FLAG_COND: u64 = 2;
pub const FLAG_RDLOCK: u64 = 3;
pub const FLAG_WRLOCK: u64 = 4;
pub const FLAG_TIMEDLOCK: u64 = 5;

thread_local! {
    /// Set while this thread is inside the recorder: wrapped calls made from there pass through.
    static IN_RECORDER: Cell<bool> = const { Cell::new(false) };
}

/// An environment variable, read in place (nothing allocated: this runs at load and in threads
/// that may find no memory left).
fn getenv(name: &CStr) -> Option<&'static CStr> {
    // SAFETY: getenv returns null or a NUL-terminated string of the environment.
    let p = unsafe { libc::getenv(name.as_ptr()) };
    (!p.is_null()).then(|| unsafe { CStr::from_ptr(p) })
}

const LIBRARY: &[u8] = b"liboslens.so";

fn file_name(path: &[u8]) -> &[u8] {
    path.rsplit(|&c| c == b'/').next().unwrap_or(path)
}

/// Whether LD_PRELOAD names liboslens.so (by file name: `oslens record` gives its path, a user
/// may give the name alone); a program that links it without the preload keeps its locks its own.
pub(crate) fn preloaded(ld_preload: &[u8]) -> bool {
    ld_preload.split(|&c| c == b' ' || c == b':').any(|e| file_name(e) == LIBRARY)
}

/// Whether this code is liboslens.so itself, not a copy linked into a program (liboslens.a) or
/// into the Python extension: such a copy calls through to the preloaded library's wrappers,
/// which record, rather than recording each call a second time.
fn in_the_library() -> bool {
    // SAFETY: dladdr fills `info` for an address of this code; dli_fname is a C string or null.
    unsafe {
        let mut info: libc::Dl_info = std::mem::zeroed();
        libc::dladdr(decide as *const c_void, &mut info) != 0
            && !info.dli_fname.is_null()
            && file_name(CStr::from_ptr(info.dli_fname).to_bytes()) == LIBRARY
    }
}

/// Decides, once, whether the wrappers record (see the module's comment).
#[cold]
fn decide() -> u8 {
    let tracing = getenv(c"OSLENS_TRACE").is_some_and(|v| !v.is_empty());
    let on = tracing && getenv(c"LD_PRELOAD").is_some_and(|v| preloaded(v.to_bytes())) && in_the_library();
    if on {
        SYNC_ALL.store(getenv(c"OSLENS_SYNC").is_some_and(|v| v.to_bytes() == b"all"), Relaxed);
        RECORDER_BASE.store(object_base(osl_record_raw as *const c_void), Relaxed);
    }
    let state = if on { RECORDING } else { CALL_THROUGH };
    STATE.store(state, Relaxed);
    state
}

#[inline(always)]
fn recording() -> bool {
    let mut s = STATE.load(Relaxed);
    if s == UNKNOWN {
        s = decide();
    }
    s == RECORDING
}

#[inline(always)]
pub(crate) fn rec(kind: u8, id: u32, a: u64, b: u64) {
    if recording() {
        in_recorder(|| osl_record_raw(kind, id, a, b));
    }
}

/// A process marker (fork in the child, exec): into the thread ledger when the thread has no
/// chunk (thread.rs, `marker`), so a child that only forks and execs makes one file, not two.
#[inline(always)]
pub(crate) fn rec_marker(kind: u8, id: u32, a: u64, b: u64) {
    if recording() {
        in_recorder(|| crate::thread::marker(kind, id, a, b));
    }
}

/// Runs a call into the recorder unless this thread is already inside it.
#[inline(always)]
fn in_recorder(call: impl FnOnce()) {
    let _ = IN_RECORDER.try_with(|busy| {
        if busy.replace(true) {
            return;
        }
        call();
        busy.set(false);
    });
}

/// A lock request and its acquisition with one timestamp: the lock was free, its wait is 0.
fn rec_free_acquire(a: u64, flag: u64) {
    if recording() {
        in_recorder(|| osl_record_pair(kinds::LOCK_REQUEST, kinds::LOCK_ACQUIRE, 0, a, flag));
    }
}

pub(crate) fn define_name(class: u64, name: *const c_char) -> u32 {
    if !recording() || name.is_null() {
        return 0;
    }
    IN_RECORDER
        .try_with(|busy| {
            if busy.replace(true) {
                return 0;
            }
            let id = osl_define_name(class, name);
            busy.set(false);
            id
        })
        .unwrap_or(0)
}

fn die(what: &str) -> ! {
    let msg = format!("oslens preload: cannot find the real {what}; unset LD_PRELOAD\n");
    // SAFETY: writing a buffer to stderr and leaving.
    unsafe {
        libc::write(2, msg.as_ptr() as *const c_void, msg.len());
        libc::abort();
    }
}

fn lookup(name: &CStr, version: Option<&CStr>) -> usize {
    // SAFETY: plain dlsym lookups.
    let mut p = match version {
        Some(v) => unsafe { libc::dlvsym(libc::RTLD_NEXT, name.as_ptr(), v.as_ptr()) },
        None => std::ptr::null_mut(),
    };
    if p.is_null() {
        p = unsafe { libc::dlsym(libc::RTLD_NEXT, name.as_ptr()) };
    }
    if p.is_null() {
        die(&name.to_string_lossy());
    }
    p as usize
}

/// The next definition of a function (glibc's), looked up once.
macro_rules! real {
    ($name:literal $(, $ver:literal)? => fn($($t:ty),*) $(-> $r:ty)?) => {{
        static SLOT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let mut p = SLOT.load(std::sync::atomic::Ordering::Relaxed);
        if p == 0 {
            #[allow(unused_mut, unused_assignments)]
            let mut version: Option<&CStr> = None;
            $(version = Some($ver);)?
            p = $crate::interpose::lookup($name, version);
            SLOT.store(p, std::sync::atomic::Ordering::Relaxed);
        }
        // SAFETY: p is the libc function of this name and C signature.
        unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($t),*) $(-> $r)?>(p) }
    }};
}

pub(crate) use real;

/// The wrappers' allocations are the program's, not the recorder's: they go to the system
/// allocator and, when it fails, take their fallback (a thread started unwrapped, a lock counted
/// one record at a time, an environment left as it is) instead of the recorder's reserve
/// (alloc.rs), which only carries the recorder to a stop.
pub(crate) fn system_alloc(layout: std::alloc::Layout) -> *mut u8 {
    use std::alloc::GlobalAlloc;
    // SAFETY: the wrappers' layouts are non-zero-sized.
    unsafe { std::alloc::System.alloc(layout) }
}

/// Frees what `system_alloc` returned.
pub(crate) unsafe fn system_free(p: *mut u8, layout: std::alloc::Layout) {
    use std::alloc::GlobalAlloc;
    std::alloc::System.dealloc(p, layout)
}

fn errno() -> c_int {
    // SAFETY: errno location of the calling thread.
    unsafe { *libc::__errno_location() }
}

type P = *mut c_void;

// ---- mutexes and rwlocks ----

/// The lock wrappers' mode, from OSLENS_SYNC when the recorder was looked up.
const OFF: u8 = 0;
const CONTENDED: u8 = 1;
const ALL: u8 = 2;
static SYNC_ALL: AtomicBool = AtomicBool::new(false);

#[inline(always)]
fn mode() -> u8 {
    if !recording() || IN_RECORDER.try_with(|b| b.get()).unwrap_or(true) {
        OFF
    } else if SYNC_ALL.load(Relaxed) {
        ALL
    } else {
        CONTENDED
    }
}

/// One acquisition: the try call first, so contention is known without a clock read. An
/// uncontended one is counted (`--sync contended`) or recorded as request and acquire with one
/// timestamp, its wait 0 (`--sync all`); a contended one is recorded as request, then acquire once the blocking call
/// returns.
#[inline(always)]
unsafe fn acquire(a: u64, flag: u64, try_once: impl FnOnce() -> c_int, block: impl FnOnce() -> c_int, acquired: fn(c_int) -> bool) -> c_int {
    let m = mode();
    if m == OFF {
        return block();
    }
    let r = try_once();
    if acquired(r) {
        if m == ALL {
            rec_free_acquire(a, flag);
        } else {
            counts::count(a);
        }
        return r;
    }
    counts::before_blocking();
    rec(kinds::LOCK_REQUEST, 0, a, flag);
    let r = block();
    if acquired(r) {
        rec(kinds::LOCK_ACQUIRE, 0, a, flag);
        if m == CONTENDED {
            counts::hold_recorded(a);
        }
    }
    r
}

/// Records a release where its acquisition was recorded (every one with `--sync all`).
#[inline(always)]
fn release(a: u64, flag: u64) {
    match mode() {
        ALL => rec(kinds::LOCK_RELEASE, 0, a, flag),
        CONTENDED if counts::release_recorded(a) => rec(kinds::LOCK_RELEASE, 0, a, flag),
        _ => {}
    }
}

fn mutex_acquired(r: c_int) -> bool {
    r == 0 || r == libc::EOWNERDEAD
}

fn rwlock_acquired(r: c_int) -> bool {
    r == 0
}

#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_lock(m: P) -> c_int {
    let real = real!(c"pthread_mutex_lock" => fn(P) -> c_int);
    let try_real = real!(c"pthread_mutex_trylock" => fn(P) -> c_int);
    acquire(m as u64, FLAG_LOCK, || try_real(m), || real(m), mutex_acquired)
}

#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_trylock(m: P) -> c_int {
    let real = real!(c"pthread_mutex_trylock" => fn(P) -> c_int);
    let r = real(m);
    if mutex_acquired(r) {
        match mode() {
            ALL => rec_free_acquire(m as u64, FLAG_TRYLOCK),
            CONTENDED => counts::count(m as u64),
            _ => {}
        }
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_timedlock(m: P, t: P) -> c_int {
    let real = real!(c"pthread_mutex_timedlock" => fn(P, P) -> c_int);
    let try_real = real!(c"pthread_mutex_trylock" => fn(P) -> c_int);
    acquire(m as u64, FLAG_TIMEDLOCK, || try_real(m), || real(m, t), mutex_acquired)
}

#[no_mangle]
pub unsafe extern "C" fn pthread_mutex_unlock(m: P) -> c_int {
    let real = real!(c"pthread_mutex_unlock" => fn(P) -> c_int);
    // Before the unlock, so the release precedes the next owner's acquire in time.
    release(m as u64, FLAG_LOCK);
    real(m)
}

#[no_mangle]
pub unsafe extern "C" fn pthread_rwlock_rdlock(l: P) -> c_int {
    let real = real!(c"pthread_rwlock_rdlock" => fn(P) -> c_int);
    let try_real = real!(c"pthread_rwlock_tryrdlock" => fn(P) -> c_int);
    acquire(l as u64, FLAG_RDLOCK, || try_real(l), || real(l), rwlock_acquired)
}

#[no_mangle]
pub unsafe extern "C" fn pthread_rwlock_wrlock(l: P) -> c_int {
    let real = real!(c"pthread_rwlock_wrlock" => fn(P) -> c_int);
    let try_real = real!(c"pthread_rwlock_trywrlock" => fn(P) -> c_int);
    acquire(l as u64, FLAG_WRLOCK, || try_real(l), || real(l), rwlock_acquired)
}

#[no_mangle]
pub unsafe extern "C" fn pthread_rwlock_unlock(l: P) -> c_int {
    let real = real!(c"pthread_rwlock_unlock" => fn(P) -> c_int);
    release(l as u64, FLAG_RDLOCK);
    real(l)
}

// ---- condition variables ----

/// The mutex is released around the wait and held again after it: recorded as a release where
/// its hold was recorded, and as an acquisition of wait 0 (its wait is part of the condition
/// wait's), whose hold is recorded in either mode.
unsafe fn cond_wait_with(c: P, m: P, call: impl FnOnce() -> c_int) -> c_int {
    counts::before_blocking();
    release(m as u64, FLAG_COND);
    rec(kinds::COND_WAIT_ENTER, 0, c as u64, m as u64);
    let r = call();
    rec(kinds::COND_WAIT_EXIT, 0, c as u64, r as u64);
    if mode() != OFF {
        rec_free_acquire(m as u64, FLAG_COND);
        counts::hold_recorded(m as u64);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_cond_wait(c: P, m: P) -> c_int {
    let real = real!(c"pthread_cond_wait", c"GLIBC_2.3.2" => fn(P, P) -> c_int);
    cond_wait_with(c, m, || real(c, m))
}

#[no_mangle]
pub unsafe extern "C" fn pthread_cond_timedwait(c: P, m: P, t: P) -> c_int {
    let real = real!(c"pthread_cond_timedwait", c"GLIBC_2.3.2" => fn(P, P, P) -> c_int);
    cond_wait_with(c, m, || real(c, m, t))
}

#[no_mangle]
pub unsafe extern "C" fn pthread_cond_clockwait(c: P, m: P, clock: c_int, t: P) -> c_int {
    let real = real!(c"pthread_cond_clockwait" => fn(P, P, c_int, P) -> c_int);
    cond_wait_with(c, m, || real(c, m, clock, t))
}

#[no_mangle]
pub unsafe extern "C" fn pthread_cond_signal(c: P) -> c_int {
    let real = real!(c"pthread_cond_signal", c"GLIBC_2.3.2" => fn(P) -> c_int);
    rec(kinds::COND_SIGNAL, 0, c as u64, 0);
    real(c)
}

#[no_mangle]
pub unsafe extern "C" fn pthread_cond_broadcast(c: P) -> c_int {
    let real = real!(c"pthread_cond_broadcast", c"GLIBC_2.3.2" => fn(P) -> c_int);
    rec(kinds::COND_SIGNAL, 0, c as u64, 1);
    real(c)
}

// ---- barriers and semaphores ----

#[no_mangle]
pub unsafe extern "C" fn pthread_barrier_wait(b: P) -> c_int {
    let real = real!(c"pthread_barrier_wait" => fn(P) -> c_int);
    counts::before_blocking();
    rec(kinds::BARRIER_ENTER, 0, b as u64, 0);
    let r = real(b);
    rec(kinds::BARRIER_EXIT, 0, b as u64, (r == libc::PTHREAD_BARRIER_SERIAL_THREAD) as u64);
    r
}

unsafe fn sem_wait_with(s: P, call: impl FnOnce() -> c_int) -> c_int {
    counts::before_blocking();
    rec(kinds::SEM_WAIT_ENTER, 0, s as u64, 0);
    let r = call();
    let err = if r == 0 { 0 } else { errno() };
    rec(kinds::SEM_WAIT_EXIT, 0, s as u64, err as u64);
    if r != 0 {
        *libc::__errno_location() = err;
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn sem_wait(s: P) -> c_int {
    let real = real!(c"sem_wait" => fn(P) -> c_int);
    sem_wait_with(s, || real(s))
}

#[no_mangle]
pub unsafe extern "C" fn sem_timedwait(s: P, t: P) -> c_int {
    let real = real!(c"sem_timedwait" => fn(P, P) -> c_int);
    sem_wait_with(s, || real(s, t))
}

#[no_mangle]
pub unsafe extern "C" fn sem_clockwait(s: P, clock: c_int, t: P) -> c_int {
    let real = real!(c"sem_clockwait" => fn(P, c_int, P) -> c_int);
    sem_wait_with(s, || real(s, clock, t))
}

#[no_mangle]
pub unsafe extern "C" fn sem_trywait(s: P) -> c_int {
    let real = real!(c"sem_trywait" => fn(P) -> c_int);
    let r = real(s);
    if r == 0 {
        rec(kinds::SEM_WAIT_ENTER, 0, s as u64, 0);
        rec(kinds::SEM_WAIT_EXIT, 0, s as u64, 0);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn sem_post(s: P) -> c_int {
    let real = real!(c"sem_post" => fn(P) -> c_int);
    rec(kinds::SEM_POST, 0, s as u64, 0);
    real(s)
}

// ---- threads ----

type StartFn = extern "C" fn(P) -> P;

struct Start {
    f: StartFn,
    arg: P,
    creator_tid: u64,
}

extern "C" fn thread_start(p: P) -> P {
    // SAFETY: written by pthread_create below into memory of system_alloc, handed to exactly
    // one thread, which frees it here.
    let start = unsafe { (p as *mut Start).read() };
    unsafe { system_free(p as *mut u8, std::alloc::Layout::new::<Start>()) };
    // SAFETY: no preconditions.
    let me = unsafe { libc::pthread_self() } as u64;
    // a thread that records nothing of its own then gets no chunk (the recorder's ledger)
    in_recorder(|| crate::capi::osl_thread_started(start.creator_tid, me));
    (start.f)(start.arg)
}

#[no_mangle]
pub unsafe extern "C" fn pthread_create(t: *mut libc::pthread_t, attr: P, f: StartFn, arg: P) -> c_int {
    let real = real!(c"pthread_create" => fn(*mut libc::pthread_t, P, StartFn, P) -> c_int);
    // Threads of the recorder itself (created from inside it) are not the program's.
    let on = recording();
    let base = RECORDER_BASE.load(Relaxed);
    if !on || IN_RECORDER.try_with(|b| b.get()).unwrap_or(true) || (base != 0 && object_base(f as *const c_void) == base) {
        return real(t, attr, f, arg);
    }
    // allocated without aborting: with memory exhausted the thread starts unwrapped (its start
    // is not recorded) and the program runs on
    let start = system_alloc(std::alloc::Layout::new::<Start>()) as *mut Start;
    if start.is_null() {
        let r = real(t, attr, f, arg);
        rec(kinds::THREAD_CREATE, 0, if r == 0 { *t as u64 } else { 0 }, r as u64);
        return r;
    }
    start.write(Start { f, arg, creator_tid: libc::gettid() as u64 });
    let r = real(t, attr, thread_start, start as P);
    if r != 0 {
        system_free(start as *mut u8, std::alloc::Layout::new::<Start>());
    }
    rec(kinds::THREAD_CREATE, 0, if r == 0 { *t as u64 } else { 0 }, r as u64);
    r
}

#[no_mangle]
pub unsafe extern "C" fn pthread_join(t: libc::pthread_t, ret: *mut P) -> c_int {
    let real = real!(c"pthread_join" => fn(libc::pthread_t, *mut P) -> c_int);
    counts::before_blocking();
    rec(kinds::THREAD_JOIN_ENTER, 0, t as u64, 0);
    let r = real(t, ret);
    rec(kinds::THREAD_JOIN_EXIT, 0, t as u64, r as u64);
    r
}


#[cfg(test)]
mod tests {
    use super::preloaded;

    #[test]
    fn preloaded_finds_liboslens_by_file_name_only() {
        assert!(preloaded(b"/x/.venv/lib/liboslens.so"));
        assert!(preloaded(b"/a/libother.so:liboslens.so"));
        assert!(preloaded(b"/a/libother.so /b/liboslens.so"));
        assert!(!preloaded(b""));
        assert!(!preloaded(b"/x/liboslens_preload.so /x/libfoo.so"));
        assert!(!preloaded(b"/x/liboslens.so.1 /liboslens.sox"));
    }
}
