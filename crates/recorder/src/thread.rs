//! Per-thread state: the thread's chunk, its share of the trigger budget and a small cache of
//! names it has already seen defined. Created on a thread's first event; closed by a pthread
//! key destructor at thread exit, by the atexit hook for the exiting thread, and forgotten in a
//! fork()ed child (fork.rs; the child starts chunks of its own). It sits on top of the chunks
//! (buffer.rs), the names and the instruments, which know nothing of threads.
//!
//! A thread's start (the preload's THREAD_START) makes no chunk: it goes to the process's thread
//! ledger (names.rs) and is kept here; the thread's first record of its own makes its chunk,
//! which then starts with that THREAD_START, and a thread that records nothing ends in the
//! ledger (docs/recorder.md, "Start-up").

use crate::buffer::{Chunk, Cursor};
use crate::config::OnFull;
use crate::{clock, config, growth, instruments, names, INACTIVE, SLOTS_LEFT, TRIGGERED};
use oslens_format::kinds;
use oslens_format::record::Record;
use std::cell::Cell;
use std::sync::atomic::Ordering::{AcqRel, Acquire, Relaxed, SeqCst};
use std::sync::atomic::{AtomicPtr, AtomicU64};
use std::sync::Once;

/// Trigger budget a thread takes from the shared pool at a time, so threads do not contend on
/// one counter per event.
const QUOTA_BATCH: u64 = 1024;
/// Records the exiting thread's chunk keeps room for after it is cut at exit (64 KiB).
const EXIT_SPARE_RECORDS: u64 = 2048;

pub struct ThreadState {
    pub chunk: Chunk,
    /// The hot path's one test: a record fits below both the populated pages and the trigger
    /// budget. Recomputed on the slow path.
    fast_limit: u64,
    /// Slot position (in the current chunk) where this thread's trigger budget ends; u64::MAX
    /// when there is no trigger.
    budget_end: u64,
    pub seen: [u32; 256],
    /// The attach session this state's chunk records in (session.rs; 0 when traced from start).
    session: u32,
}

thread_local! {
    static CURRENT: Cell<*mut ThreadState> = const { Cell::new(std::ptr::null_mut()) };
    /// The thread's cursor, which code inlined from oslens.h caches a pointer to (per
    /// translation unit and thread). It is allocated on first use and never freed, so those
    /// pointers stay valid through thread-exit destructors and in a fork()ed child; 64 bytes
    /// per thread the process ever ran.
    static WRITER: Cell<*mut Cursor> = const { Cell::new(std::ptr::null_mut()) };
    /// Raw clock ticks this thread spent in the recorder's own pauses (osl_pause_ns).
    static PAUSED: Cell<u64> = const { Cell::new(0) };
    /// Set while the recorder creates this thread's chunk or after the thread closed it, so
    /// instrumented code called from there (or from later destructors) does not recurse.
    static BUSY: Cell<bool> = const { Cell::new(false) };
    /// Set when this thread could get no chunk (a fault: disk full, trace directory gone...):
    /// its events are counted (space::count_no_chunk_drop), and no chunk is tried again.
    static NO_CHUNK: Cell<bool> = const { Cell::new(false) };
    /// Set when this thread's exit was put off to the next round of key destructors.
    static EXIT_DEFERRED: Cell<bool> = const { Cell::new(false) };
    /// This thread's start while it is in the ledger (no chunk of its own yet).
    static PENDING: Cell<Option<Started>> = const { Cell::new(None) };
    /// The process markers (fork, exec, exit) this main thread put in the ledger, having no chunk.
    static MARKERS: Cell<Option<Markers>> = const { Cell::new(None) };
}

/// Process markers a main thread may keep in the ledger: a fork's, an exec's and an exit's, and
/// a failed exec's (a fifth makes its chunk, which then holds them all).
const MARKERS_MAX: usize = 4;

/// A main thread's markers in the ledger, kept until it has a chunk (which then opens at `pair`,
/// read with the first, and holds them) or its image ends (an exec, a kill: they stay there).
#[derive(Clone, Copy)]
struct Markers {
    tid: u32,
    pair: (u64, u64),
    recs: [Record; MARKERS_MAX],
    n: usize,
}

/// A thread's start kept until it has a chunk or ends: its THREAD_START's fields and the
/// calibration pair read with it (the chunk it may get later opens at that pair, so its first
/// record lies inside the chunk's time range however long the thread waited).
#[derive(Clone, Copy)]
struct Started {
    tid: u32,
    cpu: u16,
    pair: (u64, u64),
    creator: u64,
    pthread: u64,
}

