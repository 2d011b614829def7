//! File space for a chunk, reserved (fallocate) before anything stores into it through the
//! mapping. A store into a hole the file system cannot back (disk full, quota) raises SIGBUS in
//! the storing thread: the program would die of its trace. So a chunk's mapped stores stay
//! below `reserved`, which the helper keeps ahead of the writer and the writer extends itself
//! on its slow path (a slot or window boundary, never per record). When a reservation fails
//! the chunk stops for good: later events are dropped and counted (header FAULT_DROPPED) and
//! the errno and time are kept in the header (docs/recorder.md, "Faults").

use oslens_format::header::offset;
use std::sync::atomic::{AtomicBool, AtomicI32, AtomicU32, AtomicU64, Ordering::*};

/// The first fault of the process (errno; 0: none): threads that start after it open no
/// chunk, and count what they would have recorded in `NO_CHUNK_DROPPED`.
static PROCESS_FAULT: AtomicU32 = AtomicU32::new(0);
static PROCESS_FAULT_NS: AtomicU64 = AtomicU64::new(0);
/// Events of threads that could get no chunk, written into the names chunk's header at exit.
static NO_CHUNK_DROPPED: AtomicU64 = AtomicU64::new(0);

/// How far ahead of a thread's writer file space is reserved (the helper tops it up every
/// time it wakes, ~every 256 KiB of records, so the writer rarely reserves itself), and of a
/// names chunk's.
pub const THREAD_AHEAD: u64 = 1 << 20;
pub const NAMES_AHEAD: u64 = 64 << 10;

pub fn process_fault() -> u32 {
    PROCESS_FAULT.load(Relaxed)
}

/// Notes the first fault of the process.
pub fn note_process_fault(errno: u32) {
    if PROCESS_FAULT.compare_exchange(0, errno, Relaxed, Relaxed).is_ok() {
        PROCESS_FAULT_NS.store(monotonic_ns(), Relaxed);
    }
}

/// Why threads got no chunk when it was not a fault of the file system (the memory budget).
static NO_CHUNK_REASON: AtomicU32 = AtomicU32::new(0);

pub fn count_no_chunk_drop() {
    NO_CHUNK_DROPPED.fetch_add(1, Relaxed);
}

/// Notes why a thread got no chunk, where no file-system fault says so.
pub fn note_no_chunk_reason(errno: u32) {
    let _ = NO_CHUNK_REASON.compare_exchange(0, errno, Relaxed, Relaxed);
    let _ = PROCESS_FAULT_NS.compare_exchange(0, monotonic_ns(), Relaxed, Relaxed);
}

/// (errno, ns, events) of the process's threads that had no chunk to record into.
pub fn no_chunk_drops() -> (u32, u64, u64) {
    let errno = match PROCESS_FAULT.load(Relaxed) {
        0 => NO_CHUNK_REASON.load(Relaxed),
        e => e,
    };
    (errno, PROCESS_FAULT_NS.load(Relaxed), NO_CHUNK_DROPPED.load(Relaxed))
}

/// A fork()ed child starts with a clean slate (its own chunks, its own counts).
pub fn forget_after_fork() {
    PROCESS_FAULT.store(0, Relaxed);
    PROCESS_FAULT_NS.store(0, Relaxed);
    NO_CHUNK_REASON.store(0, Relaxed);
    NO_CHUNK_DROPPED.store(0, Relaxed);
}

pub fn monotonic_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: a plain out-parameter.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

/// The errno of the last failed call.
fn last_errno() -> u32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO) as u32
}

pub struct Space {
    /// The chunk file (a high descriptor, close-on-exec; -1 once closed). Used only while it
    /// still names the chunk file (`file`), in case the program closed it and reused the number.
    fd: AtomicI32,
    file: (u64, u64),
    /// The chunk's header page (mapped, and backed: it was written with pwrite).
    header: usize,
    /// Bytes from the start of the file known to be backed.
    reserved: AtomicU64,
    /// The records' end in the file: reservations never go past it. A chunk that starts small
    /// (growth.rs) has it at its first length until extended, so a thread or process that
    /// records little reserves (and at exit frees) no more than its small file.
    end: AtomicU64,
    /// How far past what is asked for a reservation goes (fewer, larger fallocate calls).
    ahead: AtomicU64,
    /// Held while reserving, so the zero-writing fallback never overwrites a record.
    reserving: AtomicBool,
    errno: AtomicU32,
}

// SAFETY: `header` points into a mapping that outlives every user (the chunk's); its fields
// are written with atomics or by the chunk's one writer.
unsafe impl Send for Space {}
unsafe impl Sync for Space {}

/// The lowest descriptor number a chunk file is moved to, out of the way of programs that
/// expect low ones free.
const HIGH_FD: i32 = 512;

