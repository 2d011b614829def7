//! Uncontended lock acquisitions, counted per thread and object instead of recorded one by one
//! (the default `--sync contended`; docs/auto-instrumentation.md, lock recording).
//!
//! Each thread owns a table of (object, count, flushed) slots that only it increments. A flush
//! writes, for every slot whose count moved, one COUNTER record (id = the counter named after
//! the object's address "0x…", a = acquisitions since the slot's previous flush, b =
//! COUNTER_LOCK) into the flushing thread's chunk. `flushed` only moves by compare-and-swap, so
//! the owner and a process-exit flush racing on one slot never count an acquisition twice.
//!
//! Flushes happen every FLUSH_EVERY uncontended acquisitions of a thread, before it blocks in a
//! wrapped wait (contended lock, condition, barrier, semaphore, join), at its exit, and for every
//! thread of the process at exit() / exec (the tables are in a process-wide list). A SIGKILL
//! therefore loses, per thread, only the acquisitions since its last flush: fewer than
//! FLUSH_EVERY, and none for a thread blocked in a wrapped wait.

use super::rec;
use oslens_format::kinds;
use std::cell::Cell;
use std::sync::atomic::{AtomicBool, AtomicPtr, AtomicU32, AtomicU64, Ordering::*};

/// Uncontended acquisitions between two flushes of a thread's counts (the most a SIGKILL can
/// lose per running thread).
pub const FLUSH_EVERY: u32 = 4096;
/// Objects a thread counts in its table at once; when a new one finds no slot the table is
/// written and emptied (`restart`).
const SLOTS: usize = 256;
/// Contended holds a thread tracks at once, so their releases are recorded (hold times).
const HELD: usize = 16;

struct Slot {
    addr: AtomicU64,
    count: AtomicU64,
    flushed: AtomicU64,
    id: AtomicU32,
}

pub struct Table {
    /// tid of the owning thread, 0 = free for the next thread
    owner: AtomicU32,
    /// held by whoever flushes or resets the table (never by the owner's counting path)
    busy: AtomicBool,
    next: AtomicPtr<Table>,
    slots: [Slot; SLOTS],
    /// slot indices in use, in order of first use (only the owner appends)
    order: [AtomicU32; SLOTS],
    used: AtomicU32,
}

/// Every table the process made (leaked; reused by later threads).
static TABLES: AtomicPtr<Table> = AtomicPtr::new(std::ptr::null_mut());

/// The calling thread's table and its private state. It has no destructor: a Rust
/// thread-local with one is registered with glibc (`__cxa_thread_atexit_impl`) on its first use,
/// which allocates and aborts the process when it cannot, and a thread may start after the memory
/// ran out. The thread's teardown is a pthread key's destructor instead (`arm_thread_exit`).
struct Mine {
    table: Cell<*const Table>,
    since_flush: Cell<u32>,
    dirty: Cell<bool>,
    held: Cell<[u64; HELD]>,
    n_held: Cell<usize>,
}

thread_local! {
    static MINE: Mine = const { Mine { table: Cell::new(std::ptr::null()), since_flush: Cell::new(0), dirty: Cell::new(false), held: Cell::new([0; HELD]), n_held: Cell::new(0) } };
}

/// The key whose destructor flushes and frees an exiting thread's table (valid once HAVE_KEY).
static mut EXIT_KEY: libc::pthread_key_t = 0;
static HAVE_KEY: AtomicBool = AtomicBool::new(false);

/// Creates the thread-exit key, once, at library load. glibc keeps the values of a process's
/// first 32 keys inside the thread itself, so setting one at a thread's first lock allocates
/// nothing; without a key (the process used them all up) exiting threads' counts are still
/// flushed at process exit (`flush_all`), and their tables are not reused.
pub fn create_exit_key() {
    // SAFETY: called once, from the library's constructor, before any thread of ours runs.
    unsafe {
        if libc::pthread_key_create(std::ptr::addr_of_mut!(EXIT_KEY), Some(on_thread_exit)) == 0 {
            HAVE_KEY.store(true, Release);
        }
    }
}

/// Makes the calling thread's table be flushed and freed at its exit.
fn arm_thread_exit(t: &'static Table) {
    if HAVE_KEY.load(Acquire) {
        // SAFETY: the key was created at load; the value is a leaked table.
        unsafe { libc::pthread_setspecific(EXIT_KEY, t as *const Table as *const libc::c_void) };
    }
}

/// Thread exit. The recorder closes a thread's chunk only in a later round of key destructors
/// than the first (thread.rs, on_thread_exit), so this flush finds it open whichever key is older.
extern "C" fn on_thread_exit(table: *mut libc::c_void) {
    // SAFETY: the value set by arm_thread_exit: a leaked table, never freed.
    let t = unsafe { &*(table as *const Table) };
    flush_table(t, false);
    let _ = MINE.try_with(|m| {
        if std::ptr::eq(m.table.get(), t) {
            m.table.set(std::ptr::null());
            m.dirty.set(false);
        }
    });
    t.owner.store(0, Release);
}