/// The exit key's value for a thread that has no state, only a ledger entry: its destructor
/// must still run.
const LEDGER_ONLY: *const libc::c_void = 1 as *const libc::c_void;

static mut EXIT_KEY: libc::pthread_key_t = 0;
static HOOKS: Once = Once::new();

/// A thread's cursor in the process's list of every cursor, so that a new attach session can
/// send every thread's inlined code to the library (`invalidate_cursors`).
#[repr(C)]
struct Listed {
    cursor: Cursor,
    next: *mut Listed,
}

static CURSORS: AtomicPtr<Listed> = AtomicPtr::new(std::ptr::null_mut());

/// What flushes the preload's lock counts (interpose/, which calls into this module, sets it).
static EXIT_FLUSH: AtomicPtr<()> = AtomicPtr::new(std::ptr::null_mut());

/// Sets what a process's exit flushes before its main thread's ledger markers are ended.
pub fn set_exit_flush(flush: fn()) {
    EXIT_FLUSH.store(flush as *mut (), Relaxed);
}

/// The calling thread's cursor (see WRITER).
pub fn writer() -> *mut Cursor {
    WRITER.with(|w| {
        if w.get().is_null() {
            let listed = Box::into_raw(Box::new(Listed { cursor: Cursor::empty(), next: std::ptr::null_mut() }));
            let mut head = CURSORS.load(Acquire);
            loop {
                // SAFETY: ours until published.
                unsafe { (*listed).next = head };
                match CURSORS.compare_exchange_weak(head, listed, AcqRel, Acquire) {
                    Ok(_) => break,
                    Err(now) => head = now,
                }
            }
            w.set(listed as *mut Cursor);
        }
        w.get()
    })
}

/// A new attach session (session.rs): every thread's inlined code asks the library on its next
/// record, which moves the thread's chunk to the new trace. A thread that sets its limit again
/// meanwhile sees the new session and clears it itself (`take_slots_slow`).
pub fn invalidate_cursors() {
    let mut p = CURSORS.load(Acquire);
    while !p.is_null() {
        // SAFETY: listed cursors are never freed; the limit is a u64 the owner also writes.
        unsafe {
            AtomicU64::from_ptr(std::ptr::addr_of_mut!((*p).cursor.inline_limit)).store(0, SeqCst);
            p = (*p).next;
        }
    }
}

/// Counts a pause the recorder caused on this thread (it also records it, where it can).
pub fn add_pause(ticks: u64) {
    PAUSED.with(|p| p.set(p.get() + ticks));
}

/// Nanoseconds this thread spent in the recorder's own pauses so far.
pub fn paused_ns() -> u64 {
    if let Some(t) = current_if_exists() {
        add_pause(t.chunk.take_paused());
    }
    clock::ticks_to_ns(PAUSED.with(|p| p.get()))
}

#[inline(always)]
pub fn current() -> Option<&'static mut ThreadState> {
    let p = CURRENT.with(|c| c.get());
    if !p.is_null() {
        // SAFETY: the state belongs to this thread and lives until its destructor runs.
        let state = unsafe { &mut *p };
        if state.session == crate::session::current() {
            return Some(state);
        }
        return renew();
    }
    create()
}

/// A new attach session began since this thread's chunk was made: the chunk is closed in the
/// previous trace (its closing record) and the thread opens one in the new trace.
#[cold]
fn renew() -> Option<&'static mut ThreadState> {
    if BUSY.with(|b| b.get()) {
        return None;
    }
    let p = CURRENT.with(|c| c.replace(std::ptr::null_mut()));
    // SAFETY: created by Box::into_raw in `create`, and only this thread holds it.
    let state = unsafe { Box::from_raw(p) };
    state.chunk.set_name(&thread_name());
    state.chunk.close();
    NO_CHUNK.with(|n| n.set(false));
    create()
}

pub fn current_if_exists() -> Option<&'static mut ThreadState> {
    let p = CURRENT.with(|c| c.get());
    // SAFETY: as above.
    (!p.is_null()).then(|| unsafe { &mut *p })
}