/// Grows the process's descriptor table past `HIGH_FD` while the process is single-threaded
/// (at load, in a fork()ed child): growing a table that threads share waits for an RCU grace
/// period in uninterruptible sleep, 11-17 ms on this VM, which the first chunk made after the
/// program started a thread used to pay and the report showed as the program's I/O wait
/// (docs/recorder.md, "Start-up"). A grown table is never shrunk, so later moves are free.
pub fn presize_fd_table() {
    // SAFETY: a descriptor of the standard three duplicated and closed at once; none open: nothing.
    for fd in 0..3 {
        let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, HIGH_FD) };
        if high >= 0 {
            unsafe { libc::close(high) };
            return;
        }
    }
}

impl Space {
    /// Takes `fd` (moved to a high number, out of the way of programs that expect low ones
    /// free); `backed`: bytes already written (the header); `end`: the records' end.
    pub fn new(fd: i32, header: *mut u8, backed: u64, end: u64, ahead: u64) -> Space {
        // SAFETY: plain fcntl/close on our own descriptor.
        let high = unsafe { libc::fcntl(fd, libc::F_DUPFD_CLOEXEC, HIGH_FD) };
        let fd = if high >= 0 {
            unsafe { libc::close(fd) };
            high
        } else {
            fd // a descriptor limit under 512: the low one then
        };
        let file = identity(fd).unwrap_or((0, 0));
        Space { fd: AtomicI32::new(fd), file, header: header as usize, reserved: AtomicU64::new(backed), end: AtomicU64::new(end), ahead: AtomicU64::new(ahead), reserving: AtomicBool::new(false), errno: AtomicU32::new(0) }
    }

    /// The chunk file's descriptor while it is still ours; -1 otherwise.
    pub fn fd(&self) -> i32 {
        let fd = self.fd.load(Relaxed);
        if fd >= 0 && identity(fd) == Some(self.file) {
            fd
        } else {
            -1
        }
    }

    pub fn close_fd(&self) {
        let fd = self.fd.swap(-1, Relaxed);
        if fd >= 0 && identity(fd) == Some(self.file) {
            // SAFETY: our own descriptor (checked).
            unsafe { libc::close(fd) };
        }
    }

    /// True when file bytes below `end` are backed.
    #[inline]
    pub fn covers(&self, end: u64) -> bool {
        self.reserved.load(Acquire) >= end
    }

    /// Bytes backed so far.
    pub fn reserved(&self) -> u64 {
        self.reserved.load(Acquire)
    }

    pub fn faulted(&self) -> bool {
        self.errno.load(Relaxed) != 0
    }

    /// Makes sure the bytes below `need` are backed, reserving `ahead` more while at it;
    /// false (and the chunk stopped) when the file system refused.
    pub fn reserve(&self, need: u64) -> bool {
        let end = self.end.load(Acquire);
        let need = need.min(end);
        if self.covers(need) {
            return true;
        }
        loop {
            if self.faulted() {
                return false;
            }
            if self.reserving.compare_exchange(false, true, Acquire, Relaxed).is_ok() {
                break;
            }
            // Another thread (the helper) is reserving: its window will likely cover this one.
            std::thread::yield_now();
            if self.covers(need) {
                return true;
            }
        }
        let from = self.reserved.load(Relaxed);
        let to = if from >= need { from } else { (need + self.ahead.load(Relaxed)).next_multiple_of(4096).min(end) };
        let ok = from >= to || match self.allocate(from, to - from) {
            Ok(()) => true,
            Err(e) => {
                self.stop(e);
                false
            }
        };
        if ok {
            self.reserved.fetch_max(to, Release);
        }
        self.reserving.store(false, Release);
        ok
    }

    /// Backs one range outside the records (the staging ring) at creation.
    pub fn reserve_range(&self, at: u64, len: u64) -> bool {
        match self.allocate(at, len) {
            Ok(()) => true,
            Err(e) => {
                self.stop(e);
                false
            }
        }
    }

    /// Lets reservations go up to `end`, `ahead` at a time (a growing chunk's file was extended).
    pub fn extend_to(&self, end: u64, ahead: u64) {
        self.ahead.store(ahead, Relaxed);
        self.end.fetch_max(end, Release);
    }

    /// Forgets what lies past `to` (holes punched there again).
    pub fn shrink_to(&self, to: u64) {
        self.reserved.fetch_min(to, Release);
    }

    /// fallocate, or where the file system has none, zeros written (nothing is stored in
    /// unreserved bytes, so the zeros overwrite nothing).
    fn allocate(&self, at: u64, len: u64) -> Result<(), u32> {
        let fd = self.fd();
        if fd < 0 {
            return Err(libc::EBADF as u32);
        }
        if !leaves_margin(fd, len) {
            return Err(libc::ENOSPC as u32);
        }
        loop {
            // SAFETY: plain fallocate inside the file's size on our own descriptor.
            // KEEP_SIZE: a chunk that starts small (growth) keeps its length; it is extended later
            if unsafe { libc::fallocate(fd, libc::FALLOC_FL_KEEP_SIZE, at as libc::off_t, len as libc::off_t) } == 0 {
                return Ok(());
            }
            match last_errno() as i32 {
                libc::EINTR => continue,
                libc::EOPNOTSUPP => return write_zeros(fd, at, len),
                e => return Err(e as u32),
            }
        }
    }