fn tid() -> u32 {
    // SAFETY: no preconditions.
    unsafe { libc::gettid() as u32 }
}

/// A new table, or None when memory is exhausted: the thread's acquisitions are then written
/// one COUNTER record each, which the recorder keeps or counts lost (docs/recorder.md, "Faults").
fn new_table(owner: u32) -> Option<&'static Table> {
    // every field is an atomic whose zero is its empty state
    // SAFETY: a non-zero-sized layout; the zeroed memory is a valid Table.
    // the program's memory, not the recorder's reserve (mod.rs, system_alloc)
    let p = unsafe { std::alloc::GlobalAlloc::alloc_zeroed(&std::alloc::System, std::alloc::Layout::new::<Table>()) } as *mut Table;
    if p.is_null() {
        return None;
    }
    // SAFETY: just allocated, leaked for the process's life.
    let t: &'static Table = unsafe { &*p };
    t.owner.store(owner, Relaxed);
    let mut head = TABLES.load(Acquire);
    loop {
        t.next.store(head, Relaxed);
        match TABLES.compare_exchange_weak(head, p, AcqRel, Acquire) {
            Ok(_) => return Some(t),
            Err(h) => head = h,
        }
    }
}

fn lock(t: &Table) {
    while t.busy.compare_exchange_weak(false, true, Acquire, Relaxed).is_err() {
        std::hint::spin_loop();
    }
}

/// A free table (its slots emptied) or a new one, owned by the calling thread.
fn take_table() -> Option<&'static Table> {
    let me = tid();
    let mut p = TABLES.load(Acquire);
    while !p.is_null() {
        // SAFETY: tables are leaked, never freed.
        let t: &'static Table = unsafe { &*p };
        if t.owner.compare_exchange(0, me, AcqRel, Relaxed).is_ok() {
            lock(t);
            for i in 0..t.used.load(Relaxed) as usize {
                let s = &t.slots[t.order[i].load(Relaxed) as usize];
                s.addr.store(0, Relaxed);
                s.count.store(0, Relaxed);
                s.flushed.store(0, Relaxed);
            }
            t.used.store(0, Relaxed);
            t.busy.store(false, Release);
            return Some(t);
        }
        p = t.next.load(Acquire);
    }
    new_table(me)
}

/// The counter named after the object's address, "0x…" (formatted on the stack: this runs
/// when memory may be exhausted).
fn counter_id(addr: u64) -> u32 {
    let mut name = [0u8; 20];
    name[..2].copy_from_slice(b"0x");
    let digits = (16 - addr.leading_zeros() as usize / 4).max(1);
    for i in 0..digits {
        name[2 + i] = b"0123456789abcdef"[(addr >> (4 * (digits - 1 - i)) & 0xf) as usize];
    }
    super::define_name(kinds::NAME_COUNTER, name.as_ptr() as *const std::ffi::c_char)
}

/// Writes one slot's count since its last flush; false if nothing moved.
fn flush_slot(s: &Slot) -> bool {
    let c = s.count.load(Acquire);
    let f = s.flushed.load(Acquire);
    if c <= f || s.flushed.compare_exchange(f, c, AcqRel, Relaxed).is_err() {
        return false;
    }
    let mut id = s.id.load(Relaxed);
    if id == 0 {
        id = counter_id(s.addr.load(Acquire));
        s.id.store(id, Relaxed);
    }
    rec(kinds::COUNTER, id, c - f, kinds::COUNTER_LOCK);
    true
}

fn flush_table(t: &Table, wait_for_busy: bool) {
    if wait_for_busy {
        lock(t);
    } else if t.busy.compare_exchange(false, true, Acquire, Relaxed).is_err() {
        return;
    }
    let n = t.used.load(Acquire) as usize;
    for i in 0..n {
        flush_slot(&t.slots[t.order[i].load(Relaxed) as usize]);
    }
    t.busy.store(false, Release);
}

#[inline(always)]
fn hash(addr: u64) -> usize {
    ((addr >> 3).wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 56) as usize % SLOTS
}