#[cold]
fn create() -> Option<&'static mut ThreadState> {
    // the helper thread never records (its own records would be noise)
    if BUSY.with(|b| b.replace(true)) || crate::helper::on_helper_thread() {
        return None;
    }
    // the session before the settings: a wake in between makes the next record renew again
    let session = crate::session::current();
    let cfg = config()?;
    if NO_CHUNK.with(|n| n.get()) || crate::space::process_fault() != 0 {
        // After a fault recording stops for threads that have no chunk yet: counted, not tried.
        NO_CHUNK.with(|n| n.set(true));
        crate::space::count_no_chunk_drop();
        BUSY.with(|b| b.set(false));
        return None;
    }
    // SAFETY: no preconditions.
    let (pid, tid) = unsafe { (libc::getpid() as u32, libc::gettid() as u32) };
    let name = thread_name();
    crate::before_first_chunk(cfg);
    // A prepared buffer is written in place: the staging ring exists to supply pages while the
    // program runs, and a prepared one needs none (see Chunk::prepare_all). Otherwise the file
    // starts small and gets its ring (and the process its helper) when extended: growth.rs.
    let first = growth::first_chunk(cfg);
    let Some((capacity, budget)) = thread_buffer(cfg, first.capacity) else {
        // the memory the program's cgroup has left cannot hold another buffer
        NO_CHUNK.with(|n| n.set(true));
        crate::space::note_no_chunk_reason(oslens_format::header::FAULT_MEMORY_BUDGET);
        crate::space::count_no_chunk_drop();
        BUSY.with(|b| b.set(false));
        return None;
    };
    let chunk = Chunk::create_growing(cfg.raw_dir.as_str(), &format!("app-{pid}-{tid}"), 0, capacity, pid, tid, &name, first.staged, first.in_file);
    if chunk.is_none() {
        crate::memlimit::give_back(budget);
    }
    let result = chunk.map(|mut chunk| {
        chunk.set_budget(budget);
        chunk.adopt_cursor(writer());
        chunk.cursor().cpu_id = clock::cpu_id_ptr();
        if cfg.prepare_buffers {
            prepare(&mut chunk);
        }
        let state = Box::into_raw(Box::new(ThreadState { chunk, fast_limit: 0, budget_end: 0, seen: [u32::MAX; 256], session }));
        CURRENT.with(|c| c.set(state));
        // SAFETY: the key was created in install_process_hooks.
        unsafe { libc::pthread_setspecific(EXIT_KEY, state as *const libc::c_void) };
        names::define(kinds::NAME_THREAD, tid, 0, &name);
        // SAFETY: just created, owned by this thread.
        let state = unsafe { &mut *state };
        if let Some(s) = PENDING.take() {
            state.begin_with(s);
        }
        if let Some(m) = MARKERS.take() {
            state.begin_with_markers(m);
        }
        state
    });
    if result.is_none() {
        NO_CHUNK.with(|n| n.set(true));
        crate::space::count_no_chunk_drop();
    }
    BUSY.with(|b| b.set(false));
    result
}

/// Whether the calling thread's record may go to the ledger: it has no chunk (nor is making one,
/// nor failed to), it is not the helper, and it has no ledger entry open.
fn ledger_usable() -> bool {
    current_if_exists().is_none()
        && !BUSY.with(|b| b.get())
        && !NO_CHUNK.with(|n| n.get())
        && !crate::helper::on_helper_thread()
        && PENDING.with(|p| p.get().is_none())
}

/// A thread's start (the preload's THREAD_START: a = creator's tid, b = its pthread_t): into the
/// process's ledger, not a chunk, when the thread has none yet; else recorded as any record.
pub fn started(creator: u64, pthread: u64) {
    if !crate::active() {
        return;
    }
    let ledger = ledger_usable();
    if ledger {
        let pair = clock::pair();
        // SAFETY: no preconditions.
        let tid = unsafe { libc::gettid() } as u32;
        let cpu = clock::cpu();
        BUSY.with(|b| b.set(true));
        let kept = names::ledger_start(tid, pair.0, cpu, creator, pthread);
        BUSY.with(|b| b.set(false));
        if kept {
            PENDING.with(|p| p.set(Some(Started { tid, cpu, pair, creator, pthread })));
            // SAFETY: the key was created in install_process_hooks; its destructor ends the entry.
            unsafe { libc::pthread_setspecific(EXIT_KEY, LEDGER_ONLY) };
            return;
        }
    }
    crate::record_raw(kinds::THREAD_START, 0, creator, pthread);
}

