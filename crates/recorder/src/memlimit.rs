//! The memory a recording may hold resident: a stated fraction of the headroom the program's
//! memory cgroup has left when recording starts (the nearest limited ancestor: cgroup v1
//! `memory.limit_in_bytes` - `memory.usage_in_bytes`, v2 `memory.max` - `memory.current`), so
//! the trace's pages, which are charged to the program's cgroup, never push it into the OOM
//! killer (issue 20, docs/recorder.md "Faults"). Buffers draw on the budget as threads start
//! and give it back when they end; see `buffer_records`.

use crate::config::Path;
use std::ffi::CStr;
use std::sync::atomic::{AtomicU64, Ordering::*};

/// The share of the cgroup's headroom the recording may keep resident (1/4).
pub const HEADROOM_SHARE_DIV: u64 = 4;
/// Limits at or above this are "no limit" (v1 writes PAGE_COUNTER_MAX pages as ~2^63).
const UNLIMITED: u64 = 1 << 60;

/// Bytes of the budget left (u64::MAX: no memory limit).
static BUDGET_LEFT: AtomicU64 = AtomicU64::new(u64::MAX);

/// (limit, usage, cgroup directory) of the nearest limited memory cgroup of this process; None
/// without a limit (or without cgroups).
pub fn nearest_limit() -> Option<(u64, u64, String)> {
    nearest_under("").map(|(limit, usage, dir)| (limit, usage, dir.as_str().to_string()))
}

/// As `nearest_limit`, with /proc and /sys read under `root` (a fake machine's tree, for tests of
/// a cgroup layout this machine lacks: v2 with the memory controller).
pub fn nearest_limit_under(root: &str) -> Option<(u64, u64, String)> {
    nearest_under(root).map(|(limit, usage, dir)| (limit, usage, dir.as_str().to_string()))
}

/// As `nearest_limit`, allocating nothing: it runs at library load, when the program may have
/// no memory to spare (files read into the stack, paths built in place).
fn nearest_under(root: &str) -> Option<(u64, u64, Path)> {
    let mut buf = [0u8; 8192];
    let cgroups = read_small(Path::join(&[root, "/proc/self/cgroup"])?.as_cstr(), &mut buf)?;
    let (v1, v2) = (Path::join(&[root, "/sys/fs/cgroup/memory"])?, Path::join(&[root, "/sys/fs/cgroup"])?);
    let v2_hybrid = Path::join(&[root, "/sys/fs/cgroup/unified"])?;
    let mut best: Option<(u64, u64, Path)> = None;
    for line in cgroups.lines() {
        let mut parts = line.splitn(3, ':');
        let (_, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let found = if controllers.split(',').any(|c| c == "memory") {
            walk_up(v1.as_str(), path, "memory.limit_in_bytes", "memory.usage_in_bytes")
        } else if controllers.is_empty() {
            walk_up(v2.as_str(), path, "memory.max", "memory.current")
                .or_else(|| walk_up(v2_hybrid.as_str(), path, "memory.max", "memory.current"))
        } else {
            None
        };
        if let Some(f) = found {
            if best.as_ref().is_none_or(|b| f.0.saturating_sub(f.1) < b.0.saturating_sub(b.1)) {
                best = Some(f);
            }
        }
    }
    best
}

/// The start of a small file (a /proc or cgroup file), read into `buf`.
fn read_small<'a>(path: &CStr, buf: &'a mut [u8]) -> Option<&'a str> {
    // SAFETY: a NUL-terminated path; reads into the buffer's length; the descriptor is closed.
    let n = unsafe {
        let fd = libc::open(path.as_ptr(), libc::O_RDONLY | libc::O_CLOEXEC);
        if fd < 0 {
            return None;
        }
        let mut n = 0;
        while n < buf.len() {
            let r = libc::read(fd, buf[n..].as_mut_ptr() as *mut libc::c_void, buf.len() - n);
            if r <= 0 {
                break;
            }
            n += r as usize;
        }
        libc::close(fd);
        n
    };
    std::str::from_utf8(&buf[..n]).ok()
}

/// One number of a cgroup file ("max": u64::MAX).
fn read_number(dir: &Path, file: &str) -> Option<u64> {
    let path = Path::join(&[dir.as_str(), "/", file])?;
    let mut buf = [0u8; 64];
    let text = read_small(path.as_cstr(), &mut buf)?.trim();
    Some(if text == "max" { u64::MAX } else { text.parse().unwrap_or(u64::MAX) })
}

