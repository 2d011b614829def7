//! Chunk files taken from a pool of empty files that `oslens record` keeps ready in
//! `TRACE/spare/` (python/oslens/capture/spares.py), so that a thread's or process's first
//! chunk costs a rename and an open of an existing file instead of a new inode: ext4 without a
//! journal scans every inode deleted in the last 30 s of a group (`recently_deleted`) to
//! allocate one, which on a busy machine costs far more. Figures: docs/recorder.md, "Start-up".
//!
//! `TRACE/spare/next` holds one shared u64: the next spare's number. A writer takes a number
//! with one atomic add on that (shared, mapped) word and renames `spare/<n>` to its chunk's
//! name (RENAME_NOREPLACE: an exec'd image reusing a pid/tid takes the next sequence number);
//! when that spare is not there (no pool: another tool's trace, the pool ran dry) it creates
//! the file itself, as before. The file's name is the chunk's as before, so readers see no
//! difference.

use std::ffi::{CStr, CString};
use std::sync::atomic::{AtomicPtr, AtomicU64, Ordering};

/// The mapped counter; null: not looked up in this image yet; `NO_POOL`: the trace has none.
static NEXT: AtomicPtr<AtomicU64> = AtomicPtr::new(std::ptr::null_mut());
const NO_POOL: *mut AtomicU64 = 1 as *mut AtomicU64;

fn spare_dir() -> Option<String> {
    let cfg = crate::config()?;
    Some(format!("{}/spare", cfg.trace_dir.as_str()))
}

/// The shared counter, mapped once per process image (a fork()ed child shares its parent's).
fn counter() -> Option<&'static AtomicU64> {
    let mut p = NEXT.load(Ordering::Acquire);
    if p.is_null() {
        p = map_counter().unwrap_or(NO_POOL);
        NEXT.store(p, Ordering::Release);
    }
    // SAFETY: a live MAP_SHARED mapping of 8 aligned bytes, never unmapped.
    (p != NO_POOL).then(|| unsafe { &*p })
}

fn map_counter() -> Option<*mut AtomicU64> {
    let path = CString::new(format!("{}/next", spare_dir()?)).ok()?;
    // SAFETY: valid C string; the descriptor is closed once mapped.
    unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let p = libc::mmap(std::ptr::null_mut(), 8, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
        let len = libc::lseek(fd, 0, libc::SEEK_END);
        libc::close(fd);
        if p == libc::MAP_FAILED || len < 8 {
            if p != libc::MAP_FAILED {
                libc::munmap(p, 8);
            }
            return None;
        }
        Some(p as *mut AtomicU64)
    }
}

/// A spare taken for one chunk file: its number, and the path it has until renamed.
pub struct Spare(CString);

/// Takes the next spare's number (one atomic add), or None when the trace keeps no pool.
pub fn take() -> Option<Spare> {
    let n = counter()?.fetch_add(1, Ordering::Relaxed);
    Some(Spare(CString::new(format!("{}/{n}", spare_dir()?)).ok()?))
}

pub enum Claim {
    /// Renamed to `target` and opened: the descriptor.
    Opened(i32),
    /// `target` exists: try the next sequence number with the same spare.
    Exists,
    /// The spare is not there (or cannot be used): create the file as without a pool.
    Missing,
}

impl Spare {
    pub fn claim(&self, target: &CStr) -> Claim {
        // SAFETY: valid C strings.
        let r = unsafe { libc::renameat2(libc::AT_FDCWD, self.0.as_ptr(), libc::AT_FDCWD, target.as_ptr(), libc::RENAME_NOREPLACE) };
        if r != 0 {
            let e = std::io::Error::last_os_error().raw_os_error();
            return if e == Some(libc::EEXIST) { Claim::Exists } else { Claim::Missing };
        }
        // SAFETY: valid C string; the file is ours now (nobody else knows its new name yet).
        let fd = unsafe { libc::open(target.as_ptr(), libc::O_RDWR | libc::O_CLOEXEC) };
        if fd < 0 {
            // SAFETY: valid C string: the empty file we just named.
            unsafe { libc::unlink(target.as_ptr()) };
            return Claim::Missing;
        }
        Claim::Opened(fd)
    }
}