/// A process marker (PROCESS_FORK in a fork()ed child, PROCESS_EXEC, PROCESS_EXIT): into the
/// ledger when the calling thread is its process's main thread and has no chunk, so a child
/// that forks, execs or exits and records nothing else makes no chunk file (docs/recorder.md,
/// "Start-up"); else recorded as any record.
pub fn marker(kind: u8, id: u32, a: u64, b: u64) {
    if !crate::active() {
        return;
    }
    let ledger = ledger_usable();
    // SAFETY: no preconditions.
    let (pid, tid) = unsafe { (libc::getpid() as u32, libc::gettid() as u32) };
    if ledger && pid == tid {
        let mut m = MARKERS.take();
        if m.map_or(true, |m| m.n < MARKERS_MAX) {
            let first = m.is_none();
            let pair = m.map_or_else(clock::pair, |m| m.pair);
            let ts = if first { pair.0 } else { clock::now() };
            let rec = Record::new(ts, id, clock::cpu(), kind, a, b);
            BUSY.with(|b| b.set(true));
            let name = first.then(thread_name);
            let kept = names::ledger_marker(tid, name.as_ref().map(|n| (pair, &**n)), rec);
            BUSY.with(|b| b.set(false));
            if kept {
                let mut got = m.unwrap_or(Markers { tid, pair, recs: [Record::default(); MARKERS_MAX], n: 0 });
                got.recs[got.n] = rec;
                got.n += 1;
                m = Some(got);
            }
            MARKERS.with(|c| c.set(m));
            if kept {
                return;
            }
        } else {
            MARKERS.with(|c| c.set(m));
        }
    }
    crate::record_raw(kind, id, a, b);
}

/// (records, resident bytes taken from the budget) of a new thread's buffer.
fn thread_buffer(cfg: &crate::config::Config, wanted: u64) -> Option<(u64, u64)> {
    let record = oslens_format::record::RECORD_SIZE as u64;
    let whole = cfg.prepare_buffers || cfg.trace_in_memory;
    crate::memlimit::buffer_records(wanted, crate::stage::SLOT_RECORDS, record, whole, cfg.buffer_explicit)
}

/// Prepares the whole buffer and records how long the thread waited for it.
fn prepare(chunk: &mut Chunk) {
    let start = clock::now();
    chunk.prepare_all();
    add_pause(chunk.record_pause(start, kinds::PAUSE_PREPARE, 0));
}

/// A thread's name, on the stack: read at every thread's start and exit, it takes no heap.
struct ThreadName {
    buf: [u8; 64],
    len: usize,
}

impl std::ops::Deref for ThreadName {
    type Target = str;
    fn deref(&self) -> &str {
        let bytes = &self.buf[..self.len];
        match std::str::from_utf8(bytes) {
            Ok(s) => s,
            // SAFETY: the prefix that from_utf8 validated.
            Err(e) => unsafe { std::str::from_utf8_unchecked(&bytes[..e.valid_up_to()]) },
        }
    }
}

fn thread_name() -> ThreadName {
    let mut buf = [0u8; 64];
    // SAFETY: buffer of the stated length.
    unsafe { libc::pthread_getname_np(libc::pthread_self(), buf.as_mut_ptr() as *mut libc::c_char, buf.len()) };
    let len = buf.iter().position(|&c| c == 0).unwrap_or(0);
    ThreadName { buf, len }
}

impl ThreadState {
    /// The first records of a thread whose start was in the ledger: the chunk opens at the
    /// start's calibration pair and holds its THREAD_START, and the ledger entry is voided.
    fn begin_with(&mut self, s: Started) {
        self.chunk.set_header_u64(oslens_format::header::offset::CALIB0_TSC, s.pair.0);
        self.chunk.set_header_u64(oslens_format::header::offset::CALIB0_NS, s.pair.1);
        if self.take_slots(1) {
            self.chunk.push(oslens_format::record::Record::new(s.pair.0, 0, s.cpu, kinds::THREAD_START, s.creator, s.pthread));
        }
        names::ledger_end(s.tid, kinds::THREAD_END_OWN_CHUNK, "");
    }

    /// The first records of a main thread whose fork and exec markers were in the ledger: the
    /// chunk opens at the first marker's calibration pair and holds them, and the ledger's
    /// markers are voided, so readers see the one chunk the thread had before the ledger took them.
    fn begin_with_markers(&mut self, m: Markers) {
        self.chunk.set_header_u64(oslens_format::header::offset::CALIB0_TSC, m.pair.0);
        self.chunk.set_header_u64(oslens_format::header::offset::CALIB0_NS, m.pair.1);
        for rec in &m.recs[..m.n] {
            if self.take_slots(1) {
                self.chunk.push(*rec);
            }
        }
        names::ledger_end(self.chunk.tid, kinds::THREAD_END_OWN_CHUNK, "");
    }

