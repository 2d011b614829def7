//! Per-CPU raw chunks: `raw/kernel-cpu<N>-<seq>.osl`, memory-mapped, `committed` updated after
//! each record so a crash of the collector loses nothing it wrote. A full chunk is closed and
//! the next sequence number opened.

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
}

struct Mapped {
    base: *mut u8,
    len: usize,
    pos: u64,
    lost: u64,
    path: String,
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
        Writer { raw_dir: raw_dir.into(), stem: stem.into(), cpu, capacity, seq: 0, cur: None, records: 0, lost: 0, files: vec![] }
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
        // SAFETY: our fd; the mapping covers the sized file.
        let base = unsafe {
            if libc::ftruncate(fd, len as libc::off_t) != 0 {
                let e = std::io::Error::last_os_error();
                libc::close(fd);
                return Err(format!("cannot size {name}: {e}"));
            }
            let p = libc::mmap(std::ptr::null_mut(), len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
            libc::close(fd);
            if p == libc::MAP_FAILED {
                return Err(format!("cannot map {name}: {}", std::io::Error::last_os_error()));
            }
            p as *mut u8
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
        // SAFETY: the mapping is at least HEADER_SIZE long.
        unsafe { std::ptr::copy_nonoverlapping(bytes.as_ptr(), base, HEADER_SIZE) };
        self.files.push(name.clone());
        self.cur = Some(Mapped { base, len, pos: 0, lost: 0, path: format!("{}/{}", self.raw_dir, name) });
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
            }
            if let Ok(f) = std::fs::OpenOptions::new().write(true).open(&m.path) {
                let _ = f.set_len((HEADER_SIZE + m.pos as usize * RECORD_SIZE) as u64);
            }
            self.seq += 1;
        }
    }

    /// Room for `slots` records, opening the next chunk when needed.
    fn room(&mut self, slots: u64) -> Result<&mut Mapped, String> {
        let need_new = match &self.cur {
            None => true,
            Some(m) => m.pos + slots > self.capacity,
        };
        if need_new {
            self.close_current();
            self.open()?;
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
        let m = self.room(0)?;
        m.lost += n;
        m.u64_at(offset::DROPPED_EVENTS).store(m.lost, Ordering::Relaxed);
        self.lost += n;
        Ok(())
    }

    pub fn close(&mut self) {
        self.close_current();
    }
}
