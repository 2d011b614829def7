//! A thread chunk's staging ring (LTTng's design, kept crash-safe): the writer fills a few
//! small slots that stay in its cache, and the oslens-helper thread copies each full slot to
//! the record positions it holds. So the recording thread never touches a fresh page, whose
//! preparation costs more than the records written into it (docs/recorder.md, "Cost", figures behind the code). The ring lives in the chunk file after the records, and its descriptors in
//! the header page, so records still in a slot when the program dies are read from there
//! (oslens_format::reader). A slot moves FREE -> WRITING -> FULL -> COPYING -> FREE; only the
//! writer opens and fills slots, and whoever wins FULL -> COPYING copies one out.

use oslens_format::header::{offset, stage, HEADER_SIZE};
use oslens_format::record::{Record, RECORD_SIZE};
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering::*};

/// Slots per ring and records per slot: 16 × 32 KiB, well inside a core's L2, and a slot
/// boundary (the writer's only extra work) once per 1024 records.
pub const SLOTS: u32 = 16;
pub const SLOT_RECORDS: u64 = 1024;
/// The writer wakes the helper once per this many finished slots (a futex wake is a system
/// call on the writer's thread when the helper sleeps), so the helper copies several per wake.
pub const WAKE_EVERY: u32 = 8;
const SLOT_BYTES: usize = SLOT_RECORDS as usize * RECORD_SIZE;
pub static ZEROS: [u8; SLOT_BYTES] = [0; SLOT_BYTES];

#[repr(C)]
struct Descriptor {
    state: AtomicU32,
    _pad: u32,
    start: AtomicU64,
    len: AtomicU64,
}

#[derive(Clone, Copy)]
pub struct Stage {
    /// The chunk's mapping: header page, record slots, then the ring.
    base: usize,
    capacity: u64,
    /// The chunk file, for copying out with pwrite: a fresh page written whole through write()
    /// is not zero-filled first as a page faulted in through the mapping is (the zero-fill was
    /// the largest part of the copy: docs/recorder.md, "Cost", figures behind the code). -1: copy through the mapping.
    fd: i32,
    /// (st_dev, st_ino) of the chunk file: `fd` is used only while it still names it, in case
    /// the program closed it and reused the number.
    file: (u64, u64),
}

impl Stage {
    pub fn bytes() -> u64 {
        SLOTS as u64 * SLOT_RECORDS * RECORD_SIZE as u64
    }

    /// Sets up the ring of a chunk mapped at `base` (capacity records, ring after them);
    /// `fd` is the chunk file's descriptor, owned by the chunk's `Space` (-1: copy through the
    /// mapping).
    pub fn init(base: *mut u8, capacity: u64, fd: i32) -> Stage {
        // SAFETY: the header page is mapped and ours; the fields lie inside it.
        unsafe {
            (base.add(offset::STAGE_SLOTS) as *mut u32).write(SLOTS);
            (base.add(offset::STAGE_SLOT_RECORDS) as *mut u32).write(SLOT_RECORDS as u32);
        }
        match identity(fd) {
            Some(file) => Stage { base: base as usize, capacity, fd, file },
            None => Stage { base: base as usize, capacity, fd: -1, file: (0, 0) },
        }
    }

    /// Cuts the ring off the chunk file (`records_end`: the file's length without it); false
    /// when the descriptor was no longer ours. The descriptor stays open (the Space's).
    pub fn cut(&self, records_end: u64) -> bool {
        if self.fd < 0 || identity(self.fd) != Some(self.file) {
            return false;
        }
        // SAFETY: our descriptor (checked above).
        unsafe { libc::ftruncate(self.fd, records_end as libc::off_t) == 0 }
    }

    /// Marks the chunk as having no ring (before the ring is cut off the file).
    pub fn remove(&self) {
        // SAFETY: as in init.
        unsafe { ((self.base + offset::STAGE_SLOTS) as *mut u32).write_volatile(0) };
    }

    pub fn ring_offset(&self) -> usize {
        HEADER_SIZE + self.capacity as usize * RECORD_SIZE
    }

    fn descriptor(&self, j: u32) -> &Descriptor {
        // SAFETY: descriptors are 8-byte aligned inside the header page (SLOTS <= MAX_SLOTS).
        unsafe { &*((self.base + stage::DESCRIPTORS + j as usize * stage::DESCRIPTOR_SIZE) as *const Descriptor) }
    }