    /// Reserves `n` slots for one event: false when the event must be dropped (buffer full)
    /// or suppressed (trigger reached). Both are counted.
    #[inline(always)]
    pub fn take_slots(&mut self, n: u64) -> bool {
        if self.chunk.pos() + n <= self.fast_limit {
            return true;
        }
        self.take_slots_slow(n)
    }

    #[cold]
    fn take_slots_slow(&mut self, n: u64) -> bool {
        let room = self.chunk.has_room(n) || self.chunk.grow_window(n) || self.make_room(n);
        // a slot this thread had to copy out itself (Chunk::grow_window) is its pause
        add_pause(self.chunk.take_paused());
        if !room {
            self.chunk.count_drop(n);
            return false;
        }
        if self.chunk.pos() + n > self.budget_end && !self.refill_budget(n) {
            self.chunk.count_suppressed();
            return false;
        }
        self.fast_limit = self.chunk.limit().min(self.budget_end);
        let cursor = self.chunk.cursor();
        // Inlined code reads the TSC and rseq's cpu_id itself: without them it asks every time.
        cursor.inline_limit = if clock::inline_capable() && !cursor.cpu_id.is_null() { self.fast_limit } else { 0 };
        cursor.names_epoch = crate::NAMES_EPOCH.load(Relaxed);
        std::sync::atomic::fence(SeqCst);
        if self.session != crate::session::current() {
            // a new session began while the limit was set: its invalidation may have come first
            cursor.inline_limit = 0;
            self.fast_limit = 0;
        }
        true
    }

    #[cold]
    fn refill_budget(&mut self, n: u64) -> bool {
        let pos = self.chunk.pos();
        let mut left = SLOTS_LEFT.load(Relaxed);
        loop {
            if left == u64::MAX {
                self.budget_end = u64::MAX;
                return true;
            }
            let want = QUOTA_BATCH.max(n).min(left);
            if want < n {
                INACTIVE.fetch_or(TRIGGERED, Relaxed);
                return false;
            }
            match SLOTS_LEFT.compare_exchange_weak(left, left - want, Relaxed, Relaxed) {
                Ok(_) => {
                    self.budget_end = self.budget_end.max(pos) + want;
                    return true;
                }
                Err(now) => left = now,
            }
        }
    }

    /// Copies the staging ring out and writes in place from now on (see Chunk::unstage); the
    /// next record takes the slow path.
    pub fn unstage(&mut self) {
        self.chunk.unstage();
        self.fast_limit = 0;
    }

    /// In blocking and rotating (flight) mode, opens the next chunk and records the time it took
    /// as a pause; a rotating chunk's file comes from the spare pool, so that time is short.
    #[cold]
    fn make_room(&mut self, n: u64) -> bool {
        let cfg = match config() {
            // after an allocation failed no new chunk is tried (alloc.rs)
            Some(c) if (matches!(c.on_full, OnFull::Block) || c.rotate) && !self.chunk.faulted() && !crate::alloc::any_failed() => c,
            _ => return false,
        };
        let start = clock::now();
        let stem = format!("app-{}-{}", self.chunk.pid, self.chunk.tid);
        let mut next = match Chunk::create(cfg.raw_dir.as_str(), &stem, self.chunk.seq + 1, cfg.buffer_records.max(n + 1), self.chunk.pid, self.chunk.tid, &thread_name(), !cfg.prepare_buffers) {
            Some(c) => c,
            None => return false,
        };
        if cfg.prepare_buffers {
            next.prepare_all();
        } else {
            crate::helper::start();
        }
        if cfg.rotate {
            forget_far_chunk(cfg.raw_dir.as_str(), &stem, next.seq);
        }
        let mut old = std::mem::replace(&mut self.chunk, next);
        // the trigger budget left carries over to the new chunk's positions
        if self.budget_end != u64::MAX {
            self.budget_end = self.budget_end.saturating_sub(old.pos()) + self.chunk.pos();
        }
        let cpu_id = old.cursor().cpu_id;
        add_pause(old.take_paused());
        old.close();
        self.chunk.adopt_cursor(writer());
        self.chunk.cursor().cpu_id = cpu_id;
        self.fast_limit = 0;
        add_pause(self.chunk.record_pause(start, kinds::PAUSE_NEW_CHUNK, 0));
        true
    }
}

/// Chunks a rotating thread keeps at most, whatever becomes of `oslens record`, whose flight loop
/// deletes all but four (python/oslens/capture/flight.py): twice that.
const ROTATE_KEEP: u32 = 8;

