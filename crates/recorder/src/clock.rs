//! The recorder's clock: the invariant TSC where the CPU has one (read in user space, no system call),
//! else the vDSO CLOCK_MONOTONIC. Raw values are converted to CLOCK_MONOTONIC ns at import from
//! calibration pairs (raw, ns) written into every chunk.
//!
//! Which of the two is decided on the first clock read, not at library load: the check is two
//! CPUID instructions, which a VM traps (5-7 µs each here), and a process started under
//! `oslens record` that records nothing (a `/bin/true` under the preload) never needs it.

use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, Ordering::Relaxed};

/// The clock source: UNDECIDED until the first read, then TSC or MONOTONIC for good.
const UNDECIDED: u8 = 0;
const TSC: u8 = 1;
const MONOTONIC: u8 = 2;
static SOURCE: AtomicU8 = AtomicU8::new(UNDECIDED);
static HAVE_RSEQ: AtomicBool = AtomicBool::new(false);
static CALIB_RAW: AtomicU64 = AtomicU64::new(0);
static CALIB_NS: AtomicU64 = AtomicU64::new(0);

extern "C" {
    // glibc >= 2.35 registers rseq for every thread; cpu_id is kept current by the kernel.
    static __rseq_offset: isize;
    static __rseq_size: u32;
}

/// At library load: only what costs a load (the clock itself is decided on its first read).
pub fn init() {
    // SAFETY: plain reads of glibc's exported constants.
    HAVE_RSEQ.store(unsafe { __rseq_size } >= 8, Relaxed);
}

/// True when the clock is the TSC; decides it on the first call.
#[inline(always)]
fn use_tsc() -> bool {
    match SOURCE.load(Relaxed) {
        TSC => true,
        MONOTONIC => false,
        _ => decide(),
    }
}

/// Decides the clock once per process image (a fork()ed child inherits the decision), and takes
/// the calibration pair `ticks_to_ns` starts from. Lock-free, not a `Once`: a child forked while
/// another thread decided would wait on that `Once` forever; threads racing here decide alike.
#[cold]
#[inline(never)]
fn decide() -> bool {
    let tsc = crate::config::env(c"OSLENS_CLOCK") != Some("monotonic") && tsc_is_invariant_here();
    // stored before `pair`, which reads the clock
    if SOURCE.compare_exchange(UNDECIDED, if tsc { TSC } else { MONOTONIC }, Relaxed, Relaxed).is_ok() {
        let (raw, ns) = pair();
        CALIB_RAW.store(raw, Relaxed);
        CALIB_NS.store(ns, Relaxed);
    }
    SOURCE.load(Relaxed) == TSC
}

pub fn clock_kind() -> u32 {
    if use_tsc() {
        oslens_format::header::CLOCK_TSC
    } else {
        oslens_format::header::CLOCK_MONOTONIC_NS
    }
}

/// The answer `oslens record` put in OSLENS_TSC_INVARIANT (its own CPUID check, on this machine,
/// inherited through every exec), else the CPU's.
fn tsc_is_invariant_here() -> bool {
    match crate::config::env(c"OSLENS_TSC_INVARIANT") {
        Some("1") => cfg!(target_arch = "x86_64"),
        Some("0") => false,
        _ => tsc_is_invariant(),
    }
}

/// CPUID's invariant-TSC bit (a VM traps each CPUID: microseconds).
pub fn tsc_is_invariant() -> bool {
    #[cfg(target_arch = "x86_64")]
    {
        // CPUID 0x80000007 EDX bit 8: invariant TSC (constant rate, runs in deep C-states).
        let max_ext = core::arch::x86_64::__cpuid(0x8000_0000).eax;
        if max_ext < 0x8000_0007 {
            return false;
        }
        (core::arch::x86_64::__cpuid(0x8000_0007).edx >> 8) & 1 == 1
    }
    #[cfg(not(target_arch = "x86_64"))]
    {
        false
    }
}

#[inline(always)]
pub fn now() -> u64 {
    #[cfg(target_arch = "x86_64")]
    if use_tsc() {
        // SAFETY: rdtsc has no preconditions.
        return unsafe { core::arch::x86_64::_rdtsc() };
    }
    monotonic_ns()
}

pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer to a timespec.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// A calibration pair: the raw clock and CLOCK_MONOTONIC read back to back (the tighter of
/// three tries, so a preemption between the two reads does not skew it).
pub fn pair() -> (u64, u64) {
    let mut best = (0, 0, u64::MAX);
    for _ in 0..3 {
        let r0 = now();
        let ns = monotonic_ns();
        let r1 = now();
        if r1.wrapping_sub(r0) < best.2 {
            best = (r0 / 2 + r1 / 2, ns, r1.wrapping_sub(r0));
        }
    }
    (best.0, best.1)
}

/// Converts a raw tick count to ns using the pair taken when the clock was decided and a fresh one.
pub fn ticks_to_ns(ticks: u64) -> u64 {
    if !use_tsc() {
        return ticks;
    }
    let (raw0, ns0) = (CALIB_RAW.load(Relaxed), CALIB_NS.load(Relaxed));
    let (mut raw1, mut ns1) = pair();
    if ns1.saturating_sub(ns0) < 5_000_000 {
        std::thread::sleep(std::time::Duration::from_millis(5));
        (raw1, ns1) = pair();
    }
    let rate = (ns1 - ns0) as f64 / raw1.saturating_sub(raw0).max(1) as f64;
    (ticks as f64 * rate) as u64
}

/// True when code inlined from oslens.h may read the clock itself (it reads the TSC only).
pub fn inline_capable() -> bool {
    use_tsc() && HAVE_RSEQ.load(Relaxed)
}

/// The address of the calling thread's rseq cpu_id, which the kernel keeps current; null
/// without rseq.
pub fn cpu_id_ptr() -> *const u32 {
    #[cfg(target_arch = "x86_64")]
    if HAVE_RSEQ.load(Relaxed) {
        let tp: usize;
        // SAFETY: as in `cpu`.
        unsafe {
            core::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags));
            return ((tp as isize + __rseq_offset) as *const u32).add(1);
        }
    }
    std::ptr::null()
}

/// The CPU the calling thread runs on: rseq's cpu_id (one load) or sched_getcpu.
#[inline(always)]
pub fn cpu() -> u16 {
    #[cfg(target_arch = "x86_64")]
    if HAVE_RSEQ.load(Relaxed) {
        let tp: usize;
        // SAFETY: fs:0 holds the thread pointer on x86_64 Linux; glibc places each thread's
        // struct rseq at tp + __rseq_offset, and cpu_id is its second u32.
        unsafe {
            core::arch::asm!("mov {}, fs:0", out(reg) tp, options(nostack, readonly, preserves_flags));
            let rseq = (tp as isize + __rseq_offset) as *const u32;
            return core::ptr::read_volatile(rseq.add(1)) as u16;
        }
    }
    // SAFETY: no preconditions.
    unsafe { libc::sched_getcpu() as u16 }
}
