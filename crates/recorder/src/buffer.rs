//! A chunk being written: a memory-mapped file in the trace's raw/ folder. Records land in the
//! page cache as they are written, so a crash, SIGKILL or abort loses nothing that was committed.
//! One writer per chunk (its thread, or the names lock), so the hot path takes no lock.

use crate::clock;
use oslens_format::header::{offset, ChunkHeader, HEADER_SIZE, SOURCE_APP_THREAD};
use oslens_format::record::{continuation_record, Record, RECORD_SIZE};
use oslens_format::kinds;
use crate::helper::{self, Ring};
use crate::stage::{self, Stage};
use crate::space::{self, Space};
use crate::spare;
use std::ffi::CString;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where the next record of a chunk goes, laid out as `struct osl__writer` in oslens.h: the
/// header's inline fast path writes records through a thread's cursor without calling into the
/// library, as long as `pos < inline_limit`. The library owns every other decision (new pages,
/// trigger budget, new chunks) and moves `inline_limit` accordingly; 0 sends the inline path to
/// the library.
#[repr(C, align(64))]
pub struct Cursor {
    pub records: *mut Record,
    pub pos: u64,
    pub inline_limit: u64,
    pub committed: *mut u64,
    /// This thread's rseq cpu_id (the CPU a record was written on).
    pub cpu_id: *const u32,
    /// The process's names epoch (see `NAMES_EPOCH`) while `inline_limit` is set; 0 otherwise.
    pub names_epoch: u32,
}

impl Cursor {
    pub const fn empty() -> Cursor {
        Cursor { records: std::ptr::null_mut(), pos: 0, inline_limit: 0, committed: std::ptr::null_mut(), cpu_id: std::ptr::null(), names_epoch: 0 }
    }

    /// Stops inline writes (the chunk behind it is going away, or belongs to a fork's parent).
    pub fn detach(&mut self) {
        *self = Cursor::empty();
    }
}

pub struct Chunk {
    base: *mut u8,
    map_len: usize,
    /// A thread chunk writes through its thread's cursor (shared with inlined code); other
    /// chunks (names) through one of their own.
    cursor: *mut Cursor,
    own_cursor: Option<Box<Cursor>>,
    pub capacity: u64,
    /// The hot path writes below this slot without asking; past it, `grow_window` decides.
    limit: u64,
    /// A thread chunk's staging ring (see stage.rs) and its registration with the helper;
    /// names chunks write in place.
    stage: Option<Stage>,
    ring: Option<Arc<Ring>>,
    /// The file space backing the mapping (space.rs): no store goes past what it reserved.
    space: Arc<Space>,
    /// The ring slot being written and the positions it takes; None between slots or while a
    /// record too large for a slot is written in place.
    slot: Option<u32>,
    slot_start: u64,
    next_slot: u32,
    /// Slots finished since the helper was last woken.
    unannounced: u32,
    /// Every page populated up front (OSLENS_PREPARE_BUFFERS): the unused ones are given back
    /// at the end.
    prepared: bool,
    /// Ring slots used at least once (bit per slot): the others' pages are not prepared yet.
    slots_used: u32,
    /// Resident bytes this chunk took from the memory budget (memlimit.rs), given back at close.
    budget: u64,
    /// Record slots the file holds so far: a chunk starts with a few and is extended to its
    /// capacity, with a staging ring when `ring_on_extend`, once it needs more (growth.rs).
    in_file: u64,
    ring_on_extend: bool,
    /// Pause ticks not yet taken by the writer (take_paused).
    paused: u64,
    path: CString,
    pub pid: u32,
    pub tid: u32,
    pub seq: u32,
}

// SAFETY: a chunk has one writer at a time (its thread or the names lock holder).
unsafe impl Send for Chunk {}

impl Chunk {
    /// Creates `raw/<stem>-<seq>.osl`, trying the next sequence number when the file exists
    /// (an exec'd image reuses its pid and tid). The chunk writes through a cursor of its own
    /// until `adopt_cursor` hands it a thread's. `staged`: records go through a staging ring.
    pub fn create(raw_dir: &str, stem: &str, seq: u32, capacity: u64, pid: u32, tid: u32, name: &str, staged: bool) -> Option<Chunk> {
        Self::create_growing(raw_dir, stem, seq, capacity, pid, tid, name, staged, capacity)
    }

