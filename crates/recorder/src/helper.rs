//! The recorder's helper thread, one per process ("oslens-helper"): it copies the full slots of
//! every thread's staging ring (stage.rs) out to the trace file, so the fresh pages that takes
//! (each costing more than the records in it: docs/recorder.md, "Cost", figures behind the code) are prepared
//! on its CPU rather than the program's. Writers wake it with a futex once per few slots, and only while it sleeps; when it
//! falls behind they copy a slot out themselves: recording never waits for it. Its CPU time and
//! the slots it copied are measured (`helper_cost`) and kept in the trace.

use crate::buffer::Chunk;
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
    /// The chunk to follow this one when it fills (rotating mode), prepared here ahead.
    pub successor: Successor,
    /// A rotated chunk's close, handed over by its writer (CLOSING_HANDED) and finished by
    /// whoever wins the swap to CLOSING_TAKEN: the helper, or the process's exit.
    closing: AtomicU32,
    close: std::cell::UnsafeCell<Option<Closing>>,
}

const CLOSING_NONE: u32 = 0;
const CLOSING_HANDED: u32 = 1;
const CLOSING_TAKEN: u32 = 2;

/// What is left of a rotated chunk's close once its writer marked it closed (Chunk::close_rotated):
/// copy the ring's last slots out, drop the ring, cut the file at its last record, unmap.
pub struct Closing {
    pub base: *mut u8,
    pub map_len: usize,
    /// The file's length without the ring and the unused positions, and the capacity that leaves.
    pub records_end: u64,
    pub capacity: u64,
    pub path: std::ffi::CString,
    pub budget: u64,
}

impl Ring {
    /// The writer's: its chunk is marked closed, with records maybe still in full ring slots
    /// (readers take them from there, as after a crash); the rest is the helper's.
    pub fn hand_over_close(&self, closing: Closing) {
        // SAFETY: CLOSING_NONE: nobody else touches the cell until the release below.
        unsafe { *self.close.get() = Some(closing) };
        PENDING_CLOSES.fetch_add(1, SeqCst);
        self.closing.store(CLOSING_HANDED, Release);
        wake();
    }

    /// Finishes a handed-over close, when there is one and nobody else took it.
    fn finish_close(&self) {
        if self.closing.load(Acquire) != CLOSING_HANDED || self.closing.swap(CLOSING_TAKEN, AcqRel) != CLOSING_HANDED {
            return;
        }
        // SAFETY: CLOSING_TAKEN by this call: the cell is ours.
        let Some(c) = (unsafe { (*self.close.get()).take() }) else { return };
        // the writer finished its last slot and left: every slot is free or full
        self.stage.drain();
        self.stage.remove();
        // a copy the helper is making of this ring ends before the mapping goes
        self.retire();
        let fd = self.space.fd();
        // SAFETY: our descriptor (checked by Space::fd), else the path (the chunk holds its records).
        let cut = fd >= 0 && unsafe { libc::ftruncate(fd, c.records_end as libc::off_t) } == 0;
        if !cut {
            // SAFETY: a valid C string.
            unsafe { libc::truncate(c.path.as_ptr(), c.records_end as libc::off_t) };
        }
        // SAFETY: an aligned u64 of the header page, which stays mapped until below.
        unsafe { (*(c.base.add(oslens_format::header::offset::CAPACITY) as *const AtomicU64)).store(c.capacity, Relaxed) };
        // SAFETY: the chunk's mapping, which its writer no longer uses.
        unsafe { libc::munmap(c.base as *mut libc::c_void, c.map_len) };
        self.space.close_fd();
        crate::memlimit::give_back(c.budget);
        PENDING_CLOSES.fetch_sub(1, SeqCst);
    }
}

/// Rotated chunks whose close was handed over and is not finished.
static PENDING_CLOSES: AtomicU32 = AtomicU32::new(0);

