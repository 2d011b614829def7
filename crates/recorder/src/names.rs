//! Names of threads, instruments, regions, events and phases. They are written once per
//! process into its own chunk (`raw/names-<pid>-<seq>.osl`) under a small lock; threads keep a
//! cache of ids they have seen defined so the region hot path stays lock-free.
//!
//! The names chunk is also the process's thread ledger: the start and end of each thread that
//! has no chunk of its own (THREAD_START, and NAME + THREAD_END), so a thread that records
//! nothing costs a few stores here instead of a file (docs/recorder.md, "Start-up").

use crate::buffer::Chunk;
use crate::{clock, config};
use oslens_format::header::offset;
use oslens_format::kinds;
use oslens_format::record::{Record, CONT_PAYLOAD};
use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};

/// Record slots a names chunk may grow to (32 MiB, sparse: the mapping is virtual until
/// written): names, and four slots per thread the ledger holds (about 260,000 threads).
const NAMES_CAPACITY: u64 = 1 << 20;
/// Slots a ledger entry's end takes (NAME, its CONT, THREAD_END), held from the entry's start
/// so that every entry started can be ended.
const LEDGER_END_SLOTS: u64 = 3;
/// Bytes of a thread's name the ledger keeps (one CONT record; the kernel's are 15).
const LEDGER_NAME_MAX: usize = oslens_format::record::CONT_PAYLOAD;
/// Record slots the names file holds at first (8 KiB: most processes name a few threads and
/// instruments); it is extended to NAMES_CAPACITY when needed (Chunk::create_growing).
const NAMES_FIRST: u64 = 1 << 8;

struct Names {
    chunk: Option<Chunk>,
    opened: bool,
    defined: HashSet<(u64, u32)>,
    /// (class, id, manager, name) written into every names chunk the process opens (the
    /// instruments': one made before a fork is named in the child's chunk too).
    kept: Vec<(u64, u32, u32, String)>,
    /// The (class, id) pairs in `kept`: a name given again is kept once (the first name wins, as
    /// in a names chunk), so a program that names its events in a loop keeps one entry each.
    kept_ids: HashSet<(u64, u32)>,
    /// Slots held for the ends of the ledger's open entries (LEDGER_END_SLOTS each).
    ends_held: u64,
}

static LOCK: AtomicBool = AtomicBool::new(false);
/// Set once the process's names exist (`with_names`): a process that never named anything ends
/// without making them (a HashSet's random seed is a `getrandom` in every process image).
static TOUCHED: AtomicBool = AtomicBool::new(false);
/// The thread holding LOCK, so a re-entry (a wrapped libc call made under the lock that
/// records, say) is refused instead of spinning forever.
static OWNER: AtomicU32 = AtomicU32::new(0);
static mut NAMES: Option<Names> = None;

/// A spin lock rather than a Mutex: fork() hooks must be able to take and reset it.
fn lock() -> bool {
    // SAFETY: no preconditions.
    let me = unsafe { libc::gettid() } as u32;
    if OWNER.load(Ordering::Relaxed) == me {
        return false;
    }
    while LOCK.compare_exchange_weak(false, true, Ordering::Acquire, Ordering::Relaxed).is_err() {
        std::thread::yield_now();
    }
    OWNER.store(me, Ordering::Relaxed);
    true
}

fn unlock() {
    OWNER.store(0, Ordering::Relaxed);
    LOCK.store(false, Ordering::Release);
}

/// Runs `f` with the names held; skipped (a name not written) if this thread already holds them.
fn with_names(f: impl FnOnce(&mut Names)) {
    if !lock() {
        return;
    }
    TOUCHED.store(true, Ordering::Relaxed);
    // SAFETY: NAMES is only touched with LOCK held.
    let names = unsafe { (*std::ptr::addr_of_mut!(NAMES)).get_or_insert_with(|| Names { chunk: None, opened: false, defined: HashSet::new(), kept: Vec::new(), kept_ids: HashSet::new(), ends_held: 0 }) };
    f(names);
    unlock();
}

/// FNV-1a, with the top bit set aside for ids handed out in sequence (instruments).
#[inline(always)]
pub fn hash_name(name: &[u8]) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    for &c in name {
        h = (h ^ c as u32).wrapping_mul(0x0100_0193);
    }
    h & 0x7fff_ffff
}

/// Hashes a C string in the same way, without computing its length first.
#[inline(always)]
pub unsafe fn hash_cstr(mut p: *const u8) -> u32 {
    let mut h: u32 = 0x811c_9dc5;
    while *p != 0 {
        h = (h ^ *p as u32).wrapping_mul(0x0100_0193);
        p = p.add(1);
    }
    h & 0x7fff_ffff
}

/// Writes a NAME record once per process (no-op when not tracing).
pub fn define(class: u64, id: u32, manager: u32, name: &str) {
    if config().is_none() {
        return;
    }
    with_names(|names| {
        if !names.opened {
            open_chunk(names);
        }
        if names.defined.insert((class, id)) {
            write_name(names, class, id, manager, name);
        }
    });
}

