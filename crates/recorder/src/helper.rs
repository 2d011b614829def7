//! The recorder's helper thread, one per process ("oslens-helper"): it copies the full slots of
//! every thread's staging ring (stage.rs) out to the trace file, so the fresh pages that takes
//! (each costing more than the records in it: docs/recorder.md, "Cost", figures behind the code) are prepared
//! on its CPU rather than the program's. Writers wake it with a futex once per few slots, and only while it sleeps; when it
//! falls behind they copy a slot out themselves: recording never waits for it. Its CPU time and
//! the slots it copied are measured (`helper_cost`) and kept in the trace.

use crate::space::Space;
use crate::stage::Stage;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::sync::Arc;

/// A staging ring the helper serves, from its chunk's creation until the chunk is unmapped.
pub struct Ring {
    stage: Stage,
    /// The chunk's file space: the helper keeps it reserved ahead of the writer.
    space: Arc<Space>,
    /// How far the records were written back and dropped from the page cache.
    behind: crate::writeback::WriteBehind,
    /// Cleared when the writer unmaps the chunk; `busy` holds the unmap until a copy ends.
    alive: AtomicBool,
    busy: AtomicBool,
}

impl Ring {
    /// Writes back and drops the records already in the file (writeback.rs), where enabled.
    pub fn write_behind(&self) {
        if crate::writeback::enabled() {
            self.behind.advance(self.space.fd(), self.stage.in_file_bytes(), oslens_format::header::HEADER_SIZE as u64);
        }
    }

    /// Called by the writer before it unmaps: waits out a copy in progress.
    pub fn retire(&self) {
        self.alive.store(false, SeqCst);
        while self.busy.load(SeqCst) {
            std::thread::yield_now();
        }
    }
}

/// A spin lock (not a Mutex) so a fork()ed child can reset it.
static LOCK: AtomicBool = AtomicBool::new(false);
static mut RINGS: Vec<Arc<Ring>> = Vec::new();
static GENERATION: AtomicU32 = AtomicU32::new(0);
static STARTED: AtomicBool = AtomicBool::new(false);
/// Set while the helper waits on its futex, so writers make the wake system call only then.
static SLEEPING: AtomicBool = AtomicBool::new(false);
/// The helper's pthread_t (0: none in this process), for its CPU clock.
static HELPER: AtomicU64 = AtomicU64::new(0);
/// Staging slots the helper copied out.
static HELPER_COPIES: AtomicU64 = AtomicU64::new(0);
/// How often the helper checks that an attacher is still there (session.rs): a killed oslens
/// leaves the instruments recording at most this long (100 ms).
const WATCH_PERIOD_NS: i64 = 100_000_000;

fn with_rings<R>(f: impl FnOnce(&mut Vec<Arc<Ring>>) -> R) -> R {
    while LOCK.compare_exchange_weak(false, true, Acquire, Relaxed).is_err() {
        std::thread::yield_now();
    }
    // SAFETY: RINGS is only touched with LOCK held.
    let r = f(unsafe { &mut *std::ptr::addr_of_mut!(RINGS) });
    LOCK.store(false, Release);
    r
}

/// Hands a ring to the helper; when the list cannot grow (out of memory) the ring is still
/// returned, and its writer copies its own slots as it does whenever the helper is behind.
pub fn register(stage: Stage, space: Arc<Space>) -> Arc<Ring> {
    let ring = Arc::new(Ring { stage, space, behind: Default::default(), alive: AtomicBool::new(true), busy: AtomicBool::new(false) });
    with_rings(|rings| {
        if rings.try_reserve(1).is_ok() {
            rings.push(ring.clone());
        }
    });
    ring
}

/// (CPU ns, slots copied) of this process's helper so far; None when it never started.
pub fn helper_cost() -> Option<(u64, u64)> {
    let thread = HELPER.load(Acquire);
    if thread == 0 {
        return None;
    }
    let mut clock: libc::clockid_t = 0;
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: the helper never exits while the process runs; plain out-parameters.
    let ok = unsafe { libc::pthread_getcpuclockid(thread as libc::pthread_t, &mut clock) == 0 && libc::clock_gettime(clock, &mut ts) == 0 };
    ok.then(|| (ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64, HELPER_COPIES.load(Relaxed)))
}

