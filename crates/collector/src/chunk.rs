//! Per-CPU raw chunks: `raw/kernel-cpu<N>-<seq>.osl`, memory-mapped, `committed` updated after
//! each record so a crash of the collector loses nothing it wrote. A full chunk is closed and
//! the next sequence number opened. File space is reserved (fallocate) a window ahead of the
//! records, so a full disk never raises SIGBUS here: a reservation that fails stops the writer
//! for good, and every record after it is counted (header FAULT_DROPPED, the collector's
//! `unwritten`) with the errno and time in the header (docs/recorder.md, "Faults").

use oslens_format::header::{offset, ChunkHeader, CLOCK_MONOTONIC_NS, HEADER_SIZE, SOURCE_KERNEL_CPU};
use oslens_format::kinds;
use oslens_format::record::{continuation_record, Record, CONT_PAYLOAD, RECORD_SIZE};
use std::ffi::CString;
use std::sync::atomic::{AtomicU64, Ordering};

pub struct Writer {
    raw_dir: String,
    stem: String,
    cpu: u32,
    capacity: u64,
    seq: u32,
    cur: Option<Mapped>,
    pub records: u64,
    pub lost: u64,
    pub files: Vec<String>,
    /// The errno that stopped this writer (0: none), and the records not written since.
    fault: u32,
    pub fault_dropped: u64,
}

/// How far ahead of the records file space is reserved.
const AHEAD: u64 = 1 << 20;

struct Mapped {
    base: *mut u8,
    len: usize,
    pos: u64,
    lost: u64,
    fd: i32,
    /// Bytes of the file known to be backed.
    reserved: u64,
}

fn now_ns() -> u64 {
    let mut ts = libc::timespec { tv_sec: 0, tv_nsec: 0 };
    // SAFETY: valid pointer.
    unsafe { libc::clock_gettime(libc::CLOCK_MONOTONIC, &mut ts) };
    ts.tv_sec as u64 * 1_000_000_000 + ts.tv_nsec as u64
}

impl Mapped {
    fn u64_at(&self, off: usize) -> &AtomicU64 {
        // SAFETY: 8-byte aligned header field inside the mapping.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }
}

impl Writer {
    pub fn new(raw_dir: &str, stem: &str, cpu: u32, capacity: u64) -> Writer {
        Writer { raw_dir: raw_dir.into(), stem: stem.into(), cpu, capacity, seq: 0, cur: None, records: 0, lost: 0, files: vec![], fault: 0, fault_dropped: 0 }
    }

    /// Backs the file up to `need` bytes (and AHEAD more), leaving the file system its margin.
    fn reserve(m: &mut Mapped, need: u64) -> Result<(), i32> {
        if m.reserved >= need {
            return Ok(());
        }
        let to = (need + AHEAD).next_multiple_of(4096).min(m.len as u64);
        let len = to - m.reserved;
        // SAFETY: fstatfs fills the struct; fallocate inside the file's size on our own fd.
        unsafe {
            let mut st: libc::statfs = std::mem::zeroed();
            if libc::fstatfs(m.fd, &mut st) == 0 {
                let bsize = st.f_bsize as u64;
                if !oslens_format::space::may_reserve(st.f_blocks as u64 * bsize, st.f_bavail as u64 * bsize, len) {
                    return Err(libc::ENOSPC);
                }
            }
            loop {
                if libc::fallocate(m.fd, 0, m.reserved as libc::off_t, len as libc::off_t) == 0 {
                    break;
                }
                match std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO) {
                    libc::EINTR => continue,
                    libc::EOPNOTSUPP => return Self::write_zeros(m.fd, m.reserved, len).map(|_| m.reserved = to),
                    e => return Err(e),
                }
            }
        }
        m.reserved = to;
        Ok(())
    }