/// As `define`, and written again into every names chunk the process opens later (a fork()ed
/// child's, an attach's): the names of instruments and events, which outlive a fork and are
/// given once, often while the process is dormant.
pub fn define_kept(class: u64, id: u32, manager: u32, name: &str) {
    with_names(|names| {
        // with no memory for it the name is written once, as `define` does
        if !names.kept_ids.contains(&(class, id)) && names.kept.try_reserve(1).is_ok() && names.kept_ids.try_reserve(1).is_ok() {
            names.kept_ids.insert((class, id));
            names.kept.push((class, id, manager, name.into()));
        }
        if config().is_none() {
            return; // dormant: kept for the names chunk an attach opens (session.rs)
        }
        if !names.opened {
            open_chunk(names);
        }
        if names.defined.insert((class, id)) {
            write_name(names, class, id, manager, name);
        }
    });
}

/// Region names: checks the calling thread's cache of ids it saw defined (`seen`) first, so a
/// known region costs no lock.
#[inline(always)]
pub fn ensure_region_name(seen: &mut [u32; 256], id: u32, name: *const u8) {
    let slot = &mut seen[(id & 255) as usize];
    if *slot == id {
        return;
    }
    *slot = id;
    define_region_slow(id, name);
}

#[cold]
fn define_region_slow(id: u32, name: *const u8) {
    // SAFETY: callers pass the NUL-terminated string the id was hashed from.
    let name = unsafe { std::ffi::CStr::from_ptr(name as *const libc::c_char) }.to_string_lossy();
    define(kinds::NAME_REGION, id, 0, &name);
}

/// Whether the names chunk has room for `slots` more records besides those held for the
/// ledger's open entries (growing it if needed).
fn room(names: &mut Names, slots: u64) -> bool {
    let want = slots + names.ends_held;
    names.chunk.as_mut().is_some_and(|c| c.has_room(want) || c.grow_window(want))
}

fn write_name(names: &mut Names, class: u64, id: u32, manager: u32, name: &str) {
    let bytes = name.as_bytes();
    let slots = 1 + bytes.len().div_ceil(CONT_PAYLOAD) as u64;
    if !room(names, slots) {
        if let Some(chunk) = names.chunk.as_ref() {
            chunk.count_drop(slots);
        }
        return;
    }
    let Some(chunk) = names.chunk.as_mut() else { return };
    let head = Record::new(clock::now(), id, clock::cpu(), kinds::NAME, class | (manager as u64) << 32, bytes.len() as u64);
    chunk.push_with_payload(head, bytes);
}

/// Opens a ledger entry for thread `tid`, which has no chunk of its own: its THREAD_START (taken
/// at `ts` on `cpu`; a = creator's tid, b = pthread_t), with room held for the entry's end.
/// False when the names chunk cannot take it (no chunk, full, a fault): the thread then
/// records its start in a chunk of its own.
pub fn ledger_start(tid: u32, ts: u64, cpu: u16, creator: u64, pthread: u64) -> bool {
    if config().is_none() {
        return false;
    }
    let mut done = false;
    with_names(|names| {
        if !names.opened {
            open_chunk(names);
        }
        if !room(names, 1 + LEDGER_END_SLOTS) {
            return;
        }
        names.ends_held += LEDGER_END_SLOTS;
        if let Some(chunk) = names.chunk.as_mut() {
            chunk.push(Record::new(ts, tid, cpu, kinds::THREAD_START, creator, pthread));
            done = true;
        }
    });
    done
}

/// Ends thread `tid`'s ledger entry: `how` is THREAD_END_NOTHING (the thread ends; `name` is its
/// name then) or THREAD_END_OWN_CHUNK (it has a chunk now, which holds its start). A
/// calibration pair is read for the end record.
pub fn ledger_end(tid: u32, how: u64, name: &str) {
    let (raw, ns) = clock::pair();
    with_names(|names| {
        names.ends_held = names.ends_held.saturating_sub(LEDGER_END_SLOTS);
        let mut cut = name.len().min(LEDGER_NAME_MAX);
        while !name.is_char_boundary(cut) {
            cut -= 1;
        }
        let name = &name[..cut];
        let with_name = how == kinds::THREAD_END_NOTHING;
        let slots = 1 + if with_name { 1 + name.len().div_ceil(CONT_PAYLOAD) as u64 } else { 0 };
        if !room(names, slots) {
            return;
        }
        let Some(chunk) = names.chunk.as_mut() else { return };
        if with_name {
            let head = Record::new(raw, tid, clock::cpu(), kinds::NAME, kinds::NAME_THREAD, name.len() as u64);
            chunk.push_with_payload(head, name.as_bytes());
        }
        chunk.push(Record::new(raw, tid, clock::cpu(), kinds::THREAD_END, ns, how));
    });
}