/// Before a thread's last chunk goes (thread or process exit): finishes the rotated chunks'
/// closes the helper has not (it stops with the process), so no closed chunk is left with its
/// ring. Chunks read the same either way; nothing to do (one load) outside rotating mode.
pub fn finish_handed_closes() {
    if PENDING_CLOSES.load(SeqCst) == 0 {
        return;
    }
    let mut pending: Vec<Arc<Ring>> = Vec::new();
    with_rings(|rings| {
        if pending.try_reserve(rings.len()).is_ok() {
            pending.extend(rings.iter().filter(|r| r.closing.load(Acquire) == CLOSING_HANDED).cloned());
        }
    });
    for r in pending {
        r.finish_close();
    }
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

/// Where a successor chunk stands: the writer asks (REQUESTED) once its chunk is half full, the
/// helper prepares it (PREPARING -> READY, or FAILED), and the writer takes it when full (or
/// gives it up at close) by swapping in TAKEN: it never waits, and whichever side loses the race
/// for a prepared chunk that nobody will use discards it.
const IDLE: u32 = 0;
const REQUESTED: u32 = 1;
const PREPARING: u32 = 2;
const READY: u32 = 3;
const FAILED: u32 = 4;
const TAKEN: u32 = 5;

#[derive(Default)]
pub struct Successor {
    state: AtomicU32,
    /// What the writer asked for: the capacity in records, and (pid << 32 | tid).
    capacity: AtomicU64,
    ids: AtomicU64,
    /// Written by the helper before READY, read by the writer only after it swapped READY out.
    chunk: std::cell::UnsafeCell<Option<Chunk>>,
}

// SAFETY: `chunk` is touched by one side at a time, as `state` hands it over (see above).
unsafe impl Sync for Successor {}

impl Successor {
    /// The writer asks for the next chunk (once per chunk) and wakes the helper.
    pub fn request(&self, capacity: u64, pid: u32, tid: u32) {
        self.capacity.store(capacity, Relaxed);
        self.ids.store((pid as u64) << 32 | tid as u64, Relaxed);
        if self.state.compare_exchange(IDLE, REQUESTED, Release, Relaxed).is_ok() {
            wake();
        }
    }

    /// The writer's: the prepared chunk if it is ready; from now on the helper keeps none.
    pub fn take(&self) -> Option<Chunk> {
        if self.state.swap(TAKEN, AcqRel) != READY {
            return None;
        }
        // SAFETY: READY: the helper wrote the chunk and let go of it.
        unsafe { (*self.chunk.get()).take() }
    }

    /// The helper's: prepares the requested chunk (a spare file, sized, its ring's pages given).
    fn serve(&self) {
        if self.state.compare_exchange(REQUESTED, PREPARING, Acquire, Relaxed).is_err() {
            return;
        }
        let ids = self.ids.load(Relaxed);
        let Some(chunk) = Chunk::create_unnamed(self.capacity.load(Relaxed), (ids >> 32) as u32, ids as u32) else {
            let _ = self.state.compare_exchange(PREPARING, FAILED, Relaxed, Relaxed);
            return;
        };
        // SAFETY: PREPARING: the writer does not touch the chunk until it sees READY.
        unsafe { *self.chunk.get() = Some(chunk) };
        if self.state.compare_exchange(PREPARING, READY, Release, Relaxed).is_err() {
            // the writer rotated (or closed) without it meanwhile
            // SAFETY: TAKEN while PREPARING: the writer never reads it.
            if let Some(c) = unsafe { (*self.chunk.get()).take() } {
                c.discard();
            }
        }
    }
}

// SAFETY: `close` is touched by one side at a time, as `closing` hands it over; the mapping it
// names is used by nobody else once handed over.
unsafe impl Sync for Ring {}
unsafe impl Send for Ring {}

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
    let ring = Arc::new(Ring { stage, space, behind: Default::default(), alive: AtomicBool::new(true), busy: AtomicBool::new(false), successor: Successor::default(), closing: AtomicU32::new(CLOSING_NONE), close: Default::default() });
    with_rings(|rings| {
        if rings.try_reserve(1).is_ok() {
            rings.push(ring.clone());
        }
    });
    ring
}

/// True once this process's helper thread runs (it finishes handed-over closes).
pub fn running() -> bool {
    HELPER.load(Acquire) != 0
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
            // outside `busy`: the writer's close never waits for a successor being prepared
            r.successor.serve();
            r.finish_close();
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
    PENDING_CLOSES.store(0, Release);
    HELPER.store(0, Release);
    HELPER_COPIES.store(0, Release);
}