    pub fn slot(&self, j: u32) -> *mut Record {
        (self.base + self.ring_offset() + j as usize * SLOT_RECORDS as usize * RECORD_SIZE) as *mut Record
    }

    /// Opens slot `j` (free) for the records from position `start` on.
    pub fn open(&self, j: u32, start: u64) {
        let d = self.descriptor(j);
        d.start.store(start, Relaxed);
        d.len.store(0, Relaxed);
        // Release: a reader that sees WRITING sees the start.
        d.state.store(stage::WRITING, Release);
    }

    /// Closes slot `j` after `len` records and hands it to whoever copies it out.
    pub fn finish(&self, j: u32, len: u64) {
        let d = self.descriptor(j);
        d.len.store(len, Relaxed);
        // Release: the copier sees the records and the length.
        d.state.store(stage::FULL, Release);
    }

    /// Copies slot `j` to its record positions if it is full and nobody else is copying it.
    pub fn try_copy(&self, j: u32) -> bool {
        if !self.claim_full(j) {
            return false;
        }
        self.copy_claimed(&[j]);
        true
    }

    fn claim_full(&self, j: u32) -> bool {
        self.descriptor(j).state.compare_exchange(stage::FULL, stage::COPYING, Acquire, Relaxed).is_ok()
    }

    /// Copies out claimed slots that hold consecutive positions, in order, with one pwritev
    /// (larger writes cost the page cache less per page: docs/recorder.md, "Cost", figures behind the code), then frees
    /// them.
    fn copy_claimed(&self, run: &[u32]) {
        let (start, _) = self.extent(run[0]);
        let iov: Vec<libc::iovec> = run
            .iter()
            .map(|&j| libc::iovec { iov_base: self.slot(j) as *mut libc::c_void, iov_len: self.extent(j).1 as usize * RECORD_SIZE })
            .collect();
        let bytes: usize = iov.iter().map(|v| v.iov_len).sum();
        let at = HEADER_SIZE + start as usize * RECORD_SIZE;
        let whole = self.fd >= 0
            && identity(self.fd) == Some(self.file)
            // SAFETY: reads the slots (inside the mapping) into the chunk file.
            && unsafe { libc::pwritev(self.fd, iov.as_ptr(), iov.len() as libc::c_int, at as libc::off_t) } == bytes as isize;
        for &j in run {
            if !whole {
                let (start, len) = self.extent(j);
                let at = HEADER_SIZE + start as usize * RECORD_SIZE;
                let bytes = len as usize * RECORD_SIZE;
                let written = self.write_out(j, at, bytes);
                if written < bytes {
                    // SAFETY: start + len <= capacity (the writer never fills past it): inside
                    // the mapping, and disjoint from the ring.
                    unsafe { std::ptr::copy_nonoverlapping((self.slot(j) as *const u8).add(written), (self.base + at + written) as *mut u8, bytes - written) };
                }
            }
            // Release: the copy is in place before the writer may reuse the slot.
            self.descriptor(j).state.store(stage::FREE, Release);
        }
    }

    /// (start, len) of a closed slot.
    fn extent(&self, j: u32) -> (u64, u64) {
        let d = self.descriptor(j);
        (d.start.load(Relaxed), d.len.load(Relaxed))
    }

    /// Bytes of slot `j` written to the file at `at` with pwrite (the rest is copied through the
    /// mapping).
    fn write_out(&self, j: u32, at: usize, bytes: usize) -> usize {
        if self.fd < 0 || identity(self.fd) != Some(self.file) {
            return 0;
        }
        let mut done = 0;
        while done < bytes {
            // SAFETY: reads the slot (inside the mapping) into the chunk file.
            let n = unsafe { libc::pwrite(self.fd, (self.slot(j) as *const u8).add(done) as *const libc::c_void, bytes - done, (at + done) as libc::off_t) };
            if n <= 0 {
                break;
            }
            done += n as usize;
        }
        done
    }

    /// Gives slot `j`'s pages to the file before its first use: written whole with pwrite they
    /// are not read (zero-filled) first, as pages faulted in through the mapping are.
    pub fn prepare_slot(&self, j: u32) {
        let at = self.ring_offset() + j as usize * SLOT_BYTES;
        if self.fd >= 0 && identity(self.fd) == Some(self.file) {
            // SAFETY: writes zeros into our own file, where the slot lies.
            if unsafe { libc::pwrite(self.fd, ZEROS.as_ptr() as *const libc::c_void, SLOT_BYTES, at as libc::off_t) } == SLOT_BYTES as isize {
                return;
            }
        }
        // SAFETY: the slot lies inside the mapping.
        unsafe { libc::madvise(self.slot(j) as *mut libc::c_void, SLOT_BYTES, libc::MADV_POPULATE_WRITE) };
    }

