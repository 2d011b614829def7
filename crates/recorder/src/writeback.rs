//! Write-behind for a thread's chunk: as the helper copies slots out, the records' pages are
//! dirty page cache charged to the program's memory cgroup. Under a cgroup v1 memory limit the
//! kernel does not throttle them per cgroup, and reclaim cannot write them back itself, so a
//! busy recording was OOM-killed (issue 20). So once a window of records is in the file, the
//! helper starts its writeback (sync_file_range) and, a window later, drops the pages it wrote
//! back (fadvise DONTNEED): the recording's resident footprint stays the ring plus about two
//! windows however long the run. The helper never waits for the disk. Enabled where a memory
//! limit was found (memlimit.rs) or with OSLENS_WRITE_BEHIND=1; figures in docs/recorder.md.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Records are written back in windows of this many bytes.
pub const WINDOW: u64 = 1 << 20;

#[derive(Default)]
pub struct WriteBehind {
    /// Bytes of the file whose writeback was started.
    flushed: AtomicU64,
    /// Held by whoever advances (the helper, or a writer that copied slots out itself).
    busy: std::sync::atomic::AtomicBool,
}

impl WriteBehind {
    /// `in_file`: bytes from the file's start that hold records already copied out. Called by
    /// the helper after it copies, and by a writer that copied slots out itself (the helper is
    /// behind, and so would the write-behind be); whoever comes second skips.
    pub fn advance(&self, fd: i32, in_file: u64, first: u64) {
        let flushed = self.flushed.load(Relaxed).max(first);
        let to = in_file & !4095;
        if fd < 0 || to < flushed + WINDOW || self.busy.swap(true, std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let flushed = self.flushed.load(Relaxed).max(first);
        if to < flushed + WINDOW {
            self.busy.store(false, std::sync::atomic::Ordering::Release);
            return;
        }
        // SAFETY: plain system calls on the chunk's own descriptor (checked by the caller).
        unsafe {
            libc::sync_file_range(fd, flushed as libc::off_t, (to - flushed) as libc::off_t, libc::SYNC_FILE_RANGE_WRITE);
            // The windows before, whose writeback started a round ago or more. Pages still
            // dirty or under writeback are skipped by the kernel, so the last few windows are
            // asked again (dropping each window once left most of two buffers resident under
            // a cap: docs/recorder.md, "Cost", figures behind the code).
            let from = flushed.saturating_sub(RETRY_WINDOWS * WINDOW).max(first);
            if flushed > from {
                libc::posix_fadvise(fd, from as libc::off_t, (flushed - from) as libc::off_t, libc::POSIX_FADV_DONTNEED);
            }
        }
        self.flushed.store(to, Relaxed);
        self.busy.store(false, std::sync::atomic::Ordering::Release);
    }
}

/// Windows behind the last one written back that are asked to be dropped again.
const RETRY_WINDOWS: u64 = 8;

/// Whether the helper writes behind (decided once, before the process's first chunk).
static ENABLED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
/// OSLENS_WRITE_BEHIND as read at library load (0 unset, 1 "1", 2 anything else), before the
/// program can change its environment.
static FORCED: std::sync::atomic::AtomicU8 = std::sync::atomic::AtomicU8::new(0);

/// At library load: reads the setting only.
pub fn read_env() {
    let forced = crate::config::env(c"OSLENS_WRITE_BEHIND").map_or(0, |v| if v == "1" { 1 } else { 2 });
    FORCED.store(forced, Relaxed);
}

/// Before the process's first chunk, once its memory limit is known (memlimit.rs).
pub fn init(memory_limited: bool) {
    ENABLED.store(match FORCED.load(Relaxed) { 0 => memory_limited, f => f == 1 }, Relaxed);
}

pub fn enabled() -> bool {
    ENABLED.load(Relaxed)
}
