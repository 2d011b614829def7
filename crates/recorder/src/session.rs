//! Attach sessions of a dormant process (`oslens record -p`; docs/recorder.md, "Dormant
//! instruments"). Every attach that wakes the instruments starts a new session recording into
//! its own trace: threads close their chunks of the previous one and open chunks in the new one
//! on their next record (thread.rs), the names chunk is opened again (names epoch), and counters
//! keep their values. While a session records, the helper thread checks that the attacher still
//! holds its lock on `<trace>/.attach-lock` and puts the instruments back to sleep when it does
//! not (oslens was SIGKILLed), so the next attach finds them dormant.

use crate::config::Config;
use crate::{INACTIVE, NOT_TRACING, UNINIT};
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicPtr, AtomicU32, Ordering::*};

/// The file the attacher holds a shared flock on while attached (python/oslens/capture/instruments.py).
pub const LOCK_FILE: &str = "/.attach-lock";

/// The current session's number (0: none yet); threads' states carry the one they record in.
static SESSION: AtomicU32 = AtomicU32::new(0);
/// The current session's settings. Each is leaked, not freed: a thread may still hold the
/// previous one's (it is 8 KiB per attach).
static ATTACHED: AtomicPtr<Config> = AtomicPtr::new(std::ptr::null_mut());
/// Serialises a wake against another and against the helper's check (a spin lock: no Mutex
/// poisoning and nothing for a fork()ed child to reset but this word).
static LOCK: AtomicBool = AtomicBool::new(false);
/// The lock file of the session being watched (-1: none).
static WATCH_FD: AtomicI32 = AtomicI32::new(-1);

/// The attached session's settings, if an attach woke this process.
pub fn config() -> Option<&'static Config> {
    // SAFETY: set from Box::leak and never freed.
    unsafe { ATTACHED.load(Acquire).as_ref() }
}

/// The current session's number.
#[inline(always)]
pub fn current() -> u32 {
    SESSION.load(Relaxed)
}

pub fn lock() {
    while LOCK.compare_exchange_weak(false, true, Acquire, Relaxed).is_err() {
        std::thread::yield_now();
    }
}

pub fn unlock() {
    LOCK.store(false, Release);
}

/// The request oslens wrote into the buffer (None: none or not UTF-8): the trace's path, then
/// any settings (`NAME=VALUE`, config.rs ATTACH_SETTINGS), each ended by a NUL, the whole by a
/// second NUL, so a shorter request never inherits a longer earlier one's settings; a library
/// that knows no settings reads the path alone.
pub fn asked(request: &[u8; 4096]) -> Option<&str> {
    let n = request.windows(2).position(|w| w == [0, 0]).unwrap_or(0);
    std::str::from_utf8(&request[..n]).ok().filter(|p| !p.is_empty() && !p.starts_with('\0'))
}

/// Under `lock`: `cfg` becomes the current session's settings, with a new number, and the
/// attacher's lock file is watched. True when it is (the helper must then run).
pub fn begin(cfg: Config) -> bool {
    let watch = open_lock_file(&cfg);
    ATTACHED.store(Box::leak(Box::new(cfg)), Release);
    // the number first: a thread that sets its cursor's limit after this sees it (thread.rs)
    SESSION.fetch_add(1, SeqCst);
    let old = WATCH_FD.swap(watch, SeqCst);
    if old >= 0 {
        // SAFETY: our descriptor, used only under LOCK.
        unsafe { libc::close(old) };
    }
    watch >= 0
}

fn open_lock_file(cfg: &Config) -> i32 {
    let Some(path) = crate::config::Path::join(&[cfg.trace_dir.as_str(), LOCK_FILE]) else { return -1 };
    // SAFETY: a NUL-terminated path.
    unsafe { libc::open(path.as_cstr().as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC) }
}

/// True while a session is watched (the helper then wakes periodically to check it).
pub fn watching() -> bool {
    WATCH_FD.load(Relaxed) >= 0
}

/// From the helper thread: when the attacher no longer holds its lock (it detached, or was
/// killed), the instruments go dormant, as its detach would have left them.
pub fn check_attacher() {
    if !watching() {
        return;
    }
    lock();
    let fd = WATCH_FD.load(SeqCst);
    // SAFETY: our descriptor; flock with LOCK_NB does not block.
    if fd >= 0 && unsafe { libc::flock(fd, libc::LOCK_EX | libc::LOCK_NB) } == 0 {
        // a request not yet taken (UNINIT) is a new attach's: left to it
        let _ = INACTIVE.fetch_update(SeqCst, SeqCst, |w| (w & UNINIT == 0).then_some(NOT_TRACING));
        // SAFETY: as above.
        unsafe { libc::close(fd) };
        WATCH_FD.store(-1, SeqCst);
    }
    unlock();
}

/// In a fork()ed child (from helper.rs): a lock held by another thread at the fork is free. The
/// watch is kept: the descriptor shares the parent's lock, so the child goes dormant with it.
pub fn forget_after_fork() {
    LOCK.store(false, Release);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_the_path_before_its_nul() {
        let mut request = [0u8; 4096];
        assert_eq!(asked(&request), None);
        request[..7].copy_from_slice(b"/t/x\0\0o");
        assert_eq!(asked(&request), Some("/t/x"));
        let flight = b"/t/x\0OSLENS_ON_FULL=rot\0\0";
        request[..flight.len()].copy_from_slice(flight);
        assert_eq!(asked(&request), Some("/t/x\0OSLENS_ON_FULL=rot"));
        request[..2].copy_from_slice(b"\xff\0");
        assert_eq!(asked(&request), None);
    }

    #[test]
    fn a_session_without_an_attacher_is_not_watched() {
        let before = current();
        let cfg = Config::for_attach("/nonexistent/oslens-session-test").unwrap();
        lock();
        assert!(!begin(cfg));
        unlock();
        assert_eq!((current(), config().map(|c| c.trace_dir.as_str())), (before + 1, Some("/nonexistent/oslens-session-test")));
        assert!(!watching());
    }
}
