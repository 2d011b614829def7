//! liboslens_preload.so: an LD_PRELOAD library that records pthread synchronisation, threads,
//! semaphores, fork, exec and exit of an unmodified program through liboslens.
//!
//! `oslens record` preloads liboslens.so *and* this library (in that order); the wrappers find
//! the recorder with dlsym(RTLD_DEFAULT, "osl_record_raw") and the real functions with
//! dlsym(RTLD_NEXT, …) (dlvsym for the condition variables, whose unversioned lookup finds
//! glibc's 2.2.5 compatibility versions). Without OSLENS_TRACE, or without liboslens, every
//! wrapper calls straight through.
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
//!   new thread (a = creator's tid, b = own pthread_t), THREAD_JOIN_ENTER / EXIT.
//! - fork / posix_spawn: PROCESS_FORK; exec*: PROCESS_EXEC (id = program name); exit: PROCESS_EXIT.
//!   (_exit is not wrapped: after vfork it runs on the parent's memory and thread state.)
//!
//! exec*, posix_spawn* given an explicit environment get OSLENS_* and LD_PRELOAD put back if
//! the program left them out, so children are traced into the same trace.
//! execl/execlp/execle are variadic (not definable in stable Rust): they are not wrapped;
//! glibc implements them with its internal execve, so their children are still traced through
//! the inherited environment, only without the PROCESS_EXEC marker.

use oslens_format::kinds;
use oslens_format::object::object_base;
use std::cell::Cell;
use std::ffi::{c_char, c_int, c_void, CStr, CString};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering::{Acquire, Relaxed, Release}};

mod counts;

type RecordFn = unsafe extern "C" fn(u8, u32, u64, u64);
type DefineFn = unsafe extern "C" fn(u64, *const c_char) -> u32;
type PairFn = unsafe extern "C" fn(u8, u8, u32, u64, u64);
type StartedFn = unsafe extern "C" fn(u64, u64);

/// 0 = not looked up yet, 1 = no recorder in the process, else the function.
static RECORD: AtomicUsize = AtomicUsize::new(0);
static DEFINE: AtomicUsize = AtomicUsize::new(0);
static PAIR: AtomicUsize = AtomicUsize::new(0);
/// osl_thread_started, or 0 (a recorder without it: THREAD_START is then recorded as any record).
static STARTED: AtomicUsize = AtomicUsize::new(0);
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

fn resolve_recorder() -> usize {
    if getenv(c"OSLENS_TRACE").is_none_or(|v| v.is_empty()) {
        RECORD.store(1, Relaxed);
        return 1;
    }
    // SAFETY: plain dlsym lookups of C symbols.
    let (rec, def) = unsafe { (libc::dlsym(libc::RTLD_DEFAULT, c"osl_record_raw".as_ptr()), libc::dlsym(libc::RTLD_DEFAULT, c"osl_define_name".as_ptr())) };
    // SAFETY: a plain dlsym lookup.
    let pair = unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"osl_record_pair".as_ptr()) };
    PAIR.store(pair as usize, Relaxed);
    // SAFETY: a plain dlsym lookup.
    STARTED.store(unsafe { libc::dlsym(libc::RTLD_DEFAULT, c"osl_thread_started".as_ptr()) } as usize, Relaxed);
    SYNC_ALL.store(getenv(c"OSLENS_SYNC").is_some_and(|v| v.to_bytes() == b"all"), Relaxed);
    DEFINE.store(if def.is_null() { 1 } else { def as usize }, Relaxed);
    let r = if rec.is_null() { 1 } else { rec as usize };
    if !rec.is_null() {
        RECORDER_BASE.store(object_base(rec), Relaxed);
    }
    RECORD.store(r, Relaxed);
    r
}

#[inline(always)]
pub(crate) fn rec(kind: u8, id: u32, a: u64, b: u64) {
    let mut f = RECORD.load(Relaxed);
    if f == 0 {
        f = resolve_recorder();
    }
    if f == 1 {
        return;
    }
    // SAFETY: f is osl_record_raw from liboslens.
    in_recorder(|| unsafe { std::mem::transmute::<usize, RecordFn>(f)(kind, id, a, b) });
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
    let f = PAIR.load(Relaxed);
    if f == 0 {
        rec(kinds::LOCK_REQUEST, 0, a, flag);
        rec(kinds::LOCK_ACQUIRE, 0, a, flag);
        return;
    }
    let _ = IN_RECORDER.try_with(|busy| {
        if busy.replace(true) {
            return;
        }
        // SAFETY: f is osl_record_pair from liboslens.
        unsafe { std::mem::transmute::<usize, PairFn>(f)(kinds::LOCK_REQUEST, kinds::LOCK_ACQUIRE, 0, a, flag) };
        busy.set(false);
    });
}