/// The limited cgroup with the least headroom among `path` and its ancestors under `root`.
fn walk_up(root: &str, path: &str, limit_file: &str, usage_file: &str) -> Option<(u64, u64, Path)> {
    let mut dir = Path::join(&[root, path.trim_end_matches('/')])?;
    let mut best: Option<(u64, u64, Path)> = None;
    loop {
        if let (Some(limit), Some(usage)) = (read_number(&dir, limit_file), read_number(&dir, usage_file)) {
            let usage = if usage == u64::MAX { 0 } else { usage };
            if limit < UNLIMITED && best.as_ref().is_none_or(|b| limit.saturating_sub(usage) < b.0.saturating_sub(b.1)) {
                best = Some((limit, usage, Path::join(&[dir.as_str()])?));
            }
        }
        if dir.as_str().len() <= root.len() {
            return best;
        }
        match dir.as_str().rfind('/') {
            Some(i) if i >= root.len() => dir.truncate(i),
            _ => return best,
        }
    }
}

/// Sets the budget from the cgroup's headroom now (at library load).
pub fn init() {
    if let Some((limit, usage, _)) = nearest_under("") {
        BUDGET_LEFT.store(limit.saturating_sub(usage) / HEADROOM_SHARE_DIV, Relaxed);
    }
}

/// The budget left (u64::MAX: unlimited).
pub fn budget_left() -> u64 {
    BUDGET_LEFT.load(Relaxed)
}

/// Takes `bytes` of resident memory from the budget; false when they do not fit.
pub fn take(bytes: u64) -> bool {
    let mut left = BUDGET_LEFT.load(Relaxed);
    loop {
        if left == u64::MAX {
            return true;
        }
        if left < bytes {
            return false;
        }
        match BUDGET_LEFT.compare_exchange_weak(left, left - bytes, Relaxed, Relaxed) {
            Ok(_) => return true,
            Err(now) => left = now,
        }
    }
}

/// Gives back what `take` took (a chunk closed).
pub fn give_back(bytes: u64) {
    let _ = BUDGET_LEFT.fetch_update(Relaxed, Relaxed, |left| (left != u64::MAX).then(|| left.saturating_add(bytes)));
}

/// A thread buffer's records and the resident bytes it takes from the budget, for a buffer of
/// `wanted` records. Only where every recorded page stays resident (`resident_whole`: a trace on
/// tmpfs, or a prepared buffer) does the buffer count: a trace on disk keeps its staging ring
/// and the windows not yet written back (writeback.rs), whatever its size. An explicit size
/// (`--buffer-mb`) is kept even when it does not fit; otherwise a buffer is shrunk to half the
/// budget left (so later threads get some), never below `min`. None: not even that fits (the
/// thread records nothing: counted, as a fault is).
pub fn buffer_records(wanted: u64, min: u64, record_bytes: u64, resident_whole: bool, explicit: bool) -> Option<(u64, u64)> {
    let left = budget_left();
    if !resident_whole || explicit || left == u64::MAX {
        return Some((wanted, 0));
    }
    let records = wanted.min(left / 2 / record_bytes);
    if records < min {
        return None;
    }
    take(records * record_bytes).then_some((records, records * record_bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn walks_up_to_the_nearest_limited_ancestor() {
        let root = std::env::temp_dir().join(format!("oslens-memlimit-{}", std::process::id()));
        let leaf = root.join("a/b");
        std::fs::create_dir_all(&leaf).unwrap();
        let put = |dir: &std::path::Path, limit: &str, usage: &str| {
            std::fs::write(dir.join("memory.max"), limit).unwrap();
            std::fs::write(dir.join("memory.current"), usage).unwrap();
        };
        put(&root, "max", "1000");
        put(&root.join("a"), "134217728\n", "34217728\n");
        put(&leaf, "max\n", "5\n");
        let got = walk_up(root.to_str().unwrap(), "/a/b", "memory.max", "memory.current").unwrap();
        assert_eq!((got.0, got.1), (134217728, 34217728));
        assert!(got.2.as_str().ends_with("/a"));
        put(&leaf, "9223372036854771712", "5"); // v1's "unlimited"
        assert_eq!(walk_up(root.to_str().unwrap(), "/a/b", "memory.max", "memory.current").unwrap().0, 134217728);
        std::fs::remove_dir_all(&root).unwrap();
    }

    #[test]
    fn buffers_fit_half_the_budget_left_unless_the_size_was_given() {
        BUDGET_LEFT.store(10 << 20, Relaxed);
        // a resident buffer of 64 MiB is shrunk to 5 MiB (half of 10)
        assert_eq!(buffer_records(2 << 20, 1024, 32, true, false), Some((160 << 10, 5 << 20)));
        assert_eq!(budget_left(), 5 << 20);
        // an explicit size is kept, and takes nothing; nor does a buffer on disk (written behind)
        assert_eq!(buffer_records(2 << 20, 1024, 32, true, true), Some((2 << 20, 0)));
        assert_eq!(buffer_records(2 << 20, 1024, 32, false, false), Some((2 << 20, 0)));
        // shrunk until not even the minimum fits
        BUDGET_LEFT.store(40 << 10, Relaxed);
        assert_eq!(buffer_records(2 << 20, 1024, 32, true, false), None);
        give_back(5 << 20);
        assert_eq!(budget_left(), (5 << 20) + (40 << 10));
        BUDGET_LEFT.store(u64::MAX, Relaxed);
    }
}