/// Starts the helper once per process. Called by a new thread after its chunk exists and
/// outside every recorder lock: pthread_create may be wrapped by the preload library, which
/// records, which must not find a recorder lock held.
pub fn start() {
    if STARTED.load(Acquire) || STARTED.swap(true, AcqRel) {
        return;
    }
    // pthread_create itself, not std::thread: std registers a thread-local destructor in the
    // creating thread, which glibc aborts the process on when it has no memory for it. When
    // the thread cannot start (no memory for its stack, a thread limit) writers copy their own
    // slots, and it is not tried again: each try would cost the program a failed
    // pthread_create on its slow path. `wake` then finds no sleeper and makes no system call.
    let mut thread: libc::pthread_t = 0;
    // SAFETY: a plain thread start; helper_main takes no argument.
    if unsafe { libc::pthread_create(&mut thread, std::ptr::null(), helper_main, std::ptr::null_mut()) } == 0 {
        HELPER.store(thread as u64, Release);
    }
}

thread_local! {
    /// Set on the helper thread, which never records (thread.rs asks).
    static ON_HELPER: std::cell::Cell<bool> = const { std::cell::Cell::new(false) };
}

/// True on the helper thread.
pub fn on_helper_thread() -> bool {
    ON_HELPER.with(|h| h.get())
}

extern "C" fn helper_main(_: *mut libc::c_void) -> *mut libc::c_void {
    ON_HELPER.with(|h| h.set(true));
    // SAFETY: names the calling thread (at most 15 bytes and a NUL).
    unsafe { libc::pthread_setname_np(libc::pthread_self(), c"oslens-helper".as_ptr()) };
    // SAFETY: no preconditions.
    crate::helper_started(unsafe { libc::gettid() } as u32);
    helper_loop()
}

pub fn wake() {
    if !STARTED.load(Relaxed) {
        return;
    }
    // SeqCst on both sides (here and in helper_loop): either the helper sees the new
    // generation before it sleeps, or this sees it sleeping.
    GENERATION.fetch_add(1, SeqCst);
    if !SLEEPING.load(SeqCst) {
        return;
    }
    // SAFETY: futex wake on a static word.
    unsafe { libc::syscall(libc::SYS_futex, GENERATION.as_ptr(), libc::FUTEX_WAKE | libc::FUTEX_PRIVATE_FLAG, 1) };
}

fn helper_loop() -> ! {
    // One list reused across wakes: it grows only when the rings do, and when it cannot (out
    // of memory) this wake copies nothing and the writers copy their own slots.
    let mut work: Vec<Arc<Ring>> = Vec::new();
    loop {
        let seen = GENERATION.load(Acquire);
        with_rings(|rings| {
            rings.retain(|r| r.alive.load(Relaxed));
            if work.try_reserve(rings.len()).is_ok() {
                work.extend(rings.iter().cloned());
            }
        });
        for r in work.drain(..) {
            r.busy.store(true, SeqCst);
            if r.alive.load(SeqCst) {
                HELPER_COPIES.fetch_add(r.stage.copy_full_slots(), Relaxed);
                r.stage.keep_reserved_ahead(&r.space);
                r.write_behind();
            }
            r.busy.store(false, SeqCst);
        }
        SLEEPING.store(true, SeqCst);
        if GENERATION.load(SeqCst) == seen {
            // While an attach session is watched the wait ends every WATCH_PERIOD to check it.
            let period = libc::timespec { tv_sec: 0, tv_nsec: WATCH_PERIOD_NS };
            let timeout = if crate::session::watching() { &period as *const libc::timespec } else { std::ptr::null() };
            // SAFETY: futex wait on a static word, woken by `wake`.
            unsafe { libc::syscall(libc::SYS_futex, GENERATION.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, seen, timeout) };
        }
        SLEEPING.store(false, SeqCst);
        crate::session::check_attacher();
    }
}

/// In a fork()ed child the helper does not exist and the parent's rings are not ours.
pub fn forget_after_fork() {
    LOCK.store(false, Release);
    crate::session::forget_after_fork();
    // The parent's rings are dropped without being freed: their Arcs may be mid-use there.
    // Their chunk files' descriptors are the child's copies, closed here.
    with_rings(|rings| {
        for r in rings.iter() {
            r.space.close_fd();
        }
        std::mem::forget(std::mem::take(rings))
    });
    STARTED.store(false, Release);
    SLEEPING.store(false, Release);
    HELPER.store(0, Release);
    HELPER_COPIES.store(0, Release);
}
