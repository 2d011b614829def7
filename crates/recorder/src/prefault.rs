//! Pages ahead of the writers. A fresh page of a chunk costs a zero-fill (a microsecond or
//! more on a VM); charged to the recording thread, that is ~10 ns per 32-byte record, more
//! than the record itself. A helper thread ("oslens-prefault") populates each chunk's next
//! windows with MADV_POPULATE_WRITE before the writer reaches them, so the hot path never
//! faults. Writers ask for more with a futex wake once per half window (8192 records), and if
//! the helper falls behind they populate the window themselves: recording never waits.
//! Thread chunks write into a staging ring instead (stage.rs): for them the helper copies full
//! slots out, touching the fresh pages on its own CPU.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::*};
use std::sync::Arc;
use crate::stage::Stage;

pub const MADV_POPULATE_WRITE: libc::c_int = 23;
/// Bytes populated per step (512 KiB = 16384 records).
pub const WINDOW: u64 = 512 * 1024;

pub struct Region {
    base: usize,
    len: AtomicU64,
    /// Bytes from `base` already populated.
    pub populated: AtomicU64,
    /// Bytes the writer wants populated.
    wanted: AtomicU64,
    /// Cleared when the writer unmaps the chunk; `busy` keeps the unmap until a populate ends.
    alive: AtomicBool,
    busy: AtomicBool,
    stage: Option<Stage>,
}

impl Region {
    /// Populates the next window from the calling thread.
    pub fn populate_step(&self) {
        let from = self.populated.load(Acquire);
        let len = self.len.load(Acquire);
        if from >= len {
            return;
        }
        let to = (from + WINDOW).min(len);
        let start = from & !4095;
        // SAFETY: inside the writer's mapping, which stays mapped while `alive` (see `retire`).
        unsafe { libc::madvise((self.base + start as usize) as *mut libc::c_void, (to - start) as usize, MADV_POPULATE_WRITE) };
        self.populated.fetch_max(to, Release);
    }

    /// Asks the helper for pages up to `upto` bytes.
    pub fn request(&self, upto: u64) {
        // Whole windows only, so a writer wakes the helper once per window, not per event.
        let upto = upto.div_ceil(WINDOW).saturating_mul(WINDOW).min(self.len.load(Relaxed));
        if self.wanted.fetch_max(upto, Relaxed) < upto {
            wake();
        }
    }

    /// The file ends at `len` now (its staging ring was cut off): never populate past it.
    pub fn shrink(&self, len: u64) {
        self.len.fetch_min(len, Release);
    }

    /// Called by the writer before it unmaps: waits out a populate in progress.
    pub fn retire(&self) {
        self.alive.store(false, SeqCst);
        while self.busy.load(SeqCst) {
            std::thread::yield_now();
        }
    }
}

/// A spin lock (not a Mutex) so a fork()ed child can reset it.
static LOCK: AtomicBool = AtomicBool::new(false);
static mut REGIONS: Vec<Arc<Region>> = Vec::new();
static GENERATION: AtomicU32 = AtomicU32::new(0);
static STARTED: AtomicBool = AtomicBool::new(false);
/// Set while the helper waits on its futex, so writers make the wake system call only then.
static SLEEPING: AtomicBool = AtomicBool::new(false);
/// The helper's pthread_t (0: none in this process), for its CPU clock.
static HELPER: AtomicU64 = AtomicU64::new(0);
/// Staging slots the helper copied out.
static HELPER_COPIES: AtomicU64 = AtomicU64::new(0);

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

fn with_regions<R>(f: impl FnOnce(&mut Vec<Arc<Region>>) -> R) -> R {
    while LOCK.compare_exchange_weak(false, true, Acquire, Relaxed).is_err() {
        std::thread::yield_now();
    }
    // SAFETY: REGIONS is only touched with LOCK held.
    let r = f(unsafe { &mut *std::ptr::addr_of_mut!(REGIONS) });
    LOCK.store(false, Release);
    r
}

pub fn register(base: *mut u8, len: u64, already: u64, stage: Option<Stage>) -> Arc<Region> {
    let region = Arc::new(Region {
        base: base as usize,
        len: AtomicU64::new(len),
        populated: AtomicU64::new(already),
        wanted: AtomicU64::new(already),
        alive: AtomicBool::new(true),
        busy: AtomicBool::new(false),
        stage,
    });
    with_regions(|regions| regions.push(region.clone()));
    region
}

/// Starts the helper once per process. Called by a new thread after its chunk exists and
/// outside every recorder lock: pthread_create may be wrapped by the preload library, which
/// records, which must not find a recorder lock held.
pub fn start_helper() {
    if STARTED.load(Acquire) || STARTED.swap(true, AcqRel) {
        return;
    }
    match std::thread::Builder::new().name("oslens-prefault".into()).spawn(helper_loop) {
        Ok(handle) => {
            use std::os::unix::thread::JoinHandleExt;
            HELPER.store(handle.into_pthread_t() as u64, Release);
        }
        // Writers populate their own windows and copy their own slots then.
        Err(_) => STARTED.store(false, Release),
    }
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

fn helper_loop() {
    // The helper's own records would be noise: it never records (its thread state stays empty).
    crate::thread::mark_helper_thread();
    loop {
        let seen = GENERATION.load(Acquire);
        let work: Vec<Arc<Region>> = with_regions(|regions| {
            regions.retain(|r| r.alive.load(Relaxed));
            regions.clone()
        });
        for r in work {
            if let Some(stage) = r.stage {
                r.busy.store(true, SeqCst);
                if r.alive.load(SeqCst) {
                    HELPER_COPIES.fetch_add(stage.copy_full_slots(), Relaxed);
                }
                r.busy.store(false, SeqCst);
                continue;
            }
            while r.populated.load(Acquire) < r.wanted.load(Relaxed) {
                r.busy.store(true, SeqCst);
                if !r.alive.load(SeqCst) {
                    r.busy.store(false, SeqCst);
                    break;
                }
                r.populate_step();
                r.busy.store(false, SeqCst);
            }
        }
        SLEEPING.store(true, SeqCst);
        if GENERATION.load(SeqCst) == seen {
            // SAFETY: futex wait on a static word, woken by `wake`.
            unsafe { libc::syscall(libc::SYS_futex, GENERATION.as_ptr(), libc::FUTEX_WAIT | libc::FUTEX_PRIVATE_FLAG, seen, std::ptr::null::<libc::timespec>()) };
        }
        SLEEPING.store(false, SeqCst);
    }
}

/// In a fork()ed child the helper does not exist and the parent's regions are not ours.
pub fn forget_after_fork() {
    LOCK.store(false, Release);
    // The parent's regions are dropped without being freed: their Arcs may be mid-use there.
    // Their chunk files' descriptors are the child's copies, closed here.
    with_regions(|regions| {
        for r in regions.iter() {
            if let Some(stage) = r.stage {
                stage.close_file(None);
            }
        }
        std::mem::forget(std::mem::take(regions))
    });
    STARTED.store(false, Release);
    SLEEPING.store(false, Release);
    HELPER.store(0, Release);
    HELPER_COPIES.store(0, Release);
}