    /// Copies out the full slots (the helper's work), consecutive ones together; how many it
    /// copied. At most half the ring is claimed at once, so a writer that needs a slot always
    /// finds one free or full rather than waiting for these copies.
    pub fn copy_full_slots(&self) -> u64 {
        let mut claimed: Vec<u32> = (0..SLOTS).filter(|&j| self.claim_full(j)).take(SLOTS as usize / 2).collect();
        claimed.sort_by_key(|&j| self.extent(j).0);
        let mut from = 0;
        for i in 1..=claimed.len() {
            let (start, len) = self.extent(claimed[i - 1]);
            if i == claimed.len() || self.extent(claimed[i]).0 != start + len {
                self.copy_claimed(&claimed[from..i]);
                from = i;
            }
        }
        claimed.len() as u64
    }

    /// Tops up the file space reserved ahead of the writer (the helper's, after copying), so
    /// the writer seldom reserves on its own thread. A failure stops the chunk (space.rs).
    pub fn keep_reserved_ahead(&self, space: &crate::space::Space) {
        // SAFETY: an aligned u64 inside the header page: the writer's position.
        let pos = unsafe { &*((self.base + offset::COMMITTED) as *const AtomicU64) }.load(Relaxed);
        let at = (HEADER_SIZE as u64 + pos * RECORD_SIZE as u64) + crate::space::THREAD_AHEAD / 2;
        if !space.covers(at) && !space.faulted() {
            space.reserve(at);
        }
    }

    /// Bytes from the file's start whose records are all in place (copied out): below the
    /// oldest slot still holding records (the writer's position when none does).
    pub fn in_file_bytes(&self) -> u64 {
        // SAFETY: as in keep_reserved_ahead. Read before the descriptors: a slot opened after
        // this starts at or past it.
        let mut pos = unsafe { &*((self.base + offset::COMMITTED) as *const AtomicU64) }.load(Acquire);
        for j in 0..SLOTS {
            let d = self.descriptor(j);
            if d.state.load(Acquire) != stage::FREE {
                pos = pos.min(d.start.load(Relaxed));
            }
        }
        HEADER_SIZE as u64 + pos * RECORD_SIZE as u64
    }

    /// Counts a slot the writer copied out itself, in the chunk header.
    fn count_self_copies(&self, n: u64) {
        // SAFETY: an aligned u64 inside the header page; only the writer updates it.
        let c = unsafe { &*((self.base + offset::RING_SELF_COPIES) as *const AtomicU64) };
        c.store(c.load(Relaxed) + n, Relaxed);
    }

    /// A slot the writer may open, searching from `from`: a free one, else (the helper fell
    /// behind) one of the full ones it copies out itself, several at once as the helper does.
    /// Never one the helper is copying: the writer does not wait for the helper.
    /// Returns the slot and whether the writer copied slots out to get it.
    pub fn take(&self, from: u32) -> (u32, bool) {
        let free = || (0..SLOTS).map(|i| (from + i) % SLOTS).find(|&j| self.descriptor(j).state.load(Acquire) == stage::FREE);
        if let Some(j) = free() {
            return (j, false);
        }
        self.count_self_copies(self.copy_full_slots());
        if let Some(j) = free() {
            return (j, true);
        }
        // Every other slot is being copied by the helper (cannot happen: it claims at most half).
        self.claim(from);
        (from, true)
    }

    /// Waits until slot `j` is free, copying it out here when the helper has not yet: the
    /// writer waits only while the helper copies this very slot.
    pub fn claim(&self, j: u32) {
        let mut spins = 0u32;
        loop {
            match self.descriptor(j).state.load(Acquire) {
                stage::FREE => return,
                // (not counted as the helper falling behind: a thread copies its last slots
                // out itself when it ends)
                stage::FULL => {
                    self.try_copy(j);
                }
                // Past a copy's time the helper was likely preempted, and spinning on would
                // keep it off the CPU it needs.
                _ if spins < 1000 => {
                    spins += 1;
                    std::hint::spin_loop();
                }
                _ => std::thread::yield_now(),
            }
        }
    }

    /// Every slot copied out (the current one must have been finished).
    pub fn drain(&self) {
        for j in 0..SLOTS {
            self.claim(j);
        }
    }
}

use crate::space::identity;