pub(crate) fn define_name(class: u64, name: *const c_char) -> u32 {
    if RECORD.load(Relaxed) == 0 {
        resolve_recorder();
    }
    let f = DEFINE.load(Relaxed);
    if f <= 1 || name.is_null() {
        return 0;
    }
    IN_RECORDER
        .try_with(|busy| {
            if busy.replace(true) {
                return 0;
            }
            // SAFETY: f is osl_define_name from liboslens; name is a C string.
            let id = unsafe { std::mem::transmute::<usize, DefineFn>(f)(class, name) };
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
        static SLOT: AtomicUsize = AtomicUsize::new(0);
        let mut p = SLOT.load(Relaxed);
        if p == 0 {
            #[allow(unused_mut, unused_assignments)]
            let mut version: Option<&CStr> = None;
            $(version = Some($ver);)?
            p = lookup($name, version);
            SLOT.store(p, Relaxed);
        }
        // SAFETY: p is the libc function of this name and C signature.
        unsafe { std::mem::transmute::<usize, unsafe extern "C" fn($($t),*) $(-> $r)?>(p) }
    }};
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
    let mut f = RECORD.load(Relaxed);
    if f == 0 {
        f = resolve_recorder();
    }
    if f == 1 || IN_RECORDER.try_with(|b| b.get()).unwrap_or(true) {
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
    // SAFETY: boxed by pthread_create below, handed to exactly one thread.
    let start = unsafe { Box::from_raw(p as *mut Start) };
    // SAFETY: no preconditions.
    let me = unsafe { libc::pthread_self() } as u64;
    match STARTED.load(Relaxed) {
        0 => rec(kinds::THREAD_START, 0, start.creator_tid, me),
        // a thread that records nothing of its own then gets no chunk (the recorder's ledger)
        // SAFETY: f is osl_thread_started from liboslens.
        f => in_recorder(|| unsafe { std::mem::transmute::<usize, StartedFn>(f)(start.creator_tid, me) }),
    }
    (start.f)(start.arg)
}

#[no_mangle]
pub unsafe extern "C" fn pthread_create(t: *mut libc::pthread_t, attr: P, f: StartFn, arg: P) -> c_int {
    let real = real!(c"pthread_create" => fn(*mut libc::pthread_t, P, StartFn, P) -> c_int);
    // Threads of the recorder itself (created from inside it) are not the program's.
    if RECORD.load(Relaxed) == 0 {
        resolve_recorder();
    }
    let base = RECORDER_BASE.load(Relaxed);
    if RECORD.load(Relaxed) == 1 || IN_RECORDER.try_with(|b| b.get()).unwrap_or(true) || (base != 0 && object_base(f as *const c_void) == base) {
        return real(t, attr, f, arg);
    }
    // allocated without aborting: with memory exhausted the thread starts unwrapped (its start
    // is not recorded) and the program runs on
    let start = std::alloc::alloc(std::alloc::Layout::new::<Start>()) as *mut Start;
    if start.is_null() {
        let r = real(t, attr, f, arg);
        rec(kinds::THREAD_CREATE, 0, if r == 0 { *t as u64 } else { 0 }, r as u64);
        return r;
    }
    start.write(Start { f, arg, creator_tid: libc::gettid() as u64 });
    let r = real(t, attr, thread_start, start as P);
    if r != 0 {
        drop(Box::from_raw(start));
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

// ---- processes ----

#[no_mangle]
pub unsafe extern "C" fn fork() -> libc::pid_t {
    let real = real!(c"fork" => fn() -> libc::pid_t);
    let pid = real();
    if pid == 0 {
        counts::after_fork_child();
        rec(kinds::PROCESS_FORK, 0, 0, libc::getppid() as u64);
    } else if pid > 0 {
        rec(kinds::PROCESS_FORK, 0, pid as u64, 0);
    }
    pid
}

/// vfork is run as fork: a vfork child shares the parent's memory and thread state, so the
/// recorder could not tell them apart (and the exec wrappers record before they exec).
#[no_mangle]
pub unsafe extern "C" fn vfork() -> libc::pid_t {
    fork()
}

type Argv = *const *const c_char;

/// OSLENS_* and LD_PRELOAD of the process's start ("NAME=value" entries of its environment),
/// put back into environments that lack them. Kept as pointers, so load allocates nothing: the
/// strings of the environment a process starts with are never freed (and glibc's setenv never
/// frees the ones it made).
const KEEP_MAX: usize = 32;
static KEEP: [AtomicUsize; KEEP_MAX] = [const { AtomicUsize::new(0) }; KEEP_MAX];
static KEPT: AtomicUsize = AtomicUsize::new(0);

/// Notes the entries to keep, once (at load, before the program can change its environment).
fn note_keep() {
    if KEPT.load(Relaxed) != 0 {
        return;
    }
    let mut n = 0;
    // SAFETY: environ is a NULL-terminated array of NUL-terminated strings.
    unsafe {
        let mut e = environ;
        while !e.is_null() && !(*e).is_null() && n < KEEP_MAX {
            let entry = CStr::from_ptr(*e).to_bytes();
            if entry.starts_with(b"OSLENS_") || entry.starts_with(b"LD_PRELOAD=") {
                KEEP[n].store(*e as usize, Relaxed);
                n += 1;
            }
            e = e.add(1);
        }
    }
    KEPT.store(n + 1, Release);
}

/// The entries noted at load.
fn keep() -> impl Iterator<Item = &'static CStr> {
    let n = KEPT.load(Acquire).saturating_sub(1);
    // SAFETY: pointers to environment strings noted by note_keep, never freed.
    KEEP[..n].iter().map(|p| unsafe { CStr::from_ptr(p.load(Relaxed) as *const c_char) })
}

/// `envp` with our variables added where missing (LD_PRELOAD: ours put in front of theirs).
/// The array is leaked: exec replaces the process, and a failed exec is rare.
unsafe fn fix_env(envp: Argv) -> Argv {
    let kept = KEPT.load(Acquire).saturating_sub(1);
    if envp.is_null() || kept == 0 || RECORD.load(Relaxed) == 1 {
        return envp;
    }
    let mut n = 0;
    while !(*envp.add(n)).is_null() {
        n += 1;
    }
    // with memory exhausted the environment goes unchanged (the new image may run unrecorded)
    // rather than the allocation aborting the program
    let mut entries: Vec<*const c_char> = Vec::new();
    if entries.try_reserve_exact(n + kept + 1).is_err() {
        return envp;
    }
    for i in 0..n {
        entries.push(*envp.add(i));
    }
    let mut changed = false;
    for want in keep() {
        let want_b = want.to_bytes();
        let eq = want_b.iter().position(|&c| c == b'=').unwrap_or(0);
        let key = &want_b[..=eq];
        let found = entries.iter().position(|&e| CStr::from_ptr(e).to_bytes().starts_with(key));
        match found {
            None => {
                entries.push(want.as_ptr());
                changed = true;
            }
            Some(idx) if key == b"LD_PRELOAD=" => {
                let theirs = &CStr::from_ptr(entries[idx]).to_bytes()[key.len()..];
                let ours = &want_b[key.len()..];
                let missing = ours.split(|&c| c == b' ' || c == b':').any(|lib| !lib.is_empty() && !theirs.split(|&c| c == b' ' || c == b':').any(|t| t == lib));
                if missing {
                    let mut merged = Vec::new();
                    if merged.try_reserve_exact(want_b.len() + theirs.len() + 2).is_err() {
                        continue;
                    }
                    merged.extend_from_slice(want_b);
                    if !theirs.is_empty() {
                        merged.push(b' ');
                        merged.extend_from_slice(theirs);
                    }
                    if let Ok(s) = CString::new(merged) {
                        entries[idx] = s.into_raw();
                        changed = true;
                    }
                }
            }
            Some(_) => {}
        }
    }
    if !changed {
        return envp;
    }
    entries.push(std::ptr::null());
    let leaked = entries.leak();
    leaked.as_ptr()
}

fn record_exec(path: *const c_char) -> u32 {
    counts::flush_all();
    let id = define_name(kinds::NAME_COMMAND, path);
    rec(kinds::PROCESS_EXEC, id, 0, 0);
    id
}

fn record_exec_failed(id: u32) {
    let err = errno();
    rec(kinds::PROCESS_EXEC, id, err as u64, 0);
    // SAFETY: restoring the caller's errno.
    unsafe { *libc::__errno_location() = err };
}

#[no_mangle]
pub unsafe extern "C" fn execve(path: *const c_char, argv: Argv, envp: Argv) -> c_int {
    let real = real!(c"execve" => fn(*const c_char, Argv, Argv) -> c_int);
    let id = record_exec(path);
    let r = real(path, argv, fix_env(envp));
    record_exec_failed(id);
    r
}

extern "C" {
    static environ: Argv;
}

/// execv and execvp go through execve / execvpe with the (fixed) environment: a program may
/// have emptied its environment first (`env -i`).
#[no_mangle]
pub unsafe extern "C" fn execv(path: *const c_char, argv: Argv) -> c_int {
    let real = real!(c"execve" => fn(*const c_char, Argv, Argv) -> c_int);
    let id = record_exec(path);
    let r = real(path, argv, fix_env(environ));
    record_exec_failed(id);
    r
}

#[no_mangle]
pub unsafe extern "C" fn execvp(file: *const c_char, argv: Argv) -> c_int {
    let real = real!(c"execvpe" => fn(*const c_char, Argv, Argv) -> c_int);
    let id = record_exec(file);
    let r = real(file, argv, fix_env(environ));
    record_exec_failed(id);
    r
}

#[no_mangle]
pub unsafe extern "C" fn execvpe(file: *const c_char, argv: Argv, envp: Argv) -> c_int {
    let real = real!(c"execvpe" => fn(*const c_char, Argv, Argv) -> c_int);
    let id = record_exec(file);
    let r = real(file, argv, fix_env(envp));
    record_exec_failed(id);
    r
}

#[no_mangle]
pub unsafe extern "C" fn fexecve(fd: c_int, argv: Argv, envp: Argv) -> c_int {
    let real = real!(c"fexecve" => fn(c_int, Argv, Argv) -> c_int);
    let name = CString::new(format!("fd:{fd}")).unwrap_or_default();
    let id = record_exec(name.as_ptr());
    let r = real(fd, argv, fix_env(envp));
    record_exec_failed(id);
    r
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawn(pid: *mut libc::pid_t, path: *const c_char, actions: P, attr: P, argv: Argv, envp: Argv) -> c_int {
    let real = real!(c"posix_spawn" => fn(*mut libc::pid_t, *const c_char, P, P, Argv, Argv) -> c_int);
    let r = real(pid, path, actions, attr, argv, fix_env(envp));
    if r == 0 && !pid.is_null() {
        rec(kinds::PROCESS_FORK, 0, *pid as u64, 1);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn posix_spawnp(pid: *mut libc::pid_t, file: *const c_char, actions: P, attr: P, argv: Argv, envp: Argv) -> c_int {
    let real = real!(c"posix_spawnp" => fn(*mut libc::pid_t, *const c_char, P, P, Argv, Argv) -> c_int);
    let r = real(pid, file, actions, attr, argv, fix_env(envp));
    if r == 0 && !pid.is_null() {
        rec(kinds::PROCESS_FORK, 0, *pid as u64, 1);
    }
    r
}

#[no_mangle]
pub unsafe extern "C" fn exit(status: c_int) -> ! {
    let real = real!(c"exit" => fn(c_int) -> !);
    counts::flush_all();
    rec(kinds::PROCESS_EXIT, 0, status as u64, 0);
    real(status)
}

extern "C" fn flush_counts_at_exit() {
    counts::flush_all();
}

#[used]
#[link_section = ".init_array"]
static CONSTRUCTOR: extern "C" fn() = {
    extern "C" fn constructor() {
        // Capture the environment to restore before the program can change it.
        note_keep();
        if RECORD.load(Relaxed) == 0 && resolve_recorder() != 1 {
            counts::create_exit_key();
            // a return from main exits through glibc's own exit call, not the wrapper
            // SAFETY: registering a plain function.
            unsafe { libc::atexit(flush_counts_at_exit) };
        }
    }
    constructor
};