/// In flight mode, deletes this thread's chunk ROTATE_KEEP sequence numbers back when it is
/// still there: `oslens record` is gone (killed) or far behind, and the program must not fill the
/// disk. Usually the file is gone already and this is one failed unlink per rotation.
fn forget_far_chunk(raw_dir: &str, stem: &str, seq: u32) {
    if seq >= ROTATE_KEEP {
        if let Ok(path) = std::ffi::CString::new(format!("{raw_dir}/{stem}-{}.osl", seq - ROTATE_KEEP)) {
            // SAFETY: a valid C string.
            unsafe { libc::unlink(path.as_ptr()) };
        }
    }
}

/// Closes the calling thread's chunk (thread exit) and stops it from opening another.
fn close_current() {
    BUSY.with(|b| b.set(true));
    let p = CURRENT.with(|c| c.replace(std::ptr::null_mut()));
    if !p.is_null() {
        // SAFETY: created by Box::into_raw in `create`, and only this thread holds it.
        let state = unsafe { Box::from_raw(p) };
        state.chunk.set_name(&thread_name());
        state.chunk.close();
    } else if let Some(s) = PENDING.take() {
        // recorded nothing of its own: its end goes to the ledger too
        names::ledger_end(s.tid, kinds::THREAD_END_NOTHING, &thread_name());
    }
}

/// Thread exit, from the key's destructor. glibc runs key destructors in rounds, by key age, and
/// runs another round when a destructor set a value again: the first call sets it again, so the
/// chunk is closed after every other key's destructor of the first round, whichever key is
/// older; what they record (the preload's lock counts, the program's own) is kept.
extern "C" fn on_thread_exit(state: *mut libc::c_void) {
    if !EXIT_DEFERRED.with(|d| d.replace(true)) {
        // SAFETY: the key was created in install_process_hooks; the value is this thread's state.
        if unsafe { libc::pthread_setspecific(EXIT_KEY, state) } == 0 {
            return;
        }
    }
    close_current();
}

extern "C" fn on_process_exit() {
    let markers = MARKERS.with(|m| m.get().is_some());
    if markers {
        // lock counts are records of the thread's own: they make its chunk, which takes the
        // markers, whichever exit handler runs first
        let flush = EXIT_FLUSH.load(Relaxed);
        if !flush.is_null() {
            // SAFETY: set by set_exit_flush to a plain function.
            unsafe { std::mem::transmute::<*mut (), fn()>(flush)() };
        }
    }
    instruments::record_all_counters(kinds::COUNTER_FINAL);
    if markers && current_if_exists().is_none() {
        if let Some(m) = MARKERS.take() {
            // still recorded nothing of its own: its end (name, calibration pair) goes to the
            // ledger too, where readers make it the end of the markers' chunk
            names::ledger_end(m.tid, kinds::THREAD_END_NOTHING, &thread_name());
        }
    }
    if let Some(t) = current_if_exists() {
        t.chunk.set_name(&thread_name());
        t.chunk.write_clock_pair();
        // The exiting thread's chunk is left complete without its ring; what later exit
        // handlers record goes straight to it.
        t.unstage();
        t.chunk.release_unused();
        // room for what exit handlers record after this (counters' final values, names...)
        t.chunk.cut_after(EXIT_SPARE_RECORDS);
        t.chunk.sync_to_disk();
    }
    names::close_for_exit();
}

/// In a fork()ed child (fork.rs): the parent's chunks stay the parent's. The child opens its own
/// on its first event, and inlined code must not write into the parent's (shared) mapping
/// meanwhile.
pub fn forget_after_fork() {
    CURRENT.with(|c| c.set(std::ptr::null_mut()));
    let w = WRITER.with(|w| w.get());
    if !w.is_null() {
        // SAFETY: this thread's cursor; the child has no other thread.
        unsafe { (*w).detach() };
    }
    BUSY.with(|b| b.set(false));
    NO_CHUNK.with(|n| n.set(false));
    // the thread's ledger entry and markers are the parent's
    PENDING.with(|p| p.set(None));
    MARKERS.with(|m| m.set(None));
}

/// The thread-exit key and the process-exit hook, once.
pub fn install_process_hooks() {
    HOOKS.call_once(|| {
        // SAFETY: registering process-wide hooks once; the key outlives every thread.
        unsafe {
            libc::pthread_key_create(std::ptr::addr_of_mut!(EXIT_KEY), Some(on_thread_exit));
            libc::atexit(on_process_exit);
        }
    });
}