    /// As `create`, but the file holds only `in_file` record slots until more are needed: then
    /// it is extended to `capacity` in place (see `extend`), with a staging ring when `staged`.
    /// A thread or process that records little so costs a small file and no helper thread.
    #[allow(clippy::too_many_arguments)]
    pub fn create_growing(raw_dir: &str, stem: &str, mut seq: u32, capacity: u64, pid: u32, tid: u32, name: &str, staged: bool, in_file: u64) -> Option<Chunk> {
        let in_file = in_file.min(capacity);
        let ring_on_extend = staged && in_file < capacity;
        let staged = staged && !ring_on_extend;
        let records_len = HEADER_SIZE + capacity as usize * RECORD_SIZE;
        // the whole extent (the ring included) is mapped now; only what the file holds is touched
        let map_len = records_len + if staged || ring_on_extend { Stage::bytes() as usize } else { 0 };
        let file_len = if in_file < capacity { HEADER_SIZE + in_file as usize * RECORD_SIZE } else { map_len };
        // a spare file from the trace's pool when there is one (spare.rs): no new inode
        let mut spare = spare::take();
        let (fd, path) = loop {
            let path = CString::new(format!("{raw_dir}/{stem}-{seq}.osl")).ok()?;
            match spare.as_ref().map(|s| s.claim(&path)) {
                Some(spare::Claim::Opened(fd)) => break (fd, path),
                Some(spare::Claim::Exists) => {
                    seq += 1;
                    continue;
                }
                Some(spare::Claim::Missing) => spare = None,
                None => {}
            }
            // SAFETY: valid C string.
            let fd = unsafe { libc::open(path.as_ptr(), libc::O_RDWR | libc::O_CREAT | libc::O_EXCL | libc::O_CLOEXEC, 0o644) };
            if fd >= 0 {
                break (fd, path);
            }
            let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::EIO);
            if e != libc::EEXIST || seq > 100_000 {
                space::note_process_fault(e as u32);
                return None;
            }
            seq += 1;
        };
        let calib = clock::pair();
        let header = ChunkHeader {
            version: oslens_format::VERSION,
            source: SOURCE_APP_THREAD,
            clock: clock::clock_kind(),
            pid,
            tid,
            // SAFETY: no preconditions.
            ppid: unsafe { libc::getppid() } as u32,
            cpu: clock::cpu() as u32,
            capacity,
            calib: [calib, (0, 0)],
            seq,
            name: name.to_string(),
            ..Default::default()
        };
        let bytes = header.to_bytes();
        // The header goes in with pwrite, not through the mapping: a first fault on a sparse
        // file reads around it, zero-filling up to megabytes of pages, most of a thread's
        // start-up (docs/recorder.md, "Start-up"). MADV_RANDOM keeps later faults to one page.
        // SAFETY: fd is ours; the mapping covers the file we just sized.
        let base = unsafe {
            if libc::ftruncate(fd, file_len as libc::off_t) != 0
                || libc::pwrite(fd, bytes.as_ptr() as *const libc::c_void, HEADER_SIZE, 0) != HEADER_SIZE as isize
            {
                let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::ENOSPC);
                abandon(fd, &path, e);
                return None;
            }
            let p = libc::mmap(std::ptr::null_mut(), map_len, libc::PROT_READ | libc::PROT_WRITE, libc::MAP_SHARED, fd, 0);
            if p == libc::MAP_FAILED {
                let e = std::io::Error::last_os_error().raw_os_error().unwrap_or(libc::ENOMEM);
                abandon(fd, &path, e);
                return None;
            }
            libc::madvise(p, map_len, libc::MADV_RANDOM);
            p as *mut u8
        };
        let records_end = (HEADER_SIZE + capacity as usize * RECORD_SIZE) as u64;
        // Until extended, a growing chunk reserves page by page within its small file: what a
        // short-lived thread reserved, closing it (cut_after) frees, and freeing blocks costs
        // 0.1-0.3 ms on a file system mounted with `discard` (docs/recorder.md, "Start-up").
        let growing = in_file < capacity;
        let ahead = if growing { 0 } else { ahead_of(staged) };
        let reservable = records_end.min(file_len as u64);
        let space = Arc::new(Space::new(fd, base, HEADER_SIZE as u64, reservable, ahead));
        // The ring and the first slot's records are backed before anything is stored there;
        // a file system that cannot back them gets no chunk (the header says why).
        let first = if growing { HEADER_SIZE as u64 } else { HEADER_SIZE as u64 + in_file.min(stage::SLOT_RECORDS) * RECORD_SIZE as u64 };
        if (staged && !space.reserve_range(records_end, Stage::bytes())) || !space.reserve(first) {
            // SAFETY: our own fresh mapping.
            unsafe { libc::munmap(base as *mut libc::c_void, map_len) };
            space.close_fd();
            // SAFETY: valid C string: the chunk holds nothing yet.
            unsafe { libc::unlink(path.as_ptr()) };
            return None;
        }
        // A ring's pages are prepared slot by slot as they are first used (a thread that
        // records little touches little); the records' pages are the helper's. A chunk without
        // a ring (names: written rarely) takes its pages as it faults them, one at a time.
        let stage = staged.then(|| Stage::init(base, capacity, space.fd()));
        let ring = stage.map(|st| helper::register(st, space.clone()));
        let mut own = Box::new(Cursor::empty());
        // SAFETY: the records start after the header, inside the mapping.
        own.records = unsafe { base.add(HEADER_SIZE) } as *mut Record;
        // SAFETY: as in header_u64.
        own.committed = unsafe { base.add(offset::COMMITTED) } as *mut u64;
        let cursor = &mut *own as *mut Cursor;
        let mut chunk = Chunk { base, map_len, cursor, own_cursor: Some(own), capacity, limit: 0, stage, ring, space, slot: None, slot_start: 0, next_slot: 0, unannounced: 0, prepared: false, slots_used: 0, budget: 0, in_file, ring_on_extend, paused: 0, path, pid, tid, seq };
        chunk.grow_window(1);
        Some(chunk)
    }

    /// Moves the chunk's writing position into `cursor` (a thread's), which it writes through
    /// from now on.
    pub fn adopt_cursor(&mut self, cursor: *mut Cursor) {
        if let Some(own) = self.own_cursor.take() {
            // SAFETY: the thread's cursor outlives its chunks (it is never freed).
            unsafe { cursor.write(Cursor { records: own.records, pos: own.pos, inline_limit: 0, committed: own.committed, cpu_id: own.cpu_id, names_epoch: 0 }) };
            self.cursor = cursor;
        }
    }

    #[inline(always)]
    pub fn cursor(&mut self) -> &mut Cursor {
        // SAFETY: one writer per chunk (see the type's comment); the cursor outlives the chunk.
        unsafe { &mut *self.cursor }
    }

    #[inline(always)]
    pub fn pos(&self) -> u64 {
        // SAFETY: as in `cursor`; only the writer changes it.
        unsafe { (*self.cursor).pos }
    }

    fn header_u64(&self, off: usize) -> &AtomicU64 {
        // SAFETY: header fields are 8-byte aligned inside the page-aligned mapping.
        unsafe { &*(self.base.add(off) as *const AtomicU64) }
    }

    pub fn limit(&self) -> u64 {
        self.limit
    }

    #[inline(always)]
    pub fn has_room(&self, slots: u64) -> bool {
        self.pos() + slots <= self.limit
    }

    /// Past the limit: in a chunk with a staging ring, the next slot; without, the chunk's end.
    /// False when the chunk is full.
    #[cold]
    pub fn grow_window(&mut self, slots: u64) -> bool {
        if let Some(stage) = self.stage {
            return self.next_ring_slot(stage, slots);
        }
        let pos = self.pos();
        if pos + slots > self.in_file && self.in_file < self.capacity && self.extend() {
            return self.grow_window(slots);
        }
        if pos + slots > self.in_file || !self.space.reserve(records_bytes(pos + slots)) {
            self.limit = self.limit.min(self.backed_records());
            return false;
        }
        self.limit = self.backed_records();
        true
    }

    /// Record positions below this are backed by file space (and within the file).
    fn backed_records(&self) -> u64 {
        (self.space.reserved().saturating_sub(HEADER_SIZE as u64) / RECORD_SIZE as u64).min(self.in_file)
    }

    /// True once a fault stopped this chunk (it then records nothing more).
    pub fn faulted(&self) -> bool {
        self.space.faulted()
    }

    /// Extends a chunk created small (`create_growing`) to its capacity, and gives it its
    /// staging ring (and the process its helper thread) when it was to have one: no new file,
    /// so no new name in the directory, which is what a chunk costs most (docs/recorder.md,
    /// "Start-up"). The records written so far stay where they are. The ring is backed before
    /// it is used (space.rs); false when the file system refused.
    #[cold]
    fn extend(&mut self) -> bool {
        let fd = self.space.fd();
        if fd < 0 || self.space.faulted() {
            return false;
        }
        let len = HEADER_SIZE + self.capacity as usize * RECORD_SIZE + if self.ring_on_extend { Stage::bytes() as usize } else { 0 };
        // SAFETY: our descriptor; the mapping already covers `len`.
        if unsafe { libc::ftruncate(fd, len as libc::off_t) } != 0 {
            return false;
        }
        self.in_file = self.capacity;
        self.space.extend_to(records_bytes(self.capacity), ahead_of(self.ring_on_extend));
        if !self.ring_on_extend {
            return true;
        }
        self.ring_on_extend = false;
        if !self.space.reserve_range(records_bytes(self.capacity), Stage::bytes()) {
            return false;
        }
        let stage = Stage::init(self.base, self.capacity, fd);
        self.ring = Some(helper::register(stage, self.space.clone()));
        self.stage = Some(stage);
        helper::start();
        true
    }

    /// Past the current ring slot: hands it to the helper and opens the next one (copying it
    /// out here if the helper has not). A record group larger than a slot is written in place.
    fn next_ring_slot(&mut self, stage: Stage, slots: u64) -> bool {
        let pos = self.pos();
        if pos + slots > self.capacity {
            return false;
        }
        self.finish_slot(stage);
        // The positions this slot (or in-place group) takes are backed before it opens, so its
        // copy-out (or in-place stores) cannot meet a full disk; the helper reserves ahead.
        let need = pos + slots.max(stage::SLOT_RECORDS).min(self.capacity - pos);
        if !self.space.reserve(records_bytes(need)) {
            return false;
        }
        let records = self.records();
        if slots > stage::SLOT_RECORDS {
            self.cursor().records = records;
            self.limit = pos + slots;
            return true;
        }
        let started = clock::now();
        let (j, copied) = stage.take(self.next_slot);
        self.next_slot = (j + 1) % stage::SLOTS;
        if self.slots_used & (1 << j) == 0 {
            self.slots_used |= 1 << j;
            stage.prepare_slot(j);
        }
        stage.open(j, pos);
        self.slot = Some(j);
        self.slot_start = pos;
        self.limit = (pos + stage::SLOT_RECORDS).min(self.capacity);
        // Positions are the chunk's: the cursor's base is moved so that records[pos] lands in
        // the slot (only positions inside the slot are ever written through it).
        self.cursor().records = stage.slot(j).wrapping_sub(pos as usize);
        if copied {
            // The helper is behind: so is its write-behind, which this copy-out pause does too.
            if let Some(ring) = &self.ring {
                ring.write_behind();
            }
            // A buffer dump on the program's thread, removed by compensation as Kohr et al. did.
            self.paused += self.record_pause(started, kinds::PAUSE_COPY, slots);
        }
        true
    }

    /// Records a pause the recorder caused on the writer since `started` (raw clock), when it
    /// fits with `reserve` more slots after it; returns its ticks, which the writer counts for
    /// osl_pause_ns either way.
    pub fn record_pause(&mut self, started: u64, reason: u64, reserve: u64) -> u64 {
        let end = clock::now();
        if self.has_room(1 + reserve) {
            self.push(Record::new(end, 0, clock::cpu(), kinds::PAUSE, end - started, reason));
        }
        end - started
    }

    /// Ticks of the pauses this chunk made its writer take on its own (copying a ring slot out)
    /// since the last call: the writer counts them (thread.rs).
    pub fn take_paused(&mut self) -> u64 {
        std::mem::take(&mut self.paused)
    }

    fn records(&self) -> *mut Record {
        self.base.wrapping_add(HEADER_SIZE) as *mut Record
    }

    fn finish_slot(&mut self, stage: Stage) {
        if let Some(j) = self.slot.take() {
            stage.finish(j, self.pos() - self.slot_start);
            self.unannounced += 1;
            if self.unannounced >= stage::WAKE_EVERY {
                self.unannounced = 0;
                helper::wake();
            }
        }
        // Nothing is written until a slot (or a place) is chosen again.
        self.limit = self.pos();
        self.cursor().inline_limit = 0;
    }

    /// Copies every record still in the staging ring to its place (at exit, at close): the
    /// chunk then reads as complete without the ring. The caller's fast limits must be reset:
    /// the next record goes through `grow_window`.
    pub fn drain_stage(&mut self) {
        if let Some(stage) = self.stage {
            self.finish_slot(stage);
            stage.drain();
        }
    }

    /// Copies the staging ring out, cuts it off the file and writes in place from now on (at
    /// close, and for the thread that exits the process: whatever later exit handlers record
    /// goes straight to the records). The chunk then reads as one without a ring. The caller's
    /// fast limits must be reset.
    pub fn unstage(&mut self) {
        let Some(stage) = self.stage else { return };
        self.drain_stage();
        stage.remove();
        // The helper lets go of the ring before it is cut off the file.
        if let Some(ring) = self.ring.take() {
            ring.retire();
        }
        let records_end = records_bytes(self.capacity);
        if !stage.cut(records_end) {
            // SAFETY: valid C string. The ring stays mapped but is never touched again: every
            // slot is free, and the helper reads only their descriptors (in the header).
            unsafe { libc::truncate(self.path.as_ptr(), records_end as libc::off_t) };
        }
        self.stage = None;
        self.cursor().records = self.records();
    }

    /// Populates every page of the chunk now (OSLENS_PREPARE_BUFFERS), so no page is prepared
    /// while the program runs. The chunk is created without a staging ring and the thread
    /// writes its records in place: with the pages ready the ring would only add a copy, which
    /// busy threads end up doing themselves (docs/recorder.md, "Cost").
    pub fn prepare_all(&mut self) {
        debug_assert!(self.stage.is_none(), "a prepared chunk writes in place");
        // Backed first (fallocate, leaving the file system its margin), as far as it goes: a
        // buffer cut short by a full disk records up to there, then stops (space.rs).
        let end = records_bytes(self.capacity);
        while self.space.reserved() < end && self.space.reserve((self.space.reserved() + (4 << 20)).min(end)) {}
        if let Err(errno) = self.write_zeros(self.space.reserved() as usize) {
            self.space.stop(errno);
        }
        // Maps the backed pages (now in the page cache) so the writer takes no fault.
        let backed = (self.space.reserved() as usize).min(self.map_len);
        // SAFETY: inside our own mapping.
        unsafe { libc::madvise(self.base.add(HEADER_SIZE) as *mut libc::c_void, backed.saturating_sub(HEADER_SIZE), libc::MADV_POPULATE_WRITE) };
        self.prepared = true;
        self.grow_window(1);
    }

    /// Gives the pages past the last record to the file with 1 MiB writes of zeros: whole pages
    /// written are not zero-filled first, as pages faulted in are, so this and the populate
    /// after it are faster than populating alone (docs/recorder.md, "Cost", figures behind the code). Best effort:
    /// populating alone still prepares the pages. Writes up to `end` (what is backed); the errno when a
    /// write failed.
    fn write_zeros(&self, end: usize) -> Result<(), u32> {
        let fd = self.space.fd();
        if fd < 0 {
            return Err(libc::EBADF as u32);
        }
        let zeros = &stage::ZEROS;
        let iov = [libc::iovec { iov_base: zeros.as_ptr() as *mut libc::c_void, iov_len: zeros.len() }; 32];
        // (a fresh chunk has no records yet; never overwrite any)
        let mut at = (HEADER_SIZE + self.pos() as usize * RECORD_SIZE).next_multiple_of(4096);
        while at < end {
            let n = ((end - at).div_ceil(zeros.len())).min(iov.len());
            let last = (end - at).min(n * zeros.len());
            let mut v = iov;
            v[n - 1].iov_len = last - (n - 1) * zeros.len();
            // SAFETY: the iovecs point at a static buffer of their length.
            let written = unsafe { libc::pwritev(fd, v.as_ptr(), n as libc::c_int, at as libc::off_t) };
            if written < 0 && std::io::Error::last_os_error().raw_os_error() == Some(libc::EINTR) {
                continue;
            }
            if written <= 0 {
                let e = std::io::Error::last_os_error().raw_os_error().filter(|_| written < 0).unwrap_or(libc::ENOSPC);
                return Err(e as u32);
            }
            at += written as usize;
        }
        Ok(())
    }

    /// Gives back the prepared pages past the last record (a hole in the file, which reads as
    /// empty records), so a prepared buffer costs the disk and the page cache only what was
    /// recorded. Records written later fault their pages in again.
    pub fn release_unused(&mut self) {
        if !self.prepared {
            return;
        }
        let used = (HEADER_SIZE + self.pos() as usize * RECORD_SIZE).next_multiple_of(4096);
        if used < self.map_len {
            // SAFETY: a page-aligned range inside our own shared file mapping.
            unsafe { libc::madvise(self.base.add(used) as *mut libc::c_void, self.map_len - used, libc::MADV_REMOVE) };
            // Those bytes are holes again: a later store there must reserve them first.
            self.space.shrink_to(used as u64);
            self.limit = self.limit.min(self.backed_records());
        }
    }

    /// Writes one record; the caller checked `has_room`.
    #[inline(always)]
    pub fn push(&mut self, rec: Record) {
        let c = self.cursor();
        // SAFETY: pos < limit (checked by the caller): inside the slot or the records.
        unsafe { c.records.wrapping_add(c.pos as usize).write(rec) };
        c.pos += 1;
        // Release: the record is visible before the count that covers it (free on x86).
        // SAFETY: `committed` points at the header's aligned counter.
        unsafe { (*(c.committed as *const AtomicU64)).store(c.pos, Ordering::Release) };
    }

    /// Writes a head record and continuation records carrying `payload`, committed together.
    pub fn push_with_payload(&mut self, head: Record, payload: &[u8]) {
        let c = self.cursor();
        let start = c.pos;
        // SAFETY: the caller checked room for 1 + ceil(len/30) slots.
        unsafe {
            c.records.wrapping_add(start as usize).write(head);
            for (i, part) in payload.chunks(oslens_format::record::CONT_PAYLOAD).enumerate() {
                let raw = continuation_record(part);
                std::ptr::copy_nonoverlapping(raw.as_ptr(), c.records.wrapping_add(start as usize + 1 + i) as *mut u8, RECORD_SIZE);
            }
        }
        c.pos = start + 1 + payload.len().div_ceil(oslens_format::record::CONT_PAYLOAD) as u64;
        let pos = c.pos;
        self.header_u64(offset::COMMITTED).store(pos, Ordering::Release);
    }

    /// Cuts the file `spare` records past the last one written, and the capacity with it, as
    /// the kernel collector does: a finished chunk is its records, not megabytes of holes (which
    /// a copy without sparse support, or a tmpfs mapping read whole, fills). Only without a ring.
    pub fn cut_after(&mut self, spare: u64) {
        if self.stage.is_some() {
            return;
        }
        let keep = (self.pos() + spare).min(self.capacity);
        let fd = self.space.fd();
        // SAFETY: our own descriptor; nothing is stored past `keep` from now on (capacity).
        if fd < 0 || unsafe { libc::ftruncate(fd, records_bytes(keep) as libc::off_t) } != 0 {
            return;
        }
        self.capacity = keep;
        self.in_file = self.in_file.min(keep);
        self.limit = self.limit.min(keep);
        self.space.shrink_to(records_bytes(keep));
        self.header_u64(offset::CAPACITY).store(keep, Ordering::Relaxed);
    }

    pub fn count_drop(&self, slots: u64) {
        if self.space.faulted() {
            self.space.count_dropped();
            return;
        }
        let h = self.header_u64(offset::DROPPED_EVENTS);
        h.store(h.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
        let b = self.header_u64(offset::DROPPED_BYTES);
        b.store(b.load(Ordering::Relaxed) + slots * RECORD_SIZE as u64, Ordering::Relaxed);
    }

    pub fn set_header_u64(&self, off: usize, value: u64) {
        self.header_u64(off).store(value, Ordering::Relaxed);
    }

    pub fn add_header_u64(&self, off: usize, n: u64) {
        self.header_u64(off).fetch_add(n, Ordering::Relaxed);
    }

    pub fn set_header_u32(&self, off: usize, value: u32) {
        // SAFETY: a 4-byte aligned field inside the header page.
        unsafe { (*(self.base.add(off) as *const std::sync::atomic::AtomicU32)).store(value, Ordering::Relaxed) };
    }

    pub fn count_suppressed(&self) {
        let h = self.header_u64(offset::SUPPRESSED_EVENTS);
        h.store(h.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
    }

    pub fn dropped_events(&self) -> u64 {
        self.header_u64(offset::DROPPED_EVENTS).load(Ordering::Relaxed)
    }

    pub fn set_name(&self, name: &str) {
        let n = name.len().min(offset::NAME_LEN - 1);
        // SAFETY: the name field lies inside the header.
        unsafe {
            std::ptr::write_bytes(self.base.add(offset::NAME), 0, offset::NAME_LEN);
            std::ptr::copy_nonoverlapping(name.as_ptr(), self.base.add(offset::NAME), n);
        }
    }

    /// Writes a calibration pair record (when there is room) and the closing pair in the header.
    pub fn write_clock_pair(&mut self) {
        let (raw, ns) = clock::pair();
        if self.has_room(1) || self.grow_window(1) {
            self.push(Record::new(raw, 0, clock::cpu(), kinds::CLOCK_PAIR, ns, 0));
        }
        self.header_u64(offset::CALIB1_TSC).store(raw, Ordering::Relaxed);
        self.header_u64(offset::CALIB1_NS).store(ns, Ordering::Relaxed);
    }

    pub fn sync_to_disk(&self) {
        // SAFETY: our own mapping.
        unsafe { libc::msync(self.base as *mut libc::c_void, self.map_len, libc::MS_ASYNC) };
    }

    /// Marks the chunk closed and unmaps it.
    pub fn close(mut self) {
        self.write_clock_pair();
        self.unstage();
        self.release_unused();
        self.cut_after(0);
        // SAFETY: CLOSED lies inside the header.
        unsafe { (self.base.add(offset::CLOSED) as *mut u32).write_volatile(1) };
        self.cursor().detach();
        if let Some(ring) = self.ring.take() {
            ring.retire();
        }
        // SAFETY: our own mapping, not used after this.
        unsafe { libc::munmap(self.base as *mut libc::c_void, self.map_len) };
        self.base = std::ptr::null_mut();
        self.space.close_fd();
        crate::memlimit::give_back(std::mem::take(&mut self.budget));
    }

    pub fn set_budget(&mut self, bytes: u64) {
        self.budget = bytes;
    }

    /// Drops the chunk without touching its file (a fork()ed child's copy of its parent's).
    pub fn forget(self) {
        self.space.close_fd();
        std::mem::forget(self);
    }
}

/// How far ahead of its writer a chunk reserves file space: a thread's (with a staging ring), a names chunk's.
fn ahead_of(staged: bool) -> u64 {
    if staged { space::THREAD_AHEAD } else { space::NAMES_AHEAD }
}

/// Bytes from the start of a chunk file to the end of record position `records`.
fn records_bytes(records: u64) -> u64 {
    (HEADER_SIZE + records as usize * RECORD_SIZE) as u64
}

/// Gives up a chunk file being created: it holds nothing, so it goes (a chunk left there would
/// read as damage), and the process learns why.
fn abandon(fd: i32, path: &CString, errno: i32) {
    // SAFETY: our own descriptor; a valid C string.
    unsafe {
        libc::close(fd);
        libc::unlink(path.as_ptr());
    }
    space::note_process_fault(errno as u32);
}