    /// Backs a range by writing zeros (file systems without fallocate; nothing is stored there yet).
    fn write_zeros(fd: i32, mut at: u64, len: u64) -> Result<(), i32> {
        static ZEROS: [u8; 65536] = [0; 65536];
        let end = at + len;
        while at < end {
            let n = ((end - at) as usize).min(ZEROS.len());
            // SAFETY: a static buffer of at least n bytes.
            let w = unsafe { libc::pwrite(fd, ZEROS.as_ptr() as *const libc::c_void, n, at as libc::off_t) };
            match w {
                w if w > 0 => at += w as u64,
                0 => return Err(libc::ENOSPC),
                _ => match std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO) {
                    libc::EINTR => continue,
                    e => return Err(e),
                },
            }
        }
        Ok(())
    }

    /// Stops the writer for good (a reservation failed): the header says why and when.
    fn stop(&mut self, errno: i32) -> String {
        self.fault = errno.max(1) as u32;
        if let Some(m) = &self.cur {
            let at = |off: usize| m.u64_at(off);
            at(offset::FAULT_NS).store(now_ns(), Ordering::Relaxed);
            // SAFETY: a 4-byte aligned field inside the header page.
            unsafe { (*(m.base.add(offset::FAULT_ERRNO) as *const std::sync::atomic::AtomicU32)).store(self.fault, Ordering::Relaxed) };
        }
        self.fault_message()
    }

    fn fault_message(&self) -> String {
        format!("{}: {} (kernel records after it not kept)", self.raw_dir, oslens_format::header::fault_reason(self.fault))
    }

    /// Counts a record not written because the writer stopped.
    fn drop_record(&mut self) -> String {
        self.fault_dropped += 1;
        if let Some(m) = &self.cur {
            m.u64_at(offset::FAULT_DROPPED).store(self.fault_dropped, Ordering::Relaxed);
        }
        self.fault_message()
    }

    fn open(&mut self) -> Result<(), String> {
        let len = HEADER_SIZE + self.capacity as usize * RECORD_SIZE;
        let (fd, name) = loop {
            let name = format!("{}-{}.osl", self.stem, self.seq);
            let path = CString::new(format!("{}/{}", self.raw_dir, name)).unwrap();
            // SAFETY: valid C string.
            let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC, 0o644) };
            if fd >= 0 {
                break (fd, name);
            }
            let e = std::io::Error::last_os_error();
            if e.raw_os_error() != Some(libc::EEXIST) || self.seq > 100_000 {
                return Err(format!("cannot create {}/{}: {e}", self.raw_dir, name));
            }
            self.seq += 1;
        };
        let now = now_ns();
        let h = ChunkHeader {
            version: oslens_format::VERSION,
            source: SOURCE_KERNEL_CPU,
            clock: CLOCK_MONOTONIC_NS,
            pid: 0,
            tid: 0,
            ppid: 0,
            cpu: self.cpu,
            capacity: self.capacity,
            calib: [(now, now), (0, 0)],
            seq: self.seq,
            name: self.stem.clone(),
            ..Default::default()
        };
        let bytes = h.to_bytes();
        let path = format!("{}/{}", self.raw_dir, name);
        let fail = |fd: i32, what: &str| {
            let e = std::io::Error::last_os_error();
            // SAFETY: our own descriptor; the file holds nothing worth keeping.
            unsafe { libc::close(fd) };
            let _ = std::fs::remove_file(&path);
            (e.raw_os_error().unwrap_or(libc::EIO), format!("cannot {what} {name}: {e}"))
        };
        // The header goes in with pwrite (so its page is backed), never through the mapping.
        // SAFETY: our fd; the mapping covers the sized file.
        let base = unsafe {
            if libc::ftruncate(fd, len as libc::off_t) != 0 || libc::pwrite(fd, bytes.as_ptr() as *const libc::c_void, HEADER_SIZE, 0) != HEADER_SIZE as isize {
                let (e, msg) = fail(fd, "write");
                self.stop(e);
                return Err(msg);
            }
            let p = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
            if p == libc::MAP_FAILED {
                let (e, msg) = fail(fd, "map");
                self.stop(e);
                return Err(msg);
            }
            p as *mut u8
        };
        self.files.push(name.clone());
        self.cur = Some(Mapped { base, len, pos: 0, lost: 0, fd, reserved: HEADER_SIZE as u64 });
        Ok(())
    }

    fn close_current(&mut self) {
        if let Some(m) = self.cur.take() {
            let now = now_ns();
            m.u64_at(offset::CALIB1_TSC).store(now, Ordering::Relaxed);
            m.u64_at(offset::CALIB1_NS).store(now, Ordering::Relaxed);
            // A closed chunk keeps only its committed records: the capacity becomes the count and
            // the file is cut there (a chunk of a short run is not megabytes of zeros).
            m.u64_at(offset::CAPACITY).store(m.pos, Ordering::Relaxed);
            // SAFETY: CLOSED lies inside the header; our own mapping, unmapped once.
            unsafe {
                (m.base.add(offset::CLOSED) as *mut u32).write_volatile(1);
                libc::munmap(m.base as *mut libc::c_void, m.len);
                libc::ftruncate(m.fd, (HEADER_SIZE + m.pos as usize * RECORD_SIZE) as libc::off_t);
                libc::close(m.fd);
            }
            self.seq += 1;
        }
    }

    /// Room for `slots` records, opening the next chunk when needed.
    fn room(&mut self, slots: u64) -> Result<&mut Mapped, String> {
        if self.fault != 0 {
            return Err(self.drop_record());
        }
        let need_new = match &self.cur {
            None => true,
            Some(m) => m.pos + slots > self.capacity,
        };
        if need_new {
            self.close_current();
            if let Err(e) = self.open() {
                self.fault_dropped += 1;
                return Err(e);
            }
        }
        let m = self.cur.as_mut().unwrap();
        let need = (HEADER_SIZE + (m.pos + slots) as usize * RECORD_SIZE) as u64;
        if let Err(e) = Self::reserve(m, need) {
            self.stop(e);
            return Err(self.drop_record());
        }
        Ok(self.cur.as_mut().unwrap())
    }

    #[inline]
    pub fn push(&mut self, r: Record) -> Result<(), String> {
        let m = self.room(1)?;
        // SAFETY: pos < capacity, inside the mapping.
        unsafe { (m.base.add(HEADER_SIZE + m.pos as usize * RECORD_SIZE) as *mut Record).write(r) };
        m.pos += 1;
        m.u64_at(offset::COMMITTED).store(m.pos, Ordering::Release);
        self.records += 1;
        Ok(())
    }

    /// A NAME record (class, id) followed by its continuation records, committed together.
    pub fn push_name(&mut self, ts: u64, id: u32, cpu: u16, class: u64, name: &[u8]) -> Result<(), String> {
        let cont = name.len().div_ceil(CONT_PAYLOAD) as u64;
        let m = self.room(1 + cont)?;
        let head = Record::new(ts, id, cpu, kinds::NAME, class, name.len() as u64);
        // SAFETY: room for 1 + cont slots was checked.
        unsafe {
            let slot = m.base.add(HEADER_SIZE + m.pos as usize * RECORD_SIZE);
            (slot as *mut Record).write(head);
            for (i, part) in name.chunks(CONT_PAYLOAD).enumerate() {
                let raw = continuation_record(part);
                std::ptr::copy_nonoverlapping(raw.as_ptr(), slot.add((1 + i) * RECORD_SIZE), RECORD_SIZE);
            }
        }
        m.pos += 1 + cont;
        m.u64_at(offset::COMMITTED).store(m.pos, Ordering::Release);
        self.records += 1;
        Ok(())
    }

    /// Counts records the kernel dropped (header dropped_events of the current chunk).
    pub fn count_lost(&mut self, n: u64) -> Result<(), String> {
        self.lost += n;
        if self.fault != 0 {
            // the header page is backed: the count still goes there
            if let Some(m) = self.cur.as_mut() {
                m.lost += n;
                m.u64_at(offset::DROPPED_EVENTS).store(m.lost, Ordering::Relaxed);
            }
            return Ok(());
        }
        let m = self.room(0)?;
        m.lost += n;
        m.u64_at(offset::DROPPED_EVENTS).store(m.lost, Ordering::Relaxed);
        Ok(())
    }

    pub fn close(&mut self) {
        self.close_current();
    }
}