    /// Stops the chunk: keeps the first errno and its time in the header.
    pub fn stop(&self, errno: u32) {
        let errno = errno.max(1);
        if self.errno.compare_exchange(0, errno, Relaxed, Relaxed).is_ok() {
            // SAFETY: aligned fields inside the header page, which is backed.
            unsafe {
                (*((self.header + offset::FAULT_NS) as *const AtomicU64)).store(monotonic_ns(), Relaxed);
                (*((self.header + offset::FAULT_ERRNO) as *const AtomicU32)).store(errno, Release);
            }
            note_process_fault(errno);
        }
    }

    /// Counts an event not kept because the chunk stopped (the writer's call only).
    pub fn count_dropped(&self) {
        // SAFETY: as in `stop`.
        let c = unsafe { &*((self.header + offset::FAULT_DROPPED) as *const AtomicU64) };
        c.store(c.load(Relaxed) + 1, Relaxed);
    }
}

/// True when `len` more bytes leave the file system its margin (oslens_format::space).
/// Unknown (statfs failed): true.
pub fn leaves_margin(fd: i32, len: u64) -> bool {
    // SAFETY: fstatfs fills the struct.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::fstatfs(fd, &mut st) } != 0 {
        return true;
    }
    let bsize = st.f_bsize as u64;
    oslens_format::space::may_reserve(st.f_blocks as u64 * bsize, st.f_bavail as u64 * bsize, len)
}

/// Writes zeros over `len` bytes at `at` (file systems without fallocate).
fn write_zeros(fd: i32, mut at: u64, len: u64) -> Result<(), u32> {
    let end = at + len;
    static ZEROS: [u8; 65536] = [0; 65536];
    let zeros = &ZEROS;
    while at < end {
        let n = ((end - at) as usize).min(zeros.len());
        // SAFETY: a static buffer of at least n bytes.
        let w = unsafe { libc::pwrite(fd, zeros.as_ptr() as *const libc::c_void, n, at as libc::off_t) };
        if w < 0 {
            let e = last_errno();
            if e == libc::EINTR as u32 {
                continue;
            }
            return Err(e);
        }
        if w == 0 {
            return Err(libc::ENOSPC as u32);
        }
        at += w as u64;
    }
    Ok(())
}

/// (st_dev, st_ino) of an open descriptor.
pub fn identity(fd: i32) -> Option<(u64, u64)> {
    if fd < 0 {
        return None;
    }
    // SAFETY: fstat fills the struct.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some((st.st_dev, st.st_ino))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn space_on(path: &std::path::Path, len: u64, header: &mut [u8]) -> Space {
        let f = std::fs::OpenOptions::new().create(true).read(true).write(true).open(path).unwrap();
        f.set_len(len).unwrap();
        use std::os::fd::IntoRawFd;
        Space::new(f.into_raw_fd(), header.as_mut_ptr(), 4096, len, 8192)
    }

    #[test]
    fn reserves_ahead_and_never_past_the_end() {
        let dir = std::env::temp_dir().join(format!("oslens-space-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut header = vec![0u8; 4096];
        let s = space_on(&dir.join("a"), 40_000, &mut header);
        assert!(s.covers(4096) && !s.covers(4097));
        assert!(s.reserve(5000));
        assert_eq!(s.reserved(), 16384); // 5000 + 8192 ahead, page-rounded
        assert!(s.reserve(39_000));
        assert_eq!(s.reserved(), 40_000);
        assert!(!s.faulted());
        s.close_fd();
        assert!(!s.reserve(40_001) || s.covers(40_000)); // clamped to the end: nothing to do
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_reservation_stops_the_chunk_and_says_why() {
        let dir = std::env::temp_dir().join(format!("oslens-space-b-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let mut header = vec![0u8; 4096];
        let s = space_on(&dir.join("b"), 1 << 20, &mut header);
        s.close_fd(); // every later reservation fails (EBADF)
        assert!(!s.reserve(10_000));
        assert!(s.faulted());
        s.count_dropped();
        s.count_dropped();
        let h = |o: usize| u64::from_le_bytes(header[o..o + 8].try_into().unwrap());
        assert_eq!(h(offset::FAULT_ERRNO) as u32, libc::EBADF as u32);
        assert!(h(offset::FAULT_NS) > 0);
        assert_eq!(h(offset::FAULT_DROPPED), 2);
        assert!(!s.reserve(10_000), "a stopped chunk stays stopped");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