/// Puts a process marker (PROCESS_FORK in a fork()ed child, PROCESS_EXEC) of the process's
/// main thread `tid` (= pid: the reader knows the thread by it), which has no chunk, into the
/// ledger. The first (`open` = the calibration pair read with it and the thread's name) also
/// names the thread and writes that pair (CLOCK_PAIR, id = tid, a = ns), where the chunk the
/// reader makes of the markers opens, with room held for the entry's void (THREAD_END, b =
/// THREAD_END_OWN_CHUNK, written by `ledger_end` when the thread gets a chunk after all).
/// False when the names chunk cannot take it: the marker then goes to a chunk of the thread's own.
pub fn ledger_marker(tid: u32, open: Option<((u64, u64), &str)>, rec: Record) -> bool {
    if config().is_none() {
        return false;
    }
    let mut done = false;
    with_names(|names| {
        if !names.opened {
            open_chunk(names);
        }
        let name_slots = open.map_or(0, |(_, n)| 2 + n.len().div_ceil(CONT_PAYLOAD) as u64);
        if !room(names, 1 + name_slots + if open.is_some() { LEDGER_END_SLOTS } else { 0 }) {
            return;
        }
        if let Some((pair, name)) = open {
            if names.defined.insert((kinds::NAME_THREAD, tid)) {
                write_name(names, kinds::NAME_THREAD, tid, 0, name);
            }
            names.ends_held += LEDGER_END_SLOTS;
            if let Some(chunk) = names.chunk.as_mut() {
                chunk.push(Record::new(pair.0, tid, rec.cpu, kinds::CLOCK_PAIR, pair.1, 0));
            }
        }
        if let Some(chunk) = names.chunk.as_mut() {
            chunk.push(rec);
            done = true;
        }
    });
    done
}

/// A process's names chunk repeats the kept names (instruments created before a fork, say), so
/// every process's names are complete in its own chunk.
fn open_chunk(names: &mut Names) {
    names.opened = true;
    let Some(cfg) = config() else { return };
    // SAFETY: no preconditions.
    let pid = unsafe { libc::getpid() } as u32;
    crate::before_first_chunk(cfg);
    names.chunk = Chunk::create_growing(cfg.raw_dir.as_str(), &format!("names-{pid}"), 0, NAMES_CAPACITY, pid, 0, "names", false, NAMES_FIRST);
    let kept = std::mem::take(&mut names.kept);
    for (class, id, manager, name) in &kept {
        names.defined.insert((*class, *id));
        write_name(names, *class, *id, *manager, name);
    }
    names.kept = kept;
}

pub fn close_for_exit() {
    if !TOUCHED.load(Ordering::Relaxed) && crate::space::no_chunk_drops().2 == 0 {
        return; // named nothing, and no thread lost a record: no names chunk to close or make
    }
    let helper = crate::helper::helper_cost();
    with_names(|names| {
        if names.chunk.is_none() && crate::space::no_chunk_drops().2 > 0 {
            // The chunk could not be made when names came (out of memory, say): the count of
            // what threads could not record has nowhere else to go, so it is tried once more.
            open_chunk(names);
        }
        if let Some(c) = names.chunk.as_mut() {
            if let Some((cpu_ns, copies)) = helper {
                c.set_header_u64(offset::HELPER_CPU_NS, cpu_ns);
                c.set_header_u64(offset::HELPER_COPIES, copies);
            }
            // Events of threads that could get no chunk (space.rs) are counted here.
            let (errno, ns, dropped) = crate::space::no_chunk_drops();
            if dropped > 0 {
                c.add_header_u64(offset::FAULT_DROPPED, dropped);
                c.set_header_u64(offset::FAULT_NS, ns);
                c.set_header_u32(offset::FAULT_ERRNO, errno);
            }
            c.write_clock_pair();
            // a few names may still come from later exit handlers
            c.cut_after(256);
            c.sync_to_disk();
        }
    });
}

/// A new attach session (session.rs): the names chunk of the previous trace is closed, and the
/// next name opens one in the new trace, with the kept names.
pub fn new_session() {
    with_names(|names| {
        if let Some(c) = names.chunk.take() {
            c.close();
        }
        names.opened = false;
        names.defined.clear();
        names.ends_held = 0;
    });
}

/// Before fork() (fork.rs): the lock is held across it.
pub fn lock_for_fork() {
    // False only when fork() is called under the lock by this very thread: it holds it anyway.
    let _ = lock();
}

pub fn unlock_after_fork() {
    unlock();
}

pub fn forget_after_fork() {
    OWNER.store(0, Ordering::Relaxed);
    // SAFETY: the child is single-threaded here and LOCK is held (taken before the fork).
    unsafe {
        if let Some(names) = (*std::ptr::addr_of_mut!(NAMES)).as_mut() {
            // The parent's mapping stays mapped but is never written by the child.
            if let Some(c) = names.chunk.take() {
                c.forget();
            }
            names.opened = false;
            names.defined.clear();
            names.ends_held = 0;
        }
    }
    unlock();
}

/// Writes a name again even if the id was named before (a renamed thread).
pub fn define_again(class: u64, id: u32, name: &str) {
    if config().is_none() {
        return;
    }
    with_names(|names| {
        if !names.opened {
            open_chunk(names);
        }
        names.defined.insert((class, id));
        write_name(names, class, id, 0, name);
    });
}