/// Counts one uncontended acquisition of `addr` by the calling thread.
#[inline(always)]
pub fn count(addr: u64) {
    let done = MINE.try_with(|m| {
        let mut t = m.table.get();
        if t.is_null() {
            match take_table() {
                Some(new) => {
                    arm_thread_exit(new);
                    t = new;
                }
                None => return false,
            }
            m.table.set(t);
        }
        // SAFETY: leaked table owned by this thread.
        let t = unsafe { &*t };
        let h = hash(addr);
        let mut found = false;
        for k in 0..8 {
            let i = (h + k) % SLOTS;
            let s = &t.slots[i];
            let a = s.addr.load(Relaxed);
            if a == addr {
                // only the owner writes count: a load and a store, no locked instruction
                s.count.store(s.count.load(Relaxed) + 1, Release);
                found = true;
                break;
            }
            if a == 0 {
                s.id.store(0, Relaxed);
                s.addr.store(addr, Release);
                s.count.store(1, Release);
                let u = t.used.load(Relaxed);
                t.order[u as usize].store(i as u32, Relaxed);
                t.used.store(u + 1, Release);
                found = true;
                break;
            }
        }
        if !found {
            // crowded (a thread that takes many locks, each a few times: Node's main thread
            // counted 656): its counts are written and the table starts again empty, so each
            // object costs one record per refill instead of one per acquisition
            restart(t, addr);
        }
        m.dirty.set(true);
        let n = m.since_flush.get() + 1;
        if n >= FLUSH_EVERY {
            m.since_flush.set(0);
            m.dirty.set(false);
            flush_table(t, true);
        } else {
            m.since_flush.set(n);
        }
        true
    });
    if done != Ok(true) {
        // no table (memory exhausted), or the thread's state already gone (late in its exit): one record
        rec(kinds::COUNTER, counter_id(addr), 1, kinds::COUNTER_LOCK);
    }
}

/// Writes every count of the calling thread's own `t`, empties it and counts `addr` in it once.
#[cold]
fn restart(t: &Table, addr: u64) {
    lock(t);
    for i in 0..t.used.load(Relaxed) as usize {
        let s = &t.slots[t.order[i].load(Relaxed) as usize];
        flush_slot(s);
        s.addr.store(0, Relaxed);
        s.count.store(0, Relaxed);
        s.flushed.store(0, Relaxed);
    }
    let i = hash(addr);
    let s = &t.slots[i];
    s.id.store(0, Relaxed);
    s.addr.store(addr, Release);
    s.count.store(1, Release);
    t.order[0].store(i as u32, Relaxed);
    t.used.store(1, Release);
    t.busy.store(false, Release);
}

/// Flushes the calling thread's counts before it may block for long (so a kill while it waits
/// loses none of them).
#[inline(always)]
pub fn before_blocking() {
    let _ = MINE.try_with(|m| {
        if m.dirty.replace(false) {
            m.since_flush.set(0);
            // SAFETY: dirty implies the table was taken; tables are never freed.
            flush_table(unsafe { &*m.table.get() }, true);
        }
    });
}

/// Flushes every thread's counts into the calling thread's chunk (exit, exec).
pub fn flush_all() {
    let mut p = TABLES.load(Acquire);
    while !p.is_null() {
        // SAFETY: tables are leaked, never freed.
        let t = unsafe { &*p };
        if t.owner.load(Acquire) != 0 {
            flush_table(t, true);
        }
        p = t.next.load(Acquire);
    }
    let _ = MINE.try_with(|m| {
        m.dirty.set(false);
        m.since_flush.set(0);
    });
}

/// In a fork()ed child: the parent's counts are the parent's (it flushes them); the child's
/// threads are gone except the caller, which starts from its counts as they are.
pub fn after_fork_child() {
    let me = MINE.try_with(|m| m.table.get()).unwrap_or(std::ptr::null());
    let mut p = TABLES.load(Acquire);
    while !p.is_null() {
        // SAFETY: tables are leaked, never freed.
        let t = unsafe { &*p };
        // a lock held across fork by a thread that no longer exists here is free to reset
        t.busy.store(false, Release);
        for i in 0..t.used.load(Relaxed) as usize {
            let s = &t.slots[t.order[i].load(Relaxed) as usize];
            s.flushed.store(s.count.load(Relaxed), Relaxed);
            // the child writes its own names file: names are defined again there
            s.id.store(0, Relaxed);
        }
        if !std::ptr::eq(p, me) {
            t.owner.store(0, Release);
        } else {
            t.owner.store(tid(), Release);
        }
        p = t.next.load(Acquire);
    }
    let _ = MINE.try_with(|m| {
        m.dirty.set(false);
        m.since_flush.set(0);
        m.n_held.set(0);
    });
}

/// Notes that the calling thread's current hold of `addr` was recorded (a contended
/// acquisition), so its release is recorded too.
pub fn hold_recorded(addr: u64) {
    let _ = MINE.try_with(|m| {
        let n = m.n_held.get();
        if n < HELD {
            let mut h = m.held.get();
            h[n] = addr;
            m.held.set(h);
            m.n_held.set(n + 1);
        }
    });
}

/// Whether the calling thread's hold of `addr` being released was recorded (and forgets it).
#[inline(always)]
pub fn release_recorded(addr: u64) -> bool {
    MINE.try_with(|m| {
        let n = m.n_held.get();
        if n == 0 {
            return false;
        }
        let mut h = m.held.get();
        // the most recent hold first: locks are mostly released in reverse order
        for i in (0..n).rev() {
            if h[i] == addr {
                h.copy_within(i + 1..n, i);
                m.held.set(h);
                m.n_held.set(n - 1);
                return true;
            }
        }
        false
    })
    .unwrap_or(false)
}
